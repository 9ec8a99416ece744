"""The block pool of a lone prefill (SPEC KV2) on hand-computed cases; the fidelity tests
(tests/test_kv_alloc_fidelity.py) compare the same rules with each release's code."""

from __future__ import annotations

import random

import pytest

from chunkproof.model.config import Config
from chunkproof.spec.kv_blocks import (
    POOL_RULES,
    asked_blocks,
    copies_tail_v26,
    copies_tail_v31,
    copies_tail_v32,
    external_miscount,
    free_blocks,
    lone_allocations,
    longest_model_len,
    outside_shared_pool,
    pool_modelled,
    pool_refuses,
    pool_rules,
    seed_fits,
)

LATEST = pool_rules("0.33.0")

CFG = Config(block=8, split_block=4, hash_block=4, prompt=32, max_sched=64, lookahead=1)
"""B = 8, G = 4, k = L = 1 (S = 1): the attention group reserves one lookahead slot."""


def test_a_prefill_in_mamba_blocks_holds_two_state_blocks_at_most() -> None:
    """Ends 8, 16, 32 with k = 1 draft token: attention holds cdiv(e + 1, 4) blocks (rule 1); Mamba
    S + 1 = 2 after the first chunk and one more state block at each later chunk that enters
    a new Mamba block, the one of two chunks back freed first (rule 2)."""
    calls = lone_allocations(CFG, [8, 8, 16], 64, 1 << 20, LATEST)
    assert [c.held for c in calls] == [(3, 2), (5, 3), (9, 3)]
    assert [c.asked for c in calls] == [5, 3, 5]
    assert all(c.granted for c in calls)
    assert calls[-1].free == 64 - 1 - 9 - 3


def test_the_pool_refuses_a_chunk_beyond_its_free_blocks() -> None:
    """Rule 3: with 9 blocks (8 free beside the null block) the second chunk asks 3 of the 3
    left after the first chunk's 5 and is granted; the third asks 5 of the 1 left (after the
    old state block is freed) and is refused, the request holding what it held."""
    calls = lone_allocations(CFG, [8, 8, 16], 9, 1 << 20, LATEST)
    assert [c.granted for c in calls] == [True, True, False]
    assert calls[-1].held == (5, 2) and calls[-1].free == 1


def test_max_model_len_caps_the_lookahead_slots() -> None:
    """Rule 1: the slot past the prompt is not reserved when the prompt is max_model_len."""
    calls = lone_allocations(CFG, [32], 64, 32, LATEST)
    assert calls[0].held == (8, 2)


@pytest.mark.parametrize(
    ("minor", "minimum"),
    [(15, 1), (17, 1), (23, 12), (28, 12), (29, 13), (34, 13)],
)
def test_the_startup_minimum_by_release(minor: int, minimum: int) -> None:
    """Rule 4 for a prompt of 32 (max_model_len 33): 9 attention blocks + 2 + S Mamba blocks;
    0.29 on add the null block, 0.23-0.28 do not, 0.15-0.22 accept any pool."""
    assert pool_rules(f"0.{minor}.0").startup_pool(CFG) == minimum


def test_at_the_0_28_minimum_a_longest_request_is_refused_its_last_chunk() -> None:
    """The finding rule 4 states: 0.28's minimum for max_model_len 33 (12 blocks, 11 free)
    serves ends 8, 16, 24 but not 32, which needs 9 attention + 3 Mamba blocks; 0.29's (13)
    serves it."""
    chunks = [8, 8, 8, 8]
    v28, v29 = pool_rules("0.28.0"), pool_rules("0.29.0")
    at_028 = lone_allocations(CFG, chunks, v28.startup_pool(CFG), 33, v28)
    at_029 = lone_allocations(CFG, chunks, v29.startup_pool(CFG), 33, v29)
    assert [c.granted for c in at_028] == [True, True, True, False]
    assert all(c.granted for c in at_029) and len(at_029) == 4


