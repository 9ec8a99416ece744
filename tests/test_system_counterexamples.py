"""Multi-request counterexamples (SPEC C for ``chunkproof system``, SPEC N1): the file
``system --out`` writes for each violated property, its replay on the model's own Next, its
picture with one lane per request, and the reader's refusal of unknown schemas.

The instances are those of ``tests/test_scheduler_step.py``: HOL behind a split zero in 0.33
(B=4, a 4-token request at the head offered 3 tokens), and behind a reservation zero in 0.32
(B=2, L=3: T=3 gets 2 from the split and 0 from the reservation), which 0.33 skips.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from cli_helpers import Cli
from repro_helpers import blocking_packages, generate_repro, run_repro

from chunkproof.checker.cli.main import main
from chunkproof.checker.kinds import load_counterexample
from chunkproof.checker.kinds.system import Witness, build
from chunkproof.checker.reports.system_picture import system_marks
from chunkproof.checker.repro.system import system_repro_source
from chunkproof.model.builtin import get_builtin
from chunkproof.model.config import Config, Items
from chunkproof.model.system_counterexample import SYSTEM_SCHEMA, SystemCounterexample
from chunkproof.model.trace_file import write_file
from chunkproof.source.releases import release_root
from chunkproof.spec.scheduler_step import MAX_SEQS

SPLIT_ZERO = ["--block", "4", "--lookahead", "0", "--drop", "off", "--prompt", "3-4"]
RESERVATION_ZERO = ["--block", "2", "--lookahead", "3", "--drop", "off", "--prompt", "3,10"]
STAGES = {"c", "budget", "n", "split", "encoder", "reservation", "chunk"}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``system --out`` on both instances: vllm-0.33 (split zero) and vllm-0.32 (reservation
    zero)."""
    out = tmp_path_factory.mktemp("system")
    runs = (
        ("vllm-0.33", [*SPLIT_ZERO, "--max-sched", "8"]),
        ("vllm-0.32", [*RESERVATION_ZERO, "--max-sched", "4"]),
    )
    for policy, argv in runs:
        assert main(["system", policy, *argv, "--out", str(out / policy)]) == 1
    return {
        "HOL": out / "vllm-0.33" / "vllm-0.33" / "system-HOL.json",
        "STARVE": out / "vllm-0.33" / "vllm-0.33" / "system-STARVE.json",
        "HOL-0.32": out / "vllm-0.32" / "vllm-0.32" / "system-HOL.json",
    }


def test_the_file_holds_one_trace_per_request(files: dict[str, Path]) -> None:
    data = json.loads(files["HOL"].read_text())
    assert data["schema"] == SYSTEM_SCHEMA
    assert data["policy"] == {"name": "vllm-0.33", "source_sha256": None, "options": []}
    assert data["engine"]["max_num_seqs"] == 256
    assert data["engine"]["budget_model"] == {"kind": "adversarial", "low": 1, "high": 8}
    assert [r["tokens"] for r in data["requests"]] == [3, 4]
    assert data["arrival"] == [1, 0] and data["property"] == "HOL"
    (last,) = data["trace"]
    assert last["budget"] == 3 and "HOL" in last["breaks"]
    behind, head = last["requests"]
    assert STAGES <= set(head) and head["split"] == head["chunk"] == 0
    assert (head["list"], head["place"], head["scheduled"]) == ("waiting", 0, False)
    assert behind == {"list": "waiting", "place": 1, "scheduled": False, "c": 0}
    assert data["verdict"] == (
        "the waiting loop breaks at #1 (T=4, c=0): offered 3 tokens, the split gives 0, while "
        "#0 (T=3, c=0) behind it would get a chunk of 3 from them"
    )
    cx = load_counterexample(files["HOL"])
    assert isinstance(cx, SystemCounterexample)
    assert SystemCounterexample.from_dict(json.loads(json.dumps(cx.to_dict()))) == cx


def test_json_verdicts_name_the_files(cli: Cli, tmp_path: Path) -> None:
    run = cli(
        "system", "vllm-0.33", *SPLIT_ZERO, "--max-sched", "8", "--out", str(tmp_path), "--json"
    )
    assert run.code == 1
    verdicts = {v["property"]: v for v in run.json()["verdicts"]}
    assert verdicts["P0"]["counterexample"] is None
    for pid in ("HOL", "STARVE"):
        path = Path(verdicts[pid]["counterexample"])
        assert path == tmp_path / "vllm-0.33" / f"system-{pid}.json" and path.is_file()
        assert Path(verdicts[pid]["picture"]).is_file()
    text = cli("system", "vllm-0.33", *SPLIT_ZERO, "--max-sched", "8", "--out", str(tmp_path))
    assert f"counterexample: {tmp_path / 'vllm-0.33' / 'system-HOL.json'}" in text.out


def test_replay_reproduces(cli: Cli, files: dict[str, Path]) -> None:
    for name in ("HOL", "STARVE", "HOL-0.32"):
        run = cli("replay", str(files[name]))
        assert run.code == 0 and run.out.startswith("reproduces on vllm-0.3"), run.out


