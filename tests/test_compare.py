"""``chunkproof compare`` (SPEC CLI): verdict changes, where each policy fails,
behaviour differences, cost (SPEC P7), the report, and the exit status."""

from __future__ import annotations

import dataclasses
import shlex
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_helpers import Cli

from chunkproof.checker.cli.main import build_parser
from chunkproof.checker.engines import compare as compare_module
from chunkproof.checker.engines.compare import (
    CHANGED,
    CRASH_GROUPS,
    FIXED,
    GROUPS,
    IDENTICAL,
    INTRODUCED,
    KINDS,
    UNCHANGED,
    UNDECIDED,
    Behaviour,
    BehaviourTally,
    Comparison,
    ConfigAt,
    NativeRun,
    Side,
    WhereTally,
    classify,
    compare_behaviour,
    config_key,
    exit_status,
    kind_codes,
    native_failures,
    verdict_change,
)
from chunkproof.checker.engines.explorer import NO_WITNESS, explore_batch
from chunkproof.checker.engines.search import categories, category, explore
from chunkproof.checker.engines.traces import ModelMismatch
from chunkproof.checker.engines.verdicts import EMPTY, PROVED, UNKNOWN, VIOLATED, Verdict
from chunkproof.checker.reports.compare_report import (
    RESULT_OPTIONS,
    compare_command,
    document,
    progression_words,
    render_markdown,
    render_text,
)
from chunkproof.checker.reports.report import combine
from chunkproof.checker.reports.trace_command import trace_arguments
from chunkproof.checker.runs.requests import ProofRun, explore_space, prove_space
from chunkproof.model.builtin import get_builtin
from chunkproof.model.config import Config
from chunkproof.model.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNKNOWN, EXIT_VIOLATED
from chunkproof.model.policy import FIXED_INPUTS, Policy
from chunkproof.model.step import step
from chunkproof.model.trajectory import run
from chunkproof.source.loading import resolve_policy
from chunkproof.spec.properties import PROPERTIES
from chunkproof.spec.request import STEP_PROPERTIES, RequestModel, budget_bounds
from chunkproof.spec.space import Space, grid_from

NARROW = ["--block", "16", "--lookahead", "3", "--prompt", "1-20", "--max-sched", "3-16"]
NARROW += ["--drop", "off", "--no-prove"]

SMALL = ["--block", "4,8", "--lookahead", "0-3", "--prompt", "1-16", "--max-sched", "3-8"]
SMALL += ["--no-prove"]


def _space(**texts: str) -> Space:
    return Space((grid_from(texts),))


def _compare(cli: Cli, tmp_path: Path, *argv: str) -> tuple[int, dict[str, Any]]:
    result = cli("compare", *argv, "--json", "--jobs", "1", "--out", str(tmp_path / "out"))
    assert result.err == "", result.err
    return result.code, result.json()


def _changes(document: dict[str, Any]) -> dict[str, str]:
    return {row["property"]: row["change"] for row in document["verdicts"]}


def _rows(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["property"]: row for row in document["verdicts"]}


def _where(row: dict[str, Any], crashes: bool = False) -> dict[str, int]:
    """The groups' counts of a row; without ``crashes`` the groups where a side breaks P0
    must be empty and are left out."""
    counts = {group: row["where"][group]["configs"] for group in GROUPS}
    if crashes:
        return counts
    assert all(counts.pop(group) == 0 for group in CRASH_GROUPS), counts
    return counts


# -- verdicts ------------------------------------------------------------------------------------


def test_lookahead_in_split_fixes_the_livelock_of_033(cli: Cli, tmp_path: Path) -> None:
    code, doc = _compare(
        cli, tmp_path, "vllm-0.33", "lookahead-in-split", *NARROW, "--property", "P1,P3,P5"
    )
    changes = _changes(doc)
    assert changes == {"P1": FIXED, "P3": UNCHANGED, "P5": INTRODUCED}
    assert doc["a"]["fixed"] == doc["b"]["fixed"] == list(FIXED_INPUTS.values())
    rows = _rows(doc)
    p1 = rows["P1"]
    assert (p1["a"]["status"], p1["b"]["status"]) == (VIOLATED, PROVED)
    assert p1["a"]["counterexample"].endswith("vllm-0.33/P1.json")
    assert p1["a"]["counterexample_shows"].startswith("T=17 B=16 L=3 M=3: stuck at c=14")
    assert doc["prover"] is False and doc["ranges"]["prover"] is None
    assert doc["ranges"]["explorer"]["block"] == "16"
    # where each fails: every failing configuration of A is fixed; the window ends are new in B
    assert _where(p1) == {"only_a": p1["a"]["violating_configs"], "only_b": 0, "both": 0}
    only_b = rows["P5"]["b"]["violating_configs"]
    assert _where(rows["P5"]) == {"only_a": 0, "only_b": only_b, "both": 0}
    assert rows["P5"]["regression"] and not p1["regression"]
    smallest = p1["where"]["only_a"]["smallest"]
    assert smallest["describe"] == "T=17 B=16 L=3 M=3"
    assert smallest["a"]["fails"] and not smallest["b"]["fails"]
    assert smallest["a"]["trace"][-1]["c"] == 14 and smallest["a"]["trace"][-1]["chunk"] == 0
    assert code == EXIT_VIOLATED


@pytest.mark.parametrize(
    ("a", "b", "code", "change"),
    [
        ("vllm-0.33", "lookahead-in-split", EXIT_OK, FIXED),
        ("lookahead-in-split", "vllm-0.33", EXIT_VIOLATED, INTRODUCED),
        ("vllm-0.33", "vllm-0.33", EXIT_OK, UNCHANGED),
    ],
)
def test_exit_status_follows_the_change(
    cli: Cli, tmp_path: Path, a: str, b: str, code: int, change: str
) -> None:
    status, doc = _compare(cli, tmp_path, a, b, *NARROW, "--property", "P1")
    assert _changes(doc) == {"P1": change}
    assert status == code


