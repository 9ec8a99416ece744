"""A synthesised candidate written into a release's own ``scheduler.py`` (SPEC Y5): the
patched tree, read back by chunkproof as real vLLM code, is proved equal to the candidate."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import Cli
from solver_limits import SOLVER_ARGS
from vllm_copies import copy_release

from chunkproof.model.errors import PolicyError
from chunkproof.source.candidate_patch import RESERVE_TRIM, SPLIT_RETURN, patched, scheduler_diff
from chunkproof.source.extraction import SCHEDULER_FILE
from chunkproof.source.releases import release_root

CANDIDATES = [
    {"finish": 2, "back": 1, "spare": 2, "keep": 1},
    {"finish": 1, "back": 2, "spare": 1, "keep": 0},
    {"finish": 3, "back": 0, "spare": 0, "keep": 1},
]
"""Between them every value of every hole but 0, which leaves the release's code as it is."""

RANGE = ["--block", "8,16", "--split-block", "B,B/2", "--hash-block", "G,G/2", "--lookahead", "0-4"]
RANGE += ["--prompt", "1-24", "--max-sched", "1-8", "--start", "0,block,hash,external"]
RANGE += ["--drop", "both", "--jobs", "1"]
"""A range where every hole's values differ (G = B/2, partial hits, every admission start)."""


def name(base: str, values: dict[str, int]) -> str:
    return f"{base}+" + ",".join(f"{k}={v}" for k, v in values.items())


@pytest.mark.fidelity
@pytest.mark.parametrize("values", CANDIDATES)
@pytest.mark.parametrize("version", ["0.33.0", "0.34.0"])
def test_the_patched_tree_is_the_candidate(
    version: str, values: dict[str, int], tmp_path: Path, cli: Cli
) -> None:
    """SPEC Y5: conform proves the candidate equal to the release's tree with the candidate
    written in (read from its source, composed from its own schedule())."""
    root = copy_release(version, tmp_path / "tree", with_manifest=True)
    scheduler = root / SCHEDULER_FILE
    diff = scheduler_diff(root, values)
    assert diff.startswith(f"--- a/{SCHEDULER_FILE}\n+++ b/{SCHEDULER_FILE}\n")
    scheduler.write_text(patched(scheduler.read_text(), values))
    base = "vllm-" + version.rsplit(".", 1)[0]
    run = cli("conform", name(base, values), "--against", str(root), *RANGE, *SOLVER_ARGS)
    assert run.code == 0, run.out + run.err
    assert "EQUAL" in run.out
    other = {**values, "spare": 2 - values["spare"] if values["spare"] != 1 else 2}
    run = cli("conform", name(base, other), "--against", str(root), *RANGE, *SOLVER_ARGS)
    assert run.code == 1 and "DIFFERENT" in run.out, run.out + run.err


def test_a_tree_without_the_anchors_is_one_clear_error() -> None:
    """Bad input: a scheduler.py whose split or reservation is not the release's (an anchor
    missing or repeated) cannot take the candidate."""
    values = CANDIDATES[0]
    with pytest.raises(PolicyError, match="the split's return"):
        patched(RESERVE_TRIM, values)
    with pytest.raises(PolicyError, match=r"R1's trim .* 2 times"):
        patched(SPLIT_RETURN + RESERVE_TRIM * 2, values)


def test_all_holes_at_zero_change_nothing() -> None:
    text = "x\n" + SPLIT_RETURN + "y\n" + RESERVE_TRIM
    assert patched(text, {"finish": 0, "back": 0, "spare": 0, "keep": 0}) == text


@pytest.mark.fidelity
def test_synthesize_writes_the_found_candidate_s_diff(tmp_path: Path, cli: Cli) -> None:
    """SPEC Y5: ``synthesize --diff`` writes scheduler.patch, the found candidate's diff
    against the base release's scheduler.py."""
    tiny = ["--block", "4", "--lookahead", "2", "--hash-block", "2", "--prompt", "1-6"]
    tiny += ["--max-sched", "1-4", "--start", "0,external", "--no-prove", "--jobs", "1"]
    run = cli("synthesize", "vllm-0.33", *tiny, "--diff", "--out", str(tmp_path), "--json")
    found = run.json()
    patch = next(Path(f) for f in found["files"] if f.endswith("scheduler.patch"))
    expected = scheduler_diff(release_root("0.33.0"), found["holes"])
    assert patch.read_text() == expected and "+        spared = " in expected
