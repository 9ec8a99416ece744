"""Fidelity of KV2 rule 2e: a lone request admitted at a KV connector's external hit x = c0,
against each release's own ``KVCacheManager`` (0.23 on; before, any external hit trips the
split's assert, SPEC KV3).

A synchronous load passes x to ``allocate_slots`` with the request's first chunk
(:class:`chunkproof.source.kv_alloc_run.TreeAllocator`; release code is trusted in tests). At
every chunk the blocks the release counts and the free blocks when it counts must be the
model's (:func:`~chunkproof.spec.kv_blocks.asked_blocks`,
:func:`~chunkproof.spec.kv_blocks.free_blocks`), and the outcome must be the model's: refused
where it counts more than are free, and where it counts enough but takes the model's
:func:`~chunkproof.spec.kv_blocks.external_miscount` more than are free, the pool's
``get_new_blocks`` raises. Every release raises on some drawn case, and, beside a running
request, in the least pool it starts with. An asynchronous load
(:meth:`~chunkproof.source.kv_alloc_run.TreeAllocator.park`) takes the same blocks in two
calls, each counted exactly: it never raises (the miscount is the synchronous load's).
"""

from __future__ import annotations

import random

import pytest
from test_kv_alloc_fidelity import scheduled_chunks
from test_kv_hit_fidelity import asks
from test_kv_lookup_fidelity import RELEASES, draw_config, minor_of

from chunkproof.model.arith import cdiv
from chunkproof.model.builtin import policy_for_release
from chunkproof.model.config import Config
from chunkproof.source.kv_alloc_run import (
    PoolExhausted,
    TreeAllocator,
    allocation_tree,
    fresh_request,
    kv_manager,
    schedule_chunk,
)
from chunkproof.source.releases import release_root
from chunkproof.spec.kv_blocks import (
    asked_blocks,
    external_miscount,
    free_blocks,
    held_in_list,
    pool_rules,
    taken_blocks,
)
from chunkproof.spec.slots import eagle_drop

pytestmark = pytest.mark.fidelity

SEED = 20_261_208
CASES = 100
LOADING = [v for v in RELEASES if minor_of(v) >= 23]
"""The releases whose split takes an external hit (SPEC KV3)."""


