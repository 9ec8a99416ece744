"""The loop rules of the scheduler step read from ``schedule()`` (SPEC N2: what a zero
does in each loop; history note section 6).

Every release's ``schedule()`` gives its C-variant's rules, and a copy of 0.33.0 that skips
the split's zero has no HOL where 0.33.0 has it (the guide's fork; fidelity). Small ``schedule()``
sources written here (never vLLM text: the shape of tests/test_schedule_composition.py) pin
the rules a fork can have and what the step makes of each: a ``break`` in the running loop
leaves the running requests after a zero unoffered, a skip after the split ends head-of-line
blocking (both engines agree), and rules the step cannot run are one-line errors naming the
test: a ``continue`` that stays on the same request (``schedule()`` would never return), zero
tests that disagree (the encoder cap's own test counts, one under a guard the model's request
never passes does not), a stage after the last zero test or between the split and its test
where the split's and a later zero's actions differ, a loop with no zero test, another exit
test, a running zero that pops the request.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import Cli
from solver_limits import GUARD_MS, RLIMIT
from test_fidelity import RELEASES
from test_schedule_composition import (
    QUARTER,
    RESERVE_RUNNING,
    RESERVE_WAITING,
    SPLIT_RUNNING,
    SPLIT_WAITING,
    write_scheduler,
)
from vllm_copies import copy_release

from chunkproof.checker.engines.verdicts import PROVED, VIOLATED
from chunkproof.checker.runs.system import explore_system
from chunkproof.checker.runs.system_prove import BOUNDED, prove_system
from chunkproof.model.builtin import policy_for_release
from chunkproof.model.errors import ConfigError
from chunkproof.model.policy import LoopRules, variant_loop_rules
from chunkproof.source.extraction import SCHEDULER_FILE
from chunkproof.source.loading import resolve_policy
from chunkproof.source.policy import source_composition
from chunkproof.spec.scheduler_loops import (
    RUNNING,
    WAITING,
    Got,
    Ops,
    Positions,
    Stages,
    schedule_step,
)
from chunkproof.spec.scheduler_step import step_loop_rules
from chunkproof.spec.space import Space, grid_from

SKIP_AFTER_SPLIT = SPLIT_WAITING.replace(
    "break",
    "self.waiting.pop_request()\n                    self.skipped.append(request)\n"
    "                    continue",
)
"""The waiting loop's split with a zero that takes the request out of the queue (a skip)."""
ZERO = "            if num_new_tokens == 0:\n                {}\n"
SPLIT_ZERO_TEST = "                if num_new_tokens == 0:\n                    break\n"
"""The split's zero test in SPLIT_WAITING."""
STAGE_BEFORE_ZERO = SPLIT_WAITING.replace(SPLIT_ZERO_TEST, QUARTER + ZERO.format("break"))
"""The waiting loop's split with a stage between it and its zero test."""
NO_SPLIT_ZERO = SPLIT_WAITING.replace(SPLIT_ZERO_TEST, "")
"""The waiting loop's split with no zero test after it."""
PLAIN = Ops(
    all_=lambda *terms: all(terms),
    any_=lambda *terms: any(terms),
    not_=lambda term: not term,
    where=lambda cond, then, other: then if cond else other,
    div=lambda a, b: a // b,
    false=False,
)
"""The loop rules' connectives on plain Python values."""
SMALL = {"block": "4", "lookahead": "0", "drop": "off", "prompt": "3-9", "max_sched": "6"}
"""A range where the split's zero breaks the waiting loop of the shape's own rules (HOL)."""


@pytest.mark.fidelity
@pytest.mark.parametrize("version", RELEASES)
def test_every_release_reads_its_variants_loop_rules(version: str) -> None:
    """The zero tests of each release's schedule() give the rules of its C-variant (C9:
    skip after a later stage; before: break in the waiting loop; continue when running)."""
    composition = source_composition(f"vllm=={version}")
    assert composition is not None
    expected = variant_loop_rules(policy_for_release(version).composition)
    assert composition.loop_rules() == expected
    assert expected == LoopRules(later="skip" if composition.name == "C9" else "break")


