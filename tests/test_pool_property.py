"""SPEC P8 POOL: the KV block pool of a lone request at the release's start-up minimum (SPEC
KV2), judged by both engines and named where the pool rules do not reach."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import Cli
from solver_limits import SOLVER_ARGS

from chunkproof.checker.cli.defaults import user_space
from chunkproof.checker.engines.search import explore
from chunkproof.checker.reports.report import exploration_verdicts
from chunkproof.model.builtin import get_builtin
from chunkproof.model.config import Config
from chunkproof.spec.kv_blocks import (
    lone_allocations,
    mamba_new_blocks,
    pool_refuses,
    pool_rules,
    refused_v26,
    refused_v33,
    startup_pool_v23,
    startup_pool_v29,
)
from chunkproof.spec.request import RequestModel

TAIL_033 = Config(block=8, split_block=2, prompt=9, max_sched=3, lookahead=1, drop=True)
"""vllm-0.33's least P8 counterexample: h = G = 2 < B, so the prompt's tail T = 6 (two tokens
short of 9 under the drop) is keyed off the Mamba grid."""

TAIL_RANGE = "--block 8 --split-block B/4 --lookahead 1 --drop on --prompt 1-12 --max-sched 1-4"
"""A range holding it and nothing smaller."""


def test_the_tail_copy_takes_the_block_the_startup_minimum_lacks() -> None:
    """[6, 9) after ends 2, 4, 6, max_model_len 10: attention cdiv(min(9 + 1, 10), 2) -
    cdiv(7, 2) = 1, a new Mamba state block (cdiv(9, 8) > cdiv(6, 8)) and the tail copy: 3
    asked, while the 9 blocks of 0.33's minimum (5 + 2 + S + the null block) leave
    9 - 1 - 4 - 2 = 2 free. The same chunk without the copy fits; the chunks before it do."""
    assert startup_pool_v29(TAIL_033) == 9
    assert refused_v33(TAIL_033, 6, 9)
    assert not pool_refuses(TAIL_033, 6, 9, 9, mamba_new_blocks(TAIL_033, 6, 9))
    assert not any(refused_v33(TAIL_033, c, c + 2) for c in (0, 2, 4))


def test_up_to_0_28_the_null_block_is_missing() -> None:
    """0.28's minimum for P = 9 (max_model_len 10), B = G = 8, L = 0 is cdiv(10, 8) + 2 = 4
    blocks, the null block among them: the last token's chunk asks an attention and a Mamba
    block with 1 free. 0.29's minimum (5) serves it."""
    cfg = Config(block=8, prompt=9, max_sched=1)
    assert startup_pool_v23(cfg) == 4
    assert refused_v26(cfg, 8, 9)
    assert not pool_refuses(cfg, 8, 9, startup_pool_v29(cfg), mamba_new_blocks(cfg, 8, 9))


TAIL_RELEASES = ("0.26.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0")


def test_the_tail_chunk_by_release() -> None:
    """[6, 9) of TAIL_033 after ends 2, 4, 6 at each release's minimum (KV2 rules 2b and 4):
    0.31 on key the tail T = 6 and ask its copy, 3 blocks with 2 free; 0.29 and 0.30 key no
    tail there (0.26-0.30's T is another under the drop) and serve 2 with 2 free in 9
    blocks; 0.26-0.28's 8 blocks count the null block as the request's and refuse the 2."""
    asked = {
        v: [
            (a.asked, a.granted)
            for a in lone_allocations(TAIL_033, [2, 2, 2, 3], r.startup_pool(TAIL_033), 10, r)
        ]
        for v, r in ((v, pool_rules(v)) for v in TAIL_RELEASES)
    }
    first = [(4, True), (1, True), (1, True)]
    assert asked == {
        "0.26.0": [*first, (2, False)],
        "0.29.0": [*first, (2, True)],
        "0.30.0": [*first, (2, True)],
        "0.31.0": [*first, (3, False)],
        "0.32.0": [*first, (3, False)],
        "0.33.0": [*first, (3, False)],
    }
    refused = [pool_rules(v).refused(TAIL_033, 6, 9) for v in TAIL_RELEASES]
    assert refused == [True, False, False, True, True, True]


