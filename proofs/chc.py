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
    params = model.parameters
    state, following, action = model.state("s"), model.state("s_next"), model.action("a")
    sorts = [v.sort() for v in state] + [p.sort() for p in params]
    reach = z3.Function("Reach", *sorts, z3.BoolSort())
    fp = z3.Fixedpoint()
    fp.set(engine="spacer", timeout=timeout_ms)
    fp.set("spacer.random_seed", seed)
    fp.register_relation(reach)
    fp.declare_var(*state, *following, *action, *params)
    nxt = model.next(state, action)
    moves = [model.guard(state, action), model.follows(state, action)]
    fp.rule(reach(*state, *params), [model.constraint, model.init(state), extra])
    fp.rule(
        reach(*following, *params),
        [reach(*state, *params), *moves, *[f == n for f, n in zip(following, nxt, strict=True)]],
    )
    query = z3.And(
        reach(*state, *params), model.guard(state, action), model.violation(pid, state, action)
    )
    try:
        answer = fp.query(query)
    except z3.Z3Exception:  # Spacer reports its timeout as "canceled"
        return "unknown", None
    if answer == z3.unsat:
        cover = fp.get_cover_delta(-1, reach)
        return "unsat", lambda s: z3.substitute_vars(cover, *s, *params)
    return str(answer), None
