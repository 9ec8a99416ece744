"""Hostile inputs (SPEC X1): nothing in a policy's source runs beyond the policy subset.

A corpus of ``scheduler.py`` copies and ``module:function`` files tries to run code: through
the split, a helper (in the same file or another module of the tree), a default argument
value, a ``@property`` body, a decorator, a module-level statement or import, ``exec``/
``eval``/``open``/``__import__``/``import os``, and by computing huge integers. Every command
that takes a policy (trace, explore, prove, check, compare, conform, and replay, show and
repro of a counterexample file naming that path) must end in a one-line error (exit 2) or a
normal run, and leave no side effect: no marker file, nothing printed (the standard streams
are captured at the file-descriptor level, so a shell command's output counts too), stdout
under ``--json`` exactly one JSON document, never a traceback, and within a time limit.

The sources here are synthetic (no vLLM text). Each hostile split returns 0 when it is run,
so that a normal run finds P1 violated on the explorer's grid at once (``check`` then needs no
proof attempt) and the commands stay quick.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import pytest

from chunkproof.checker.cli.main import main
from chunkproof.source.extraction import SCHEDULER_FILE

MARKER = "MARKER"
"""Placeholder in the corpus for the marker file's path."""
SHOUT = "PWNED"
"""What the hostile code prints."""
RUN = f"__import__('os').system('echo {SHOUT}; touch {MARKER}')"
"""A shell command that prints and writes the marker."""
TIME_LIMIT = 60
"""Seconds one command may take (a normal run of these small ranges takes a few)."""

SPLIT = (
    "    def _mamba_block_aligned_split(\n"
    "        self, request, num_new_tokens, num_new_local_computed_tokens=0,\n"
    "        num_external_computed_tokens={default},\n"
    "    ):\n"
)
SCHEDULER_HEAD = "class Scheduler:\n"


def _split(body: str, default: str = "0", decorator: str = "") -> str:
    """A ``class Scheduler`` whose split has ``body`` (indented 8) and the given default of
    its last parameter and decorator."""
    head = f"    @{decorator}\n" if decorator else ""
    return SCHEDULER_HEAD + head + SPLIT.format(default=default) + body


SCHEDULERS: dict[str, dict[str, str]] = {
    "split runs __import__": {
        SCHEDULER_FILE: _split(f"        x = {RUN}\n        return 0\n"),
    },
    "split opens a file": {
        SCHEDULER_FILE: _split(f"        f = open('{MARKER}', 'w')\n        return 0\n"),
    },
    "split calls exec": {
        SCHEDULER_FILE: _split(f'        x = exec("{RUN}")\n        return 0\n'),
    },
    "split calls eval": {
        SCHEDULER_FILE: _split(f'        x = eval("{RUN}")\n        return 0\n'),
    },
    "split imports os": {
        SCHEDULER_FILE: _split(
            "        import os\n"
            f"        x = os.system('echo {SHOUT}; touch {MARKER}')\n"
            "        return 0\n"
        ),
    },
    "split uses a module-level import of os": {
        SCHEDULER_FILE: "import os\n\n"
        + _split(f"        x = os.system('touch {MARKER}')\n        return 0\n"),
    },
    "split reads a dunder": {
        SCHEDULER_FILE: _split(
            "        x = self.__class__.__init__.__globals__\n        return 0\n"
        ),
    },
    "helper runs __import__": {
        SCHEDULER_FILE: f"def helper(n):\n    return {RUN}\n\n\n"
        + _split("        return helper(num_new_tokens) * 0\n"),
    },
    "helper in another module writes a file": {
        SCHEDULER_FILE: "from vllm.evil import helper\n\n"
        + _split("        return helper(num_new_tokens) * 0\n"),
        "vllm/evil.py": f"print('{SHOUT}')\nx = {RUN}\n\n\n"
        f"def helper(n):\n    f = open('{MARKER}', 'w')\n    return n\n",
    },
    "default argument runs __import__": {
        SCHEDULER_FILE: _split("        return 0\n", default=RUN),
    },
    "default argument opens a file": {
        SCHEDULER_FILE: _split("        return 0\n", default=f"len(open('{MARKER}', 'w').name)"),
    },
    "property body runs __import__": {
        SCHEDULER_FILE: _split("        return self._grid * 0\n")
        + f"\n    @property\n    def _grid(self):\n        return {RUN}\n",
    },
    "property body calls eval": {
        SCHEDULER_FILE: _split("        return self._grid * 0\n")
        + f'\n    @property\n    def _grid(self):\n        return eval("{RUN}")\n',
    },
    "decorator runs __import__": {
        SCHEDULER_FILE: "import functools\n\n"
        + _split("        return 0\n", decorator=f"functools.lru_cache(maxsize={RUN})"),
    },
    "decorator of a helper runs __import__": {
        SCHEDULER_FILE: f"@__import__('os').system('touch {MARKER}')\ndef helper(n):\n"
        "    return n * 0\n\n\n" + _split("        return helper(num_new_tokens)\n"),
    },
    "module level prints and imports": {
        SCHEDULER_FILE: f"print('{SHOUT}')\nimport this\nx = {RUN}\n"
        f"f = open('{MARKER}', 'w')\n\n" + _split("        return 0\n"),
    },
    "module-level import of a printing stdlib module used": {
        SCHEDULER_FILE: "import this\n\n" + _split("        return this.i * 0\n"),
    },
    "module-level constant read": {
        SCHEDULER_FILE: f"LIMIT = {RUN}\n\n" + _split("        return min(LIMIT, 0)\n"),
    },
    "chained product of the input": {
        SCHEDULER_FILE: _split(
            "        x = num_new_tokens" + " * num_new_tokens" * 80 + "\n        return 0\n"
        ),
    },
    "recursion": {
        SCHEDULER_FILE: _split(
            "        return self._mamba_block_aligned_split(request, num_new_tokens, 0, 0)\n"
        ),
    },
}
"""Hostile ``scheduler.py`` trees (release-relative path -> text)."""