def test_replay_on_another_policy(cli: Cli, files: dict[str, Path]) -> None:
    """0.28's split floors the same way (reproduces); 0.33 skips 0.32's reservation zero and
    admits the request behind it (does not)."""
    assert cli("replay", str(files["HOL"]), "--policy", "vllm-0.28").code == 0
    run = cli("replay", str(files["HOL-0.32"]), "--policy", "vllm-0.33", "--json")
    assert run.code == 1
    assert run.json()["difference"].startswith("step 0 (budget 2), request #1: recorded")


def test_an_edited_chunk_does_not_reproduce(
    cli: Cli, files: dict[str, Path], tmp_path: Path
) -> None:
    data = json.loads(files["HOL"].read_text())
    data["trace"][0]["requests"][1]["chunk"] = 1
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    run = cli("replay", str(edited))
    assert run.code == 1
    assert run.out.startswith("does not reproduce on vllm-0.33: step 0 (budget 3), request #1")


def test_show_draws_one_lane_per_request(cli: Cli, files: dict[str, Path], tmp_path: Path) -> None:
    cx = load_counterexample(files["HOL"])
    assert isinstance(cx, SystemCounterexample)
    marks = system_marks(cx)
    assert marks.lanes == ("#0: T=3 B=4 L=0 M=8", "#1: T=4 B=4 L=0 M=8")
    assert [(c.lane, c.offered, c.zero) for c in marks.cells] == [(0, 0, False), (1, 3, True)]
    picture = tmp_path / "hol.svg"
    run = cli("show", str(files["HOL"]), "--out", str(picture))
    assert run.code == 0 and run.out == f"picture: {picture}\n"
    svg = picture.read_text()
    assert all(lane in svg for lane in marks.lanes) and "HOL HEAD-OF-LINE violated" in svg
    assert "waiting: 0 of 3" in svg and "c 0→0 / T=4" in svg


def test_what_is_refused_is_one_line(cli: Cli, files: dict[str, Path], tmp_path: Path) -> None:
    """An unknown schema, and a state graph of a multi-request file."""
    data = json.loads(files["HOL"].read_text())
    data["schema"] = "chunkproof.system-counterexample/99"
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps(data))
    runs = (
        cli("replay", str(unknown)),
        cli("show", str(files["HOL"]), "--graph", str(tmp_path / "g.svg")),
    )
    for run in runs:
        assert run.code == 2 and run.err.count("\n") == 1 and run.out == "", run.err
    assert "schema 'chunkproof.system-counterexample/99'" in runs[0].err


def test_a_p0_file_of_equal_requests(cli: Cli, tmp_path: Path) -> None:
    """vllm-0.17's split asserts at an external admission (P0). The two requests are equal,
    so the search keeps one label for both (symmetry reduction); the file names them #0 and
    #1, and replays."""
    argv = ["--block", "4", "--lookahead", "0", "--drop", "off", "--prompt", "2"]
    run = cli("system", "vllm-0.17", *argv, "--max-sched", "4", "--start", "external",
              "--out", str(tmp_path), "--json")  # fmt: skip
    assert run.code == 1
    path = tmp_path / "vllm-0.17" / "system-P0.json"
    data = json.loads(path.read_text())
    assert data["arrival"] == [0, 1] and "P0" in data["trace"][-1]["breaks"]
    assert data["verdict"].startswith("#0 (T=2, c=1), offered ")
    assert cli("replay", str(path)).code == 0


# -- repro: the real split and reservation in schedule()'s loops --------------------------------


@pytest.mark.fidelity
@pytest.mark.parametrize(
    ("name", "release", "words"),
    [
        (
            "HOL",
            "0.33.0",
            "HOL: step 0 (budget 3): the waiting loop breaks at #1 (T=4, c=0), offered 3 "
            "tokens (Step(c=0, budget=3, n=3, split=0, reservation=0, chunk=0)), while #0 "
            "(T=3, c=0) behind it would get a chunk of 3 from them",
        ),
        (
            "STARVE",
            "0.33.0",
            "STARVE: step 0 (budget 3): the step schedules nothing (it repeats for ever under "
            "that budget), while #0 (T=3, c=0) alone would get a chunk of 3 from it",
        ),
        (
            "HOL-0.32",
            "0.32.0",
            "HOL: step 0 (budget 2): the waiting loop breaks at #0 (T=3, c=0), offered 2 "
            "tokens (Step(c=0, budget=2, n=2, split=2, reservation=0, chunk=0))",
        ),
    ],
)
def test_repro_fails_on_the_real_code_with_the_property_and_the_step(
    cli: Cli, files: dict[str, Path], tmp_path: Path, name: str, release: str, words: str
) -> None:
    """The repro of each file runs the release's own split and reservation in the scheduler's
    loops, under ``sys.executable -m pytest`` with chunkproof, vllm and torch unimportable, and
    fails naming the property and the step."""
    test_file = generate_repro(cli, files[name], tmp_path)
    blockers = blocking_packages(tmp_path / "blockers")
    status, output = run_repro(test_file, release_root(release), blockers)
    assert status == 1 and "1 failed" in output, output
    assert f"AssertionError: {words}" in output, output


