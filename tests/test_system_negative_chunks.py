"""SPEC Q3 in the scheduler step over several requests: the loops act on the chunk the release's
code gives after every clamp it applies, P0-violating or not, and the system properties judge
every step whose code does not raise.

A split returning -1 is the case. 0.28-0.33's reservation clamps it to 0 (``max(n, 0)``); the
waiting loop's split test is ``num_new_tokens == 0``, which -1 passes, so the zero is the
reservation's (0.33: ``skip_request``; 0.28-0.32: ``break``). Up to 0.27 nothing clamps it: the
request is scheduled -1 tokens and ``token_budget -= num_new_tokens`` gives one back. A step
where every request gets -1 or 0 makes no progress: S-LIVE, as P1 for one request, besides P0.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import z3
from cli_helpers import Cli
from solver_limits import GUARD_MS, RLIMIT
from test_system_prove import _pinned, _places, _symbolic_state
from vllm_copies import copy_release

from chunkproof.checker.cli.defaults import user_space
from chunkproof.checker.engines.explorer import explore_batch
from chunkproof.checker.engines.verdicts import PROVED, VIOLATED
from chunkproof.checker.runs.system import explore_system
from chunkproof.checker.runs.system_prove import BOUNDED, prove_system
from chunkproof.model.builtin import get_builtin
from chunkproof.model.config import Config
from chunkproof.model.errors import EXIT_VIOLATED
from chunkproof.model.policy import Policy
from chunkproof.source.extraction import SCHEDULER_FILE
from chunkproof.source.loading import resolve_policy
from chunkproof.spec.scheduler_loops import WAITING
from chunkproof.spec.scheduler_step import FIELDS, SchedulerStepModel, request_sets
from chunkproof.spec.scheduler_step_symbolic import SymbolicSchedulerStep, system_cells
from chunkproof.spec.scheduler_trace import run_instance

ALWAYS = "    return -1\n"
RARE = "    if c == 4 and cfg.tokens == 9:\n        return -1\n    return n\n"
"""-1 only for the request of 9 tokens at c = 4 (after its first chunk of one block): one
state of the running loop."""
LONGEST = "    if cfg.tokens == 9:\n        return -1\n    return n\n"
"""-1 for every step of the request of 9 tokens (at the head of the queue, a zero with a
request behind it)."""

RANGE = {"block": "4", "lookahead": "0", "drop": "off", "prompt": "8-9", "max_sched": "4"}


def _split(tmp_path: Path, body: str, base: str = "vllm-latest") -> Policy:
    """A user split ``(cfg, c, n)`` running ``body``, in the composition of built-in ``base``
    (its caps, encoder stage, reservation and loop rules)."""
    path = tmp_path / "negative_split.py"
    path.write_text(f"def split(cfg, c, n):\n{body}")
    user = resolve_policy(f"{path}:split")
    built = get_builtin(base)
    split = user.stage("split")
    assert split is not None
    stages = tuple(split if s.name == "split" else s for s in built.stages)
    return replace(built, name=user.name, stages=stages)


def _first_step(policy: Policy, tokens: tuple[int, int], budget: int) -> dict[str, Any]:
    """The explicit model's step from both requests waiting at 0, in order, offered
    ``budget``: what each took and was offered, and the properties broken."""
    instance = tuple(Config(block=4, prompt=t, max_sched=4) for t in tokens)
    model = SchedulerStepModel(policy, [instance], symmetry=False)
    (batch,) = model.batches()
    label = np.array([[0, 1]])
    phase = np.full((1, 2), WAITING)
    zero = np.zeros(1, dtype=np.int64)
    nothing = phase * 0
    row = model.arrange(batch, zero, label, phase, nothing, nothing, phase, nothing)
    moved = model.step(batch, row, zero, np.array([budget]))
    (lane,) = range(len(moved.source))
    got: dict[str, Any] = {name: int(values[lane]) for name, values in moved.record.items()}
    got["breaks"] = {pid for pid in model.properties if moved.bad[pid][lane]}
    got["follow"] = bool(moved.follow[lane])
    got["c"] = [int(v) for v in moved.target[lane][3::FIELDS]]
    return got


# -- what one step does --------------------------------------------------------------------------


def test_a_clamped_negative_split_is_skipped_and_the_step_stalls(tmp_path: Path) -> None:
    """0.33: the split's -1 passes the split's ``== 0`` test, the reservation clamps it to 0
    and ``skip_request`` passes the request: no break (no HOL), nothing scheduled, S-LIVE and
    P0 on the same step, which does not lead on."""
    got = _first_step(_split(tmp_path, ALWAYS), (8, 8), 4)
    assert (got["chunk0"], got["chunk1"], got["offered0"], got["offered1"]) == (0, 0, 4, 4)
    assert got["breaks"] == {"P0", "S-LIVE"}
    assert not got["follow"]


@pytest.mark.parametrize("base", ["vllm-0.28", "vllm-0.32"])
def test_up_to_032_the_clamped_zero_breaks_the_waiting_loop(tmp_path: Path, base: str) -> None:
    """0.28-0.32: the reservation's zero breaks the waiting loop, so the request behind the
    one whose split is -1 waits although the budget would serve it: HOL, and a step that
    schedules nothing offered M (S-LIVE, STARVE), with P0. 0.33 skips the request instead."""
    got = _first_step(_split(tmp_path, LONGEST, base), (9, 8), 4)
    assert (got["chunk0"], got["chunk1"], got["offered1"]) == (0, 0, 0)
    assert got["breaks"] == {"P0", "HOL", "S-LIVE", "STARVE"}
    latest = _first_step(_split(tmp_path, LONGEST), (9, 8), 4)
    assert (latest["chunk0"], latest["chunk1"], latest["breaks"]) == (0, 4, {"P0"})


def test_without_a_reservation_a_negative_chunk_is_scheduled(tmp_path: Path) -> None:
    """Up to 0.27 nothing clamps the split: the request is admitted with -1 tokens, the budget
    grows by one (the second request is offered 5 of M = 4) and c would move back. Every
    chunk is at most 0: no progress, S-LIVE besides P0."""
    got = _first_step(_split(tmp_path, ALWAYS, "vllm-0.27"), (8, 8), 4)
    assert (got["chunk0"], got["chunk1"], got["offered0"], got["offered1"]) == (-1, -1, 4, 5)
    assert got["left"] == 6
    assert got["c"] == [-1, -1]
    assert got["breaks"] == {"P0", "S-LIVE"}
    assert not got["follow"]


def test_a_negative_chunk_beside_progress_is_progress(tmp_path: Path) -> None:
    """Up to 0.27: the request of 9 tokens takes -1, the one behind it the budget left, one
    more than offered the step (this split passes n on): the step makes progress (no S-LIVE),
    and breaks P0."""
    got = _first_step(_split(tmp_path, LONGEST, "vllm-0.27"), (9, 8), 4)
    assert (got["chunk0"], got["chunk1"], got["offered1"]) == (-1, 5, 5)
    assert got["breaks"] == {"P0"}


def test_a_raising_split_is_p0_alone_and_ends_the_step(tmp_path: Path) -> None:
    """A step whose code raises schedules nothing and visits no request after it (the engine
    core is down): P0, no system property, and the request behind is not offered anything."""
    got = _first_step(_split(tmp_path, "    assert c > 0\n    return n\n"), (8, 8), 4)
    assert (got["chunk0"], got["chunk1"], got["offered1"]) == (0, 0, 0)
    assert got["breaks"] == {"P0"}


def test_the_trace_records_the_negative_chunk(tmp_path: Path) -> None:
    """The counterexample trace: the request is scheduled its -1 (SPEC Q3), the stages show
    the split's -1, and the step breaks P0 and S-LIVE."""
    policy = _split(tmp_path, ALWAYS, "vllm-0.27")
    instance = tuple(Config(block=4, prompt=8, max_sched=4) for _ in range(2))
    run = run_instance(policy, instance, (0, 1), [4], 256)
    (only,) = run.steps
    assert [(r.scheduled, r.chunk) for r in only.requests] == [(True, -1), (True, -1)]
    assert [r.stages.split for r in only.requests if r.stages] == [-1, -1]
    assert set(only.breaks) == {"P0", "S-LIVE"}


