"""The adaptive threshold floor of 0.31+ in the scheduler step (``long_prefill_token_threshold_
adaptive``, ``chunkproof system --adaptive-threshold``; history note 6): theta_eff > 0 is
raised to M // eligible, the eligible count set by the environment.

The case docs/guide.md shows: 0.33, B=4, L=2, theta=1, M=8. Without the floor, two requests cap
each other at 1 token, under L, and the reservation's zero livelocks them; with it, two
eligible requests are offered M // 2 = 4 tokens, and the S-LIVE left is the single-request
livelock (T=5: one chunk to c=3, then 0 for ever).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import Cli
from repro_helpers import blocking_packages, generate_repro, run_repro
from solver_limits import GUARD_MS, RLIMIT
from vllm_copies import copy_release

from chunkproof.checker.cli.defaults import user_space
from chunkproof.checker.engines.explorer import explore_batch
from chunkproof.checker.engines.verdicts import PROVED
from chunkproof.checker.kinds import load_counterexample
from chunkproof.checker.runs.system import explore_system
from chunkproof.checker.runs.system_prove import BOUNDED, prove_system
from chunkproof.model.builtin import get_builtin
from chunkproof.model.config import Config
from chunkproof.model.errors import ConfigError
from chunkproof.model.system_counterexample import SYSTEM_SCHEMA, SystemCounterexample
from chunkproof.source.extraction import SCHEDULER_FILE
from chunkproof.source.releases import release_root
from chunkproof.spec import scheduler_step
from chunkproof.spec.scheduler_loops import WAITING, alone
from chunkproof.spec.scheduler_step import (
    SchedulerStepModel,
    eligible_choices,
    make_scheduler_batch,
    numpy_ops,
    split_action,
)
from chunkproof.spec.system_properties import system_live

FLOOR = {"block": "4", "lookahead": "2", "drop": "off", "prompt": "3-13", "max_sched": "8"}
FLOOR |= {"threshold": "1"}
"""theta = 1 < L = 2 (module docstring)."""
ARGV = [f"--{k.replace('_', '-')}={v}" for k, v in FLOOR.items()]


def theta_eff(whole: int, theta: int, eligible: int) -> int:
    """vLLM 0.31+'s theta_eff with the floor on (history note 6), written out."""
    if eligible <= 1 or theta <= 0:
        return 0
    return max(theta, whole // eligible)


@pytest.mark.parametrize("whole", [1, 2, 7, 8, 12, 100])
@pytest.mark.parametrize("theta", [0, 1, 3, 5])
@pytest.mark.parametrize("least", [1, 2, 3, 4])
def test_the_choices_give_every_theta_eff_once(whole: int, theta: int, least: int) -> None:
    """Every theta_eff an eligible count >= least gives is given by exactly one choice, the
    least count that gives it."""
    choices = eligible_choices(whole, theta, least)
    every = range(least, whole + 10)
    assert sorted({theta_eff(whole, theta, n) for n in every}) == sorted(
        theta_eff(whole, theta, n) for n in choices
    )
    for n in choices:
        assert n == min(
            m for m in every if theta_eff(whole, theta, m) == theta_eff(whole, theta, n)
        )


def test_the_explorer_agrees_with_every_eligible_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Enumerating only the least count of each theta_eff loses no verdict: the same violating
    instances as with every count up to M + 2."""
    policy = get_builtin("vllm-0.33")
    space = user_space({**FLOOR, "prompt": "3-9"}, None, production=False)
    choices, _ = explore_system(policy, space, 2, adaptive=True)
    monkeypatch.setattr(
        scheduler_step,
        "eligible_choices",
        lambda whole, theta, least: tuple(range(max(least, 1), whole + 3)),
    )
    every, _ = explore_system(policy, space, 2, adaptive=True)
    assert [(v.property, v.violating) for v in choices] == [
        (v.property, v.violating) for v in every
    ]
    assert dict((v.property, v.violating) for v in every)["S-LIVE"] > 0


def head_offer(theta: int, adaptive: bool, eligible: int | None) -> int:
    """What the head of two waiting requests (T=20, then T=3), M=12, is offered at b=12."""
    head = Config(block=4, prompt=20, max_sched=12, threshold=theta)
    behind = replace(head, prompt=3)
    model = SchedulerStepModel(
        get_builtin("vllm-0.33"), [(head, behind)], symmetry=False, adaptive=adaptive
    )
    batch = make_scheduler_batch([(head, behind)])
    row = np.array([[0, 0, WAITING, 0, 0, 0, 1, WAITING, 0, 0, 0]], dtype=np.int64)
    count = None if eligible is None else np.array([eligible])
    moved = model.step(batch, row, np.zeros(1, dtype=np.int64), np.array([12]), count)
    assert split_action(int(moved.action[0])) == (12, eligible or 0)
    return int(moved.record["offered0"][0])


def test_one_step_offers_the_floor() -> None:
    """theta=1: the head is offered 1 without the floor, 12 // 2 = 6 with two eligible
    requests, 12 // 4 = 3 with four; theta=0: no cap, floor or not (vLLM floors a theta > 0
    only)."""
    assert head_offer(1, False, None) == 1
    assert head_offer(1, True, 2) == 6
    assert head_offer(1, True, 4) == 3
    assert head_offer(0, True, 2) == 12


def test_s_live_asks_the_instance_alone() -> None:
    """A step offered M that schedules nothing breaks S-LIVE only when no eligible request is
    outside the instance."""
    ops, phases = numpy_ops(1), [np.array([WAITING]), np.array([WAITING])]
    yes, whole = np.array([True]), np.array([8])
    by_itself = alone(ops, phases, whole, whole, np.array([2]))
    with_other = alone(ops, phases, whole, whole, np.array([3]))
    assert system_live(yes, yes, whole, whole, by_itself)[0]
    assert not system_live(yes, yes, whole, whole, with_other)[0]
    assert alone(ops, phases, whole, whole, None)[0]


def test_the_floor_removes_the_theta_livelock() -> None:
    """The guide's numbers: S-LIVE in all 66 instances without the floor, 30 with it (the
    single-request livelocks); every other property as before."""
    policy = get_builtin("vllm-0.33")
    space = user_space(FLOOR, None, production=False)
    off, info_off = explore_system(policy, space, 2)
    on, info_on = explore_system(policy, space, 2, adaptive=True)
    assert {v.property: v.violating for v in off} == {"P0": 0, "S-LIVE": 66, "HOL": 0, "STARVE": 0}
    assert {v.property: v.violating for v in on} == {"P0": 0, "S-LIVE": 30, "HOL": 0, "STARVE": 0}
    assert info_off["threshold"].endswith("adaptive floor off")
    assert "adaptive floor on" in info_on["threshold"] and info_on["adaptive"]
    unthresholded = user_space({**FLOOR, "threshold": "0"}, None, production=False)
    _, info_zero = explore_system(policy, unthresholded, 2, adaptive=True)
    assert info_zero["threshold"] == (
        "adaptive floor on, but no threshold > 0 in the range: nothing to floor"
    )


def test_the_floor_needs_the_per_step_threshold(cli: Cli, tmp_path: Path) -> None:
    """0.30's threshold is static: --adaptive-threshold is refused in one line, exit 2."""
    with pytest.raises(ConfigError, match="adaptive floor"):
        SchedulerStepModel(get_builtin("vllm-0.30"), (), adaptive=True)
    run = cli("system", "vllm-0.30", *ARGV, "--adaptive-threshold", "--out", str(tmp_path))
    assert run.code == 2 and run.err.count("\n") == 1 and "0.31" in run.err


