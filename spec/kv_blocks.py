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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from chunkproof.model.arith import cdiv
from chunkproof.model.config import Config
from chunkproof.model.errors import ConfigError
from chunkproof.spec.slots import (
    release_minor,
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


def mamba_new_blocks(cfg: Config, start: int, end: int) -> int:
    """KV2 rule 2: a first chunk (``start`` 0) takes S + 1 Mamba blocks, S = k = L the
    speculative ones (vLLM's Mamba layers set ``num_speculative_blocks`` to
    ``num_speculative_tokens``) and the state block; a later chunk takes one more state block
    when it ends in a later Mamba block than the chunk before it did, else none."""
    if start == 0:
        return cfg.lookahead + 1
    if cdiv(end, cfg.block) > cdiv(start, cfg.block):
        return 1
    return 0


def asked_blocks(cfg: Config, start: int, end: int, max_model_len: int, tail_copy: int) -> int:
    """KV2 rules 1-2b: the blocks the chunk [start, end) asks of the pool, ``tail_copy`` the
    copy-on-write blocks of rule 2b."""
    held = 0
    if start > 0:
        held = attention_blocks(cfg, start, max_model_len)
    new = attention_blocks(cfg, end, max_model_len) - held
    return new + mamba_new_blocks(cfg, start, end) + tail_copy


def free_blocks(cfg: Config, start: int, pool: int, max_model_len: int) -> int:
    """KV2 rules 2-3: the free blocks of a pool of ``pool`` when the chunk starting at
    ``start`` asks: all but the null block at first; later the attention blocks up to
    ``start`` and S + 1 Mamba blocks are held (the state block of two chunks back was freed)."""
    if start == 0:
        return pool - 1
    return pool - 1 - attention_blocks(cfg, start, max_model_len) - cfg.lookahead - 1


def no_tail_copy(cfg: Config, start: int) -> int:
    """KV2 rule 2b before 0.26: no tail is keyed, so nothing is copied."""
    return 0


def tail_copy_v26(cfg: Config, start: int) -> int:
    """KV2 rule 2b, 0.26-0.30: a chunk starting at the tail T (0.26-0.30's) off the Mamba grid
    asks 2 blocks for the copy of the tail state (and takes 1, returned at the step's end)."""
    if start % cfg.block != 0 and start == tail_position_v26(cfg):
        return 2
    return 0


def tail_copy_v31(cfg: Config, start: int) -> int:
    """KV2 rule 2b, 0.31: 1 block at 0.31's tail T off the Mamba grid."""
    if start % cfg.block != 0 and start == tail_position_v31(cfg):
        return 1
    return 0


def tail_copy_v32(cfg: Config, start: int) -> int:
    """KV2 rule 2b, 0.32 on: 1 block at the tail T of 0.32 on off the Mamba grid."""
    if start % cfg.block != 0 and start == tail_position(cfg):
        return 1
    return 0


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
    """KV2 rule 4, 0.29 on, for max_model_len = P + 1: 0.23's count and the null block."""
    return startup_pool_v23(cfg) + 1


def pool_in_scope(cfg: Config) -> bool:
    """SPEC P8's scope, where KV2's rules hold: a request admitted at c = 0 with no hit (local
    or external), T = P, no prefill checkpoints, no junction."""
    if cfg.start > 0 or cfg.external > 0 or cfg.tokens > cfg.prompt:
        return False
    return not cfg.checkpoints and cfg.junction == 0


def pool_in_scope_without_speculative(cfg: Config) -> bool:
    """SPEC P8's scope under 0.17-0.25: :func:`pool_in_scope` and L = 0 (S >= 1 is not
    modelled there, :func:`pool_modelled`)."""
    return cfg.lookahead == 0 and pool_in_scope(cfg)


def pool_refuses(cfg: Config, start: int, end: int, pool: int, tail_copy: int) -> bool:
    """SPEC P8 for the chunk [start, end) in a pool of ``pool`` blocks, max_model_len = P + 1:
    the chunk asks more blocks than are free (KV2 rule 3). Judged within the rules' scope only
    (:func:`pool_in_scope`)."""
    if end <= start or not pool_in_scope(cfg):
        return False
    asked = asked_blocks(cfg, start, end, longest_model_len(cfg), tail_copy)
    return asked > free_blocks(cfg, start, pool, longest_model_len(cfg))


def refused_v15(cfg: Config, c: int, e: int) -> bool:
    """P8 under 0.15-0.16 (KV2 rule 4: any pool starts)."""
    return pool_refuses(cfg, c, e, any_pool(cfg), no_tail_copy(cfg, c))


def refused_v17(cfg: Config, c: int, e: int) -> bool:
    """P8 under 0.17-0.22: as 0.15, S >= 1 not judged (:func:`pool_modelled`)."""
    if not pool_in_scope_without_speculative(cfg):
        return False
    return pool_refuses(cfg, c, e, any_pool(cfg), no_tail_copy(cfg, c))


def refused_v23(cfg: Config, c: int, e: int) -> bool:
    """P8 under 0.23-0.25 (the start-up minimum without the null block), S >= 1 not judged."""
    if not pool_in_scope_without_speculative(cfg):
        return False
    return pool_refuses(cfg, c, e, startup_pool_v23(cfg), no_tail_copy(cfg, c))


def refused_v26(cfg: Config, c: int, e: int) -> bool:
    """P8 under 0.26-0.28: 0.23's minimum and the tail copy of 0.26."""
    return pool_refuses(cfg, c, e, startup_pool_v23(cfg), tail_copy_v26(cfg, c))


def refused_v29(cfg: Config, c: int, e: int) -> bool:
    """P8 under 0.29-0.30: the minimum with the null block and the tail copy of 0.26."""
    return pool_refuses(cfg, c, e, startup_pool_v29(cfg), tail_copy_v26(cfg, c))


def refused_v31(cfg: Config, c: int, e: int) -> bool:
    """P8 under 0.31: the tail copy of 0.31."""
    return pool_refuses(cfg, c, e, startup_pool_v29(cfg), tail_copy_v31(cfg, c))


def refused_v32(cfg: Config, c: int, e: int) -> bool:
    """P8 under 0.32 on: the tail copy of 0.32 on."""
    return pool_refuses(cfg, c, e, startup_pool_v29(cfg), tail_copy_v32(cfg, c))


# -- the rules per release ------------------------------------------------------------------


@dataclass(frozen=True)
class PoolRules:
    """A release group's pool rules (SPEC KV2): its tail copy (rule 2b), its start-up minimum
    for max_model_len = P + 1 (rule 4), its P8 predicate, and whether the rules cover S >= 1
    (P8's scope is then :func:`pool_in_scope`, else :func:`pool_in_scope_without_speculative`)."""

    releases: str
    first_minor: int
    tail_copy: Callable[[Any, int], int]
    startup_pool: Callable[[Any], int]
    refused: Callable[[Any, int, int], bool]
    speculative: bool = True

    @property
    def in_scope(self) -> Callable[[Any], bool]:
        """P8's scope under these rules: the configurations whose chunks it judges."""
        return pool_in_scope if self.speculative else pool_in_scope_without_speculative

    @property
    def scope_words(self) -> str:
        """:attr:`in_scope` in words."""
        speculative = "" if self.speculative else ", L = 0"
        return f"c0 = 0 with no hit, T = P, no internal checkpoints, no junction{speculative}"


POOL_RULES = (
    PoolRules("0.15-0.16", 15, no_tail_copy, any_pool, refused_v15),
    PoolRules("0.17-0.22", 17, no_tail_copy, any_pool, refused_v17, False),
    PoolRules("0.23-0.25", 23, no_tail_copy, startup_pool_v23, refused_v23, False),
    PoolRules("0.26-0.28", 26, tail_copy_v26, startup_pool_v23, refused_v26),
    PoolRules("0.29-0.30", 29, tail_copy_v26, startup_pool_v29, refused_v29),
    PoolRules("0.31", 31, tail_copy_v31, startup_pool_v29, refused_v31),
    PoolRules("0.32-0.34", 32, tail_copy_v32, startup_pool_v29, refused_v32),
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
    """Whether ``grid`` may hold a configuration in P8's scope (:func:`pool_refuses`): an
    admission at c0 = 0, T = P, no internal checkpoints, no junction. Read from its value
    sets; a set this cannot read is taken to allow it. A range of no such grid gets no P8
    verdict (a range with nothing in scope is never PROVED)."""
    sets = grid.sets

    def allows_zero(values: Any) -> bool:
        numbers = getattr(values, "numbers", None)
        return "0" in getattr(values, "kinds", ("0",)) or (numbers is not None and numbers.low == 0)

    tokens = sets["tokens"]
    prompt_itself = any(
        t.base == "prompt" and t.mul == t.div == 1 and t.low <= 0 <= t.high
        for t in getattr(tokens, "terms", ())
    )
    tokens_allow = prompt_itself or getattr(tokens, "numbers", True) is not None
    no_checkpoints = False in sets["checkpoints"].values({})
    return (
        allows_zero(sets["start"])
        and allows_zero(sets["junction"])
        and tokens_allow
        and no_checkpoints
    )


def pool_modelled(rules: PoolRules, cfg: Config) -> bool:
    """Whether rules 1-3 cover ``cfg`` under ``rules``: not 0.17-0.25 with speculative blocks
    (S >= 1), whose Mamba group frees on c - S tokens, so that an old state block can stay
    held a chunk longer depending on the chunk before the last; that needs more state than c
    and is not modelled."""
    return rules.speculative or cfg.lookahead == 0


def lone_allocations(
    cfg: Config,
    chunks: Sequence[int],
    num_blocks: int,
    max_model_len: int,
    rules: PoolRules,
) -> list[Allocation]:
    """KV2 rules 1-3 along ``chunks`` from c = 0 over a pool of ``num_blocks`` blocks: an
    :class:`Allocation` per chunk, up to the first the pool refuses (the same functions P8
    judges with). The blocks a tail copy takes are back in the pool by the chunk's end."""
    if not pool_modelled(rules, cfg):
        raise ConfigError(f"the pool model does not cover {rules.releases} with L >= 1")
    calls: list[Allocation] = []
    start = 0
    for chunk in chunks:
        end = start + chunk
        asked = asked_blocks(cfg, start, end, max_model_len, rules.tail_copy(cfg, start))
        free = free_blocks(cfg, start, num_blocks, max_model_len)
        granted = asked <= free
        if granted:
            attention = attention_blocks(cfg, end, max_model_len)
            mamba = cfg.lookahead + 1 + (mamba_new_blocks(cfg, start, end) if start > 0 else 0)
        else:
            attention = attention_blocks(cfg, start, max_model_len) if start > 0 else 0
            mamba = cfg.lookahead + 1 if start > 0 else 0
        after = num_blocks - 1 - attention - mamba
        calls.append(Allocation(asked, granted, after, (attention, mamba)))
        if not granted:
            break
        start = end
    return calls
