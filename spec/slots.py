"""The slot oracle: which Mamba state each live prefix-cache key holds after one prefill.

Pure math over a chunk-end sequence, written rule by rule after the slot note
(``reference/state-slot-semantics.md``) section 6; its section 1 gives the notation (N, B, h, S,
A, T, col, ckpos) and sections 2-5 the vLLM 0.33.0 behaviour each rule stands for.

The rules a single chunk decides are functions of their own in the policy subset, over any
object with :class:`~chunkproof.model.config.Config`'s fields (a Config, a
:class:`SlotSetup`, or a view whose fields hold arrays or Z3 terms): :func:`poisons` (rule 5's
violation branch), :func:`checkpoint_at` (rule 4), :func:`resend_position`. SPEC P3 and P6
(:mod:`chunkproof.spec.properties`) call the very same functions, so the engines' step
predicates and the oracle cannot disagree.

Fields read (slot note symbol): ``prompt`` [N], ``tokens`` [num_tokens], ``block`` [B, the Mamba
group's block], ``hash_block`` [h], ``sched_block`` [S], ``partial_hits`` [fine],
``drop`` and ``hash_lookahead`` [drop is the *effective* EAGLE block drop: off whenever hash
lookahead is on], ``checkpoints`` and ``checkpoint_alignment`` [g; none unless both are set],
``retention`` [R; -1 stands for None], ``junction`` [J], ``start`` [s_0].

Reading notes (where the note's section 6 is terse, the reading chosen here):

* Rule 7's junction variant is part of R2, which is fine-grained only (section 3), like T.
* Rule 9 for R > 0 keeps the R grid *and* the reachable boundaries (R4: "additionally keep").
* Rule 10 only lands on claims that are multiples of A (section 5, "Reachability").
* Registration never starts above the column of a chunk's start (the frontier is at most
  floor(s/B) after any earlier step), so rule 5's violation branch is decided by the chunk alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise
from types import SimpleNamespace
from typing import Any

from chunkproof.model.arith import cdiv, ck30, ck32, ck33, fl, valid
from chunkproof.model.config import Config

__all__ = [
    "LATEST_RULES",
    "KvRules",
    "Poison",
    "SlotReport",
    "SlotSetup",
    "checkpoint_at",
    "crosses",
    "crossing_claim",
    "kv_rules",
    "oracle",
    "poisons",
    "poisons_v29",
    "release_minor",
    "resend_landing",
    "resend_position",
]


# -- the rules of one chunk, in the policy subset ----------------------------------------------


def eagle_drop(cfg: Config) -> bool:
    """drop: the EAGLE block drop, forced off by hash lookahead (slot note 1)."""
    return cfg.drop and cfg.hash_lookahead == 0


def hit_unit(cfg: Config) -> int:
    """A := h if fine else S (slot note 6 rule 1)."""
    if cfg.partial_hits:
        return cfg.hash_block
    return cfg.sched_block


def dropped_block_hit(cfg: Config, limit: int) -> int:
    """SPEC KV1, without fine hits under the EAGLE drop: the hit of a lookup that reads
    ``limit`` tokens. The full-attention group (block G, the split block) matches
    G*floor(limit/G), drops one of its own blocks, and the coordinator rounds that down to the
    alignment S: max(S*floor((G*floor(limit/G) - G)/S), 0), not S*floor(limit/S) - S when
    G < S (the Mamba group then holds the state there; checked against every release's
    coordinator)."""
    return max(fl(fl(limit, cfg.split_block) - cfg.split_block, cfg.sched_block), 0)


def resend_position(cfg: Config) -> int:
    """R* of 0.33 (SPEC KV1; slot note 5), where an identical resend lands: ck33(N, A, drop,
    L_h). The lookup is capped at N - 1, and an EAGLE group may look one drop unit past the
    candidate, up to the hashed length h*floor((N - L_h)/h), before dropping it; without fine
    hits under the drop that unit is the attention block G (:func:`dropped_block_hit` of N)."""
    if eagle_drop(cfg) and not cfg.partial_hits:
        return dropped_block_hit(cfg, cfg.prompt)
    return ck33(cfg.prompt, hit_unit(cfg), eagle_drop(cfg), cfg.hash_lookahead)


def resend_position_v32(cfg: Config) -> int:
    """R* of 0.32 (SPEC KV1; slot note 5): ck32(N, A, drop). As 0.33, without hash lookahead:
    an EAGLE group looks up to the hashed length N before its drop (without fine hits,
    :func:`dropped_block_hit` of N)."""
    if eagle_drop(cfg) and not cfg.partial_hits:
        return dropped_block_hit(cfg, cfg.prompt)
    return ck32(cfg.prompt, hit_unit(cfg), eagle_drop(cfg))


def resend_position_v15(cfg: Config) -> int:
    """R* of 0.15-0.31 (SPEC KV1; slot note 5): ck30(N, A, drop). The coordinator caps every
    group's lookup, the EAGLE group's included, at N - 1, then the EAGLE group drops a unit,
    so a block-aligned prompt resends to N - 2A, not N - A; without fine hits the unit is the
    attention block G (:func:`dropped_block_hit` of N - 1)."""
    if eagle_drop(cfg) and not cfg.partial_hits:
        return dropped_block_hit(cfg, cfg.prompt - 1)
    return ck30(cfg.prompt, hit_unit(cfg), eagle_drop(cfg))


def attention_hit(cfg: Config, cap: int) -> int:
    """SPEC KV1, under the EAGLE drop: the largest entry the full-attention group holds after a
    real prefill at most ``cap`` (the lookup's cap and the count the coordinator caches). The
    group keys its full blocks of G, and its partial tail h*floor(N/h) (``cache_partial_block``
    under EAGLE), not every hash-block end, whatever the chunk ends (checked against each
    release's own caching, ``tests/test_kv_resend_fidelity.py``)."""
    tail = fl(cfg.prompt, cfg.hash_block)
    if tail <= cap:
        return max(fl(cap, cfg.split_block), tail)
    return fl(cap, cfg.split_block)


def cached_count(cfg: Config) -> int:
    """The most tokens of the prompt the coordinator caches, 0.28 on: all but the last L - 1
    (``num_reprefillable_tokens``: multi-module MTP may re-prefill them)."""
    return cfg.prompt - max(cfg.lookahead - 1, 0)


def achievable_resend(cfg: Config, landing: int, tail: int, grid_tail: bool) -> int:
    """SPEC KV1, P6: R*, the largest position at most where the resend's lookup can land
    (``landing``) that a chunk end can leave live on the hit grid A (slot note 6 rules 5-7):
    a block end, the prompt's tail ``tail`` where its own copy keys it (off the grid with fine
    hits, or ``grid_tail``), the prompt's checkpoint with internal checkpoints, or the junction
    J with the exact shared-prefix checkpoint. No chunk end keys a position between them, so a
    chunk that runs over one loses nothing the cache could keep. A block end counts only up to
    the tokens the request's hashes cover (rule 3: with L_h > 0 a junction can lie past them)."""
    unit = hit_unit(cfg)
    best = fl(min(landing, hashed_tokens(cfg, landing)), cfg.block)
    own = grid_tail or cfg.partial_hits
    if own and tail <= landing and tail % unit == 0 and cacheable(cfg, tail) == tail:
        best = max(best, tail)
    checkpoint = prompt_checkpoint(cfg)
    checkpointed = cfg.checkpoints and cfg.checkpoint_alignment > 0
    if checkpointed and checkpoint <= landing and checkpoint % unit == 0:
        best = max(best, checkpoint)
    junction = cfg.junction
    exact = cfg.partial_hits and cfg.exact_junction and junction <= cfg.prompt
    if exact and 0 < junction <= landing and junction % unit == 0:
        best = max(best, junction)
    return best


def junction_landing(cfg: Config, tail: int, grid_tail: bool) -> int:
    """SPEC S-COVER: R*_J, where a sibling sharing the request's first J tokens can land after
    the request's prefill. J is the shared-prefix boundary the request's own lookup gave it
    (the attention group's longer hit, the EAGLE drop taken), so the sibling's lookup lands at
    most at J; R*_J is the largest position at most J a chunk end can leave live
    (:func:`achievable_resend` at J, ``tail`` and ``grid_tail`` the release's rule 7), 0
    without a junction."""
    if cfg.junction <= 0:
        return 0
    return achievable_resend(cfg, cfg.junction, tail, grid_tail)


def fine_landing(cfg: Config, cap: int) -> int:
    """Where the resend's lookup can land after a real prefill up to 0.31 (SPEC KV1), the
    attention group's hit capped at ``cap``: the lookup's :func:`resend_position_v15`, except
    under the EAGLE drop with fine hits, where the Mamba hit is one hash block below the
    attention group's (:func:`attention_hit` up to ``cap``); that is at most ck30(N, h, drop)."""
    if eagle_drop(cfg) and cfg.partial_hits:
        return max(attention_hit(cfg, cap) - cfg.hash_block, 0)
    return resend_position_v15(cfg)


def landing_v15(cfg: Config) -> int:
    """:func:`fine_landing` of 0.15-0.27: the attention hit at most min(h*floor(N/h), N - 1)."""
    return fine_landing(cfg, min(fl(cfg.prompt, cfg.hash_block), cfg.prompt - 1))


def landing_v28(cfg: Config) -> int:
    """:func:`fine_landing` of 0.28-0.31: as :func:`landing_v15`, the attention group's
    entries also at most :func:`cached_count`."""
    cap = min(fl(cfg.prompt, cfg.hash_block), cfg.prompt - 1)
    return fine_landing(cfg, min(cap, cached_count(cfg)))


def dropped_landing(cfg: Config, lookup: int) -> int:
    """Where the resend's lookup can land after a real prefill from 0.32 (SPEC KV1): the
    lookup's R* ``lookup``, under the EAGLE drop no higher than the attention hit
    (:func:`attention_hit` up to :func:`cached_count`) less the drop unit (h with fine hits,
    else G), on the hit grid A."""
    if not eagle_drop(cfg):
        return lookup
    unit = cfg.hash_block if cfg.partial_hits else cfg.split_block
    below = attention_hit(cfg, cached_count(cfg)) - unit
    return max(fl(min(lookup, below), hit_unit(cfg)), 0)


def resend_landing_v15(cfg: Config) -> int:
    """R* of 0.15-0.27 (SPEC KV1): :func:`achievable_resend` at :func:`landing_v15`."""
    return achievable_resend(cfg, landing_v15(cfg), tail_position_v26(cfg), False)


def resend_landing_v28(cfg: Config) -> int:
    """R* of 0.28-0.30 (SPEC KV1): :func:`achievable_resend` at :func:`landing_v28`."""
    return achievable_resend(cfg, landing_v28(cfg), tail_position_v26(cfg), False)


def resend_landing_v31(cfg: Config) -> int:
    """R* of 0.31 (SPEC KV1): :func:`achievable_resend` at :func:`landing_v28`, 0.31's
    tail."""
    return achievable_resend(cfg, landing_v28(cfg), tail_position_v31(cfg), False)


def resend_landing_v32(cfg: Config) -> int:
    """R* of 0.32 (SPEC KV1): :func:`achievable_resend` at the :func:`dropped_landing` of
    :func:`resend_position_v32`."""
    landing = dropped_landing(cfg, resend_position_v32(cfg))
    return achievable_resend(cfg, landing, tail_position(cfg), True)


def resend_landing(cfg: Config) -> int:
    """R* of 0.33 on (SPEC KV1): :func:`achievable_resend` at the :func:`dropped_landing` of
    :func:`resend_position`."""
    landing = dropped_landing(cfg, resend_position(cfg))
    return achievable_resend(cfg, landing, tail_position(cfg), True)


def prompt_checkpoint(cfg: Config) -> int:
    """The prompt's own checkpoint position ck33(N, A, drop, L_h)
    (``get_mamba_prefill_checkpoint_position`` of the prompt; slot note 6 rule 6)."""
    return ck33(cfg.prompt, hit_unit(cfg), eagle_drop(cfg), cfg.hash_lookahead)


def tail_position(cfg: Config) -> int:
    """T := ckpos(N, h, drop) (slot note 6 rule 1), 0.32 on. The real 0.33.0 manager keys it
    when the cacheable count reaches it whether or not hits are fine (checked against it: with
    h = B the position is on the block grid)."""
    return ck33(cfg.prompt, cfg.hash_block, eagle_drop(cfg), cfg.hash_lookahead)


def tail_position_v26(cfg: Config) -> int:
    """T of 0.26-0.30 (SPEC KV1): h*floor(N/h), the drop aside (checked against each release's
    ``cache_partial_block`` calls)."""
    return fl(cfg.prompt, cfg.hash_block)


def tail_position_v31(cfg: Config) -> int:
    """T of 0.31 (SPEC KV1): h*floor(N/h), less h under the drop."""
    if eagle_drop(cfg):
        return max(fl(cfg.prompt, cfg.hash_block) - cfg.hash_block, 0)
    return fl(cfg.prompt, cfg.hash_block)


def hashed_tokens(cfg: Config, end: int) -> int:
    """Slot note 6 rule 3's bound: the tokens the request's block hashes cover. A hash block
    gets its hash once its L_h following tokens exist, so h*floor((T - L_h)/h), T the tokens
    the request holds (e itself for a decode step past the prefill; slot note 3; the real
    0.33.0 manager keys no block beyond it)."""
    return fl(max(cfg.tokens, end) - cfg.hash_lookahead, cfg.hash_block)


def cacheable(cfg: Config, end: int) -> int:
    """Slot note 6 rule 3: the cacheable count c := e, or S*floor(e/S) when not fine, and
    never past the tokens the request's block hashes cover (:func:`hashed_tokens`)."""
    count = end if cfg.partial_hits else fl(end, cfg.sched_block)
    return min(count, hashed_tokens(cfg, end))


def segment_keeps(cfg: Config, column: int) -> bool:
    """Slot note 6 rule 9, segment-only mask (used by rule 6).

    R = None: true; R = 0: false; R > 0: true if R/B <= 1 or (j+1)*B = 0 mod R.
    """
    if cfg.retention < 0:
        return True
    if cfg.retention == 0:
        return False
    return cfg.retention <= cfg.block or (column + 1) * cfg.block % cfg.retention == 0


def boundary_column(cfg: Config, position: int) -> int:
    """The column of a reachable boundary p floored to A: floor(A*floor(p/A) / B) - 1."""
    return fl(position, hit_unit(cfg)) // cfg.block - 1


def reachable_column(cfg: Config, column: int) -> bool:
    """Slot note 6 rule 9 (R4): column j holds a reachable boundary, floored to A
    (:func:`reachable_between` of the one column)."""
    return reachable_between(cfg, column, column)


def reachable_between(cfg: Config, low: int, high: int) -> bool:
    """Slot note 6 rule 9 (R4): some column in [low, high] holds a reachable boundary, floored
    to A.

    The replay boundary N - 1 without drop; with drop max(S*floor((N-1)/S) - S, 0) and
    max(S*floor(N/S) - S, 0); plus J when J > 0. (The note's J - B under EAGLE applies to
    EAGLE-flagged groups only; in 0.33.0 those are the groups holding draft layers, never the
    Mamba group: checked against the real manager.)
    """
    n = cfg.prompt
    s = cfg.sched_block
    if eagle_drop(cfg):
        first = boundary_column(cfg, max(fl(n - 1, s) - s, 0))
        second = boundary_column(cfg, max(fl(n, s) - s, 0))
        found = low <= first <= high or low <= second <= high
    else:
        found = low <= boundary_column(cfg, n - 1) <= high
    if cfg.junction > 0:
        found = found or low <= boundary_column(cfg, cfg.junction) <= high
    return found


def keeps_some(cfg: Config, low: int, high: int) -> bool:
    """Whether the retention mask of 0.30 on (:func:`keeps`) lets some column in [low, high] be
    keyed: every one when R = None or R <= B, one on the segment grid when a multiple of R/B
    lies in [low + 1, high + 1], or a reachable boundary's. R is a multiple of B, as every
    release's validator requires; for another R (refused at start-up) some column is taken as
    kept."""
    if low > high:
        return False
    if cfg.retention < 0 or 0 < cfg.retention <= cfg.block:
        return True
    if cfg.retention > 0 and cfg.retention % cfg.block != 0:
        return True
    if cfg.retention > 0 and fl(high + 1, cfg.retention // cfg.block) > low:
        return True
    return reachable_between(cfg, low, high)


def keeps(cfg: Config, column: int) -> bool:
    """Slot note 6 rule 9 (R4), 0.30-0.33: the retention mask lets column j be keyed.

    R = None keeps every block; R = 0 only the reachable-boundary columns; R > 0 those plus the
    R grid (the segment-only mask).
    """
    if cfg.retention < 0:
        return True
    return segment_keeps(cfg, column) or reachable_column(cfg, column)


def keeps_v29(cfg: Config, column: int) -> bool:
    """Slot note 6 rule 9 (R4) as 0.24-0.29 have it: the one reachable boundary is N - 1,
    EAGLE drop or not (``reachable_boundaries = [num_prompt_tokens - 1]``), plus J when J > 0;
    the segment grid as in 0.30+. Under the drop the resend position's column is therefore not
    kept with R >= 0 (0.30 added the drop's boundaries). 0.24-0.28 read R from
    VLLM_PREFIX_CACHE_RETENTION_INTERVAL; before 0.24 no retention interval is accepted
    (SPEC S1b; R = None: every block is kept)."""
    if cfg.retention < 0:
        return True
    found = boundary_column(cfg, cfg.prompt - 1) == column
    if cfg.junction > 0:
        found = found or boundary_column(cfg, cfg.junction) == column
    return segment_keeps(cfg, column) or found


def block_end(cfg: Config, start: int) -> int:
    """B*ceil(s/B): the end of the Mamba block holding position s, the claim slot note 6 rule 5
    keys onto state@s's block when a chunk from a mid-block s runs past it (SPEC P3)."""
    return cfg.block * cdiv(start, cfg.block)


def crosses(cfg: Config, start: int, end: int) -> bool:
    """Slot note 6 rule 5's violation branch (4.2) before the retention mask: s is mid-block
    (s > 0, s mod B != 0), the chunk runs past its block's end B*ceil(s/B) (so col(s) !=
    col(e)), and the cacheable count reaches that end (so column col(s) is registered now)."""
    if start <= 0 or start % cfg.block == 0:
        return False
    claim = block_end(cfg, start)
    return end > claim and cacheable(cfg, end) >= claim


def poisons(cfg: Config, start: int, end: int) -> bool:
    """SPEC P3 for chunk [s, e) under the retention mask of 0.30 on (:func:`keeps`): the
    chunk :func:`crosses` its start's block end and the mask keeps col(s), so the cache keys
    B*ceil(s/B) onto the block holding state@s."""
    return crosses(cfg, start, end) and keeps(cfg, start // cfg.block)


def poisons_v29(cfg: Config, start: int, end: int) -> bool:
    """SPEC P3 under the retention mask of 0.15-0.29 (:func:`keeps_v29`: its one reachable
    boundary is N - 1, under the EAGLE drop too)."""
    return crosses(cfg, start, end) and keeps_v29(cfg, start // cfg.block)


def checkpoint_at(cfg: Config, start: int, end: int) -> int:
    """Slot note 6 rule 4 (W6): the checkpoint ck the chunk [s, e) writes at col(e) - 1, or -1.

    With internal checkpoints (K and alignment g >= 1), cp := ckpos(e, A, drop) (ck33; ck32 is
    the same without a hash lookahead); ck := cp when V(s, e) holds and a block is reserved
    for it (R != 0, or the chunk reaches N: 0.31 on).
    """
    cp = ck33(end, hit_unit(cfg), eagle_drop(cfg), cfg.hash_lookahead)
    return reserved_checkpoint(cfg, start, end, cp)


def checkpoint_at_v31(cfg: Config, start: int, end: int) -> int:
    """Rule 4 as 0.31 has it: cp := ck30(e, H, drop) (``get_mamba_prefill_checkpoint_position``
    of 0.30-0.31: N - 1 under the drop too, on the hash grid H)."""
    cp = ck30(end, cfg.hash_block, eagle_drop(cfg))
    return reserved_checkpoint(cfg, start, end, cp)


def checkpoint_at_v30(cfg: Config, start: int, end: int) -> int:
    """Rule 4 as 0.30 has it: cp := ck30(e, H, drop), and a block is reserved for every valid
    checkpoint, whatever R (``_needs_internal_checkpoint`` has no ``query_end >=
    prefill_end`` yet)."""
    return valid_checkpoint(cfg, start, end, ck30(end, cfg.hash_block, eagle_drop(cfg)))


def checkpoint_at_v29(cfg: Config, start: int, end: int) -> int:
    """Rule 4 as 0.29 has it (``_needs_internal_checkpoint``'s first form, KV2 rule 2c): a chunk
    that starts on the Mamba grid and ends off it writes the state at its last block boundary,
    B*(cdiv(e, B) - 1), into a block reserved at column cdiv(e, B) - 2 when that column is past
    the blocks the request holds (a first chunk holds none; a later one its state and S
    speculative blocks from column cdiv(s, B) - 1); else -1. No alignment is read."""
    block = cfg.block
    if not cfg.checkpoints or end % block == 0 or start % block != 0:
        return -1
    held = cdiv(start, block) + (cfg.lookahead if start > 0 else 0)
    if cdiv(end, block) - 2 >= held:
        return block * (cdiv(end, block) - 1)
    return -1


def reserved_checkpoint(cfg: Config, start: int, end: int, cp: int) -> int:
    """:func:`valid_checkpoint` when a block is reserved for it: R != 0, or the chunk reaches N
    (0.31 on), else -1."""
    if cfg.retention != 0 or end >= cfg.prompt:
        return valid_checkpoint(cfg, start, end, cp)
    return -1


def valid_checkpoint(cfg: Config, start: int, end: int, cp: int) -> int:
    """``cp`` when internal checkpoints are on (K and g >= 1) and V(s, e) holds for it
    (``is_mamba_prefill_checkpoint_valid``), else -1."""
    if not cfg.checkpoints or cfg.checkpoint_alignment <= 0:
        return -1
    if valid(start, end, cp, cfg.hash_block, cfg.block, cfg.checkpoint_alignment):
        return cp
    return -1


def rekeyed(cfg: Config, checkpoint: int) -> bool:
    """Slot note 6 rule 6 (R3), 0.32 on: the checkpoint block is re-keyed to ck (and so holds a
    sound entry) when ck = ckpos(N, A, drop), or ck is on the block grid and the segment-only
    mask keeps block ck/B - 1, or ck = J > 0; otherwise its keys are evicted."""
    own = checkpoint == prompt_checkpoint(cfg)
    on_grid = checkpoint % cfg.block == 0 and segment_keeps(cfg, checkpoint // cfg.block - 1)
    return own or on_grid or (cfg.junction > 0 and checkpoint == cfg.junction)


def rekeyed_v31(cfg: Config, checkpoint: int, count: int) -> bool:
    """Rule 6 as 0.31 has it: the checkpoint is evicted only when R = 0, the cacheable count is
    below N, and ck is neither the prompt's own checkpoint (ck30(N, H, drop)) nor J; otherwise
    re-keyed, on the grid or not, whatever the segments."""
    transient = cfg.retention == 0 and count < cfg.prompt
    own = checkpoint == ck30(cfg.prompt, cfg.hash_block, eagle_drop(cfg))
    return not transient or own or (cfg.junction > 0 and checkpoint == cfg.junction)


def rekeyed_v30(cfg: Config, checkpoint: int, count: int) -> bool:
    """Rule 6 as 0.30 has it: as 0.31 (:func:`rekeyed_v31`), but the prompt's own checkpoint
    is evicted too (R = 0, count below N: a chunk's count never reaches N unless the prompt
    ends on a hash block and fine hits key it)."""
    transient = cfg.retention == 0 and count < cfg.prompt
    return not transient or (cfg.junction > 0 and checkpoint == cfg.junction)


def spare_count(cfg: Config, start: int, end: int, checkpoint: int) -> int:
    """0.30-0.31 (KV2 rule 2c): a later chunk [s, e) that writes a checkpoint keeps its S
    speculative blocks in place, at columns cdiv(s, B) on, and takes the checkpoint, the state
    and S new ones past them; those below the checkpoint's column cdiv(e, B) - 2 (a spare one
    there becomes the checkpoint block) hold no state, yet the cache keys them at their block
    ends (rule 5 under the mask). Their count (0: none); S = L."""
    if start <= 0 or checkpoint < 0:
        return 0
    below = cdiv(end, cfg.block) - 2 - cdiv(start, cfg.block)
    return max(min(cfg.lookahead, below), 0)


def spares_v30(cfg: Config, start: int, end: int) -> int:
    """:func:`spare_count` of 0.30 (its checkpoint: :func:`checkpoint_at_v30`)."""
    return spare_count(cfg, start, end, checkpoint_at_v30(cfg, start, end))


def spares_v31(cfg: Config, start: int, end: int) -> int:
    """:func:`spare_count` of 0.31 (its checkpoint: :func:`checkpoint_at_v31`)."""
    return spare_count(cfg, start, end, checkpoint_at_v31(cfg, start, end))


def no_spares(cfg: Config, start: int, end: int) -> int:
    """Up to 0.29, and from 0.32, the speculative blocks move past the checkpoint: none."""
    return 0


def keys_spare_block(cfg: Config, start: int, end: int, spares: int) -> bool:
    """SPEC P3, 0.30-0.31: the chunk's cacheable count reaches a spare speculative block's
    column (:func:`spare_count`: ``spares`` of them from cdiv(s, B)) that the mask of 0.30 on
    keeps, so the cache keys its block end onto a block holding no state."""
    low = cdiv(start, cfg.block)
    high = min(low + spares - 1, cacheable(cfg, end) // cfg.block - 1)
    return keeps_some(cfg, low, high)


def live_checkpoint(cfg: Config, start: int, end: int) -> int:
    """The checkpoint chunk [s, e) leaves live (rules 4 and 6, 0.32 on; 0.29 too, measured),
    else -1."""
    checkpoint = checkpoint_at(cfg, start, end)
    live = checkpoint >= 0 and rekeyed(cfg, checkpoint)
    return checkpoint if live else -1


def live_checkpoint_v29(cfg: Config, start: int, end: int) -> int:
    """The checkpoint a chunk leaves live in 0.29 (:func:`checkpoint_at_v29`): its block is a
    full block of the chunk, keyed at its end when the cacheable count reaches it and 0.29's
    retention mask keeps its column (:func:`keeps_v29`), else -1."""
    checkpoint = checkpoint_at_v29(cfg, start, end)
    kept = checkpoint <= cacheable(cfg, end) and keeps_v29(cfg, checkpoint // cfg.block - 1)
    return checkpoint if checkpoint >= 0 and kept else -1


def live_checkpoint_v31(cfg: Config, start: int, end: int) -> int:
    """:func:`live_checkpoint` under 0.31's position and re-keying (:func:`checkpoint_at_v31`,
    :func:`rekeyed_v31`)."""
    checkpoint = checkpoint_at_v31(cfg, start, end)
    live = checkpoint >= 0 and rekeyed_v31(cfg, checkpoint, cacheable(cfg, end))
    return checkpoint if live else -1


def live_checkpoint_v30(cfg: Config, start: int, end: int) -> int:
    """:func:`live_checkpoint` under 0.30's reservation and re-keying
    (:func:`checkpoint_at_v30`, :func:`rekeyed_v30`)."""
    checkpoint = checkpoint_at_v30(cfg, start, end)
    live = checkpoint >= 0 and rekeyed_v30(cfg, checkpoint, cacheable(cfg, end))
    return checkpoint if live else -1


def lands_at_start(cfg: Config, resend: int, kept: bool, tail: int, grid_tail: bool) -> bool:
    """Whether an identical resend lands at the start c0 after an identical request computed
    [0, c0) and [c0, N) (SPEC KV1; the slot oracle's resend hit for those ends): c0 is a local
    hit on the hit grid A at most R* = ``resend``, and the first chunk left state@c0 live: on
    the block grid where the retention mask keeps its column (``kept``, rule 5) or as the
    prompt's tail T (``tail``, rule 7: keyed by its own copy off the grid, where a hit on A
    has fine hits, and on it too with ``grid_tail``). The second chunk keys nothing in
    (c0, R*]: its running column ends past N > R*, and the claim it may poison, B*cdiv(c0, B),
    is past an off-grid c0, which is then T, and T <= R* only where T = R*."""
    start = cfg.start
    if start <= 0 or cfg.external > 0 or start > resend or start % hit_unit(cfg) != 0:
        return False
    if cacheable(cfg, start) < start:
        return False
    if start % cfg.block == 0:
        return kept or (start == tail and grid_tail)
    return start == tail


def seeded_hit_v15(cfg: Config) -> bool:
    """:func:`lands_at_start` under the rules of 0.15-0.27."""
    kept = keeps_v29(cfg, cfg.start // cfg.block - 1)
    return lands_at_start(cfg, resend_landing_v15(cfg), kept, tail_position_v26(cfg), False)


def seeded_hit_v28(cfg: Config) -> bool:
    """:func:`lands_at_start` under the rules of 0.28-0.29."""
    kept = keeps_v29(cfg, cfg.start // cfg.block - 1)
    return lands_at_start(cfg, resend_landing_v28(cfg), kept, tail_position_v26(cfg), False)


def seeded_hit_v30(cfg: Config) -> bool:
    """:func:`lands_at_start` under the rules of 0.30."""
    kept = keeps(cfg, cfg.start // cfg.block - 1)
    return lands_at_start(cfg, resend_landing_v28(cfg), kept, tail_position_v26(cfg), False)


def seeded_hit_v31(cfg: Config) -> bool:
    """:func:`lands_at_start` under the rules of 0.31."""
    kept = keeps(cfg, cfg.start // cfg.block - 1)
    return lands_at_start(cfg, resend_landing_v31(cfg), kept, tail_position_v31(cfg), False)


def seeded_hit_v32(cfg: Config) -> bool:
    """:func:`lands_at_start` under the rules of 0.32."""
    kept = keeps(cfg, cfg.start // cfg.block - 1)
    return lands_at_start(cfg, resend_landing_v32(cfg), kept, tail_position(cfg), True)


def seeded_hit_v33(cfg: Config) -> bool:
    """:func:`lands_at_start` under the rules of 0.33 on."""
    kept = keeps(cfg, cfg.start // cfg.block - 1)
    return lands_at_start(cfg, resend_landing(cfg), kept, tail_position(cfg), True)


@dataclass(frozen=True)
class KvRules:
    """A release's cache-side rules (SPEC KV1): where an identical resend lands after a real
    prefill (``resend``, R*), where the lookup lands when every group holds an entry at every
    hash-block end (``lookup``), and which Mamba columns its retention mask keeps (``keeps``),
    all functions of the policy subset."""

    releases: str
    resend: Callable[[Any], int]
    lookup: Callable[[Any], int]
    keeps: Callable[[Any, int], bool]
    tail: Callable[[Any], int] = tail_position
    """Where the prompt's partial tail T is keyed (rule 7)."""
    grid_tail: bool = True
    """Whether T is keyed by its own copy (rule 7) on the block grid and without fine hits too
    (0.32 on); up to 0.31 only a tail off the grid with h < B is (``cache_partial_block``), so
    a tail on the grid is rule 5's, under the mask."""
    seeded: Callable[[Any], bool] = seeded_hit_v33
    """Whether an identical resend lands at the start c0 after a prefill ending at c0 and P
    (:func:`lands_at_start` under these rules)."""
    checkpoint: Callable[[Any, int, int], int] = checkpoint_at
    """The checkpoint a chunk [s, e) writes, or -1 (rule 4): a written one is keyed instead
    of the prompt's tail (rule 7), live or not."""
    live_checkpoint: Callable[[Any, int, int], int] = live_checkpoint
    """The checkpoint a chunk [s, e) leaves live, or -1: written (``checkpoint``) and re-keyed
    by the cache (rule 6)."""
    spares: Callable[[Any, int, int], int] = no_spares
    """How many speculative blocks a chunk [s, e) keeps in place from column cdiv(s, B), each
    keyed (under the mask) onto a block holding no state (0.30-0.31, :func:`spare_count`)."""

    def junction(self, cfg: Any) -> int:
        """R*_J under these rules (SPEC S-COVER): :func:`junction_landing` with the release's
        tail (rule 7)."""
        return junction_landing(cfg, self.tail(cfg), self.grid_tail)


def _rules_v15(releases: str, resend: Callable[[Any], int], **rules: Any) -> KvRules:
    """The rules of a release group up to 0.31: the lookup of ck30 and a partial tail keyed
    only off the grid (SPEC KV1)."""
    return KvRules(releases, resend, resend_position_v15, grid_tail=False, **rules)


RULES_V15 = _rules_v15(
    "0.15-0.27", resend_landing_v15, keeps=keeps_v29, tail=tail_position_v26, seeded=seeded_hit_v15
)
RULES_V28 = _rules_v15(
    "0.28-0.29",
    resend_landing_v28,
    keeps=keeps_v29,
    tail=tail_position_v26,
    seeded=seeded_hit_v28,
    checkpoint=checkpoint_at_v29,
    live_checkpoint=live_checkpoint_v29,
)
RULES_V30 = _rules_v15(
    "0.30",
    resend_landing_v28,
    keeps=keeps,
    tail=tail_position_v26,
    seeded=seeded_hit_v30,
    checkpoint=checkpoint_at_v30,
    live_checkpoint=live_checkpoint_v30,
    spares=spares_v30,
)
RULES_V31 = _rules_v15(
    "0.31",
    resend_landing_v31,
    keeps=keeps,
    tail=tail_position_v31,
    seeded=seeded_hit_v31,
    checkpoint=checkpoint_at_v31,
    live_checkpoint=live_checkpoint_v31,
    spares=spares_v31,
)
RULES_V32 = KvRules("0.32", resend_landing_v32, resend_position_v32, keeps, seeded=seeded_hit_v32)
LATEST_RULES = KvRules("0.33-0.34", resend_landing, resend_position, keeps)


def release_minor(version: str | None) -> int | None:
    """Y of a vLLM version ``0.Y.Z``; ``None`` for none or another form."""
    parts = (version or "").split(".")
    if len(parts) < 2 or not parts[1].isdigit() or parts[0] != "0":
        return None
    return int(parts[1])


def kv_rules(version: str | None) -> KvRules:
    """The cache-side rules of vLLM ``version`` (``X.Y.Z``; SPEC KV1). A version this tool
    does not know (a tree that records none, a later release) gets the latest rules."""
    minor = release_minor(version)
    if minor is None:
        return LATEST_RULES
    if minor <= 27:
        return RULES_V15
    if minor <= 29:
        return RULES_V28
    if minor == 30:
        return RULES_V30
    if minor == 31:
        return RULES_V31
    if minor == 32:
        return RULES_V32
    return LATEST_RULES


def crossing_claim(cfg: Config, start: int, end: int, rules: KvRules | None = None) -> int | None:
    """The claim B*ceil(s/B) that chunk [s, e) keys onto the block holding state@s (SPEC P3:
    it :func:`crosses` its start's block end and the retention mask of ``rules``, the
    latest release's by default, keeps col(s)), else None."""
    kept = (rules or LATEST_RULES).keeps
    if crosses(cfg, start, end) and kept(cfg, start // cfg.block):
        return block_end(cfg, start)
    return None


# -- the oracle over a whole prefill -------------------------------------------------------------


@dataclass(frozen=True)
class SlotSetup:
    """One request's geometry and flags: the oracle's input (slot note 6, "Input").

    ``hash_block`` is h (default B) and must divide B; ``sched_block`` is S (default B), the lcm
    of the group block sizes, so a multiple of B; ``split_block`` is G (default S), the
    attention block, which divides S. ``checkpoint_alignment`` is g (None: no internal
    checkpoints); ``retention`` is None (dense), 0, or R > 0; ``junction`` is J (0: off);
    ``lookahead`` is L (from 0.28 the coordinator caches all but the last L - 1 tokens,
    :func:`cached_count`). :meth:`fields` gives the Config-style fields the rule functions read
    (fine = h < B).
    """

    prompt: int
    block: int
    hash_block: int | None = None
    sched_block: int | None = None
    split_block: int | None = None
    drop: bool = False
    hash_lookahead: int = 0
    lookahead: int = 0
    checkpoint_alignment: int | None = None
    retention: int | None = None
    junction: int = 0
    start: int = 0
    exact_junction: bool = False
    tokens: int | None = None

    def __post_init__(self) -> None:
        _check_setup(self)

    @classmethod
    def of(cls, cfg: Config) -> SlotSetup:
        """The oracle's input for a :class:`~chunkproof.model.config.Config` (its fine hits
        are its partial hits F)."""
        return cls(
            prompt=cfg.prompt,
            block=cfg.block,
            hash_block=cfg.hash_block if cfg.partial_hits else cfg.block,
            sched_block=cfg.sched_block,
            split_block=cfg.split_block,
            drop=cfg.drop,
            hash_lookahead=cfg.hash_lookahead,
            lookahead=cfg.lookahead,
            checkpoint_alignment=cfg.checkpoint_alignment
            if cfg.checkpoints and cfg.checkpoint_alignment > 0
            else None,
            retention=None if cfg.retention < 0 else cfg.retention,
            junction=cfg.junction,
            start=cfg.start,
            exact_junction=cfg.exact_junction,
            tokens=cfg.tokens,
        )

    @cached_property
    def fields(self) -> Any:
        """The Config-style fields of this setup, as the rule functions read them."""
        h = self.block if self.hash_block is None else self.hash_block
        return SimpleNamespace(
            prompt=self.prompt,
            tokens=self.prompt if self.tokens is None else self.tokens,
            block=self.block,
            hash_block=h,
            sched_block=self._sched,
            split_block=self._sched if self.split_block is None else self.split_block,
            partial_hits=h < self.block,
            drop=self.drop,
            hash_lookahead=self.hash_lookahead,
            lookahead=self.lookahead,
            checkpoints=self.checkpoint_alignment is not None,
            checkpoint_alignment=self.checkpoint_alignment or 0,
            retention=-1 if self.retention is None else self.retention,
            junction=self.junction,
            start=self.start,
            exact_junction=self.exact_junction,
        )

    @property
    def _sched(self) -> int:
        """S, default B."""
        return self.block if self.sched_block is None else self.sched_block

    @property
    def fine(self) -> bool:
        """fine = (h < B): fine-grained partial hits are on (slot note 6, "Input")."""
        return bool(self.fields.partial_hits)

    @property
    def hit_unit(self) -> int:
        """A := h if fine else S (slot note 6 rule 1)."""
        return hit_unit(self.fields)

    @property
    def tail(self) -> int | None:
        """T := ckpos(N, h, drop) if fine, else undefined (slot note 6 rule 1)."""
        return tail_position(self.fields) if self.fine else None

    @property
    def resend_position(self) -> int:
        """R* := ckpos(N, A, drop) (slot note 5)."""
        return resend_position(self.fields)


NO_STATE = -1
"""``Poison.held`` of a spare speculative block: it holds no state at all."""


def spare_claims(cfg: Config, start: int, end: int, rules: KvRules) -> list[int]:
    """The block ends chunk [s, e) keys onto spare speculative blocks under ``rules``
    (0.30-0.31, :func:`spare_count`): each kept column's, below the cacheable count."""
    low = cdiv(start, cfg.block)
    high = min(low + rules.spares(cfg, start, end), cacheable(cfg, end) // cfg.block)
    return [(j + 1) * cfg.block for j in range(low, high) if rules.keeps(cfg, j)]


@dataclass(frozen=True)
class Poison:
    """One violation: claim P keyed onto a block holding state@held (slot note 4.2), or onto a
    spare speculative block that holds no state (``held`` = :data:`NO_STATE`, 0.30-0.31).

    ``step`` is the index, in the chunk-end sequence, of the chunk end at which it happened.
    """

    claim: int
    held: int
    step: int

    def text(self) -> str:
        """ "48 holds state@46", or "8 holds no state" for a spare speculative block."""
        if self.held == NO_STATE:
            return f"{self.claim} holds no state"
        return f"{self.claim} holds state@{self.held}"


@dataclass(frozen=True)
class SlotReport:
    """The oracle's output (slot note 6 rule 10).

    ``live`` maps every live claim to the state its block holds, sound or not; ``covered`` (Cov)
    holds the claims whose block holds the claimed state; ``resend_hit`` is where an identical
    resend lands, poisoned entries included.
    """

    live: Mapping[int, int]
    covered: frozenset[int]
    violations: tuple[Poison, ...]
    resend_hit: int


def oracle(
    given: Any, ends: Sequence[int], decode_steps: int = 0, rules: KvRules = LATEST_RULES
) -> SlotReport:
    """Slot note section 6 rules 1-11 for the chunk ends ``ends`` (e_1 < ... < e_m = N) from
    the start s_0; ``decode_steps`` one-token decode chunks follow the prefill (rule 11).
    ``given`` is a :class:`SlotSetup` or a :class:`~chunkproof.model.config.Config`;
    ``rules`` the release's resend position and retention mask (SPEC KV1)."""
    setup = given.fields if isinstance(given, SlotSetup) else given
    _check_ends(setup, ends, decode_steps)
    frontier = setup.start // setup.block  # slot note 6 rule 2
    live: dict[int, int] = {}
    violations: list[Poison] = []
    decode = range(ends[-1] + 1, ends[-1] + 1 + decode_steps)
    for step, (start, end) in enumerate(pairwise((setup.start, *ends, *decode))):
        count = cacheable(setup, end)
        running = cdiv(end, setup.block) - 1  # col(e)
        spares = spare_claims(setup, start, end, rules)
        for column in range(frontier, count // setup.block):  # rule 5
            if not rules.keeps(setup, column):
                continue
            claim = (column + 1) * setup.block
            if column == running:
                live[claim] = end
            elif claim == crossing_claim(setup, start, end, rules):
                live[claim] = start
                violations.append(Poison(claim=claim, held=start, step=step))
            elif claim == start:
                live[claim] = start  # registered one step late (S > B): the block kept state@s
            elif claim in spares:
                live[claim] = NO_STATE  # a spare speculative block (0.30-0.31)
                violations.append(Poison(claim=claim, held=NO_STATE, step=step))
        if rules.checkpoint(setup, start, end) >= 0:
            checkpoint = rules.live_checkpoint(setup, start, end)
            if checkpoint >= 0:  # rule 6: re-keyed
                live[checkpoint] = checkpoint
        elif end <= setup.prompt and _tail_key(setup, start, end, count, rules):  # rule 7
            live[end] = end
        frontier = count // setup.block  # rule 8
    return _report(setup, live, violations, rules.resend(setup))


def _tail_key(setup: Any, start: int, end: int, count: int, rules: KvRules) -> bool:
    """Rule 7 (R2): the chunk keys the prompt's tail T when it ends at T and its cacheable
    count reaches T (fine hits or not: the real manager does), or, with fine hits and the
    exact shared-prefix checkpoint S on, the junction J it ends on (start < J <= N) when its
    count reaches J: a J past the tokens the hashes cover keys nothing (checked against the
    real 0.30.0, 0.33.0 and 0.34.0 managers with J set on the request: they never key the tail
    with J's state)."""
    tail = rules.tail(setup)
    own_copy = rules.grid_tail or (setup.partial_hits and tail % setup.block != 0)
    if tail > 0 and count == tail and end == tail and own_copy:
        return True
    exact = setup.partial_hits and setup.exact_junction
    return bool(exact and start < setup.junction == end == count)


def keys_own_tail(cfg: Config, start: int, end: int) -> bool:
    """Rule 7 as 0.32 on have it (``grid_tail``): the chunk [s, e) keys the prompt's tail T
    (:func:`tail_position`) by its own copy, whatever the retention mask, when it ends at T,
    its cacheable count reaches T and it writes no checkpoint (one it writes is keyed instead,
    rule 6). Checked against the real 0.33.0 and 0.34.0 managers: with L_h = 2 and R = 0, a
    prefill of T = 9 at B = 4 leaves state@4 keyed in the column the mask drops."""
    tail = tail_position(cfg)
    return (
        tail > 0
        and end == tail
        and cacheable(cfg, end) == tail
        and checkpoint_at(cfg, start, end) < 0
    )


def _report(setup: Any, live: dict[int, int], violations: list[Poison], resend: int) -> SlotReport:
    """Slot note 6 rule 10: Live, Cov = {P : Live[P] = P}, V, and the resend hit.

    The resend hit (no pool pressure) is the largest live claim P <= R* (the release's,
    ``resend``) with P = 0 mod A (section 5), or 0; the lookup does not tell poisoned entries
    apart.
    """
    ordered = dict(sorted(live.items()))
    unit = hit_unit(setup)
    hit = max((p for p in ordered if p <= resend and p % unit == 0), default=0)
    return SlotReport(
        live=ordered,
        covered=frozenset(p for p, held in ordered.items() if p == held),
        violations=tuple(violations),
        resend_hit=hit,
    )


def _check_setup(setup: SlotSetup) -> None:
    """Reject geometry and flags outside slot note 6's "Input" with a one-line ValueError."""
    _require(setup.prompt >= 1, f"prompt must be >= 1, got {setup.prompt}")
    _require(setup.block >= 1, f"block must be >= 1, got {setup.block}")
    h = setup.block if setup.hash_block is None else setup.hash_block
    s = setup.block if setup.sched_block is None else setup.sched_block
    _require(h >= 1 and setup.block % h == 0, f"hash_block {h} must divide block {setup.block}")
    _require(
        s >= 1 and s % setup.block == 0,
        f"sched_block {s} must be a multiple of block {setup.block}",
    )
    grid = s if setup.split_block is None else setup.split_block
    _require(grid >= 1 and s % grid == 0, f"split_block {grid} must divide sched_block {s}")
    _require(setup.hash_lookahead >= 0, f"hash_lookahead must be >= 0, got {setup.hash_lookahead}")
    g = setup.checkpoint_alignment
    _require(g is None or g >= 1, f"checkpoint_alignment must be None or >= 1, got {g}")
    r = setup.retention
    _require(r is None or r >= 0, f"retention must be None or >= 0, got {r}")
    _require(setup.junction >= 0, f"junction must be >= 0, got {setup.junction}")
    _require(setup.start >= 0, f"start must be >= 0, got {setup.start}")


def _check_ends(setup: Any, ends: Sequence[int], decode_steps: int) -> None:
    """Reject a chunk-end sequence that is not start < e_1 < ... < e_m with e_m the prompt N, or
    for a resumed request (T > N) the prefill end T - 1 or T itself (slot note 1; a resumed
    request replays its outputs too, and its last chunk may take the decode input)."""
    _require(len(ends) > 0, "ends is empty: the last chunk end must be the prompt length")
    _require(
        all(a < b for a, b in pairwise((setup.start, *ends))),
        f"chunk ends must be strictly increasing and above start {setup.start}: {list(ends)}",
    )
    low, high = max(setup.prompt, setup.tokens - 1), max(setup.prompt, setup.tokens)
    _require(low <= ends[-1] <= high, f"last chunk end {ends[-1]} != prompt {low}")
    _require(decode_steps >= 0, f"decode_steps must be >= 0, got {decode_steps}")


def _require(ok: bool, message: str) -> None:
    """Raise ``ValueError(message)`` unless ``ok``."""
    if not ok:
        raise ValueError(message)
