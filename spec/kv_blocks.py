"""The KV block pool a lone request's prefill draws on (SPEC KV2), per release: how many blocks
each chunk asks of the pool and holds per KV cache group, whether the pool grants it, and the
smallest pool each release's start-up check accepts.

The model's hybrid cache has two groups on one pool of N blocks, as vLLM's hybrid models share
it: full attention of block G and Mamba in "align" mode of block B. Block 0 of the pool is the
null block, never handed out. The rules hold for a lone request scheduled synchronously (every
chunk computed before the next is scheduled): admitted at c = 0 with no prefix hit, with a
prefill checkpoint block (K = 1, rule 2c) without partial hits; or admitted at a local hit an
identical request's prefill left in the same pool (rule 2d), without checkpoints.
``tests/test_kv_alloc_fidelity.py`` and ``tests/test_kv_hit_fidelity.py`` check them against
each release's own ``KVCacheManager.allocate_slots`` (:mod:`chunkproof.source.kv_alloc_run`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from chunkproof.model.arith import cdiv, ck30, ck32, ck33, fl, valid
from chunkproof.model.config import Config
from chunkproof.model.errors import ConfigError
from chunkproof.spec.slots import (
    checkpoint_at_v29,
    eagle_drop,
    hit_unit,
    release_minor,
    seeded_hit_v15,
    seeded_hit_v28,
    seeded_hit_v30,
    seeded_hit_v31,
    seeded_hit_v32,
    seeded_hit_v33,
    tail_position,
    tail_position_v26,
    tail_position_v31,
)
from chunkproof.spec.space import Grid


@dataclass(frozen=True)
class Allocation:
    """One chunk's ``allocate_slots`` (SPEC KV2 rule 3): the blocks it asks of the pool,
    whether the pool grants them, the free blocks after it and the blocks the request then
    holds per group (attention, Mamba)."""

    asked: int
    granted: bool
    free: int
    held: tuple[int, int]


# -- the rules, in the policy subset (the engines evaluate P8 from them) ---------------------


def attention_blocks(cfg: Config, end: int, max_model_len: int) -> int:
    """KV2 rule 1: after a chunk ending at ``end`` the attention group holds a block of G for
    every token up to the end plus the lookahead slots, capped at ``max_model_len``. The slots
    are the scheduler's ``num_lookahead_tokens``: the k = L draft tokens (0 without a
    drafter)."""
    return cdiv(min(end + cfg.lookahead, max_model_len), cfg.split_block)


def at_hit(cfg: Config, start: int) -> bool:
    """Whether the chunk starting at ``start`` is the first of a request admitted at a prefix
    hit (c0 > 0): a local one (KV2 rule 2d) or a connector's (rule 2e)."""
    return start > 0 and start == cfg.start


def at_external_hit(cfg: Config, start: int) -> bool:
    """KV2 rule 2e: whether the chunk starting at ``start`` is the first of a request whose
    whole hit c0 is external, x = c0 (a KV connector's, loaded synchronously: the waiting loop
    passes x to ``allocate_slots`` with the chunk)."""
    return at_hit(cfg, start) and cfg.external == start


def external_miscount(cfg: Config, start: int, end: int) -> int:
    """KV2 rule 2e: the blocks the chunk [start, end) takes beyond what it asks. At an external
    hit the Mamba group counts at most S + 1 new blocks (``physical_block_cap`` of a request
    that has none), but ``allocate_new_computed_blocks`` first takes a block for the loaded
    state at x, and ``allocate_new_blocks`` then takes S + 1 more when the chunk ends in a
    later Mamba block than x's: one block more than counted there (1), else none (0). Where
    the free blocks cover the count and not that block, ``BlockPool.get_new_blocks`` raises
    (``ValueError``: the engine core is down)."""
    if at_external_hit(cfg, start) and spanned_blocks(cfg, start, end) > 0:
        return 1
    return 0


def connector_hit(cfg: Config) -> int:
    """KV2 rule 5g: the hit a KV connector offers a waiting request, loaded synchronously with
    its first chunk: x = c0 for :func:`admitted_external`'s request, at its first admission
    and again after a preemption (vLLM asks the connector whenever the request has computed
    nothing), else 0."""
    if admitted_external(cfg):
        return cfg.external
    return 0


def not_yet_admitted(cfg: Config, c: int) -> bool:
    """KV2 rule 5g: whether a waiting request at c is taken as never admitted, so that nothing
    of it is cached locally: a connector's request at c = c0 = x (the state does not record
    it; one admitted at 0 and preempted at exactly x is taken so too)."""
    return c == cfg.start and connector_hit(cfg) > 0


def resume_grid(cfg: Config) -> int:
    """KV2 rule 5e: the grid a resume hit lies on, where a lookup can land (its alignment A:
    h with fine hits, else B_s, slot note 6 rule 1) and, in rule 5's scope, the Mamba group
    keys a state (a chunk end on its block B, R1; the prompt's tail is on B too or asks a
    copy, which rule 5 leaves out): B with fine hits (h divides B), else B_s (a multiple of
    B)."""
    if cfg.partial_hits:
        return cfg.block
    return cfg.sched_block


def resume_hit_top(cfg: Config, c: int) -> int:
    """KV2 rule 5e: the largest local hit a preempted request that computed c tokens can resume
    at, the last point of its :func:`resume_grid` at most min(c, T - 1) (the lookup leaves one
    token to compute); it resumes at any point of the grid from 0 to there. 0 for a request
    :func:`not_yet_admitted` (rule 5g)."""
    if not_yet_admitted(cfg, c):
        return 0
    return fl(min(c, cfg.tokens - 1), resume_grid(cfg))


