"""The ``--out`` folder (checker/reports/output.py): runs keep each other's results, a repeated
run leaves no stale file of its own, and every path a run printed exists after later runs."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import Cli

from chunkproof.checker.reports.output import MANIFESTS, run_folder
from chunkproof.model.errors import EXIT_OK, EXIT_VIOLATED

RANGE = ["--block", "16", "--lookahead", "3", "--prompt", "1-20", "--max-sched", "3-16"]
RANGE += ["--drop", "off"]
SYSTEM = ["--block", "4", "--lookahead", "0", "--drop", "off", "--prompt", "3-4"]
SYSTEM += ["--max-sched", "8"]


def _printed(document: dict[str, Any]) -> set[str]:
    """Every file a ``--json`` document names: the files written, each verdict's
    counterexample and picture, and those of its findings."""
    paths = set(document["files"])
    for verdict in document["verdicts"]:
        paths |= {verdict.get("counterexample"), verdict.get("picture")}
        for finding in verdict.get("findings", []):
            paths |= {finding.get("counterexample"), finding.get("picture")}
    return {p for p in paths if p}


def _run(cli: Cli, *argv: str) -> dict[str, Any]:
    result = cli(*argv, "--json")
    assert result.code in (EXIT_OK, EXIT_VIOLATED), result.err
    document: dict[str, Any] = result.json()
    return document


def test_check_then_prove_then_system_keep_every_printed_file(cli: Cli, tmp_path: Path) -> None:
    """Three commands into one --out, all on vllm-0.33's folder: each one's printed files (and
    the counterexample each names) still exist, unchanged in number, after the later ones."""
    out = ["--out", str(tmp_path), "--jobs", "1"]
    check = _run(cli, "check", "vllm-0.33", *RANGE, *out)
    prove = _run(cli, "prove", "vllm-0.33", *RANGE, "--property", "P1,P3", *out)
    system = _run(cli, "system", "vllm-0.33", *SYSTEM, "--out", str(tmp_path))
    printed = {name: _printed(doc) for name, doc in (("check", check), ("prove", prove))}
    printed["system"] = set(system["files"])
    assert all(printed.values()), printed  # each run wrote something
    assert any(p.endswith("/vllm-0.33/P1.json") for p in printed["check"])
    assert any(p.endswith("/vllm-0.33/system-HOL.json") for p in printed["system"])
    for name, paths in printed.items():
        missing = sorted(p for p in paths if not Path(p).is_file())
        assert not missing, (name, missing)
    # the system counterexample the guide's next command reads is still a readable file
    hol = next(p for p in printed["system"] if p.endswith("system-HOL.json"))
    assert cli("replay", hol).code == EXIT_OK
    # nothing else is in the folder: no staging or retired leftovers, no file no run printed
    on_disk = {str(p) for p in (tmp_path / "vllm-0.33").rglob("*") if p.is_file()}
    assert on_disk == set().union(*printed.values())
    assert not list(tmp_path.glob(".staging-*")) and not list(tmp_path.glob(".retired-*"))


SPLIT_STOPS = """
def split(cfg, c, n):
    return 0
"""
SPLIT_MOVES = """
def split(cfg, c, n):
    return n
"""


def test_a_repeated_check_leaves_no_stale_file_of_its_first_run(cli: Cli, tmp_path: Path) -> None:
    """The same ``check`` twice (a user policy whose file changed in between): the first run's
    P1 counterexample, which the second does not write, is gone; a ``system`` run's files in
    the same folder stay."""
    module = tmp_path / "policy.py"
    policy = f"{module}:split"
    out_dir = tmp_path / "out"
    out = ["--out", str(out_dir), "--jobs", "1"]
    small = ["--block", "4", "--lookahead", "0", "--prompt", "1-8", "--max-sched", "1-4"]
    small += ["--drop", "off", "--property", "P1"]
    module.write_text(textwrap.dedent(SPLIT_STOPS))
    first = _run(cli, "check", policy, *small, *out)
    system = _run(cli, "system", "vllm-0.33", *SYSTEM, "--out", str(out_dir))
    (verdict,) = first["verdicts"]
    assert verdict["status"] == "VIOLATED" and Path(verdict["counterexample"]).is_file()
    module.write_text(textwrap.dedent(SPLIT_MOVES))
    second = _run(cli, "check", policy, *small, *out)
    (verdict,) = second["verdicts"]
    assert verdict["status"] == "PROVED"
    folder = Path(first["verdicts"][0]["counterexample"]).parent
    on_disk = {str(p) for p in folder.rglob("*") if p.is_file()}
    assert on_disk == set(second["files"])  # only the second check's files
    system_folder = out_dir / "vllm-0.33"
    assert all(Path(p).is_file() for p in system["files"]), system["files"]
    assert {str(p) for p in system_folder.rglob("*") if p.is_file()} == set(system["files"])


def _write(root: Path, identity: str, *names: str) -> None:
    with run_folder(root, identity) as out:
        for name in names:
            out.record(out.path("p", name))
            out.path("p", name).write_text(json.dumps({"run": identity, "name": name}))


def _names(root: Path) -> set[str]:
    folder = root / "p"
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_runs_of_other_identities_keep_each_others_files(tmp_path: Path) -> None:
    """A run drops only the files its own identity wrote before and does not write now; a file
    two identities wrote is the later one's and stays while either lists it."""
    _write(tmp_path, "check", "P1.json", "P3.json", "certificates/c1.smt2")
    _write(tmp_path, "prove", "P1-prove.json", "certificates/c1.smt2")
    assert _names(tmp_path) == {"P1.json", "P3.json", "P1-prove.json", "certificates/c1.smt2"}
    assert json.loads((tmp_path / "p" / "certificates/c1.smt2").read_text())["run"] == "prove"
    _write(tmp_path, "check", "P3.json")  # the repeated check no longer writes P1 or c1
    assert _names(tmp_path) == {"P3.json", "P1-prove.json", "certificates/c1.smt2"}
    _write(tmp_path, "prove")  # the repeated prove writes nothing: its files go
    assert _names(tmp_path) == {"P3.json"}
    manifest = json.loads((tmp_path / MANIFESTS / "p.json").read_text())
    assert manifest == {"check": ["P3.json"]}


def test_an_interrupted_run_changes_nothing(tmp_path: Path) -> None:
    """A run that stops before it completes leaves the folder and the manifest as they were."""
    _write(tmp_path, "check", "P1.json")
    manifest = (tmp_path / MANIFESTS / "p.json").read_text()
    with pytest.raises(KeyboardInterrupt), run_folder(tmp_path, "check") as out:
        out.path("p", "P3.json").write_text("{}")
        raise KeyboardInterrupt
    assert _names(tmp_path) == {"P1.json"}
    assert (tmp_path / MANIFESTS / "p.json").read_text() == manifest
    assert not list(tmp_path.glob(".staging-*"))


def test_a_folder_from_before_manifests_keeps_its_files(tmp_path: Path) -> None:
    """Files no manifest lists belong to no known run: a run keeps them rather than guess."""
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "old.json").write_text("{}")
    _write(tmp_path, "check", "P1.json")
    assert _names(tmp_path) == {"old.json", "P1.json"}
