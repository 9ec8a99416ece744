"""A repro of a counterexample found on the user's own file runs that file's methods (SPEC C,
SPEC X2): a patch module's replacements (wrapping the unpatched member included), a subclass's
overrides (its ``super()`` calls included), laid over the source tree the test reads. Without
the file the same test would run the release's own methods; a form the file cannot carry (a
method defined inside a function) and ``--style vllm`` (which imports vLLM's unpatched
``Scheduler``) are one-line errors. The tests read the cached 0.33.0 tree (``fidelity``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_helpers import Cli
from repro_helpers import blocking_packages, generate_repro, run_repro

from chunkproof.source.releases import release_root

pytestmark = pytest.mark.fidelity

FORKS = Path(__file__).parent / "fixtures" / "forks"
SMALL = ["--block", "4,8", "--lookahead", "0-3", "--prompt", "1-16", "--max-sched", "1-8"]
BASE = ["--base", "vllm==0.33.0"]
GRID = ["--set", "self.vllm_config.model_config.get_mamba_chunk_size()=8"]


def counterexample(cli: Cli, tmp_path: Path, fixture: str, prop: str, *options: str) -> Path:
    """The explorer's counterexample of ``prop`` on ``fixture`` over :data:`SMALL`."""
    out = tmp_path / "out"
    argv = ["explore", str(FORKS / fixture), *BASE, *options, *SMALL, "--property", prop]
    document = cli(*argv, "--out", str(out), "--json").json()
    (verdict,) = document["verdicts"]
    assert verdict["status"] == "VIOLATED", verdict
    return Path(verdict["counterexample"])


def without_user_methods(repro: Path) -> Path:
    """The same test with the user's methods dropped: it runs the release's own."""
    text = repro.read_text()
    bare, count = re.subn(r"(?m)^USER_METHODS: (.*) = \{.*\}$", r"USER_METHODS: \1 = {}", text)
    assert count == 1
    plain = repro.with_name(f"{repro.stem}_unpatched.py")
    plain.write_text(bare)
    return plain


def test_a_patch_module_repro_runs_the_patch(cli: Cli, tmp_path: Path) -> None:
    """The window patch (a split and a reservation that wraps the unpatched one) ends chunks
    inside the lookahead window: its P5 repro fails on 0.33.0 with that P5 violation; with the
    release's own methods the same steps never end a chunk in the window (0.33.0 stalls
    there instead, its livelock)."""
    cx = counterexample(cli, tmp_path, "window_patch.py", "P5")
    repro = generate_repro(cli, cx, tmp_path)
    assert "chunkproof_user/window_patch.py" in repro.read_text()
    path_first = blocking_packages(tmp_path / "blocked")
    code, output = run_repro(repro, release_root("0.33.0"), path_first)
    assert code == 1 and "P5: chunk" in output, output
    code, output = run_repro(without_user_methods(repro), release_root("0.33.0"), path_first)
    assert code == 1 and "P5: chunk" not in output and "does not finish: c=3" in output, output


def test_a_subclass_repro_runs_its_override_and_super(cli: Cli, tmp_path: Path) -> None:
    """The device scheduler cuts a chunk to its grid and calls ``super()``'s split for the last
    one: the repro fails with the counterexample's own violation, the grid read from the
    ``--set`` value of a call."""
    cx = counterexample(cli, tmp_path, "device_scheduler.py", "P4", *GRID)
    repro = generate_repro(cli, cx, tmp_path)
    path_first = blocking_packages(tmp_path / "blocked")
    code, output = run_repro(repro, release_root("0.33.0"), path_first)
    replayed = cli("replay", str(cx))
    assert replayed.code == 0
    chunk = re.search(r"chunk \[\d+, \d+\)", replayed.out)
    assert chunk is not None, replayed.out
    assert code == 1 and f"P4: {chunk.group()} breaks P4" in output, output


def test_a_method_defined_inside_a_function_is_one_line(cli: Cli, tmp_path: Path) -> None:
    cx = counterexample(cli, tmp_path, "guarded_apply_patch.py", "P1")
    run = cli("repro", str(cx), "--pytest", str(tmp_path / "test_x.py"))
    assert run.code == 2 and run.err.count("\n") == 1
    assert "defined inside a function" in run.err and "chunkproof replay" in run.err
    assert not (tmp_path / "test_x.py").exists()


def test_the_short_form_refuses_a_users_file(cli: Cli, tmp_path: Path) -> None:
    cx = counterexample(cli, tmp_path, "window_patch.py", "P5")
    run = cli("repro", str(cx), "--style", "vllm", "--pytest", str(tmp_path / "test_x.py"))
    assert run.code == 2 and run.err.count("\n") == 1
    assert "--style standalone" in run.err