@pytest.mark.parametrize(
    ("a", "b", "moved", "change"),
    [
        (VIOLATED, PROVED, False, FIXED),
        (PROVED, VIOLATED, False, INTRODUCED),
        (EMPTY, VIOLATED, False, INTRODUCED),
        (PROVED, PROVED, False, UNCHANGED),
        (VIOLATED, VIOLATED, False, UNCHANGED),
        (VIOLATED, VIOLATED, True, CHANGED),
        (EMPTY, EMPTY, False, UNCHANGED),
        (VIOLATED, EMPTY, False, CHANGED),  # an EMPTY is never a pass: no fix
        (PROVED, EMPTY, False, CHANGED),
        (EMPTY, PROVED, False, CHANGED),
        (UNKNOWN, UNKNOWN, False, UNDECIDED),
        (UNKNOWN, PROVED, False, UNDECIDED),
        (UNKNOWN, VIOLATED, True, UNDECIDED),
        (PROVED, UNKNOWN, False, UNDECIDED),
        (VIOLATED, UNKNOWN, False, UNDECIDED),
        (EMPTY, UNKNOWN, False, UNDECIDED),
    ],
)
def test_no_change_is_claimed_when_a_side_is_unknown(
    a: str, b: str, moved: bool, change: str
) -> None:
    assert verdict_change(a, b, moved) == change


def _verdict(pid: str, status: str, rng: dict[str, Any] | None = None) -> Verdict:
    return Verdict(pid, status, rng or {}, None, "", "test", 1, int(status == VIOLATED))


def _comparison(
    rows: list[tuple[str, str]],
    where: dict[str, dict[str, int]] | None = None,
    space: Space | None = None,
    ranges: dict[str, Any] | None = None,
    own_configs: list[int] | None = None,
    own: list[int] | None = None,
) -> Comparison:
    """A comparison of made-up verdicts (P1, P2, ...) and where-counts (``own``: each side's
    failing configurations of every property; ``own_configs``: each side's configurations)."""
    policy = get_builtin("vllm-0.33")
    verdicts = [
        tuple(_verdict(f"P{i}", pair[side], ranges) for i, pair in enumerate(rows, 1))
        for side in (0, 1)
    ]
    sides = [Side(policy, verdicts[side], {}, verdicts[side]) for side in (0, 1)]
    tally = BehaviourTally()
    tally.own_configs = own_configs or [0, 0]
    for pid, counts in (where or {}).items():
        tally.where[pid].counts.update(counts)
        tally.where[pid].own = own or [0, 0]
    behaviour = Behaviour(tally, {kind: [] for kind in KINDS}, 0.0)
    space = space or _space(block="16", lookahead="3", prompt="17", max_sched="16")
    return Comparison(sides[0], sides[1], space, None, behaviour, "chunkproof compare")


@pytest.mark.parametrize(
    ("rows", "where", "code"),
    [
        ([(VIOLATED, PROVED), (PROVED, PROVED)], {}, EXIT_OK),
        ([(VIOLATED, PROVED), (PROVED, UNKNOWN)], {}, EXIT_UNKNOWN),
        ([(PROVED, VIOLATED), (PROVED, UNKNOWN)], {}, EXIT_VIOLATED),
        ([(VIOLATED, VIOLATED)], {}, EXIT_OK),
        ([(VIOLATED, VIOLATED)], {"P1": {"only_a": 3, "both": 5}}, EXIT_OK),
        # B fails configurations A passes: a regression, whatever the verdict labels say
        ([(VIOLATED, VIOLATED)], {"P1": {"only_b": 1, "both": 5}}, EXIT_VIOLATED),
        ([(UNKNOWN, VIOLATED)], {"P1": {"only_b": 1}}, EXIT_VIOLATED),
        ([(EMPTY, EMPTY), (EMPTY, EMPTY)], {}, EXIT_BAD_INPUT),
        ([(EMPTY, PROVED)], {}, EXIT_OK),
    ],
)
def test_exit_status_regression_then_undecided(
    rows: list[tuple[str, str]], where: dict[str, dict[str, int]], code: int
) -> None:
    comparison = _comparison(rows, where)
    assert exit_status(comparison) == code
    moved = {row.pid: row.change for row in comparison.rows if row.pid in where}
    assert all(
        change == CHANGED for pid, change in moved.items() if rows[int(pid[1:]) - 1][0] == VIOLATED
    )


def test_a_comparison_whose_parts_disagree_is_refused() -> None:
    """Each side's failing configurations in compare's own pass must be its explorer's: a
    verdict over the same grid that counts otherwise is a bug of the tool, not a report."""
    space = _space(block="16", lookahead="3", prompt="17", max_sched="16")
    ranges = {**space.describe(), "configurations": 0, "excluded": {}}
    with pytest.raises(ModelMismatch, match="P1 of A: the explorer covers 1 configurations"):
        _comparison([(VIOLATED, PROVED)], space=space, ranges=ranges)
    with pytest.raises(ModelMismatch, match="P1 of A: the explorer finds 1 failing"):
        _comparison([(VIOLATED, PROVED)], space=space, ranges=ranges, own_configs=[1, 1])
    _comparison(
        [(VIOLATED, PROVED)], {"P1": {}}, space=space, ranges=ranges, own_configs=[1, 1], own=[1, 0]
    )
    _comparison([(VIOLATED, PROVED)], space=space)  # another grid's verdicts are not compared


# -- where each fails (SPEC CLI ``compare``) -----------------------------------------------

SPLIT_A = """
def split(cfg, c, n):
    if cfg.block == 4:
        return 0
    return n
"""
SPLIT_B = """
def split(cfg, c, n):
    if cfg.lookahead == 1:
        return 0
    return n
"""
USER_RANGE = ["--block", "4,8", "--lookahead", "0-1", "--prompt", "1-8", "--max-sched", "1-4"]
USER_RANGE += ["--drop", "off", "--no-prove"]


