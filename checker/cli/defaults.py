"""What ``check``, ``explore`` and ``prove`` cover when no range is given (SPEC CLI).

Both defaults are unions of grids: a classic grid over the block size, the lookahead, the drop,
the prompt and the budget cap, and one grid per further input of SPEC S1 (resumed requests,
admission starts, the split grid, internal checkpoints, the junction, retention), each varying
its input on a smaller base so that the whole stays quick. A policy's grids use only what its
release has (no checkpoint grid before 0.29, ``L_h = 0, L`` only in 0.33, ...); every input a
grid fixes is named in the verdict's range.
"""

from __future__ import annotations

from collections.abc import Mapping

from chunkproof.model.policy import Policy
from chunkproof.spec.space import Grid, Space, grid_from

SMALL_CLASSIC = {
    "block": "4,8,16",
    "lookahead": "0-4",
    "drop": "both",
    "prompt": "1-48",
    "max_sched": "1-32",
}
"""The classic exhaustive grid of ``explore`` and ``check``."""

PRODUCTION_BLOCKS = "16,64,528,800,1600,2096,4416"

PRODUCTION_CLASSIC = {
    "block": PRODUCTION_BLOCKS,
    "lookahead": "0-8",
    "drop": "both",
    "threshold": "0-1048576",
    "prompt": "1-1048576",
    "max_sched": "1-65536",
}
"""The default production range of the prover (SPEC CLI)."""


def release_minor(policy: Policy) -> int:
    """The minor version of the release a policy models (33 for proposed fixes on top of the
    newest release, 17 for those on top of V2)."""
    if policy.releases:
        return int(policy.releases[0].split(".")[1])
    return 17 if policy.composition in ("C1", "C2", "C3", "C4") else 33


def _features(minor: int) -> dict[str, str]:
    """The values of the optional inputs a release has, for the grids that vary them."""
    return {
        "hash_lookahead": "0,L" if minor >= 33 else "0",
        "checkpoints": "both" if minor >= 29 else "off",
        "checkpoint_alignment": "1,H" if minor >= 30 else "1",
        "exact_junction": "both" if minor >= 30 else "off",
        "retention": "none,0" if minor >= 24 else "none",
        "junction": "0,any" if minor >= 26 else "0",
        "hash_block": "G,G/2" if minor >= 26 else "G",
        "uncached_prefix": "0,4,8" if minor in (24, 25) else "0",
    }


def small_space(policy: Policy, budget: tuple[int, int] | None = None) -> Space:
    """The explorer's default: the classic grid plus one grid per further input."""
    minor = release_minor(policy)
    feature = _features(minor)
    lh = {"hash_lookahead": feature["hash_lookahead"]}
    base = {
        "block": "4,8",
        "lookahead": "0-3",
        "drop": "both",
        "prompt": "1-16",
        "max_sched": "1-8",
    }
    grids = [
        grid_from({**SMALL_CLASSIC, **lh}, "classic"),
        grid_from(
            {**base, **lh, "prompt": "1-24", "max_sched": "1-12", "tokens": "P+1-2"}, "resumed"
        ),
        grid_from(
            {**base, **lh, "start": "block,hash,external", "hash_block": feature["hash_block"]},
            "admission start",
        ),
        grid_from(
            {
                **base,
                "block": "8,16",
                "split_block": "B/2,B/4",
                "prompt": "1-32",
                "max_sched": "1-16",
            },
            "split grid G != B",
        ),
    ]
    if minor >= 26:
        grids.append(
            grid_from(
                {
                    **base,
                    "hash_block": feature["hash_block"],
                    "junction": "any",
                    "exact_junction": feature["exact_junction"],
                    "start": "0,hash",
                },
                "junction",
            )
        )
    if minor >= 29:
        grids.append(
            grid_from(
                {
                    **base,
                    **lh,
                    "checkpoints": "on",
                    "checkpoint_alignment": feature["checkpoint_alignment"],
                    "hash_block": feature["hash_block"],
                    "start": "0,hash",
                },
                "internal checkpoints",
            )
        )
    if minor >= 24:
        grids.append(
            grid_from(
                {
                    **base,
                    **lh,
                    "retention": "0",
                    "hash_block": feature["hash_block"],
                    "prompt": "1-32",
                    "max_sched": "1-16",
                },
                "retention",
            )
        )
    if minor in (24, 25):
        grids.append(grid_from({**base, "uncached_prefix": "4,8"}, "uncached prefix"))
    if policy.stage("encoder") is not None:
        grids.append(grid_from({**base, **ENCODER_GRID}, "encoder items"))
    return Space(tuple(grids), budget)