def mamba_new_blocks(cfg: Config, start: int, end: int) -> int:
    """KV2 rule 2: a first chunk (``start`` 0) takes S + 1 Mamba blocks, S = k = L the
    speculative ones (vLLM's Mamba layers set ``num_speculative_blocks`` to
    ``num_speculative_tokens``) and the state block; a later chunk takes one more state block
    when it ends in a later Mamba block than the chunk before it did, else none. Without a
    prefill checkpoint (rule 2c) this is both what the chunk asks and what it takes.

    Rule 2d: the first chunk at a local hit asks the hit's state block (cached, so free in the
    pool and counted) and the new blocks it needs past the hit's, at most S + 1:
    1 + min(max(cdiv(end, B) + S - cdiv(hit, B), 0), S + 1). Rule 2e: at an external hit it
    asks S + 1, the cap of a request that holds none (it takes
    :func:`external_miscount` more)."""
    if start == 0 or at_external_hit(cfg, start):
        return cfg.lookahead + 1
    if at_hit(cfg, start):
        past = max(cdiv(end, cfg.block) + cfg.lookahead - cdiv(start, cfg.block), 0)
        return 1 + min(past, cfg.lookahead + 1)
    if cdiv(end, cfg.block) > cdiv(start, cfg.block):
        return 1
    return 0


def no_checkpoint(cfg: Config, start: int, end: int) -> int:
    """KV2 rule 2c before 0.29: no backend exports prefill checkpoints (SPEC S1b)."""
    return 0


def checkpoint_gate(cfg: Config, start: int, end: int, position: int, prefill_end: int) -> int:
    """KV2 rule 2c: whether the Mamba manager reserves a checkpoint block for the chunk [start,
    end) (``_needs_internal_checkpoint`` from 0.30): the backend exports prefill checkpoints
    (K), the chunk reaches ``prefill_end`` and the backend can export ``position`` in it
    (``is_mamba_prefill_checkpoint_valid`` with the hash block H and the Mamba block B). For a
    request that has taken no block before its chunk, the block-table test that follows holds
    whenever that one does. 1 when it reserves one, else 0."""
    if not cfg.checkpoints or end < prefill_end:
        return 0
    if valid(start, end, position, cfg.hash_block, cfg.block, cfg.checkpoint_alignment):
        return 1
    return 0


def checkpoint_v29(cfg: Config, start: int, end: int) -> int:
    """Rule 2c, 0.29: 1 when the chunk reserves a checkpoint block
    (:func:`~chunkproof.spec.slots.checkpoint_at_v29`: it starts on the Mamba grid, ends off
    it, and column cdiv(end, B) - 2 is past the blocks the request holds), else 0."""
    if checkpoint_at_v29(cfg, start, end) >= 0:
        return 1
    return 0


def checkpoint_v30(cfg: Config, start: int, end: int) -> int:
    """Rule 2c, 0.30: the position is ck30(end, H, drop), keyed on the chunk's end."""
    return checkpoint_gate(cfg, start, end, ck30(end, cfg.hash_block, eagle_drop(cfg)), 0)


def prefill_end_gate(cfg: Config) -> int:
    """Rule 2c from 0.31: the chunk must reach the prompt's end when the retention interval is 0
    (the manager's ``prefill_end``, which the coordinator zeroes for any other interval)."""
    if cfg.retention == 0:
        return cfg.prompt
    return 0


def checkpoint_v31(cfg: Config, start: int, end: int) -> int:
    """Rule 2c, 0.31: 0.30's position and the prefill-end gate."""
    position = ck30(end, cfg.hash_block, eagle_drop(cfg))
    return checkpoint_gate(cfg, start, end, position, prefill_end_gate(cfg))


def checkpoint_v32(cfg: Config, start: int, end: int) -> int:
    """Rule 2c, 0.32: ck32 on the cache-hit grid (B_s without partial hits)."""
    position = ck32(end, hit_unit(cfg), eagle_drop(cfg))
    return checkpoint_gate(cfg, start, end, position, prefill_end_gate(cfg))


def checkpoint_v33(cfg: Config, start: int, end: int) -> int:
    """Rule 2c, 0.33 on: ck33, which keeps the position L_h tokens clear of the end."""
    position = ck33(end, hit_unit(cfg), eagle_drop(cfg), cfg.hash_lookahead)
    return checkpoint_gate(cfg, start, end, position, prefill_end_gate(cfg))


def spanned_blocks(cfg: Config, start: int, end: int) -> int:
    """The Mamba blocks the chunk [start, end) ends past its start's: cdiv(end, B) - cdiv(start,
    B), what a running request's block table grows by (``num_required_blocks`` less the
    blocks it holds)."""
    return cdiv(end, cfg.block) - cdiv(start, cfg.block)


def kept_in_place(cfg: Config, start: int, end: int, checkpoint: int) -> int:
    """Rule 2c, 0.30-0.31: the Mamba blocks the chunk takes. A later chunk that writes a
    checkpoint leaves its S speculative blocks where they are and takes up to S + 2 new ones
    (the checkpoint, the state and S speculative); any other chunk takes rule 2's blocks and
    the checkpoint block."""
    if checkpoint == 1 and start > 0:
        return min(spanned_blocks(cfg, start, end), cfg.lookahead + 2)
    return mamba_new_blocks(cfg, start, end) + checkpoint


def asked_v30(cfg: Config, start: int, end: int) -> int:
    """Rule 2c, 0.30: what the chunk asks of the Mamba group. A later chunk that writes a
    checkpoint asks every block its table grows by, uncapped (``not (checkpoint_block and
    blocks_allocated)``)."""
    checkpoint = checkpoint_v30(cfg, start, end)
    if checkpoint == 1 and start > 0:
        return spanned_blocks(cfg, start, end)
    return mamba_new_blocks(cfg, start, end) + checkpoint


def taken_v30(cfg: Config, start: int, end: int) -> int:
    """Rule 2c, 0.30: what the chunk takes (:func:`kept_in_place`)."""
    return kept_in_place(cfg, start, end, checkpoint_v30(cfg, start, end))


