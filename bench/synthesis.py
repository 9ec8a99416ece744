"""Benchmark: ``synthesize`` against checking every candidate of the template's space.

Both run in this process on the same grid (``--quick``: one small grid; default: the explorer's
default grids for the base) with the prover off, and must pick the same candidate. The
baseline is what a reviewer without Z3 would do: check every candidate of the space on the grid
(the explorer on every property, then the comparison with the base that gives its cost) and
take the least-cost one among those that keep what the search kept. The search checks only the
candidates that refute every counterexample met so far. Printed: each one's time and
candidates checked, and the ratio.

    python bench/synthesis.py [--quick] [--base vllm-0.33]
"""

from __future__ import annotations

import argparse
import itertools
import time

from chunkproof.checker.cli.defaults import small_space, user_space
from chunkproof.checker.engines.compare import compare_behaviour
from chunkproof.checker.engines.search import explore
from chunkproof.checker.runs.requests import ProofRun
from chunkproof.checker.runs.synthesis import Checks, Passed, Standing, cost, synthesize
from chunkproof.model.holes import HOLES, candidate_policy
from chunkproof.model.policy import Policy
from chunkproof.source.loading import resolve_policy
from chunkproof.spec.request import RequestModel
from chunkproof.spec.space import Space

QUICK = {
    "block": "4",
    "lookahead": "2",
    "hash_block": "2",
    "prompt": "1-6",
    "max_sched": "1-4",
    "start": "0,external",
}
"""The ``--quick`` grid: it holds 0.33's window livelock and a conflict."""


def every_candidate(
    base: Policy, space: Space, kept: list[str], guarded: list[str], released: list[str]
) -> tuple[dict[str, int] | None, int, float]:
    """The baseline (module docstring): the least-cost candidate keeping ``kept`` and not
    breaking ``guarded`` where the base keeps it, how many it checked, and its seconds."""
    started = time.perf_counter()
    passed = []
    candidates = itertools.product(*[range(hole.size) for hole in HOLES])
    for values in candidates:
        candidate = dict(zip([hole.name for hole in HOLES], values, strict=True))
        policy = candidate_policy(base, candidate)
        exploration = explore(RequestModel(policy, space, "relaxed"), tuple(kept))
        if any(exploration.failing(pid, "main") for pid in kept):
            continue
        tally = compare_behaviour(base, policy, space, 1, window="relaxed").tally
        if any(tally.where[pid].counts["only_b"] for pid in guarded):
            continue
        passed.append(Passed(candidate, Standing.of(tally)))
    best = min(passed, key=lambda p: cost(p, released)) if passed else None
    count = 1
    for hole in HOLES:
        count *= hole.size
    return (None if best is None else best.candidate), count, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"only the grid {QUICK}")
    parser.add_argument("--base", default="vllm-0.33")
    args = parser.parse_args()
    base = resolve_policy(args.base)
    space = user_space(QUICK, None, production=False) if args.quick else small_space(base)
    checks = Checks(space, None, ProofRun("strict", 20_000, 1, True), 1)

    started = time.perf_counter()
    found = synthesize(base, ("P0", "P1", "P3", "P4", "P5", "P6"), "strict", checks, 1000)
    seconds = time.perf_counter() - started
    print(
        f"synthesize: {found.status} {found.candidate} in {seconds:.1f} s, "
        f"{found.tried} candidates checked (kept {found.kept}, guarded {found.guarded}, "
        f"released {found.released}, P5 {found.window})"
    )
    best, checked, base_seconds = every_candidate(
        base, space, found.kept, found.guarded, found.released
    )
    print(f"every candidate: {best} in {base_seconds:.1f} s, {checked} candidates checked")
    print(f"ratio: {base_seconds / seconds:.1f}x; same candidate: {best == found.candidate}")


if __name__ == "__main__":
    main()