def _user_policy(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return f"{path}:split"


def _native_p1(policy: Policy, cfg: Config) -> bool:
    """SPEC P1 by hand: some state reachable under budgets 1..min(M, T - c0) gets 0 with the
    largest budget (an independent depth-first search)."""
    low, high = budget_bounds(cfg, None)
    seen, stack = {cfg.start}, [cfg.start]
    while stack:
        c = stack.pop()
        if step(policy, cfg, c, high).chunk == 0:
            return True
        for budget in range(low, high + 1):
            s = step(policy, cfg, c, budget)
            if s.chunk > 0 and s.end < cfg.prefill_end and s.end not in seen:
                seen.add(s.end)
                stack.append(s.end)
    return False


def test_both_violate_p1_in_other_configurations(cli: Cli, tmp_path: Path) -> None:
    """A stops every B=4 request, B every L=1 request: both VIOLATED, the row reads "changed",
    and the groups are B=4 L=0 (only A), B=8 L=1 (only B), B=4 L=1 (both), each counted and
    shown by its smallest configuration, in JSON, text and markdown."""
    a = _user_policy(tmp_path, "split_a", SPLIT_A)
    b = _user_policy(tmp_path, "split_b", SPLIT_B)
    report = tmp_path / "report.md"
    code, doc = _compare(
        cli, tmp_path, a, b, *USER_RANGE, "--property", "P1", "--markdown", str(report)
    )
    (row,) = doc["verdicts"]
    assert (row["a"]["status"], row["b"]["status"], row["change"]) == (VIOLATED, VIOLATED, CHANGED)
    assert code == EXIT_VIOLATED and row["regression"]
    # the counts, against a native search of every configuration
    pa, pb = resolve_policy(a), resolve_policy(b)
    expected = {group: 0 for group in GROUPS if group not in CRASH_GROUPS}
    space = _space(block="4,8", lookahead="0-1", prompt="1-8", max_sched="1-4", drop="off")
    for cfg in space.configs():
        fails = (_native_p1(pa, cfg), _native_p1(pb, cfg))
        group = {(True, False): "only_a", (False, True): "only_b", (True, True): "both"}.get(fails)
        if group is not None:
            expected[group] += 1
    assert expected == {"only_a": 32, "only_b": 32, "both": 32}
    assert _where(row) == expected
    assert row["where"]["configs"] == 128
    assert row["where"]["failing"] == {"a": 64, "b": 64}
    smallest = {group: row["where"][group]["smallest"] for group in expected}
    assert {g: e["describe"] for g, e in smallest.items()} == {
        "only_a": "T=1 B=4 L=0 M=1",
        "only_b": "T=1 B=8 L=1 M=1",
        "both": "T=1 B=4 L=1 M=1",
    }
    assert [(e["a"]["fails"], e["b"]["fails"]) for e in smallest.values()] == [
        (True, False),
        (False, True),
        (True, True),
    ]
    # the witness of each failing side is a command that shows it (the file is read, not run)
    only_b = smallest["only_b"]
    assert only_b["a"]["command"] is None
    trace = cli(*shlex.split(only_b["b"]["command"])[1:], "--json")
    assert trace.code == EXIT_VIOLATED, trace.err  # SPEC CLI: a stuck trace exits 1
    assert (trace.json()["outcome"], trace.json()["stuck_at"]) == ("stuck", 0)
    assert only_b["b"]["command"] in doc["reproduce"]
    assert "B fails configurations of the grid that A passes for P1" in doc["summary"]
    text = report.read_text()
    assert "### Where each fails on the grid" in text
    assert "| P1 LIVE | 32 | 32 | 32 | **changed** |" in text
    assert "- P1, only B fails, smallest: T=1 B=8 L=1 M=1: A holds (" in text
    lines = [line for line in text.splitlines() if ", smallest: " in line]
    assert [line.split(",")[1].strip() for line in lines] == [GROUPS[g] for g in expected]


def _explorer_failures(policy: Policy, space: Space) -> dict[Config, tuple[int, set[str]]]:
    """Per configuration: its category and the properties it fails, from the explorer's own
    per-instance witnesses (P2 with P1, P7 from its const runs), batch by batch."""
    model = RequestModel(policy, space)
    out = {}
    for batch in model.batches():
        explored = explore_batch(model, batch)
        figures = model.figures(batch, explored.states, explored.steps)
        cats = categories(policy, batch)
        for i, cfg in enumerate(batch.configs):
            failed = {p for p in STEP_PROPERTIES if explored.witness[p][i] != NO_WITNESS}
            failed |= {"P2"} if "P1" in failed else set()
            failed |= {"P7"} if figures.stuck_runs[i] > 0 else set()
            out[cfg] = (int(cats[i]), failed)
    return out


def test_where_each_fails_is_the_explorers_configuration_by_configuration() -> None:
    """vllm-0.15 against vllm-0.33: P1 fails under only A, only B and both. Every property's
    three groups, and their smallest configurations, are those of the explorer's per-instance
    witnesses; each smallest configuration was re-checked natively on both policies."""
    a, b = get_builtin("vllm-0.15"), get_builtin("vllm-0.33")
    space = _space(block="4,8", lookahead="0-3", prompt="1-16", max_sched="1-8")
    behaviour = compare_behaviour(a, b, space)
    fa, fb = _explorer_failures(a, space), _explorer_failures(b, space)
    shared = [cfg for cfg in fa if fa[cfg][0] == 0 and fb[cfg][0] == 0]
    assert behaviour.tally.configs == len(shared)
    moved = []
    for pid in PROPERTIES:
        groups: dict[str, list[Config]] = {group: [] for group in GROUPS}
        for cfg in shared:
            fails = (pid in fa[cfg][1], pid in fb[cfg][1])
            if fails == (True, False):
                groups["only_a"].append(cfg)
            elif fails == (False, True):
                groups["only_b"].append(cfg)
            elif fails == (True, True):
                groups["both"].append(cfg)
        where = behaviour.tally.where[pid]
        assert where.counts == {g: len(cfgs) for g, cfgs in groups.items()}, pid
        smallest = {g: min(cfgs, key=config_key) for g, cfgs in groups.items() if cfgs}
        assert {g: at.cfg for g, at in where.smallest.items()} == smallest, pid
        examples = behaviour.where.get(pid, {})
        assert {g: e.cfg for g, e in examples.items()} == smallest, pid
        for group, example in examples.items():
            assert (pid in example.a.fails, pid in example.b.fails) == (
                group != "only_b",
                group != "only_a",
            )
        own = [sum(pid in f for cat, f in side.values() if cat == 0) for side in (fa, fb)]
        assert where.own == own, pid
        if where.moved and where.counts["both"]:
            moved.append(pid)
    expected = {"only_a": 166, "only_b": 68, "both": 8, **dict.fromkeys(CRASH_GROUPS, 0)}
    assert behaviour.tally.where["P1"].counts == expected
    assert "P1" in moved and "P7" in moved


def test_native_failures_follow_the_known_answer() -> None:
    """SPEC K: vllm-0.33, B=16, L=3, T=49, M=16: stuck at c=46 (P1, P2 and P7); the fix holds
    P1 there. The witness is a shortest trace, replayable with ``trace --budgets``."""
    cfg = Config(block=16, prompt=49, max_sched=16, lookahead=3)
    found = native_failures(get_builtin("vllm-0.33"), cfg, "strict", None)
    assert {"P1", "P2", "P7"} <= found.fails
    p1 = found.witness["P1"]
    assert [s.end for s in p1[:-1]] == [16, 32, 46] and p1[-1].chunk == 0 and p1[-1].c == 46
    # P7: the least budget whose const run never finishes: const(1), below one block
    assert [(s.c, s.budget, s.chunk) for s in found.witness["P7"]] == [(0, 1, 0)]
    fixed = native_failures(get_builtin("lookahead-in-split"), cfg, "strict", None)
    assert "P1" not in fixed.fails and fixed.states > 3


def test_examples_that_native_runs_contradict_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The smallest configuration of each group is explored natively on both policies; a
    native search that fails other properties than the tables is a bug of the tool."""
    monkeypatch.setattr(compare_module, "native_failures", lambda *args: NativeRun({}, 1))
    space = _space(block="16", lookahead="3", prompt="17", max_sched="3", drop="off")
    a, b = get_builtin("vllm-0.33"), get_builtin("lookahead-in-split")
    with pytest.raises(ModelMismatch, match="T=17 B=16 L=3 M=3: under A the tables fail"):
        compare_behaviour(a, b, space)


def test_worker_processes_tally_what_one_process_does() -> None:
    a, b = get_builtin("vllm-0.15"), get_builtin("vllm-0.33")
    space = _space(block="4,8", lookahead="0-3", prompt="1-12", max_sched="1-6")
    assert len(list(RequestModel(a, space).batches())) >= 2
    one, two = compare_behaviour(a, b, space, jobs=1), compare_behaviour(a, b, space, jobs=2)
    assert one.tally == two.tally
    assert one.where == two.where


def test_large_examples_replay_the_explorers_witnesses_natively(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A configuration too large to search natively is searched by the explorer and its
    witnesses replayed natively: the same failures, traces and reachable states."""
    a, b = get_builtin("vllm-0.15"), get_builtin("vllm-0.33")
    space = _space(block="4,8", lookahead="0-3", prompt="1-12", max_sched="1-6", start="0,block")
    searched = compare_behaviour(a, b, space)
    monkeypatch.setattr(compare_module, "NATIVE_LANES", 0)
    replayed = compare_behaviour(a, b, space)
    assert replayed.where == searched.where
    assert {pid for pid, groups in searched.where.items() if len(groups) == 3} >= {"P1", "P7"}


def test_statuses_that_mix_empty_read_changed(cli: Cli, tmp_path: Path) -> None:
    """vllm-0.26 refuses B > M (SPEC S1b): with B=16 and M <= 8 it has no configuration in
    scope (EMPTY); vllm-0.33 holds P1 there. Neither side's EMPTY is a pass or a fix."""
    argv = ["--block", "16", "--lookahead", "0", "--prompt", "1-20", "--max-sched", "4-8"]
    argv += ["--no-prove", "--property", "P1"]
    code, doc = _compare(cli, tmp_path, "vllm-0.26", "vllm-0.33", *argv)
    (row,) = doc["verdicts"]
    assert (row["a"]["status"], row["b"]["status"], row["change"]) == (EMPTY, PROVED, CHANGED)
    assert _where(row, crashes=True) == dict.fromkeys(GROUPS, 0) and row["where"]["configs"] == 0
    assert doc["behaviour"]["excluded"] == {"refused by A": 200}  # P 1-20, M 4-8, D both
    assert code == EXIT_OK
    code, doc = _compare(cli, tmp_path, "vllm-0.33", "vllm-0.33", *argv, "--start", "99")
    assert {row["change"] for row in doc["verdicts"]} == {UNCHANGED}
    assert doc["summary"].startswith("Nothing to compare")
    assert code == EXIT_BAD_INPUT


def test_where_tallies_merge_and_keep_the_smallest() -> None:
    small, large = Config(block=4, prompt=5, max_sched=4), Config(block=4, prompt=9, max_sched=4)
    first, second = WhereTally(), WhereTally()
    first.counts["both"], second.counts["both"] = 2, 3
    nothing: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())
    first.offer("both", ConfigAt(config_key(large), large, nothing))
    second.offer("both", ConfigAt(config_key(small), small, nothing))
    second.own = [1, 4]
    first.merge(second)
    assert first.counts["both"] == 5 and first.smallest["both"].cfg == small
    assert first.own == [1, 4] and not first.moved


