"""The README's quick start, run in order as a new user would: every ``$ ...`` line of its code
blocks, in one working folder, each command's shown output found in what it prints.

The README's placeholders become real trees, made at test time from the release cache (no vLLM
code is committed): ``path/to/vllm-0.33.0`` is the cached 0.33.0 tree,
``path/to/checkout`` and ``path/to/fixed-checkout`` a copy of it with the lookahead-in-split fix
(:func:`vllm_copies.patched_release`). A shown line stands for an output line that contains
each of its pieces around ``(...)`` in order; a ``# comment`` after a pytest command is the
result it must print. A command that asks Z3 runs with the tests' solver bounds where the
README gives none (:data:`solver_limits.SOLVER_ARGS`: Z3's resource units decide the verdict
it shows, not the machine's clock). The tests read release trees, so they carry the
``fidelity`` marker.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_helpers import Cli
from solver_limits import SOLVER_ARGS
from vllm_copies import patched_release

from chunkproof.source.releases import release_root

pytestmark = pytest.mark.fidelity

README = Path(__file__).resolve().parent.parent / "README.md"

SOLVING = frozenset({"prove", "check", "compare", "synthesize", "conform"})
"""The commands that ask Z3 (``system`` too, with ``--prove``)."""


@dataclass(frozen=True)
class Example:
    """One ``$`` line of the README and the output lines shown under it."""

    command: str
    shown: tuple[str, ...]


def examples(text: str) -> list[Example]:
    """Every ``$`` line of the README's code blocks, in order, with the lines under it."""
    found: list[Example] = []
    for block in re.findall(r"```\n(.*?)```", text, flags=re.S):
        command: str | None = None
        shown: list[str] = []
        for line in block.splitlines():
            if line.startswith("$ "):
                if command is not None:
                    found.append(Example(command, tuple(shown)))
                command, shown = line[2:], []
            elif command is not None and line.strip():
                shown.append(line)
        if command is not None:
            found.append(Example(command, tuple(shown)))
    return found


def shows(output: str, line: str) -> bool:
    """Whether some line of ``output`` holds the pieces of the shown ``line`` in order."""
    pieces = [p.strip() for p in line.split("(...)") if p.strip()]
    for real in output.splitlines():
        at = 0
        for piece in pieces:
            at = real.find(piece, at)
            if at < 0:
                break
            at += len(piece)
        else:
            return True
    return False


def bounded(argv: list[str]) -> list[str]:
    """``argv`` of a command that asks Z3 with each solver bound of :data:`SOLVER_ARGS` it
    does not set itself."""
    if argv[1] not in SOLVING and "--prove" not in argv:
        return argv
    pairs = zip(SOLVER_ARGS[::2], SOLVER_ARGS[1::2], strict=True)
    return argv + [word for pair in pairs if pair[0] not in argv for word in pair]


def test_solver_commands_get_the_bounds_they_lack() -> None:
    assert bounded(["chunkproof", "explore", "x"]) == ["chunkproof", "explore", "x"]
    assert bounded(["chunkproof", "prove", "x"]) == ["chunkproof", "prove", "x", *SOLVER_ARGS]
    given = ["chunkproof", "system", "x", "--prove", "--rlimit", "5"]
    assert bounded(given) == [*given, *SOLVER_ARGS[2:]]


def test_the_readme_has_the_three_jobs() -> None:
    commands = [e.command for e in examples(README.read_text())]
    assert any(c.startswith("chunkproof prove") for c in commands)
    assert any(c.startswith("chunkproof repro") for c in commands)
    assert any(c.startswith("chunkproof compare") for c in commands)


def test_the_quick_start_runs_in_order(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = patched_release(tmp_path / "checkout")
    places = {
        "path/to/vllm-0.33.0": str(release_root("0.33.0")),
        "path/to/fixed-checkout": str(checkout),
        "path/to/checkout": str(checkout),
    }
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    ran = 0
    for example in examples(README.read_text()):
        command = example.command
        for placeholder, real in places.items():
            command = command.replace(placeholder, real)
        words, _, comment = command.partition("#")
        argv = shlex.split(words)
        if argv[0] == "chunkproof":
            argv = bounded(argv)
            run = cli(*argv[1:])
            assert run.code in (0, 1), f"{example.command}: exit {run.code}: {run.err}"
            output = run.out
        else:
            env = dict(os.environ)
            while "=" in argv[0]:
                name, _, value = argv.pop(0).partition("=")
                env[name] = value
            assert argv[0] == "pytest", example.command
            child = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *argv[1:]]
            done = subprocess.run(child, env=env, capture_output=True, text=True, timeout=600)
            output = done.stdout + done.stderr
            expected = [part.strip() for part in comment.split(":") if part.strip()]
            assert expected, example.command
            for part in expected:
                assert part in output, f"{example.command}:\n{output[-2000:]}"
        for line in example.shown:
            assert shows(output, line), f"{example.command}: not shown: {line}\n{output}"
        ran += 1
    assert ran >= 5
    assert (work / "report.md").is_file()