def test_outside_the_rules_nothing_is_judged() -> None:
    """A request admitted at a hit, or one with output tokens, is outside KV2's scope, under
    every release's rules."""
    assert not refused_v33(TAIL_033.replace(start=2), 6, 9)
    assert not refused_v33(TAIL_033.replace(tokens=10), 6, 9)
    for version in TAIL_RELEASES:
        rules = pool_rules(version)
        assert not rules.refused(TAIL_033.replace(start=2), 6, 9), version
        assert not rules.refused(TAIL_033.replace(junction=4), 6, 9), version


def solver_args(command: str) -> list[str]:
    """The prover's verdict is decided by Z3's resource count, not the clock."""
    return SOLVER_ARGS if command == "prove" else []


@pytest.mark.parametrize("command", ["explore", "prove"])
def test_both_engines_find_the_least_tail_counterexample(
    cli: Cli, tmp_path: Path, command: str
) -> None:
    """The explorer (every reachable state) and the prover (Z3 per cell) find the same least
    counterexample, T = 9, on the range that holds it."""
    run = cli(
        command,
        "vllm-0.33",
        "--property",
        "P8",
        *TAIL_RANGE.split(),
        *solver_args(command),
        "--json",
        "--out",
        str(tmp_path),
    )
    (verdict,) = run.json()["verdicts"]
    assert run.code == 1 and verdict["status"] == "VIOLATED", run.out
    assert verdict["summary"].startswith("T=9 B=8 L=1 M=3 G=2 D=on: chunk [6, 9) asks 3 KV")
    assert "1 of them to copy the prompt's tail state, with 2 free" in verdict["summary"]


HIT_RANGE = "--block 4 --hash-block 2 --lookahead 0 --drop off --prompt 1-16 --max-sched 1-8"
"""Admissions at a local hit (KV2 rule 2d): on the partial-hit grid (H = 2 < B = 4), 0.33's
least P8 counterexample is the resend at the tail c0 = 2 of a 3-token prompt."""


@pytest.mark.parametrize(("starts", "status"), [("hash", "VIOLATED"), ("block", "PROVED")])
@pytest.mark.parametrize("command", ["explore", "prove"])
def test_both_engines_judge_a_seeded_hit(
    cli: Cli, tmp_path: Path, command: str, starts: str, status: str
) -> None:
    """At the partial hit c0 = 2 (the tail of P = 3) the first chunk asks 4 blocks with 3 free
    in the pool of 4 that held the identical request: both engines find it with the same
    words. At hits on the block grid both keep P8 (the seed's fit is the request's)."""
    flags = [*HIT_RANGE.split(), "--start", starts, *solver_args(command)]
    run = cli(command, "vllm-0.33", "--property", "P8", *flags, "--json", "--out", str(tmp_path))
    (verdict,) = run.json()["verdicts"]
    assert verdict["status"] == status, run.out
    if status == "VIOLATED":
        assert verdict["summary"].startswith(
            "T=3 B=4 L=0 M=1 H=2 c0=2: chunk [2, 3) asks 4 KV blocks, 1 of them to copy the "
            "prompt's tail state, with 3 free, in a pool of 4 blocks"
        ), verdict["summary"]
        assert (
            "the waiting loop cannot admit the request at the local hit c0=2"
            in (verdict["summary"])
        )


CHECKPOINT_RANGE = (
    "--block 4 --lookahead 0 --drop off --checkpoints on --checkpoint-alignment 1 "
    "--prompt 1-13 --max-sched 1-9"
)
"""0.30's least P8 counterexample with prefill checkpoints (KV2 rule 2c): T = 13."""