@pytest.mark.fidelity
def test_a_release_copy_that_skips_the_splits_zero_has_no_hol(tmp_path: Path) -> None:
    """The guide's fork: a copy of 0.33.0 whose waiting loop answers the split's zero with
    ``skip_request(request_queue); continue`` (as it answers the reservation's) reads as a
    schedule() of no C-variant whose waiting zeros all skip; where 0.33.0 read from source
    has HOL and STARVE, the copy has none."""
    root = copy_release("0.33.0", tmp_path / "fork", with_manifest=False)
    scheduler = root / SCHEDULER_FILE
    text = scheduler.read_text()
    indent = " " * 24
    old = f"{indent}if num_new_tokens == 0:\n{indent}    break\n{indent}if (\n"
    assert text.count(old) == 1
    new = f"{indent}if num_new_tokens == 0:\n{indent}    skip_request(request_queue)\n"
    scheduler.write_text(text.replace(old, new + f"{indent}    continue\n{indent}if (\n"))
    space = Space((grid_from({**SMALL, "prompt": "3-4", "max_sched": "8"}),))
    verdicts = {}
    for name in ("vllm==0.33.0", str(scheduler)):
        policy = resolve_policy(name)
        explored, _ = explore_system(policy, space, 2)
        verdicts[policy.rules()] = {v.property: v.status for v in explored}
    assert verdicts == {
        LoopRules(later="skip"): {
            "P0": PROVED,
            "S-LIVE": PROVED,
            "HOL": VIOLATED,
            "STARVE": VIOLATED,
        },
        LoopRules(split="skip", later="skip"): dict.fromkeys(
            ("P0", "S-LIVE", "HOL", "STARVE"), PROVED
        ),
    }


def test_a_running_break_leaves_the_requests_after_a_zero_unoffered(tmp_path: Path) -> None:
    """A fork whose running loop breaks on a zero has that rule; in the step (the loop rules'
    one definition, on plain integers), two running requests offered 6, the first taking 0:
    with ``continue`` the second is offered 6 and takes 4, with ``break`` no loop offers it
    anything and the waiting request behind them gets the budget left."""
    path = write_scheduler(tmp_path, running_zero="break")
    assert resolve_policy(str(path)).rules() == LoopRules(running="break")
    stages = fixed_stages(
        [Got(0, 0, False, False, 0), Got(4, 4, False, False, 0), Got(2, 2, False, False, 0)]
    )
    phases = [RUNNING, RUNNING, WAITING]
    outcomes = {
        action: schedule_step(
            PLAIN,
            Positions(phases, [4, 4, 0], [0] * 3, stages, nothing_held),
            6,
            lambda left: left,
            256,
            LoopRules(running=action),
        )
        for action in ("continue", "break")
    }
    assert outcomes["continue"].chunk == [0, 4, 2] and outcomes["continue"].offered == [6, 6, 2]
    assert outcomes["break"].chunk == [0, 0, 2] and outcomes["break"].offered == [6, 0, 6]


def test_a_chunk_below_zero_is_scheduled_and_gives_its_tokens_back() -> None:
    """SPEC Q3, up to 0.27 (no clamp): a running request whose chunk is -1 (a stage below 0,
    P0) passes the ``== 0`` test and is scheduled, ``token_budget -= -1`` gives one token
    back to the request after it; a request whose code raises schedules nothing and ends the
    step, so no request after it is offered anything."""
    phases = [RUNNING, RUNNING]
    below = fixed_stages([Got(-1, -1, True, False, 0), Got(7, 7, False, False, 0)])
    done = schedule_step(
        PLAIN,
        Positions(phases, [4, 4], [0, 0], below, nothing_held),
        6,
        lambda left: left,
        256,
        LoopRules(),
    )
    assert done.chunk == [-1, 7] and done.offered == [6, 7] and done.left == 0
    assert done.unsafe and not done.crashed
    raising = fixed_stages([Got(0, 0, True, True, 0), Got(7, 7, False, False, 0)])
    done = schedule_step(
        PLAIN,
        Positions(phases, [4, 4], [0, 0], raising, nothing_held),
        6,
        lambda left: left,
        256,
        LoopRules(),
    )
    assert done.chunk == [0, 0] and done.offered == [6, 0] and done.crashed


