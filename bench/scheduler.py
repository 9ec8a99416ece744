"""Benchmark: the scheduler-step model (SPEC N1) with and without symmetry reduction.

Both searches run in this process, on the same instances: every multiset of 2 (then 3)
requests of a small grid that one engine can run (``request_sets``), explored exhaustively by
the generic explorer (``checker.explorer.explore_batch``). Symmetry reduction merges the states
that differ only by which of two requests with equal configurations is where
(``spec.scheduler_step``). Printed per request count: instances, states, transitions, seconds
and states per second of each search, the ratios without / with (states, seconds), and how
many instances violate each property (the two searches must agree); once over every
instance, once over those with two equal requests, the only ones symmetry can reduce.

    python bench/scheduler.py [--policy vllm-latest] [--block 4] [--max-sched 8] [--prompts 3-16]
                              [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

from chunkproof.checker.engines.explorer import NO_WITNESS, explore_batch
from chunkproof.model.builtin import get_builtin
from chunkproof.model.config import Config
from chunkproof.model.policy import Policy
from chunkproof.spec.scheduler_step import SchedulerStepModel, request_sets


@dataclass
class Search:
    """One exhaustive search: its size, its time, and the instances violating each property."""

    states: int
    transitions: int
    seconds: float
    violated: dict[str, int]


def search(policy: Policy, sets: list[tuple[Config, ...]], symmetry: bool) -> Search:
    """Explore every instance of ``sets`` with or without symmetry reduction."""
    model = SchedulerStepModel(policy, sets, symmetry=symmetry)
    started = time.perf_counter()
    states = transitions = 0
    violated = dict.fromkeys(model.properties, 0)
    for batch in model.batches():
        explored = explore_batch(model, batch)
        states += len(explored.states)
        transitions += len(explored.steps.source)
        for pid, found in explored.witness.items():
            violated[pid] += int(np.count_nonzero(found != NO_WITNESS))
    return Search(states, transitions, time.perf_counter() - started, violated)


def best(policy: Policy, sets: list[tuple[Config, ...]], symmetry: bool, repeat: int) -> Search:
    """:func:`search` ``repeat`` times, keeping the least time (the machine may be shared)."""
    runs = [search(policy, sets, symmetry) for _ in range(repeat)]
    return min(runs, key=lambda run: run.seconds)


def grid(block: int, max_sched: int, prompts: range) -> list[Config]:
    """Requests of prompt ``prompts`` with and without a lookahead of 2 (the engine's L)."""
    return [
        Config(block=block, prompt=t, max_sched=max_sched, lookahead=lookahead)
        for lookahead in (0, 2)
        for t in prompts
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="vllm-latest", help="a built-in policy")
    parser.add_argument("--block", type=int, default=4, help="the block B")
    parser.add_argument("--max-sched", type=int, default=8, help="the step's budget M")
    parser.add_argument("--prompts", default="3-16", help="prompt lengths, LOW-HIGH")
    parser.add_argument("--repeat", type=int, default=3, help="timings per search (best kept)")
    args = parser.parse_args()
    policy = get_builtin(args.policy)
    low, high = (int(v) for v in args.prompts.split("-"))
    configs = grid(args.block, args.max_sched, range(low, high + 1))
    print(
        f"policy {policy.name}; B={args.block}, M={args.max_sched}, T in {args.prompts}, "
        f"L in {{0, 2}}; budgets 1..M every step"
    )
    for k in (2, 3):
        every = request_sets(policy, configs, k)
        repeated = [group for group in every if len(set(group)) < k]
        for what, sets in (("every instance", every), ("instances with equal requests", repeated)):
            report(policy, k, what, sets, args.repeat)


def report(policy: Policy, k: int, what: str, sets: list[tuple[Config, ...]], repeat: int) -> None:
    """Both searches over ``sets``, side by side, with the ratios without / with symmetry."""
    reduced = best(policy, sets, True, repeat)
    full = best(policy, sets, False, repeat)
    print(f"\n{k} requests, {what}: {len(sets):,} instances")
    print(f"{'':<18}{'symmetry':>14}{'none':>14}{'none / sym':>12}")
    rows = [
        ("states", reduced.states, full.states, "{:>14,}"),
        ("transitions", reduced.transitions, full.transitions, "{:>14,}"),
        ("seconds", reduced.seconds, full.seconds, "{:>14.2f}"),
        ("states / s", reduced.states / reduced.seconds, full.states / full.seconds, "{:>14,.0f}"),
    ]
    for name, mine, theirs, fmt in rows:
        print(f"{name:<18}{fmt.format(mine)}{fmt.format(theirs)}{theirs / mine:>11.2f}x")
    agree = "agree" if reduced.violated == full.violated else "DISAGREE"
    counts = ", ".join(f"{pid} {n}" for pid, n in reduced.violated.items())
    print(f"instances violating: {counts} (the two searches {agree})")


if __name__ == "__main__":
    main()
