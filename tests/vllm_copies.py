"""Copies of cached vLLM release trees for tests, and the SPEC V lookahead-in-split fix written
into a copy of 0.33.0's methods the way a PR would write it (no vLLM code is committed: the
copy is made at test time from the release cache)."""

from __future__ import annotations

import shutil
from pathlib import Path

from chunkproof.model.extraction import SCHEDULER_FILE
from chunkproof.model.releases import release_root


def copy_release(version: str, into: Path, with_manifest: bool) -> Path:
    """A copy of a cached release root (as a checkout or unpacked wheel would hold it)."""
    shutil.copytree(release_root(version), into)
    if not with_manifest:
        (into / "manifest.json").unlink()
    return into


# The SPEC V lookahead-in-split fix, written into a copy of 0.33.0's methods the way a PR
# would write it: the split resolves an end in the window (T - L, T); the reservation leaves
# block-aligned ends alone.
_SPLIT_RETURN = "        return max(end - start, 0)\n"
_SPLIT_FIX = """        lookahead = self.num_prefill_lookahead
        total = request.num_tokens
        if lookahead >= 2 and total - lookahead < end < total:
            crosses = start % block_size != 0 and next_block_boundary < total
            window_floor = (total - lookahead) // block_size * block_size
            if start + num_new_tokens >= total and not crosses:
                end = total
            elif window_floor > start:
                end = window_floor
"""
_RESERVE_TEST = "        if 0 < remaining < self.num_prefill_lookahead:\n"
_RESERVE_FIX = (
    "        end = num_computed_tokens + num_new_tokens\n"
    "        if 0 < remaining < self.num_prefill_lookahead"
    " and end % self.cache_config.block_size:\n"
)


def patched_release(into: Path) -> Path:
    """0.33.0's source tree with the fix applied to a copy of its scheduler.py."""
    root = copy_release("0.33.0", into, with_manifest=False)
    scheduler = root / SCHEDULER_FILE
    text = scheduler.read_text()
    assert text.count(_SPLIT_RETURN) == 1 and text.count(_RESERVE_TEST) == 1
    text = text.replace(_SPLIT_RETURN, _SPLIT_FIX + _SPLIT_RETURN)
    scheduler.write_text(text.replace(_RESERVE_TEST, _RESERVE_FIX))
    return root
