"""The scheduler-step model (SPEC N1): one ``schedule()`` step over several requests,
explored by the generic explorer (:mod:`chunkproof.checker.engines.explorer`).

Reference values come from the single-request forms: :func:`chunkproof.model.trajectory.run`
and :func:`chunkproof.model.step.step`, the policy's concrete stages.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import Cli

from chunkproof.checker.cli.defaults import system_space, user_space
from chunkproof.checker.engines.abstraction import check_abstraction
from chunkproof.checker.engines.explorer import NO_WITNESS, Explored, explore_batch
from chunkproof.checker.runs.system import explore_system
from chunkproof.model.builtin import get_builtin
from chunkproof.model.config import Config, Items
from chunkproof.model.errors import ConfigError
from chunkproof.model.step import step
from chunkproof.model.trajectory import run
from chunkproof.proofs import solving
from chunkproof.spec.kv_blocks import held_in_list
from chunkproof.spec.scheduler_loops import FINISHED, RUNNING, WAITING
from chunkproof.spec.scheduler_step import (
    FIELDS,
    PHASE_NAMES,
    STEP_FIXED,
    SchedulerBatch,
    SchedulerStepModel,
    describe_state,
    make_scheduler_batch,
    request_sets,
)
from chunkproof.spec.scheduler_step_symbolic import SymbolicSchedulerStep, system_cells


def explore(model: SchedulerStepModel) -> list[Explored]:
    return [explore_batch(model, batch) for batch in model.batches()]


def one(model: SchedulerStepModel) -> Explored:
    (explored,) = explore(model)
    return explored


def positions(row: np.ndarray) -> list[tuple[int, int, int]]:
    """(label, phase, c) per position of a state row."""
    values = [int(v) for v in row[1:]]
    return [(values[i], values[i + 1], values[i + 2]) for i in range(0, len(values), FIELDS)]


def walk(model: SchedulerStepModel, explored: Explored, budgets: Sequence[int]) -> list[int]:
    """The chunks one request gets along the explored transitions under ``budgets`` (the last
    repeating), until the request finishes, the last budget gives 0 or the policy crashes."""
    batch = explored.batch
    index = {int(key): i for i, key in enumerate(model.key(batch, explored.states))}
    transition = {
        (int(s), int(a)): t
        for t, (s, a) in enumerate(zip(explored.steps.source, explored.steps.action, strict=True))
    }
    here, chunks = 0, list[int]()
    for i in range(10_000):
        budget = budgets[min(i, len(budgets) - 1)]
        t = transition[(here, budget)]
        if explored.steps.bad["P0"][t]:
            return chunks  # the policy crashed: the run ends (SPEC P0)
        chunk = int(explored.steps.record["chunk0"][t])
        if chunk:
            chunks.append(chunk)
        if not explored.steps.follow[t]:
            if chunk == 0 and i < len(budgets) - 1:
                continue  # a zero before the repeating budget: the same state, next budget
            return chunks
        here = index[int(model.key(batch, explored.steps.target[t : t + 1])[0])]
    raise AssertionError("the walk did not end")


def witness(explored: Explored, pid: str, instance: int = 0) -> int | None:
    found = int(explored.witness[pid][instance])
    return None if found == NO_WITNESS else found


# -- (a) one request: the single-request model's chunks ------------------------------------------

ALONE = [
    ("vllm-0.33", Config(block=16, prompt=49, max_sched=16, lookahead=3)),
    ("vllm-0.33", Config(block=16, prompt=49, max_sched=16, lookahead=1)),
    ("vllm-0.33", Config(block=4, prompt=5, max_sched=4, lookahead=2)),
    ("vllm-0.28", Config(block=8, prompt=30, max_sched=12, lookahead=2, drop=True)),
    ("vllm-0.27", Config(block=8, prompt=21, max_sched=12, start=8)),
    ("vllm-0.15", Config(block=4, prompt=11, max_sched=6)),
]


@pytest.mark.parametrize(("name", "cfg"), ALONE, ids=lambda v: getattr(v, "name", v))
def test_one_request_gives_the_single_request_chunks(name: str, cfg: Config) -> None:
    policy = get_builtin(name)
    assert policy.accepts(cfg) is None
    model = SchedulerStepModel(policy, [(cfg,)])
    explored = one(model)
    sequences = [[b] for b in range(1, cfg.max_sched + 1)]
    sequences += [[cfg.max_sched, 3, 1, cfg.max_sched - 1, 2], [2, 1, cfg.max_sched]]
    for budgets in sequences:
        assert walk(model, explored, budgets) == run(policy, cfg, budgets).chunks, budgets


def test_one_request_system_liveness_is_p1() -> None:
    """SPEC K: vllm-0.33, B=16, L=3, T=49, M=16 is stuck at c=46 (S-LIVE is violated there);
    with L=1 it finishes."""
    policy = get_builtin("vllm-0.33")
    stuck = one(
        SchedulerStepModel(policy, [(Config(block=16, prompt=49, max_sched=16, lookahead=3),)])
    )
    found = witness(stuck, "S-LIVE")
    assert found is not None
    assert positions(stuck.states[stuck.steps.source[found]]) == [(0, RUNNING, 46)]
    fine = one(
        SchedulerStepModel(policy, [(Config(block=16, prompt=49, max_sched=16, lookahead=1),)])
    )
    assert witness(fine, "S-LIVE") is None


# -- (b) head-of-line blocking --------------------------------------------------------------------

# A split zero: budget below a block floors X's first chunk to 0; Y finishes within it.
SPLIT_X = Config(block=16, prompt=40, max_sched=16)
SPLIT_Y = Config(block=16, prompt=5, max_sched=16)
# A reservation zero: X (T=3 <= L) gets 2 from the split and 0 from the reservation.
RESERVE_X = Config(block=2, prompt=3, max_sched=4, lookahead=3)
RESERVE_Y = Config(block=2, prompt=10, max_sched=4, lookahead=3)


def hol_step(explored: Explored) -> tuple[SchedulerBatch, list[tuple[int, int, int]], int]:
    found = witness(explored, "HOL")
    assert found is not None
    row = explored.states[explored.steps.source[found]]
    return explored.batch, positions(row), int(explored.steps.action[found])


@pytest.mark.parametrize("name", ["vllm-0.33", "vllm-0.28"])
def test_hol_behind_a_split_zero(name: str) -> None:
    policy = get_builtin(name)
    assert policy.accepts(SPLIT_X) is None and policy.accepts(SPLIT_Y) is None
    batch, state, budget = hol_step(one(SchedulerStepModel(policy, [(SPLIT_X, SPLIT_Y)])))
    head, behind = (batch.instances[0][label] for label, _, _ in state)
    assert [phase for _, phase, _ in state] == [WAITING, WAITING]
    assert (head, behind) == (SPLIT_X, SPLIT_Y)
    assert budget < SPLIT_X.block
    assert step(policy, head, 0, budget).split == 0
    assert step(policy, behind, 0, budget).chunk > 0
    explored = one(SchedulerStepModel(policy, [(SPLIT_X, SPLIT_Y)]))
    starved = witness(explored, "STARVE")
    assert starved is not None  # the same budget for ever: a self-loop
    source = explored.states[explored.steps.source[starved]]
    assert np.array_equal(explored.steps.target[starved], source)


def test_hol_behind_a_reservation_zero_up_to_0_32() -> None:
    policy = get_builtin("vllm-0.32")
    assert policy.accepts(RESERVE_X) is None and policy.accepts(RESERVE_Y) is None
    batch, state, budget = hol_step(one(SchedulerStepModel(policy, [(RESERVE_X, RESERVE_Y)])))
    head = batch.instances[0][state[0][0]]
    assert head == RESERVE_X
    taken = step(policy, head, 0, budget)
    assert taken.split > 0 and taken.chunk == 0
    assert step(policy, RESERVE_Y, 0, budget).chunk > 0


def test_0_33_skips_a_reservation_zero() -> None:
    """Same requests as above: 0.33 skips X (skip_request) and admits Y; no HOL anywhere."""
    model = SchedulerStepModel(get_builtin("vllm-0.33"), [(RESERVE_X, RESERVE_Y)])
    explored = one(model)
    assert witness(explored, "HOL") is None
    assert witness(explored, "STARVE") is None
    start = [(0, WAITING, 0), (1, WAITING, 0)]
    admits = [
        positions(explored.steps.target[t])
        for t in np.flatnonzero(explored.steps.action == 2)
        if positions(explored.states[explored.steps.source[t]]) == start
    ]
    assert admits == [[(1, RUNNING, 2), (0, WAITING, 0)]]


def test_running_loop_continues_past_a_stuck_request() -> None:
    """vllm-0.33, T=17, B=16, L=3 is stuck at c=14 (SPEC K); a request behind it is still
    admitted in the same step (a running request's zero is ``continue``), and joins the
    running list behind it."""
    stuck = Config(block=16, prompt=17, max_sched=16, lookahead=3)
    other = Config(block=16, prompt=40, max_sched=16, lookahead=3)
    explored = one(SchedulerStepModel(get_builtin("vllm-0.33"), [(stuck, other)]))
    label = {cfg: i for i, cfg in enumerate(explored.batch.instances[0])}
    source = [(label[stuck], RUNNING, 14), (label[other], WAITING, 0)]
    after = [
        positions(explored.steps.target[t])
        for t in np.flatnonzero(explored.steps.action == 16)
        if positions(explored.states[explored.steps.source[t]]) == source
    ]
    assert after == [[(label[stuck], RUNNING, 14), (label[other], RUNNING, 16)]]


def transitions_from(
    explored: Explored, state: list[tuple[int, int, int]], pid: str | None = None
) -> dict[int, list[tuple[int, int, int]]]:
    """Budget -> target of the transitions leaving ``state`` (those violating ``pid``)."""
    steps = explored.steps
    return {
        int(steps.action[t]): positions(steps.target[t])
        for t in range(len(steps.source))
        if positions(explored.states[steps.source[t]]) == state
        and (pid is None or steps.bad[pid][t])
    }


def test_max_num_seqs_stops_the_waiting_loop() -> None:
    """With max_num_seqs = 1 the waiting loop admits one request per free seat; a request
    waiting behind a stuck running one starves (STARVE, not HOL: nothing broke)."""
    policy = get_builtin("vllm-0.33")
    short, long = (
        Config(block=16, prompt=5, max_sched=32),
        Config(block=16, prompt=40, max_sched=32),
    )
    start = [(0, WAITING, 0), (1, WAITING, 0)]  # labels: short 0, long 1
    one_seat = one(SchedulerStepModel(policy, [(short, long)], max_seqs=1))
    two_seats = one(SchedulerStepModel(policy, [(short, long)], max_seqs=2))
    assert transitions_from(one_seat, start)[32] == [(1, WAITING, 0), (0, FINISHED, 5)]
    assert transitions_from(two_seats, start)[32] == [(1, RUNNING, 16), (0, FINISHED, 5)]
    stuck = Config(block=16, prompt=17, max_sched=16, lookahead=3)
    other = Config(block=16, prompt=40, max_sched=16, lookahead=3)
    trapped = [(0, RUNNING, 14), (1, WAITING, 0)]  # labels: stuck 0, other 1
    one_seat = one(SchedulerStepModel(policy, [(stuck, other)], max_seqs=1))
    two_seats = one(SchedulerStepModel(policy, [(stuck, other)], max_seqs=2))
    assert transitions_from(one_seat, trapped, "STARVE").keys() == {16}
    assert not transitions_from(one_seat, trapped, "HOL")
    assert not transitions_from(two_seats, trapped, "STARVE")


# -- (c) symmetry reduction -----------------------------------------------------------------------


def test_symmetry_same_verdicts_fewer_states() -> None:
    policy = get_builtin("vllm-0.33")
    grid = [
        Config(block=4, prompt=t, max_sched=8, lookahead=lookahead)
        for lookahead in (0, 2)
        for t in (3, 5, 9)
    ]
    sets = request_sets(policy, grid, 3)
    assert any(len(set(group)) < 3 for group in sets)
    reduced = explore(SchedulerStepModel(policy, sets, symmetry=True))
    full = explore(SchedulerStepModel(policy, sets, symmetry=False))
    for a, b in zip(reduced, full, strict=True):
        assert a.batch.instances == b.batch.instances
        for pid in a.witness:
            assert np.array_equal(a.witness[pid] != NO_WITNESS, b.witness[pid] != NO_WITNESS), pid
            assert np.array_equal(a.violating[pid] > 0, b.violating[pid] > 0), pid
    assert sum(len(e.states) for e in reduced) < sum(len(e.states) for e in full)
    assert any(a.witness[pid].max() > NO_WITNESS for a in reduced for pid in a.witness)


def test_equal_requests_have_one_initial_state() -> None:
    policy = get_builtin("vllm-0.33")
    pair = [(SPLIT_Y, SPLIT_Y)]
    for symmetry, count in ((True, 1), (False, 2)):
        model = SchedulerStepModel(policy, pair, symmetry=symmetry)
        assert len(model.initial(next(model.batches()))) == count


# -- (d) the explorer runs the model unchanged ---------------------------------------------------


def test_explorer_paths_replay_on_the_model() -> None:
    """Every reachable state's BFS path re-runs on the model's own Next, and every state is
    unique and canonical."""
    policy = get_builtin("vllm-0.33")
    model = SchedulerStepModel(policy, [(SPLIT_X, SPLIT_Y, SPLIT_Y), (RESERVE_X, RESERVE_Y)])
    for explored in explore(model):
        batch = explored.batch
        keys = model.key(batch, explored.states)
        assert len(np.unique(keys)) == len(keys)
        for state in range(len(explored.states)):
            path = explored.path(state)
            here = explored.states[path[0][0] if path else state]
            for parent, action in path:
                assert np.array_equal(explored.states[parent], here)
                steps = model.step(batch, here[None, :], np.array([0]), np.array([action]))
                here = steps.target[0]
            assert np.array_equal(here, explored.states[state]), describe_state(batch, here)


# --- the command: chunkproof system ---------------------------------------------------------


def test_system_command_finds_hol_with_its_trace(cli: Cli) -> None:
    """The default requests on vllm-0.33, without a pool and in every pool of 2 to 32 blocks
    the start-up check accepts: HOL behind a split zero (B=4: a 4-token request at the head
    offered 3 tokens floors to 0, the 3-token one behind it would finish), S-LIVE from the
    lookahead livelock (T=5, L=2), S-POOL from that livelock in a pool (the stuck request
    holds the blocks the other's last chunk asks, so the other preempts itself and starts
    again, for ever), and P0 holds; each verdict's range names the pools it was judged on;
    exit 1."""
    run = cli("system", "vllm-0.33", "--json")
    assert run.code == 1
    document = run.json()
    verdicts = {v["property"]: v for v in document["verdicts"]}
    assert {pid: v["status"] for pid, v in verdicts.items()} == {
        "P0": "PROVED",
        "S-LIVE": "VIOLATED",
        "HOL": "VIOLATED",
        "STARVE": "VIOLATED",
        "S-POOL": "VIOLATED",
    }
    hol = verdicts["HOL"]
    assert hol["example"] == "#0: T=3 B=4 L=0 M=8; #1: T=4 B=4 L=0 M=8; no pool"
    assert hol["trace"][-2].startswith("running []; waiting [#1(T=4, c=0), #0(T=3, c=0)]")
    assert hol["trace"][-2].endswith("--budget 3-->")
    assert hol["range"]["pool"] == "none,min,2-32"
    assert "L=2" in verdicts["S-LIVE"]["example"]
    pool = verdicts["S-POOL"]
    assert pool["range"]["pool"] == "min,2-32"
    assert pool["range"]["connector"] == "synchronous"
    assert pool["example"] == "#0: T=5 B=4 L=2 M=8; #1: T=6 B=4 L=2 M=8; a pool of 11 KV blocks"
    assert any("preempts #1" in line for line in pool["trace"])
    explored = document["explored"]
    assert explored["instances"] == hol["instances"] > pool["instances"] > 0
    assert explored["instances"] == explored["unpooled_instances"] + pool["instances"]


def test_system_command_without_the_break_has_no_hol(cli: Cli) -> None:
    """With B = 1 no split floors a chunk to 0 and L = 0 reserves nothing: HOL and S-LIVE
    hold (PROVED over every instance), exit 0."""
    run = cli("system", "vllm-0.33", "--block", "1", "--lookahead", "0", "--drop", "off",
              "--prompt", "1-6", "--max-sched", "4", "--json")  # fmt: skip
    assert run.code == 0, run.out
    statuses = {v["property"]: v["status"] for v in run.json()["verdicts"]}
    assert set(statuses.values()) == {"PROVED"}


ITEMS_RANGE = ["--block", "4", "--lookahead", "0", "--drop", "off", "--prompt", "16",
               "--max-sched", "6", "--items", "none;1+4,6+4"]  # fmt: skip
"""#40707's request (two images the encoder cache holds one at a time) and a text request."""


@pytest.mark.parametrize(("name", "live"), [("vllm-0.27", "VIOLATED"), ("vllm-0.28", "PROVED")])
def test_a_request_with_encoder_items_runs_beside_a_text_request(
    cli: Cli, tmp_path: Path, name: str, live: str
) -> None:
    """An instance mixes a request with encoder items and one without: #40707's livelock on
    0.27 with a text request beside it (which finishes; the image request stays at c=4, its
    first image encoded: e=1), gone on 0.28, and the file replays. The set of two image
    requests is an instance too: they share the encoder cache."""
    run = cli("system", name, *ITEMS_RANGE, "--json", "--out", str(tmp_path))
    document = run.json()
    assert (document["explored"]["instances"], document["explored"]["left_out"]) == (3, 0)
    verdicts = {v["property"]: v for v in document["verdicts"]}
    assert verdicts["S-LIVE"]["status"] == live
    if live == "VIOLATED":
        assert verdicts["S-LIVE"]["example"] == (
            "#0: T=16 B=4 L=0 M=6; #1: T=16 B=4 L=0 M=6 items=1+4,6+4"
        )
        last = verdicts["S-LIVE"]["trace"][-1]
        assert last.startswith("running [#1(T=16, c=4, e=1)]; waiting []")
        replay = cli("replay", verdicts["S-LIVE"]["counterexample"], "--json")
        assert replay.code == 0 and replay.json()["reproduces"] is True


def test_two_requests_with_encoder_items_share_the_cache_at_vllms_budget() -> None:
    """The explicit model takes two requests with items at b0 >= C (vLLM's b0 = C) and
    refuses them below it (the budget they share would decide); the symbolic one has a cell
    per pair of item patterns, and the cell of two requests with items holds no request set
    below it."""
    item = Config(block=4, prompt=16, max_sched=6, items=Items(((1, 4), (6, 4))))
    text = Config(block=4, prompt=16, max_sched=6)
    policy = get_builtin("vllm-0.27")
    SchedulerStepModel(policy, [(item, text)])
    SchedulerStepModel(policy, [(item, item)])
    one = replace(item, items=Items(((1, 4),)), encoder_cache=8)
    low = [replace(cfg, encoder_budget=5) for cfg in (one, replace(text, encoder_cache=8))]
    with pytest.raises(ConfigError, match="compute budget of at least the encoder cache"):
        SchedulerStepModel(policy, [(low[0], low[0])])
    assert request_sets(policy, low, 2) == [(low[0], low[1]), (low[1], low[1])]
    assert len(request_sets(policy, [item, text], 2)) == 3
    texts = {"block": "4", "lookahead": "0", "drop": "off", "prompt": "16", "max_sched": "6"}
    space = user_space({**texts, "layout": "none;1+4,6+4"}, None, production=False)
    described = [cell.describe().get("items") for cell in system_cells(space, 2)]
    assert described == [None, "none | 1+4,6+4", "1+4,6+4 | 1+4,6+4"]
    low_texts = {**texts, "layout": "none;1+4", "encoder_cache": "8", "encoder_budget": "5"}
    held = [
        solving.check_formula(SymbolicSchedulerStep(policy, cell).constraint, 10_000)
        for cell in system_cells(user_space(low_texts, None, production=False), 2)
    ]
    assert held == ["sat", "sat", "unsat"]


def test_prove_judges_cells_whose_requests_carry_items(cli: Cli) -> None:
    """#40707 across two requests on 0.27: one holds its first image and floors the chunk
    before the second to 0, the other's first image finds no room; found by the Z3 step in
    the cell of two image requests and replayed (each request's e too)."""
    run = cli("system", "vllm-0.27", *ITEMS_RANGE, "--prove", "--depth", "1")
    assert run.code == 1
    assert "3 of 3 cells hold requests" in run.out and "S-LIVE   VIOLATED" in run.out
    assert "items=1+4,6+4 | 1+4,6+4: VIOLATED" in run.out
    held = r"running \[#(\d)\(T=16, c=4, e=1\)\]; waiting \[#(\d)\(T=16, c=0, e=0\)\]"
    found = re.search(held, run.out)
    assert found is not None and found.group(1) != found.group(2)


def test_equal_requests_keep_their_labels_in_a_reduced_search() -> None:
    """Under symmetry reduction two equal requests share one label in the state rows; the
    report's trace is their labelled run, so each is printed under its own."""
    texts = {"block": "4", "lookahead": "0", "drop": "off", "prompt": "16", "max_sched": "6"}
    space = user_space({**texts, "layout": "1+4,6+4"}, None, production=False)
    verdicts, _ = explore_system(get_builtin("vllm-0.27"), space, 2, symmetry=True)
    (live,) = [v for v in verdicts if v.property == "S-LIVE"]
    assert live.trace and all("#0" in line and "#1" in line for line in live.trace)


def test_system_command_refuses_what_it_cannot_check(cli: Cli) -> None:
    """A range the release refuses entirely is EMPTY (exit 2); --budget is refused."""
    run = cli("system", "vllm-0.27", "--lookahead", "0", "--drop", "on", "--json")
    assert run.code == 2
    assert {v["status"] for v in run.json()["verdicts"]} == {"EMPTY"}
    run = cli("system", "vllm-0.33", "--budget", "1-2")
    assert run.code == 2 and run.err.count("\n") == 1 and "every budget 1..M" in run.err
    run = cli("system", "vllm-0.33", "--requests", "5")
    assert run.code == 2 and "--requests must be 1 to 4" in run.err
    run = cli("system", "vllm-0.33", "--requests", "4", "--prompt", "1-48", "--block", "4,8")
    assert run.code == 2 and "request sets of 4 requests" in run.err and run.out == ""


@pytest.mark.parametrize("name", ["vllm-0.33", "vllm-0.28", "vllm-0.15"])
def test_the_single_request_abstraction_is_exact_on_the_default_requests(name: str) -> None:
    """Issue 11 item 3: on ``chunkproof system``'s default requests, two at a time, every
    (state, budget) pair of the single-request model (SPEC S4) is offered to some request in a
    reachable global state, none beyond them, and every per-request verdict is the same."""
    policy = get_builtin(name)
    sets = request_sets(policy, list(system_space().configs()), 2)
    found = check_abstraction(policy, sets)
    assert found.configurations > 0 and found.single_pairs > 0
    assert found.realized_pairs == found.single_pairs and found.beyond_pairs == 0
    assert not found.only_single and not found.only_scheduler
    assert sum(found.both.values()) > 0  # the releases' violations are found in both


def test_the_system_command_reports_the_abstraction(cli: Cli) -> None:
    run = cli("system", "vllm-0.33", "--abstraction", "--json")
    found = run.json()["abstraction"]
    assert found["realized_pairs"] == found["single_request_pairs"] > 0
    assert found["violated_in_both"] == {"P1": 4, "P4": 4, "P6": 1}  # P6: the drop with L = 2
    text = cli("system", "vllm-0.33", "--abstraction").out
    assert "violated in only the scheduler step (S4 unsound): none" in text


SHARED_CACHE_RANGE = ["--block", "1", "--lookahead", "1", "--drop", "on", "--threshold", "4",
                      "--prompt", "12", "--max-sched", "8", "--items", "2+4,6+4",
                      "--encoder-cache", "8"]  # fmt: skip
"""Two requests with two adjacent images each and a cache that holds one request's both."""


def test_two_requests_deadlock_on_the_shared_encoder_cache(cli: Cli) -> None:
    """0.28 frees an image once c >= its end + L: both requests hold their first image at c = 5
    while the second has no room, for ever (S-LIVE); each alone never livelocks (P1), so the
    abstraction reports P1 in the scheduler step only (S4 does not cover the cache another
    request holds). 0.33 frees at the end: no deadlock. (The real code agrees:
    tests/test_shared_encoder.py.)"""
    run = cli("system", "vllm-0.28", *SHARED_CACHE_RANGE, "--abstraction", "--json")
    document = run.json()
    verdicts = {v["property"]: v for v in document["verdicts"]}
    assert verdicts["S-LIVE"]["status"] == "VIOLATED"
    assert "c=5, e=1" in verdicts["S-LIVE"]["trace"][-1]
    assert document["abstraction"]["violated_only_in_the_scheduler_step"] == {
        "P1": ["T=12 B=1 L=1 M=8 theta=4 D=on items=2+4,6+4 C_enc=8"]
    }
    alone = cli("check", "vllm-0.28", *SHARED_CACHE_RANGE, "--json").json()
    assert {v["property"]: v["status"] for v in alone["verdicts"]}["P1"] == "PROVED"
    newer = cli("system", "vllm-0.33", *SHARED_CACHE_RANGE, "--json").json()
    assert {v["property"]: v["status"] for v in newer["verdicts"]}["S-LIVE"] == "PROVED"


# -- (d) the per-step threshold of C8-C9 ----------------------------------------------------------


@pytest.mark.parametrize("name", ["vllm-0.32", "vllm-0.33"])
def test_the_per_step_threshold_caps_each_request_only_when_two_are_eligible(name: str) -> None:
    """History note 6: from 0.31 theta_eff is theta when more than one request is eligible, else
    0. Two waiting requests (T=20, B=4, theta=5, M=12) offered 12: each is offered at most 5,
    which the split floors to 4. Once the other has finished, the request offered the whole
    budget is alone and takes 12; offered 11, another request took the rest (a decode), so
    theta caps it again. In 0.30 (static theta) it is capped alone too."""
    policy = get_builtin(name)
    long, short = (
        Config(block=4, prompt=20, max_sched=12, threshold=5),
        Config(block=4, prompt=3, max_sched=12, threshold=5),
    )
    assert [step(policy, long, 0, b).chunk for b in (12, 11, 5)] == [12, 8, 4]
    both = one(SchedulerStepModel(policy, [(long, long)]))
    assert transitions_from(both, [(0, WAITING, 0), (0, WAITING, 0)])[12] == [
        (0, RUNNING, 4),
        (0, RUNNING, 4),
    ]
    mixed = one(SchedulerStepModel(policy, [(long, short)]))
    label = {cfg: i for i, cfg in enumerate(mixed.batch.instances[0])}
    alone = [(label[long], WAITING, 0), (label[short], FINISHED, 3)]
    after = transitions_from(mixed, alone)
    assert after[12][0] == (label[long], RUNNING, 12)
    assert after[11][0] == (label[long], RUNNING, 4)
    static = one(SchedulerStepModel(get_builtin("vllm-0.30"), [(long, short)]))
    assert transitions_from(static, alone)[12][0] == (label[long], RUNNING, 4)


def test_a_threshold_with_a_cap_of_its_own_code_is_refused() -> None:
    """Under C8-C9 a cap the model does not know could read the eligible requests any way."""
    policy = get_builtin("vllm-0.33")
    cap = policy.stage("cap")
    assert cap is not None
    own = replace(
        policy,
        stages=tuple(
            replace(s, function=lambda cfg, c, n: min(n, cfg.tokens - c)) if s.name == "cap" else s
            for s in policy.stages
        ),
    )
    for theta in (5, 1):
        cfg = Config(block=4, prompt=12, max_sched=8, threshold=theta)
        with pytest.raises(ConfigError, match="needs the release's threshold cap"):
            SchedulerStepModel(own, [(cfg, cfg)])
    SchedulerStepModel(own, [(replace(cfg, threshold=0),) * 2])


def test_the_system_report_names_the_threshold_rule(cli: Cli) -> None:
    """The per-step threshold and its fixed adaptive floor are named where a threshold is on,
    and only there (0.30's static threshold has no such rule)."""
    texts = ["--block", "4", "--lookahead", "0", "--drop", "off", "--prompt", "3,20"]
    texts += ["--max-sched", "12"]
    rule = "threshold per step: theta from 2 eligible requests, else off; adaptive floor off"
    assert rule in cli("system", "vllm-0.33", *texts, "--threshold", "0,5").out
    assert rule in cli("system", "vllm-0.33", *texts, "--threshold", "5", "--prove").out
    assert rule not in cli("system", "vllm-0.33", *texts, "--threshold", "0").out
    assert rule not in cli("system", "vllm-0.30", *texts, "--threshold", "5").out


@pytest.mark.parametrize("flag", [(), ("--prove",)])
def test_the_system_report_names_every_input_it_fixes(cli: Cli, flag: tuple[str, ...]) -> None:
    """Both forms of ``system`` name what the policy's step fixes and what the scheduler step
    fixes beyond it (no preemption, no decode steps), in the text and in ``--json``."""
    texts = ["--block", "4", "--lookahead", "0", "--drop", "off", "--prompt", "3,5"]
    texts += ["--max-sched", "4", *flag]
    expected = [*get_builtin("vllm-0.33").fixed, *STEP_FIXED]
    assert f"fixed: {'; '.join(expected)}" in cli("system", "vllm-0.33", *texts).out.splitlines()
    assert cli("system", "vllm-0.33", *texts, "--json").json()["fixed"] == expected


def test_the_running_loop_spends_the_budget_it_schedules() -> None:
    """vllm-0.33, B=4, M=8: a running request at c=8 of T=9 takes its last token from the
    budget 8; the waiting request behind it is offered the 7 left, which the split floors to
    4 (offered 8 or more, it would get 8)."""
    policy = get_builtin("vllm-0.33")
    short, long = Config(block=4, prompt=9, max_sched=8), Config(block=4, prompt=20, max_sched=8)
    explored = one(SchedulerStepModel(policy, [(short, long)]))
    start = [(0, RUNNING, 8), (1, WAITING, 0)]  # labels: short 0, long 1
    assert transitions_from(explored, start)[8] == [(1, RUNNING, 4), (0, FINISHED, 9)]


def split_needing_a_budget(cfg: Config, c: int, n: int) -> int:
    """A split that raises when offered nothing (a stage vLLM never calls with 0 tokens)."""
    assert n > 0
    return n


def test_no_loop_reaches_a_request_when_no_budget_is_left() -> None:
    """vLLM's loops run while token_budget > 0: a request, running or waiting, behind one that
    took the whole budget is not reached, so a split that raises on 0 breaks no step (P0).
    With theta = 2 (C9: each of two eligible requests capped at 2) both requests run, and a
    budget of 2 goes to the first; at Init a budget of 2 goes to the head of the queue."""
    policy = get_builtin("vllm-0.33")
    own = replace(
        policy,
        stages=tuple(
            replace(s, function=split_needing_a_budget, source=None) if s.name == "split" else s
            for s in policy.stages
        ),
    )
    first, second = (Config(block=4, prompt=p, max_sched=4, threshold=2) for p in (12, 13))
    explored = one(SchedulerStepModel(own, [(first, second)]))
    both_running = [(0, RUNNING, 2), (1, RUNNING, 2)]  # labels: first 0, second 1
    assert transitions_from(explored, both_running)[2] == [(0, RUNNING, 4), (1, RUNNING, 2)]
    assert witness(explored, "P0") is None


def test_a_one_token_chunk_admits_a_request() -> None:
    """B=1: a waiting request offered 1 token gets a chunk of 1 and joins the running list
    (any chunk > 0 admits it), ahead of a request the loop did not reach."""
    policy = get_builtin("vllm-0.33")
    first, second = (Config(block=1, prompt=p, max_sched=4) for p in (5, 6))
    explored = one(SchedulerStepModel(policy, [(first, second)]))
    start = [(0, WAITING, 0), (1, WAITING, 0)]  # labels: first 0, second 1
    assert transitions_from(explored, start)[1] == [(0, RUNNING, 1), (1, WAITING, 0)]


def test_starve_counts_a_one_token_chunk() -> None:
    """vllm-0.32, B=1, L=2, budget 1: the head (T=2) is held to 0 by the reservation and
    breaks the waiting loop; the request behind it (T=3) would get 1 token alone: STARVE."""
    policy = get_builtin("vllm-0.32")
    head, behind = (Config(block=1, prompt=p, max_sched=4, lookahead=2) for p in (2, 3))
    assert step(policy, head, 0, 1).chunk == 0 and step(policy, behind, 0, 1).chunk == 1
    explored = one(SchedulerStepModel(policy, [(head, behind)]))
    start = [(0, WAITING, 0), (1, WAITING, 0)]  # labels: head 0, behind 1
    assert 1 in transitions_from(explored, start, "STARVE")


def test_0_33_skips_a_zero_after_a_one_token_split() -> None:
    """The same requests on vllm-0.33: the split gives the head 1 token and the reservation
    takes it back; a zero after the split is skip_request, so the request behind is admitted."""
    policy = get_builtin("vllm-0.33")
    head, behind = (Config(block=1, prompt=p, max_sched=4, lookahead=2) for p in (2, 3))
    taken = step(policy, head, 0, 1)
    assert (taken.split, taken.chunk) == (1, 0)
    explored = one(SchedulerStepModel(policy, [(head, behind)]))
    start = [(0, WAITING, 0), (1, WAITING, 0)]  # labels: head 0, behind 1
    assert transitions_from(explored, start)[1] == [(1, RUNNING, 1), (0, WAITING, 0)]


def encoder_passing_everything(cfg: Config, c: int, n: int) -> int:
    """An encoder stage of a user's own: no cap."""
    return n


def test_an_encoder_stage_of_its_own_code_is_refused_only_where_requests_share_the_cache() -> None:
    """Which items an unknown encoder stage's call encodes is unknown, and only requests that
    share the encoder cache need it: two requests with items are refused, one beside a text
    request is not, in both forms of the step."""
    policy = get_builtin("vllm-0.27")
    own = replace(
        policy,
        stages=tuple(
            replace(s, function=encoder_passing_everything) if s.name == "encoder" else s
            for s in policy.stages
        ),
    )
    item = Config(block=4, prompt=16, max_sched=6, items=Items(((1, 4), (6, 4))))
    text = Config(block=4, prompt=16, max_sched=6)
    SchedulerStepModel(own, [(item, text)])
    refused = "encoder stage is none of the releases'"
    with pytest.raises(ConfigError, match=refused):
        SchedulerStepModel(own, [(item, item)])
    texts = {"block": "4", "lookahead": "0", "drop": "off", "prompt": "16", "max_sched": "6"}
    space = user_space({**texts, "layout": "none;1+4,6+4"}, None, production=False)
    _, beside, shared = system_cells(space, 2)
    model = SymbolicSchedulerStep(own, beside)
    assert len(model.next(model.state("s"), model.action("a"))) == len(model.state("t"))
    with pytest.raises(ConfigError, match=refused):
        SymbolicSchedulerStep(own, shared)


def test_the_state_key_tells_every_global_state_apart() -> None:
    """The visited set's key is one-to-one on the rows a batch can hold: any instance, any
    order of the labels, any phase, c and e per position."""
    policy = get_builtin("vllm-0.27")
    item = Config(block=4, prompt=9, max_sched=6, items=Items(((1, 4),)))
    groups = [
        (replace(item, prompt=t), replace(item, prompt=u, items=Items(())), item)
        for t in (5, 9)
        for u in (3, 7)
    ]
    model = SchedulerStepModel(policy, groups)
    (batch,) = list(model.batches())
    rng = np.random.default_rng(7)
    size, k = 20_000, batch.k
    rows = np.zeros((size, 1 + FIELDS * k), dtype=np.int64)
    rows[:, 0] = rng.integers(0, len(batch), size)
    labels = np.argsort(rng.random((size, k)), axis=1)
    for p in range(k):
        rows[:, 1 + FIELDS * p] = labels[:, p]
        rows[:, 2 + FIELDS * p] = rng.integers(0, 3, size)
        rows[:, 3 + FIELDS * p] = rng.integers(0, batch.radix, size)
        rows[:, 4 + FIELDS * p] = rng.integers(0, batch.items, size)
    distinct = len(np.unique(rows, axis=0))
    assert distinct > size // 2
    assert len(np.unique(model.key(batch, rows))) == distinct


def test_a_step_allocates_what_the_encoder_call_scheduled_at_the_value_it_was_handed() -> None:
    """vllm-0.26 (the encoder cap before the split), L=1, B=8, D on, items [4, 10), [11, 12),
    [12, 18), cache 8: at c=8 with the first item held (e=1) and a budget of 4, the call is
    handed n=4, schedules the second item, refuses the third and stops the chunk the EAGLE
    shift (1) before it: 3 tokens. The request allocates the second item (e=2), though the
    chunk it takes ends before it; the call at the capped 3 would not have scheduled it."""
    policy = get_builtin("vllm-0.26")
    items = Items(((4, 6), (11, 1), (12, 6)))
    cfg = Config(
        block=8,
        prompt=18,
        max_sched=10,
        lookahead=1,
        drop=True,
        items=items,
        encoder_cache=8,
        encoder_budget=8,
    )
    assert step(policy, cfg, 8, 4).chunk == 3
    model = SchedulerStepModel(policy, [(cfg,)])
    (batch,) = list(model.batches())
    state = np.array([[0, 0, RUNNING, 8, 1, 0]])
    moved = model.step(batch, state, np.array([0]), np.array([4]))
    assert moved.target.tolist() == [[0, 0, RUNNING, 11, 2, 0]]


def test_the_state_key_holds_a_decoding_request_past_its_prefill() -> None:
    """0.28 frees an image once c >= its end + L (encoder-and-loops note 2.4): a request whose
    image ends at its prompt's end decodes on to c = E + L, and the key must still tell those
    states apart (the digit of c spans 0..T + L, not 0..T)."""
    policy = get_builtin("vllm-0.28")
    cfg = Config(block=4, prompt=8, max_sched=8, lookahead=2, items=Items(((4, 4),)))
    model = SchedulerStepModel(policy, [(cfg, replace(cfg, items=Items(())))])
    (batch,) = list(model.batches())
    top = cfg.tokens + cfg.lookahead  # the largest c a decoding request reaches
    phases, cs = np.arange(len(PHASE_NAMES)), np.arange(top + 1)
    grid = np.meshgrid(phases, cs, phases, cs, indexing="ij")
    rows = np.zeros((grid[0].size, 1 + FIELDS * batch.k), dtype=np.int64)
    for p in range(batch.k):
        rows[:, 1 + FIELDS * p] = p
        rows[:, 2 + FIELDS * p] = grid[2 * p].ravel()
        rows[:, 3 + FIELDS * p] = grid[2 * p + 1].ravel()
    assert len(np.unique(model.key(batch, rows))) == len(rows)


def test_each_request_has_its_own_free_margin() -> None:
    """A request's free margin is its own release rule over its own configuration: on 0.28,
    L for a request with encoder items, 0 for one without, in the order the instance lists
    them (the two sit in different parts of the batch)."""
    with_items = Config(block=4, prompt=16, max_sched=8, lookahead=2, drop=True)
    with_items = replace(with_items, items=Items(((1, 4),)))
    without = replace(with_items, items=Items(()))
    model = SchedulerStepModel(get_builtin("vllm-0.28"), [(without, with_items)])
    (batch,) = model.batches()
    assert batch.margin.tolist() == [0, 2]


def test_a_pooled_engine_takes_max_model_len_one_past_its_longest_prompt() -> None:
    """A pooled instance's max_model_len is its longest prompt + 1 (SPEC P8's, KV2 rule 5), so
    a request at its prompt's end still holds the block of its lookahead slot (rule 1): B = G
    = 4, P = 8, L = 1 holds 3 attention blocks and L + 1 Mamba blocks, not 2 and 2."""
    short = Config(block=4, prompt=5, max_sched=8, lookahead=1)
    longest = Config(block=4, prompt=8, max_sched=8, lookahead=1)
    batch = make_scheduler_batch([(short, longest)], None, [20])
    assert batch.model_len.tolist() == [9]
    assert held_in_list(longest, 8, 0, int(batch.model_len[0])) == 3 + 2


def test_s_pool_holds_a_run_to_the_steps_offered_the_whole_budget() -> None:
    """S-POOL judges the runs whose every step is offered M
    (:meth:`SchedulerStepModel.cycle_edges`): in 0.28's least pool (4 blocks) T = 9 beside
    T = 3 is preempted for ever by steps offered M = 8, a lasso the explorer finds; in a pool
    of 5 the request's last chunk fits and there is none."""
    policy = get_builtin("vllm-0.28")
    group = tuple(Config(block=8, prompt=prompt, max_sched=8) for prompt in (3, 9))
    found = []
    for blocks in (4, 5):
        model = SchedulerStepModel(policy, [group], blocks=[blocks])
        (batch,) = model.batches()
        found.append(int(explore_batch(model, batch).witness["S-POOL"][0]) != NO_WITNESS)
    assert found == [True, False]