# -- behaviour -----------------------------------------------------------------------------------


def test_the_known_livelock_shows_both_chunk_sequences(cli: Cli, tmp_path: Path) -> None:
    """SPEC K: vllm-0.33, B=16, L=3, T=49, const(16): 16, 32, 46 then stuck; the fix 16, 32,
    48, 49."""
    argv = ["--block", "16", "--lookahead", "3", "--prompt", "49", "--max-sched", "16"]
    argv += ["--budget", "16", "--drop", "off", "--no-prove", "--property", "P1"]
    _, doc = _compare(cli, tmp_path, "vllm-0.33", "lookahead-in-split", *argv)
    behaviour = doc["behaviour"]
    assert (behaviour["runs"], behaviour["differing_runs"]) == (1, 1)
    kinds = {k["kind"]: k for k in behaviour["kinds"]}
    assert kinds["a_stuck_b_finishes"]["runs"] == 1
    (example,) = kinds["a_stuck_b_finishes"]["examples"]
    assert (example["config"]["prompt"], example["budget"]) == (49, 16)
    assert example["a"]["ends"] == [16, 32, 46]
    assert (example["a"]["outcome"], example["a"]["stuck_at"]) == ("stuck", 46)
    assert example["b"]["ends"] == [16, 32, 48, 49]
    assert example["b"]["outcome"] == "finished"
    assert doc["ranges"]["explorer"]["budget"] == "16-16 within 1-M"