def guarded_skip(guard: str) -> str:
    """A zero test under ``if guard:`` that skips the request (waiting loop)."""
    return (
        f"            if {guard}:\n"
        "                if num_new_tokens == 0:\n"
        "                    self.waiting.pop_request()\n"
        "                    continue\n"
    )


def fixed_stages(takes: list[Got]) -> Stages:
    """A step that gives the request at position p ``takes[p]`` whatever it is offered."""
    return lambda p, c, offer, where, shared: takes[p]


def nothing_held(p: int, c: object, e: object) -> int:
    """No request references an encoder cache entry (``Held`` without items)."""
    return 0


@pytest.mark.parametrize("split", ["break", "skip"])
@pytest.mark.parametrize("later", ["break", "skip"])
def test_each_waiting_zero_does_its_own_action(split: str, later: str) -> None:
    """Two waiting requests offered 6: the first's zero comes from the split (split value 0)
    or from a later stage (split value 3, chunk 0; or -1, which passes the split's ``== 0``
    test and a later clamp makes 0, SPEC Q3); it breaks the loop, leaving the second
    unoffered, exactly when that zero's action is ``break``, else the second takes 2."""
    rules = LoopRules(split=split, later=later)
    for split_value, action in ((0, split), (3, later), (-1, later)):
        stages = fixed_stages([Got(0, split_value, False, False, 0), Got(2, 2, False, False, 0)])
        at = Positions([WAITING] * 2, [0, 0], [0, 0], stages, nothing_held)
        done = schedule_step(PLAIN, at, 6, lambda left: left, 256, rules)
        assert done.broke == (action == "break")
        second = (0, 0) if action == "break" else (6, 2)
        assert (done.offered[1], done.chunk[1]) == second


@pytest.mark.slow
def test_a_skip_after_the_split_ends_head_of_line_blocking(tmp_path: Path) -> None:
    """The shape's waiting loop breaks on the split's zero: HOL is violated, by both engines;
    a copy that skips the request instead has no HOL, by both engines (the bounded search:
    BOUNDED), and S-LIVE and P0 are unchanged."""
    space = Space((grid_from(SMALL),))
    verdicts = {}
    for name, waiting in (("break", SPLIT_WAITING), ("skip", SKIP_AFTER_SPLIT)):
        policy = resolve_policy(str(write_scheduler(tmp_path / name, waiting=waiting)))
        assert policy.rules() == LoopRules(split=name, later=name)
        explored, _ = explore_system(policy, space, 2)
        proofs, _ = prove_system(policy, space, 2, depth=3, timeout_ms=GUARD_MS, rlimit=RLIMIT)
        verdicts[name] = {v.property: v.status for v in explored}
        assert {p.property: p.status for p in proofs} == {
            pid: BOUNDED if status == PROVED else status for pid, status in verdicts[name].items()
        }
    assert verdicts["break"]["HOL"] == VIOLATED and verdicts["skip"]["HOL"] == PROVED
    for pid in ("P0", "S-LIVE"):
        assert verdicts["break"][pid] == verdicts["skip"][pid]


@pytest.mark.parametrize(
    ("loop", "body"),
    [
        ("waiting", "continue"),
        ("waiting", "logger.debug(request)\n                    continue"),
        ("running", "continue"),
    ],
)
def test_a_continue_that_stays_is_refused(tmp_path: Path, cli: Cli, loop: str, body: str) -> None:
    """A zero answered by a ``continue`` that neither takes the request out of the waiting
    queue (a log line does not) nor steps the running loop's ``req_index`` past it: the loop
    finds the same request again, so schedule() would never return. One line, exit 2; the
    single-request commands still run the policy (its chunk does not depend on the loop)."""
    if loop == "waiting":
        path = write_scheduler(tmp_path, waiting=SPLIT_WAITING.replace("break", body))
    else:
        path = write_scheduler(tmp_path, running_zero=body)
    policy = resolve_policy(str(path))
    rules = policy.rules()
    assert rules is not None and (rules.running if loop == "running" else rules.split) == "stay"
    with pytest.raises(ConfigError, match="never returns"):
        step_loop_rules(policy)
    run = cli("system", str(path), "--block", "4", "--prompt", "3-5", "--max-sched", "4")
    assert run.code == 2 and run.err.count("\n") == 1 and f"the {loop} loop" in run.err, run.err
    out = ["--out", str(tmp_path / "out")]
    assert cli("explore", str(path), "--block", "4", "--prompt", "3-5", *out).code in (0, 1)


