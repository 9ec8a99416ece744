"""Benchmark: the explorer against a tight, inlined plain-Python loop over the same states.

Both run in this process, on the classic grid of ``chunkproof check`` for vllm-0.33 (B 4, 8,
16; L 0-4; L_h 0, L; D both; T = P 1-48; M 1-32; every budget 1..min(M, T)), judging P1 only,
the explorer on one job by default.

The loop is what a skilled engineer would write by hand for this one policy: vllm-0.33's
budget cap for a lone request (n := min(T - c, b)), split V9 (``split_v9`` with every further
input off, as on this grid: align a non-final end to the block, stop at the next boundary from
a mid-block start and at the checkpoint position ck33(T, B, D, L_h)), no encoder items, and
reservation R1, its arithmetic inlined (no function call per state or budget), a set of seen
states per configuration, a depth-first stack. It counts every transition (c, b) out of every
reachable c < E and marks a configuration livelocked (P1) when the largest budget makes no
progress at a reachable state. The bench asserts that both count the same configurations,
states and transitions and reach the same P1 verdicts per category, so the loop cannot drift
from the model, and that the grid holds only the inputs the loop inlines.

Printed: seconds and transitions per second of each, and the ratio explorer / loop
(target: 10x or more).

    python bench/explore.py [--jobs 1]
"""

from __future__ import annotations

import argparse
import time

from chunkproof.checker.cli.defaults import small_space
from chunkproof.checker.engines.search import CATEGORIES, Tally, category, explore
from chunkproof.model import splits, stages
from chunkproof.model.builtin import get_builtin
from chunkproof.model.config import Config
from chunkproof.model.policy import Policy
from chunkproof.spec.request import RequestModel
from chunkproof.spec.space import Space

POLICY = "vllm-0.33"
INLINED = (
    ("cap", stages.cap_lone_request),
    ("split", splits.split_v9),
    ("encoder", stages.encoder_v33),
    ("reservation", stages.reserve_r1),
)
"""The stages the loop inlines, in order (the built-in vllm-0.33)."""


def check_inlinable(policy: Policy, configs: list[Config]) -> None:
    """The loop's arithmetic is the policy's on these configurations: the same stages, and
    every input the loop leaves out at its neutral value (T = P, one grid G = H = B_s = B, no
    threshold, partial hits, checkpoints, junction, admission hit, uncached prefix or items)."""
    stages_seen = tuple((stage.name, stage.function) for stage in policy.stages)
    assert stages_seen == INLINED, f"the loop inlines {INLINED}, the policy is {stages_seen}"
    for cfg in configs:
        assert cfg.tokens == cfg.prompt and cfg.start == 0 and cfg.external == 0, cfg
        assert cfg.split_block == cfg.block == cfg.hash_block == cfg.sched_block, cfg
        assert cfg.threshold == 0 and not cfg.partial_hits and not cfg.checkpoints, cfg
        assert cfg.junction == 0 and cfg.uncached_prefix == 0 and not cfg.items, cfg


def inlined_loop(configs: list[Config]) -> tuple[int, int, list[bool]]:
    """(states, transitions, P1 broken per configuration) of every reachable state of every
    configuration (module docstring)."""
    states = transitions = 0
    livelocked = []
    for cfg in configs:
        block, tokens, prompt, lookahead = cfg.block, cfg.tokens, cfg.prompt, cfg.lookahead
        end = max(prompt, tokens - 1)
        high = min(cfg.max_sched, tokens)
        floors = block <= cfg.max_sched  # align_end: B <= m floors even a sub-block chunk
        limit = tokens if cfg.drop else tokens - max(1, cfg.hash_lookahead)
        lam = limit // block * block - (block if cfg.drop else 0)  # ck33(T, B, D, L_h)
        lam = max(lam, 0)
        stuck = False
        seen = {0}
        stack = [0]
        while stack:
            c = stack.pop()
            beta = (c // block + 1) * block if c % block else 0
            left = tokens - c
            for b in range(1, high + 1):
                n = b if b < left else left  # the budget cap
                e = c + n
                if e < end:  # align a non-final end
                    a = e // block * block
                    if a > c or floors:
                        e = a
                stop = e  # stopmin over the block boundary and lambda
                if c < beta < stop:
                    stop = beta
                if c < lam < stop:
                    stop = lam
                n = stop - c if stop > c else 0
                rest = left - n  # R1
                if 0 < rest < lookahead:
                    n -= lookahead - rest
                    if n < 0:
                        n = 0
                target = c + n
                if n > 0:
                    if target < end and target not in seen:
                        seen.add(target)
                        stack.append(target)
                elif b == high:
                    stuck = True
            transitions += high
        states += len(seen)
        livelocked.append(stuck)
    return states, transitions, livelocked


def loop_tally(policy: Policy, configs: list[Config], livelocked: list[bool]) -> Tally:
    """The loop's configurations and P1 verdicts per category, as the explorer tallies them."""
    tally = Tally()
    for cfg, stuck in zip(configs, livelocked, strict=True):
        cat = category(policy, cfg)
        tally.configs[cat] += 1
        if stuck:
            tally.failing[("P1", cat)] = tally.failing.get(("P1", cat), 0) + 1
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1, help="explorer processes")
    args = parser.parse_args()
    policy = get_builtin(POLICY)
    classic = small_space(policy).grids[0]
    space = Space((classic,), None)
    configs = list(space.configs())
    check_inlinable(policy, configs)

    started = time.perf_counter()
    exploration = explore(RequestModel(policy, space, properties=("P1",)), ("P1",), args.jobs)
    explorer_seconds = time.perf_counter() - started
    mine = exploration.tally

    started = time.perf_counter()
    states, transitions, livelocked = inlined_loop(configs)
    loop_seconds = time.perf_counter() - started
    theirs = loop_tally(policy, configs, livelocked)

    assert (mine.states, mine.transitions) == (states, transitions), (
        f"explorer {mine.states:,} states, {mine.transitions:,} transitions; "
        f"loop {states:,}, {transitions:,}"
    )
    assert mine.configs == theirs.configs, (mine.configs, theirs.configs)
    assert mine.failing == theirs.failing, (mine.failing, theirs.failing)

    mine_rate = mine.transitions / explorer_seconds
    loop_rate = transitions / loop_seconds
    print(
        f"policy {policy.name}; {classic.label} grid, P1; {len(configs):,} configurations, "
        f"{states:,} states; explorer jobs {args.jobs}"
    )
    print(f"{'':<20}{'explorer':>14}{'inlined loop':>14}")
    print(f"{'seconds':<20}{explorer_seconds:>14.2f}{loop_seconds:>14.2f}")
    print(f"{'transitions':<20}{mine.transitions:>14,}{transitions:>14,}")
    print(f"{'transitions / s':<20}{mine_rate:>14,.0f}{loop_rate:>14,.0f}")
    verdicts = ", ".join(f"{cat} {mine.failing.get(('P1', cat), 0):,}" for cat in CATEGORIES)
    print(f"P1 broken (both agree): {verdicts}")
    print(f"ratio explorer / inlined loop: {mine_rate / loop_rate:.2f}x (target >= 10x)")


if __name__ == "__main__":
    main()
