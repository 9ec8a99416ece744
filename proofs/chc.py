"""Unbounded reachability with Z3's Spacer engine (constrained Horn clauses).

    Reach(c0, T, M, theta)  <-  params                                  (c0 = 0)
    Reach(c', T, M, theta)  <-  Reach(c, T, M, theta), c < E, 1 <= b <= M, c' = c + chunk(c, b)
    query: Reach(c, ...), c < E, 1 <= b <= M, violation_p(c, b), extra

unsat: no reachable state violates p, and Spacer's cover of Reach is an inductive invariant
(returned as a function of the state, for :mod:`chunkproof.proofs.certificate`); sat: some
reachable state does; unknown: the engine gave up or timed out.
"""

from __future__ import annotations

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


def reachable_violation(
    ts: TransitionSystem, pid: str, window: str, extra: Any = True, timeout_ms: int = 10_000
) -> ChcResult:
    """Is a state violating ``pid`` reachable (under the additional constraint ``extra``)?"""
    import time

    started = time.monotonic()
    params = ts.parameters
    sort = [z3.IntSort()] * (1 + len(params))
    reach = z3.Function("Reach", *sort, z3.BoolSort())
    c, c2, b = z3.Ints("c c_next b")
    fp = z3.Fixedpoint()
    fp.set(engine="spacer", timeout=timeout_ms)
    fp.register_relation(reach)
    fp.declare_var(c, c2, b, *params)
    fp.rule(reach(0, *params), [ts.params, extra, *ts.assumptions])
    step = [ts.in_prefill(c), ts.budget_ok(b), c2 == c + ts.chunk(c, b)]
    fp.rule(reach(c2, *params), [reach(c, *params), *step])
    bad = ts.violation(pid, c, b, window)
    try:
        answer = fp.query(z3.And(reach(c, *params), ts.in_prefill(c), ts.budget_ok(b), bad))
    except z3.Z3Exception:  # Spacer reports its timeout as "canceled"
        return ChcResult("unknown", None, time.monotonic() - started)
    seconds = time.monotonic() - started
    if answer == z3.unsat:
        cover = fp.get_cover_delta(-1, reach)
        return ChcResult("unsat", lambda s: z3.substitute_vars(cover, s, *params), seconds)
    return ChcResult(str(answer), None, seconds)