def blocks_v31(cfg: Config, start: int, end: int) -> int:
    """Rule 2c, 0.31: the ask is capped at what the chunk takes (``physical_block_cap``), so
    both are :func:`kept_in_place`."""
    return kept_in_place(cfg, start, end, checkpoint_v31(cfg, start, end))


def blocks_v29(cfg: Config, start: int, end: int) -> int:
    """Rule 2c, 0.29: the speculative blocks move past the checkpoint, so a chunk that writes
    one asks and takes rule 2's blocks and the checkpoint block."""
    return mamba_new_blocks(cfg, start, end) + checkpoint_v29(cfg, start, end)


def blocks_v32(cfg: Config, start: int, end: int) -> int:
    """Rule 2c, 0.32: as 0.29 (the speculative blocks move past the checkpoint again), at
    0.32's checkpoint."""
    return mamba_new_blocks(cfg, start, end) + checkpoint_v32(cfg, start, end)


def blocks_v33(cfg: Config, start: int, end: int) -> int:
    """Rule 2c, 0.33 on: as 0.32, at 0.33's position."""
    return mamba_new_blocks(cfg, start, end) + checkpoint_v33(cfg, start, end)


def asked_blocks(cfg: Config, start: int, end: int, max_model_len: int, mamba: int) -> int:
    """KV2 rules 1-2d: the blocks the chunk [start, end) asks of the pool, ``mamba`` what it
    asks of the Mamba group (rules 2, 2c and 2d) and the tail copy of rule 2b included. A
    later chunk asks the attention blocks past those it holds; a first chunk every one, at a
    local hit (rule 2d) the hit's too (cached, so free in the pool and counted) and one more
    when the hit ends inside a block of G (its partial block is copied); at an external hit
    (rule 2e) every one, new, with no partial block to copy."""
    if at_hit(cfg, start):
        return attention_blocks(cfg, end, max_model_len) + copied_partial(cfg, start) + mamba
    held = 0
    if start > 0:
        held = attention_blocks(cfg, start, max_model_len)
    return attention_blocks(cfg, end, max_model_len) - held + mamba


def copied_partial(cfg: Config, start: int) -> int:
    """KV2 rule 2d: 1 when the first chunk of a request admitted at the local hit ``start``
    copies the hit's partial block of G (the hit ends inside one), else 0; an external hit
    (rule 2e) has nothing cached to copy."""
    if at_hit(cfg, start) and not at_external_hit(cfg, start) and start % cfg.split_block != 0:
        return 1
    return 0


def taken_blocks(cfg: Config, start: int, end: int, max_model_len: int, mamba: int) -> int:
    """KV2 rules 1-2e: the blocks the chunk [start, end) takes, what it asks
    (:func:`asked_blocks`) and at an external hit :func:`external_miscount` more."""
    return asked_blocks(cfg, start, end, max_model_len, mamba) + external_miscount(cfg, start, end)


def held_in_list(cfg: Config, c: int, stale: int, max_model_len: int) -> int:
    """KV2 rules 1-2 and 5a: a request in the running list at c (it has computed at least one
    chunk) holds the attention blocks up to c plus its lookahead slots (rule 1), S + 1 Mamba
    blocks, and ``stale`` (0 or 1) more: the state block of its chunk before the last, which
    ``remove_skipped_blocks`` frees only when the request next calls ``allocate_slots`` (so
    a request asking holds none)."""
    return attention_blocks(cfg, c, max_model_len) + cfg.lookahead + 1 + stale


def free_blocks(cfg: Config, start: int, pool: int, max_model_len: int) -> int:
    """KV2 rules 2-3: the free blocks of a pool of ``pool`` when the chunk starting at
    ``start`` asks: all but the null block at first; later the attention blocks up to
    ``start`` and S + 1 Mamba blocks are held (the state block of two chunks back, and a
    checkpoint block, were freed: ``remove_skipped_blocks`` frees every block before the
    state's). At a local hit (rule 2d) all but the null block are free too: the blocks an
    identical request cached are free until the hit takes them; at an external hit (rule 2e)
    the request holds none yet."""
    if start == 0 or at_hit(cfg, start):
        return pool - 1
    return pool - 1 - held_in_list(cfg, start, 0, max_model_len)


def no_tail_copy(cfg: Config, start: int) -> int:
    """KV2 rule 2b before 0.26: no tail is keyed, so nothing is copied."""
    return 0


def copies_at_tail(cfg: Config, start: int, tail: int) -> bool:
    """KV2 rule 2b: whether the chunk starting at ``start`` copies the state of the prompt's
    tail ``tail``: it starts there, off the Mamba grid, and not at an external hit (rule 2e:
    the connector loaded that state into a block of the request's own; nothing cached is
    copied)."""
    return start == tail and start % cfg.block != 0 and not at_external_hit(cfg, start)


def tail_copy_v26(cfg: Config, start: int) -> int:
    """KV2 rule 2b, 0.26-0.30: a chunk starting at the tail T (0.26-0.30's) that copies its
    state (:func:`copies_at_tail`) asks 2 blocks for the copy (and takes 1, returned at the
    step's end)."""
    if copies_at_tail(cfg, start, tail_position_v26(cfg)):
        return 2
    return 0


def tail_copy_v31(cfg: Config, start: int) -> int:
    """KV2 rule 2b, 0.31: 1 block at 0.31's tail T (:func:`copies_at_tail`)."""
    if copies_at_tail(cfg, start, tail_position_v31(cfg)):
        return 1
    return 0


def tail_copy_v32(cfg: Config, start: int) -> int:
    """KV2 rule 2b, 0.32 on: 1 block at the tail T of 0.32 on (:func:`copies_at_tail`)."""
    if copies_at_tail(cfg, start, tail_position(cfg)):
        return 1
    return 0