def test_a_later_chunk_in_the_same_mamba_block_takes_no_state_block() -> None:
    """Rule 2: ends 8, 10, 12 with B = 8: the chunk to 10 enters Mamba block 2 and takes a state
    block, the chunk to 12 stays in it and takes none (the one of two chunks back is freed
    before it asks). Attention: cdiv(11, 4) = cdiv(9, 4), then cdiv(13, 4) one more."""
    calls = lone_allocations(CFG, [8, 2, 2], 64, 1 << 20, LATEST)
    assert [c.held[1] for c in calls] == [2, 3, 2]
    assert [c.asked for c in calls] == [5, 0 + 1, 1 + 0]


def test_a_first_chunk_the_pool_refuses_holds_nothing() -> None:
    """Rule 3 at admission: 2 blocks (1 free) cannot hold a first chunk's 3 + S + 1 blocks; the
    request then holds no block of either group."""
    (call,) = lone_allocations(CFG, [8, 8], 2, 1 << 20, LATEST)
    assert (call.granted, call.held, call.free) == (False, (0, 0), 1)


TAIL_7 = Config(block=8, split_block=2, prompt=7, max_sched=8)
"""h = G = 2 < B = 8, no drop: the tail T = 6 is keyed off the Mamba grid from 0.26."""


def test_the_tail_copy_by_release() -> None:
    """Rule 2b: the chunk starting at T = 6 asks no copy before 0.26, 2 blocks in 0.26-0.30
    and 1 from 0.31; a chunk starting elsewhere asks none."""
    releases = ("0.17.0", "0.24.0", "0.28.0", "0.30.0", "0.31.0", "0.33.0")
    assert [pool_rules(v).tail_copy(TAIL_7, 6) for v in releases] == [0, 0, 2, 2, 1, 1]
    assert [pool_rules(v).tail_copy(TAIL_7, 4) for v in releases] == [0] * len(releases)


def test_copies_tail_is_some_chunk_start_asking_the_copy() -> None:
    """Rule 2b's prompt-level test (``copies_tail``, what rule 5's scope and the prover read)
    is the chunk-level copy asked at some start in [0, P), on random configurations."""
    rng = random.Random(7)
    checked = 0
    for _ in range(400):
        block = rng.choice((2, 4, 8))
        cfg = Config(
            block=block,
            split_block=rng.choice((1, 2, block)),
            hash_block=rng.choice((1, 2, 4, block)),
            prompt=rng.randint(1, 40),
            max_sched=64,
            lookahead=rng.randint(0, 2),
            drop=rng.choice((False, True)),
            hash_lookahead=rng.randint(0, 2),
        )
        for rules in POOL_RULES:
            starts = any(rules.tail_copy(cfg, start) > 0 for start in range(cfg.prompt))
            assert rules.copies_tail(cfg) == starts, (rules.releases, cfg)
            checked += starts
    assert checked > 0


def test_the_rules_say_where_they_stop() -> None:
    """0.17-0.25 with S >= 1 are not modelled, and their P8 judges nothing there; a request
    with a junction is outside P8's scope in every release, one with internal checkpoints and
    partial hits too (0.15-0.28 have no checkpoints)."""
    speculative = CFG.replace(prompt=9)
    for version in ("0.17.0", "0.20.0", "0.24.0"):
        rules = pool_rules(version)
        assert not pool_modelled(rules, speculative)
        assert pool_modelled(rules, speculative.replace(lookahead=0))
        assert not rules.refused(speculative, 0, 9)
    assert pool_modelled(pool_rules("0.15.0"), speculative)
    tight = TAIL_7.replace(prompt=9)
    assert pool_rules("0.28.0").refused(tight, 8, 9)
    assert not pool_rules("0.28.0").refused(
        tight.replace(checkpoints=True, checkpoint_alignment=1), 8, 9
    )
    assert not pool_rules("0.28.0").refused(tight.replace(junction=1), 8, 9)
    assert pool_rules("0.24.0").refused(tight, 8, 9)
    assert not pool_rules("0.33.0").refused(TAIL_7, 6, 6)  # no chunk, nothing asked
    with_checkpoints = CHECKPOINTED.replace(split_block=2)
    assert with_checkpoints.partial_hits
    assert not pool_modelled(pool_rules("0.33.0"), with_checkpoints)
    assert not pool_rules("0.30.0").refused(with_checkpoints, 4, 13)
    assert not pool_modelled(pool_rules("0.28.0"), CHECKPOINTED.replace(lookahead=0))


