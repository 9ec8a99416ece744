"""Benchmark: compare's behaviour pass against a plain Python loop over the same runs.

Both run in this process on the same space (the explorer's default grids for policy A, or
``--quick`` for a small single grid) and the same two policies. The plain loop runs const(b)
for every configuration both policies' verdicts cover and every offered budget b up to
min(M, T - c0), with the native step function (``trajectory.run``), under A and under B, and
counts the runs whose chunk ends differ; the behaviour pass steps all runs of a batch at once
through the models' vectorised tables (and also works out where each policy fails every
property). Printed: runs per second and the ratio, and whether both counted the same runs and
differing runs (they must).

    python bench/compare.py [--quick] [--a vllm-latest] [--b lookahead-in-split]
"""

from __future__ import annotations

import argparse
import time

from chunkproof.checker.cli.defaults import small_space, user_space
from chunkproof.checker.engines.compare import compare_behaviour
from chunkproof.checker.engines.search import category
from chunkproof.model.policy import Policy
from chunkproof.model.trajectory import run
from chunkproof.source.loading import resolve_policy
from chunkproof.spec.request import budget_bounds
from chunkproof.spec.space import Space

QUICK = {"block": "4,8", "lookahead": "0-3", "prompt": "1-16", "max_sched": "1-8"}
"""The ``--quick`` grid."""


def plain_loop(a: Policy, b: Policy, space: Space) -> tuple[int, int, float]:
    """(runs per policy, differing runs, seconds) of a per-run native loop over the population
    compare uses: configurations both policies accept, outside the degenerate region."""
    runs = differing = 0
    started = time.perf_counter()
    for cfg in space.configs():
        if category(a, cfg) != "main" or category(b, cfg) != "main":
            continue
        low, high = budget_bounds(cfg, space.budget)
        for budget in range(low, high + 1):
            runs += 1
            differing += run(a, cfg, [budget]).ends != run(b, cfg, [budget]).ends
    return runs, differing, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"only the grid {QUICK}")
    parser.add_argument("--a", default="vllm-latest")
    parser.add_argument("--b", default="lookahead-in-split")
    args = parser.parse_args()
    a, b = resolve_policy(args.a), resolve_policy(args.b)
    space = user_space(QUICK, None, production=False) if args.quick else small_space(a)

    started = time.perf_counter()
    tally = compare_behaviour(a, b, space, jobs=1).tally
    seconds = time.perf_counter() - started
    base_runs, base_differing, base_seconds = plain_loop(a, b, space)

    grids = ", ".join(grid.label or "grid" for grid in space.grids)
    print(f"{a.name} against {b.name}; {tally.configs:,} configurations of {grids}")
    print(f"{'':<24}{'behaviour pass':>16}{'plain loop':>14}{'ratio':>10}")
    print(f"{'seconds':<24}{seconds:>16,.2f}{base_seconds:>14,.2f}{base_seconds / seconds:>9.1f}x")
    mine, theirs = tally.runs / seconds, base_runs / base_seconds
    print(f"{'runs / s (per policy)':<24}{mine:>16,.0f}{theirs:>14,.0f}{mine / theirs:>9.1f}x")
    same = (tally.runs, tally.differing_runs) == (base_runs, base_differing)
    agree = "agree" if same else "DIFFER"
    print(
        f"(runs {tally.runs:,} and {base_runs:,}; differing runs {tally.differing_runs:,} and "
        f"{base_differing:,}: the two {agree})"
    )


if __name__ == "__main__":
    main()
