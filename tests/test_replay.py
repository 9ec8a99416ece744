"""Counterexample files (SPEC C): JSON round trip and replay, through the API and the CLI, for
counterexamples of P0 (a step that raises), P1, P4 and P7 (a const(b) run that never finishes)
written by ``chunkproof explore``, and for the committed ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import Cli

from chunkproof.checker.cli.main import main
from chunkproof.checker.kinds import load_counterexample
from chunkproof.model.budget import Adversarial, Const
from chunkproof.model.counterexample import Counterexample
from chunkproof.source.loading import recorded_policy
from chunkproof.spec.slots import kv_rules, oracle

COUNTEREXAMPLES = Path(__file__).parent.parent / "counterexamples"
GRID = ["--block", "4", "--lookahead", "0,2,3", "--prompt", "1-12", "--max-sched", "1-8"]
EXTERNAL = ["--block", "4", "--lookahead", "0", "--prompt", "1-6", "--max-sched", "1-4"]
P7_SPEC_K = COUNTEREXAMPLES / "vllm-0.33" / "p7-const16-never-finishes-T49-B16-L3.json"
STEP_FIELDS = {"c", "budget", "n", "split", "encoder", "reservation", "chunk"}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Counterexample files as ``explore`` writes them: P1, P4 and P7 of vllm-0.33 on a small
    grid, P0 of vllm-0.17 admitted with an external hit (its split asserts x == 0)."""
    out = tmp_path_factory.mktemp("cx")
    external = [*EXTERNAL, "--drop", "off", "--start", "external"]
    runs = (
        ("vllm-0.33", [*GRID, "--drop", "off", "--property", "P1,P4,P7"], ("P1", "P4", "P7")),
        ("vllm-0.17", [*external, "--property", "P0"], ("P0",)),
    )
    found = {}
    for policy, argv, properties in runs:
        folder = out / policy
        assert main(["explore", policy, *argv, "--out", str(folder), "--jobs", "1"]) == 1
        for pid in properties:
            found[pid] = folder / policy / f"{pid}.json"
            assert found[pid].is_file(), pid
    return found


def test_json_round_trip(files: dict[str, Path]) -> None:
    for path in files.values():
        cx = Counterexample.load(path)
        assert Counterexample.from_dict(json.loads(json.dumps(cx.to_dict()))) == cx
        data = json.loads(path.read_text())
        assert data["schema"] == "chunkproof.counterexample/2"
        assert set(data["trace"][0]) <= STEP_FIELDS | {"crash", "encoder_first"}
        assert STEP_FIELDS <= set(data["trace"][-1])
        assert data["minimised"] == ["prompt", "block", "lookahead", "max_sched", "trace_length"]
        assert {"split_block", "external", "retention"} <= set(data["config"])


def test_a_p0_file_records_where_the_step_raises(files: dict[str, Path]) -> None:
    data = json.loads(files["P0"].read_text())
    last = data["trace"][-1]
    assert last["crash"] and (last["chunk"], last["split"]) == (0, 0)
    assert all("crash" not in s for s in data["trace"][:-1])
    assert data["config"]["external"] == data["config"]["start"] > 0
    assert "raises" in data["verdict"]


def test_a_p7_file_records_its_const_budget(files: dict[str, Path]) -> None:
    """P7's budget model is const(b), every step offers b, and the last step yields 0."""
    cx = Counterexample.load(files["P7"])
    assert isinstance(cx.budget_model, Const)
    assert {s.budget for s in cx.steps} == {cx.budget_model.budget}
    assert cx.steps[-1].chunk == 0 and cx.steps[-1].c < cx.config.prefill_end
    assert cx.verdict.startswith(f"const({cx.budget_model.budget}) never finishes")
    assert isinstance(Counterexample.load(files["P1"]).budget_model, Adversarial)


def test_replay_reproduces_on_the_recorded_policy(cli: Cli, files: dict[str, Path]) -> None:
    for pid, path in files.items():
        run = cli("replay", str(path), "--json")
        assert run.code == 0, (pid, run.out)
        document = run.json()
        assert document["reproduces"] is True and document["property"] == pid
        assert document["difference"] is None