@pytest.fixture(scope="module")
def floor_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``system --adaptive-threshold --out`` on the guide's case: its S-LIVE file."""
    from chunkproof.checker.cli.main import main

    out = tmp_path_factory.mktemp("floor")
    assert main(["system", "vllm-0.33", *ARGV, "--adaptive-threshold", "--out", str(out)]) == 1
    return out / "vllm-0.33" / "system-S-LIVE.json"


def test_the_file_records_the_eligible_counts(cli: Cli, floor_file: Path) -> None:
    data = json.loads(floor_file.read_text())
    assert data["schema"] == SYSTEM_SCHEMA
    assert data["engine"]["long_prefill_token_threshold_adaptive"] is True
    assert [s["eligible"] for s in data["trace"]] == [2, 1]
    assert cli("replay", str(floor_file)).code == 0


def test_a_count_below_the_requests_does_not_replay(
    cli: Cli, floor_file: Path, tmp_path: Path
) -> None:
    """One eligible request recorded where two wait: not a step of the model."""
    data = json.loads(floor_file.read_text())
    data["trace"][0]["eligible"] = 1
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    run = cli("replay", str(edited))
    assert run.code == 1 and "1 eligible requests recorded, fewer than the 2" in run.out


def test_counts_without_the_floor_are_malformed(cli: Cli, floor_file: Path, tmp_path: Path) -> None:
    data = json.loads(floor_file.read_text())
    data["engine"]["long_prefill_token_threshold_adaptive"] = False
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    run = cli("replay", str(edited))
    assert run.code == 2 and "eligible count" in run.err