def copies_no_tail(cfg: Config) -> bool:
    """KV2 rule 2b before 0.26: no chunk start copies a tail state."""
    return False


def copies_tail_v26(cfg: Config) -> bool:
    """KV2 rule 2b, 0.26-0.30: some chunk start in [0, P) asks the tail copy
    (:func:`tail_copy_v26` is above 0 only at the tail T, so: T < P and the copy there)."""
    tail = tail_position_v26(cfg)
    return tail < cfg.prompt and tail_copy_v26(cfg, tail) > 0


def copies_tail_v31(cfg: Config) -> bool:
    """KV2 rule 2b, 0.31: as :func:`copies_tail_v26` at 0.31's tail."""
    tail = tail_position_v31(cfg)
    return tail < cfg.prompt and tail_copy_v31(cfg, tail) > 0


def copies_tail_v32(cfg: Config) -> bool:
    """KV2 rule 2b, 0.32 on: as :func:`copies_tail_v26` at the tail of 0.32 on."""
    tail = tail_position(cfg)
    return tail < cfg.prompt and tail_copy_v32(cfg, tail) > 0


def any_pool(cfg: Config) -> int:
    """KV2 rule 4, 0.15-0.22: the start-up check reads the first KV cache group only and
    ``num_gpu_blocks_override`` is applied after it, so a pool of the null block alone starts."""
    return 1


def longest_model_len(cfg: Config) -> int:
    """The max_model_len P8 takes for a prompt of P tokens: P + 1, the least a generating
    request of P tokens needs (vLLM refuses a prompt of max_model_len tokens: it leaves no room
    for the one output token), so the smallest pool and its tightest fit."""
    return cfg.prompt + 1


def startup_pool_v23(cfg: Config) -> int:
    """KV2 rule 4, 0.23-0.28, for max_model_len = P + 1: a block of G per token plus 2 + S
    Mamba blocks, the null block counted among them."""
    return cdiv(longest_model_len(cfg), cfg.split_block) + 2 + cfg.lookahead


def startup_pool_v29(cfg: Config) -> int:
    """KV2 rule 4, 0.29 on, for max_model_len = P + 1: 0.23's count, the prefill checkpoint
    block K (``2 + S + K`` Mamba blocks) and the null block."""
    checkpoint = 1 if cfg.checkpoints else 0
    return startup_pool_v23(cfg) + checkpoint + 1


def admitted_external(cfg: Config) -> bool:
    """KV2 rule 2e's request: admitted at a hit c0 > 0 that a KV connector loads whole (x =
    c0, no local part), T = P, no junction, no internal checkpoints."""
    if cfg.external == 0 or cfg.external != cfg.start or cfg.tokens > cfg.prompt:
        return False
    return cfg.junction == 0 and not cfg.checkpoints


def admitted_fresh(cfg: Config) -> bool:
    """The request of KV2's rules: admitted at c = 0 with no hit (local or external), T = P,
    no junction."""
    if cfg.start > 0 or cfg.external > 0 or cfg.tokens > cfg.prompt:
        return False
    return cfg.junction == 0


def pool_in_scope(cfg: Config) -> bool:
    """SPEC P8's scope up to 0.28, where KV2's rules hold: :func:`admitted_fresh`, no prefill
    checkpoints (0.15-0.28 have none: SPEC S1b)."""
    return admitted_fresh(cfg) and not cfg.checkpoints


def pool_in_scope_with_checkpoints(cfg: Config) -> bool:
    """SPEC P8's scope from 0.29: :func:`admitted_fresh`, and prefill checkpoints (rule 2c)
    only without partial hits. With both, whether the chunk from the tail asks rule 2b's copy
    depends on whether the chunk before it wrote a checkpoint (the manager keys the
    checkpoint instead of the tail), which the request's c does not tell."""
    return admitted_fresh(cfg) and not (cfg.checkpoints and cfg.partial_hits)


def seed_fits(cfg: Config, pool: int, copy: int) -> bool:
    """KV2 rule 2d's seed: the identical request's chunks [0, c0) and [c0, P) each get their
    blocks in a pool of ``pool`` blocks by rules 1-3 (no checkpoints; ``copy`` the tail copy
    its second chunk asks, rule 2b), so it finished in the pool the request then finds."""
    start = cfg.start
    mml = longest_model_len(cfg)
    held = attention_blocks(cfg, start, mml)
    first = held + cfg.lookahead + 1
    state = 1 if cdiv(cfg.prompt, cfg.block) > cdiv(start, cfg.block) else 0
    later = attention_blocks(cfg, cfg.prompt, mml) - held + state + copy
    return first <= pool - 1 and later <= pool - 1 - held - cfg.lookahead - 1


def admission_in_scope(cfg: Config, fresh: bool, seeded: bool, pool: int, copy: int) -> bool:
    """SPEC P8's scope from 0.23: a fresh admission the release's rules cover (``fresh``), KV2
    rule 2e's request (:func:`admitted_external`: an external hit, x = c0), or rule 2d's:
    admitted at a local hit c0 that an identical request's prefill left (``seeded``:
    :func:`~chunkproof.spec.slots.lands_at_start` under the release's cache rules, which also
    needs R* to be checked there) in the release's start-up minimum ``pool``, which held that
    request (:func:`seed_fits`, ``copy`` its tail copy); T = P, no junction, no internal
    checkpoints."""
    if fresh or admitted_external(cfg):
        return True
    if not seeded or cfg.tokens > cfg.prompt or cfg.junction > 0 or cfg.checkpoints:
        return False
    return seed_fits(cfg, pool, copy)


