"""Benchmark: how long a user waits for each command with its default range.

Each command runs as a user runs it: the installed ``chunkproof`` in a child process, wall
time, on this machine's CPUs (``--jobs`` left at its default). Printed beside each: the time
measured on 2 cores before this benchmark existed (2026-12-04), and the 30 s target; the release
commands read the cached release files (``~/.cache/chunkproof``), fetched once before timing.
``--tests`` adds the README's test command (``pytest``, the default selection; 10 minutes is
its target).

    python bench/commands.py [--only NAME[,NAME]] [--tests]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 30.0
"""Seconds a user should wait at most for a command with its default range."""

TESTS_TARGET = 600.0
"""Seconds the README's test command should take at most."""

COMMANDS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("check", ("check",), "22 s"),
    ("check-source", ("check", "vllm==0.34.0"), "56 s"),
    ("compare", ("compare", "vllm-latest", "lookahead-in-split"), "about 200 s"),
    ("conform", ("conform", "vllm-0.33", "--against", "vllm==0.33.0"), "over 900 s"),
    ("prove", ("prove", "vllm-latest"), "125 s"),
    ("system-prove", ("system", "vllm-0.28", "--prove"), "112 s"),
)
"""(name, arguments, the time measured before this benchmark) of every command a user waits
for with its default range."""

FETCH_ARGS = ("--block", "4", "--lookahead", "0", "--prompt", "4", "--budget", "4")
"""A one-step ``trace`` that fetches a release's files before the timing starts."""

WRITES = frozenset({"check", "prove", "compare", "system"})
"""Commands that take ``--out`` (the rest write nothing)."""


def timed(argv: list[str], cwd: Path) -> tuple[float, int, str]:
    """(seconds, exit status, last line of its output) of one child process."""
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    lines = (done.stdout or done.stderr).strip().splitlines()
    return seconds, done.returncode, lines[-1][:70] if lines else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", help="comma-separated names of the commands to time")
    parser.add_argument("--tests", action="store_true", help="also time the README's pytest")
    args = parser.parse_args()
    names = set(args.only.split(",")) if args.only else {name for name, _, _ in COMMANDS}
    unknown = names - {name for name, _, _ in COMMANDS}
    if unknown:
        parser.error(f"unknown command name(s): {', '.join(sorted(unknown))}")
    executable = str(Path(sys.executable).with_name("chunkproof"))
    for version in ("0.33.0", "0.34.0"):  # fetched once, outside the timing
        subprocess.run(
            [executable, "trace", f"vllm=={version}", *FETCH_ARGS],
            capture_output=True,
            check=False,
        )
    print(f"CPUs: {os.cpu_count()}; target: {TARGET:.0f} s per command")
    print(f"{'command':<14}{'seconds':>9}{'exit':>6}  {'before':<12}{'target':<8}last line")
    with tempfile.TemporaryDirectory() as scratch:
        for name, argv, before in COMMANDS:
            if name not in names:
                continue
            out = ["--out", str(Path(scratch) / name)] if argv[0] in WRITES else []
            seconds, status, last = timed([executable, *argv, *out], Path(scratch))
            verdict = "met" if seconds <= TARGET else "MISSED"
            print(f"{name:<14}{seconds:>9.1f}{status:>6}  {before:<12}{verdict:<8}{last}")
    if args.tests:
        root = Path(__file__).resolve().parent.parent
        seconds, status, last = timed([sys.executable, "-m", "pytest", "-q"], root)
        verdict = "met" if seconds <= TESTS_TARGET else "MISSED"
        print(f"{'pytest':<14}{seconds:>9.1f}{status:>6}  {'25-30 min':<12}{verdict:<8}{last}")


if __name__ == "__main__":
    main()