@pytest.mark.parametrize(("policy", "status"), [("vllm-0.30", "VIOLATED"), ("vllm-0.32", "PROVED")])
@pytest.mark.parametrize("command", ["explore", "prove"])
def test_both_engines_find_the_checkpoint_chunk_0_32_fixed(
    cli: Cli, tmp_path: Path, command: str, policy: str, status: str
) -> None:
    """[4, 13) writes a prefill checkpoint: 0.30 asks its 3 Mamba blocks uncapped beside 3
    attention blocks, 6 with 5 free in the 8 blocks of its minimum; both engines find it, and
    the verdict names the checkpoint's share. 0.32 asks 2 there, and both engines keep P8."""
    flags = [*CHECKPOINT_RANGE.split(), *solver_args(command), "--json", "--out", str(tmp_path)]
    run = cli(command, policy, "--property", "P8", *flags)
    (verdict,) = run.json()["verdicts"]
    assert verdict["status"] == status, run.out
    if status == "VIOLATED":
        assert verdict["summary"].startswith(
            "T=13 B=4 L=0 M=9 K=on alpha=1: chunk [4, 13) asks 6 KV blocks, 3 of them Mamba "
            "blocks of a prefill checkpoint chunk, with 5 free, in a pool of 8 blocks"
        ), verdict["summary"]


@pytest.mark.parametrize("command", ["explore", "prove"])
def test_without_an_off_grid_tail_0_33_keeps_p8(cli: Cli, tmp_path: Path, command: str) -> None:
    """With h = G = B no tail is keyed off the grid, and 0.33's minimum (the null block
    reserved) serves every chunk: PROVED by both engines."""
    ranges = ["--block", "8", "--lookahead", "0-2", "--prompt", "1-24", "--max-sched", "1-8"]
    flags = [*ranges, *solver_args(command), "--json", "--out", str(tmp_path)]
    run = cli(command, "vllm-0.33", "--property", "P8", *flags)
    (verdict,) = run.json()["verdicts"]
    assert (run.code, verdict["status"]) == (0, "PROVED"), run.out


def test_p8_where_the_rules_stop_is_one_line(cli: Cli, tmp_path: Path) -> None:
    """0.17-0.25 with L >= 1 are not modelled: asked for, P8 is one line and exit 2; by
    default it is left out and the report says so."""
    run = cli("explore", "vllm-0.24", "--property", "P8", "--block", "8", "--prompt", "1-8")
    assert run.code == 2 and run.out == "", run.out
    assert run.err.strip().endswith("--lookahead 0 judges P8 there"), run.err
    assert len(run.err.strip().splitlines()) == 1, run.err
    ranges = ["--block", "8", "--prompt", "1-8", "--max-sched", "1-4", "--out", str(tmp_path)]
    run = cli("explore", "vllm-0.24", *ranges)
    assert "not judged: P8 POOL: the KV pool rules of 0.23-0.25 with L >= 1" in run.out
    assert "P8 POOL" not in run.out.split("not judged:")[1].split("\n", 1)[1]


@pytest.mark.parametrize("ranges", ["--tokens P+1-2", "--junction 1-2"])
def test_a_range_with_nothing_in_p8_scope_gets_no_verdict(cli: Cli, ranges: str) -> None:
    """Resumed requests and a junction are outside P8's scope in every release: a range of
    only those is never PROVED; asked for, P8 is one line and exit 2."""
    flags = ["--block", "8", "--prompt", "1-8", "--max-sched", "1-4", *ranges.split()]
    run = cli("explore", "vllm-0.33", "--property", "P8", *flags)
    assert run.code == 2 and run.out == "", run.out
    scope = "(c0 = 0, a local hit or an external one, T = P, no junction; SPEC P8)"
    assert run.err.strip().endswith(scope), run.err


def test_checkpoints_with_partial_hits_are_empty(cli: Cli) -> None:
    """Internal checkpoints are in P8's scope without partial hits only (KV2 rule 2c): with
    partial hits (H < B) they give EMPTY, never PROVED."""
    flags = ["--block", "8", "--prompt", "1-8", "--max-sched", "1-4", "--split-block", "B/2"]
    flags += ["--checkpoints", "on", "--checkpoint-alignment", "1", "--json"]
    run = cli("explore", "vllm-0.33", "--property", "P8", *flags)
    (verdict,) = run.json()["verdicts"]
    assert verdict["status"] == "EMPTY", run.out


