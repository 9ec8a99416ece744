"""The layers of the package (docs/architecture.md): nothing imports upward.

Read from the source of every module (imports at any depth of the file, so a function-level
import counts too): a module of a layer imports only its own layer and those below it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

LAYERS = {
    "model": 0,
    "source": 1,
    "spec": 2,
    "proofs": 3,
    "checker.engines": 4,
    "checker.reports": 5,
    "checker.repro": 5,
    "checker.kinds": 6,
    "checker.runs": 7,
    "checker.cli": 8,
}
"""Each package's rank: it may import packages of a lower rank and its own."""


def _package(dotted: str) -> str | None:
    """The layer a ``chunkproof.*`` module belongs to (the longest matching package)."""
    name = dotted.removeprefix("chunkproof.")
    found = [p for p in LAYERS if name == p or name.startswith(p + ".")]
    return max(found, key=len) if found else None


def _imports(path: Path) -> set[str]:
    """Every ``chunkproof.*`` module ``path`` imports (``from chunkproof.a import b`` counts as
    ``chunkproof.a.b`` when b is a module, which the layer lookup resolves either way)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("chunkproof."))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("chunkproof."):
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


MODULES = sorted(p for package in LAYERS for p in (ROOT / package.replace(".", "/")).glob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_imports_upward(path: Path) -> None:
    own = _package("chunkproof." + ".".join(path.relative_to(ROOT).with_suffix("").parts))
    assert own is not None
    upward = sorted(
        module
        for module in _imports(path)
        if (layer := _package(module)) is not None and layer != own and LAYERS[layer] >= LAYERS[own]
    )
    assert not upward, f"{own} imports {upward}"


def _packages(folder: Path) -> list[str]:
    """The packages below ``folder`` (a folder with an ``__init__.py`` inside a package), as
    dotted names relative to the root; a build folder or a virtual environment is none."""
    found = []
    for child in sorted(folder.iterdir()):
        if child.is_dir() and (child / "__init__.py").is_file():
            found.append(".".join(child.relative_to(ROOT).parts))
            found += _packages(child)
    return found


def test_every_module_is_in_a_layer() -> None:
    """A new package gets a rank here (and a line in docs/architecture.md)."""
    folders = set(_packages(ROOT))
    assert folders <= {*LAYERS, "checker"}, folders - {*LAYERS, "checker"}
    assert {*LAYERS, "checker"} <= folders


def test_every_package_installs() -> None:
    """pyproject.toml lists each package (the root is ``chunkproof``): a package left out is
    missing from a non-editable install, which then fails on its first import."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    assert listed == {"chunkproof", *(f"chunkproof.{p}" for p in _packages(ROOT))}
