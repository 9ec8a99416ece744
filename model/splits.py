"""The Mamba block-aligned split of every release (history note section 3), plus proposed fixes.

Each ``split_*`` function maps ``(cfg, c, n)`` to the chunk length after the split: ``c`` is
the split's start (computed tokens plus any hit), ``n`` the proposed chunk; the positions they
stop at (lambda, tau) are functions of ``cfg`` of their own, listed per variant in
:data:`CACHE_POSITIONS`. They are written in the policy
subset (:mod:`chunkproof.model.subset`) and are the only definition of each variant: the
vectorised and symbolic forms are derived from this source.

``cfg`` attributes read here (history note section 2 names in brackets): ``split_block`` [B: the
split's grid ``cache_config.block_size``, called G where it differs from the Mamba block],
``sched_block`` [B_s], ``hash_block`` [H], ``prompt`` [P], ``tokens`` [T], ``drop`` [D],
``hash_lookahead`` [L_h], ``partial_hits`` [F], ``exact_junction`` [S], ``junction`` [J],
``checkpoints`` [K], ``checkpoint_alignment`` [alpha, 0 = none], ``max_sched`` [M],
``threshold`` [theta], ``uncached_prefix`` [u], ``lookahead`` [L].
"""

from collections.abc import Callable

from chunkproof.model.arith import ck30, ck32, ck33, fl, valid
from chunkproof.model.config import Config
from chunkproof.model.stages import encoder_forced_v24
from chunkproof.model.step import eagle_family


def prefill_end(cfg: Config) -> int:
    """E = max(P, T - 1) (SPEC S1)."""
    return max(cfg.prompt, cfg.tokens - 1)


def max_chunk(cfg: Config) -> int:
    """m = min(M, theta) if theta > 0 else M: the split always reads the static theta."""
    if cfg.threshold > 0:
        return min(cfg.max_sched, cfg.threshold)
    return cfg.max_sched


def back_off(lam: int, cfg: Config, drop: bool) -> int:
    """lambda := max(lambda - B, 0) under the EAGLE block drop (V1-V7, rule 2/3)."""
    if drop:
        return max(lam - cfg.split_block, 0)
    return lam


