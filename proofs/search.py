"""Minimal counterexamples from the solver (issue: smallest T, then M, then the steps).

1. Bounded search: the transition relation unrolled d steps (idle steps allowed, so shorter
   traces count), a violation at the last state, and Z3's Optimize minimising T, then theta.
   Depths 1, 2, 4, ... are tried until a counterexample appears.
2. The minimum is certified for traces of any length: a Spacer query asks for a reachable
   violation with a smaller T; unsat proves T minimal.
3. At that T the explorer enumerates every M up to the solver's, exhaustively, and returns the
   smallest M with its BFS-shortest trace, computed by the native policy. When that grid is too
   large, Spacer finds the smallest M by bisection (each answer holds for traces of any
   length) and the explorer takes the shortest trace at that one M. If a query times out, the
   solver's own trace is replayed natively instead, and the result says which dimensions were
   minimised within the bounded search only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import z3

from chunkproof.checker.explorer import budget_bounds
from chunkproof.checker.properties import STUCK_PROPERTIES
from chunkproof.checker.ranges import Ranges
from chunkproof.checker.search import explore, minimal_counterexample
from chunkproof.checker.traces import ModelMismatch, build_counterexample, violates
from chunkproof.model.config import Config
from chunkproof.model.counterexample import Counterexample
from chunkproof.model.step import Step, step
from chunkproof.proofs.chc import reachable_violation
from chunkproof.proofs.system import TransitionSystem

DEPTHS = (1, 2, 4, 8)
EXPLORER_CELLS = 30_000_000


@dataclass(frozen=True)
class SolverTrace:
    """A bounded-search model: parameters, budgets and states of the non-idle steps."""

    params: dict[str, int]
    budgets: list[int]
    states: list[int]
    final_state: int
    final_budget: int
    depth: int


def bounded_search(
    ts: TransitionSystem, pid: str, window: str, depth: int, timeout_ms: int
) -> SolverTrace | str | None:
    """A violation within ``depth`` steps minimising T then theta; None if none; "unknown"."""
    opt = z3.Optimize()
    opt.set("timeout", timeout_ms)
    cs = [z3.Int(f"c{i}") for i in range(depth + 1)]
    bs = [z3.Int(f"b{i}") for i in range(depth)]
    idle = [z3.Bool(f"idle{i}") for i in range(depth)]
    final = z3.Int("b_final")
    opt.add(ts.params, cs[0] == 0)
    for i in range(depth):
        move = z3.And(ts.budget_ok(bs[i]), ts.in_prefill(cs[i]))
        opt.add(z3.Implies(z3.Not(idle[i]), move))
        opt.add(cs[i + 1] == z3.If(idle[i], cs[i], cs[i] + ts.chunk(cs[i], bs[i])))
    last = cs[depth]
    opt.add(ts.in_prefill(last), ts.budget_ok(final), ts.violation(pid, last, final, window))
    opt.add(*ts.assumptions)
    opt.minimize(ts.T)
    opt.minimize(ts.theta)
    answer = opt.check()
    if answer == z3.unknown:
        return "unknown"
    if answer == z3.unsat:
        return None
    model = opt.model()

    def value(term: Any) -> int:
        return int(model.eval(term, model_completion=True).as_long())

    moving = [i for i in range(depth) if not z3.is_true(model.eval(idle[i], True))]
    return SolverTrace(
        ts.concrete(model),
        [value(bs[i]) for i in moving],
        [value(cs[i]) for i in moving],
        value(last),
        value(final),
        depth,
    )


def certify_smallest_prompt(
    ts: TransitionSystem, pid: str, window: str, prompt: int, timeout_ms: int
) -> str:
    """Spacer: is there a reachable violation with T < ``prompt``? unsat certifies the minimum."""
    return reachable_violation(ts, pid, window, ts.T < prompt, timeout_ms).status


def minimal_counterexample_for_cell(
    ts: TransitionSystem, pid: str, window: str, timeout_ms: int
) -> tuple[Counterexample | None, str]:
    """The cell's minimal counterexample and how minimal it is (module docstring)."""
    found: SolverTrace | None = None
    certified = "unknown"
    for depth in DEPTHS:
        result = bounded_search(ts, pid, window, depth, timeout_ms)
        if result == "unknown":
            return None, f"the bounded search at depth {depth} timed out"
        if isinstance(result, SolverTrace):
            found = result
            certified = certify_smallest_prompt(ts, pid, window, result.params["T"], timeout_ms)
            if certified == "unsat":
                break
    if found is None:
        return None, f"no violation within {DEPTHS[-1]} steps"
    cfg = _config(ts, found)
    how = (
        "T is the minimum over traces of any length (Spacer: no smaller T violates)"
        if certified == "unsat"
        else f"T is the minimum over traces of up to {found.depth} steps (Spacer: {certified})"
    )
    cx = _explore_at_prompt(ts, pid, window, cfg, range(max(cfg.lookahead, 1), cfg.max_sched + 1))
    if cx is not None:
        return cx, how + "; M and the trace length are minimal at that T (explorer, exhaustive)"
    smallest = _bisect_max_sched(ts, pid, window, cfg, timeout_ms)
    if smallest is not None:
        cx = _explore_at_prompt(ts, pid, window, cfg.replace(max_sched=smallest), [smallest])
        if cx is not None:
            return cx, how + (
                "; M is minimal at that T (Spacer bisection), the trace is the shortest at that "
                "M (explorer)"
            )
    return _replayed(ts, pid, window, cfg, found), (
        how + f"; M and the trace length are minimal within {found.depth} steps only"
    )