TYPE_CONFUSION: dict[str, dict[str, str]] = {
    "string arithmetic": {
        SCHEDULER_FILE: _split("        return num_new_tokens * 0 + 'a'\n"),
    },
    "None compared with an int": {
        SCHEDULER_FILE: _split(
            "        if None < num_new_tokens:\n            return 0\n        return 0\n"
        ),
    },
    "tuple returned": {
        SCHEDULER_FILE: _split("        return (0, num_new_tokens)\n"),
    },
}
"""Sources whose values are not integers where arithmetic, comparisons and the result need
one: a one-line error, not a traceback."""

SQUARING = {
    SCHEDULER_FILE: _split(
        "        x = 3\n" + "        x = x * x\n" * 14 + "        return num_new_tokens\n"
    ),
}
"""3 squared 14 times has 26,000 bits: the concrete form refuses it (SPEC P0 aside, a policy
computing such integers is hostile); every form that evaluates it must refuse it too."""

MODULES: dict[str, str] = {
    "module level runs __import__, prints and opens": (
        f"{RUN}\nprint('{SHOUT}')\nopen('{MARKER}', 'w')\n\n\ndef split(cfg, c, n):\n    return 0\n"
    ),
    "function runs __import__": f"def split(cfg, c, n):\n    x = {RUN}\n    return 0\n",
    "function opens a file": (
        f"def split(cfg, c, n):\n    f = open('{MARKER}', 'w')\n    return 0\n"
    ),
    "function calls eval": f'def split(cfg, c, n):\n    x = eval("{RUN}")\n    return 0\n',
    "function calls exec": f'def split(cfg, c, n):\n    x = exec("{RUN}")\n    return 0\n',
    "function uses import os": (
        f"import os\n\n\ndef split(cfg, c, n):\n    x = os.system('touch {MARKER}')\n    return 0\n"
    ),
    "default argument opens a file": (
        f"def split(cfg, c, n, x=open('{MARKER}', 'w')):\n    return 0\n"
    ),
    "helper runs __import__": (
        f"def helper(n):\n    return {RUN}\n\n\ndef split(cfg, c, n):\n    return helper(n) * 0\n"
    ),
    "decorator runs __import__": (
        f"@__import__('os').system('touch {MARKER}')\ndef split(cfg, c, n):\n    return 0\n"
    ),
    "import from a sibling module with side effects": (
        "from sibling import helper\n\n\ndef split(cfg, c, n):\n    return helper(n) * 0\n"
    ),
    "chained product": "def split(cfg, c, n):\n    x = n" + " * n" * 80 + "\n    return 0\n",
}
"""Hostile ``module:function`` files (the function is ``split``)."""
SIBLING = f"print('{SHOUT}')\n{RUN}\n\n\ndef helper(n):\n    return n\n"
"""``sibling.py`` beside the module files: its module level prints and writes the marker."""


# --- running a command -----------------------------------------------------------------------


@dataclass
class Outcome:
    """One command: exit status, both standard streams (file-descriptor level), and the
    exception that escaped ``main``, if any."""

    argv: list[str]
    code: int | None
    out: str
    err: str
    escaped: str | None


class _TooLong(Exception):
    """The command ran past :data:`TIME_LIMIT`."""


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _TooLong(f"ran longer than {TIME_LIMIT} s")