@pytest.mark.parametrize("command", ["explore", "prove"])
def test_p8_counts_and_names_only_the_configurations_in_its_scope(
    cli: Cli, tmp_path: Path, command: str
) -> None:
    """A range mixing admissions at c0 = 0, at a local hit and at an external one, each with
    T = P or a resumed T = P + 1: P8 judges T = P only, so its PROVED counts those and names
    the others as not judged (the explorer), or says what it was judged on (the prover); it
    never reads as holding on the whole range."""
    ranges = ["--block", "16", "--lookahead", "0", "--drop", "off"]
    ranges += ["--start", "0,block,external", "--tokens", "P,P+1"]
    if command == "explore":
        ranges += ["--prompt", "1-20", "--max-sched", "1-8"]
    flags = [*ranges, *solver_args(command), "--json", "--out", str(tmp_path)]
    run = cli(command, "vllm-0.33", "--property", "P8", *flags)
    (verdict,) = run.json()["verdicts"]
    assert (run.code, verdict["status"]) == (0, "PROVED"), run.out
    scope = (
        "in its scope (c0 = 0 with no hit, a local hit an identical prompt's prefill left, or "
        "an external hit x = c0 a connector loads (T = P, no junction), internal checkpoints "
        "only at c0 = 0 without partial hits)"
    )
    if command == "explore":
        everything = run.json()["explored"]["configs"]["main"]
        assert 0 < verdict["configs"] < everything, (verdict, everything)
        assert verdict["summary"] == (
            f"holds on all {verdict['configs']} configurations {scope}; the other "
            f"{everything - verdict['configs']} of the range are not judged"
        )
    else:
        assert f"judged {scope}" in verdict["summary"], verdict["summary"]


def test_a_cell_with_nothing_in_p8_scope_is_not_proved(cli: Cli, tmp_path: Path) -> None:
    """With internal checkpoints on both ways and partial hits (H = G = B/2), the cell with
    checkpoints holds no configuration in P8's scope: the prover proves the other cell and
    counts that one as empty for P8."""
    ranges = ["--block", "16", "--split-block", "B/2", "--lookahead", "0", "--drop", "off"]
    ranges += ["--checkpoints", "both", "--checkpoint-alignment", "1"]
    flags = [*ranges, *SOLVER_ARGS, "--json", "--out", str(tmp_path)]
    run = cli("prove", "vllm-0.33", "--property", "P8", *flags)
    (verdict,) = run.json()["verdicts"]
    assert (run.code, verdict["status"]) == (0, "PROVED"), run.out
    assert verdict["figure"]["empty_cells"] == 1, verdict["figure"]
    assert verdict["summary"].startswith("proved on all 1 cells"), verdict["summary"]
    assert "1 cells hold no configuration in its scope (c0 = 0" in verdict["summary"]


def test_an_exploration_with_nothing_in_p8_scope_is_empty() -> None:
    """Below the command line (which refuses such a range first): an exploration whose every
    configuration lies outside P8's scope gives EMPTY, never PROVED."""
    policy = get_builtin("vllm-0.33")
    texts = {"block": "8", "split_block": "B/2", "lookahead": "0", "prompt": "1-6"}
    texts |= {"max_sched": "1-4", "checkpoints": "on", "checkpoint_alignment": "1"}
    space = user_space(texts, None, production=False)
    exploration = explore(RequestModel(policy, space, properties=("P8",)), ("P8",))
    assert exploration.tally.configs["main"] > 0
    (verdict,) = [v for v in exploration_verdicts(exploration, {}, None) if v.property == "P8"]
    assert verdict.status == "EMPTY", verdict
    assert verdict.summary.startswith("no configuration of the range is in its scope")