# -- the two forms agree ---------------------------------------------------------------------

CASES = [
    ("vllm-latest", ALWAYS),
    ("vllm-latest", RARE),
    ("vllm-latest", LONGEST),
    ("vllm-0.32", LONGEST),
    ("vllm-0.27", ALWAYS),
    ("vllm-0.27", RARE),
]
IDS = ["033-always", "033-rare", "033-head", "032-head", "027-always", "027-rare"]


@pytest.mark.parametrize(("base", "body"), CASES, ids=IDS)
def test_the_symbolic_step_is_the_explicit_one(tmp_path: Path, base: str, body: str) -> None:
    """Every transition the explorer takes, asked of the Z3 step at the same state, budget and
    requests: the same next state where the search leads on, and the same properties broken
    (P0 and the system properties on the P0 steps too)."""
    policy = _split(tmp_path, body, base)
    space = user_space(RANGE, None, production=False)
    checked = 0
    for instance in request_sets(policy, list(space.configs()), 2):
        explicit = SchedulerStepModel(policy, [instance], symmetry=False)
        (batch,) = explicit.batches()
        explored = explore_batch(explicit, batch)
        (cell,) = system_cells(space, 2)
        symbolic = SymbolicSchedulerStep(policy, cell)
        pinned = _pinned(symbolic, list(instance))
        steps = explored.steps
        for t in range(len(steps.source)):
            s, a = symbolic.state("s"), symbolic.action("a")
            state = _symbolic_state(explored.states[steps.source[t]], [0, 1])
            solver = z3.Solver()
            solver.add(pinned, a[0] == int(steps.action[t]), symbolic.guard(s, a))
            solver.add(*[v == x for v, x in zip(s, state, strict=True)])
            assert solver.check() == z3.sat
            found = solver.model()
            follows = z3.is_true(found.eval(symbolic.follows(s, a)))
            assert follows == bool(steps.follow[t]), (instance, t)
            if follows:
                after = [found.eval(v).as_long() for v in symbolic.next(s, a)]
                target = _symbolic_state(steps.target[t], [0, 1])
                assert _places(after) == _places(target), (instance, t)
            for pid in symbolic.properties:
                broken = z3.is_true(found.eval(symbolic.violation(pid, s, a)))
                assert broken == bool(steps.bad[pid][t]), (instance, t, pid)
            checked += 1
    assert checked > 0