def run_command(capfd: pytest.CaptureFixture[str], argv: list[str]) -> Outcome:
    """``chunkproof ARGV`` in-process with a time limit; whatever escapes is recorded."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIME_LIMIT)
    escaped = None
    code: int | None = None
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    except BaseException as exc:  # anything escaping is the finding
        escaped = f"{type(exc).__name__}: {exc}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    sys.stdout.flush()
    captured = capfd.readouterr()
    return Outcome(argv, code, captured.out, captured.err, escaped)


def problems(outcome: Outcome, marker: Path) -> list[str]:
    """What is wrong with one outcome (module docstring); empty when it is clean."""
    found = []
    if outcome.escaped is not None:
        found.append(f"an exception escaped: {outcome.escaped}")
    if marker.exists():
        found.append("the marker file was written")
        marker.unlink()
    if SHOUT in outcome.out or SHOUT in outcome.err or "Zen of Python" in outcome.out:
        found.append("the source printed")
    if "Traceback" in outcome.err or "Traceback" in outcome.out:
        found.append("a traceback")
    if outcome.code == 2:
        if outcome.out or outcome.err.count("\n") != 1:
            found.append(f"exit 2 without exactly one error line: {outcome.err!r}")
        if not outcome.err.startswith("chunkproof: error: "):
            found.append(f"exit 2 without the error prefix: {outcome.err!r}")
    elif outcome.code not in (0, 1, 3):
        found.append(f"exit status {outcome.code}")
    elif "--json" in outcome.argv:
        try:
            json.loads(outcome.out)
        except ValueError:
            found.append(f"stdout is not one JSON document: {outcome.out[:200]!r}")
    return found


SMALL = ["--block", "4", "--lookahead", "1-2", "--prompt", "1-8", "--max-sched", "1-4"]
"""One cell per proof (L >= 1), a few hundred configurations for the explorer."""


def policy_commands(policy: str, out: Path) -> Iterator[list[str]]:
    """Every command that takes ``policy``, on small ranges."""
    run = ["--out", str(out), "--jobs", "1", "--json"]
    yield ["trace", policy, "--block", "4", "--prompt", "9", "--budget", "4", "--json"]
    yield ["trace", policy, "--block", "4", "--prompt", "9", "--budget", "4"]
    yield ["explore", policy, *SMALL, *run]
    yield ["prove", policy, *SMALL, "--property", "P1", "--timeout", "10", *run]
    yield ["check", policy, *SMALL, "--property", "P1", "--timeout", "10", *run]
    yield ["compare", policy, "vllm-0.33", *SMALL, "--property", "P1", "--no-prove", *run]
    yield ["conform", policy, "--against", "vllm-0.33", *SMALL, "--timeout", "10", "--json"]
    yield ["conform", "vllm-0.33", "--against", policy, *SMALL, "--timeout", "10", "--json"]


def counterexample(path: Path, policy: str) -> Path:
    """A SPEC C file (P1 on B=4, P=T=9) whose policy names ``policy``."""
    document = {
        "schema": "chunkproof.counterexample/2",
        "policy": {"name": policy, "source_sha256": "0" * 64, "options": []},
        "config": {"block": 4, "prompt": 9, "max_sched": 4},
        "budget_model": {"kind": "adversarial", "low": 1, "high": 4},
        "property": "P1",
        "trace": [{"c": 0, "budget": 4, "n": 4, "split": 0, "encoder": 0, "reservation": 0,
                   "chunk": 0}],
        "verdict": "stuck at c=0 < E=9",
    }  # fmt: skip
    path.write_text(json.dumps(document))
    return path


def file_commands(cx: Path, out: Path) -> Iterator[list[str]]:
    """Every command that reads a counterexample file and rebuilds its policy."""
    yield ["replay", str(cx), "--json"]
    yield ["replay", str(cx)]
    yield ["show", str(cx), "--out", str(out / "picture.svg")]
    yield ["repro", str(cx), "--pytest", str(out / "test_repro.py")]


def run_corpus(
    capfd: pytest.CaptureFixture[str], tmp_path: Path, policy: str, marker: Path
) -> list[tuple[Outcome, list[str]]]:
    """Every command on ``policy``; the outcomes with their problems."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    cx = counterexample(tmp_path / "cx.json", policy)
    results = []
    for argv in [*policy_commands(policy, out), *file_commands(cx, out)]:
        outcome = run_command(capfd, argv)
        results.append((outcome, problems(outcome, marker)))
    return results


def report(results: list[tuple[Outcome, list[str]]]) -> str:
    return "\n".join(f"{' '.join(o.argv[:2])}: {', '.join(p)}" for o, p in results if p)


def write_tree(root: Path, files: dict[str, str], marker: Path) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace(MARKER, str(marker)))


