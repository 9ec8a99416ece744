"""The KV block pool a lone request's prefill draws on (SPEC KV2), per release: how many blocks
each chunk asks of the pool and holds per KV cache group, whether the pool grants it, and the
smallest pool each release's start-up check accepts.

The model's hybrid cache has two groups on one pool of N blocks, as vLLM's hybrid models share
it: full attention of block G and Mamba in "align" mode of block B. Block 0 of the pool is the
null block, never handed out. The rules hold for a request admitted at c = 0 with no prefix
hit, scheduled synchronously (every chunk computed before the next is scheduled) and with no
prefill checkpoint blocks (K = 0); ``tests/test_kv_alloc_fidelity.py`` checks them against
each release's own ``KVCacheManager.allocate_slots`` (:mod:`chunkproof.source.kv_alloc_run`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chunkproof.model.arith import cdiv
from chunkproof.model.config import Config
from chunkproof.model.errors import ConfigError
from chunkproof.spec.slots import kv_rules


@dataclass(frozen=True)
class Allocation:
    """One chunk's ``allocate_slots`` (SPEC KV2 rule 3): the blocks it asks of the pool,
    whether the pool grants them, the free blocks after it and the blocks the request then
    holds per group (attention, Mamba)."""

    asked: int
    granted: bool
    free: int
    held: tuple[int, int]


def attention_blocks(cfg: Config, end: int, max_model_len: int) -> int:
    """KV2 rule 1: after a chunk ending at ``end`` the attention group holds a block of G for
    every token up to the end plus the lookahead slots, capped at ``max_model_len``. The slots
    are the scheduler's ``num_lookahead_tokens``: the k = L draft tokens (0 without a
    drafter)."""
    return cdiv(min(end + cfg.lookahead, max_model_len), cfg.split_block)


def speculative_blocks(cfg: Config) -> int:
    """S, the Mamba group's ``num_speculative_blocks``: vLLM's Mamba layers set it to
    ``num_speculative_tokens``, k = L."""
    return cfg.lookahead


def mamba_new_blocks(cfg: Config, start: int, end: int) -> int:
    """KV2 rule 2: a first chunk (``start`` 0) takes S + 1 Mamba blocks (the state block and
    the speculative ones); a later chunk takes one more state block when it ends in a later
    Mamba block than the chunk before it did, else none."""
    if start == 0:
        return speculative_blocks(cfg) + 1
    return int(cdiv(end, cfg.block) > cdiv(start, cfg.block))


def tail_copy_blocks(cfg: Config, version_minor: int, start: int) -> int:
    """KV2 rule 2b: the blocks a chunk starting at ``start`` asks beyond rules 1-2 for the
    copy-on-write of the prompt's tail state. The chunk before it ended at the tail T (rule 7,
    :func:`~chunkproof.spec.slots.kv_rules`) off the Mamba grid, so the Mamba group keyed that
    state in the block the next chunk overwrites, and copies it first (0.26 on). 0.26-0.30 ask
    2 blocks for it and 0.31 on ask 1; either way one block is taken and the step returns it
    to the pool at its end (a cached block counts as free)."""
    if version_minor < 26 or start <= 0 or start % cfg.block == 0:
        return 0
    if start != kv_rules(f"0.{version_minor}").tail(cfg):
        return 0
    return 2 if version_minor <= 30 else 1


def pool_modelled(version_minor: int, cfg: Config) -> bool:
    """Whether rules 1-3 cover ``cfg`` under the release: not 0.17-0.25 with speculative
    blocks (S >= 1), whose Mamba group frees on c - S tokens, so that an old state block can
    stay held a chunk longer depending on the chunk before the last; that needs more state
    than c and is not modelled."""
    return not (17 <= version_minor <= 25 and speculative_blocks(cfg) >= 1)


def lone_allocations(
    cfg: Config,
    chunks: Sequence[int],
    num_blocks: int,
    max_model_len: int,
    version_minor: int,
) -> list[Allocation]:
    """KV2 rules 1-3 along ``chunks`` from c = 0 over a pool of ``num_blocks`` blocks: an
    :class:`Allocation` per chunk, up to the first the pool refuses. Before each later chunk
    the Mamba state block of two chunks back is freed (``remove_skipped_blocks``), so the
    request holds S + 1 Mamba blocks when it asks; the pool grants iff the blocks asked are at
    most the free ones (no watermark: nothing else is scheduled)."""
    if not pool_modelled(version_minor, cfg):
        raise ConfigError(f"the pool model does not cover 0.{version_minor} with L >= 1")
    held_attention = 0
    held_mamba = 0
    calls: list[Allocation] = []
    start = 0
    for chunk in chunks:
        end = start + chunk
        if start > 0:
            held_mamba = speculative_blocks(cfg) + 1
        free = num_blocks - 1 - held_attention - held_mamba
        attention = attention_blocks(cfg, end, max_model_len)
        mamba = mamba_new_blocks(cfg, start, end)
        asked = attention - held_attention + mamba + tail_copy_blocks(cfg, version_minor, start)
        granted = asked <= free
        if granted:
            free -= attention - held_attention + mamba
            held_mamba += mamba
            held_attention = attention
        calls.append(Allocation(asked, granted, free, (held_attention, held_mamba)))
        if not granted:
            break
        start = end
    return calls


def startup_minimum(version_minor: int, cfg: Config, max_model_len: int) -> int:
    """KV2 rule 4: the fewest blocks a release's start-up check accepts for ``max_model_len``
    (``num_gpu_blocks_override`` included). 0.15-0.22 check only the first KV cache group
    and apply the override after the check, so any pool with its null block passes (1);
    0.23-0.28 need a block of G per token of the longest request plus 2 + S Mamba blocks, the
    null block not counted among them; 0.29 on reserve the null block besides (K = 0)."""
    needed = cdiv(max_model_len, cfg.split_block) + 2 + speculative_blocks(cfg)
    if version_minor < 23:
        return 1
    if version_minor < 29:
        return needed
    return needed + 1
