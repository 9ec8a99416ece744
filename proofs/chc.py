"""Unbounded reachability with Z3's Spacer engine (constrained Horn clauses).

    Reach(c0, T, M, theta)  <-  params                                  (c0 = 0)
    Reach(c', T, M, theta)  <-  Reach(c, T, M, theta), c < E, 1 <= b <= M, c' = c + chunk(c, b)
    query: Reach(c, ...), c < E, 1 <= b <= M, violation_p(c, b), extra

unsat: no reachable state violates p, and Spacer's cover of Reach is an inductive invariant
(returned as a function of the state, for :mod:`chunkproof.proofs.certificate`); sat: some
reachable state does; unknown: every try (:data:`SEEDS`) gave up or timed out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import z3

from chunkproof.proofs.system import TransitionSystem


@dataclass(frozen=True)
class ChcResult:
    status: str  # "sat" | "unsat" | "unknown"
    invariant: Callable[[Any], Any] | None
    seconds: float


SEEDS = ((0, 1_000), (1, 2_000), (2, 4_000), (3, 0))
"""(Spacer random seed, milliseconds; 0 = the rest of the timeout): Spacer's run time on the
same query varies by orders of magnitude with the seed, so short tries come first."""


def reachable_violation(
    ts: TransitionSystem, pid: str, window: str, extra: Any = True, timeout_ms: int = 10_000
) -> ChcResult:
    """Is a state violating ``pid`` reachable (under the additional constraint ``extra``)?"""
    started = time.monotonic()
    deadline = started + timeout_ms / 1000
    for seed, budget in SEEDS:
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0:
            break
        status, invariant = _attempt(ts, pid, window, extra, seed, min(budget, left) or left)
        if status != "unknown":
            return ChcResult(status, invariant, time.monotonic() - started)
    return ChcResult("unknown", None, time.monotonic() - started)


def _attempt(
    ts: TransitionSystem, pid: str, window: str, extra: Any, seed: int, timeout_ms: int
) -> tuple[str, Callable[[Any], Any] | None]:
    params = ts.parameters
    sort = [z3.IntSort()] * (1 + len(params))
    reach = z3.Function("Reach", *sort, z3.BoolSort())
    c, c2, b = z3.Ints("c c_next b")
    fp = z3.Fixedpoint()
    fp.set(engine="spacer", timeout=timeout_ms)
    fp.set("spacer.random_seed", seed)
    fp.register_relation(reach)
    fp.declare_var(c, c2, b, *params)
    step = [ts.in_prefill(c), ts.budget_ok(b), c2 == c + ts.chunk(c, b)]
    bad = ts.violation(pid, c, b, window)
    # The path conditions of asserts in the policy source mention the step's c and b: they
    # belong to the step rule and the query, and are complete only once both are translated.
    asserted = list(ts.assumptions)
    fp.rule(reach(0, *params), [ts.params, extra])
    fp.rule(reach(c2, *params), [reach(c, *params), *step, *asserted])
    try:
        answer = fp.query(
            z3.And(reach(c, *params), ts.in_prefill(c), ts.budget_ok(b), bad, *asserted)
        )
    except z3.Z3Exception:  # Spacer reports its timeout as "canceled"
        return "unknown", None
    if answer == z3.unsat:
        cover = fp.get_cover_delta(-1, reach)
        return "unsat", lambda s: z3.substitute_vars(cover, s, *params)
    return str(answer), None
