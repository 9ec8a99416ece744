"""SPEC Q3: P1, P2 and P7 judge the chunk the release's code would schedule after every clamp
it applies, a chunk <= 0 being no progress; a stage value below 0 is also a P0 violation, in
both engines; and no ``--property`` selection changes the verdict of another property.

A split returning -1 is the case: 0.33.0's reservation clamps it to 0 (``max(n, 0)``), so the
request is skipped for ever (P1); 0.26.0 has no reservation and schedules -1 (no progress
either). Both break P0 at the split, and P1 must say VIOLATED whether P0 is checked or not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_helpers import Cli
from vllm_copies import copy_release

from chunkproof.checker.engines.search import explore
from chunkproof.checker.engines.traces import violates
from chunkproof.model.builtin import get_builtin
from chunkproof.model.config import Config
from chunkproof.model.errors import EXIT_VIOLATED
from chunkproof.model.step import step
from chunkproof.proofs.prover import PROVED, VIOLATED
from chunkproof.source.extraction import SCHEDULER_FILE
from chunkproof.source.loading import resolve_policy
from chunkproof.spec.properties import stuck
from chunkproof.spec.request import STEP_PROPERTIES, RequestModel
from chunkproof.spec.space import Space, grid_from

ALL = "P0,P1,P2,P3,P4,P5,P6,P7"
ENGINES = ("explore", "prove")

SPLIT_START = "        start = (\n            request.num_computed_tokens\n"
"""The first statement of the split's body in 0.26.0 and 0.33.0."""

RETURN_MINUS_ONE = "        return -1\n"
RARE_MINUS_ONE = (
    "        if request.num_computed_tokens == 4099:\n"  # the running loop's c, past admission
    "            return -1\n"
)

SMALL = ["--block", "16", "--lookahead", "0", "--drop", "off", "--threshold", "0"]
SMALL += ["--prompt", "1-40", "--max-sched", "16-40"]
RARE = ["--block", "4099", "--lookahead", "0", "--drop", "off", "--threshold", "0"]
RARE += ["--prompt", "4100", "--max-sched", "4099-4100", "--budget", "4099-4100"]
"""One block of 4099 tokens: the first chunk ends on the block at c = 4099, the rare state."""


Verdicts = dict[str, dict[str, Any]]


def _verdicts(
    cli: Cli, command: str, policy: str, args: list[str], pids: str, out: Path
) -> Verdicts:
    run = cli(command, policy, *args, "--property", pids, "--json", "--out", str(out))
    assert run.code == EXIT_VIOLATED, run.out + run.err
    return {v["property"]: v for v in run.json()["verdicts"]}


def _edited_tree(version: str, into: Path, body: str) -> str:
    """A copy of release ``version`` whose split runs ``body`` first."""
    root = copy_release(version, into, with_manifest=True)
    scheduler = root / SCHEDULER_FILE
    text = scheduler.read_text()
    assert text.count(SPLIT_START) == 1
    scheduler.write_text(text.replace(SPLIT_START, body + SPLIT_START))
    return str(root)


def _user_split(tmp_path: Path, body: str) -> str:
    path = tmp_path / "negative_split.py"
    path.write_text(f"def split(cfg, c, n):\n{body}")
    return f"{path}:split"


def _assert_selection_free(
    cli: Cli, policy: str, args: list[str], tmp_path: Path
) -> dict[str, Verdicts]:
    """P1 alone and every property give the same P1 verdict, VIOLATED, in both engines, and
    the run with every property reports P0; the full run's verdicts by engine."""
    found: dict[str, Verdicts] = {}
    for command in ENGINES:
        alone = _verdicts(cli, command, policy, args, "P1", tmp_path / f"{command}-p1")
        every = _verdicts(cli, command, policy, args, ALL, tmp_path / f"{command}-all")
        assert alone["P1"]["status"] == VIOLATED, alone["P1"]["summary"]
        for key in ("status", "summary", "violating_configs"):
            assert alone["P1"].get(key) == every["P1"].get(key), key
        assert every["P0"]["status"] == VIOLATED
        assert "returns -1" in every["P0"]["summary"]
        found[command] = every
    return found


# -- the rule itself ------------------------------------------------------------------------


def test_a_negative_chunk_is_no_progress() -> None:
    """SPEC P1, S3: 0 skips the request and a negative chunk would move c backwards; neither
    is progress, and nothing is stuck once the prefill is over."""
    cfg = Config(block=16, prompt=40, max_sched=16)
    assert stuck(cfg, 0, 0) and stuck(cfg, 16, -1) and stuck(cfg, 39, -5)
    assert not stuck(cfg, 0, 1)
    assert not stuck(cfg, 40, -1)


