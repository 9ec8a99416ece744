"""Benchmark: the explorer against a plain Python loop over the same configurations.

Both run in this process on the same grid (the default small grid of ``chunkproof check``, or
``--quick`` for its B = 4 slice) and the same policy. The plain loop follows every budget 1..M
from every reachable state with the native step function, one configuration at a time; the
explorer evaluates the policy's vectorised form on whole tables and walks networkx graphs.
Printed: policy evaluations per second, explored transitions per second, and their ratio.

    python bench/explore.py [--quick] [--policy vllm-latest]
"""

from __future__ import annotations

import argparse
import time

from chunkproof.checker.ranges import SMALL_GRID, Ranges
from chunkproof.checker.search import explore
from chunkproof.model.config import Config
from chunkproof.model.loading import resolve_policy
from chunkproof.model.policy import Policy
from chunkproof.model.step import chunk


def plain_loop(policy: Policy, ranges: Ranges) -> tuple[int, int, float]:
    """(policy evaluations, transitions, seconds) of a per-configuration native search."""
    evaluations = transitions = 0
    started = time.perf_counter()
    for family in ranges.families():
        for m in ranges.max_sched:
            cfg: Config = family.replace(max_sched=m)
            seen: set[int] = set()
            stack = [cfg.start]
            while stack:
                c = stack.pop()
                if c in seen or c >= cfg.prefill_end:
                    continue
                seen.add(c)
                for b in range(1, min(m, cfg.T - cfg.start) + 1):
                    k = chunk(policy, cfg, c, b)
                    evaluations += 1
                    transitions += 1
                    if k:
                        stack.append(c + k)
    return evaluations, transitions, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the B = 4 slice of the grid")
    parser.add_argument("--policy", default="vllm-latest")
    args = parser.parse_args()
    policy = resolve_policy(args.policy)
    ranges = SMALL_GRID.narrowed(block=(4,)) if args.quick else SMALL_GRID

    started = time.perf_counter()
    exploration = explore(policy, ranges, ["P1"], jobs=1)
    seconds = time.perf_counter() - started
    tally = exploration.tally
    base_eval, base_trans, base_seconds = plain_loop(policy, ranges)

    configs = sum(tally.configs.values())
    print(f"policy {policy.name}; {configs} configurations ({ranges.describe()})")
    print(f"{'':<28}{'explorer':>14}{'plain loop':>14}{'ratio':>10}")
    rows = [
        ("seconds", seconds, base_seconds),
        ("policy evaluations / s", tally.evaluations / seconds, base_eval / base_seconds),
        ("transitions / s", tally.transitions / seconds, base_trans / base_seconds),
    ]
    for name, mine, theirs in rows:
        ratio = theirs / mine if name == "seconds" else mine / theirs
        digits = 2 if name == "seconds" else 0
        print(f"{name:<28}{mine:>14,.{digits}f}{theirs:>14,.{digits}f}{ratio:>9.1f}x")
    print(
        f"(explorer: {tally.evaluations:,} table cells, {tally.transitions:,} reachable "
        f"transitions; plain loop: {base_trans:,} transitions)"
    )


if __name__ == "__main__":
    main()
