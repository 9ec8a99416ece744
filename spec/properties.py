"""Properties P0-P8 (SPEC P) as predicates on one step, written once in the policy subset.

A step is (c, b) with ``n`` the chunk before the split and ``e = c + chunk`` its end. Each
predicate returns ``True`` when the step *violates* the property. They are plain functions, so
traces are checked by calling them; the explorer evaluates the very same source over arrays of
states and budgets, and the prover translates it to Z3.

P3 and P6 are the slot oracle's own per-chunk rules (:mod:`chunkproof.spec.slots`), on the Mamba
group's grid B (``cfg.block``), whatever grid G the split aligns to. P0 is judged from a step's
record (:attr:`chunkproof.model.step.Step.unsafe`): the code raised, or a stage left [0, its
input].
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chunkproof.model.config import Config
from chunkproof.model.policy import Policy
from chunkproof.model.splits import max_chunk, prefill_end
from chunkproof.spec.kv_blocks import pool_rules, refused_v33
from chunkproof.spec.slots import (
    junction_landing,
    keeps,
    keeps_v29,
    keys_own_tail,
    keys_spare_block,
    kv_rules,
    live_checkpoint,
    live_checkpoint_v29,
    live_checkpoint_v30,
    live_checkpoint_v31,
    poisons,
    poisons_v29,
    resend_landing,
    resend_landing_v15,
    resend_landing_v28,
    resend_landing_v31,
    resend_landing_v32,
    spares_v30,
    spares_v31,
    tail_position,
    tail_position_v26,
    tail_position_v31,
)


@dataclass(frozen=True)
class Property:
    """A property's id, short name and definition (SPEC P), what its environment fixes
    beyond the policy's inputs (every report that judges it names that under ``fixed:``), and
    the KV block pool it is judged in (``none``: no allocation fails; ``min``: the fewest
    blocks the release's start-up check accepts, KV2 rule 4), which its verdict's range names
    with :data:`CONNECTOR`."""

    id: str
    name: str
    definition: str
    environment: str = ""
    pool: str = "none"


CONNECTOR = "synchronous"
"""The KV connector mode every verdict's range names: an external hit (the ``start`` input
``external``) is loaded whole with the request's first chunk (no asynchronous load); in a
shared pool at every admission (SPEC KV2 rule 5g)."""


PROPERTIES: dict[str, Property] = {
    p.id: p
    for p in (
        Property(
            "P0",
            "SAFE",
            "no reachable step makes the policy code raise, or a stage leave [0, its input]",
        ),
        Property("P1", "LIVE", "every reachable c < E gets a chunk > 0 with the largest budget"),
        Property(
            "P2",
            "PROGRESS-BUDGET",
            "the least b* such that every reachable c < E progresses for every b >= b*",
        ),
        Property(
            "P3",
            "NOCROSS",
            "no chunk makes the cache key a block end onto a block holding a mid-block state",
        ),
        Property(
            "P4",
            "ALIGN",
            "every chunk end before E is a multiple of the Mamba block B, except sound "
            "sub-block advances when B > m",
        ),
        Property(
            "P5",
            "WINDOW",
            "no chunk ends in (T - L, T) (relaxed: only on a multiple of B "
            "when the budget could not finish the prefill)",
        ),
        Property(
            "P6",
            "COVER",
            "the identical-resend position R* (with a junction J, also a sibling's R*_J: "
            "S-COVER) is covered whenever a chunk could end there",
            "P6's first request ends with its prefill (max_tokens 1: no decode step caches the "
            "tokens the coordinator held back) and its identical resend, or a sibling sharing "
            "its first J tokens, comes right after it",
        ),
        Property("P7", "COST", "every const(b) run finishes; steps against ceil((E - c0) / b)"),
        Property(
            "P8",
            "POOL",
            "no chunk of the longest prompt a max_model_len admits (max_model_len - 1 tokens) "
            "asks more KV blocks than are free in the smallest pool the release starts with",
            "P8's request is alone in its pool, admitted at c = 0 without a hit, at a local "
            "hit an identical prompt's prefill left in that pool, or at an external hit x = c0 "
            "a KV connector loads with the first chunk, with T = P, no junction and internal "
            "checkpoints only at c = 0 without partial hits (KV2)",
            pool="min",
        ),
    )
}


def parse_property_ids(text: str) -> tuple[str, ...]:
    """``"P1,P3"`` -> ``("P1", "P3")``; unknown ids are an error for the caller to report."""
    ids = tuple(dict.fromkeys(part.strip().upper() for part in text.split(",") if part.strip()))
    unknown = [i for i in ids if i not in PROPERTIES]
    if unknown or not ids:
        raise ValueError(
            f"unknown property id(s) {', '.join(unknown) or text!r}; known: {', '.join(PROPERTIES)}"
        )
    return ids


def stuck(cfg: Config, c: int, chunk: int) -> bool:
    """P1 at state c: c < E and the chunk with the largest budget makes no progress (permanent:
    SPEC P1). ``chunk`` is what the release's code schedules after every clamp it applies
    (SPEC Q3); 0 skips the request (SPEC S3), and a negative chunk is no progress either (it
    would move c backwards; SPEC P0 reports the stage that went below 0)."""
    return c < prefill_end(cfg) and chunk <= 0


def crosses_block_end(cfg: Config, c: int, e: int) -> bool:
    """P3 for chunk [c, e) under the retention mask of 0.30 on: the slot oracle keys a block
    end onto a block holding state@c (slot note 4.2, oracle rule 5:
    :func:`chunkproof.spec.slots.poisons`)."""
    return poisons(cfg, c, e)


def crosses_block_end_v30(cfg: Config, c: int, e: int) -> bool:
    """P3 under 0.30's rules: :func:`crosses_block_end`, or the chunk keys a spare speculative
    block it keeps in place past a checkpoint (:func:`chunkproof.spec.slots.keys_spare_block`)."""
    return poisons(cfg, c, e) or keys_spare_block(cfg, c, e, spares_v30(cfg, c, e))


def crosses_block_end_v31(cfg: Config, c: int, e: int) -> bool:
    """P3 under 0.31's rules: as 0.30 (:func:`crosses_block_end_v30`), 0.31's checkpoint."""
    return poisons(cfg, c, e) or keys_spare_block(cfg, c, e, spares_v31(cfg, c, e))


def crosses_block_end_v29(cfg: Config, c: int, e: int) -> bool:
    """P3 under the retention mask of 0.15-0.29 (:func:`chunkproof.spec.slots.poisons_v29`)."""
    return poisons_v29(cfg, c, e)


def misaligned(cfg: Config, c: int, e: int) -> bool:
    """P4 for chunk [c, e) under the cache rules of 0.32 on (SPEC KV1: the partial tail at
    ck33(N, h, drop, L_h)): :func:`misaligned_at`."""
    return misaligned_at(cfg, c, e, tail_position(cfg), poisons(cfg, c, e))


def misaligned_v15(cfg: Config, c: int, e: int) -> bool:
    """P4 under the cache rules of 0.15-0.29 (the partial tail at h*floor(N/h), before 0.26
    without partial hits; 0.29's retention mask): :func:`misaligned_at`."""
    return misaligned_at(cfg, c, e, tail_position_v26(cfg), poisons_v29(cfg, c, e))


def misaligned_v26(cfg: Config, c: int, e: int) -> bool:
    """P4 under the cache rules of 0.30 (the partial tail at h*floor(N/h)):
    :func:`misaligned_at`."""
    return misaligned_at(cfg, c, e, tail_position_v26(cfg), poisons(cfg, c, e))


def misaligned_v31(cfg: Config, c: int, e: int) -> bool:
    """P4 under the cache rules of 0.31 (the partial tail less h under the drop)."""
    return misaligned_at(cfg, c, e, tail_position_v31(cfg), poisons(cfg, c, e))


def misaligned_at(cfg: Config, c: int, e: int, tail: int, poisoned: bool) -> bool:
    """P4 for chunk [c, e) with e > c: an end before E off the Mamba grid B, unless it is a
    sub-block advance (B > m) that keeps P3 (``poisoned``: the release's P3 for the chunk), or
    a position the cache keys soundly off the grid: the prompt's partial tail ``tail`` (the
    release's T, SPEC KV1) under partial hits, and the junction J with the exact shared-prefix
    checkpoint (slot note 3 R2, 4.1: "every non-final chunk end must be on the grid, or equal
    the partial-tail boundary"). Encoder-forced ends (exemption b) need the step's stage
    values: the callers exempt them (:func:`chunkproof.spec.request.encoder_forced`)."""
    if e <= c or e >= prefill_end(cfg) or e % cfg.block == 0:
        return False
    if cfg.partial_hits and e == tail:
        return False
    if cfg.exact_junction and e == cfg.junction and e <= cfg.prompt:
        return False
    sub_block = cfg.block > max_chunk(cfg)
    return not (sub_block and not poisoned)


def in_window(cfg: Config, c: int, n: int, e: int) -> bool:
    """P5 strict for chunk [c, e): it ends inside the lookahead window (T - L, T)."""
    return e > c and cfg.tokens - cfg.lookahead < e < cfg.tokens


def in_window_relaxed(cfg: Config, c: int, n: int, e: int) -> bool:
    """P5 relaxed: a window end is allowed only on a multiple of B when n < T - c."""
    if not in_window(cfg, c, n, e):
        return False
    return e % cfg.block != 0 or c + n >= cfg.tokens


def misses_resend(cfg: Config, c: int, e: int, r: int, kept: bool, checkpoint: int) -> bool:
    """P6 for chunk [c, e) and the release's R* = ``r`` (SPEC KV1), ``kept`` whether its
    retention mask keeps R*'s Mamba column, ``checkpoint`` the checkpoint the chunk leaves live
    under the release's rules (or -1): R* > 0 and either the chunk runs over R* (its budget
    allowed it to end there) and that checkpoint is not at R* (oracle rules 4 and 6: one the
    release writes but evicts covers nothing), or R* is on the block grid, the chunk ends at
    R* and nothing keys its state there: the mask drops its column (oracle rules 5 and 9),
    the prompt's tail is not R* or is not keyed by its own copy (rule 7, which ``kept`` takes
    in where the release has it) and no live checkpoint is R* (rule 6). Fine hits change
    nothing here: an R* on the block grid is a block end the mask decides, with them or not."""
    over = c < r < e and checkpoint != r
    dropped = e == r and r % cfg.block == 0 and not kept and checkpoint != r
    return r > 0 and (over or dropped)


def skips_landings(
    cfg: Config,
    c: int,
    e: int,
    r: int,
    r_junction: int,
    kept: bool,
    kept_junction: bool,
    checkpoint: int,
) -> bool:
    """P6 for chunk [c, e) at both landings a later request can have (:func:`misses_resend`
    at each): R* = ``r`` for an identical resend, and R*_J = ``r_junction`` for a sibling
    sharing the first J tokens (SPEC S-COVER; 0 without a junction), ``kept`` and
    ``kept_junction`` whether the retention mask keeps their columns."""
    resend = misses_resend(cfg, c, e, r, kept, checkpoint)
    return resend or misses_resend(cfg, c, e, r_junction, kept_junction, checkpoint)


def skips_resend(cfg: Config, c: int, e: int) -> bool:
    """P6 for chunk [c, e) under 0.33's rules (:func:`skips_landings`): R* after a real prefill
    (:func:`~chunkproof.spec.slots.resend_landing`: the last position a chunk end can key at
    or below ck33(P, A, D, L_h), under the drop no higher than the attention group's hit
    allows), R*_J with 0.32's tail, and the 0.30+ retention mask."""
    r = resend_landing(cfg)
    j = junction_landing(cfg, tail_position(cfg), True)
    tail = keys_own_tail(cfg, c, e)
    kept = keeps(cfg, r // cfg.block - 1) or tail
    kept_j = keeps(cfg, j // cfg.block - 1) or tail
    return skips_landings(cfg, c, e, r, j, kept, kept_j, live_checkpoint(cfg, c, e))


def skips_resend_v32(cfg: Config, c: int, e: int) -> bool:
    """P6 under 0.32's rules: R* after a real prefill
    (:func:`~chunkproof.spec.slots.resend_landing_v32`), R*_J and the 0.30+ retention mask."""
    r = resend_landing_v32(cfg)
    j = junction_landing(cfg, tail_position(cfg), True)
    tail = keys_own_tail(cfg, c, e)
    kept = keeps(cfg, r // cfg.block - 1) or tail
    kept_j = keeps(cfg, j // cfg.block - 1) or tail
    return skips_landings(cfg, c, e, r, j, kept, kept_j, live_checkpoint(cfg, c, e))


def skips_resend_v31(cfg: Config, c: int, e: int) -> bool:
    """P6 under the rules of 0.31: R* after a real prefill
    (:func:`~chunkproof.spec.slots.resend_landing_v31`), R*_J with 0.31's tail and the 0.30+
    retention mask."""
    r = resend_landing_v31(cfg)
    j = junction_landing(cfg, tail_position_v31(cfg), False)
    kept = keeps(cfg, r // cfg.block - 1)
    kept_j = keeps(cfg, j // cfg.block - 1)
    return skips_landings(cfg, c, e, r, j, kept, kept_j, live_checkpoint_v31(cfg, c, e))


def skips_resend_v30(cfg: Config, c: int, e: int) -> bool:
    """P6 under the rules of 0.30: R* after a real prefill
    (:func:`~chunkproof.spec.slots.resend_landing_v28`), R*_J and the 0.30+ retention mask."""
    r = resend_landing_v28(cfg)
    j = junction_landing(cfg, tail_position_v26(cfg), False)
    kept = keeps(cfg, r // cfg.block - 1)
    kept_j = keeps(cfg, j // cfg.block - 1)
    return skips_landings(cfg, c, e, r, j, kept, kept_j, live_checkpoint_v30(cfg, c, e))


def skips_resend_v28(cfg: Config, c: int, e: int) -> bool:
    """P6 under the rules of 0.28-0.29: R* after a real prefill
    (:func:`~chunkproof.spec.slots.resend_landing_v28`), R*_J and 0.29's retention mask (its
    reachable boundaries are P - 1 and J)."""
    r = resend_landing_v28(cfg)
    j = junction_landing(cfg, tail_position_v26(cfg), False)
    kept = keeps_v29(cfg, r // cfg.block - 1)
    kept_j = keeps_v29(cfg, j // cfg.block - 1)
    return skips_landings(cfg, c, e, r, j, kept, kept_j, live_checkpoint_v29(cfg, c, e))


def skips_resend_v15(cfg: Config, c: int, e: int) -> bool:
    """P6 under the rules of 0.15-0.27: R* after a real prefill
    (:func:`~chunkproof.spec.slots.resend_landing_v15`), R*_J (0.26-0.27: no junction before)
    and 0.29's retention mask."""
    r = resend_landing_v15(cfg)
    j = junction_landing(cfg, tail_position_v26(cfg), False)
    kept = keeps_v29(cfg, r // cfg.block - 1)
    kept_j = keeps_v29(cfg, j // cfg.block - 1)
    return skips_landings(cfg, c, e, r, j, kept, kept_j, live_checkpoint(cfg, c, e))


def ideal_steps(end: Any, start: Any, budget: Any) -> Any:
    """P7: the ideal number of steps ceil((E - c0) / b) from c0 = ``start`` to E = ``end``
    under ``budget``, of integers or of NumPy arrays."""
    return -(-(end - start) // budget)


STUCK_PROPERTIES = ("P1", "P2", "P7")
"""Properties broken at a state whose chunk under the largest budget makes no progress
(:func:`stuck`): a livelock (P1) has no progress budget (P2) and never finishes (P7). They judge
every step whose code does not raise, P0-violating or not (SPEC Q3): a stage below 0 that a
later clamp turns into a chunk of 0 is a skip the release really makes."""

EDGE_PROPERTIES: dict[str, Callable[..., bool]] = {
    "P3": crosses_block_end,
    "P4": misaligned,
    "P6": skips_resend,
    "P8": refused_v33,
}
"""Properties of one chunk [c, e): predicate(cfg, c, e), P6 and P8 under 0.33's cache rules
(a policy's own: :func:`edge_properties`)."""

RELEASE_P6: dict[str, Callable[..., bool]] = {
    "0.15-0.27": skips_resend_v15,
    "0.28-0.29": skips_resend_v28,
    "0.30": skips_resend_v30,
    "0.31": skips_resend_v31,
    "0.32": skips_resend_v32,
    "0.33-0.34": skips_resend,
}
"""P6 per release group of :func:`chunkproof.spec.slots.kv_rules` (SPEC KV1)."""

RELEASE_P3: dict[str, Callable[..., bool]] = {
    "0.15-0.27": crosses_block_end_v29,
    "0.28-0.29": crosses_block_end_v29,
    "0.30": crosses_block_end_v30,
    "0.31": crosses_block_end_v31,
    "0.32": crosses_block_end,
    "0.33-0.34": crosses_block_end,
}
"""P3 per release group of :func:`chunkproof.spec.slots.kv_rules`: the retention mask that
decides whether a crossing chunk's claim is keyed (SPEC KV1), and in 0.30-0.31 the spare
speculative blocks a checkpoint leaves in place."""

RELEASE_P4: dict[str, Callable[..., bool]] = {
    "0.15-0.27": misaligned_v15,
    "0.28-0.29": misaligned_v15,
    "0.30": misaligned_v26,
    "0.31": misaligned_v31,
    "0.32": misaligned,
    "0.33-0.34": misaligned,
}
"""P4 per release group: the partial tail the release's cache keys soundly off the grid."""


def edge_properties(policy: Policy) -> dict[str, Callable[..., bool]]:
    """:data:`EDGE_PROPERTIES` with P3, P4, P6 and P8 under the cache rules of ``policy``'s
    release (:attr:`~chunkproof.model.policy.Policy.kv_release`): its retention mask, its
    partial tail, its R* and its block pool (SPEC KV1, KV2)."""
    rules = kv_rules(policy.kv_release)
    return {
        **EDGE_PROPERTIES,
        "P3": RELEASE_P3[rules.releases],
        "P4": RELEASE_P4[rules.releases],
        "P6": RELEASE_P6[rules.releases],
        "P8": pool_rules(policy.kv_release).refused,
    }


@dataclass(frozen=True)
class Scope:
    """The configurations a property judges, where that is not every one: ``holds(cfg)`` in
    the policy subset, and in words. Outside it the property's predicate is false, so a
    verdict counts and states only the configurations inside (a range with none inside is
    never PROVED)."""

    holds: Callable[..., bool]
    words: str


def property_scope(policy: Policy, pid: str) -> Scope | None:
    """The scope of ``pid`` under ``policy``'s release, or None when it judges every
    configuration: P8 judges where the KV pool's rules hold (SPEC P8, KV2)."""
    if pid != "P8":
        return None
    rules = pool_rules(policy.kv_release)
    return Scope(rules.in_scope, rules.scope_words)


WINDOW_PROPERTIES: dict[str, Callable[..., bool]] = {
    "strict": in_window,
    "relaxed": in_window_relaxed,
}
"""P5 forms: predicate(cfg, c, n, e); strict is the property, relaxed a trade-off a fix may
choose (SPEC P5)."""

WINDOW_FORMS = {
    "strict": "strict form: no chunk end in (T - L, T)",
    "relaxed": "relaxed form: a window end only on a multiple of B when the budget was cut",
}
"""What each P5 form asks, as a verdict names the form it checked."""

DEFAULT_WINDOW = "strict"


def ends_breaking(
    policy: Policy, cfg: Config, c: int, largest: int, pids: tuple[str, ...], window: str
) -> dict[int, tuple[str, ...]]:
    """SPEC Y3: every end e a chunk from state c can have under the largest budget
    ``largest`` (c < e <= min(c + largest, T)), with the properties among ``pids`` (P3, P4,
    P5 in form ``window``, P6, under ``policy``'s cache rules) a chunk [c, e) breaks. When
    every end breaks one, no policy at all keeps them together with P1 at a state c every
    policy reaches."""
    judged = {**edge_properties(policy), "P5": WINDOW_PROPERTIES[window]}
    cap = min(largest, cfg.tokens - c)
    ends = {}
    for e in range(c + 1, c + cap + 1):
        broken = []
        for pid in pids:
            if pid == "P5":
                if judged[pid](cfg, c, cap, e):
                    broken.append(pid)
            elif pid in judged and judged[pid](cfg, c, e):
                broken.append(pid)
        ends[e] = tuple(broken)
    return ends
