"""Unbounded reachability with Z3's Spacer engine (constrained Horn clauses), for any
:class:`~chunkproof.spec.interface.SymbolicModel`:

    Reach(s, p)   <-  constraint(p), init(s)
    Reach(s', p)  <-  Reach(s, p), guard(s, a), follows(s, a), s' = next(s, a)
    query:            Reach(s, p), guard(s, a), violation_pid(s, a), extra

with state vector s, action a and parameters p. unsat: no reachable state violates the
property, and Spacer's cover of Reach is an inductive invariant (returned as a function of the
state vector, for :mod:`chunkproof.proofs.certificate`); sat: some reachable state does;
unknown: every try (:data:`SEEDS`) gave up or timed out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import z3

from chunkproof.spec.interface import SymbolicModel

Invariant = Callable[[list[Any]], Any]
"""An invariant as a function of a state vector."""


@dataclass(frozen=True)
class ChcResult:
    status: str  # "sat" | "unsat" | "unknown"
    invariant: Invariant | None
    seconds: float


SEEDS = ((0, 1_000), (1, 2_000), (2, 4_000), (3, 0))
"""(Spacer random seed, milliseconds; 0 = the rest of the timeout): Spacer's run time on the
same query varies by orders of magnitude with the seed, so short tries come first."""


def reachable_violation(
    model: SymbolicModel, pid: str, extra: Any = True, timeout_ms: int = 10_000
) -> ChcResult:
    """Is a state violating ``pid`` reachable (under the additional constraint ``extra``)?"""
    started = time.monotonic()
    deadline = started + timeout_ms / 1000
    for seed, budget in SEEDS:
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0:
            break
        status, invariant = _attempt(model, pid, extra, seed, min(budget, left) or left)
        if status != "unknown":
            return ChcResult(status, invariant, time.monotonic() - started)
    return ChcResult("unknown", None, time.monotonic() - started)


def _attempt(
    model: SymbolicModel, pid: str, extra: Any, seed: int, timeout_ms: int
) -> tuple[str, Invariant | None]:
    """One Spacer run, on a copy of the query in a fresh Z3 context: Spacer's path (and so its
    run time and its invariant) depends on the order of the context's terms, so a query built
    in the main context answers differently after whatever the process solved before."""
    ctx = z3.Context()

    def fresh(term: Any) -> Any:
        return term.translate(ctx) if z3.is_expr(term) else z3.BoolVal(term, ctx)

    params = [fresh(p) for p in model.parameters]
    main_state, main_action = model.state("s"), model.action("a")
    state, action = [fresh(v) for v in main_state], [fresh(v) for v in main_action]
    following = [fresh(v) for v in model.state("s_next")]
    reach = z3.Function("Reach", *[v.sort() for v in state + params], z3.BoolSort(ctx))
    fp = z3.Fixedpoint(ctx=ctx)
    fp.set(engine="spacer", timeout=timeout_ms)
    fp.set("spacer.random_seed", seed)
    fp.register_relation(reach)
    fp.declare_var(*state, *following, *action, *params)
    nxt = [fresh(n) for n in model.next(main_state, main_action)]
    guard = fresh(model.guard(main_state, main_action))
    moves = [guard, fresh(model.follows(main_state, main_action))]
    initial = [fresh(model.constraint), fresh(model.init(main_state)), fresh(extra)]
    fp.rule(reach(*state, *params), initial)
    fp.rule(
        reach(*following, *params),
        [reach(*state, *params), *moves, *[f == n for f, n in zip(following, nxt, strict=True)]],
    )
    violation = fresh(model.violation(pid, main_state, main_action))
    query = z3.And(reach(*state, *params), guard, violation)
    try:
        answer = fp.query(query)
    except z3.Z3Exception:  # Spacer reports its timeout as "canceled"
        return "unknown", None
    if answer == z3.unsat:
        cover = fp.get_cover_delta(-1, reach).translate(z3.main_ctx())
        return "unsat", lambda s: z3.substitute_vars(cover, *s, *model.parameters)
    return str(answer), None