def pool_in_scope_without_speculative(cfg: Config) -> bool:
    """SPEC P8's scope under 0.17-0.22: :func:`pool_in_scope` and L = 0 (S >= 1 is not
    modelled there, :func:`pool_modelled`). As in 0.15-0.16, no hit is in scope: any pool
    starts, and the smallest, the null block alone, holds no seed (:func:`seed_fits`)."""
    return cfg.lookahead == 0 and pool_in_scope(cfg)


def scope_v23(cfg: Config) -> bool:
    """P8's scope under 0.23-0.25 (:func:`admission_in_scope`), with L = 0 (S >= 1 is not
    modelled there, :func:`pool_modelled`)."""
    judged = admission_in_scope(
        cfg, pool_in_scope(cfg), seeded_hit_v15(cfg), startup_pool_v23(cfg), 0
    )
    return cfg.lookahead == 0 and judged


def scope_tail_copy(cfg: Config, seeded: bool) -> bool:
    """P8's scope under 0.26-0.28 (:func:`admission_in_scope`), 0.26's tail copy, ``seeded`` the
    release's seeded hit."""
    copy = tail_copy_v26(cfg, cfg.start)
    return admission_in_scope(cfg, pool_in_scope(cfg), seeded, startup_pool_v23(cfg), copy)


def scope_v26(cfg: Config) -> bool:
    """P8's scope under 0.26-0.27 (:func:`scope_tail_copy`)."""
    return scope_tail_copy(cfg, seeded_hit_v15(cfg))


def scope_v28(cfg: Config) -> bool:
    """P8's scope under 0.28 (:func:`scope_tail_copy`): its seeded hit takes
    ``num_reprefillable_tokens`` into R* (SPEC KV1)."""
    return scope_tail_copy(cfg, seeded_hit_v28(cfg))


def scope_v29(cfg: Config) -> bool:
    """P8's scope under 0.29 (:func:`admission_in_scope`), checkpoints at c0 = 0."""
    fresh = pool_in_scope_with_checkpoints(cfg)
    copy = tail_copy_v26(cfg, cfg.start)
    return admission_in_scope(cfg, fresh, seeded_hit_v28(cfg), startup_pool_v29(cfg), copy)


def scope_v30(cfg: Config) -> bool:
    """P8's scope under 0.30: as 0.29, the hit seeded under 0.30's cache rules."""
    fresh = pool_in_scope_with_checkpoints(cfg)
    copy = tail_copy_v26(cfg, cfg.start)
    return admission_in_scope(cfg, fresh, seeded_hit_v30(cfg), startup_pool_v29(cfg), copy)


def scope_v31(cfg: Config) -> bool:
    """P8's scope under 0.31: as 0.29, 0.31's cache rules and tail copy."""
    fresh = pool_in_scope_with_checkpoints(cfg)
    copy = tail_copy_v31(cfg, cfg.start)
    return admission_in_scope(cfg, fresh, seeded_hit_v31(cfg), startup_pool_v29(cfg), copy)


def scope_v32(cfg: Config) -> bool:
    """P8's scope under 0.32: as 0.29, 0.32's cache rules and tail copy."""
    fresh = pool_in_scope_with_checkpoints(cfg)
    copy = tail_copy_v32(cfg, cfg.start)
    return admission_in_scope(cfg, fresh, seeded_hit_v32(cfg), startup_pool_v29(cfg), copy)


def scope_v33(cfg: Config) -> bool:
    """P8's scope under 0.33 on: as 0.32, 0.33's cache rules."""
    fresh = pool_in_scope_with_checkpoints(cfg)
    copy = tail_copy_v32(cfg, cfg.start)
    return admission_in_scope(cfg, fresh, seeded_hit_v33(cfg), startup_pool_v29(cfg), copy)


def pool_refuses(cfg: Config, start: int, end: int, pool: int, mamba: int) -> bool:
    """SPEC P8 for the chunk [start, end) in a pool of ``pool`` blocks, max_model_len = P + 1:
    the chunk needs more blocks than are free (KV2 rule 3), ``mamba`` what it asks of the
    Mamba group (rules 2-2c). It needs what it asks, and at an external hit
    :func:`external_miscount` more (rule 2e): the release refuses it when it asks more, and
    raises when only the miscount is short. Each release's predicate judges it within its
    scope only."""
    if end <= start:
        return False
    taken = taken_blocks(cfg, start, end, longest_model_len(cfg), mamba)
    return taken > free_blocks(cfg, start, pool, longest_model_len(cfg))


def refused_v15(cfg: Config, c: int, e: int) -> bool:
    """P8 under 0.15-0.16 (KV2 rule 4: any pool starts)."""
    if not pool_in_scope(cfg):
        return False
    return pool_refuses(cfg, c, e, any_pool(cfg), mamba_new_blocks(cfg, c, e))


def refused_v17(cfg: Config, c: int, e: int) -> bool:
    """P8 under 0.17-0.22: as 0.15, S >= 1 not judged (:func:`pool_modelled`)."""
    if not pool_in_scope_without_speculative(cfg):
        return False
    return pool_refuses(cfg, c, e, any_pool(cfg), mamba_new_blocks(cfg, c, e))


def refused_v23(cfg: Config, c: int, e: int) -> bool:
    """P8 under 0.23-0.25 (the start-up minimum without the null block), S >= 1 not judged."""
    if not scope_v23(cfg):
        return False
    return pool_refuses(cfg, c, e, startup_pool_v23(cfg), mamba_new_blocks(cfg, c, e))


def refuses_tail_copy(cfg: Config, c: int, e: int) -> bool:
    """P8's refusal under 0.26-0.28: 0.23's minimum and the tail copy of 0.26."""
    mamba = mamba_new_blocks(cfg, c, e) + tail_copy_v26(cfg, c)
    return pool_refuses(cfg, c, e, startup_pool_v23(cfg), mamba)


def refused_v26(cfg: Config, c: int, e: int) -> bool:
    """P8 under 0.26-0.27 (:func:`refuses_tail_copy`)."""
    return scope_v26(cfg) and refuses_tail_copy(cfg, c, e)


