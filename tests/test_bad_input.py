"""Bad input: a clear one-line error on stderr, exit status 2, never a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import Cli, CliRun

from chunkproof.checker.cli.defaults import small_space
from chunkproof.checker.engines import minimise
from chunkproof.checker.engines.executor import ExecutorError, LocalPool, usable_jobs
from chunkproof.checker.engines.least_counterexample import least_counterexamples
from chunkproof.checker.reports.output import run_folder
from chunkproof.checker.runs.requests import MAX_CELLS, MAX_PAIRS, CellModel, explorer_pairs
from chunkproof.checker.runs.system_prove import MAX_DEPTH
from chunkproof.model.builtin import get_builtin
from chunkproof.model.config import Config
from chunkproof.model.errors import ChunkproofError
from chunkproof.model.files import MAX_COUNTEREXAMPLE_BYTES
from chunkproof.spec.request import RequestModel, budget_bounds
from chunkproof.spec.request_symbolic import SymbolicRequest, cells
from chunkproof.spec.space import Space, grid_from

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
        ["explore", "vllm-0.33", "--split-block", "0"],  # a zero block size, as --block 0
        ["explore", "vllm-0.33", "--hash-block", "0,G", "--start", "hash"],
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


# -- files a user gives: counterexamples (SPEC CLI bad input) ------------------------------------

SYSTEM_CX = (
    Path(__file__).resolve().parent.parent
    / "counterexamples/vllm-0.27/system-slive-encoder-two-items.json"
)
FILE_COMMANDS = {
    "replay": lambda path, tmp: ["replay", path],
    "show": lambda path, tmp: ["show", path, "--out", str(tmp / "x.svg")],
    "repro": lambda path, tmp: ["repro", path, "--pytest", str(tmp / "t.py")],
}


def _one_line_exit_2(run: CliRun, words: str = "") -> None:
    assert run.code == 2, (run.code, run.out, run.err[-500:])
    assert "Traceback" not in run.err
    lines = run.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("chunkproof: error: "), run.err[-500:]
    assert words in lines[0], lines[0]


def _with_prompt(text: str) -> str:
    """The curated counterexample with its prompt written as ``text`` (raw JSON)."""
    document = SPEC_K.read_text()
    assert '"prompt": 49' in document
    return document.replace('"prompt": 49', f'"prompt": {text}', 1)


@pytest.mark.parametrize("command", sorted(FILE_COMMANDS))
@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nests deeper"),
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "nests deeper"),
        (b"[" * 40 + b"]" * 40, "nests deeper"),
        (bytes(range(256)) * 4, "not UTF-8"),
        (json.dumps({"schema": "chunkproof.counterexample/2"}).encode("utf-16"), "not UTF-8"),
        (_with_prompt("9" * 5000).encode(), "5000 digits"),
        (_with_prompt("NaN").encode(), "NaN"),
        (b"", "not JSON"),
    ],
)
def test_a_counterexample_file_that_is_not_readable_json_is_one_line(
    cli: Cli, tmp_path: Path, command: str, content: bytes, words: str
) -> None:
    """Deep nesting, binary or UTF-16 bytes, a 5000-digit number (Python's int conversion
    limit) and NaN are refused by the one reading function, for every command."""
    path = tmp_path / "cx.json"
    path.write_bytes(content)
    _one_line_exit_2(cli(*FILE_COMMANDS[command](str(path), tmp_path)), words)


@pytest.mark.parametrize("command", sorted(FILE_COMMANDS))
def test_a_device_fifo_or_folder_is_not_read_as_a_counterexample(
    cli: Cli, tmp_path: Path, command: str
) -> None:
    """Only a regular file is read: /dev/zero would fill the memory, a FIFO block forever."""
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for path, words in (("/dev/zero", "not a regular file"), (str(fifo), "not a regular file")):
        _one_line_exit_2(cli(*FILE_COMMANDS[command](path, tmp_path)), words)
    _one_line_exit_2(cli(*FILE_COMMANDS[command](str(tmp_path), tmp_path)), "directory")


def test_a_counterexample_file_over_the_size_bound_is_refused_before_reading(
    cli: Cli, tmp_path: Path
) -> None:
    path = tmp_path / "cx.json"
    with path.open("wb") as stream:
        stream.truncate(MAX_COUNTEREXAMPLE_BYTES + 1)  # sparse: no disk used
    _one_line_exit_2(cli("replay", str(path)), f"at most {MAX_COUNTEREXAMPLE_BYTES}")


def _changed(source: Path, change: Callable[[dict[str, Any]], None]) -> str:
    document = json.loads(source.read_text())
    change(document)
    return json.dumps(document)


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(document: dict[str, Any]) -> None:
        target = document
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


@pytest.mark.parametrize(
    ("source", "change"),
    [
        (SPEC_K, _set(("trace",), [1, 2])),
        (SPEC_K, _set(("trace",), "abc")),
        (SPEC_K, _set(("budget_model",), [])),
        (SPEC_K, _set(("config",), [])),
        (SPEC_K, _set(("policy",), "vllm-0.33")),
        (SPEC_K, _set(("policy", "options"), 5)),
        (SPEC_K, _set(("policy", "source_sha256"), "\x1b[2J")),
        (SPEC_K, _set(("minimised",), 5)),
        (SPEC_K, _set(("trace", 0, "c"), None)),
        (SYSTEM_CX, _set(("engine",), None)),
        (SYSTEM_CX, _set(("trace", 0, "breaks"), 5)),
        (SYSTEM_CX, _set(("trace", 0, "requests", 0), [])),
        (SYSTEM_CX, _set(("requests",), [])),
    ],
)
def test_a_counterexample_with_fields_of_the_wrong_shape_is_one_line(
    cli: Cli, tmp_path: Path, source: Path, change: Callable[[dict[str, Any]], None]
) -> None:
    path = tmp_path / "cx.json"
    path.write_text(_changed(source, change))
    _one_line_exit_2(cli("replay", str(path)))


@pytest.mark.parametrize("source", [SPEC_K, SYSTEM_CX])
def test_replay_never_prints_the_files_free_text_verbatim(
    cli: Cli, tmp_path: Path, source: Path
) -> None:
    """A counterexample file is untrusted: its verdict text reaches the terminal with its
    control characters escaped (a single-request replay prints its own words instead)."""
    path = tmp_path / "cx.json"
    path.write_text(_changed(source, _set(("verdict",), "\x1b[31mPWNED\x1b[0m\nforged line")))
    run = cli("replay", str(path))
    assert run.code == 0, run.err
    assert "\x1b" not in run.out + run.err
    assert len(run.out.strip().splitlines()) == 1, run.out
    if source == SPEC_K:
        assert "PWNED" not in run.out and "stuck at c=46" in run.out, run.out


# -- numbers on the command line -------------------------------------------------------------

HUGE = "9" * 5000


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        ([*TRACE, "--block", "16", "--prompt", HUGE], "5000 digits"),
        ([*TRACE, "--block", "16", "--prompt", "٤٩"], "ASCII"),
        ([*TRACE, "--block", "16", "--prompt", "4_9"], "ASCII"),
        ([*TRACE, "--block", "16", "--prompt", " 49"], "ASCII"),
        ([*TRACE[:-2], "--block", "16", "--prompt", "49", "--budgets", "٤,٤"], "--budgets"),
        ([*TRACE, "--block", "16", "--prompt", "49", "--items", f"4+{HUGE}"], "5000 digits"),
        (["explore", "vllm-0.33", "--prompt", HUGE], "5000 digits"),
        (["explore", "vllm-0.33", "--prompt", f"1-{HUGE}"], "5000 digits"),
        (["explore", "vllm-0.33", "--prompt", "٤٩"], "ASCII"),
        (["explore", "vllm-0.33", "--prompt", "1-٤٩"], "ASCII"),
        (["explore", "vllm-0.33", "--tokens", f"P+{HUGE}"], "5000 digits"),
        (["explore", "vllm-0.33", "--split-block", f"B/{HUGE}"], "5000 digits"),
        (["explore", "vllm-0.33", "--budget", "٤"], "ASCII"),
        (["explore", "vllm-0.33", "--budget", HUGE], "5000 digits"),
        (["conform", "vllm-0.33", "--against", "vllm-0.32", "--prompt", HUGE], "5000 digits"),
        (["prove", "vllm-0.33", "--timeout", "nan"], "not an integer"),
        (["prove", "vllm-0.33", "--timeout", "-1"], "at least 1"),
        (["prove", "vllm-0.33", "--timeout", HUGE], "5000 digits"),
        (["explore", "vllm-0.33", "--jobs", HUGE], "5000 digits"),
        (["system", "vllm-0.33", "--requests", HUGE], "5000 digits"),
    ],
)
def test_a_number_in_other_digits_or_too_long_is_one_line(
    cli: Cli, argv: list[str], words: str
) -> None:
    """Range and integer flags take ASCII digits only (Python's int() reads Arabic-Indic
    digits, ``_`` and spaces), and a number too long for Python's int conversion is refused
    by its length."""
    _one_line_exit_2(cli(*argv), words)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["prove", "vllm-0.33", "--rlimit", "0"], "at least 1"),
        (["check", "vllm-0.33", "--rlimit", "-5"], "at least 1"),
        (["conform", "vllm-0.33", "--against", "vllm-0.32", "--rlimit", "1e6"], "not an integer"),
        (["compare", "vllm-0.33", "vllm-0.32", "--rlimit", str(2**32)], "at most 4294967295"),
        (["prove", "vllm-0.33", "--rlimit", HUGE], "5000 digits"),
    ],
)
def test_a_bad_rlimit_is_one_line(cli: Cli, argv: list[str], words: str) -> None:
    """``--rlimit`` takes Z3 resource units from 1 to 2**32 - 1 (Z3 reads the limit in 32
    bits: 2**32 would wrap to no limit at all)."""
    _one_line_exit_2(cli(*argv), words)


# -- work refused before it starts --------------------------------------------------------------


def test_a_prover_range_of_too_many_cells_is_refused_with_its_count(cli: Cli) -> None:
    run = cli("prove", "vllm-0.33", "--block", "1-100000")
    _one_line_exit_2(run, f"at most {MAX_CELLS}")
    assert "proof cells" in run.err


def test_a_system_proof_deeper_than_the_bound_is_refused(cli: Cli) -> None:
    run = cli("system", "vllm-0.33", "--prove", "--requests", "3", "--depth", "100000")
    _one_line_exit_2(run, f"1 to {MAX_DEPTH}")


@pytest.mark.parametrize(
    "argv",
    [
        ["explore", "vllm-0.33", "--prompt", "1099511627776", "--block", "4", "--max-sched", "4"],
        ["check", "vllm-0.33", "--prompt", "1099511627776", "--block", "4", "--max-sched", "4"],
        ["explore", "vllm-0.33", "--prompt", "1-65536", "--block", "16", "--max-sched", "64"],
        ["system", "vllm-0.33", "--prompt", "1099511627776", "--block", "4", "--max-sched", "4"],
    ],
)
def test_an_explorer_range_of_too_many_states_is_refused_with_its_count(
    cli: Cli, argv: list[str]
) -> None:
    """One configuration can be too much to explore: a state per position of its prompt and a
    budget per value up to M (and T), as can few configurations with long prompts. The count
    is refused before any configuration is built."""
    run = cli(*argv)
    _one_line_exit_2(run, f"at most {MAX_PAIRS:.2g}")
    assert "(state, budget) pairs" in run.err and "chunkproof prove" in run.err


def _explored_pairs(model: RequestModel) -> int:
    """The (state, budget) pairs of every configuration the explorer takes (its batches)."""
    total = 0
    for base, ms in model.space.config_families():
        cap = budget_bounds(base, model.space.budget, max(ms))[1]
        total += base.prefill_end * sum(min(cap, m) for m in ms)
    return total


@pytest.mark.parametrize(
    ("texts", "budget"),
    [
        (
            {"block": "4", "lookahead": "0", "drop": "off", "prompt": "1-16", "max_sched": "1-8"},
            None,
        ),
        ({"block": "4,8", "lookahead": "0-2", "prompt": "3-9,20", "max_sched": "2-6"}, (2, 4)),
    ],
)
def test_the_explorer_pairs_are_counted_without_enumerating(
    texts: dict[str, str], budget: tuple[int, int] | None
) -> None:
    """The count :func:`explorer_pairs` refuses by is the explorer's own on a grid whose other
    inputs are fixed (D off), and never more than it otherwise (the other inputs only add
    configurations): the check never refuses a range the explorer would find small."""
    space = Space((grid_from(texts),), budget)
    explored = _explored_pairs(RequestModel(get_builtin("vllm-0.33"), space))
    if texts.get("drop") == "off":
        assert explorer_pairs(space) == explored
    assert 0 < explorer_pairs(space) <= explored


def test_the_default_grids_are_far_below_the_explorer_bound() -> None:
    space = small_space(get_builtin("vllm-0.33"))
    assert explorer_pairs(space) <= _explored_pairs(RequestModel(get_builtin("vllm-0.33"), space))
    assert explorer_pairs(space) * 100 < MAX_PAIRS


# -- output streams --------------------------------------------------------------------------


def test_text_the_terminal_cannot_encode_is_escaped_not_a_crash(tmp_path: Path) -> None:
    """Under LC_ALL=C without UTF-8 mode standard output is ASCII: a verdict with a non-ASCII
    character (from the file) is escaped (SPEC CLI: never a traceback)."""
    path = tmp_path / "cx.json"
    path.write_text(_changed(SYSTEM_CX, _set(("verdict",), "caf\u00e9 \u2192 stuck")))
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0"}
    env.pop("PYTHONIOENCODING", None)
    done = subprocess.run(
        [sys.executable, "-m", "chunkproof", "replay", str(path)],
        capture_output=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert b"caf\\xe9 \\u2192 stuck" in done.stdout, done.stdout


# -- the --out folder and the workers ----------------------------------------------------------


def test_a_run_never_replaces_a_nested_runs_out_folder(tmp_path: Path) -> None:
    """Runs into ``--out X`` and ``--out X/vllm-0.33``: the outer run's commit would replace
    ``X/vllm-0.33``, which is the inner run's folder (running or done); it stops instead, and
    every file of the inner run stays."""
    outer_root, inner_root = tmp_path / "X", tmp_path / "X" / "vllm-0.33"
    with run_folder(inner_root) as inner:
        inner.record(inner.path("vllm-0.33", "p1.json"))
        inner.path("vllm-0.33", "p1.json").write_text("{}")
        with pytest.raises(ChunkproofError, match="another run"), run_folder(outer_root) as outer:
            outer.path("vllm-0.33", "p3.json").write_text("{}")
    assert all(path.exists() for path in inner.written), inner.written
    with pytest.raises(ChunkproofError, match="another run"), run_folder(outer_root) as outer:
        outer.path("vllm-0.33", "p3.json").write_text("{}")
    assert all(path.exists() for path in inner.written), inner.written
    assert not list(outer_root.glob(".staging-*")) and not list(outer_root.glob(".retired-*"))


def test_a_run_still_replaces_its_own_previous_folder(tmp_path: Path) -> None:
    for name in ("first.json", "second.json"):
        with run_folder(tmp_path) as out:
            out.path("vllm-0.33", name).write_text("{}")
    assert [p.name for p in (tmp_path / "vllm-0.33").iterdir()] == ["second.json"]


SIGNALLED_RUN = """
import os, sys, time
from pathlib import Path
from chunkproof.checker.cli import main as cli
from chunkproof.checker.engines.executor import LocalPool
from chunkproof.checker.reports.output import run_folder