def test_a_clamped_negative_split_breaks_p0_and_p1_in_one_step(tmp_path: Path) -> None:
    """The split's -1 is a P0 violation named at the split; the reservation's clamp makes the
    scheduled chunk 0, which P1 judges with the largest budget (the step does not raise)."""
    policy = resolve_policy(_user_split(tmp_path, "    return -1\n"))
    cfg = Config(block=16, prompt=40, max_sched=16)
    s = step(policy, cfg, 0, 16)
    assert (s.split, s.chunk, s.crash) == (-1, 0, None)
    assert s.unsafe is not None and "the split returns -1" in s.unsafe
    assert violates("P0", cfg, s, "strict", 16, policy=policy)
    assert violates("P1", cfg, s, "strict", 16, policy=policy)
    assert not violates(
        "P1", cfg, step(policy, cfg, 0, 8), "strict", 16, policy=policy
    )  # not the largest


def test_a_raising_split_is_p0_alone(tmp_path: Path) -> None:
    """A step that raises schedules nothing (the engine core is down): P0, not P1."""
    policy = resolve_policy(_user_split(tmp_path, "    assert c > 0\n    return n\n"))
    cfg = Config(block=16, prompt=40, max_sched=16)
    s = step(policy, cfg, 0, 16)
    assert s.crash is not None
    assert violates("P0", cfg, s, "strict", 16, policy=policy)
    assert not violates("P1", cfg, s, "strict", 16, policy=policy)


# -- a plain policy file, both engines ------------------------------------------------------

PLAIN = ["--block", "4", "--lookahead", "0", "--drop", "off", "--prompt", "1-16"]
PLAIN += ["--max-sched", "1-8"]


@pytest.mark.parametrize(
    ("body", "at"),
    [("    return -1\n", 0), ("    if c == 8:\n        return -1\n    return n\n", 8)],
    ids=["always", "rare-state"],
)
def test_a_plain_policy_with_a_negative_split_is_a_livelock(
    cli: Cli, tmp_path: Path, body: str, at: int
) -> None:
    """Both engines: P1 VIOLATED at the state where the split goes negative, the same with
    ``--property P1`` as with every property; P2 and P7 break with it (the explorer's
    figures); P0 names the split."""
    policy = _user_split(tmp_path, body)
    found = _assert_selection_free(cli, policy, PLAIN, tmp_path)
    for command in ENGINES:
        assert f"stuck at c={at} <" in found[command]["P1"]["summary"]
    assert found["explore"]["P2"]["status"] == VIOLATED
    assert found["explore"]["P7"]["status"] == VIOLATED
    assert "the step yields 0 and breaks P0" in found["explore"]["P7"]["summary"]


# -- the explorer's selection ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["vllm-0.33", "keep-subblock"])
def test_selecting_properties_changes_no_other_verdict(name: str) -> None:
    """The explorer's P1 witnesses and violation counts are the same whichever properties it
    judges besides."""
    space = Space((grid_from({"block": "4,8", "lookahead": "0-3", "prompt": "1-20"}),))
    policy = get_builtin(name)
    alone = explore(RequestModel(policy, space, properties=("P1",)), ("P1",))
    every = explore(RequestModel(policy, space, properties=STEP_PROPERTIES), STEP_PROPERTIES)
    for cat in ("main", "degenerate", "refused"):
        assert alone.failing("P1", cat) == every.failing("P1", cat)
        assert alone.tally.best.get(("P1", cat)) == every.tally.best.get(("P1", cat))


# -- real release trees ------------------------------------------------------------------------


@pytest.mark.fidelity
def test_033_with_a_split_returning_minus_one_is_a_livelock(cli: Cli, tmp_path: Path) -> None:
    """0.33.0's reservation clamps the split's -1 to 0: the request is skipped for ever. The
    report's case: ``--property P1,P3,P4`` said three PROVED."""
    tree = _edited_tree("0.33.0", tmp_path / "tree", RETURN_MINUS_ONE)
    _assert_selection_free(cli, tree, SMALL, tmp_path)
    for command in ENGINES:
        got = _verdicts(cli, command, tree, SMALL, "P1,P3,P4", tmp_path / f"{command}-134")
        assert got["P1"]["status"] == VIOLATED
        assert "yields 0" in got["P1"]["summary"]
        assert got["P3"]["status"] == got["P4"]["status"] == PROVED


@pytest.mark.fidelity
def test_033_with_a_split_negative_at_one_rare_state(cli: Cli, tmp_path: Path) -> None:
    """``if request.num_computed_tokens == 4099: return -1``: only the state c = 4099 of the
    running loop is stuck; both engines find it, P1 alone or with every property."""
    tree = _edited_tree("0.33.0", tmp_path / "tree", RARE_MINUS_ONE)
    found = _assert_selection_free(cli, tree, RARE, tmp_path)
    for command in ENGINES:
        assert "stuck at c=4099 < E=4100" in found[command]["P1"]["summary"]


@pytest.mark.fidelity
def test_026_schedules_a_negative_chunk_without_progress(cli: Cli, tmp_path: Path) -> None:
    """0.26.0 has no reservation: the chunk is the split's -1, no progress (P1) and a stage
    below 0 (P0)."""
    tree = _edited_tree("0.26.0", tmp_path / "tree", RETURN_MINUS_ONE)
    found = _assert_selection_free(cli, tree, SMALL, tmp_path)
    for command in ENGINES:
        assert "yields -1" in found[command]["P1"]["summary"]