def refused_v28(cfg: Config, c: int, e: int) -> bool:
    """P8 under 0.28 (:func:`refuses_tail_copy`, 0.28's scope)."""
    return scope_v28(cfg) and refuses_tail_copy(cfg, c, e)


def refused_v29(cfg: Config, c: int, e: int) -> bool:
    """P8 under 0.29: the minimum with the null block, the tail copy of 0.26 and the checkpoint
    block of 0.29 (rule 2c)."""
    if not scope_v29(cfg):
        return False
    mamba = blocks_v29(cfg, c, e) + tail_copy_v26(cfg, c)
    return pool_refuses(cfg, c, e, startup_pool_v29(cfg), mamba)


def refused_v30(cfg: Config, c: int, e: int) -> bool:
    """P8 under 0.30: 0.29's and the checkpoint block of 0.30 (rule 2c)."""
    if not scope_v30(cfg):
        return False
    mamba = asked_v30(cfg, c, e) + tail_copy_v26(cfg, c)
    return pool_refuses(cfg, c, e, startup_pool_v29(cfg), mamba)


def refused_v31(cfg: Config, c: int, e: int) -> bool:
    """P8 under 0.31: the tail copy and the checkpoint block of 0.31."""
    if not scope_v31(cfg):
        return False
    mamba = blocks_v31(cfg, c, e) + tail_copy_v31(cfg, c)
    return pool_refuses(cfg, c, e, startup_pool_v29(cfg), mamba)


def refused_v32(cfg: Config, c: int, e: int) -> bool:
    """P8 under 0.32: the tail copy of 0.32 on and the checkpoint block of 0.32."""
    if not scope_v32(cfg):
        return False
    mamba = blocks_v32(cfg, c, e) + tail_copy_v32(cfg, c)
    return pool_refuses(cfg, c, e, startup_pool_v29(cfg), mamba)


def refused_v33(cfg: Config, c: int, e: int) -> bool:
    """P8 under 0.33 on: the tail copy of 0.32 on and the checkpoint block of 0.33."""
    if not scope_v33(cfg):
        return False
    mamba = blocks_v33(cfg, c, e) + tail_copy_v32(cfg, c)
    return pool_refuses(cfg, c, e, startup_pool_v29(cfg), mamba)


# -- several requests on one pool (rule 5), fresh and without checkpoints or tail copies ------


def shared_asked(cfg: Config, start: int, end: int, max_model_len: int) -> int:
    """KV2 rule 5c: what the chunk [start, end) asks of the shared pool once its stale block
    is freed: rules 1-2 (:func:`asked_blocks` with rule 2's Mamba blocks)."""
    return asked_blocks(cfg, start, end, max_model_len, mamba_new_blocks(cfg, start, end))


def leaves_stale(cfg: Config, start: int, end: int) -> int:
    """KV2 rule 5a: 1 when the chunk [start, end) leaves a stale state block, that is a later
    chunk that ends in a later Mamba block than the chunk before it (rule 2's new state
    block), else 0. The first chunk at a hit on the Mamba grid (rule 5e's resume) leaves the
    hit's state block stale: it ends in a later block. At a connector's hit (rule 5g) the
    block loaded at x is stale when the chunk ends past x's Mamba block, the block rule 2e's
    miscount takes (:func:`external_miscount`)."""
    if start == 0:
        return 0
    if at_external_hit(cfg, start):
        return external_miscount(cfg, start, end)
    if at_hit(cfg, start):
        return 1
    return mamba_new_blocks(cfg, start, end)


def no_admission_gate(cfg: Config, max_model_len: int) -> int:
    """KV2 rule 5b before 0.23: the waiting loop asks only for the first chunk's blocks."""
    return 0


def admission_gate(cfg: Config, max_model_len: int) -> int:
    """KV2 rule 5b, 0.23 on: the waiting loop admits a request only if the whole sequence
    fits (``full_sequence_must_fit``, on by default: ``scheduler_reserve_full_isl``): every
    attention block of its min(T, max_model_len) tokens, no lookahead slots, and S + 1 Mamba
    blocks (the Mamba manager caps a first allocation there). Admitted at a local hit (c0 > 0,
    rule 5e) it counts the hit's state block too: cached and free, so the test counts it, on
    top of the S + 1 cap (read from each release's manager, 0.23 on), and where the hit ends
    inside a block of G the copy of that partial block (rule 2d's); at a connector's hit
    (rule 5g: x = c0, no local part) there is no cached block to count."""
    hit = 1 if cfg.start > cfg.external else 0
    whole = cdiv(min(cfg.prompt, max_model_len), cfg.split_block)
    return whole + cfg.lookahead + 1 + hit + copied_partial(cfg, cfg.start)


# -- the rules per release ------------------------------------------------------------------


