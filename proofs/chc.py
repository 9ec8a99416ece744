"""Unbounded reachability with Z3's Spacer engine (constrained Horn clauses), for any
:class:`~chunkproof.spec.interface.SymbolicModel`:

    Reach(s, p)   <-  constraint(p), init(s)
    Reach(s', p)  <-  Reach(s, p), guard(s, a), follows(s, a), s' = next(s, a)
    query:            Reach(s, p), guard(s, a), violation_pid(s, a), extra

with state vector s, action a and parameters p. unsat: no reachable state violates the
property, and Spacer's cover of Reach is an inductive invariant (returned as a function of the
state vector, for :mod:`chunkproof.proofs.certificate`); sat: some reachable state does;
unknown: every try (:data:`SEEDS`) gave up or ran out.

Each try is cut by Z3's deterministic resource limit, not by the clock: a verdict then depends
on the machine's load only through the overall timeout, and not at all under a resource limit
of the whole query (``rlimit``, what ``--rlimit`` sets): it bounds every try, the last one's
too, and the timeout is then a guard only. (Cut by time, a seed that proves a
query in 1.7 s of its 2 s slice on a quiet machine overran it on a loaded one, and the seeds
after it did not prove the query within 60 s: the same run said PROVED or BOUNDED by load.)
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
    seeds: tuple[int, ...]
    """The seeds tried, in order; the last one gave the status."""

    def attempts(self) -> str:
        """The seeds tried, for a verdict's detail."""
        plural = "s" if len(self.seeds) > 1 else ""
        return f"Spacer (seed{plural} {', '.join(map(str, self.seeds))})"


SEEDS = ((0, 25_000_000), (1, 50_000_000), (2, 100_000_000), (3, 0))
"""(Spacer random seed, Z3 resource units; 0 = no limit but the timeout): Spacer's run time on
the same query varies by orders of magnitude with the seed, so short tries come first. Spacer
spends about 20-30 million units a second on this project's queries (measured on 2-core x86),
so the slices are about 1 s, 2 s and 4 s on such a machine, whatever its load."""


def reachable_violation(
    model: SymbolicModel,
    pid: str,
    extra: Any = True,
    timeout_ms: int = 10_000,
    rlimit: int | None = None,
) -> ChcResult:
    """Is a state violating ``pid`` reachable (under the additional constraint ``extra``)?
    Each try of :data:`SEEDS` within ``timeout_ms`` and at most ``rlimit`` units."""
    started = time.monotonic()
    deadline = started + timeout_ms / 1000
    tried: list[int] = []
    for seed, units in SEEDS:
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0:
            break
        tried.append(seed)
        status, invariant = _attempt(model, pid, extra, seed, _units(units, rlimit), left)
        if status != "unknown":
            return ChcResult(status, invariant, time.monotonic() - started, tuple(tried))
    return ChcResult("unknown", None, time.monotonic() - started, tuple(tried))


def _units(units: int, rlimit: int | None) -> int:
    """A try's resource units (0: no limit) under the query's ``rlimit``: at most it, and the
    whole of it for the try :data:`SEEDS` leaves unlimited."""
    if rlimit is None:
        return units
    return min(units, rlimit) if units else rlimit


def _attempt(
    model: SymbolicModel, pid: str, extra: Any, seed: int, units: int, timeout_ms: int
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
    fp.set(engine="spacer", timeout=timeout_ms, rlimit=units)
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
    except z3.Z3Exception:  # Spacer reports its timeout or resource limit as "canceled"
        return "unknown", None
    if answer == z3.unsat:
        cover = fp.get_cover_delta(-1, reach).translate(z3.main_ctx())
        return "unsat", lambda s: z3.substitute_vars(cover, *s, *model.parameters)
    return str(answer), None
