"""Bad input: a clear one-line error on stderr, exit status 2, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import Cli

TRACE = ["trace", "vllm-0.33", "--lookahead", "3", "--budget", "16"]


@pytest.mark.parametrize(
    "argv",
    [
        [*TRACE, "--block", "0", "--prompt", "49"],
        [*TRACE, "--block", "16", "--prompt", "-5"],
        [*TRACE, "--block", "16", "--prompt", "49", "--start", "60"],
        [*TRACE, "--block", "16", "--prompt", "49", "--start", "8", "--external", "9"],
        [*TRACE, "--block", "16", "--prompt", "49", "--tokens", "48"],  # T below P
        [*TRACE, "--block", "16", "--prompt", "1000000000", "--budget", "1"],  # too long
        ["explore", "vllm-0.33", "--prompt", "1-100000000"],  # too large to enumerate
        ["explore", "vllm-0.33", "--split-block", "B/0"],
        ["check", "--block", "0"],  # a zero block size is refused before any engine runs
        ["explore", "vllm-0.33", "--max-sched", "0-4"],
        ["system", "vllm-0.33", "--prompt", "0"],
        ["explore", "vllm-0.33", "--start", "sideways"],
        ["explore", "vllm-0.33", "--retention", "-3"],
        ["explore", "vllm-0.33", "--tokens", "Q+1"],
        ["prove", "vllm-0.33", "--property", "P7"],  # a figure: the prover decides no P7
        [*TRACE, "--block", "16", "--prompt", "49", "--max-sched", "8"],  # budget above M
        ["trace", "vllm-0.99", "--block", "16", "--prompt", "49", "--budget", "16"],
        ["trace", "vllm-0.33", "--block", "16", "--prompt", "49"],  # no budget
        ["trace", "no_such_module:split", "--block", "16", "--prompt", "49", "--budget", "4"],
        ["trace", "./no/such/scheduler.py", "--block", "16", "--prompt", "49", "--budget", "4"],
        ["explore", "vllm-0.33", "--prompt", "9-3"],
        ["explore", "vllm-0.33", "--block", "x"],
        ["explore", "vllm-0.33", "--drop", "maybe"],
        ["explore", "vllm-0.33", "--property", "P9"],
        ["explore", "vllm-0.33", "--jobs", "0"],
        ["check", "--no-such-flag"],
        ["frobnicate"],
        ["replay", "/nonexistent/cx.json"],
        ["conform", "vllm-0.33", "--against", "vllm-0.32", "--compose", "C9"],
        ["show", "/nonexistent/cx.json", "--out", "x.svg"],
        ["repro", "/nonexistent/cx.json", "--pytest", "x.py"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli: Cli, argv: list[str]) -> None:
    run = cli(*argv)
    assert run.code == 2, (argv, run.out, run.err)
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, run.err
    assert lines[0].startswith("chunkproof: error: ")
    assert "Traceback" not in run.err


@pytest.mark.parametrize(
    "content",
    ["{not json", "[1, 2]", '{"schema": "other/1"}', '{"schema": "chunkproof.counterexample/1"}'],
)
def test_a_malformed_counterexample_is_bad_input(cli: Cli, tmp_path: Path, content: str) -> None:
    path = tmp_path / "cx.json"
    path.write_text(content)
    run = cli("replay", str(path))
    assert run.code == 2
    assert len(run.err.strip().splitlines()) == 1


SPEC_K = (
    Path(__file__).resolve().parent.parent / "counterexamples/vllm-0.33/p1-livelock-T49-B16-L3.json"
)


@pytest.mark.parametrize("command", ["replay", "repro", "show"])
@pytest.mark.parametrize(
    ("change", "words"), [({"property": "P9"}, "unknown property"), ({"trace": []}, "empty")]
)
def test_a_counterexample_with_a_bad_property_or_no_trace_is_bad_input(
    cli: Cli, tmp_path: Path, command: str, change: dict[str, object], words: str
) -> None:
    """Checked once on reading, for every command that reads a counterexample."""
    path = tmp_path / "cx.json"
    path.write_text(json.dumps({**json.loads(SPEC_K.read_text()), **change}))
    extra = {"replay": [], "repro": ["--pytest", str(tmp_path / "t.py")]}
    run = cli(command, str(path), *extra.get(command, ["--graph", str(tmp_path / "g.svg")]))
    assert run.code == 2 and words in run.err, run.err
    assert len(run.err.strip().splitlines()) == 1


def test_an_unwritable_out_folder_is_bad_input(cli: Cli, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    argv = ["--block", "4", "--lookahead", "2", "--prompt", "5", "--max-sched", "2"]
    run = cli("explore", "vllm-0.33", *argv, "--out", str(blocker / "out"))
    assert run.code == 2 and "cannot write" in run.err, run.err
    assert len(run.err.strip().splitlines()) == 1


def test_a_budget_range_no_configuration_offers_is_not_proved(cli: Cli, tmp_path: Path) -> None:
    """No M of the range reaches the budgets: nothing to explore, never PROVED over nothing;
    every verdict says so and the exit status is 2."""
    run = cli(
        "explore", "vllm-0.33", "--max-sched", "1-4", "--budget", "9-12", "--json",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert run.code == 2
    verdicts = run.json()["verdicts"]
    assert {v["status"] for v in verdicts} == {"EMPTY"}
    assert all("offered no budget" in v["summary"] for v in verdicts)