def slow(folder, item):
    Path(folder, f"worker-{os.getpid()}").write_text("")
    time.sleep(600)

def run(args):
    with run_folder(args.out) as out:
        out.path("p", "x.json").write_text("{}")
        list(LocalPool(2).map(slow, (str(args.out.parent),), [1, 2, 3, 4]))
    return 0

cli._HANDLERS["system"] = run
sys.exit(cli.main(["system", "vllm-0.33", "--out", sys.argv[1]]))
"""


ISOLATED_RUN = """
import os, sys, time
from pathlib import Path
from chunkproof.proofs import isolated

def slow():
    Path(sys.argv[1]).parent.joinpath(f"worker-{os.getpid()}").write_text("")
    time.sleep(600)

isolated.call(slow, 600)
"""


def _signalled(
    tmp_path: Path,
    send: Callable[[subprocess.Popen[bytes]], None],
    script: str = SIGNALLED_RUN,
    count: int = 2,
) -> tuple[subprocess.CompletedProcess[bytes] | None, list[int]]:
    """Start ``script``, a run whose ``count`` workers sleep, ``send`` it a signal once they
    do; its exit and the workers' process ids."""
    out = tmp_path / "out"
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("worker-*"))) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    workers = [int(p.name.removeprefix("worker-")) for p in tmp_path.glob("worker-*")]
    assert len(workers) == count, "the workers did not start"
    send(child)
    stdout, stderr = child.communicate(timeout=60)
    done = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
    return done, workers


