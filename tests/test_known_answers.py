"""SPEC K: the known answers, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import Cli


def _trace(cli: Cli, policy: str, *flags: str) -> Any:
    run = cli(
        "trace", policy, "--block", "16", "--lookahead", "3", "--prompt", "49", "--json", *flags
    )
    assert run.code == 0, run.err
    return run.json()


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
    assert doc["outcome"] == "finished"


@pytest.mark.parametrize(("budget", "ends"), [("16", [16, 32, 48, 49]), ("512", [49])])
def test_lookahead_in_split_finishes(cli: Cli, budget: str, ends: list[int]) -> None:
    doc = _trace(cli, "lookahead-in-split", "--budget", budget)
    assert doc["ends"] == ends
    assert (doc["outcome"], doc["stuck_at"]) == ("finished", None)


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


def test_smallest_p1_counterexample_over_the_default_grid(cli: Cli, tmp_path: Path) -> None:
    run = cli("check", "--property", "P1", "--out", str(tmp_path), "--json")
    assert run.code == 1
    doc = run.json()
    assert doc["policy"] == "vllm-0.33"
    (verdict,) = doc["verdicts"]
    cfg = _load(verdict["counterexample"])["config"]
    assert (cfg["tokens"], cfg["block"], cfg["lookahead"]) == (5, 4, 2)


def test_check_lookahead_in_split_has_no_p1_violation(cli: Cli, tmp_path: Path) -> None:
    run = cli("check", "lookahead-in-split", "--property", "P1", "--out", str(tmp_path), "--json")
    (verdict,) = run.json()["verdicts"]
    assert verdict["status"] == "PROVED"
    assert verdict["counterexample"] is None
    assert verdict["range"]["explorer"]["block"] == "4,8,16"
    assert verdict["range"]["prover"]["block"] == "16,64,528,800,1600,2096,4416"
    assert verdict["figure"]["prover"]["proved_by"] == {"induction": 126}
    assert run.code == 0


def _load(path: str) -> Any:
    return json.loads(Path(path).read_text())
