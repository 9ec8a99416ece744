"""Conventions of the command line (SPEC CLI): ``--version``, ``trace``'s exit status (0 when
the prefill finishes, 1 when the given budgets hold the request for ever or it breaks P0), as
every other command's status says whether a property is violated, and a lone ``scheduler.py``
read as it is."""

from __future__ import annotations

import shutil
from importlib import metadata
from pathlib import Path

import pytest
from cli_helpers import Cli

from chunkproof.source.extraction import SCHEDULER_FILE
from chunkproof.source.releases import release_root

TRACE = ["--block", "16", "--prompt", "49", "--budget", "16"]


def test_version(cli: Cli) -> None:
    run = cli("--version")
    assert (run.code, run.out) == (0, f"chunkproof {metadata.version('chunkproof')}\n")


@pytest.mark.parametrize(
    ("lookahead", "outcome", "code"), [("1", "finished", 0), ("3", "stuck", 1)]
)
@pytest.mark.parametrize("json", [[], ["--json"]])
def test_trace_exits_1_when_the_request_is_held_for_ever(
    lookahead: str, outcome: str, code: int, json: list[str], cli: Cli
) -> None:
    """SPEC K: vllm-0.33 with B=16, P=49 under const(16) finishes with L=1 and is stuck at 46
    with L=3."""
    run = cli("trace", "vllm-0.33", *TRACE, "--lookahead", lookahead, *json)
    assert run.code == code
    assert (outcome in run.out) if json else (("finished" if code == 0 else "stuck") in run.out)


def test_trace_exits_1_when_the_policy_raises(cli: Cli) -> None:
    """vllm-0.17 asserts on an external hit at admission (SPEC P0)."""
    run = cli("trace", "vllm-0.17", "--block", "4", "--lookahead", "0", "--prompt", "8",
              "--start", "4", "--external", "4", "--budget", "4", "--json")  # fmt: skip
    assert (run.code, run.json()["outcome"]) == (1, "unsafe"), run.out


@pytest.mark.fidelity
def test_a_lone_scheduler_py_is_read_on_the_newest_release(cli: Cli, tmp_path: Path) -> None:
    """A ``scheduler.py`` outside any vLLM tree, without ``--base``, is read on the newest
    release's tree and says so (SPEC X2); SPEC K's livelock is found in it."""
    lone = tmp_path / "scheduler.py"
    shutil.copy(release_root("0.33.0") / SCHEDULER_FILE, lone)
    run = cli("trace", str(lone), *TRACE, "--lookahead", "3", "--json")
    assert (run.code, run.json()["stuck_at"]) == (1, 46)
    ranges = ["--block", "16", "--lookahead", "3", "--prompt", "17", "--max-sched", "16"]
    explored = cli("explore", str(lone), *ranges, "--property", "P1", "--out", str(tmp_path))
    assert "a lone scheduler.py read on the newest release's tree (vllm==" in explored.out
    assert explored.code == 1


SMALL = ["--block", "4", "--lookahead", "2", "--prompt", "3-5", "--max-sched", "4"]


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        (["policies"], "policies"),
        (["trace", "vllm-0.33", *TRACE, "--lookahead", "1"], "trace"),
        (["explore", "vllm-0.33", *SMALL], "verdicts"),
        (["system", "vllm-0.33", *SMALL], "system"),
    ],
)
def test_every_json_document_names_its_schema_and_speaks_one_vocabulary(
    argv: list[str], kind: str, cli: Cli, tmp_path: Path
) -> None:
    """The first key says what the document is and its layout's version; every verdict has
    SPEC CLI's keys, whichever model it comes from, and its range names the KV pool and the
    connector mode it was judged under."""
    out = ["--out", str(tmp_path)] if kind in ("verdicts", "system") else []
    document = cli(*argv, "--json", *out).json()
    assert next(iter(document)) == "schema" and document["schema"] == f"chunkproof.{kind}/1"
    for verdict in document.get("verdicts", []):
        assert {"property", "name", "status", "range", "counterexample"} <= set(verdict)
        assert verdict["range"]["connector"] == "synchronous"
        assert verdict["range"]["pool"] == ("min" if verdict["property"] == "P8" else "none")


@pytest.mark.parametrize(
    ("properties", "named"), [("P1", set()), ("P6", {"P6"}), ("P6,P8", {"P6", "P8"})]
)
def test_a_report_names_the_environment_of_each_property_it_judges(
    cli: Cli, tmp_path: Path, properties: str, named: set[str]
) -> None:
    """P6 (the first request ends with its prefill) and P8 (the request alone in its pool)
    fix their environments; a report that judges one (``check``, ``compare``) names that under
    ``fixed:``, in text and in ``--json``, and one that judges neither does not."""
    ranges = ["--block", "4", "--lookahead", "1", "--prompt", "1-8", "--max-sched", "1-4"]
    argv = ["check", "vllm-0.33", *ranges, "--property", properties, "--out", str(tmp_path)]
    fixed_line = next(line for line in cli(*argv).out.splitlines() if line.startswith("fixed:"))
    document = cli(*argv, "--json").json()
    compared = ["compare", "vllm-0.33", "lookahead-in-split", *argv[2:]]
    both = next(line for line in cli(*compared).out.splitlines() if line.startswith("fixed"))
    for pid in ("P6", "P8"):
        assert (f"{pid}'s " in fixed_line) == (pid in named), fixed_line
        assert (f"{pid}'s " in both) == (pid in named), both
        assert any(f.startswith(f"{pid}'s ") for f in document["fixed"]) == (pid in named)