@pytest.mark.parametrize(
    "waiting",
    [
        # a stage between the split and its zero test, every zero breaking
        STAGE_BEFORE_ZERO + RESERVE_WAITING + ZERO.format("break"),
        # a zero test the model's request never reaches (no asynchronous KV load)
        guarded_skip("load_kv_async") + SPLIT_WAITING + RESERVE_WAITING + ZERO.format("break"),
    ],
)
def test_rules_are_read_past_what_does_not_change_them(tmp_path: Path, waiting: str) -> None:
    """A stage between the split and its zero test is harmless when every zero breaks, and a
    zero test under a guard the model's request never passes does not count: the rules are
    every release's before C9."""
    path = write_scheduler(tmp_path, waiting=waiting, running=SPLIT_RUNNING + RESERVE_RUNNING)
    composition = source_composition(str(path))
    assert composition is not None and composition.loop_rules() == LoopRules()


def test_a_running_zero_that_pops_the_request_is_named(tmp_path: Path, cli: Cli) -> None:
    """A running loop whose zero takes the request out of a queue has rules the step (which
    keeps a running request in the running list) cannot run: one line, exit 2."""
    body = "self.waiting.pop_request()\n                continue"
    path = write_scheduler(tmp_path, running_zero=body)
    composition = source_composition(str(path))
    assert composition is not None and "out of a queue" in composition.loop_rules().unknown
    run = cli("system", str(path), "--block", "4", "--prompt", "3-5", "--max-sched", "4")
    assert run.code == 2 and run.err.count("\n") == 1 and "out of a queue" in run.err, run.err


@pytest.mark.parametrize(
    ("waiting", "why"),
    [
        (
            SPLIT_WAITING
            + RESERVE_WAITING
            + ZERO.format("break")
            + QUARTER
            + ZERO.format("return"),
            "does return",
        ),
        (
            SPLIT_WAITING
            + RESERVE_WAITING
            + ZERO.format(
                "self.waiting.pop_request()\n                self.x.append(request)\n"
                "                continue"
            )
            + QUARTER
            + ZERO.format("break"),
            "after the split disagree (skip, break)",
        ),
        (SPLIT_WAITING + RESERVE_WAITING, "a stage of the waiting loop comes after its last zero"),
        (
            ZERO.format("break") + NO_SPLIT_ZERO + RESERVE_WAITING,
            "the waiting loop tests no zero after the split",
        ),
        (
            guarded_skip("request.has_encoder_inputs")
            + SPLIT_WAITING
            + RESERVE_WAITING
            + ZERO.format("break"),
            "up to the split disagree (skip, break)",
        ),
        (
            STAGE_BEFORE_ZERO
            + RESERVE_WAITING
            + ZERO.format("self.waiting.pop_request()\n                continue"),
            "runs between the split and its zero test",
        ),
        (
            NO_SPLIT_ZERO + RESERVE_WAITING,
            "the waiting loop tests no zero",
        ),
        (
            SPLIT_WAITING.replace("if num_new_tokens == 0:", "if num_new_tokens < 2:")
            + RESERVE_WAITING
            + ZERO.format("break"),
            "leaves on another test",
        ),
    ],
)
def test_rules_the_step_cannot_run_are_named(
    tmp_path: Path, cli: Cli, waiting: str, why: str
) -> None:
    """Zero tests of an action the step does not model, that disagree within one part of the
    waiting loop, a stage after the last one, or another exit test: no rules, and ``system``
    names why in one line (exit 2)."""
    path = write_scheduler(tmp_path, waiting=waiting, running=SPLIT_RUNNING + RESERVE_RUNNING)
    composition = source_composition(str(path))
    assert composition is not None and why in composition.loop_rules().unknown
    run = cli("system", str(path), "--block", "4", "--prompt", "3-5", "--max-sched", "4")
    assert run.code == 2 and run.err.count("\n") == 1 and why in run.err, run.err