def test_replay_on_the_fix_does_not_reproduce(cli: Cli, files: dict[str, Path]) -> None:
    run = cli("replay", str(files["P1"]), "--policy", "lookahead-in-split")
    assert run.code == 1
    assert "does not reproduce" in run.out


def test_a_p0_crash_replays_only_where_the_code_raises(cli: Cli, files: dict[str, Path]) -> None:
    """keep-subblock builds on V2 and keeps its assert; V9 (0.33) takes the external hit."""
    assert cli("replay", str(files["P0"]), "--policy", "keep-subblock").code == 0
    run = cli("replay", str(files["P0"]), "--policy", "vllm-0.33")
    assert run.code == 1
    assert "does not reproduce on vllm-0.33: step 0" in run.out


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


def test_a_p0_step_without_its_crash_does_not_reproduce(
    cli: Cli, files: dict[str, Path], tmp_path: Path
) -> None:
    data = json.loads(files["P0"].read_text())
    del data["trace"][-1]["crash"]
    path = tmp_path / "no-crash.json"
    path.write_text(json.dumps(data))
    run = cli("replay", str(path))
    assert run.code == 1
    assert "does not reproduce" in run.out


def test_a_p7_run_cut_before_it_stops_does_not_reproduce(cli: Cli, tmp_path: Path) -> None:
    """SPEC K's const(16) run cut before its stuck step replays step by step, but its last
    step no longer breaks P7."""
    data = json.loads(P7_SPEC_K.read_text())
    assert cli("replay", str(P7_SPEC_K)).code == 0
    data["trace"] = data["trace"][:-1]
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(data))
    run = cli("replay", str(path))
    assert run.code == 1
    assert "the last step no longer breaks P7" in run.out


def test_a_schema_1_file_still_replays(cli: Cli, tmp_path: Path) -> None:
    """Files of schema /1 lack G, x and R (and a step's crash); they read with the defaults."""
    data = json.loads((COUNTEREXAMPLES / "vllm-0.33" / "p1-livelock-T49-B16-L3.json").read_text())
    data["schema"] = "chunkproof.counterexample/1"
    for name in ("split_block", "external", "retention"):
        del data["config"][name]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    run = cli("replay", str(path), "--json")
    assert run.code == 0, run.out
    assert Counterexample.load(path).config.split_block == 16


def test_committed_counterexamples_replay(cli: Cli) -> None:
    """Every committed file, single- or multi-request, reproduces on its policy."""
    committed = sorted(COUNTEREXAMPLES.rglob("*.json"))
    assert committed, "the repository keeps a curated set of counterexamples"
    assert {load_counterexample(p).property for p in committed} >= {"P0", "P1", "P3", "P7", "HOL"}
    for path in committed:
        run = cli("replay", str(path), "--json")
        assert run.code == 0, (path, run.out, run.err)


def test_committed_slot_reports_are_the_oracles() -> None:
    """The slot oracle's report in every committed P3/P6 file (poisoned keys, covered
    positions, the resend hit of the completed trace) is what the oracle says today on the
    file's configuration under its policy's cache rules (SPEC KV1): a change to the oracle or
    to how a configuration reaches it (the checkpoint alignment, the partial hits) cannot pass
    unnoticed."""
    checked = 0
    for path in sorted(COUNTEREXAMPLES.glob("*/*.json")):
        cx = load_counterexample(path)
        if not isinstance(cx, Counterexample) or "completed_ends" not in cx.details:
            continue
        rules = kv_rules(recorded_policy(cx).kv_release)
        report = oracle(cx.config, cx.details["completed_ends"], rules=rules)
        assert [p.text() for p in report.violations] == cx.details["poisoned"], path
        assert sorted(report.covered) == cx.details["covered"], path
        assert report.resend_hit == cx.details["resend_hit"], path
        checked += 1
    assert checked >= 3
