"""SPEC K: the known answers, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from boundary_steps import BOUNDARY_STEPS
from cli_helpers import Cli

from chunkproof.model.builtin import get_builtin
from chunkproof.model.config import Config
from chunkproof.model.step import step


def _trace(cli: Cli, policy: str, *flags: str) -> Any:
    run = cli(
        "trace", policy, "--block", "16", "--lookahead", "3", "--prompt", "49", "--json", *flags
    )
    doc = run.json()
    assert run.code == (0 if doc["outcome"] == "finished" else 1), run.err  # SPEC CLI
    return doc


def test_vllm_033_livelocks_at_46_with_budget_16(cli: Cli) -> None:
    doc = _trace(cli, "vllm-0.33", "--budget", "16")
    assert doc["ends"] == [16, 32, 46]
    assert doc["chunks"] == [16, 16, 14]
    assert (doc["outcome"], doc["stuck_at"]) == ("stuck", 46)


def test_vllm_033_livelocks_at_46_with_budget_512(cli: Cli) -> None:
    doc = _trace(cli, "vllm-0.33", "--budget", "512")
    assert doc["ends"] == [46]
    assert (doc["outcome"], doc["stuck_at"]) == ("stuck", 46)


def test_vllm_033_single_module_lookahead_finishes(cli: Cli) -> None:
    run = cli(
        "trace",
        "vllm-0.33",
        "--block",
        "16",
        "--lookahead",
        "1",
        "--prompt",
        "49",
        "--budget",
        "16",
        "--json",
    )
    doc = run.json()
    assert doc["ends"] == [16, 32, 48, 49]
    assert (doc["outcome"], run.code) == ("finished", 0)


@pytest.mark.parametrize(("budget", "ends"), [("16", [16, 32, 48, 49]), ("512", [49])])
def test_lookahead_in_split_finishes(cli: Cli, budget: str, ends: list[int]) -> None:
    doc = _trace(cli, "lookahead-in-split", "--budget", budget)
    assert doc["ends"] == ends
    assert (doc["outcome"], doc["stuck_at"]) == ("finished", None)


def test_lookahead_in_split_ends_a_mid_prefill_window_chunk_at_the_aligned_limit(cli: Cli) -> None:
    """SPEC V, lookahead-in-split rule (2) from c > 0: at c = 4 (T=18, B=4, L=3) a budget of
    12 would end on the grid at 16, inside the window (15, 18) and short of T; the fix ends
    the chunk at fl(T - L, B) = 12 instead, and the largest budget then finishes at 18."""
    run = cli("trace", "lookahead-in-split", "--block", "4", "--lookahead", "3", "--prompt",
              "18", "--max-sched", "16", "--budgets", "4,12,16", "--json")  # fmt: skip
    assert run.json()["ends"] == [4, 12, 18]


def test_alias_latest_is_033(cli: Cli) -> None:
    assert _trace(cli, "vllm-latest", "--budget", "16")["ends"] == [16, 32, 46]


def test_smallest_p1_counterexample_for_b16_l3_is_t17(cli: Cli, tmp_path: Path) -> None:
    run = cli(
        "explore",
        "vllm-0.33",
        "--block",
        "16",
        "--lookahead",
        "3",
        "--prompt",
        "1-48",
        "--max-sched",
        "3-32",
        "--drop",
        "off",
        "--property",
        "P1",
        "--out",
        str(tmp_path),
        "--json",
    )
    assert run.code == 1
    (verdict,) = run.json()["verdicts"]
    assert verdict["status"] == "VIOLATED"
    cx = _load(verdict["counterexample"])
    assert cx["config"]["tokens"] == 17
    assert (cx["trace"][-1]["c"], cx["trace"][-1]["chunk"]) == (14, 0)


def test_t17_with_budget_16_is_one_chunk_to_14(cli: Cli, tmp_path: Path) -> None:
    run = cli(
        "explore",
        "vllm-0.33",
        "--block",
        "16",
        "--lookahead",
        "3",
        "--prompt",
        "1-48",
        "--max-sched",
        "16",
        "--drop",
        "off",
        "--property",
        "P1",
        "--out",
        str(tmp_path),
        "--json",
    )
    (verdict,) = run.json()["verdicts"]
    cx = _load(verdict["counterexample"])
    assert cx["config"]["tokens"] == 17
    assert [(s["c"], s["budget"], s["chunk"]) for s in cx["trace"]] == [(0, 16, 14), (14, 16, 0)]


def test_smallest_p1_counterexample_over_the_classic_grid(cli: Cli, tmp_path: Path) -> None:
    """SPEC K: over all B and L of the classic grid (fresh requests) it is T=5, B=4, L=2."""
    run = cli(
        "explore", "vllm-0.33", "--block", "4,8,16", "--lookahead", "0-4", "--prompt", "1-48",
        "--max-sched", "1-32", "--property", "P1", "--out", str(tmp_path), "--json",
    )  # fmt: skip
    assert run.code == 1
    doc = run.json()
    assert doc["policy"] == "vllm-0.33"
    (verdict,) = doc["verdicts"]
    cfg = _load(verdict["counterexample"])["config"]
    assert (cfg["tokens"], cfg["block"], cfg["lookahead"]) == (5, 4, 2)


def test_default_check_finds_the_admission_livelock(cli: Cli, tmp_path: Path) -> None:
    """The default grid reaches admission starts: a request a KV connector loads to inside the
    window (c0 >= T - L, mid-block) is stuck there on its first step (history note 10)."""
    run = cli("check", "--property", "P1", "--out", str(tmp_path), "--json")
    assert run.code == 1
    (verdict,) = run.json()["verdicts"]
    cx = _load(verdict["counterexample"])
    cfg = cx["config"]
    assert cfg["start"] > 0 and cfg["external"] == cfg["start"]
    assert cfg["tokens"] - cfg["lookahead"] <= cfg["start"] < cfg["tokens"]
    assert len(cx["trace"]) == 1 and cx["trace"][0]["chunk"] == 0


def test_check_with_ranges_proves_on_those_ranges(cli: Cli, tmp_path: Path) -> None:
    """With range flags both engines judge the same configurations: the prover's range is the
    explorer's (checkpoints off here, so P3 holds on both; the default production range, which
    has checkpoints, would have reported a P3 violation beside an explorer PROVED)."""
    ranges = ("--block", "4", "--prompt", "1-12", "--lookahead", "0-2")
    run = cli("check", "vllm-0.33", *ranges, "--property", "P3", "--out", str(tmp_path), "--json")
    assert run.code == 0, run.out
    (verdict,) = run.json()["verdicts"]
    assert verdict["status"] == "PROVED"
    explorer, prover = verdict["range"]["explorer"], verdict["range"]["prover"]
    shared = set(explorer) & set(prover)
    assert shared >= {"block", "prompt", "lookahead", "checkpoints", "max_sched", "budget"}
    assert all(explorer[k] == prover[k] for k in shared)
    assert prover["block"] == "4" and prover["cells"] == 2


def test_lookahead_in_split_has_no_p1_violation_on_the_classic_range(
    cli: Cli, tmp_path: Path
) -> None:
    """The fix holds on the classic production range (fresh requests, no hits)."""
    run = cli(
        "prove", "lookahead-in-split", "--block", "16,64,528,800,1600,2096,4416",
        "--lookahead", "0-8", "--property", "P1", "--out", str(tmp_path), "--json",
    )  # fmt: skip
    (verdict,) = run.json()["verdicts"]
    assert verdict["status"] == "PROVED", verdict["summary"]
    assert verdict["counterexample"] is None
    assert verdict["range"]["block"] == "16,64,528,800,1600,2096,4416"
    figure = verdict["figure"]
    assert sum(figure["proved_by"].values()) == figure["cells"] == 14
    assert run.code == 0


def test_default_check_finds_the_fix_stuck_at_a_partial_tail_in_the_window(
    cli: Cli, tmp_path: Path
) -> None:
    """The prover's default range reaches what the fix does not resolve: with partial hits the
    split stops at the prompt's tail tau inside the window (T - L, T), the reservation trims
    that unaligned end to 0, and an admission at T - L never moves."""
    run = cli("check", "lookahead-in-split", "--property", "P1", "--out", str(tmp_path), "--json")
    assert run.code == 1
    (verdict,) = run.json()["verdicts"]
    assert verdict["status"] == "VIOLATED"
    assert "prover: VIOLATED" in verdict["summary"]
    assert verdict["figure"]["prover"]["violated_cells"]


def _load(path: str) -> Any:
    return json.loads(Path(path).read_text())


@pytest.mark.parametrize(("name", "fields", "c", "budget", "chunk"), BOUNDARY_STEPS)
def test_boundary_steps(name: str, fields: dict[str, Any], c: int, budget: int, chunk: int) -> None:
    policy, cfg = get_builtin(name), Config(**fields)
    assert policy.accepts(cfg) is None
    assert step(policy, cfg, c, budget).chunk == chunk


def test_lookahead_in_split_keeps_an_end_at_exactly_t_minus_l() -> None:
    """SPEC V: the fix resolves ends strictly inside the window (T - L, T). T=4, B=2, L=2,
    M=4: the split ends the first chunk at T - L = 2, which the fix keeps (the reservation
    leaves it whole) rather than finishing the request."""
    policy = get_builtin("lookahead-in-split")
    assert step(policy, Config(block=2, prompt=4, lookahead=2, max_sched=4), 0, 4).chunk == 2


def test_lookahead_in_split_keeps_a_chunk_that_finishes_across_a_boundary() -> None:
    """SPEC V: an end at T is not in the window (T - L, T), so the fix leaves it alone even
    from a mid-block start that crosses a split boundary. T=11, B=8, G=4, H=2, L=2, drop on,
    internal checkpoints (alpha = 2): from c = 2 a budget of 9 finishes the prefill."""
    cfg = Config(block=8, split_block=4, hash_block=2, partial_hits=True, prompt=11, max_sched=11)
    cfg = cfg.replace(lookahead=2, drop=True, checkpoints=True, checkpoint_alignment=2)
    assert step(get_builtin("lookahead-in-split"), cfg, 2, 9).chunk == 9


@pytest.mark.parametrize(
    "name",
    ["vllm-0.15", "vllm-0.17", "vllm-0.23", "vllm-0.24", "vllm-0.25", "vllm-0.26", "vllm-0.27",
     "vllm-0.28"],
)  # fmt: skip
def test_releases_before_0_29_ignore_internal_checkpoints(name: str) -> None:
    """Internal prefill checkpoints K arrive in 0.29 (V6): an earlier release refuses K at
    start-up and its code never reads it, so its built-in step gives the same chunk with K on
    as off (what ``explore`` reports for the refused configurations)."""
    policy = get_builtin(name)
    compared = 0
    for block, prompt, max_sched in ((4, 13, 3), (4, 16, 8), (8, 21, 5), (8, 40, 16)):
        off = Config(block=block, prompt=prompt, max_sched=max_sched)
        on = off.replace(checkpoints=True)
        assert policy.accepts(on) is not None
        for c in range(off.prefill_end):
            for budget in range(1, max_sched + 1):
                assert step(policy, on, c, budget).chunk == step(policy, off, c, budget).chunk
                compared += 1
    assert compared > 300


@pytest.mark.parametrize("name", ["vllm-0.30", "vllm-0.31"])
def test_v7_stops_at_the_partial_tail_only_strictly_inside_the_prompt(name: str) -> None:
    """History note 3, V7: the partial-tail stop tau applies when lambda < tau < P. A resumed
    request (T=14 > P=12, B=8, H=4) whose prompt ends on the hash grid has tau = P = 12, so a
    chunk from 8 with budget 5 runs past the prompt to E = 13, as the real 0.30.0 and 0.31.0
    methods do (checked against them: ends 8, 13)."""
    policy = get_builtin(name)
    cfg = Config(block=8, hash_block=4, prompt=12, tokens=14, max_sched=8)
    assert step(policy, cfg, 0, 8).chunk == 8
    assert step(policy, cfg, 8, 5).chunk == 5