def _gone(pids: list[int]) -> bool:
    """Whether none of ``pids`` runs any more (within a few seconds; a zombie counts as gone)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if _running(pid)]
        if not alive:
            return True
        time.sleep(0.1)
    return False


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@pytest.mark.skipif(usable_jobs(2) < 2, reason="needs two cores for a pool")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_workers_and_leaves_no_staging_folder(
    tmp_path: Path, signum: int
) -> None:
    """SIGTERM or Ctrl-C (SIGINT to the whole process group): one line, exit 3, the workers
    stopped without a traceback, no staging folder left."""
    done, workers = _signalled(tmp_path, lambda child: os.killpg(child.pid, signum))
    assert done is not None
    words = "terminated" if signum == signal.SIGTERM else "interrupted"
    assert done.stderr.decode() == f"chunkproof: {words}\n", done.stderr.decode()
    assert done.returncode == 3
    assert _gone(workers)
    assert not list((tmp_path / "out").glob(".staging-*"))


@pytest.mark.skipif(usable_jobs(2) < 2, reason="needs two cores for a pool")
def test_the_workers_die_with_a_killed_run(tmp_path: Path) -> None:
    """SIGKILL leaves the parent no chance to stop its pool: the workers die with it."""
    _, workers = _signalled(tmp_path, lambda child: child.kill())
    assert _gone(workers)


def test_an_isolated_solver_call_dies_with_a_killed_run(tmp_path: Path) -> None:
    """The child that runs a solver call past its own timeout (proofs.isolated) dies with
    the run too."""
    _, children = _signalled(tmp_path, lambda child: child.kill(), ISOLATED_RUN, 1)
    assert _gone(children)


# -- the local pool -----------------------------------------------------------------------------

needs_a_pool = pytest.mark.skipif(usable_jobs(2) < 2, reason="needs two cores for a pool")


def _worker_of(scale: int, item: int) -> tuple[int, int]:
    if item == 13:
        raise ChunkproofError(f"item {item} is unlucky")
    if item == 14:
        os._exit(9)  # a worker that dies (the OOM killer, a crash) before it answers
    if item == 15:
        raise ValueError(threading.Lock())  # an error that cannot be pickled
    return scale * item, os.getpid()


@needs_a_pool
def test_the_pool_gives_every_result_in_item_order() -> None:
    results = list(LocalPool(2).map(_worker_of, (10,), list(range(12))))
    assert [value for value, _ in results] == [10 * i for i in range(12)]
    workers = {pid for _, pid in results}
    assert os.getpid() not in workers and _gone(list(workers))


@needs_a_pool
def test_an_error_in_a_worker_reaches_the_caller_and_stops_the_pool() -> None:
    results = LocalPool(2).map(_worker_of, (1,), [1, 2, 13, 4, 5])
    assert next(results)[0] == 1
    workers = [next(results)[1]]
    with pytest.raises(ChunkproofError, match="item 13 is unlucky"):
        next(results)
    assert _gone(workers)


@needs_a_pool
def test_a_worker_that_dies_is_an_incomplete_run_not_a_hang() -> None:
    with pytest.raises(ExecutorError, match=r"died \(exit status 9\) before it answered"):
        list(LocalPool(2).map(_worker_of, (1,), [1, 14, 3]))


@needs_a_pool
def test_a_result_that_cannot_travel_back_is_an_error_of_its_item() -> None:
    by_a_lambda = list(LocalPool(2).map(lambda item: item, (), [1, 2]))  # fork: no pickling in
    assert by_a_lambda == [1, 2]
    with pytest.raises(ExecutorError, match="could not send its result back"):
        list(LocalPool(2).map(lambda item: lambda: item, (), [1, 2]))
    with pytest.raises(ExecutorError, match="a pool worker failed: ValueError: <unlocked"):
        list(LocalPool(2).map(_worker_of, (1,), [1, 15]))


@needs_a_pool
def test_a_pool_left_early_kills_its_workers() -> None:
    """A caller that stops iterating (an exception, Ctrl-C) leaves no worker running."""
    results = LocalPool(2).map(_worker_of, (1,), list(range(8)))
    assert isinstance(results, Generator)
    workers = [next(results)[1], next(results)[1]]
    results.close()
    assert _gone(workers)


# -- the least counterexample within --timeout ---------------------------------------------------

LIVELOCK = {"block": "16", "lookahead": "3", "drop": "off"}
"""vllm-0.33's livelock (docs/guide.md): least at T = 17, M = 3."""
TIMEOUT_MS = 60_000


