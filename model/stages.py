"""The caps ``schedule()`` applies around the split (history note sections 4 and 6).

Each stage maps ``(cfg, c, n)`` to a new ``n`` and is written in the policy subset. The first
stage of every composition is a budget cap that receives the offered budget ``b`` as ``n``.
"""

from chunkproof.model.config import Config


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