@pytest.mark.fidelity
def test_repro_passes_where_the_property_holds(
    cli: Cli, files: dict[str, Path], tmp_path: Path
) -> None:
    """0.32's reservation-zero HOL, its policy named vllm-0.33 (which does not reproduce it:
    C9 skips the request and admits the one behind it): the repro passes on 0.33.0's code."""
    data = json.loads(files["HOL-0.32"].read_text())
    data["policy"]["name"] = "vllm-0.33"
    moved = tmp_path / "hol-on-vllm-0-33.json"
    moved.write_text(json.dumps(data))
    assert cli("replay", str(moved)).code == 1
    test_file = generate_repro(cli, moved, tmp_path)
    status, output = run_repro(test_file, release_root("0.33.0"), blocking_packages(tmp_path / "b"))
    assert status == 0 and "1 passed" in output, output


def test_the_waiting_loops_rule_is_the_files_policys(files: dict[str, Path]) -> None:
    """The generated loop breaks on every zero for 0.32 (C8) and skips a zero after the split
    for 0.33 (C9); both start from the recorded arrival order and offer the recorded budgets."""
    later = (("HOL-0.32", "LATER_ZERO = 'break'"), ("HOL", "LATER_ZERO = 'skip'"))
    for name, rule in later:
        cx = load_counterexample(files[name])
        assert isinstance(cx, SystemCounterexample)
        text = system_repro_source(cx, f"{name}.json")
        assert rule in text and f"budget={cx.steps[0].budget}," in text
        assert f"ARRIVAL = {list(cx.arrival)}" in text


@pytest.mark.fidelity
def test_a_repro_under_the_per_step_threshold(cli: Cli, tmp_path: Path) -> None:
    """A 0.33 file with theta = 5: its repro caps each request by theta_eff as the model does
    (THETA_PER_STEP; 0.30's static theta is the cap stage's own, so 0 there) and fails on the
    real code naming the property."""
    argv = [*SPLIT_ZERO[:4], "--drop", "off", "--prompt", "3-20", "--threshold", "5"]
    for policy, theta in (("vllm-0.33", 5), ("vllm-0.30", 0)):
        out = tmp_path / policy
        assert main(["system", policy, *argv, "--max-sched", "12", "--out", str(out)]) == 1
        found = out / policy / "system-HOL.json"
        cx = load_counterexample(found)
        assert isinstance(cx, SystemCounterexample)
        assert f"THETA_PER_STEP = {theta}\n" in system_repro_source(cx, found.name)
    test_file = generate_repro(
        cli, tmp_path / "vllm-0.33" / "vllm-0.33" / "system-HOL.json", tmp_path
    )
    status, output = run_repro(test_file, release_root("0.33.0"), blocking_packages(tmp_path / "b"))
    assert status == 1 and "AssertionError: HOL: step" in output, output


def test_a_decode_step_is_recorded_replayed_and_reproduced(cli: Cli, tmp_path: Path) -> None:
    """HOL through a decode step on 0.28 (tests/test_shared_encoder.py has the instance): the
    file records the request whose image outlives its prefill as decoding, with the tokens
    its decode step advanced; it replays, a file whose decode step advances by 0 (where the
    running loop reached the request) does not, the picture's lane shows the decode step,
    and the repro fails on 0.28.0's real code at step 2, where the real
    ``_free_encoder_inputs`` still holds the image."""
    image = Config(block=4, prompt=12, max_sched=8, lookahead=2, drop=True, encoder_cache=4)
    instance = (
        replace(image, items=Items(((8, 4),))),
        replace(image, items=Items(((0, 4),))),
        image,
    )
    witness = Witness(instance, (0, 1, 2), (8, 4, 4), None, ((0, 0, 0), (0, 0, 0), (1, 0, 0)))
    cx = build(get_builtin("vllm-0.28"), witness, "HOL", MAX_SEQS, {})
    path = tmp_path / "hol-decoding.json"
    write_file(path, cx.to_dict())
    data = json.loads(path.read_text())
    decoding = data["trace"][2]["requests"][0]
    assert (decoding["list"], decoding["c"], decoding["decoded"]) == ("decoding", 12, 1)
    assert cli("replay", str(path)).code == 0
    decoding["decoded"] = 0
    edited = tmp_path / "hol-no-decode.json"
    edited.write_text(json.dumps(data))
    assert cli("replay", str(edited)).code == 1
    cells = [cell for cell in system_marks(cx).cells if cell.step == 2]
    assert cells[0].label == "decoding: +1"
    test_file = generate_repro(cli, path, tmp_path)
    status, output = run_repro(test_file, release_root("0.28.0"), blocking_packages(tmp_path / "b"))
    assert status == 1 and "AssertionError: HOL: step 2 (budget 4)" in output, output
