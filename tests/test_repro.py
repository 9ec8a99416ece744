"""``chunkproof repro``: standalone pytest files that run the real vLLM methods along a trace.

Each generated file is run in a fresh interpreter whose import path puts packages named
``chunkproof``, ``vllm`` and ``torch`` first that refuse to be imported, so a pass or a failure
can only come from the real methods read out of the source tree as text.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import Cli
from vllm_copies import copy_release, patched_release

from chunkproof.checker.repro import SOURCE_VARIABLE, repro_source
from chunkproof.model.counterexample import Counterexample
from chunkproof.model.releases import release_root

COUNTEREXAMPLES = Path(__file__).resolve().parent.parent / "counterexamples"
SPEC_K = COUNTEREXAMPLES / "vllm-0.33" / "p1-livelock-T49-B16-L3.json"
CURATED = sorted(COUNTEREXAMPLES.glob("*/*.json"))


def _blockers(into: Path) -> Path:
    """A directory of packages that fail on import: chunkproof, vllm and torch."""
    for name in ("chunkproof", "vllm", "torch"):
        package = into / name
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(f"raise ImportError('the repro imported {name}')\n")
    return into


def _run_repro(test_file: Path, source: Path | None, path_first: Path) -> tuple[int, str]:
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


def _generate(cli: Cli, cx_file: Path, tmp_path: Path) -> Path:
    out = tmp_path / "repro" / f"test_{cx_file.stem.replace('-', '_')}.py"
    result = cli("repro", str(cx_file), "--pytest", str(out))
    assert result.code == 0 and str(out) in result.out
    return out


@pytest.mark.fidelity
def test_spec_k_repro_fails_on_0_33_and_passes_on_the_fix(cli: Cli, tmp_path: Path) -> None:
    """The issue's acceptance: the generated file fails on 0.33.0's source at the SPEC K stuck
    point and passes on a copy whose split implements lookahead-in-split."""
    test_file = _generate(cli, SPEC_K, tmp_path)
    blockers = _blockers(tmp_path / "blockers")
    status, output = _run_repro(test_file, release_root("0.33.0"), blockers)
    assert status == 1, output
    assert "stuck at c=46 < E=49" in output and "1 failed" in output
    status, output = _run_repro(test_file, patched_release(tmp_path / "fixed"), blockers)
    assert status == 0 and "1 passed" in output, output


@pytest.mark.fidelity
def test_repro_finds_an_installed_vllm_without_importing_it(cli: Cli, tmp_path: Path) -> None:
    """Without the variable, the repro locates the ``vllm`` package on the import path."""
    test_file = _generate(cli, SPEC_K, tmp_path)
    site = copy_release("0.33.0", tmp_path / "site", with_manifest=False)
    status, output = _run_repro(test_file, None, site)
    assert status == 1 and "stuck at c=46" in output, output


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is not None, reason="a vllm package is installed here"
)
def test_repro_without_a_vllm_source_is_an_error_not_a_pass(cli: Cli, tmp_path: Path) -> None:
    """No source tree: the test errors with a one-line reason (never a pass or a skip)."""
    test_file = _generate(cli, SPEC_K, tmp_path)
    status, output = _run_repro(test_file, None, tmp_path / "nothing")
    assert status == 1 and "no vLLM source" in output and "1 error" in output, output
    status, output = _run_repro(test_file, tmp_path, tmp_path / "nothing")
    assert status == 1 and "has no vllm/v1/core/sched/scheduler.py" in output, output


def _source_of(cx_file: Path, tmp_path: Path) -> Path:
    """The source tree a curated counterexample was found on: its release, or the fix."""
    policy = Counterexample.load(cx_file).policy
    if policy == "lookahead-in-split":
        return patched_release(tmp_path / "fixed")
    return release_root(policy.removeprefix("vllm-") + ".0")


@pytest.mark.fidelity
@pytest.mark.parametrize("cx_file", CURATED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_curated_repro_fails_on_the_code_it_was_found_on(
    cli: Cli, tmp_path: Path, cx_file: Path
) -> None:
    """Each committed counterexample's repro breaks its property on the real code of its
    policy (its first release, or the SPEC V fix written into 0.33.0)."""
    cx = Counterexample.load(cx_file)
    test_file = _generate(cli, cx_file, tmp_path)
    source = _source_of(cx_file, tmp_path)
    status, output = _run_repro(test_file, source, _blockers(tmp_path / "blockers"))
    assert status == 1 and f"AssertionError: {cx.property}: " in output, output


@pytest.mark.parametrize("cx_file", CURATED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_committed_repros_are_current(cx_file: Path) -> None:
    """counterexamples/pytest holds the repro of every curated counterexample, as
    regenerate.sh writes it (from inside counterexamples/)."""
    name = f"{cx_file.parent.name}/{cx_file.name}"
    committed = COUNTEREXAMPLES / "pytest" / repro_file_name(cx_file)
    assert committed.read_text() == repro_source(Counterexample.load(cx_file), name)


def test_committed_repros_have_no_undefined_names() -> None:
    """pyflakes (ruff's F rules) over the generated files: every name a repro uses is defined
    in it, so no path of the test can fail for a reason other than the property."""
    ruff = [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F,E9"]
    done = subprocess.run(
        [*ruff, str(COUNTEREXAMPLES / "pytest")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout


def repro_file_name(cx_file: Path) -> str:
    """``vllm-0.33/p1-x.json`` -> ``test_vllm_0_33_p1_x.py`` (as regenerate.sh names it)."""
    stem = f"{cx_file.parent.name}_{cx_file.stem}"
    return "test_" + "".join(ch if ch.isalnum() else "_" for ch in stem) + ".py"


def test_repro_bad_input(cli: Cli, tmp_path: Path) -> None:
    """A wrong suffix, a missing file, and a file that is no counterexample: one line, exit 2."""
    for argv, words in (
        (["repro", str(SPEC_K), "--pytest", str(tmp_path / "t.txt")], "must end in .py"),
        (["repro", str(tmp_path / "no.json"), "--pytest", str(tmp_path / "t.py")], "no such"),
        (["repro", __file__, "--pytest", str(tmp_path / "t.py")], "not readable JSON"),
    ):
        result = cli(*argv)
        assert result.code == 2 and words in result.err, result.err
        assert len(result.err.strip().splitlines()) == 1
    assert not (tmp_path / "t.py").exists()