def test_identical_policies_differ_nowhere(cli: Cli, tmp_path: Path) -> None:
    code, doc = _compare(cli, tmp_path, "vllm-latest", "vllm-0.34", *SMALL, "--property", "P1")
    assert code == EXIT_OK  # both fail P1 alike: B brings nothing new
    (row,) = doc["verdicts"]
    assert row["change"] == UNCHANGED and not row["regression"]
    assert row["where"]["only_a"]["configs"] == row["where"]["only_b"]["configs"] == 0
    assert row["where"]["both"]["configs"] == row["a"]["violating_configs"] > 0
    behaviour = doc["behaviour"]
    assert behaviour["runs"] > 0
    assert behaviour["differing_runs"] == behaviour["differing_steps"] == 0
    assert all(k["runs"] == 0 and not k["examples"] for k in behaviour["kinds"])
    assert doc["cost"]["a"] == doc["cost"]["b"]
    # equal folder names: A's and B's counterexamples go to separate folders
    paths = {row["a"]["counterexample"], row["b"]["counterexample"]}
    assert paths == {str(tmp_path / "out" / f"{side}-vllm-0.34" / "P1.json") for side in "AB"}


GRID = _space(block="2,4", lookahead="0-3", prompt="1-10", max_sched="1,3,4,6", drop="both")
"""A tiny grid with every kind of configuration: degenerate ones (M < L), sub-block ones, and
ones a release refuses."""


def _brute_force(a: Policy, b: Policy, space: Space) -> dict[str, Any]:
    """The comparison's figures from native runs (:func:`run`) and a native search of the
    reachable states, configuration by configuration."""
    figures: dict[str, Any] = {
        "configs": 0,
        "differing_configs": 0,
        "kinds": dict.fromkeys(KINDS, 0),
        "states": [0, 0],
        "steps": [0, 0],
        "cost": [[0, 0, 0, 0, 0, None], [0, 0, 0, 0, 0, None]],
    }
    for cfg in space.configs():
        if category(a, cfg) != "main" or category(b, cfg) != "main":
            continue
        figures["configs"] += 1
        low, high = budget_bounds(cfg, space.budget)
        budgets = range(low, high + 1)
        runs = [[run(p, cfg, [budget]) for budget in budgets] for p in (a, b)]
        kinds = [classify(ra, rb) for ra, rb in zip(*runs, strict=True)]
        figures["differing_configs"] += any(kinds)
        for kind in filter(None, kinds):
            figures["kinds"][kind] += 1
        for side, trajectories in enumerate(runs):
            _brute_cost(figures["cost"][side], cfg, budgets, trajectories)
        reach = [_reachable(p, cfg, budgets) for p in (a, b)]
        figures["states"] = [n + len(r) for n, r in zip(figures["states"], reach, strict=True)]
        either = reach[0] | reach[1]
        differ = sum(
            step(a, cfg, c, x).chunk != step(b, cfg, c, x).chunk for c in either for x in budgets
        )
        figures["steps"][0] += len(either) * len(budgets)
        figures["steps"][1] += differ
    return figures


