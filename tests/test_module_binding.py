"""SPEC Q2: a module is read as Python binds it at import.

Each tree below is a copy of vLLM 0.33.0's cached source whose scheduler gets stuck at c=0 for
a prompt of 4099 tokens (B=16, M=16) when Python imports it: the change is made by a
module-level patch of ``Scheduler`` in ``scheduler.py`` or in a package ``__init__`` on its
import path, or by a second class of the same name. chunkproof must find P1 violated, or refuse
the tree with one line naming the construct (exit 2); it must never prove it live. A policy
file importing chunkproof's own CLI must not import anything. The tests read the release cache,
so they carry the ``fidelity`` marker.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from cli_helpers import Cli, CliRun
from vllm_copies import copy_release

from chunkproof.source.extraction import SCHEDULER_FILE

pytestmark = pytest.mark.fidelity

STUCK = ("--block", "16", "--lookahead", "0", "--drop", "off", "--prompt", "4099")
P1 = ("--max-sched", "16", "--property", "P1")

PATCHED_SPLIT = """

_original_split = Scheduler._mamba_block_aligned_split


def _patched_split(
    self, request, num_new_tokens, num_new_local_computed_tokens=0, num_external_computed_tokens=0
):
    if request.num_tokens == 4099:
        return 0
    return _original_split(
        self, request, num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens
    )
"""

PATCHED_RESERVATION = """

_original_reservation = Scheduler._reserve_prefill_lookahead


def _patched_reservation(self, request, num_computed_tokens, num_new_tokens):
    if request.num_tokens == 4099:
        return 0
    return _original_reservation(self, request, num_computed_tokens, num_new_tokens)
"""

SHADOWING_CLASS = """

class Scheduler(Scheduler):
    def _mamba_block_aligned_split(
        self, request, num_new_tokens, num_new_local_computed_tokens=0,
        num_external_computed_tokens=0,
    ):
        if request.num_tokens == 4099:
            return 0
        return super()._mamba_block_aligned_split(
            request, num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens
        )
"""


def tree_with(tmp_path: Path, rel: str, text: str) -> Path:
    """A copy of 0.33.0's tree (with its manifest) with ``text`` appended to file ``rel``."""
    root = copy_release("0.33.0", tmp_path / "tree", with_manifest=True)
    path = root / rel
    path.write_text(path.read_text() + text)
    return root


def check_stuck(cli: Cli, root: Path) -> CliRun:
    """``check TREE`` at T=4099, B=16, M=16 for P1 (files under the tree's parent)."""
    return cli("check", str(root), *STUCK, *P1, "--out", str(root.parent / "out"))


def assert_violated(run: CliRun) -> None:
    """P1 violated (exit 1), never proved."""
    assert run.code == 1, run.out + run.err
    assert "P1 LIVE" in run.out and "VIOLATED" in run.out, run.out
    assert "PROVED" not in run.out.split("P1 LIVE", 1)[1].splitlines()[0]


def assert_refused(run: CliRun, *words: str) -> None:
    """One line on stderr, exit 2, naming the construct."""
    assert run.code == 2, run.out + run.err
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, run.err
    for word in words:
        assert word in lines[0], lines[0]


def test_the_unpatched_copy_is_live(tmp_path: Path, cli: Cli) -> None:
    """The control: the same copy without a patch is proved live at T=4099."""
    run = check_stuck(cli, tree_with(tmp_path, SCHEDULER_FILE, "\n"))
    assert run.code == 0, run.out + run.err
    assert "P1 LIVE" in run.out and "PROVED" in run.out


def test_a_class_attribute_patch_in_scheduler_py_applies(tmp_path: Path, cli: Cli) -> None:
    """``Scheduler.m = f`` after the class: Python runs ``f``."""
    patch = PATCHED_SPLIT + "\n\nScheduler._mamba_block_aligned_split = _patched_split\n"
    assert_violated(check_stuck(cli, tree_with(tmp_path, SCHEDULER_FILE, patch)))


def test_a_setattr_patch_in_scheduler_py_applies(tmp_path: Path, cli: Cli) -> None:
    """``setattr(Scheduler, "m", f)``: the same patch."""
    patch = PATCHED_SPLIT + '\n\nsetattr(Scheduler, "_mamba_block_aligned_split", _patched_split)\n'
    assert_violated(check_stuck(cli, tree_with(tmp_path, SCHEDULER_FILE, patch)))


def test_a_patched_reservation_applies(tmp_path: Path, cli: Cli) -> None:
    """The reservation patched instead of the split."""
    patch = (
        PATCHED_RESERVATION + "\n\nScheduler._reserve_prefill_lookahead = _patched_reservation\n"
    )
    assert_violated(check_stuck(cli, tree_with(tmp_path, SCHEDULER_FILE, patch)))


def test_a_shadowing_class_is_refused(tmp_path: Path, cli: Cli) -> None:
    """``class Scheduler(Scheduler)`` appended: Python binds the last class; chunkproof, which
    reads one class per name, refuses it in one line naming the name and the line."""
    root = tree_with(tmp_path, SCHEDULER_FILE, SHADOWING_CLASS)
    line = (root / SCHEDULER_FILE).read_text().splitlines().index("class Scheduler(Scheduler):")
    assert_refused(check_stuck(cli, root), f"scheduler.py:{line + 1}:", "'Scheduler'", "SPEC Q2")


