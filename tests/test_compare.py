"""``chunkproof compare`` (SPEC CLI): verdict changes, behaviour differences, cost (SPEC P7),
the report, and the exit status."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_helpers import Cli

from chunkproof.checker.compare import (
    FIXED,
    IDENTICAL,
    INTRODUCED,
    KINDS,
    UNCHANGED,
    UNDECIDED,
    Behaviour,
    BehaviourTally,
    Comparison,
    Side,
    classify,
    compare_behaviour,
    exit_status,
    kind_codes,
    verdict_change,
)
from chunkproof.checker.compare_report import progression_words
from chunkproof.checker.ranges import Ranges
from chunkproof.checker.report import PROVED, UNKNOWN, VIOLATED, Verdict
from chunkproof.checker.search import category, explore
from chunkproof.model.builtin import get_builtin
from chunkproof.model.config import Config
from chunkproof.model.policy import Policy
from chunkproof.model.step import chunk
from chunkproof.model.trajectory import run

NARROW = ["--block", "16", "--lookahead", "3", "--prompt", "1-20", "--max-sched", "1-16"]
NARROW += ["--drop", "off", "--no-prove"]


def _compare(cli: Cli, tmp_path: Path, *argv: str) -> tuple[int, dict[str, Any]]:
    result = cli("compare", *argv, "--json", "--jobs", "1", "--out", str(tmp_path / "out"))
    assert result.err == "", result.err
    return result.code, result.json()


def _changes(document: dict[str, Any]) -> dict[str, str]:
    return {row["property"]: row["change"] for row in document["verdicts"]}


# -- verdicts ------------------------------------------------------------------------------------


def test_lookahead_in_split_fixes_the_livelock_of_033(cli: Cli, tmp_path: Path) -> None:
    code, doc = _compare(cli, tmp_path, "vllm-0.33", "lookahead-in-split", *NARROW)
    changes = _changes(doc)
    assert changes["P1"] == FIXED
    assert changes["P3"] == UNCHANGED
    p1 = doc["verdicts"][0]
    assert (p1["a"]["status"], p1["b"]["status"]) == (VIOLATED, PROVED)
    assert p1["a"]["counterexample"].endswith("vllm-0.33/P1.json")
    assert p1["a"]["counterexample_shows"].startswith("T=17 B=16 L=3 M=3: stuck at c=14")
    assert doc["prover"] is False and doc["ranges"]["prover"] is None
    # the fix ends at 16 from c=14 where the budget could finish: relaxed P5 on B only
    assert changes["P5"] == INTRODUCED
    assert code == 1


@pytest.mark.parametrize(
    ("a", "b", "code", "change"),
    [
        ("vllm-0.33", "lookahead-in-split", 0, FIXED),
        ("lookahead-in-split", "vllm-0.33", 1, INTRODUCED),
        ("vllm-0.33", "vllm-0.33", 0, UNCHANGED),
    ],
)
def test_exit_status_follows_the_change(
    cli: Cli, tmp_path: Path, a: str, b: str, code: int, change: str
) -> None:
    status, doc = _compare(cli, tmp_path, a, b, *NARROW, "--property", "P1")
    assert _changes(doc) == {"P1": change}
    assert status == code


def _verdict(pid: str, status: str) -> Verdict:
    return Verdict(pid, status, {}, None, "", "test", 1, int(status == VIOLATED))


@pytest.mark.parametrize(
    ("a", "b", "change"),
    [
        (VIOLATED, PROVED, FIXED),
        (PROVED, VIOLATED, INTRODUCED),
        (PROVED, PROVED, UNCHANGED),
        (VIOLATED, VIOLATED, UNCHANGED),
        (UNKNOWN, UNKNOWN, UNDECIDED),
        (UNKNOWN, PROVED, UNDECIDED),
        (UNKNOWN, VIOLATED, UNDECIDED),
        (PROVED, UNKNOWN, UNDECIDED),
        (VIOLATED, UNKNOWN, UNDECIDED),
    ],
)
def test_no_change_is_claimed_when_a_side_is_unknown(a: str, b: str, change: str) -> None:
    assert verdict_change(a, b) == change


@pytest.mark.parametrize(
    ("rows", "code"),
    [
        ([(VIOLATED, PROVED), (PROVED, PROVED)], 0),
        ([(VIOLATED, PROVED), (PROVED, UNKNOWN)], 3),
        ([(PROVED, VIOLATED), (PROVED, UNKNOWN)], 1),
        ([(VIOLATED, VIOLATED)], 0),
    ],
)
def test_exit_status_regression_then_undecided(rows: list[tuple[str, str]], code: int) -> None:
    policy = get_builtin("vllm-0.33")
    sides = [
        Side(policy, tuple(_verdict(f"P{i}", pair[side]) for i, pair in enumerate(rows, 1)), {})
        for side in (0, 1)
    ]
    behaviour = Behaviour(BehaviourTally(), {kind: [] for kind in KINDS}, 0.0)
    grid = Ranges((16,), (3,), (17,), (16,))
    comparison = Comparison(sides[0], sides[1], grid, None, behaviour, "chunkproof compare")
    assert exit_status(comparison) == code


# -- behaviour -----------------------------------------------------------------------------------


def test_the_known_livelock_shows_both_chunk_sequences(cli: Cli, tmp_path: Path) -> None:
    """SPEC K: vllm-0.33, B=16, L=3, T=49, const(16): 16, 32, 46 then stuck; the fix 16, 32,
    48, 49."""
    argv = ["--block", "16", "--lookahead", "3", "--prompt", "49", "--max-sched", "16"]
    argv += ["--budget", "16", "--drop", "off", "--no-prove"]
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


def test_identical_policies_differ_nowhere(cli: Cli, tmp_path: Path) -> None:
    argv = ["--block", "4,8", "--lookahead", "0-3", "--prompt", "1-16", "--max-sched", "1-8"]
    code, doc = _compare(cli, tmp_path, "vllm-latest", "vllm-0.33", *argv, "--no-prove")
    assert code == 0
    assert set(_changes(doc).values()) == {UNCHANGED}
    behaviour = doc["behaviour"]
    assert behaviour["runs"] > 0
    assert behaviour["differing_runs"] == behaviour["differing_steps"] == 0
    assert all(k["runs"] == 0 and not k["examples"] for k in behaviour["kinds"])
    assert doc["cost"]["a"] == doc["cost"]["b"]
    # equal folder names: A's and B's counterexamples go to separate folders
    p1 = doc["verdicts"][0]
    paths = {p1["a"]["counterexample"], p1["b"]["counterexample"]}
    assert paths == {str(tmp_path / "out" / side / "vllm-0.33" / "P1.json") for side in "AB"}


GRID = Ranges(
    block=(2, 4), lookahead=(0, 1, 2, 3), prompt=tuple(range(1, 13)), max_sched=(1, 3, 4, 6)
)
"""A tiny grid with every kind of configuration: degenerate ones (M < L) and sub-block ones."""


def _brute_force(a: Policy, b: Policy, grid: Ranges) -> dict[str, Any]:
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
    for family, m in itertools.product(grid.families(), grid.max_sched):
        cfg = family.replace(max_sched=m)
        if category(a, cfg) != "main" or category(b, cfg) != "main":
            continue
        figures["configs"] += 1
        budgets = range(1, min(m, cfg.T) + 1)
        runs = [[run(p, cfg, [budget]) for budget in budgets] for p in (a, b)]
        kinds = [classify(ra, rb) for ra, rb in zip(*runs, strict=True)]
        figures["differing_configs"] += any(kinds)
        for kind in filter(None, kinds):
            figures["kinds"][kind] += 1
        for side, trajectories in enumerate(runs):
            _brute_cost(figures["cost"][side], cfg, budgets, trajectories)
        reach = [_reachable(p, cfg) for p in (a, b)]
        figures["states"] = [n + len(r) for n, r in zip(figures["states"], reach, strict=True)]
        either = reach[0] | reach[1]
        differ = sum(chunk(a, cfg, c, x) != chunk(b, cfg, c, x) for c in either for x in budgets)
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


def _reachable(policy: Policy, cfg: Config) -> set[int]:
    seen, stack = {cfg.start}, [cfg.start]
    while stack:
        c = stack.pop()
        for budget in range(1, min(cfg.max_sched, cfg.T) + 1):
            target = c + chunk(policy, cfg, c, budget)
            if target < cfg.prefill_end and target not in seen:
                seen.add(target)
                stack.append(target)
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
    grid = GRID.narrowed(lookahead=(0, 1))  # no degenerate region: every config is in range
    policy = get_builtin("vllm-0.33")
    tally = compare_behaviour(policy, get_builtin("vllm-0.15"), grid).tally
    exploration = explore(policy, grid, ("P7",))
    assert tally.configs == exploration.tally.configs["main"]
    assert tally.states[0] == exploration.tally.states
    assert tally.cost[0].worst is not None
    assert tally.cost[0].worst[0] == exploration.tally.cost["worst_excess"]


def test_examples_are_the_smallest_runs_of_their_kind() -> None:
    a, b = get_builtin("vllm-0.33"), get_builtin("lookahead-in-split")
    behaviour = compare_behaviour(a, b, GRID)
    (first, *_) = behaviour.examples["a_stuck_b_finishes"]
    smallest = min(
        (cfg.T, cfg.block, cfg.lookahead, cfg.max_sched, budget)
        for family, m in itertools.product(GRID.families(), GRID.max_sched)
        for cfg in [family.replace(max_sched=m)]
        if category(a, cfg) == "main"
        for budget in range(1, min(m, cfg.T) + 1)
        if classify(run(a, cfg, [budget]), run(b, cfg, [budget])) == "a_stuck_b_finishes"
    )
    assert first.run.key[:5] == smallest
    cells = [e.run.cell for e in behaviour.examples["a_stuck_b_finishes"]]
    assert len(set(cells)) == len(cells)


# -- the report ----------------------------------------------------------------------------------


def test_markdown_report_has_the_tables_and_the_commands(cli: Cli, tmp_path: Path) -> None:
    report = tmp_path / "report.md"
    result = cli(
        "compare", "vllm-0.33", "lookahead-in-split", *NARROW, "--markdown", str(report),
        "--out", str(tmp_path / "out"), "--jobs", "1",
    )  # fmt: skip
    assert result.code == 1
    assert f"markdown report written to {report}" in result.out
    assert "P1 LIVE" in result.out and "fixed" in result.out
    text = report.read_text()
    assert text.startswith("## chunkproof: `vllm-0.33` → `lookahead-in-split`")
    assert "| property | A `vllm-0.33` | B `lookahead-in-split` | change |" in text
    assert "| P1 LIVE | VIOLATED (" in text and "| PROVED | **fixed** |" in text
    assert "| P3 NOCROSS | PROVED | PROVED | unchanged |" in text
    assert "| A stuck, B finishes |" in text
    assert "| do not finish |" in text and "| worst extra steps |" in text
    assert "prover: not run (--no-prove)" in text
    assert "chunkproof compare vllm-0.33 lookahead-in-split --block 16" in text
    assert f"chunkproof replay {tmp_path / 'out' / 'vllm-0.33' / 'P1.json'}" in text
    assert "chunkproof trace vllm-0.33 --block 16 --lookahead 3 --prompt 17" in text


def test_a_violation_only_the_prover_finds_is_a_regression(cli: Cli, tmp_path: Path) -> None:
    """One run with the prover on the production range: P6 holds on this one-config grid for
    both, but the prover finds lookahead-in-split running over R* (the grid misses it)."""
    argv = ["--block", "16", "--lookahead", "3", "--prompt", "17", "--max-sched", "3"]
    code, doc = _compare(
        cli, tmp_path, "vllm-0.33", "lookahead-in-split", *argv, "--property", "P6"
    )
    assert doc["prover"] is True
    assert doc["ranges"]["prover"]["block"] == "16,64,528,800,1600,2096,4416"
    assert doc["a"]["proved"]["cells"] == doc["b"]["proved"]["cells"] == 126
    (row,) = doc["verdicts"]
    assert row["change"] == INTRODUCED
    assert "explorer: PROVED" in row["b"]["summary"]
    assert "prover: PROVED (proved on all 126 cells" in row["a"]["summary"]
    assert "prover: VIOLATED" in row["b"]["summary"]
    assert code == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["vllm-0.99", "lookahead-in-split", "--no-prove"],
        ["vllm-0.33", "no_such_module:split", "--no-prove"],
        ["vllm-0.33", "lookahead-in-split", "--prompt", "9-3", "--no-prove"],
        ["vllm-0.33", "lookahead-in-split", "--block", "16", "--prompt", "1", "--lookahead", "4"],
        ["vllm-0.33", "lookahead-in-split", "--markdown", "/nonexistent/dir/r.md"],
        ["vllm-0.33"],
        ["vllm-0.33", "lookahead-in-split", "--set", "self.x=1", "--no-prove"],
        ["vllm-0.33", "lookahead-in-split", "--compose", "C9", "--no-prove"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli: Cli, argv: list[str]) -> None:
    result = cli("compare", *argv)
    assert result.code == 2, (result.out, result.err)
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