def _brute_cost(cost: list[Any], cfg: Config, budgets: range, runs: list[Any]) -> None:
    """[runs, finished, starved, steps, ideal, worst excess]."""
    for budget, trajectory in zip(budgets, runs, strict=True):
        cost[0] += 1
        if not trajectory.finished:
            cost[2] += budget < cfg.block
            continue
        ideal = -(-(cfg.prefill_end - cfg.start) // budget)
        cost[1] += 1
        cost[3] += trajectory.scheduled_steps
        cost[4] += ideal
        excess = trajectory.scheduled_steps - ideal
        cost[5] = excess if cost[5] is None else max(cost[5], excess)


def _reachable(policy: Policy, cfg: Config, budgets: range) -> set[int]:
    seen, stack = {cfg.start}, [cfg.start]
    while stack:
        c = stack.pop()
        for budget in budgets:
            s = step(policy, cfg, c, budget)
            if s.unsafe is None and 0 < s.chunk and s.end < cfg.prefill_end and s.end not in seen:
                seen.add(s.end)
                stack.append(s.end)
    return seen


@pytest.mark.parametrize(
    ("a_name", "b_name"),
    [
        ("vllm-0.33", "lookahead-in-split"),
        ("vllm-0.33", "vllm-0.26"),  # 0.26 refuses B > M (SPEC S1b)
        ("vllm-0.15", "vllm-0.33"),  # no reservation in A
    ],
)
def test_differences_and_cost_match_native_runs(a_name: str, b_name: str) -> None:
    a, b = get_builtin(a_name), get_builtin(b_name)
    tally = compare_behaviour(a, b, GRID).tally
    expected = _brute_force(a, b, GRID)
    assert tally.configs == expected["configs"]
    assert tally.differing_configs == expected["differing_configs"]
    assert tally.kinds == expected["kinds"]
    assert tally.differing_runs > 0
    assert tally.states == expected["states"]
    assert [tally.reachable_steps, tally.differing_steps] == expected["steps"]
    for cost, figures in zip(tally.cost, expected["cost"], strict=True):
        worst = None if cost.worst is None else cost.worst[0]
        assert [cost.runs, cost.finished, cost.starved, cost.steps, cost.ideal, worst] == figures


def test_kinds_cover_every_outcome_pair() -> None:
    """Runs of A (axis 0) and B (axis 1): steps taken, stuck, final state; one per kind."""
    differ = np.array([False, True, True, True, True, True, True, True])
    stuck = np.array([[0, 1, 0, 0, 0, 0, 1, 1], [0, 0, 1, 0, 0, 0, 1, 1]], dtype=bool)
    steps = np.array([[3, 2, 3, 3, 4, 3, 2, 2], [3, 4, 1, 4, 3, 3, 3, 3]])
    last = np.array([[9, 3, 9, 9, 9, 9, 3, 3], [9, 9, 2, 9, 9, 9, 4, 3]])
    codes = kind_codes(differ, stuck, steps, last)
    assert codes.tolist() == [IDENTICAL, *range(len(KINDS))]


def test_reachable_states_and_worst_excess_agree_with_the_explorer() -> None:
    space = _space(block="2,4", lookahead="0,1", prompt="1-10", max_sched="1,3,4,6", drop="off")
    policy = get_builtin("vllm-0.33")
    tally = compare_behaviour(policy, get_builtin("vllm-0.32"), space).tally
    exploration = explore(RequestModel(policy, space), ("P7",))
    assert tally.configs == exploration.tally.configs["main"] == len(list(space.configs()))
    assert tally.states[0] == exploration.tally.states
    assert tally.cost[0].worst is not None
    assert tally.cost[0].worst[0] == exploration.tally.cost["worst_excess"]


def test_examples_are_the_smallest_runs_of_their_kind() -> None:
    a, b = get_builtin("vllm-0.33"), get_builtin("lookahead-in-split")
    behaviour = compare_behaviour(a, b, GRID)
    (first, *_) = behaviour.examples["a_stuck_b_finishes"]
    smallest = min(
        (*config_key(cfg)[:4], budget, *config_key(cfg)[4:])
        for cfg in GRID.configs()
        if category(a, cfg) == category(b, cfg) == "main"
        for budget in range(1, budget_bounds(cfg, None)[1] + 1)
        if classify(run(a, cfg, [budget]), run(b, cfg, [budget])) == "a_stuck_b_finishes"
    )
    assert first.run.key == smallest
    cells = [e.run.cell for e in behaviour.examples["a_stuck_b_finishes"]]
    assert len(set(cells)) == len(cells)


# -- the report ----------------------------------------------------------------------------------


def test_text_and_markdown_reports_have_the_tables_and_the_commands(
    cli: Cli, tmp_path: Path
) -> None:
    report = tmp_path / "report.md"
    result = cli(
        "compare", "vllm-0.33", "lookahead-in-split", *NARROW, "--property", "P1,P3,P5",
        "--markdown", str(report), "--out", str(tmp_path / "out"), "--jobs", "1",
    )  # fmt: skip
    assert result.code == EXIT_VIOLATED
    assert f"markdown report written to {report}" in result.out
    assert "P1 LIVE" in result.out and "fixed" in result.out
    both = f"fixed (A and B): {'; '.join(FIXED_INPUTS.values())}"
    assert both in result.out.splitlines()
    assert "only A fails 28, only B fails 0, both fail 0" in result.out
    assert "only A fails, smallest: T=17 B=16 L=3 M=3: A stuck at c=14" in result.out
    assert "\n  block=16, split_block=B, hash_block=G, lookahead=3, drop=off," in result.out
    text = report.read_text()
    assert text.startswith("## chunkproof: `vllm-0.33` → `lookahead-in-split`")
    assert f"- {both}" in text.splitlines()
    assert "| property | A `vllm-0.33` | B `lookahead-in-split` | change |" in text
    assert "| P1 LIVE | VIOLATED (" in text and "| PROVED | **fixed** |" in text
    assert "| P3 NOCROSS | PROVED | PROVED | unchanged |" in text
    assert "| property | only A fails | only B fails | both fail | change |" in text
    assert "| P1 LIVE | 28 | 0 | 0 | **fixed** |" in text
    assert "| A stuck, B finishes |" in text
    assert "| do not finish |" in text and "| worst extra steps |" in text
    assert "prover: not run (--no-prove)" in text
    command = "chunkproof compare vllm-0.33 lookahead-in-split --block 16 --lookahead 3 "
    assert command + "--drop off --prompt 1-20 --max-sched 3-16 --property P1,P3,P5" in text
    assert f"chunkproof replay {tmp_path / 'out' / 'vllm-0.33' / 'P1.json'}" in text
    assert "chunkproof trace vllm-0.33 --block 16 --lookahead 3 --prompt 17 --max-sched" in text


def test_trace_commands_name_every_input_and_reproduce_the_examples(
    cli: Cli, tmp_path: Path
) -> None:
    """Resumed requests (T = P + 1) admitted at a prefix hit (c0 = 4): the trace command of
    every example of a kind names T and c0, and re-runs to the example's chunk ends."""
    argv = ["--block", "4", "--lookahead", "2", "--prompt", "5-12", "--tokens", "P+1"]
    argv += ["--start", "4", "--max-sched", "2-6", "--drop", "off", "--no-prove"]
    _, doc = _compare(cli, tmp_path, "vllm-0.33", "lookahead-in-split", *argv, "--property", "P1")
    examples = [e for k in doc["behaviour"]["kinds"] for e in k["examples"]]
    assert examples and all(e["config"]["start"] == 4 for e in examples)
    assert all(e["config"]["tokens"] == e["config"]["prompt"] + 1 for e in examples)
    traces = [shlex.split(c)[1:] for c in doc["reproduce"] if c.startswith("chunkproof trace")]
    checked = 0
    for example in examples:
        cfg = Config.from_dict(example["config"])
        for label, policy in (("a", "vllm-0.33"), ("b", "lookahead-in-split")):
            words = ["trace", policy, *trace_arguments(cfg), "--budget", str(example["budget"])]
            if words not in traces:
                continue
            result = cli(*words, "--json")
            assert result.json()["ends"] == example[label]["ends"]
            assert result.json()["config"] == example["config"]
            checked += 1
    assert checked >= 2


def test_the_compare_command_reproduces_every_result_option() -> None:
    parser = build_parser()
    argv = ["compare", "vllm-0.33", "a b:split", "--split-block", "B/2", "--start", "0,block"]
    argv += ["--retention", "none,0", "--budget", "2-4", "--window", "relaxed", "--no-prove"]
    argv += ["--set", "self.x=1", "--set", "self.y=2", "--out", "elsewhere", "--timeout", "5"]
    args = parser.parse_args(argv)
    command = compare_command(args, parser.parse_args(["compare", "vllm-0.33", "a b:split"]))
    words = shlex.split(command)
    assert words[:4] == ["chunkproof", "compare", "vllm-0.33", "a b:split"]
    again = parser.parse_args(words[1:])
    for name in RESULT_OPTIONS:
        assert getattr(again, name) == getattr(args, name), name
    assert "--split-block" in words and "--jobs" not in words


@pytest.mark.parametrize(
    "argv",
    [
        ["vllm-0.99", "lookahead-in-split", "--no-prove"],
        ["vllm-0.33", "no_such_module:split", "--no-prove"],
        ["vllm-0.33", "lookahead-in-split", "--prompt", "9-3", "--no-prove"],
        ["vllm-0.33", "lookahead-in-split", "--budget", "0-3", "--no-prove"],
        ["vllm-0.33", "lookahead-in-split", "--drop", "maybe", "--no-prove"],
        ["vllm-0.33", "lookahead-in-split", "--property", "P9", "--no-prove"],
        ["vllm-0.33", "lookahead-in-split", "--markdown", "/nonexistent/dir/r.md"],
        ["vllm-0.33"],
        ["vllm-0.33", "lookahead-in-split", "--set", "self.x=1", "--no-prove"],
        ["vllm-0.33", "lookahead-in-split", "--compose", "C9", "--no-prove"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli: Cli, argv: list[str]) -> None:
    result = cli("compare", *argv)
    assert result.code == EXIT_BAD_INPUT, (result.out, result.err)
    assert len(result.err.strip().splitlines()) == 1
    assert result.err.startswith("chunkproof: error: ")


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ([], ""),
        ([16, 32, 46], "16, 32, 46"),
        ([1, 2, 3, 4, 5, 7], "1, 2, ..., 5, 7"),
        ([2, 4, 6, 8, 10, 12, 14, 16, 17], "2, 4, ..., 16, 17"),
        ([1, 2, 3, 4], "1, 2, 3, 4"),
    ],
)
def test_progressions_are_written_short_and_exact(values: list[int], words: str) -> None:
    assert progression_words(values) == words


# -- verdict scopes: the grid explored, the production range proved ------------------------------

SCOPE_GRID = _space(block="4", lookahead="1", drop="off", prompt="1-20", max_sched="1-8")
SCOPE_PRODUCTION = _space(block="4", lookahead="1", drop="off", prompt="1-64", max_sched="1-64")
SCOPE_SPLITS = {
    "grid": "def split(cfg, c, n):\n    if c >= 8:\n        return 0\n    return n\n",
    "production": "def split(cfg, c, n):\n    if c >= 40:\n        return 0\n    return n\n",
    "unknown": "def split(cfg, c, n):\n    return n\n",
    "holds": "def split(cfg, c, n):\n    return n\n",
}
"""P1 fails on the grid, only on the production range (T up to 64), or nowhere (``unknown``
has its prover verdicts turned UNKNOWN); ``refused`` is vllm-0.29, which refuses L = 1 with
the drop off (SPEC S1b), so its verdicts are EMPTY."""
SCOPE_STATUS = {
    "grid": VIOLATED,
    "production": VIOLATED,
    "unknown": UNKNOWN,
    "holds": PROVED,
    "refused": EMPTY,
}


def _checked_side(kind: str, folder: Path) -> Side:
    """One policy checked as ``check`` does (the explorer on the grid, the prover on the
    production range for what the grid did not violate, one combined verdict per property)."""
    if kind == "refused":
        policy = get_builtin("vllm-0.29")
    else:
        policy = resolve_policy(_user_policy(folder, f"scope_{kind}", SCOPE_SPLITS[kind]))
    explored, explored_info = explore_space(policy, SCOPE_GRID, ("P0", "P1"), "strict", 1, None)
    grid = list(explored)
    undecided = tuple(v.property for v in explored if v.status != VIOLATED)
    run = ProofRun("strict", 60_000, 1, False)
    proved, proved_info = prove_space(policy, SCOPE_PRODUCTION, undecided, run, None)
    if kind == "unknown":
        proved = [dataclasses.replace(v, status=UNKNOWN, summary="gave up") for v in proved]
    verdicts = combine(explored, proved)
    engines = {"explored": explored_info, "proved": proved_info}
    return Side(policy, tuple(verdicts), engines, tuple(grid))


@pytest.fixture(scope="module")
def scope_sides(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Side]:
    folder = tmp_path_factory.mktemp("scope")
    return {kind: _checked_side(kind, folder) for kind in SCOPE_STATUS}


def _scope_comparison(a: Side, b: Side) -> Comparison:
    behaviour = compare_behaviour(a.policy, b.policy, SCOPE_GRID)
    return Comparison(a, b, SCOPE_GRID, SCOPE_PRODUCTION.describe(), behaviour, "chunkproof")


@pytest.mark.parametrize("a_kind", list(SCOPE_STATUS))
@pytest.mark.parametrize("b_kind", list(SCOPE_STATUS))
def test_every_mix_of_scopes_gives_a_report(
    scope_sides: dict[str, Side], a_kind: str, b_kind: str
) -> None:
    """Violated on the grid, only on the production range, UNKNOWN, holding, or refused, on
    either side: the parts agree (the grid's tallies against the explorer's verdicts, never
    against a verdict the prover's cells decided), and every report renders with the verdict's
    scope named."""
    a, b = scope_sides[a_kind], scope_sides[b_kind]
    comparison = _scope_comparison(a, b)
    row = next(r for r in comparison.rows if r.pid == "P1")
    assert (row.a.status, row.b.status) == (SCOPE_STATUS[a_kind], SCOPE_STATUS[b_kind])
    assert (row.verdict_scope(0) == "production") == (a_kind == "production")
    assert (row.verdict_scope(1) == "production") == (b_kind == "production")
    assert row.where is not None
    assert row.change == verdict_change(row.a.status, row.b.status, row.where.moved)
    text = render_text(comparison)
    assert render_markdown(comparison) and document(comparison)["verdicts"]
    line = next(line for line in text.splitlines() if line.startswith("  P1 LIVE"))
    assert line.count("production range, ") == [a_kind, b_kind].count("production")
    expected = {
        ("grid", "production"): (CHANGED, EXIT_OK),  # the guide's compare: P1 "changed"
        ("production", "holds"): (FIXED, EXIT_OK),
        ("holds", "production"): (INTRODUCED, EXIT_VIOLATED),
        ("holds", "grid"): (INTRODUCED, EXIT_VIOLATED),
        ("unknown", "grid"): (UNDECIDED, EXIT_VIOLATED),  # B fails where A is not known to
        ("production", "unknown"): (UNDECIDED, EXIT_UNKNOWN),
        ("refused", "production"): (INTRODUCED, EXIT_VIOLATED),
        ("refused", "refused"): (UNCHANGED, EXIT_BAD_INPUT),
    }.get((a_kind, b_kind))
    if expected is not None:
        assert (row.change, exit_status(comparison)) == expected


def test_a_disagreement_on_the_grid_is_still_caught(scope_sides: dict[str, Side]) -> None:
    """A side whose explorer counts one failing configuration more than the comparison's own
    pass: a bug of the tool, whether its combined verdict is the grid's or the prover's."""
    for kind in ("grid", "production"):
        side = scope_sides[kind]
        explored = tuple(
            dataclasses.replace(v, violating=v.violating + 1) if v.property == "P1" else v
            for v in side.explored
        )
        broken = dataclasses.replace(side, explored=explored)
        with pytest.raises(ModelMismatch, match="P1 of B: the explorer finds"):
            _scope_comparison(scope_sides["holds"], broken)


CRASHES = (
    "def split(cfg, c, n):\n    if c >= 8:\n        raise ValueError('past 8')\n    return n\n"
)


def test_a_crash_is_that_sides_p0_never_a_pass_of_another_property(
    cli: Cli, tmp_path: Path
) -> None:
    """A raises from c = 8 on, B stops there: P0 is fixed, and B's livelocks, all where A
    crashes, are no new violation (A did not pass P1 there); the report names the side that
    raised, in the groups, the headline and the examples."""
    a = _user_policy(tmp_path, "crashes", CRASHES)
    b = _user_policy(tmp_path, "stops", SCOPE_SPLITS["grid"])
    grid = ["--block", "4", "--lookahead", "1", "--drop", "off", "--prompt", "1-20"]
    grid += ["--max-sched", "1-8", "--no-prove", "--property", "P0,P1"]
    code, doc = _compare(cli, tmp_path, a, b, *grid)
    rows = _rows(doc)
    assert _changes(doc) == {"P0": FIXED, "P1": CHANGED}
    p1 = _where(rows["P1"], crashes=True)
    assert p1["b_where_a_crashes"] == rows["P1"]["b"]["violating_configs"] > 0
    assert p1["only_b"] == p1["only_a"] == p1["both"] == 0
    assert not rows["P1"]["regression"] and code == EXIT_OK
    assert "where A breaks P0 (its crash, not a pass), B fails P1" in doc["summary"]
    smallest = rows["P1"]["where"]["b_where_a_crashes"]["smallest"]
    assert "P0" in smallest["a"]["fails_properties"] and smallest["b"]["fails"]
    text = cli("compare", a, b, *grid, "--out", str(tmp_path / "text"), "--jobs", "1").out
    assert "A breaks P0 there (its crash, not a pass of P1)" in text


@pytest.mark.fidelity
def test_base_applies_to_the_side_that_is_a_policy_file(cli: Cli, tmp_path: Path) -> None:
    """``compare vllm==0.33.0 patch.py --base vllm==0.33.0``: the release is its own tree, the
    patch module sits on the base; ``--base`` with no policy file on either side is one line."""
    patch = str(Path(__file__).parent / "fixtures" / "forks" / "window_patch.py")
    ranges = ["--block", "4", "--lookahead", "0-2", "--prompt", "1-12", "--max-sched", "1-6"]
    argv = ["compare", "vllm==0.33.0", patch, "--base", "vllm==0.33.0", "--no-prove", *ranges]
    run = cli(*argv, "--out", str(tmp_path), "--json")
    rows = {row["property"]: row["change"] for row in run.json()["verdicts"]}
    assert (rows["P1"], rows["P5"]) == (FIXED, INTRODUCED)
    both = cli("compare", "vllm==0.33.0", "vllm==0.32.0", "--base", "vllm==0.33.0")
    assert both.code == 2 and "neither 'vllm==0.33.0' nor 'vllm==0.32.0' is one" in both.err


@pytest.mark.fidelity
def test_a_markdown_report_has_no_local_paths(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report of a policy file names it relative to the report, the release cache under
    ``~``, and its compare command keeps ``--base`` (so it runs where the report is read)."""
    patch = tmp_path / "window_patch.py"
    patch.write_text((Path(__file__).parent / "fixtures" / "forks" / "window_patch.py").read_text())
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reports").mkdir()
    ranges = ["--block", "4", "--lookahead", "0-2", "--prompt", "1-12", "--max-sched", "1-6"]
    argv = ["compare", "vllm==0.33.0", "window_patch.py", "--base", "vllm==0.33.0", *ranges]
    run = cli(*argv, "--no-prove", "--markdown", "reports/pr.md")
    assert run.code == 1, run.err
    text = (tmp_path / "reports" / "pr.md").read_text()
    assert str(tmp_path) not in text and str(Path.home()) not in text
    assert "`../window_patch.py`" in text and "From the folder `..`" in text
    assert "--base vllm==0.33.0" in text.split("### Reproduce", 1)[1]
