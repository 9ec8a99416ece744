"""A synthesised candidate written into a release's own ``scheduler.py`` (SPEC Y5): the edit a
pull request would make to ``_mamba_block_aligned_split`` and ``_reserve_prefill_lookahead``,
as vLLM code, and its unified diff.

The split gets the window rule of the template (:func:`chunkproof.model.holes.split_template`)
before its final ``return``; the reservation's test gets the ends it spares and, with
``keep``, a trim that would leave nothing keeps the chunk
(:func:`~chunkproof.model.holes.reserve_template`). The code reads what the release's methods
already read (``self.cache_config.block_size`` is G, ``self.block_size`` is B_s,
``get_mamba_prefill_checkpoint_position`` gives the partial tail tau as the split computes
it), so chunkproof reads the patched tree back like any other and ``conform`` proves it equal
to the candidate. The anchors are the two lines of 0.33.0 and 0.34.0 the edit replaces; a tree
without them exactly once is a one-line error.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path

from chunkproof.model.errors import PolicyError
from chunkproof.source.extraction import SCHEDULER_FILE

SPLIT_RETURN = "        return max(end - start, 0)\n"
"""The split's last line, before which the window rule goes."""

RESERVE_TRIM = (
    "        if 0 < remaining < self.num_prefill_lookahead:\n"
    "            num_new_tokens -= self.num_prefill_lookahead - remaining\n"
)
"""R1's trim, which the reservation holes replace."""

_GRIDS = {1: "self.cache_config.block_size", 2: "self.block_size"}
"""The grid each of ``finish`` and ``back`` 1 and 2 names: G, and B_s."""

_TAIL = (
    "get_mamba_prefill_checkpoint_position(\n"
    "            request.num_prompt_tokens,\n"
    "            self.hash_block_size,\n"
    "            self.use_eagle_block_drop,\n"
    "            num_hash_lookahead_tokens=self.num_hash_lookahead_tokens,\n"
    "        )"
)
"""The partial tail tau, as the split computes its ``tail_boundary``."""


def split_lines(finish: int, back: int) -> str:
    """The window rule of the template's split as vLLM code (empty at finish = back = 0)."""
    if not finish and not back:
        return ""
    lines = [
        f"        # chunkproof synthesize (SPEC Y1): finish={finish}, back={back}\n",
        "        end = max(end, start)\n",
        "        lookahead = self.num_prefill_lookahead\n",
        "        total = request.num_tokens\n",
        "        if total - lookahead < end < total:\n",
    ]
    if finish == 3:
        lines += [
            "            if start + num_new_tokens >= total:\n",
            "                return total - start\n",
        ]
    elif finish:
        grid = _GRIDS[finish]
        lines += [
            f"            grid = {grid}\n",
            "            crosses = start % grid != 0 and (start // grid + 1) * grid < total\n",
            "            if start + num_new_tokens >= total and not crosses:\n",
            "                return total - start\n",
        ]
    if back:
        lines += [
            f"            grid = {_GRIDS[back]}\n",
            "            window_floor = (total - lookahead) // grid * grid\n",
            "            if window_floor > start:\n",
            "                return window_floor - start\n",
        ]
    return "".join(lines)


def reserve_lines(spare: int, keep: int) -> str:
    """The template's reservation test and trim as vLLM code (R1's own at spare = keep = 0)."""
    if not spare and not keep:
        return RESERVE_TRIM
    lines = [f"        # chunkproof synthesize (SPEC Y1): spare={spare}, keep={keep}\n"]
    test = "0 < remaining < self.num_prefill_lookahead"
    if spare:
        lines.append("        end = num_computed_tokens + num_new_tokens\n")
        spared = "end % self.cache_config.block_size == 0"
        if spare == 2:
            lines.append(f"        tail = {_TAIL}\n")
            lines.append("        at_tail = self.mamba_partial_cache_hit and end == tail\n")
            spared += " or at_tail"
        lines.append(f"        spared = {spared}\n")
        test += " and not spared"
    lines.append(f"        if {test}:\n")
    if keep:
        lines += [
            "            trimmed = num_new_tokens - (self.num_prefill_lookahead - remaining)\n",
            "            if trimmed > 0:\n",
            "                num_new_tokens = trimmed\n",
        ]
    else:
        lines.append("            num_new_tokens -= self.num_prefill_lookahead - remaining\n")
    return "".join(lines)


def patched(text: str, values: Mapping[str, int]) -> str:
    """``scheduler.py``'s ``text`` with the candidate at ``values`` written in (module
    docstring)."""
    for anchor, what in ((SPLIT_RETURN, "the split's return"), (RESERVE_TRIM, "R1's trim")):
        if text.count(anchor) != 1:
            raise PolicyError(
                f"scheduler.py: {what} ({anchor.strip().splitlines()[0]!r}) occurs "
                f"{text.count(anchor)} times, not once: the candidate cannot be written in"
            )
    split = split_lines(values["finish"], values["back"])
    text = text.replace(SPLIT_RETURN, split + SPLIT_RETURN)
    return text.replace(RESERVE_TRIM, reserve_lines(values["spare"], values["keep"]))


def scheduler_diff(root: Path, values: Mapping[str, int]) -> str:
    """The unified diff of the candidate against the tree ``root``'s ``scheduler.py``, with
    the paths a pull request shows (``a/vllm/v1/core/sched/scheduler.py``)."""
    path = root / SCHEDULER_FILE
    before = path.read_text()
    after = patched(before, values)
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            f"a/{SCHEDULER_FILE}",
            f"b/{SCHEDULER_FILE}",
        )
    )