@pytest.fixture
def quiet_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in a fresh directory (a relative path written by hostile code lands there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- the corpus ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    [*sorted(SCHEDULERS), *sorted(TYPE_CONFUSION)],
)
def test_hostile_scheduler_runs_nothing(
    case: str, quiet_cwd: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A hostile scheduler.py, named as a file and as a directory, by every command."""
    marker = quiet_cwd / "marker"
    root = quiet_cwd / "tree"
    write_tree(root, {**SCHEDULERS, **TYPE_CONFUSION}[case], marker)
    for policy in (str(root / SCHEDULER_FILE), str(root)):
        results = run_corpus(capfd, quiet_cwd, policy, marker)
        assert not report(results), f"{case} ({policy}):\n{report(results)}"
    assert not (quiet_cwd / MARKER).exists()


@pytest.mark.parametrize("case", sorted(MODULES))
@pytest.mark.parametrize("form", ["path", "dotted"])
def test_hostile_module_function_runs_nothing(
    case: str,
    form: str,
    quiet_cwd: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hostile ``module:function`` file, as ``dir/file.py:split`` and as a dotted module
    name found along sys.path (read as a file, never imported)."""
    marker = quiet_cwd / "marker"
    folder = quiet_cwd / "policies"
    write_tree(folder, {"hostile_policy.py": MODULES[case], "sibling.py": SIBLING}, marker)
    if form == "dotted":
        monkeypatch.syspath_prepend(str(folder))
        policy = "hostile_policy:split"
    else:
        policy = f"{folder / 'hostile_policy.py'}:split"
    modules_before = set(sys.modules)
    results = run_corpus(capfd, quiet_cwd, policy, marker)
    assert not report(results), f"{case} ({policy}):\n{report(results)}"
    assert not {"hostile_policy", "sibling"} & set(sys.modules) - modules_before


def huge_integer_commands(policy: str, out: Path, cx: Path) -> dict[str, list[str]]:
    """Commands that evaluate ``policy`` on the property that keeps each in its own form
    (P0 holds, so no counterexample is replayed concretely)."""
    run = [*SMALL, "--property", "P0", "--out", str(out), "--jobs", "1", "--json"]
    return {
        "trace": ["trace", policy, "--block", "4", "--prompt", "9", "--budget", "4", "--json"],
        "replay": ["replay", str(cx), "--json"],
        "explore": ["explore", policy, *run],
        "prove": ["prove", policy, *run, "--timeout", "10"],
        "check": ["check", policy, *run, "--timeout", "10"],
        "compare": ["compare", policy, "vllm-0.33", *run, "--no-prove"],
        "conform": ["conform", policy, "--against", policy, *SMALL, "--json"],
    }


@pytest.mark.parametrize(
    "command",
    [
        "trace",
        "replay",
        "explore",
        "prove",
        "check",
        "compare",
        "conform",
    ],
)
def test_huge_integers_are_refused_by_every_form(
    command: str, quiet_cwd: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Integers too large to evaluate exactly are a one-line error (exit 2) in every command
    that evaluates the policy, whatever its form: the interpreted form refuses them, so the
    vectorised and symbolic forms must too (3 squared 14 times is quick even unbounded, so
    an unbounded form shows as a normal run here; 40 squarings hang it)."""
    marker = quiet_cwd / "marker"
    root = quiet_cwd / "tree"
    write_tree(root, SQUARING, marker)
    cx = counterexample(quiet_cwd / "cx.json", str(root))
    argv = huge_integer_commands(str(root), quiet_cwd / "out", cx)[command]
    outcome = run_command(capfd, argv)
    assert not problems(outcome, marker)
    assert outcome.code == 2 and "exceeds" in outcome.err, outcome


def test_the_corpus_would_notice_a_side_effect(
    quiet_cwd: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The checks bite: a shell command's output reaches the captured streams, and printed
    text, a marker, an escaped exception and output before the JSON are all reported."""
    marker = quiet_cwd / "marker"
    os.system(f"echo {SHOUT}; touch {marker}")
    printed = capfd.readouterr().out
    found = problems(Outcome(["trace"], 0, printed, "", None), marker)
    assert found == ["the marker file was written", "the source printed"]
    escaped = Outcome(["trace"], None, "", "Traceback (most recent call last):\n", "TypeError: x")
    assert len(problems(escaped, marker)) == 3  # escaped, traceback, no exit status
    not_json = Outcome(["x", "--json"], 0, "hello\n{}", "", None)
    assert problems(not_json, marker) == ["stdout is not one JSON document: 'hello\\n{}'"]
    two_lines = Outcome(["x"], 2, "", "chunkproof: error: a\nb\n", None)
    assert problems(two_lines, marker)
