"""Fidelity of KV2 rule 2d: a lone request admitted at a local prefix hit an identical
request's prefill left, against each release's own ``KVCacheManager``.

An identical request computes [0, c0) and [c0, P) and finishes; the request is admitted with
the hit the release's ``get_computed_blocks`` gives it and scheduled in the chunks the release's
split gives it from c0 under random budgets (:class:`chunkproof.source.kv_alloc_run.
TreeAllocator`; release code is trusted in tests). At every chunk the blocks the release asks
of the pool and the free blocks when it asks must be the model's (:func:`~chunkproof.spec.
kv_blocks.asked_blocks`, :func:`~chunkproof.spec.kv_blocks.free_blocks`), and so must the
grant, over pools from one block below the least the seed fits to three above it. The hit
must be c0 wherever the model says an identical prefill lands there
(:func:`~chunkproof.spec.slots.lands_at_start`), and the seed must fit the pool exactly where
the model says it does (:func:`~chunkproof.spec.kv_blocks.seed_fits`).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from test_kv_alloc_fidelity import scheduled_chunks
from test_kv_lookup_fidelity import RELEASES, draw_config, minor_of

from chunkproof.model.builtin import policy_for_release
from chunkproof.model.config import Config
from chunkproof.source.extraction import SourceError
from chunkproof.source.kv_alloc_run import TreeAllocator
from chunkproof.source.releases import release_root
from chunkproof.spec.kv_blocks import (
    asked_blocks,
    free_blocks,
    pool_modelled,
    pool_rules,
    seed_fits,
)
from chunkproof.spec.slots import eagle_drop, kv_rules

pytestmark = pytest.mark.fidelity

SEED = 20_261_207
CASES = 150


def seeded_config(rng: random.Random, version: str) -> Config:
    """A configuration the release accepts and rules 1-3 cover, admitted at a local hit c0 (a
    multiple of the hit grid in (0, P)) that an identical prefill leaves
    (``KvRules.seeded``), without internal checkpoints."""
    policy = policy_for_release(version)
    while True:
        cfg = draw_config(rng, version)
        cfg = cfg.replace(max_sched=rng.randint(1, 3 * cfg.block))
        unit = cfg.hash_block if cfg.partial_hits else cfg.sched_block
        if cfg.prompt <= unit:
            continue
        cfg = cfg.replace(start=unit * rng.randint(1, (cfg.prompt - 1) // unit))
        seeded = kv_rules(version).seeded(cfg)
        if seeded and policy.accepts(cfg) is None and pool_modelled(pool_rules(version), cfg):
            return cfg


def asks(allocator: TreeAllocator) -> list[tuple[int, int]]:
    """The (blocks asked, blocks free) of every ``get_num_blocks_to_allocate`` the manager's
    coordinator answers from now on."""
    seen: list[tuple[int, int]] = []
    coordinator, pool = allocator.manager.coordinator, allocator.manager.block_pool
    original = coordinator.get_num_blocks_to_allocate

    def counted(*args: Any, **kwargs: Any) -> Any:
        got = original(*args, **kwargs)
        seen.append((sum(got) if isinstance(got, (tuple, list)) else got, pool.free))
        return got

    coordinator.get_num_blocks_to_allocate = counted
    return seen


@pytest.mark.parametrize("version", RELEASES)
def test_a_seeded_hit_asks_what_rule_2d_says(version: str) -> None:
    """At a seeded hit the release's hit is c0, and chunk by chunk it asks, finds free and
    grants what rules 1-2d say. From 0.26 partial hits and refusals are exercised (before, a
    hit is on the block grid, and a pool that held the seed's chunks holds the request's)."""
    rng = random.Random(f"{SEED}-hit-{version}")
    policy = policy_for_release(version)
    root, rules = release_root(version), pool_rules(version)
    wrong: list[str] = []
    refused = partial = checked = 0
    while checked < CASES:
        cfg = seeded_config(rng, version)
        chunks = scheduled_chunks(policy, cfg, rng)
        if chunks is None:
            continue
        max_model_len = cfg.prompt + 1
        copy = rules.tail_copy(cfg, cfg.start)
        least = next(n for n in range(2, 1 << 12) if seed_fits(cfg, n, copy))
        pool = max(2, least + rng.choice((-1, 0, 0, 0, 1, 3)))  # near the seed's fit
        fits = seed_fits(cfg, pool, copy)
        try:
            allocator = TreeAllocator(root, cfg, eagle_drop(cfg), pool, max_model_len)
        except SourceError as exc:
            checked += 1
            if fits or "refuses the identical request" not in str(exc):
                wrong.append(f"{cfg.describe()} N={pool}: {exc}")
            continue
        checked += 1
        if not fits:
            wrong.append(f"{cfg.describe()} N={pool}: the seed fits, the model says it does not")
            continue
        partial += cfg.start % cfg.block != 0
        seen = asks(allocator)
        start = cfg.start
        for chunk in chunks:
            end = start + chunk
            mamba = rules.mamba_asked(cfg, start, end) + rules.tail_copy(cfg, start)
            want = (
                asked_blocks(cfg, start, end, max_model_len, mamba),
                free_blocks(cfg, start, pool, max_model_len),
            )
            granted = allocator.allocate(chunk).granted
            if seen[-1] != want or granted != (want[0] <= want[1]):
                wrong.append(
                    f"{cfg.describe()} N={pool} chunk [{start}, {end}): real ask/free "
                    f"{seen[-1]} granted {granted}, model {want}"
                )
                break
            if not granted:
                refused += 1
                break
            start = end
    assert not wrong, f"{len(wrong)} of {CASES}: " + "; ".join(wrong[:6])
    assert refused < CASES, refused
    if minor_of(version) >= 26:  # before, hits are on the block grid: the seed's fit is its
        assert refused > 0 and partial > 0, (refused, partial)
