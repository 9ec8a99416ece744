"""Fidelity of the block pool a lone prefill draws on (SPEC KV2), against each release's own
``KVCacheManager.allocate_slots``.

For every cached release, the release's KV cache files are compiled over a counting block pool
(:mod:`chunkproof.source.kv_alloc_run`; release code is trusted in tests) and a fresh request
is scheduled in the chunks the release's own split gives it under random budgets. At every
chunk the model's rules (:func:`chunkproof.spec.kv_blocks.lone_allocations`) must give the
release's grant, free blocks and blocks held per group, over pools from too small to ample.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
from test_kv_lookup_fidelity import RELEASES, draw_config, minor_of

from chunkproof.model.arith import cdiv
from chunkproof.model.builtin import policy_for_release
from chunkproof.model.config import Config
from chunkproof.model.policy import Policy
from chunkproof.model.step import step
from chunkproof.source.kv_alloc_run import tree_allocations
from chunkproof.source.releases import release_root
from chunkproof.spec.kv_blocks import PoolRules, lone_allocations, pool_modelled, pool_rules
from chunkproof.spec.slots import eagle_drop

pytestmark = pytest.mark.fidelity

SEED = 20_261_205
CASES = 120


def scheduled_chunks(policy: Policy, cfg: Config, rng: random.Random) -> list[int] | None:
    """The chunks the release's stages give a prefill from its start c0 under random budgets
    (a budget whose step gives 0 or raises is drawn again); ``None`` if none finishes."""
    computed, chunks = cfg.start, list[int]()
    for _ in range(40 * cfg.prompt):
        if computed >= cfg.prompt:
            return chunks
        got = step(policy, cfg, computed, rng.randint(1, cfg.max_sched))
        if got.crash is None and got.chunk > 0:
            chunks.append(got.chunk)
            computed += got.chunk
    return None


def compare_allocations(
    root: Path,
    rules: PoolRules,
    cfg: Config,
    chunks: list[int],
    max_model_len: int,
    rng: random.Random,
    wrong: list[str],
) -> bool:
    """The release's ``allocate_slots`` against the model's rules along ``chunks``, in a pool
    drawn from 2 blocks to more than the request needs: a disagreement in grant, free blocks
    or blocks held per group is added to ``wrong``; whether the release refused a chunk."""
    whole = cdiv(max_model_len, cfg.split_block) + 2 * cfg.lookahead + 4
    pool = rng.randint(2, whole)
    real = tree_allocations(root, cfg, eagle_drop(cfg), chunks, pool, max_model_len)
    model = lone_allocations(cfg, chunks, pool, max_model_len, rules)
    got = [(a.granted, a.free, a.held) for a in real]
    want = [(a.granted, a.free, a.held) for a in model]
    if got != want:
        wrong.append(f"{cfg.describe()} chunks={chunks} N={pool}: real {got}, model {want}")
    return not real[-1].granted


def with_checkpoints(cfg: Config, rng: random.Random, minor: int) -> Config:
    """From 0.29, half the configurations without partial hits export internal prefill
    checkpoints (K = 1, KV2 rule 2c), aligned from 0.30 on 1, H or 2H."""
    if minor < 29 or cfg.partial_hits or rng.random() < 0.5:
        return cfg
    alignment = rng.choice((1, cfg.hash_block, 2 * cfg.hash_block)) if minor >= 30 else 0
    return cfg.replace(checkpoints=True, checkpoint_alignment=alignment)


@pytest.mark.parametrize("version", RELEASES)
def test_lone_prefill_allocations_are_the_release(version: str) -> None:
    """Chunk by chunk, the release's ``allocate_slots`` grants exactly where the model says,
    leaves the free blocks it says and holds the attention and Mamba blocks it says
    (KV2 rules 1-3, with a prefill checkpoint block from 0.29: rule 2c), for pools from 2
    blocks to more than the request needs, on every configuration the rules cover
    (:func:`~chunkproof.spec.kv_blocks.pool_modelled`)."""
    rng = random.Random(f"{SEED}-alloc-{version}")
    policy = policy_for_release(version)
    root = release_root(version)
    rules = pool_rules(version)
    wrong: list[str] = []
    refused, checked = 0, 0
    while checked < CASES:
        cfg = with_checkpoints(draw_config(rng, version), rng, minor_of(version))
        cfg = cfg.replace(max_sched=rng.randint(1, 3 * cfg.block))
        if not pool_modelled(rules, cfg) or policy.accepts(cfg) is not None:
            continue
        chunks = scheduled_chunks(policy, cfg, rng)
        if chunks is None:
            continue
        checked += 1
        max_model_len = rng.choice((cfg.prompt, cfg.prompt + rng.randint(1, 8)))
        refused += compare_allocations(root, rules, cfg, chunks, max_model_len, rng, wrong)
    assert not wrong, f"{len(wrong)} of {CASES}: " + "; ".join(wrong[:6])
    assert 0 < refused < CASES, refused  # both outcomes are exercised


CHECKPOINT_RELEASES = [v for v in RELEASES if minor_of(v) >= 29]


def draw_checkpoint_config(rng: random.Random, version: str) -> Config:
    """A configuration with internal prefill checkpoints (K = 1) the release accepts and rule
    2c covers: H = G = B (no partial hits), alpha 1, B/2 or B (from 0.30; 0.29 has none),
    budgets up to six blocks so that chunks span the two Mamba blocks a checkpoint needs."""
    policy = policy_for_release(version)
    alignments = (1, 2, 4) if minor_of(version) >= 30 else (0,)
    while True:
        block = rng.choice((4, 8, 16))
        lookahead = rng.choice((0, 1, 2))
        cfg = Config(
            block=block,
            prompt=rng.randint(1, 8 * block),
            max_sched=rng.randint(1, 6 * block),
            lookahead=lookahead,
            drop=lookahead >= 1 and rng.random() < 0.5,
            retention=rng.choice((-1, 0, block, 2 * block)),
            checkpoints=True,
            checkpoint_alignment=rng.choice(alignments) * block // 4,
        )
        if policy.accepts(cfg) is None:
            return cfg


@pytest.mark.parametrize("version", CHECKPOINT_RELEASES)
def test_checkpoint_blocks_are_the_release(version: str) -> None:
    """KV2 rule 2c on the release's code: with a prefill checkpoint block, chunk by chunk, the
    release grants, leaves free and holds what the model says, for pools from 2 blocks to
    ample; a good share of the chunks write a checkpoint."""
    rng = random.Random(f"{SEED}-checkpoint-{version}")
    policy = policy_for_release(version)
    root = release_root(version)
    rules = pool_rules(version)
    wrong: list[str] = []
    refused, writing, checked = 0, 0, 0
    while checked < CASES:
        cfg = draw_checkpoint_config(rng, version)
        chunks = scheduled_chunks(policy, cfg, rng)
        if chunks is None:
            continue
        checked += 1
        ends = list(itertools.accumulate(chunks, initial=0))
        writing += any(rules.checkpoint(cfg, s, e) for s, e in itertools.pairwise(ends))
        max_model_len = cfg.prompt + rng.randint(1, 8)
        refused += compare_allocations(root, rules, cfg, chunks, max_model_len, rng, wrong)
    assert not wrong, f"{len(wrong)} of {CASES}: " + "; ".join(wrong[:6])
    assert 0 < refused < CASES, refused
    assert writing >= CASES // 4, writing


@pytest.mark.parametrize("version", RELEASES)
def test_the_startup_minimum_serves_a_longest_request_from_0_29(version: str) -> None:
    """KV2 rule 4 on the release's code: in a pool of the fewest blocks its start-up check
    accepts for max_model_len = P + 1, a prompt of P tokens scheduled in Mamba blocks is
    refused its last chunk up to 0.28 (0.23-0.28 count the null block among the request's
    blocks; 0.15 and 0.17 check one group only) and served whole from 0.29."""
    cfg = Config(block=8, split_block=8, hash_block=8, prompt=32, max_sched=64, lookahead=1)
    minimum = pool_rules(version).startup_pool(cfg)
    root = release_root(version)
    real = tree_allocations(root, cfg, False, [8, 8, 8, 8], minimum, cfg.prompt + 1)
    served = len(real) == 4 and real[-1].granted
    assert served == (minor_of(version) >= 29), [(a.granted, a.held) for a in real]