@pytest.mark.parametrize(("base", "body"), CASES, ids=IDS)
def test_the_engines_agree(tmp_path: Path, base: str, body: str) -> None:
    """Per property: explorer VIOLATED iff the bounded search as deep as the explorer's
    reachable diameter finds a (replayed) violation, PROVED iff it finds none (BOUNDED). S-LIVE
    and P0 are VIOLATED in every case: a request is never scheduled, or its chunk is -1."""
    policy = _split(tmp_path, body, base)
    space = user_space(RANGE, None, production=False)
    explored, _ = explore_system(policy, space, 2)
    model = SchedulerStepModel(policy, request_sets(policy, list(space.configs()), 2))
    depth = max(int(explore_batch(model, batch).depth.max()) for batch in model.batches())
    proofs, _ = prove_system(
        policy, space, 2, depth=max(depth, 1), timeout_ms=GUARD_MS, rlimit=RLIMIT
    )
    status = {v.property: v.status for v in explored}
    assert status["S-LIVE"] == status["P0"] == VIOLATED
    expected = {pid: BOUNDED if s == PROVED else s for pid, s in status.items()}
    assert {p.property: p.status for p in proofs} == expected


# -- real release trees ------------------------------------------------------------------------

SPLIT_START = "        start = (\n            request.num_computed_tokens\n"
"""The first statement of the split's body in 0.26.0 and 0.33.0."""

TREE_ALWAYS = "        return -1\n"
TREE_RARE = (
    "        if request.num_computed_tokens == 4 and request.num_tokens == 9:\n"
    "            return -1\n"
)
CLI_RANGE = ["--requests", "2", "--block", "4", "--lookahead", "0", "--drop", "off"]
CLI_RANGE += ["--prompt", "8-9", "--max-sched", "4"]


def _edited_tree(version: str, into: Path, body: str) -> str:
    """A copy of release ``version`` whose split runs ``body`` first."""
    root = copy_release(version, into, with_manifest=True)
    scheduler = root / SCHEDULER_FILE
    text = scheduler.read_text()
    assert text.count(SPLIT_START) == 1
    scheduler.write_text(text.replace(SPLIT_START, body + SPLIT_START))
    return str(root)


def _system(cli: Cli, tree: str, out: Path, *extra: str) -> dict[str, dict[str, Any]]:
    run = cli("system", tree, *CLI_RANGE, *extra, "--json", "--out", str(out))
    assert run.code == EXIT_VIOLATED, run.out + run.err
    return {v["property"]: v for v in run.json()["verdicts"]}


@pytest.mark.fidelity
@pytest.mark.parametrize(
    ("version", "body", "words"),
    [
        ("0.33.0", TREE_ALWAYS, "schedules nothing"),
        ("0.33.0", TREE_RARE, "schedules nothing"),
        ("0.26.0", TREE_ALWAYS, "below 0, c moves back"),
        ("0.26.0", TREE_RARE, "below 0, c moves back"),
    ],
    ids=["033-always", "033-rare", "026-always", "026-rare"],
)
def test_a_tree_whose_split_returns_minus_one_livelocks(
    cli: Cli, tmp_path: Path, version: str, body: str, words: str
) -> None:
    """The report's case: ``_mamba_block_aligned_split`` returning -1 (always, or only at
    c = 4 of the request of 9 tokens) said S-LIVE PROVED, P0 alone VIOLATED. Both forms: S-LIVE
    VIOLATED besides P0, the same verdicts, and the S-LIVE file says it breaks P0 too."""
    tree = _edited_tree(version, tmp_path / "tree", body)
    explored = _system(cli, tree, tmp_path / "explore")
    proved = _system(cli, tree, tmp_path / "prove", "--prove", "--depth", "3")
    assert explored["S-LIVE"]["status"] == explored["P0"]["status"] == VIOLATED
    assert proved["S-LIVE"]["status"] == proved["P0"]["status"] == VIOLATED
    for pid in ("HOL", "STARVE"):
        assert explored[pid]["status"] == PROVED
        assert proved[pid]["status"] in (BOUNDED, "UNKNOWN")
    for found in (explored, proved):
        cx = json.loads(Path(found["S-LIVE"]["counterexample"]).read_text())
        assert words in cx["verdict"] and "also breaks P0" in cx["verdict"]
        assert "returns -1" in cx["verdict"]
