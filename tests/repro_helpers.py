"""Write a repro with ``chunkproof repro`` and run it the way a user would, where nothing but
the real methods read from a source tree can make it pass or fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cli_helpers import Cli

from chunkproof.checker.repro.frame import SOURCE_VARIABLE


def blocking_packages(into: Path) -> Path:
    """A directory of packages that fail on import: chunkproof, vllm and torch."""
    for name in ("chunkproof", "vllm", "torch"):
        package = into / name
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(f"raise ImportError('the repro imported {name}')\n")
    return into


def run_repro(test_file: Path, source: Path | None, path_first: Path) -> tuple[int, str]:
    """Run the generated file with pytest; ``source`` is $CHUNKPROOF_VLLM_SOURCE (or unset)."""
    env = {k: v for k, v in os.environ.items() if k not in (SOURCE_VARIABLE, "PYTHONPATH")}
    env["PYTHONPATH"] = str(path_first)
    if source is not None:
        env[SOURCE_VARIABLE] = str(source)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        cwd=test_file.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, done.stdout + done.stderr


def generate_repro(cli: Cli, cx_file: Path, tmp_path: Path) -> Path:
    """``chunkproof repro`` of ``cx_file`` into ``tmp_path/repro``."""
    out = tmp_path / "repro" / f"test_{cx_file.stem.replace('-', '_')}.py"
    result = cli("repro", str(cx_file), "--pytest", str(out))
    assert result.code == 0 and str(out) in result.out
    return out
