"""For every property, a policy that breaks it and one that keeps it (SPEC P, explorer)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import Cli

from chunkproof.checker.engines.search import Exploration, explore
from chunkproof.model.builtin import get_builtin
from chunkproof.model.config import Config
from chunkproof.model.step import step
from chunkproof.spec.properties import in_window, in_window_relaxed, misaligned
from chunkproof.spec.request import RequestModel
from chunkproof.spec.space import Space, grid_from

GRID = {"block": "4,8", "lookahead": "0-3", "prompt": "1-24", "max_sched": "1-16"}


def _explore(name: str, pid: str, window: str = "strict", **texts: str) -> Exploration:
    space = Space((grid_from({**GRID, **texts}),))
    return explore(RequestModel(get_builtin(name), space, window), (pid,))


CASES = [
    # property, breaks it, keeps it (on GRID, inside each policy's accepted configurations)
    ("P0", "vllm-0.17", "vllm-0.33", {"start": "0,external"}),  # V2 asserts x = 0
    ("P1", "vllm-0.33", "lookahead-in-split", {}),  # the #61762-class livelock
    ("P2", "vllm-0.33", "keep-subblock", {}),
    ("P3", "keep-subblock", "vllm-0.33", {}),  # sub-block chunks that later cross a block end
    ("P4", "vllm-0.33", "vllm-0.27", {}),  # the reservation trims to an off-grid T - L
    ("P5", "vllm-0.27", "vllm-0.33", {}),  # no reservation before 0.28
    # #50235: N = kB in one chunk loses the resend state (with L >= 2 under the drop 0.33 too)
    ("P6", "vllm-0.28", "vllm-0.33", {"lookahead": "0-1"}),
    ("P7", "vllm-0.33", "keep-subblock", {}),  # const(b < B) never finishes
]


@pytest.mark.parametrize(("pid", "breaks", "keeps", "texts"), CASES)
def test_property_has_a_breaking_and_a_keeping_policy(
    pid: str, breaks: str, keeps: str, texts: dict[str, str]
) -> None:
    bad = _explore(breaks, pid, **texts)
    good = _explore(keeps, pid, **texts)
    assert bad.failing(pid, "main") > 0
    assert good.failing(pid, "main") == 0
    assert good.tally.configs["main"] > 500


def test_p5_strict_is_broken_by_the_fix_and_kept_by_033() -> None:
    fix = _explore("lookahead-in-split", "P5")
    latest = _explore("vllm-0.33", "P5")
    assert fix.failing("P5", "main") > 0
    assert latest.failing("P5", "main") == 0


def test_refused_and_degenerate_configurations_are_reported_apart() -> None:
    v17 = _explore("vllm-0.17", "P1")
    assert v17.failing("P1", "main") == 0
    assert v17.failing("P1", "refused") > 0  # B > M: starvation 0.17 refuses at start-up
    v33 = _explore("vllm-0.33", "P1")
    assert v33.failing("P1", "degenerate") > 0  # M < L


def test_newest_release_poisons_a_slot_with_checkpoints_after_a_partial_hit() -> None:
    """0.33.0's internal checkpoint lifts the mid-block stop, so a chunk from a partial hit
    crosses its block's end (slot note 4.2): P3 breaks only with those inputs."""
    plain = _explore("vllm-0.33", "P3")
    assert plain.failing("P3", "main") == 0
    inputs = {"checkpoints": "on", "checkpoint_alignment": "1", "hash_block": "G/2"}
    poisoned = _explore("vllm-0.33", "P3", start="0,hash", **inputs)
    assert poisoned.failing("P3", "main") > 0


@pytest.mark.parametrize("pid", ["P3", "P4"])
def test_a_split_grid_other_than_the_mamba_block_breaks_the_slots(pid: str) -> None:
    """vLLM #54076: the split aligns to cache_config.block_size G while states are kept on the
    Mamba group's block B; with G = B/2 chunk ends fall mid-block on B (L <= 1: no
    reservation trims an end off the grid)."""
    assert _explore("vllm-0.33", pid, lookahead="0,1").failing(pid, "main") == 0
    split = _explore("vllm-0.33", pid, lookahead="0,1", split_block="B/2")
    assert split.failing(pid, "main") > 0


