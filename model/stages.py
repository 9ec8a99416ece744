"""The caps ``schedule()`` applies around the split (history note sections 4, 6 and 10).

Each stage maps ``(cfg, c, n)`` to a new ``n`` and is written in the policy subset. The first
stage of every composition is a budget cap that receives the offered budget ``b`` as ``n``.
The encoder cap (``encoder_v15`` ... ``encoder_v33``) runs before the split up to 0.27 and
after it from 0.28 (history note 6; encoder-and-loops note 3); ``cfg.mm_items`` are the
request's items (:class:`~chunkproof.model.config.ItemView`); ``use_eagle`` is
:func:`~chunkproof.model.step.eagle_family`.
"""

from collections.abc import Callable

from chunkproof.model.config import Config, encoder_compute_budget, encoder_room
from chunkproof.model.step import eagle_family


def cap_static_threshold(cfg: Config, c: int, n: int) -> int:
    """C1-C7 (SPEC S3): n := min(T - c, theta if theta > 0, b), with b passed in as ``n``."""
    want = cfg.tokens - c
    if 0 < cfg.threshold < want:
        want = cfg.threshold
    return min(want, n)


def cap_lone_request(cfg: Config, c: int, n: int) -> int:
    """C8-C9 (SPEC S3): n := min(T - c, b).

    From 0.31 the per-step threshold is 0 when only one request is eligible, and never below
    the static theta otherwise, so for one request under a budget b <= M the theta cap adds
    nothing the budget model does not already offer. The split still reads the static theta.
    """
    return min(cfg.tokens - c, n)


def reserve_r1(cfg: Config, c: int, n: int) -> int:
    """R1 (0.28.0-0.33.0; history note 4): end at T - L exactly when 0 < T - c - n < L."""
    remaining = cfg.tokens - c - n
    if 0 < remaining < cfg.lookahead:
        n = n - (cfg.lookahead - remaining)
    return max(n, 0)


def reserve_unaligned(cfg: Config, c: int, n: int) -> int:
    """R1 for lookahead-in-split (SPEC V): block-aligned ends are left alone, others trimmed."""
    remaining = cfg.tokens - c - n
    if 0 < remaining < cfg.lookahead and (c + n) % cfg.split_block != 0:
        n = n - (cfg.lookahead - remaining)
    return max(n, 0)


# -- the encoder cap (encoder-and-loops note section 1; history note sections 6 and 10) ---------


def held_embeds(cfg: Config, c: int, margin: int) -> int:
    """The embeddings of the items the request holds in the encoder cache at state c.

    An item is held from the step that encodes it until the scheduler frees it, which is when
    e + margin <= c (``_free_encoder_inputs``, note 2.4: margin 0 in 0.15-0.23 and 0.33,
    [use_eagle] in 0.24-0.27, L in 0.28-0.32). Every item with tokens computed after the
    admission start c0 was encoded on the way to c, so the held items include those with
    max(s, c0) < c < e + margin (one run of positions: a prefix by start, less a prefix by
    end, hence a difference of the prefix sums ``before``).

    **The cache is a function of c for what the encoder cap decides.** A request may hold
    more: items a wider earlier window encoded ahead of the chunk (the split or the
    reservation cut it back), and stored entries it already released. The latter never
    matter: ``can_allocate`` answers need <= R (R = C minus the embeddings of referenced
    entries) and evicting released entries leaves R unchanged. The former do not change what
    the cap decides either: an item held ahead is a cache hit instead of a capacity test, and
    while it is held it lowers R by exactly what it would have added to the call's running
    total k, so every later item meets the same m + k <= R test; only the compute budget sees
    the difference, and :func:`~chunkproof.model.config.encoder_budget_path_free` (b0 >=
    min(C, total), vLLM's b0 = C) keeps it from deciding. So this canonical holding gives the
    chunk of every reachable state exactly (checked against the real code and its evolving
    cache in tests/test_encoder_fidelity.py).
    """
    if c <= cfg.start:
        return 0
    started = max((item.before + item.length for item in cfg.mm_items if item.start < c), default=0)
    released = max(
        (
            item.before + item.length
            for item in cfg.mm_items
            if item.end <= max(cfg.start, c - margin)
        ),
        default=0,
    )
    return max(started - released, 0)


def item_held(cfg: Config, c: int, margin: int, start: int, end: int) -> bool:
    """Whether the item [start, end) is one of those :func:`held_embeds` counts at c."""
    return c > cfg.start and start < c and end > max(cfg.start, c - margin)


def first_refused(cfg: Config, c: int, n: int, shift: int, margin: int) -> int:
    """The start of the first item ``_try_schedule_encoder_inputs`` cannot schedule for the
    chunk [c, c + n), or -1 (note 1.2, steps 4d-4i).

    The call looks at the items overlapping the window [c, c + n + shift) in order; the held
    ones are cache hits, the others are tested with ``can_allocate``: the item's m must fit
    the budget left (b0 - k) and m + k the reclaimable capacity R, k being what the call
    scheduled before it. The items it tests form a run after the held ones (at admission,
    c = c0, none is held), so k is the prefix sum from the run's first item, and the first
    failing item is the first whose prefix sum passes min(b0, R). An item only the shift
    shows is tested too (and, in 0.15-0.27, not scheduled; it is the run's last).
    """
    window = c + n + shift
    limit = min(encoder_compute_budget(cfg), encoder_room(cfg) - held_embeds(cfg, c, margin))
    admission = c <= cfg.start
    base = min(
        (
            item.before
            for item in cfg.mm_items
            if item.end > c and item.start < window and (admission or item.start >= c)
        ),
        default=0,
    )
    return min(
        (
            item.start
            for item in cfg.mm_items
            if item.end > c
            and item.start < window
            and (admission or item.start >= c)
            and item.before + item.length - base > limit
        ),
        default=-1,
    )


