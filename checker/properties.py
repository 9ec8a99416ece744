"""Properties P1-P7 (SPEC P) as predicates on one step, written once in the policy subset.

A step is (c, b) with ``n`` the chunk before the split and ``e = c + chunk`` its end. Each
predicate returns ``True`` when the step *violates* the property. They are plain functions, so
traces are checked by calling them; the explorer evaluates the very same source over arrays of
states and budgets (:mod:`chunkproof.model.vectorised`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from chunkproof.checker.slots import runs_past_block
from chunkproof.model.arith import ck33
from chunkproof.model.config import Config
from chunkproof.model.splits import ckpt_grid, max_chunk, prefill_end


@dataclass(frozen=True)
class Property:
    """A property's id, short name and definition (SPEC P)."""

    id: str
    name: str
    definition: str


PROPERTIES: dict[str, Property] = {
    p.id: p
    for p in (
        Property("P1", "LIVE", "every reachable c < E gets a chunk > 0 with the largest budget"),
        Property(
            "P2",
            "PROGRESS-BUDGET",
            "the least b* such that every reachable c < E progresses for every b >= b*",
        ),
        Property("P3", "NOCROSS", "a chunk starting mid-block ends at or before that block's end"),
        Property(
            "P4",
            "ALIGN",
            "every chunk end before E is a multiple of B, except sound "
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
            "the identical-resend position R* is covered whenever a chunk could end there",
        ),
        Property("P7", "COST", "steps to finish under const(b) against ceil((E - c0) / b)"),
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
    """P1 at state c: c < E and the chunk with the largest budget is 0 (permanent: SPEC P1)."""
    return c < prefill_end(cfg) and chunk == 0


def crosses_block_end(cfg: Config, c: int, e: int) -> bool:
    """P3 for chunk [c, e): the slot oracle's own crossing rule (slot note 4.2, rule 5)."""
    return runs_past_block(c, e, cfg.block)


def misaligned(cfg: Config, c: int, e: int) -> bool:
    """P4 for chunk [c, e) with e > c: an end before E off the grid, unless it is a sub-block
    advance (B > m) that keeps P3. Encoder-forced ends (exemption b) are not modelled."""
    if e <= c or e >= prefill_end(cfg) or e % cfg.block == 0:
        return False
    sub_block = cfg.block > max_chunk(cfg)
    return not (sub_block and not crosses_block_end(cfg, c, e))


def in_window(cfg: Config, c: int, n: int, e: int) -> bool:
    """P5 strict for chunk [c, e): it ends inside the lookahead window (T - L, T)."""
    return e > c and cfg.tokens - cfg.lookahead < e < cfg.tokens


def in_window_relaxed(cfg: Config, c: int, n: int, e: int) -> bool:
    """P5 relaxed: a window end is allowed only on a multiple of B when n < T - c."""
    if not in_window(cfg, c, n, e):
        return False
    return e % cfg.block != 0 or c + n >= cfg.tokens


def resend_position(cfg: Config) -> int:
    """R* = ckpos(P, A, D) (slot note 5): A = H with partial hits, else the scheduler block."""
    return ck33(cfg.prompt, ckpt_grid(cfg), cfg.drop, cfg.hash_lookahead)


def skips_resend(cfg: Config, c: int, e: int) -> bool:
    """P6 for chunk [c, e): it runs over R* > 0 although its budget allowed it to end there."""
    r = resend_position(cfg)
    return r > 0 and c < r < e


def ideal_steps(cfg: Config, budget: int) -> int:
    """P7: the ideal number of steps ceil((E - c0) / b)."""
    return -(-(prefill_end(cfg) - cfg.start) // budget)


STUCK_PROPERTIES = ("P1", "P2", "P7")
"""Properties broken at a state whose chunk under the largest budget is 0 (:func:`stuck`): a
livelock (P1) has no progress budget (P2) and never finishes (P7)."""

EDGE_PROPERTIES: dict[str, Callable[..., bool]] = {
    "P3": crosses_block_end,
    "P4": misaligned,
    "P6": skips_resend,
}
"""Properties of one chunk [c, e): predicate(cfg, c, e)."""

WINDOW_PROPERTIES: dict[str, Callable[..., bool]] = {
    "strict": in_window,
    "relaxed": in_window_relaxed,
}
"""P5 forms: predicate(cfg, c, n, e)."""