CHECKPOINTED = Config(
    block=4, prompt=13, max_sched=9, lookahead=1, checkpoints=True, checkpoint_alignment=1
)
"""B = G = H = 4, S = 1, K = 1 with alpha = 1, P = 13 (max_model_len 14)."""


def test_a_chunk_that_writes_a_checkpoint_by_release() -> None:
    """Rule 2c on [4, 13): its end's checkpoint position ck30(13, 4) = 12 is valid in it (4 is
    on the hash grid, cdiv(13, 4) - 2 = 2 > 0, 4 + 4 <= 12 < 13), so the manager reserves a
    checkpoint block from 0.30. The table grows by cdiv(13, 4) - cdiv(4, 4) = 3 blocks: 0.30
    asks all 3 and takes min(3, S + 2) = 3; 0.31 asks and takes 3 (its cap S + 2); 0.32 on ask
    and take 2. 0.29 reserves one at column cdiv(13, 4) - 2 = 2 when that is past the state and
    S speculative blocks the request holds (columns 0 to S): so with S = 1 it asks 2, with
    S = 2 only the state block's 1. A first chunk that writes one takes S + 2; the chunk
    [0, 4) writes none."""
    versions = ("0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0")
    rules = [pool_rules(v) for v in versions]
    assert [r.mamba_asked(CHECKPOINTED, 4, 13) for r in rules] == [2, 3, 3, 2, 2]
    assert [r.mamba_taken(CHECKPOINTED, 4, 13) for r in rules] == [2, 3, 3, 2, 2]
    assert rules[0].mamba_asked(CHECKPOINTED.replace(lookahead=2), 4, 13) == 1
    assert [r.mamba_asked(CHECKPOINTED, 0, 13) for r in rules] == [3, 3, 3, 3, 3]
    assert [r.mamba_asked(CHECKPOINTED, 0, 4) for r in rules] == [2, 2, 2, 2, 2]
    without = CHECKPOINTED.replace(checkpoints=False)
    assert [r.mamba_asked(without, 4, 13) for r in rules] == [1, 1, 1, 1, 1]


def test_the_checkpoint_block_is_beyond_the_startup_minimum_in_0_30_and_0_31() -> None:
    """The finding rule 2c states: the minimum for max_model_len 14 is cdiv(14, 4) + 2 + S + K
    + the null block = 9 blocks. After [0, 4) the request holds cdiv(4 + 1, 4) = 2 attention
    blocks and S + 1 = 2 Mamba blocks, so [4, 13) has 9 - 1 - 4 = 4 free and asks 2 attention
    blocks and the Mamba blocks of rule 2c: 5 in 0.30 and 0.31 (3 Mamba), 4 from 0.32, which
    fits."""
    refused = [pool_rules(v).refused(CHECKPOINTED, 4, 13) for v in ("0.30.0", "0.31.0")]
    served = [pool_rules(v).refused(CHECKPOINTED, 4, 13) for v in ("0.32.0", "0.34.0")]
    assert pool_rules("0.31.0").startup_pool(CHECKPOINTED) == 9
    assert refused == [True, True] and served == [False, False]
    calls = lone_allocations(CHECKPOINTED, [4, 9], 9, 14, pool_rules("0.30.0"))
    assert [(c.asked, c.granted) for c in calls] == [(2 + 2, True), (2 + 3, False)]


def test_the_first_chunk_has_every_block_but_the_null_one() -> None:
    """Rules 1-3 at admission: the first chunk's 3 + 2 blocks fit a pool of 6 (5 free beside
    the null block), not one of 5."""
    assert lone_allocations(CFG, [8], 6, 1 << 20, LATEST)[0].granted
    assert not lone_allocations(CFG, [8], 5, 1 << 20, LATEST)[0].granted


def test_an_unknown_release_gets_the_newest_rules() -> None:
    assert pool_rules(None) is pool_rules("0.99.0") is pool_rules("0.34.0")


def test_a_release_before_every_group_gets_the_oldest_rules() -> None:
    """As :func:`~chunkproof.spec.slots.kv_rules` does (0.15-0.29's rules below 0.15)."""
    assert pool_rules("0.14.0") is pool_rules("0.15.0") is POOL_RULES[0]