@pytest.mark.parametrize("window", ["strict", "relaxed"])
def test_p5_verdicts_name_the_form_they_checked(window: str, cli: Cli, tmp_path: Path) -> None:
    """SPEC P5 has two forms (strict is the property): the verdict's summary and its range say
    which one a run checked, in the explorer and the prover alike."""
    argv = ["--block", "4", "--lookahead", "2", "--prompt", "5-9", "--max-sched", "2-4"]
    argv += ["--property", "P5", "--window", window, "--out", str(tmp_path), "--json"]
    for command in ("explore", "prove"):
        (verdict,) = cli(command, "lookahead-in-split", *argv).json()["verdicts"]
        assert verdict["summary"].startswith(f"{window} form: "), verdict
        assert verdict["range"]["window"] == window


def test_p4_exempts_an_exact_junction_at_the_prompt_end() -> None:
    """P4's exact-junction exemption covers J = P (the split stops there: rule 9, J <= P): a
    resumed request (T = P + 2, E = 41) whose chunk [16, 40) ends at J = P off the grid is not
    misaligned with the exact shared-prefix checkpoint, and is without it."""
    cfg = Config(block=16, prompt=40, tokens=42, junction=40, exact_junction=True, max_sched=64)
    assert cfg.prefill_end == 41
    assert not misaligned(cfg, 16, 40)
    assert misaligned(cfg.replace(exact_junction=False), 16, 40)


def test_p5_relaxed_allows_only_an_aligned_window_end_short_of_the_request() -> None:
    """P5 relaxed: an end inside the window (T - L, T) = (17, 20) is allowed only on a multiple
    of B and when the chunk was cut short (n < T - c)."""
    on_grid = Config(block=2, prompt=20, lookahead=3, max_sched=8)
    off_grid = Config(block=4, prompt=20, lookahead=3, max_sched=8)
    assert not in_window_relaxed(on_grid, 16, 2, 18)
    assert in_window_relaxed(on_grid, 16, 4, 18)  # n = T - c: nothing cut it short
    assert in_window_relaxed(off_grid, 16, 2, 18)
    assert in_window(off_grid, 16, 2, 18) and not in_window(off_grid, 16, 4, 20)


@pytest.mark.parametrize("name", ["vllm-0.30", "vllm-0.32", "vllm-0.33"])
def test_a_sub_block_budget_floors_to_nothing_when_m_holds_a_block(name: str) -> None:
    """V7-V9 align a non-final end down to the block when B <= M (history note 3): offered 3
    tokens (B = 4, M = 8), the split gives 0 and P2's b* is the block, B."""
    cfg = Config(block=4, prompt=12, max_sched=8)
    assert step(get_builtin(name), cfg, 0, 3).chunk == 0
    assert step(get_builtin(name), cfg, 0, 4).chunk == 4


@pytest.mark.parametrize(("policy", "status"), [("vllm-0.30", "VIOLATED"), ("vllm-0.31", "PROVED")])
def test_p6_at_retention_0_needs_the_prompt_checkpoint_kept(
    policy: str, status: str, cli: Cli, tmp_path: Path
) -> None:
    """With R = 0 and internal checkpoints, the chunk [0, 5) of T = 5 (B = 4) runs over R* = 4
    and writes its checkpoint there. 0.30 evicts it (every checkpoint at R = 0): P6 is broken,
    in both engines (the real 0.30.0 resend hits 0); 0.31 keeps the prompt's own checkpoint,
    and P6 holds (was PROVED on 0.30 too while P6 read 0.33's checkpoint rule)."""
    argv = ["--block", "4", "--lookahead", "0", "--checkpoints", "on"]
    argv += ["--checkpoint-alignment", "1", "--retention", "0", "--prompt", "1-12"]
    argv += ["--max-sched", "1-12", "--property", "P6", "--out", str(tmp_path), "--json"]
    for command in ("explore", "prove"):
        (verdict,) = cli(command, policy, *argv).json()["verdicts"]
        assert verdict["status"] == status, verdict