def test_a_version_1_file_reads_with_the_floor_off(floor_file: Path, tmp_path: Path) -> None:
    data = json.loads(floor_file.read_text())
    data["schema"] = "chunkproof.system-counterexample/1"
    del data["engine"]["long_prefill_token_threshold_adaptive"]
    for s in data["trace"]:
        del s["eligible"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    cx = load_counterexample(old)
    assert isinstance(cx, SystemCounterexample) and not cx.adaptive


@pytest.mark.fidelity
def test_the_repro_applies_the_floor(cli: Cli, floor_file: Path, tmp_path: Path) -> None:
    """The repro fails on 0.33.0's code at the state only the floor reaches (#1 at c=3: offered
    4 with two eligible requests, the reservation trims 4 to 3); without the floor (ADAPTIVE
    False) the same steps schedule otherwise and the file passes."""
    test_file = generate_repro(cli, floor_file, tmp_path)
    blockers = blocking_packages(tmp_path / "blockers")
    status, output = run_repro(test_file, release_root("0.33.0"), blockers)
    assert status == 1 and "AssertionError: S-LIVE: step 1 (budget 8)" in output, output
    assert "#1 (T=5, c=3)" in output, output
    text = test_file.read_text()
    assert "ADAPTIVE = True\n" in text and "eligible=2," in text
    test_file.write_text(text.replace("ADAPTIVE = True\n", "ADAPTIVE = False\n"))
    status, output = run_repro(test_file, release_root("0.33.0"), blockers)
    assert status == 0 and "1 passed" in output, output


def test_the_engines_agree_with_the_floor() -> None:
    """The bounded search over the symbolic step (the eligible count a free action, M // n
    non-linear) finds a violation where the explorer does, and its trace replays; where the
    explorer proves, it finds none (BOUNDED). Its queries are bounded by Z3's resource count,
    not the clock."""
    policy = get_builtin("vllm-0.33")
    space = user_space({**FLOOR, "prompt": "3,5"}, None, production=False)
    explored, _ = explore_system(policy, space, 2, adaptive=True)
    model = SchedulerStepModel(
        policy,
        scheduler_step.request_sets(policy, list(space.configs()), 2),
        adaptive=True,
    )
    depth = max(int(explore_batch(model, b).depth.max()) for b in model.batches())
    proofs, info = prove_system(
        policy, space, 2, depth=max(depth, 1), adaptive=True, timeout_ms=GUARD_MS, rlimit=RLIMIT
    )
    expected = {v.property: BOUNDED if v.status == PROVED else v.status for v in explored}
    assert {p.property: p.status for p in proofs} == expected
    assert expected["S-LIVE"] != BOUNDED and "adaptive floor on" in info["threshold"]


@pytest.mark.fidelity
def test_a_fork_with_another_floor_is_refused(cli: Cli, tmp_path: Path) -> None:
    """The per-step threshold is the release's only with the release's floor: a copy of 0.33.0
    whose floor halves the fair share matches none of the releases' loops: its cap is its own
    code, which the scheduler step refuses under a threshold in one line (exit 2); the
    unedited copy runs."""
    root = copy_release("0.33.0", tmp_path / "fork", with_manifest=False)
    scheduler = root / SCHEDULER_FILE
    text = scheduler.read_text()
    assert text.count("input_budget // num_eligible_reqs") == 1
    out = ["--out", str(tmp_path / "out")]
    assert cli("system", str(scheduler), *ARGV, *out).code == 1
    scheduler.write_text(text.replace("// num_eligible_reqs", "// (2 * num_eligible_reqs)"))
    run = cli("system", str(scheduler), *ARGV, *out)
    assert run.code == 2 and run.err.count("\n") == 1, run.err
    assert "needs the release's threshold cap" in run.err


def test_every_state_gets_every_budget_with_its_choices() -> None:
    """The actions at each state of a batch whose instances differ in M and theta: every
    budget 1..M of its own instance, each with the eligible counts of its own M, theta and
    least count (two waiting requests, plus one when b < M)."""
    policy = get_builtin("vllm-0.33")
    small = Config(block=4, prompt=9, max_sched=6, threshold=1)
    large = Config(block=4, prompt=9, max_sched=12, threshold=2)
    instances = [(small, replace(small, prompt=5)), (large, replace(large, prompt=5))]
    model = SchedulerStepModel(policy, instances, adaptive=True)
    (batch,) = model.batches()
    states = model.initial(batch)
    moved = model.successors(batch, states)
    for row, state in enumerate(states):
        group = instances[int(state[0])]
        whole, theta = group[0].max_sched, group[0].threshold
        found = {split_action(a) for a in moved.action[moved.source == row].tolist()}
        assert found == {
            (b, n)
            for b in range(1, whole + 1)
            for n in eligible_choices(whole, theta, 2 + (b < whole))
        }
