"""Copies of cached vLLM release trees for tests, edited the way a pull request would edit them.

No vLLM code is committed: every copy is made at test time from the release cache
(:func:`chunkproof.source.releases.release_root`), and the edits below are the only text added.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from chunkproof.source.extraction import SCHEDULER_FILE
from chunkproof.source.releases import release_root


def copy_release(version: str, into: Path, with_manifest: bool) -> Path:
    """A copy of a cached release root (as a checkout or unpacked wheel would hold it)."""
    shutil.copytree(release_root(version), into)
    if not with_manifest:
        (into / "manifest.json").unlink()
    return into


def _edit(root: Path, replacements: list[tuple[str, str]]) -> Path:
    """Apply each (old, new) to the copy's scheduler.py; each old text occurs exactly once."""
    scheduler = root / SCHEDULER_FILE
    text = scheduler.read_text()
    for old, new in replacements:
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
        text = text.replace(old, new)
    scheduler.write_text(text)
    return root


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
    """0.33.0's source tree with the lookahead-in-split fix applied to its scheduler.py (no
    manifest: a checkout of unknown release, composed as ``vllm-latest``)."""
    root = copy_release("0.33.0", into, with_manifest=False)
    return _edit(root, [(_SPLIT_RETURN, _SPLIT_FIX + _SPLIT_RETURN), (_RESERVE_TEST, _RESERVE_FIX)])


_SPLIT_START = "        start = (\n            request.num_computed_tokens\n"

READS_SCHEDULER_STATE = """\
        if not self.need_mamba_block_aligned_split or not self.has_mamba_layers:
            return num_new_tokens
        if self.cache_config.mamba_cache_mode != "align":
            return num_new_tokens
        if (
            self.speculative_config is not None
            and self.speculative_config.num_speculative_tokens < self.num_prefill_lookahead
        ):
            return 0
        if request.num_output_tokens < 0 or request.num_output_placeholders != 0:
            return 0
"""
"""A patch that reads attributes of the scheduler and the request beyond the model's table
(the gate of the split, the cache mode, the speculative config, the output count) and changes
nothing on any configuration vLLM runs the split with."""

RESUMED_ONE_TOKEN_AT_A_TIME = """\
        if request.num_output_tokens > 0:
            return min(num_new_tokens, 1)
        speculative = self.speculative_config
        if speculative is not None and speculative.num_speculative_tokens > 2:
            return min(num_new_tokens, 2)
"""
"""A patch whose effect shows the values it reads: a resumed request (T > P) advances one
token per step, and a request under MTP with k > 2 drafts at most two."""


def patched_split_start(into: Path, lines: str) -> Path:
    """0.33.0's source tree with ``lines`` inserted at the top of the split's body (after its
    docstring), keeping the release's manifest (so it is composed as 0.33.0)."""
    root = copy_release("0.33.0", into, with_manifest=True)
    return _edit(root, [(_SPLIT_START, lines + _SPLIT_START)])