def _livelock_cell() -> SymbolicRequest:
    (cell,) = cells(Space((grid_from(LIVELOCK),)))
    return SymbolicRequest(get_builtin("vllm-0.33"), cell, None)


def test_a_minimisation_out_of_time_reports_what_it_found_as_not_proved_minimal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no time left once the first violating trace is found (MINIMISING_TIMEOUTS = 0),
    no refining step starts: the trace found is reported, claiming only what its bounded
    search established, and says it is not proved minimal; with the time, the same cell's
    counterexample is proved minimal (T certified, M from the explorer)."""
    model = _livelock_cell()
    minimal, how = minimise.minimal_for_cell(model, "P1", TIMEOUT_MS)
    assert minimal is not None and (minimal.config.T, minimal.config.max_sched) == (17, 3)
    assert "not proved minimal" not in how and "(explorer, exhaustive)" in how

    monkeypatch.setattr(minimise, "MINIMISING_TIMEOUTS", 0)
    explored: list[object] = []
    monkeypatch.setattr(minimise, "explore", lambda *args: explored.append(args))
    cx, how = minimise.minimal_for_cell(model, "P1", TIMEOUT_MS)
    assert cx is not None and cx.config.T == 17  # the bounded search's least T
    assert how.endswith(minimise.OUT_OF_TIME) and "not proved minimal" in how
    assert "T is the minimum over traces of 1 step (not certified beyond)" in how
    assert "any length" not in how and "explorer" not in how and "bisection" not in how
    assert not explored


def test_the_least_counterexample_search_out_of_time_asks_no_other_cell(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two violated cells (B = 16 and 64): past the search's time no other cell is asked for a
    smaller T, and the claim says T is minimal in its own cell only."""
    texts = {**LIVELOCK, "block": "16,64"}
    violated = cells(Space((grid_from(texts),)))
    make = CellModel(get_builtin("vllm-0.33"), None, "strict")
    monkeypatch.setattr(minimise, "MINIMISING_TIMEOUTS", 0)
    asked: list[object] = []
    monkeypatch.setattr(minimise, "violation_ranked_below", lambda *args: asked.append(args))
    cx, how = least_counterexamples({"P1": violated}, make, TIMEOUT_MS, 1)["P1"]
    assert cx is not None and "not proved minimal" in how
    assert "T is minimal in its cell only: 1 other violated cell(s)" in how
    assert not asked