def _config(ts: TransitionSystem, found: SolverTrace) -> Config:
    cell, p = ts.cell, found.params
    return Config(
        block=cell.block,
        prompt=p["T"],
        max_sched=p["M"],
        lookahead=cell.lookahead,
        drop=cell.drop,
        hash_lookahead=cell.hash_lookahead,
        threshold=p["theta"] if ts.scope.threshold else 0,
    )


def _bisect_max_sched(
    ts: TransitionSystem, pid: str, window: str, cfg: Config, timeout_ms: int
) -> int | None:
    """The least M <= cfg.max_sched with a reachable violation at cfg's T and theta, by
    Spacer bisection; None if a query is undecided."""
    low, high = max(cfg.lookahead, 1), cfg.max_sched
    fixed = z3.And(ts.T == cfg.T, ts.theta == cfg.threshold)
    while low < high:
        middle = (low + high) // 2
        answer = reachable_violation(ts, pid, window, z3.And(fixed, ts.M <= middle), timeout_ms)
        if answer.status == "sat":
            high = middle
        elif answer.status == "unsat":
            low = middle + 1
        else:
            return None
    return high


def _explore_at_prompt(
    ts: TransitionSystem, pid: str, window: str, cfg: Config, ms: Sequence[int]
) -> Counterexample | None:
    """The explorer's minimal counterexample at cfg's T over the M values ``ms``, or None when
    that grid is too large to enumerate."""
    ms = tuple(ms)
    width = min(max(ms), cfg.T)
    if cfg.prefill_end * width * len(ms) > EXPLORER_CELLS:
        return None
    ranges = Ranges(
        block=(cfg.block,),
        lookahead=(cfg.lookahead,),
        prompt=(cfg.prompt,),
        max_sched=ms,
        drop=(cfg.drop,),
        threshold=(cfg.threshold,),
    )
    exploration = explore(ts.policy, ranges, [pid], window)
    return minimal_counterexample(exploration, pid, "main")


def _replayed(
    ts: TransitionSystem, pid: str, window: str, cfg: Config, found: SolverTrace
) -> Counterexample:
    """The solver's trace recomputed by the native policy; it must land where the solver says."""
    steps: list[Step] = []
    targets = [*found.states[1:], found.final_state]
    for c, b, target in zip(found.states, found.budgets, targets, strict=True):
        s = step(ts.policy, cfg, c, b)
        if s.end != target:
            raise ModelMismatch(
                f"{ts.policy.name}: the solver steps {c} -> {target} with budget {b}, "
                f"the native policy to {s.end}"
            )
        steps.append(s)
    final_c = found.final_state
    high = budget_bounds(cfg, None)[1]
    final_budget = high if pid in STUCK_PROPERTIES else found.final_budget
    steps.append(step(ts.policy, cfg, final_c, final_budget))
    if not violates(pid, cfg, steps[-1], window, high):
        raise AssertionError(f"{pid}: the solver's counterexample does not replay natively")
    return build_counterexample(ts.policy, cfg, pid, steps, window, None, {})