@dataclass(frozen=True)
class PoolRules:
    """A release group's pool rules (SPEC KV2): its tail copy (rule 2b), what a chunk asks of
    the Mamba group and what it takes there (rules 2 and 2c), whether it writes a prefill
    checkpoint (rule 2c), its start-up minimum for max_model_len = P + 1 (rule 4), its P8
    predicate and its scope (:attr:`in_scope`: a fresh admission, or from 0.23 a local hit an
    identical request's prefill left, rule 2d). ``covers`` is what the fresh admissions cover:
    ``"fresh"`` (:func:`pool_in_scope`), ``"no speculative"`` (0.17-0.25 do not cover S >= 1)
    or ``"checkpoints"`` (0.29 on cover K = 1)."""

    releases: str
    first_minor: int
    tail_copy: Callable[[Any, int], int]
    mamba_asked: Callable[[Any, int, int], int]
    mamba_taken: Callable[[Any, int, int], int]
    startup_pool: Callable[[Any], int]
    refused: Callable[[Any, int, int], bool]
    in_scope: Callable[[Any], bool]
    """P8's scope under these rules: the configurations whose chunks it judges."""
    covers: str = "fresh"
    checkpoint: Callable[[Any, int, int], int] = no_checkpoint
    """Rule 2c: 1 when the chunk [start, end) writes a prefill checkpoint, else 0."""
    admission: Callable[[Any, int], int] = no_admission_gate
    """Rule 5b: what the waiting loop's admission test asks for the whole sequence."""
    copies_tail: Callable[[Any], bool] = copies_no_tail
    """Rule 2b: whether some chunk start of the prompt asks :attr:`tail_copy`."""

    @property
    def speculative(self) -> bool:
        """Whether the rules cover S >= 1 (:func:`pool_modelled`)."""
        return self.covers != "no speculative"

    @property
    def checkpoints(self) -> bool:
        """Whether the rules cover prefill checkpoints (K = 1, rule 2c)."""
        return self.covers == "checkpoints"

    @property
    def scope_words(self) -> str:
        """:attr:`in_scope` in words."""
        fresh = "c0 = 0 with no hit, T = P, no junction"
        if self.first_minor >= 23:
            fresh = "c0 = 0 with no hit, a local hit an identical prompt's prefill left, or"
            fresh += " an external hit x = c0 a connector loads (T = P, no junction)"
        if self.checkpoints:
            return f"{fresh}, internal checkpoints only at c0 = 0 without partial hits"
        speculative = "" if self.speculative else ", L = 0"
        return f"{fresh}, no internal checkpoints{speculative}"


POOL_RULES = (
    PoolRules(
        "0.15-0.16",
        15,
        no_tail_copy,
        mamba_new_blocks,
        mamba_new_blocks,
        any_pool,
        refused_v15,
        pool_in_scope,
    ),
    PoolRules(
        "0.17-0.22",
        17,
        no_tail_copy,
        mamba_new_blocks,
        mamba_new_blocks,
        any_pool,
        refused_v17,
        pool_in_scope_without_speculative,
        "no speculative",
    ),
    PoolRules(
        "0.23-0.25",
        23,
        no_tail_copy,
        mamba_new_blocks,
        mamba_new_blocks,
        startup_pool_v23,
        refused_v23,
        scope_v23,
        "no speculative",
        admission=admission_gate,
    ),
    PoolRules(
        "0.26-0.27",
        26,
        tail_copy_v26,
        mamba_new_blocks,
        mamba_new_blocks,
        startup_pool_v23,
        refused_v26,
        scope_v26,
        admission=admission_gate,
        copies_tail=copies_tail_v26,
    ),
    PoolRules(
        "0.28",
        28,
        tail_copy_v26,
        mamba_new_blocks,
        mamba_new_blocks,
        startup_pool_v23,
        refused_v28,
        scope_v28,
        admission=admission_gate,
        copies_tail=copies_tail_v26,
    ),
    PoolRules(
        "0.29",
        29,
        tail_copy_v26,
        blocks_v29,
        blocks_v29,
        startup_pool_v29,
        refused_v29,
        scope_v29,
        "checkpoints",
        checkpoint_v29,
        admission=admission_gate,
        copies_tail=copies_tail_v26,
    ),
    PoolRules(
        "0.30",
        30,
        tail_copy_v26,
        asked_v30,
        taken_v30,
        startup_pool_v29,
        refused_v30,
        scope_v30,
        "checkpoints",
        checkpoint_v30,
        admission=admission_gate,
        copies_tail=copies_tail_v26,
    ),
    PoolRules(
        "0.31",
        31,
        tail_copy_v31,
        blocks_v31,
        blocks_v31,
        startup_pool_v29,
        refused_v31,
        scope_v31,
        "checkpoints",
        checkpoint_v31,
        admission=admission_gate,
        copies_tail=copies_tail_v31,
    ),
    PoolRules(
        "0.32",
        32,
        tail_copy_v32,
        blocks_v32,
        blocks_v32,
        startup_pool_v29,
        refused_v32,
        scope_v32,
        "checkpoints",
        checkpoint_v32,
        admission=admission_gate,
        copies_tail=copies_tail_v32,
    ),
    PoolRules(
        "0.33-0.34",
        33,
        tail_copy_v32,
        blocks_v33,
        blocks_v33,
        startup_pool_v29,
        refused_v33,
        scope_v33,
        "checkpoints",
        checkpoint_v33,
        admission=admission_gate,
        copies_tail=copies_tail_v32,
    ),
)
"""The groups in release order; 0.18-0.22 are taken to be 0.17 (not read)."""


def pool_rules(version: str | None) -> PoolRules:
    """The pool rules of vLLM ``version`` (``X.Y.Z``); a version this tool does not know gets
    the latest (as :func:`~chunkproof.spec.slots.kv_rules`)."""
    minor = release_minor(version)
    if minor is None:
        return POOL_RULES[-1]
    found = POOL_RULES[0]
    for rules in POOL_RULES:
        if rules.first_minor <= minor:
            found = rules
    return found


def in_scope_possible(grid: Grid) -> bool:
    """Whether ``grid`` may hold a configuration in P8's scope: an admission at c0 = 0, at a
    local hit or at an external one (:func:`admitted_fresh`, :func:`admission_in_scope`), T = P,
    no junction.
    Read from its value sets; a set this cannot read is taken to allow it. A range of no such
    grid gets no P8 verdict (a range with nothing in scope is never PROVED); the engines count
    each release's own scope (internal checkpoints and seeded hits included) and give EMPTY
    where none of a range is inside it."""
    sets = grid.sets

    def allows_zero(values: Any) -> bool:
        numbers = getattr(values, "numbers", None)
        return "0" in getattr(values, "kinds", ("0",)) or (numbers is not None and numbers.low == 0)

    starts = sets["start"]
    local = {"block", "hash", "external"} & set(getattr(starts, "kinds", ()))
    admits = allows_zero(starts) or bool(local) or getattr(starts, "numbers", None) is not None
    tokens = sets["tokens"]
    prompt_itself = any(
        t.base == "prompt" and t.mul == t.div == 1 and t.low <= 0 <= t.high
        for t in getattr(tokens, "terms", ())
    )
    tokens_allow = prompt_itself or getattr(tokens, "numbers", True) is not None
    return admits and allows_zero(sets["junction"]) and tokens_allow