def blocking_item(cfg: Config, c: int, n: int, shift: int, margin: int) -> int:
    """The start s of the first item the chunk [c, c + n) cannot schedule (note 1.2 step 4f),
    or -1 when there is none or n = 0.

    The items held at c must fit the cache (``allocate`` asserts it when they were encoded):
    at a reachable state they do, so the assertion only marks the states no run reaches.
    """
    assert held_embeds(cfg, c, margin) <= encoder_room(cfg)
    if n == 0:
        return -1
    return first_refused(cfg, c, n, shift, margin)


def encoder_cap_shifted(cfg: Config, c: int, n: int, shift: int, margin: int) -> int:
    """E1-E6 (0.15.0-0.32.0, note 1.2 step 4f): the chunk stops ``shift`` tokens before the
    first item it cannot schedule, n := s - (c + shift) if c + shift < s, else 0."""
    if not cfg.has_items:
        return n
    refused = blocking_item(cfg, c, n, shift, margin)
    if refused < 0:
        return n
    if c + shift < refused:
        return refused - (c + shift)
    return 0


def encoder_cap_e7(cfg: Config, c: int, n: int, shift: int, margin: int) -> int:
    """E7 (0.33.0, note 1.2 step 4f): the shift only widens the window; the chunk stops at the
    first item it cannot schedule, n := min(n, s - c) if c < s, else 0."""
    if not cfg.has_items:
        return n
    refused = blocking_item(cfg, c, n, shift, margin)
    if refused < 0:
        return n
    if c < refused:
        return min(n, refused - c)
    return 0


def shift_eagle(cfg: Config) -> int:
    """The window shift of 0.15-0.27: 1 with an EAGLE-family drafter (``use_eagle``), else 0
    (note 1.3; history note 6, C1-C4 step 5)."""
    return 1 if eagle_family(cfg, 0) else 0


def shift_lookahead(cfg: Config) -> int:
    """The window shift of 0.28-0.33: L = ``num_prefill_lookahead`` (note 1.3)."""
    return cfg.lookahead


def margin_none(cfg: Config) -> int:
    """The free margin of 0.15-0.23 (F1, F2) and 0.33 (F5): an item is freed once c >= e."""
    return 0


def margin_eagle(cfg: Config) -> int:
    """The free margin of 0.24-0.27 (F3, PR #46315): e + [use_eagle] <= c."""
    return 1 if eagle_family(cfg, 0) else 0


def margin_lookahead(cfg: Config) -> int:
    """The free margin of 0.28-0.32 (F4): e + L <= c."""
    return cfg.lookahead


def encoder_v15(cfg: Config, c: int, n: int) -> int:
    """The encoder cap of 0.15.0-0.23.0 (E1-E3 with F1/F2), applied before the split."""
    return encoder_cap_shifted(cfg, c, n, shift_eagle(cfg), margin_none(cfg))


def encoder_v24(cfg: Config, c: int, n: int) -> int:
    """The encoder cap of 0.24.0-0.27.1 (E3 with F3), applied before the split."""
    return encoder_cap_shifted(cfg, c, n, shift_eagle(cfg), margin_eagle(cfg))


def encoder_v28(cfg: Config, c: int, n: int) -> int:
    """The encoder cap of 0.28.0-0.32.0 (E4-E6 with F4), applied after the split (#51603)."""
    return encoder_cap_shifted(cfg, c, n, shift_lookahead(cfg), margin_lookahead(cfg))


def encoder_v33(cfg: Config, c: int, n: int) -> int:
    """The encoder cap of 0.33.0 (E7 with F5), applied after the split."""
    return encoder_cap_e7(cfg, c, n, shift_lookahead(cfg), margin_none(cfg))


ENCODER_CALL_SITES: dict[Callable[[Config, int, int], int], tuple[Callable[..., int], ...]] = {
    encoder_v15: (shift_eagle, margin_none),
    encoder_v24: (shift_eagle, margin_eagle),
    encoder_v28: (shift_lookahead, margin_lookahead),
    encoder_v33: (shift_lookahead, margin_none),
}
"""Each built-in encoder stage's call-site rules, (shift, free margin), which the same
release's real ``_try_schedule_encoder_inputs`` runs with (the shift is the argument
``schedule()`` passes; the margin decides which items the scheduler still holds)."""


def encoder_forced_v24(cfg: Config, c: int, n: int) -> bool:
    """Whether the chunk [c, c + n) ends where the encoder cap of 0.24-0.27 stops it: one more
    token would be cut back to ``n`` (:func:`encoder_v24` of ``n + 1`` is ``n``), because the
    window then reaches an item the encoder cannot schedule (SPEC P4 exemption (b); the cap
    of vLLM #40707). For the keep-subblock-encoder-only split (#40709 narrowed to #40707)."""
    return encoder_v24(cfg, c, n + 1) == n