def next_boundary(c: int, block: int) -> int:
    """beta = (floor(c / B) + 1) * B: the next block boundary strictly above c."""
    return (c // block + 1) * block


def align_end(cfg: Config, c: int, e: int, keep: bool = False) -> int:
    """V5+ rule 4: a non-final end floors to the grid unless that collapses a sub-block chunk.

    a := fl(e, B); e := a if a > c or B <= m, else e is kept (the sub-block advance). With
    ``keep`` (the #40709 variants) the ``B <= m`` disjunct is off: a chunk that flooring would
    collapse to 0 is kept unfloored.
    """
    a = fl(e, cfg.split_block)
    if a > c or (cfg.split_block <= max_chunk(cfg) and not keep):
        return a
    return e


def lambda_prompt(cfg: Config) -> int:
    """V1's last cache position lambda = fl(P, B), less B under ``use_eagle`` (history note
    3, V1): 0.15 backs off whenever an EAGLE-family drafter is configured, which is D on
    every configuration the release accepts (SPEC S1b) and also L >= 1 outside them."""
    return back_off(fl(cfg.prompt, cfg.split_block), cfg, eagle_family(cfg, 0))


def lambda_eagle(cfg: Config) -> int:
    """lambda of V2-V6 (0.17-0.29): fl(T, B), less B under ``use_eagle`` (history note 3), as
    :func:`lambda_prompt`."""
    return back_off(fl(cfg.tokens, cfg.split_block), cfg, eagle_family(cfg, 0))


def lambda_tokens(cfg: Config) -> int:
    """lambda of V7 (0.30-0.31): fl(T, B), less B under D (``use_eagle_block_drop``)."""
    return back_off(fl(cfg.tokens, cfg.split_block), cfg, cfg.drop)


def lambda_ck32(cfg: Config) -> int:
    """lambda of V8: ck32(T, B, D)."""
    return ck32(cfg.tokens, cfg.split_block, cfg.drop)


def lambda_ck33(cfg: Config) -> int:
    """lambda of V9 (``get_mamba_prefill_checkpoint_position``): ck33(T, B, D, L_h)."""
    return ck33(cfg.tokens, cfg.split_block, cfg.drop, cfg.hash_lookahead)


def tau_floor(cfg: Config) -> int:
    """The partial-tail stop tau of V4-V6 (with partial hits F): fl(P, H)."""
    return fl(cfg.prompt, cfg.hash_block)


def tau_v7(cfg: Config) -> int:
    """tau of V7 and V7' (with F): fl(P, H), less H under D."""
    tau = fl(cfg.prompt, cfg.hash_block)
    if cfg.drop:
        return max(tau - cfg.hash_block, 0)
    return tau


def tau_ck32(cfg: Config) -> int:
    """tau of V8 (with F): ck32(P, H, D)."""
    return ck32(cfg.prompt, cfg.hash_block, cfg.drop)


def tau_ck33(cfg: Config) -> int:
    """tau of V9 (with F): ck33(P, H, D, L_h)."""
    return ck33(cfg.prompt, cfg.hash_block, cfg.drop, cfg.hash_lookahead)


def stopmin(c: int, e: int, s1: int, s2: int, s3: int, s4: int) -> int:
    """stopmin(c, e, S): the earliest stop strictly inside (c, e), else e (history note 2)."""
    stops = (s1, s2, s3, s4)
    return min((s for s in stops if c < s < e), default=e)


def split_v1(cfg: Config, c: int, n: int) -> int:
    """V1 (0.15.0-0.16.0): floor the length below lambda = fl(P, B); never split resumed requests.

    History note 3, V1 rules 1-7; ``cfg.external`` is the external hit x the call passes.
    """
    assert cfg.external == 0
    if cfg.tokens - cfg.prompt != 0:
        return n
    lam = lambda_prompt(cfg)
    e = c + n
    if e < lam:
        return fl(n, cfg.split_block)
    if c < lam < e:
        return lam - c
    return n


def split_v2(cfg: Config, c: int, n: int) -> int:
    """V2 (0.17.0-0.22.1): V1 on T instead of P, for every c < E; asserts x = 0.

    History note 3, V2 rules 1-5.
    """
    assert cfg.external == 0
    return split_v2b(cfg, c, n)


def split_v2b(cfg: Config, c: int, n: int) -> int:
    """V2b (0.23.0): V2 without the external-hit assertion (history note 3, V2 rules 2-5)."""
    if c >= prefill_end(cfg):
        return n
    lam = lambda_eagle(cfg)
    e = c + n
    if e < lam:
        return fl(n, cfg.split_block)
    if c < lam < e:
        return lam - c
    return n


def split_v3(cfg: Config, c: int, n: int) -> int:
    """V3 (0.24.0-0.25.1): V2b, then the Marconi admission cap inside the prefill branch.

    History note 3, V3 rule 6: if u >= B and n1 > u then n1 := fl(u, B).
    """
    n1 = split_v2b(cfg, c, n)
    if c < prefill_end(cfg) and cfg.uncached_prefix >= cfg.split_block and n1 > cfg.uncached_prefix:
        return fl(cfg.uncached_prefix, cfg.split_block)
    return n1


def split_v4(cfg: Config, c: int, n: int) -> int:
    """V4 (0.26.0): the split rewritten as stops (history note 3, V4 rules 1-9)."""
    big_e = prefill_end(cfg)
    if c >= big_e:
        return n
    block = cfg.split_block
    lam = lambda_eagle(cfg)
    e = c + n
    if e < lam:
        e = fl(e, block)
    beta = next_boundary(c, block)
    tau = tau_floor(cfg) if cfg.partial_hits else 0
    s1 = beta if c % block != 0 and beta <= lam else 0
    s3 = tau if lam < tau < cfg.prompt else 0
    s4 = c + fl(cfg.junction - c, block) if c < cfg.junction < e else 0
    e = stopmin(c, e, s1, lam, s3, s4)
    return max(e - c, 0)


def split_v5(cfg: Config, c: int, n: int) -> int:
    """V5 (0.27.0-0.28.0): align every end before E; sub-block advance when B > m.

    History note 3, V5 rules 1-9 (:func:`split_v5_keeping` with keep false).
    """
    return split_v5_keeping(cfg, c, n, False)


def split_v6(cfg: Config, c: int, n: int) -> int:
    """V6 (0.29.0): V5 with the first internal-checkpoint form I := K and c mod B = 0.

    History note 3, V6: with I, lambda := 0 and a non-final chunk is not aligned.
    """
    big_e = prefill_end(cfg)
    if c >= big_e:
        return n
    block = cfg.split_block
    lam = lambda_eagle(cfg)
    internal = cfg.checkpoints and c % block == 0
    if internal:
        lam = 0
    e = c + n
    if e < big_e and not internal:
        e = align_end(cfg, c, e)
    tau = tau_floor(cfg) if cfg.partial_hits else 0
    s1 = next_boundary(c, block) if c % block != 0 else 0
    s3 = tau if lam < tau < cfg.prompt else 0
    s4 = c + fl(cfg.junction - c, block) if c < cfg.junction < e else 0
    e = stopmin(c, e, s1, lam, s3, s4)
    return max(e - c, 0)


def junction_stop(cfg: Config, c: int, e: int) -> int:
    """V7+ rules 9-10: s4 = (J if S and J <= P else c + fl(J - c, B)) when c < J < e, else 0."""
    if not c < cfg.junction < e:
        return 0
    if cfg.exact_junction and cfg.junction <= cfg.prompt:
        return cfg.junction
    return c + fl(cfg.junction - c, cfg.split_block)


def split_v7(cfg: Config, c: int, n: int) -> int:
    """V7 (0.30.0) and V7' (0.31.0): checkpoints checked by valid(), ck30 positions.

    History note 3, V7 rules 1-11.
    """
    big_e = prefill_end(cfg)
    if c >= big_e:
        return n
    block = cfg.split_block
    lam = lambda_tokens(cfg)
    e = c + n
    p = ck30(big_e, cfg.hash_block, cfg.drop)
    internal = (
        cfg.checkpoints
        and e >= big_e
        and valid(c, e, p, cfg.hash_block, block, cfg.checkpoint_alignment)
    )
    if internal:
        lam = 0
    if e < big_e:
        e = align_end(cfg, c, e)
    tau = tau_v7(cfg) if cfg.partial_hits and not internal else 0
    s1 = next_boundary(c, block) if c % block != 0 and not internal else 0
    s3 = tau if lam < tau < cfg.prompt else 0
    s4 = junction_stop(cfg, c, e)
    e = stopmin(c, e, s1, lam, s3, s4)
    return max(e - c, 0)


def ckpt_grid(cfg: Config) -> int:
    """G := H if F else B_s: the grid of the prefill checkpoint position (V8, V9)."""
    if cfg.partial_hits:
        return cfg.hash_block
    return cfg.sched_block


def split_v8(cfg: Config, c: int, n: int) -> int:
    """V8 (0.32.0): V7 with ck32 for lambda, p and tau (the "proof limit").

    History note 3, V8.
    """
    big_e = prefill_end(cfg)
    if c >= big_e:
        return n
    block = cfg.split_block
    lam = lambda_ck32(cfg)
    e = c + n
    p = ck32(big_e, ckpt_grid(cfg), cfg.drop)
    internal = (
        cfg.checkpoints
        and e >= big_e
        and valid(c, e, p, cfg.hash_block, block, cfg.checkpoint_alignment)
    )
    if internal:
        lam = 0
    if e < big_e:
        e = align_end(cfg, c, e)
    tau = tau_ck32(cfg) if cfg.partial_hits and not internal else 0
    s1 = next_boundary(c, block) if c % block != 0 and not internal else 0
    s3 = tau if lam < tau < cfg.prompt else 0
    s4 = junction_stop(cfg, c, e)
    e = stopmin(c, e, s1, lam, s3, s4)
    return max(e - c, 0)


def split_v9(cfg: Config, c: int, n: int) -> int:
    """V9 (0.33.0): V8 with ck33, which keeps every position L_h tokens clear of its limit.

    History note 3, V9.
    """
    big_e = prefill_end(cfg)
    if c >= big_e:
        return n
    block = cfg.split_block
    lh = cfg.hash_lookahead
    lam = lambda_ck33(cfg)
    e = c + n
    p = ck33(big_e, ckpt_grid(cfg), cfg.drop, lh)
    internal = (
        cfg.checkpoints
        and e >= big_e
        and valid(c, e, p, cfg.hash_block, block, cfg.checkpoint_alignment)
    )
    if internal:
        lam = 0
    if e < big_e:
        e = align_end(cfg, c, e)
    tau = tau_ck33(cfg) if cfg.partial_hits and not internal else 0
    s1 = next_boundary(c, block) if c % block != 0 and not internal else 0
    s3 = tau if lam < tau < cfg.prompt else 0
    s4 = junction_stop(cfg, c, e)
    e = stopmin(c, e, s1, lam, s3, s4)
    return max(e - c, 0)


def split_keep_subblock(cfg: Config, c: int, n: int) -> int:
    """keep-subblock (SPEC V): V2, but when flooring would return 0, keep the unfloored chunk."""
    k = split_v2(cfg, c, n)
    if k == 0 and c < prefill_end(cfg):
        return n
    return k


def split_lookahead_in_split(cfg: Config, c: int, n: int) -> int:
    """lookahead-in-split (SPEC V): V9, then an end in the window (T - L, T) is resolved here.

    For L >= 2 and T - L < e < T, the first that applies: (1) finish the prefill if the budget
    reaches T and the chunk crosses no block boundary from a mid-block start; (2) else end at
    fl(T - L, B) if that is past c; (3) else keep the aligned end.
    """
    k = split_v9(cfg, c, n)
    e = c + k
    t = cfg.tokens
    block = cfg.split_block
    if cfg.lookahead >= 2 and t - cfg.lookahead < e < t:
        crosses = c % block != 0 and next_boundary(c, block) < t
        if c + n >= t and not crosses:
            return t - c
        a = fl(t - cfg.lookahead, block)
        if a > c:
            return a - c
    return k


def split_v5_keeping(cfg: Config, c: int, n: int, keep: bool) -> int:
    """V5 (history note 3, V5 rules 1-9) whose rule 4 also keeps a sub-block chunk when ``keep``.

    Rule 4 becomes: if e < E, a := fl(e, B); e := a if a > c, or if B <= m and not ``keep``;
    else e is kept. With ``keep`` false this is V5; with ``keep`` true the ``B <= m`` disjunct
    is gone, so a non-final chunk that flooring would collapse to 0 (e < fl(c, B) + B) is kept
    unfloored: the patch of vLLM #40709 applied to 0.27's code, where
    ``aligned_end`` replaces ``end`` only if ``aligned_end > start``. The stops still apply: a
    kept chunk lies inside one block, so only the partial-tail stop tau (H < B) can shorten it,
    never to 0.
    """
    big_e = prefill_end(cfg)
    if c >= big_e:
        return n
    block = cfg.split_block
    lam = lambda_eagle(cfg)
    e = c + n
    if e < big_e:
        e = align_end(cfg, c, e, keep)
    tau = tau_floor(cfg) if cfg.partial_hits else 0
    s1 = next_boundary(c, block) if c % block != 0 else 0
    s3 = tau if lam < tau < cfg.prompt else 0
    s4 = c + fl(cfg.junction - c, block) if c < cfg.junction < e else 0
    e = stopmin(c, e, s1, lam, s3, s4)
    return max(e - c, 0)


def split_keep_subblock_v5(cfg: Config, c: int, n: int) -> int:
    """keep-subblock-v5 (vLLM #40709 on 0.27's V5): every sub-block chunk that V5 would floor
    to 0 is kept, from any start c (:func:`split_v5_keeping` with keep true).

    From a mid-block start V5's stop s1 = beta already ends any chunk reaching the next
    boundary on it; a chunk that does not reach it is kept too, so ends stay off the grid
    while the chunks stay short (the encoder cap again, or a budget b < beta - c).
    """
    return split_v5_keeping(cfg, c, n, True)


def split_keep_subblock_realign(cfg: Config, c: int, n: int) -> int:
    """keep-subblock-realign (the #40709 review's suggestion on 0.27's V5): keep a sub-block
    chunk only from a start on the split grid (c mod B = 0); from a mid-block start V5 rules
    unchanged, so the next chunk after a kept one ends at beta = (floor(c / B) + 1) * B (stop
    s1), at E or later, or is 0 until a chunk reaches beta (when B <= m)."""
    return split_v5_keeping(cfg, c, n, c % cfg.split_block == 0)


def split_keep_subblock_encoder_only(cfg: Config, c: int, n: int) -> int:
    """keep-subblock-encoder-only (#40709 narrowed to its cause, vLLM #40707): keep a sub-block
    chunk only when its end is forced by the encoder cap of 0.24-0.27, which runs before the
    split in 0.27's composition (:func:`~chunkproof.model.stages.encoder_forced_v24`); a chunk
    the budget alone made sub-block is floored to 0 as in V5."""
    return split_v5_keeping(cfg, c, n, encoder_forced_v24(cfg, c, n))


Position = Callable[[Config], int]

CACHE_POSITIONS: dict[str, tuple[Position, Position | None]] = {
    "V1": (lambda_prompt, None),
    "V2": (lambda_eagle, None),
    "V2b": (lambda_eagle, None),
    "V3": (lambda_eagle, None),
    "V4": (lambda_eagle, tau_floor),
    "V5": (lambda_eagle, tau_floor),
    "V6": (lambda_eagle, tau_floor),
    "V7": (lambda_tokens, tau_v7),
    "V7'": (lambda_tokens, tau_v7),
    "V8": (lambda_ck32, tau_ck32),
    "V9": (lambda_ck33, tau_ck33),
}
"""Each split variant's last cache position lambda and partial-tail stop tau (``None``: the
variant has none), the very functions the splits call (history note 3)."""