def external_config(rng: random.Random, version: str) -> Config:
    """A configuration the release accepts in P8's scope, admitted at an external hit x = c0:
    half of them on the Mamba block grid (where a connector's hit lands), the rest anywhere in
    (0, P)."""
    policy, rules = policy_for_release(version), pool_rules(version)
    while True:
        cfg = draw_config(rng, version)
        cfg = cfg.replace(max_sched=rng.randint(1, 3 * cfg.block), checkpoints=False)
        if cfg.prompt < 2:
            continue
        x = rng.randint(1, cfg.prompt - 1)
        if rng.random() < 0.5 and cfg.prompt > cfg.block:
            x = cfg.block * rng.randint(1, (cfg.prompt - 1) // cfg.block)
        cfg = cfg.replace(start=x, external=x)
        if policy.accepts(cfg) is None and rules.in_scope(cfg):
            return cfg


def least_whole(cfg: Config, max_model_len: int) -> int:
    """A pool that holds the whole request with room to spare: its attention blocks, S + 2
    Mamba blocks and the null block."""
    return cdiv(max_model_len + cfg.lookahead, cfg.split_block) + cfg.lookahead + 3


@pytest.mark.parametrize("version", LOADING)
def test_an_external_hit_asks_and_takes_what_rule_2e_says(version: str) -> None:
    """Chunk by chunk from a synchronous external hit the release counts, finds free and
    grants, refuses or raises as rule 2e says; some drawn case raises on every release (the
    count misses the loaded state's block)."""
    rng = random.Random(f"{SEED}-external-{version}")
    policy, root, rules = policy_for_release(version), release_root(version), pool_rules(version)
    wrong: list[str] = []
    raised = refused = checked = 0
    while checked < CASES:
        cfg = external_config(rng, version)
        chunks = scheduled_chunks(policy, cfg, rng)
        if chunks is None:
            continue
        checked += 1
        max_model_len = cfg.prompt + 1
        pool = rng.randint(2, least_whole(cfg, max_model_len))
        allocator = TreeAllocator(root, cfg, eagle_drop(cfg), pool, max_model_len)
        seen = asks(allocator)
        start = cfg.start
        for chunk in chunks:
            end = start + chunk
            mamba = rules.mamba_asked(cfg, start, end) + rules.tail_copy(cfg, start)
            asked = asked_blocks(cfg, start, end, max_model_len, mamba)
            free = free_blocks(cfg, start, pool, max_model_len)
            taken = taken_blocks(cfg, start, end, max_model_len, mamba)
            got = allocator.allocate(chunk)
            outcome = "raised" if got.raised else "granted" if got.granted else "refused"
            want = "refused" if asked > free else "raised" if taken > free else "granted"
            if seen[-1] != (asked, free) or outcome != want:
                wrong.append(
                    f"{cfg.describe()} N={pool} chunk [{start}, {end}): real count/free "
                    f"{seen[-1]} {outcome}, model {(asked, free)} {want}"
                )
                break
            if outcome != "granted":
                raised += outcome == "raised"
                refused += outcome == "refused"
                break
            start = end
    assert not wrong, f"{len(wrong)} of {CASES}: " + "; ".join(wrong[:6])
    assert raised > 0 and refused > 0, (raised, refused)


@pytest.mark.parametrize("version", LOADING)
def test_an_asynchronous_load_counts_every_block_it_takes(version: str) -> None:
    """Parked for an asynchronous load (no new tokens, no lookahead slots, the keys delayed),
    then given its first chunk once the load is done, a request takes no block either call
    did not count, so neither can make the pool raise; where both are granted it then holds
    what a synchronous load of the same hit holds after that chunk. (The first chunk after the
    load may be refused where the synchronous one is not: at the prompt's tail it asks rule
    2b's copy of the state the load cached.) The synchronous load, in the same draws, takes
    more than it counts on some."""
    rng = random.Random(f"{SEED}-async-{version}")
    policy, root = policy_for_release(version), release_root(version)
    wrong: list[str] = []
    checked = miscounted = 0
    while checked < CASES:
        cfg = external_config(rng, version)
        chunks = scheduled_chunks(policy, cfg, rng)
        if chunks is None:
            continue
        checked += 1
        max_model_len = cfg.prompt + 1
        pool = least_whole(cfg, max_model_len)
        loaded = TreeAllocator(root, cfg, eagle_drop(cfg), pool, max_model_len)
        seen = asks(loaded)
        parked = loaded.park()
        first = loaded.allocate(chunks[0]) if parked.granted else parked
        counted = [count for count, _ in seen]
        taken = [pool - 1 - parked.free, parked.free - first.free]
        if parked.raised or first.raised or not parked.granted or counted[:1] < taken[:1]:
            wrong.append(f"{cfg.describe()} N={pool}: the load {parked}, counted {counted}")
        elif first.granted and counted[1] < taken[1]:
            wrong.append(f"{cfg.describe()} N={pool}: the first chunk counted {counted[1]}")
        synchronous = TreeAllocator(root, cfg, eagle_drop(cfg), pool, max_model_len)
        seen_at_once = asks(synchronous)
        at_once = synchronous.allocate(chunks[0])
        miscounted += at_once.granted and pool - 1 - at_once.free > seen_at_once[-1][0]
        if at_once.granted and first.granted and first.held != at_once.held:
            wrong.append(f"{cfg.describe()} N={pool}: {first.held} held, {at_once.held} at once")
    assert not wrong, f"{len(wrong)} of {CASES}: " + "; ".join(wrong[:6])
    assert miscounted > 0, miscounted


@pytest.mark.parametrize("version", LOADING)
def test_beside_a_running_request_the_least_pool_raises_at_an_external_hit(version: str) -> None:
    """Rule 2e in a shared pool: in the least pool the release starts with for max_model_len =
    17 (B = G = 4, L = 0), a fresh request A of 16 tokens runs a first chunk that leaves as many
    blocks free as a request B of 5 tokens at the external hit x = 4 counts for its chunk
    [4, 5) (rules 1-2e); B's admission passes the whole-sequence test and the count, then
    takes one more block, and the pool raises, on every release 0.23-0.34. With one block more
    it is granted."""
    rules = pool_rules(version)
    a_cfg = Config(block=4, prompt=16, max_sched=16)
    b_cfg = Config(block=4, prompt=5, max_sched=16, start=4, external=4)
    asked = asked_blocks(b_cfg, 4, 5, 17, rules.mamba_asked(b_cfg, 4, 5))
    assert external_miscount(b_cfg, 4, 5) == 1
    least = rules.startup_pool(a_cfg)
    chunk = next(c for c in range(4, 17, 4) if least - 1 - held_in_list(a_cfg, c, 0, 17) == asked)
    tree = allocation_tree(release_root(version))
    for pool, want in ((least, "raised"), (least + 1, "granted")):
        manager = kv_manager(tree, a_cfg, False, pool, 17)
        assert schedule_chunk(manager, fresh_request(a_cfg, "a", tree), chunk, 0)
        b = fresh_request(b_cfg, "b", tree)
        try:
            granted = manager.allocate_slots(
                b, 1, num_external_computed_tokens=4, full_sequence_must_fit=True
            )
            outcome = "granted" if granted is not None else "refused"
        except PoolExhausted:
            outcome = "raised"
        assert outcome == want, (version, pool, chunk, outcome)
