"""Counterexample files (SPEC C): JSON round trip and replay, through the API and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import Cli

from chunkproof.checker.ranges import Ranges
from chunkproof.checker.report import exploration_verdicts
from chunkproof.checker.search import explore
from chunkproof.model.builtin import get_builtin
from chunkproof.model.counterexample import Counterexample

GRID = Ranges(
    block=(4,), lookahead=(0, 2, 3), prompt=tuple(range(1, 13)), max_sched=tuple(range(1, 9))
)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("cx")
    verdicts = exploration_verdicts(
        explore(get_builtin("vllm-0.33"), GRID, ["P1", "P4", "P7"]), out
    )
    found = {v.property: Path(v.counterexample) for v in verdicts if v.counterexample}
    assert set(found) == {"P1", "P4", "P7"}
    return found


def test_json_round_trip(files: dict[str, Path]) -> None:
    for path in files.values():
        cx = Counterexample.load(path)
        assert Counterexample.from_dict(json.loads(json.dumps(cx.to_dict()))) == cx
        data = json.loads(path.read_text())
        assert data["schema"] == "chunkproof.counterexample/1"
        assert set(data["trace"][0]) == {
            "c",
            "budget",
            "n",
            "split",
            "encoder",
            "reservation",
            "chunk",
        }
        assert data["minimised"] == ["prompt", "block", "lookahead", "max_sched", "trace_length"]


def test_replay_reproduces_on_the_recorded_policy(cli: Cli, files: dict[str, Path]) -> None:
    for path in files.values():
        run = cli("replay", str(path), "--json")
        assert run.code == 0, run.out
        assert run.json()["reproduces"] is True


def test_replay_on_the_fix_does_not_reproduce(cli: Cli, files: dict[str, Path]) -> None:
    run = cli("replay", str(files["P1"]), "--policy", "lookahead-in-split")
    assert run.code == 1
    assert "does not reproduce" in run.out


def test_a_tampered_trace_does_not_reproduce(
    cli: Cli, files: dict[str, Path], tmp_path: Path
) -> None:
    data = json.loads(files["P1"].read_text())
    data["trace"][0]["chunk"] += 1
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(data))
    run = cli("replay", str(path))
    assert run.code == 1
    assert "step 0" in run.out


def test_committed_counterexamples_replay(cli: Cli) -> None:
    committed = sorted((Path(__file__).parent.parent / "counterexamples").rglob("*.json"))
    assert committed, "the repository keeps a curated set of counterexamples"
    for path in committed:
        run = cli("replay", str(path), "--json")
        assert run.code == 0, (path, run.out, run.err)