def pool_modelled(rules: PoolRules, cfg: Config) -> bool:
    """Whether rules 1-3 cover ``cfg`` under ``rules``:
    - not 0.17-0.25 with speculative blocks (S >= 1), whose Mamba group frees on c - S tokens,
      so that an old state block can stay held a chunk longer depending on the chunk before
      the last; that needs more state than c and is not modelled;
    - prefill checkpoints (rule 2c) without partial hits
      (:func:`pool_in_scope_with_checkpoints`)."""
    if cfg.checkpoints and (cfg.partial_hits or not rules.checkpoints):
        return False
    return rules.speculative or cfg.lookahead == 0


def with_uncached_prefix(cfg: Config) -> bool:
    """Rule 5's scope: a prefix the request does not cache (``uncached_prefix``)."""
    return cfg.uncached_prefix > 0


def with_checkpoints(cfg: Config) -> bool:
    """Rule 5's scope: internal prefill checkpoints (rule 2c)."""
    return cfg.checkpoints


def with_speculative_blocks(cfg: Config) -> bool:
    """Rule 5's scope: S >= 1 speculative blocks, which 0.17-0.25's Mamba group frees on c - S
    tokens (:func:`pool_modelled`)."""
    return cfg.lookahead >= 1


class Exclusion(NamedTuple):
    """What rule 5's scope leaves out: the requests whose subset ``predicate`` is ``excluded``
    (``True``: those it holds for; ``False``: those outside a scope it states)."""

    reason: str
    predicate: Callable[[Any], bool]
    excluded: bool = True

    def leaves_out(self, cfg: Any) -> bool:
        """Whether this exclusion leaves ``cfg`` out."""
        return bool(self.predicate(cfg)) == self.excluded


def shared_pool_exclusions(rules: PoolRules) -> list[Exclusion]:
    """KV2 rule 5's scope under ``rules``, as what it leaves out besides encoder items (a
    request's item pattern, which the prover's cells fix), so the explorer
    (:func:`outside_shared_pool`) and the prover (its constraint) read one definition. Rule 5
    holds for a request without internal checkpoints whose pool the rules model
    (:func:`pool_modelled`), admitted fresh, at the local hit an identical request's prefill
    left in the least pool or, from 0.23, at a connector's hit x = c0 (P8's scope,
    :attr:`PoolRules.in_scope`, rules 2d and 2e: no junction, T = P; 0.15-0.22 hold no seed
    and admit no external hit), that caches its whole prompt and none of whose chunks asks a
    tail copy (rule 2b: the copy's block is back at the step's end)."""
    found = [Exclusion("internal prefill checkpoints", with_checkpoints)]
    if not rules.speculative:
        reason = f"L >= 1 under {rules.releases} (its Mamba group frees on c - S tokens)"
        found.append(Exclusion(reason, with_speculative_blocks))
    admitted = (
        "a request admitted otherwise than fresh, at the hit an identical request left or at a "
        "connector's hit x = c0"
    )
    found.append(Exclusion(admitted, rules.in_scope, excluded=False))
    found.append(Exclusion("an uncached prefix", with_uncached_prefix))
    found.append(Exclusion("a chunk start that copies the prompt's tail state", rules.copies_tail))
    return found


def outside_shared_pool(rules: PoolRules, cfg: Config) -> str | None:
    """Why rule 5 does not cover ``cfg`` under ``rules`` (``None``: it does): encoder items,
    or the first of :func:`shared_pool_exclusions` that holds."""
    if cfg.items:
        return "encoder items"
    for exclusion in shared_pool_exclusions(rules):
        if exclusion.leaves_out(cfg):
            return exclusion.reason
    return None


def lone_allocations(
    cfg: Config,
    chunks: Sequence[int],
    num_blocks: int,
    max_model_len: int,
    rules: PoolRules,
) -> list[Allocation]:
    """KV2 rules 1-3 along ``chunks`` of a fresh request (c0 = 0; rule 2d's first chunk at a
    hit is judged by the P8 predicates, its blocks held after it are not modelled) over a pool
    of ``num_blocks`` blocks: an :class:`Allocation` per chunk, up to the first the pool
    refuses (the same functions P8 judges with). The blocks a tail copy takes are back in the
    pool by the chunk's end; a checkpoint block is freed with the state of two chunks back,
    before the next chunk asks."""
    if not pool_modelled(rules, cfg) or cfg.start > 0:
        raise ConfigError(f"the pool model of {rules.releases} does not cover {cfg.describe()}")
    calls: list[Allocation] = []
    start = 0
    for chunk in chunks:
        end = start + chunk
        mamba = rules.mamba_asked(cfg, start, end) + rules.tail_copy(cfg, start)
        asked = asked_blocks(cfg, start, end, max_model_len, mamba)
        free = free_blocks(cfg, start, num_blocks, max_model_len)
        granted = asked <= free
        attention = attention_blocks(cfg, start, max_model_len) if start > 0 else 0
        held = cfg.lookahead + 1 if start > 0 else 0
        if granted:
            attention = attention_blocks(cfg, end, max_model_len)
            held += rules.mamba_taken(cfg, start, end)
        after = num_blocks - 1 - attention - held
        calls.append(Allocation(asked, granted, after, (attention, held)))
        if not granted:
            break
        start = end
    return calls