def test_a_tail_on_the_mamba_grid_is_not_copied() -> None:
    """Rule 2b copies a tail only off the grid: with P = 9 and h = 2 the tail of 0.26-0.31 is
    8 = B, whose state the running block keeps."""
    on_grid = TAIL_7.replace(prompt=9)
    assert [pool_rules(v).tail_copy(on_grid, 8) for v in ("0.28.0", "0.31.0")] == [0, 0]


def test_a_one_token_first_chunk_is_followed_like_any_other() -> None:
    """Rule 2 from c = 1: the chunk to 9 enters Mamba block 2 and takes a state block."""
    calls = lone_allocations(CFG, [1, 8], 64, 1 << 20, LATEST)
    assert [c.held[1] for c in calls] == [2, 3]


def test_each_release_p8_is_its_own_rules() -> None:
    """P8's predicate of every release group (written in the subset, for the engines) is the
    composition of the group's own rules that the fidelity tests check: in its scope, the
    chunk asks (rules 1-2d and 2b) more than is free in the start-up minimum (rules 3-4), from
    c0 = 0 or from a local hit."""
    rng = random.Random(20_261_205)
    for rules in POOL_RULES:
        for _ in range(1000):
            block = rng.choice((4, 8))
            split = rng.choice((block, block // 2))
            cfg = Config(
                block=block,
                split_block=split,
                hash_block=rng.choice((split, split // 2)),
                prompt=rng.randint(1, 8 * block),
                max_sched=8,
                lookahead=rng.choice((0, 1, 2)),
                drop=rng.random() < 0.5,
                checkpoints=rng.random() < 0.5,
                checkpoint_alignment=rng.choice((1, block)),
                retention=rng.choice((-1, 0, block)),
            )
            unit = cfg.hash_block if cfg.partial_hits else cfg.sched_block
            if rng.random() < 0.5 and cfg.prompt > unit:
                cfg = cfg.replace(start=unit * rng.randint(1, (cfg.prompt - 1) // unit))
            low = cfg.start
            c = rng.choice((rng.randint(low, cfg.prompt - 1), low, max(low, cfg.prompt - block)))
            e = rng.choice((rng.randint(c, cfg.prompt), cfg.prompt))
            mml, pool = longest_model_len(cfg), rules.startup_pool(cfg)
            mamba = rules.mamba_asked(cfg, c, e) + rules.tail_copy(cfg, c)
            asked = asked_blocks(cfg, c, e, mml, mamba)
            want = rules.in_scope(cfg) and e > c and asked > free_blocks(cfg, c, pool, mml)
            assert rules.refused(cfg, c, e) == want, (rules.releases, cfg.describe(), c, e)


def test_the_first_chunk_at_a_seeded_partial_hit_by_hand() -> None:
    """Rule 2d at the tail T = 2 (h = 2 < B = G = 4, P = 3, 0.33): 1 attention block and 1 for
    the partial one, the hit's Mamba state block, no new one (the chunk stays in its Mamba
    block) and the tail copy: 4 blocks, with 3 of the minimum's 4 free; 5 blocks serve it."""
    cfg = Config(block=4, hash_block=2, prompt=3, max_sched=4, start=2)
    mamba = LATEST.mamba_asked(cfg, 2, 3) + LATEST.tail_copy(cfg, 2)
    assert (mamba, asked_blocks(cfg, 2, 3, 4, mamba)) == (2, 4)
    assert (LATEST.startup_pool(cfg), free_blocks(cfg, 2, 4, 4)) == (4, 3)
    assert LATEST.in_scope(cfg) and LATEST.refused(cfg, 2, 3)
    assert asked_blocks(cfg, 2, 3, 4, mamba) <= free_blocks(cfg, 2, 5, 4)


def test_a_hit_on_the_block_grid_fits_the_minimum_exactly() -> None:
    """Rule 2d at c0 = R* = 8 (B = G = 4, L = 1, P = 12): every attention block up to 13, the
    hit's state block and S + 1 new ones: 4 + 3 = 7, all the minimum of 8 leaves free."""
    cfg = Config(block=4, prompt=12, max_sched=4, lookahead=1, start=8)
    mamba = LATEST.mamba_asked(cfg, 8, 12)
    assert (mamba, asked_blocks(cfg, 8, 12, 13, mamba)) == (3, 7)
    assert free_blocks(cfg, 8, LATEST.startup_pool(cfg), 13) == 7
    assert LATEST.in_scope(cfg) and not LATEST.refused(cfg, 8, 12)


@pytest.mark.parametrize(
    ("release", "cfg", "why"),
    [
        ("0.33.0", Config(block=4, prompt=12, max_sched=4, start=4, retention=0), "mask"),
        ("0.33.0", Config(block=4, hash_block=2, prompt=13, max_sched=4, start=6), "not T"),
        ("0.30.0", Config(block=4, hash_block=2, prompt=3, max_sched=4, start=2), "seed"),
    ],
)
def test_a_hit_p8_does_not_judge(release: str, cfg: Config, why: str) -> None:
    """Outside rule 2d's scope: a column the retention mask drops, a partial hit that is not
    the prompt's tail, a seed the minimum cannot hold (0.30 copies the tail into 2 blocks)."""
    rules = pool_rules(release)
    assert not rules.in_scope(cfg), why
    assert not rules.refused(cfg, cfg.start, cfg.prompt), why


@pytest.mark.parametrize("release", ["0.30.0", "0.31.0"])
def test_a_first_chunk_that_writes_a_checkpoint_takes_s_plus_2(release: str) -> None:
    """Rule 2c, 0.30-0.31: the first chunk [0, 20) (B = 16, L = 1, alpha = 4) writes a
    checkpoint and asks and takes S + 2 = 3 Mamba blocks, the checkpoint block beside rule 2's
    S + 1, though it spans only 2 blocks (the cap min(d, S + 2) is a later chunk's); the
    releases' own allocate_slots ask 5 blocks with the 2 attention ones and hold 3 Mamba."""
    cfg = Config(block=16, prompt=70, max_sched=64, lookahead=1, checkpoints=True)
    cfg = cfg.replace(checkpoint_alignment=4, retention=16)
    rules = pool_rules(release)
    assert rules.checkpoint(cfg, 0, 20) == 1
    assert (rules.mamba_asked(cfg, 0, 20), rules.mamba_taken(cfg, 0, 20)) == (3, 3)


@pytest.mark.parametrize(
    ("lookahead", "prompt", "start", "least"),
    [(1, 12, 4, 8), (1, 16, 8, 9), (2, 12, 4, 9), (2, 16, 8, 10)],
)
def test_the_least_pool_a_seed_fits_in(lookahead: int, prompt: int, start: int, least: int) -> None:
    """KV2 rule 2d: the fewest blocks in which the identical request's chunks [0, c0) and
    [c0, P) both get theirs, its S = L speculative Mamba blocks held across them (measured on
    the real 0.33.0 tree's allocate_slots: it refuses the seed below these pools;
    ``tests/test_kv_hit_fidelity.py`` checks random ones)."""
    cfg = Config(block=4, prompt=prompt, max_sched=8, lookahead=lookahead, drop=False)
    cfg = cfg.replace(start=start)
    fits = [
        n for n in range(2, 32) if seed_fits(cfg, n, pool_rules("0.33.0").tail_copy(cfg, start))
    ]
    assert fits[0] == least


def test_a_hit_no_identical_request_leaves_is_outside_the_shared_pool() -> None:
    """SPEC KV2 rule 5f: on 0.33, T = 5, B = 4, c0 = 4, the seed [0, 4), [4, 5) fits the least
    pool either way, but under the EAGLE drop (L = 1) an identical request's resend lands a
    block lower, at 0: no identical request leaves the hit 4, so P8's scope and the shared
    pool's leave the request out; without the drop it lands at 4 and both take it."""
    rules = pool_rules("0.33.0")
    for drop in (False, True):
        cfg = Config(block=4, prompt=5, max_sched=8, start=4, lookahead=1, drop=drop)
        assert seed_fits(cfg, rules.startup_pool(cfg), 0)
        assert rules.in_scope(cfg) is not drop
        reason = outside_shared_pool(rules, cfg)
        assert (reason is None) is not drop
    assert reason is not None and "identical request" in reason


@pytest.mark.parametrize(
    "changes", [{"tokens": 10}, {"junction": 6}, {"checkpoints": True}], ids=str
)
def test_a_seeded_hit_is_judged_only_as_rule_2d_has_it(changes: dict[str, object]) -> None:
    """P8's scope and the shared pool's (rule 5f) take 0.33's T = 9 admitted at the hit c0 = 4
    an identical request leaves, and leave it out once it is not rule 2d's request though its
    seed still fits: T > P, a junction, or internal checkpoints."""
    rules = pool_rules("0.33.0")
    cfg = Config(block=4, prompt=9, max_sched=8, start=4, lookahead=1)
    assert rules.in_scope(cfg) and outside_shared_pool(rules, cfg) is None
    changed = cfg.replace(**changes)
    assert seed_fits(changed, rules.startup_pool(changed), 0)
    assert not rules.in_scope(changed) and outside_shared_pool(rules, changed) is not None


EXTERNAL = Config(block=4, prompt=13, max_sched=16, start=8, external=8)
"""B = G = 4, S = 0, admitted at a connector's external hit x = c0 = 8 (KV2 rule 2e)."""


def test_an_external_hit_takes_a_block_more_than_it_counts() -> None:
    """Rule 2e: the chunk [8, 12) counts its 3 attention blocks and S + 1 = 1 Mamba block, and
    takes one more for the state the connector loaded at 8; in a pool of 5 (4 free) the count
    passes and the take does not, so P8's rule judges it broken; with 5 free it holds, as in
    0.33's least pool (7). A chunk [9, 12) from x = 9 ends in x's Mamba block and takes what
    it counts; a local hit at 8 (rule 2d) counts its hit's cached state block and takes no
    more."""
    mamba = LATEST.mamba_asked(EXTERNAL, 8, 12)
    assert (asked_blocks(EXTERNAL, 8, 12, 14, mamba), external_miscount(EXTERNAL, 8, 12)) == (4, 1)
    assert pool_refuses(EXTERNAL, 8, 12, 5, mamba) and not pool_refuses(EXTERNAL, 8, 12, 6, mamba)
    assert LATEST.in_scope(EXTERNAL) and not LATEST.refused(EXTERNAL, 8, 12)
    within = EXTERNAL.replace(start=9, external=9)
    assert external_miscount(within, 9, 12) == 0
    local = EXTERNAL.replace(external=0)
    assert external_miscount(local, 8, 12) == 0
    assert asked_blocks(local, 8, 12, 14, LATEST.mamba_asked(local, 8, 12)) == 5


def test_the_least_pool_of_0_28_raises_at_an_external_hit() -> None:
    """0.23-0.28's least pool counts the null block among the request's (rule 4): at x = 4,
    T = 5, B = 4 the chunk [4, 5) counts 3 of the 3 free and takes 4, so P8 judges it broken
    there and not from 0.29, whose least pool has a block more."""
    cfg = Config(block=4, prompt=5, max_sched=1, start=4, external=4)
    assert pool_rules("0.28.0").in_scope(cfg) and pool_rules("0.28.0").refused(cfg, 4, 5)
    assert pool_rules("0.29.0").in_scope(cfg) and not pool_rules("0.29.0").refused(cfg, 4, 5)


def test_a_tail_at_the_prompts_end_is_no_chunk_start() -> None:
    """KV2 rule 2b: with fine hits (h = 2 < B = 4) the tail of P = 6 is 6 itself, off the Mamba
    grid, where no chunk starts: no release's rules ask a copy there (rule 5 keeps the request);
    one token more (P = 7, tail 6) and they do."""
    at_end = Config(block=4, hash_block=2, partial_hits=True, prompt=6, max_sched=8)
    before = at_end.replace(prompt=7)
    for copies in (copies_tail_v26, copies_tail_v31, copies_tail_v32):
        assert (copies(at_end), copies(before)) == (False, True), copies.__name__


def test_the_scope_words_name_the_hits_from_0_23() -> None:
    """P8's scope in words (:attr:`~chunkproof.spec.kv_blocks.PoolRules.scope_words`) names the
    local hit an identical prompt left and a connector's external hit from 0.23, where the
    rules admit them (KV2 rules 2d and 2e), and neither before."""
    assert "external hit x = c0" in pool_rules("0.23.0").scope_words
    assert "external hit" not in pool_rules("0.22.0").scope_words
