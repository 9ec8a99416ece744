"""Integer helpers of the policy subset (history note section 2).

Every function here is written in the policy subset (see :mod:`chunkproof.model.subset`):
integers, comparisons, ``//`` and ``%``, ``min``/``max``, ``if``/``else`` and calls to other
helpers of this module. The policies call them, and the derived vectorised and symbolic forms
inline them, so they are defined exactly once.

Floor division is Python's: it rounds toward minus infinity (``(-1) // 16 == -1``), which the
``valid`` rule depends on.
"""


def fl(x: int, m: int) -> int:
    """fl(x, m) = m * floor(x / m): ``x`` floored onto the grid of ``m`` (history note 2)."""
    return x // m * m


def cdiv(x: int, m: int) -> int:
    """The ceiling of ``x / m`` for ``m > 0``."""
    return -(-x // m)


def ck30(n: int, h: int, drop: bool) -> int:
    """ck30(N, h, d) = max(fl(N - 1, h) - d*h, 0): checkpoint position of 0.30 and 0.31."""
    p = fl(n - 1, h)
    if drop:
        p = p - h
    return max(p, 0)


def ck32(n: int, h: int, drop: bool) -> int:
    """ck32(N, h, d) = max(fl(N', h) - d*h, 0), N' = N if d else N - 1 (0.32)."""
    limit = n if drop else n - 1
    p = fl(limit, h)
    if drop:
        p = p - h
    return max(p, 0)


def ck33(n: int, h: int, drop: bool, hash_lookahead: int) -> int:
    """ck33(N, h, d, L_h) = max(fl(N', h) - d*h, 0), N' = N if d else N - max(1, L_h) (0.33).

    This is also the slot note's ckpos(n, u, drop) with hash lookahead (slot note section 1).
    """
    limit = n if drop else n - max(1, hash_lookahead)
    p = fl(limit, h)
    if drop:
        p = p - h
    return max(p, 0)


def valid(s: int, e: int, p: int, h: int, block: int, alpha: int) -> bool:
    """valid(s, e, p, h, B, alpha): the backend can export checkpoint p in query [s, e).

    History note 2 (``is_mamba_prefill_checkpoint_valid``); slot note W6. ``alpha == 0`` stands
    for "no checkpoint alignment" (``None`` in vLLM), which makes it false.
    """
    if alpha <= 0:
        return False
    return (
        s % h == 0
        and cdiv(e, block) - 2 > (s - 1) // block
        and s + h <= p
        and s < p < e
        and (p - s) % alpha == 0
    )