def test_the_explorer_minimises_m_in_one_pass_over_the_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Ms up to the solver's are explored in ascending groups of doubling lanes: a million
    values at T = 2 (4 lanes each) in one pass, each value in one group, in order, the lanes of
    a value counted once (the group's lanes were once recounted at every value: quadratic)."""
    groups: list[list[int]] = []
    monkeypatch.setattr(minimise, "_explore_at", lambda m, p, c, group: groups.append(group))
    counted: list[int] = []
    real = minimise._lanes_per_budget

    def lanes_per_budget(model: SymbolicRequest, cfg: Config) -> int:
        counted.append(1)
        return real(model, cfg)

    monkeypatch.setattr(minimise, "_lanes_per_budget", lanes_per_budget)
    cfg = Config(block=16, prompt=2, max_sched=1_000_000)
    ms = list(range(1, 1_000_001))
    until = minimise.Deadline(float("inf"))
    assert minimise._explore_ascending(_livelock_cell(), "P1", cfg, ms, until) is None
    assert [m for group in groups for m in group] == ms
    assert len(counted) == 1
    lanes = [4 * len(group) for group in groups]
    assert lanes[0] >= minimise.FIRST_GROUP_LANES and lanes[1] >= 2 * minimise.FIRST_GROUP_LANES