def test_two_classes_of_the_same_name_are_refused(tmp_path: Path, cli: Cli) -> None:
    """A second, unrelated ``class Scheduler``: refused, not silently the first."""
    second = "\n\nclass Scheduler:\n    pass\n"
    run = check_stuck(cli, tree_with(tmp_path, SCHEDULER_FILE, second))
    assert_refused(run, "scheduler.py:", "'Scheduler' is bound again", "class")


def test_a_patch_in_the_package_init_applies(tmp_path: Path, cli: Cli) -> None:
    """``vllm/v1/core/sched/__init__.py`` imports Scheduler and patches it: Python runs the
    package's ``__init__`` whenever it imports the scheduler module."""
    init = "from .scheduler import Scheduler\n" + PATCHED_SPLIT
    init += "\n\nScheduler._mamba_block_aligned_split = _patched_split\n"
    root = tree_with(tmp_path, "vllm/v1/core/sched/__init__.py", init)
    run = check_stuck(cli, root)
    assert_violated(run)
    assert "as patched at import (Scheduler._mamba_block_aligned_split at" in run.out


def test_rebinding_the_class_name_is_refused(tmp_path: Path, cli: Cli) -> None:
    """``Scheduler = Other`` at module level: one line naming the rebinding."""
    other = "\n\nclass Other(Scheduler):\n    pass\n\n\nScheduler = Other\n"
    run = check_stuck(cli, tree_with(tmp_path, SCHEDULER_FILE, other))
    assert_refused(run, "scheduler.py:", "'Scheduler' is bound again")


def test_assigning_a_module_attribute_from_an_init_is_refused(tmp_path: Path, cli: Cli) -> None:
    """``scheduler.Scheduler = X`` from the package ``__init__``: refused, not ignored."""
    init = "from . import scheduler\n\nscheduler.Scheduler = None\n"
    run = check_stuck(cli, tree_with(tmp_path, "vllm/v1/core/sched/__init__.py", init))
    assert_refused(run, "__init__.py:3:", "scheduler.Scheduler")


def test_globals_at_import_is_refused(tmp_path: Path, cli: Cli) -> None:
    """``globals()[...] = ...`` could rebind anything: refused with its line."""
    text = '\n\nglobals()["Scheduler"] = None\n'
    run = check_stuck(cli, tree_with(tmp_path, SCHEDULER_FILE, text))
    assert_refused(run, "scheduler.py:", "globals()")


def test_a_policy_file_never_imports_chunkproof(tmp_path: Path, cli: Cli) -> None:
    """``from chunkproof.__main__ import main`` in a ``module:function`` policy: nothing is
    imported (no nested run); the name is outside the subset, one line, exit 2."""
    path = tmp_path / "user_policy.py"
    path.write_text(
        "from chunkproof.__main__ import main\n\n\ndef split(cfg, c, n):\n    return main()\n"
    )
    before = set(sys.modules)
    out = str(tmp_path / "out")
    run = cli("check", f"{path}:split", "--block", "16", "--prompt", "32", *P1, "--out", out)
    assert "chunkproof.__main__" not in set(sys.modules) - before
    assert_refused(run, "user_policy.py:1:", "chunkproof.__main__")


def test_a_policy_file_may_use_a_loaded_model_function(tmp_path: Path, cli: Cli) -> None:
    """A function of chunkproof's model that is already loaded (the built-in V9 split) is
    still usable from a policy file, without importing anything."""
    path = tmp_path / "user_policy.py"
    path.write_text(
        "from chunkproof.model.splits import split_v9\n\n\n"
        "def split(cfg, c, n):\n    return split_v9(cfg, c, n)\n"
    )
    out = str(tmp_path / "out")
    run = cli("check", f"{path}:split", "--block", "16", "--prompt", "1-40", *P1, "--out", out)
    assert run.code in (0, 1) and "P1 LIVE" in run.out, run.out + run.err


@pytest.mark.parametrize("version", ["0.15.0", "0.28.0", "0.33.0"])
def test_real_release_packages_bind_nothing(version: str) -> None:
    """A real release's scheduler module and package ``__init__`` files (with their lazy
    imports, ``__all__`` and ``MODULE_ATTRS``) are evaluated and patch nothing: the class is
    the release's own, read exactly as before."""
    from chunkproof.source.classes import ROOT, ClassLoader, Sources
    from chunkproof.source.extraction import PACKAGE_INITS
    from chunkproof.source.releases import release_root

    root = release_root(version)
    assert all((root / rel).is_file() for rel in PACKAGE_INITS)
    loader = ClassLoader(Sources(root))
    assert set(loader.bound) == {SCHEDULER_FILE, *PACKAGE_INITS}
    assert loader.patched == []
    assert loader.bound[SCHEDULER_FILE].env["Scheduler"].key == ROOT