ENCODER_GRID = {
    "block": "4",
    "lookahead": "0-2",
    "prompt": "16",
    "max_sched": "4-8",
    "layout": "0-2+2-5,^0-3+2-5",
}
"""The encoder-item grid of the small space (every release has the encoder cap): two images
whose placeholders are 2-5 tokens, the first at 0-2, the second 0-3 tokens after it, in a
16-token prompt, with the cache and the compute budget at vLLM's own size max(M, largest item)
(so two items never fit together once M < their total): the shape of vLLM #40707 (encoder-and-
loops note 5) at B = 4, with L up to 2 for the EAGLE/MTP form of 0.28-0.32 (gap < 2L)."""


SYSTEM_GRID = {
    "block": "4",
    "lookahead": "0,2",
    "drop": "both",
    "prompt": "3-12",
    "max_sched": "8",
}
"""The scheduler step's default requests (``chunkproof system``): prompts of 3-12 tokens on
B = 4 under M = 8, without and with multi-module MTP (L = 2), so that a request ends a few
tokens past a block boundary, below one block, or inside the lookahead window."""


SYSTEM_POOLS: tuple[int | str, ...] = ("none", "min", *range(2, 33))
"""The pools of ``chunkproof system``'s default: the step without a pool (decode steps
modelled), and the pooled step (SPEC KV2 rule 5: allocation, preemption, S-POOL) on every pool
of 2 to 32 blocks and the least the release's start-up check accepts (a size below that is not
run: vLLM refuses to start)."""


def system_space() -> Space:
    """``chunkproof system``'s default: every request of :data:`SYSTEM_GRID`, every budget."""
    return Space((grid_from(SYSTEM_GRID, "requests"),))


def production_space(policy: Policy, budget: tuple[int, int] | None = None) -> Space:
    """The prover's default: the classic production range, and the further inputs varied on two
    block sizes (they are symbolic in the prover, so they cost no cells)."""
    minor = release_minor(policy)
    feature = _features(minor)
    grids = [
        grid_from({**PRODUCTION_CLASSIC, "hash_lookahead": feature["hash_lookahead"]}, "classic"),
        grid_from(
            {
                **PRODUCTION_CLASSIC,
                "block": "16,1600",
                "split_block": "B,B/2",
                "hash_block": feature["hash_block"],
                "hash_lookahead": feature["hash_lookahead"],
                "tokens": "P+0-1048576",
                "start": "0,block,hash,external",
                "junction": feature["junction"],
                "exact_junction": feature["exact_junction"],
                "checkpoints": feature["checkpoints"],
                "checkpoint_alignment": feature["checkpoint_alignment"],
                "retention": feature["retention"],
                "uncached_prefix": feature["uncached_prefix"],
            },
            "every input",
        ),
    ]
    return Space(tuple(grids), budget)


def user_space(texts: Mapping[str, str], budget: tuple[int, int] | None, production: bool) -> Space:
    """One grid from the range flags given (``texts`` by input name); inputs not given take the
    classic default of the explorer, or of the prover with ``production``."""
    classic = PRODUCTION_CLASSIC if production else SMALL_CLASSIC
    grid: Grid = grid_from({**classic, **texts}, "range")
    return Space((grid,), budget)


def union(spaces: list[Space]) -> Space:
    """One space holding every grid of ``spaces`` once (grids are equal when their label and
    every value set are); the budget range is the first space's (they share the flags)."""
    grids: list[Grid] = []
    for space in spaces:
        grids.extend(g for g in space.grids if g not in grids)
    return Space(tuple(grids), spaces[0].budget)
