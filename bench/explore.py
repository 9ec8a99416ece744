"""Benchmark: the explorer against a tight plain-Python enumeration of the same states.

Both run in this process, on the same space (the default of ``chunkproof check``, or
``--quick`` for its classic grid only) and the same built-in policy. The plain loop walks
every configuration one at a time: from every reachable state c it offers every budget of the
range, runs the policy's stage functions natively (the step view built once per state), and
follows every non-zero chunk; it checks no property. The explorer (``checker.search.explore``)
evaluates the policy's vectorised form on whole batches and checks every property.
Printed: seconds and transitions per second of each, and the ratio explorer / loop
(target: 10x or more).

    python bench/explore.py [--quick] [--policy vllm-latest] [--jobs 1]
"""

from __future__ import annotations

import argparse
import time

from chunkproof.checker.cli.defaults import small_space
from chunkproof.checker.engines.search import explore
from chunkproof.model.builtin import get_builtin
from chunkproof.model.config import Config
from chunkproof.model.policy import Policy
from chunkproof.model.step import step_view
from chunkproof.spec.properties import PROPERTIES
from chunkproof.spec.request import RequestModel, budget_bounds
from chunkproof.spec.space import Space


def plain_loop(policy: Policy, configs: list[Config], budget: tuple[int, int] | None) -> int:
    """Transitions of a per-configuration native enumeration of every reachable state."""
    functions = [stage.function for stage in policy.stages]
    transitions = 0
    for cfg in configs:
        low, high = budget_bounds(cfg, budget)
        end = cfg.prefill_end
        seen = {cfg.start}
        stack = [cfg.start]
        while stack:
            c = stack.pop()
            view = step_view(cfg, c, lambda function, args: function(*args))
            for b in range(low, high + 1):
                n = b
                for function in functions:
                    n = function(view, c, n)
                transitions += 1
                target = c + n
                if n > 0 and target < end and target not in seen:
                    seen.add(target)
                    stack.append(target)
    return transitions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the classic grid")
    parser.add_argument("--policy", default="vllm-latest", help="a built-in policy")
    parser.add_argument("--jobs", type=int, default=1, help="explorer processes")
    args = parser.parse_args()
    policy = get_builtin(args.policy)
    space = small_space(policy)
    if args.quick:
        space = Space(space.grids[:1], space.budget)
    configs = list(space.configs())

    started = time.perf_counter()
    exploration = explore(RequestModel(policy, space), tuple(PROPERTIES), args.jobs)
    explorer_seconds = time.perf_counter() - started
    explorer_transitions = exploration.tally.transitions

    started = time.perf_counter()
    loop_transitions = plain_loop(policy, configs, space.budget)
    loop_seconds = time.perf_counter() - started

    mine = explorer_transitions / explorer_seconds
    theirs = loop_transitions / loop_seconds
    print(f"policy {policy.name}; {len(configs):,} configurations; explorer jobs {args.jobs}")
    print(f"{'':<20}{'explorer':>14}{'plain loop':>14}")
    print(f"{'seconds':<20}{explorer_seconds:>14.2f}{loop_seconds:>14.2f}")
    print(f"{'transitions':<20}{explorer_transitions:>14,}{loop_transitions:>14,}")
    print(f"{'transitions / s':<20}{mine:>14,.0f}{theirs:>14,.0f}")
    print(f"ratio explorer / plain loop: {mine / theirs:.2f}x (target >= 10x)")


if __name__ == "__main__":
    main()
