"""The scheduler step over 2-3 requests, searched by Z3 (SPEC N1):
:class:`~chunkproof.spec.scheduler_step_symbolic.SymbolicSchedulerStep` under
:func:`~chunkproof.checker.runs.system_prove.prove_system`, against the explorer on
:class:`~chunkproof.spec.scheduler_step.SchedulerStepModel`.

The engines must agree: on a range the explorer checks exhaustively, a bounded search as deep
as the explorer's reachable diameter finds a violation exactly where the explorer does (and
the solver's trace replays on the explicit model), and where the explorer says PROVED it finds
none, which it reports as BOUNDED, never PROVED (with ``unbounded``: PROVED when the search
was complete, no run one step longer passing only new states, :mod:`chunkproof.proofs.complete`,
or by a re-checked Spacer certificate).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import z3
from cli_helpers import Cli
from solver_limits import GUARD_MS, RLIMIT

from chunkproof.checker.cli.defaults import user_space
from chunkproof.checker.engines.explorer import explore_batch
from chunkproof.checker.engines.traces import ModelMismatch
from chunkproof.checker.engines.verdicts import PROVED, VIOLATED
from chunkproof.checker.kinds.system import build
from chunkproof.checker.reports.output import run_folder
from chunkproof.checker.runs import system_prove
from chunkproof.checker.runs.system import explore_system
from chunkproof.checker.runs.system_prove import BOUNDED, prove_system, replayed
from chunkproof.model.builtin import get_builtin
from chunkproof.model.config import Config, Items
from chunkproof.model.policy import LoopRules
from chunkproof.proofs import chc, isolated
from chunkproof.proofs.bounded import SolverTrace, bounded_search
from chunkproof.proofs.certificate import holds, recheck
from chunkproof.source.loading import resolve_policy
from chunkproof.spec.request_symbolic import cells
from chunkproof.spec.scheduler_loops import FINISHED, WAITING
from chunkproof.spec.scheduler_step import (
    FIELDS,
    MAX_SEQS,
    SchedulerStepModel,
    decode_advances,
    request_sets,
    split_action,
)
from chunkproof.spec.scheduler_step_symbolic import (
    SymbolicSchedulerStep,
    SystemCell,
    fields,
    system_cells,
)
from chunkproof.spec.scheduler_trace import replay, run_instance
from chunkproof.spec.space import Space

HOL_RANGE = {"block": "4", "lookahead": "0", "drop": "off", "prompt": "3-4", "max_sched": "8"}
"""The guide's HOL example: 0.33's split zero at the head of the queue."""

RESERVATION = {"block": "2", "lookahead": "3", "drop": "off", "prompt": "3,6", "max_sched": "4"}
"""A reservation zero: it breaks the waiting loop up to 0.32, 0.33 skips the request."""

SHARED_CACHE = {"block": "1", "lookahead": "1", "drop": "on", "threshold": "4", "prompt": "12"}
SHARED_CACHE |= {"max_sched": "8", "layout": "2+4,6+4", "encoder_cache": "8"}
"""The guide's two image requests on one encoder cache: S-LIVE on 0.28 (both hold their first
image, freed only L tokens past the prompt's end, and the second finds no room)."""

DECODE = {"block": "4", "lookahead": "2", "drop": "on", "prompt": "12", "max_sched": "8"}
DECODE |= {"layout": "8+4;0+2,4+2", "encoder_cache": "4"}
"""An image at the prompt's end, which 0.28-0.32 free only L tokens later, through the
request's first decode steps, beside one that needs the whole cache."""

THETA = {"block": "4", "lookahead": "0", "drop": "off", "prompt": "3,20", "max_sched": "12"}
THETA |= {"threshold": "0,5"}
"""C8-C9's per-step threshold: each request capped at 5 while two are eligible."""


def solver_answers(explored: Sequence[Any]) -> dict[str, set[str]]:
    """Per property, the bounded search's verdicts that agree with the explorer's: its own
    VIOLATED; for PROVED, BOUNDED, or PROVED where the search was complete."""
    return {v.property: {BOUNDED, PROVED} if v.status == PROVED else {v.status} for v in explored}


def agree(proofs: Sequence[Any], explored: Sequence[Any]) -> bool:
    """Whether the solver's verdicts agree with the explorer's (:func:`solver_answers`)."""
    answers = solver_answers(explored)
    return answers.keys() == {p.property for p in proofs} and all(
        p.status in answers[p.property] for p in proofs
    )


def space_of(texts: dict[str, str]) -> Space:
    return user_space(texts, None, production=False)


def diameter(name: str, space: Space, k: int) -> int:
    """The explorer's largest BFS depth over every instance: a bounded search this deep covers
    every transition it judges."""
    policy = get_builtin(name)
    model = SchedulerStepModel(policy, request_sets(policy, list(space.configs()), k))
    return max(int(explore_batch(model, batch).depth.max()) for batch in model.batches())


def test_hol_is_found_and_replays(tmp_path: Path) -> None:
    """The guide's HOL range: the solver finds HOL (and STARVE) at the least total T, its
    trace replays step for step, and the file it writes replays too."""
    policy = get_builtin("vllm-0.33")
    space = space_of(HOL_RANGE)
    proofs, info = prove_system(policy, space, 2, depth=2, timeout_ms=GUARD_MS, rlimit=RLIMIT)
    status = {p.property: p.status for p in proofs}
    assert status == {"P0": BOUNDED, "S-LIVE": BOUNDED, "HOL": VIOLATED, "STARVE": VIOLATED}
    hol = next(p for p in proofs if p.property == "HOL")
    example = hol.example()
    assert example is not None and example.witness is not None
    assert sorted(cfg.T for cfg in example.instance) == [3, 4]
    assert "--budget 3-->" in example.trace[0]
    cx = build(policy, example.witness, "HOL", info["max_seqs"], {})
    assert replay(policy, cx) is None


def test_a_complete_search_is_a_proof() -> None:
    """With ``unbounded``, a bounded search no run of one step more outgrows is complete: two
    steps finish every request of the HOL range, so P0 and S-LIVE are PROVED by the bounded
    search itself, before Spacer is asked (:mod:`chunkproof.proofs.complete`)."""
    policy = get_builtin("vllm-0.33")
    proofs, _ = prove_system(
        policy, space_of(HOL_RANGE), 2, 2, timeout_ms=GUARD_MS, rlimit=RLIMIT, unbounded=True
    )
    status = {p.property: p.status for p in proofs}
    assert status == {"P0": PROVED, "S-LIVE": PROVED, "HOL": VIOLATED, "STARVE": VIOLATED}
    for proof in proofs[:2]:
        (cell,) = proof.cells
        assert cell.method == "bounded search"
        assert cell.detail.endswith("no run of 3 steps passes only new states: complete")


def test_three_requests_find_hol() -> None:
    hol = space_of(HOL_RANGE)
    proofs, _ = prove_system(
        get_builtin("vllm-0.33"), hol, 3, depth=1, timeout_ms=GUARD_MS, rlimit=RLIMIT
    )
    assert {p.property: p.status for p in proofs}["HOL"] == VIOLATED


@pytest.mark.parametrize(
    ("name", "texts", "k"),
    [
        ("vllm-0.33", HOL_RANGE, 2),
        ("vllm-0.33", {**HOL_RANGE, "prompt": "3-6", "start": "0,block", "max_sched": "6"}, 2),
        ("vllm-0.33", RESERVATION, 2),
        ("vllm-0.32", RESERVATION, 2),
        ("vllm-0.32", {**RESERVATION, "prompt": "2-4", "max_sched": "2"}, 2),  # M < L
        ("vllm-0.28", {**RESERVATION, "lookahead": "0,2", "prompt": "3-4", "max_sched": "3"}, 2),
        ("vllm-0.33", HOL_RANGE, 3),
        ("vllm-0.32", THETA, 2),  # theta_eff: theta with two eligible requests, else off
        pytest.param("vllm-0.33", THETA, 2, marks=pytest.mark.slow),
        pytest.param(  # each request's e in the Z3 state
            "vllm-0.28", SHARED_CACHE, 2, marks=pytest.mark.slow
        ),
    ],
)
def test_engines_agree(name: str, texts: dict[str, str], k: int) -> None:
    """Per property: explorer VIOLATED iff the bounded search at the explorer's diameter finds
    a (replayed) violation; explorer PROVED iff it finds none, which is BOUNDED, not PROVED."""
    policy, space = get_builtin(name), space_of(texts)
    explored, _ = explore_system(policy, space, k)
    depth = max(diameter(name, space, k), 1)
    proofs, _ = prove_system(policy, space, k, depth=depth, timeout_ms=GUARD_MS, rlimit=RLIMIT)
    expected = {v.property: BOUNDED if v.status == PROVED else v.status for v in explored}
    assert {p.property: p.status for p in proofs} == expected


def test_a_trace_that_does_not_replay_is_an_error() -> None:
    """A symbolic step that breaks on 0.33's reservation zero (as 0.32 does) finds HOL, and
    the replay on 0.33's explicit step refuses it: a mismatch, never a verdict."""
    policy = get_builtin("vllm-0.33")
    (cell,) = cells(space_of(RESERVATION))
    model = SymbolicSchedulerStep(policy, SystemCell.uniform(cell, 2))
    model.rules = LoopRules()
    found = bounded_search(model, "HOL", 2, [z3.Sum(model.tokens)], 60_000)
    assert isinstance(found, SolverTrace)
    with pytest.raises(ModelMismatch):
        replayed(model, "HOL", found)


def test_a_solver_trace_through_a_decode_step_replays() -> None:
    """HOL through a decode step on 0.28 (tests/test_shared_encoder.py): a text request, the
    request whose image ends its prompt and one with images at 0 that need the whole cache,
    as a solver trace of the three-request cell (each request's decode advance in the action)
    replays on the explicit model, its witness and trace lines naming the decode step."""
    texts = DECODE | {"layout": "none;8+4;0+2,4+2"}
    policy = get_builtin("vllm-0.28")
    (cell,) = [
        cell
        for cell in system_cells(space_of(texts), 3)
        if [len(layout) for layout in cell.layouts] == [0, 1, 2]
    ]
    model = SymbolicSchedulerStep(policy, cell)
    text = Config(block=4, prompt=12, max_sched=8, lookahead=2, drop=True, encoder_cache=4)
    instance = [
        text,
        replace(text, items=Items(((8, 4),))),
        replace(text, items=Items(((0, 2), (4, 2)))),
    ]
    budgets, decodes = (8, 4, 4), ((0, 0, 0), (0, 0, 0), (1, 0, 0))
    run = run_instance(policy, tuple(instance), (1, 2, 0), budgets, MAX_SEQS, None, decodes)
    states = [_symbolic_state(row, [0, 1, 2]) for row in run.rows[:3]]
    actions = [[8, 0, 0, 0], [4, 0, 0, 0], [4, 0, 1, 0]]
    solver = z3.Solver()
    solver.add(_pinned(model, instance))
    assert solver.check() == z3.sat
    found = SolverTrace(solver.model(), states[:2], actions[:2], states[2], actions[2], 3)
    got, witness, lines = replayed(model, "HOL", found)
    assert got == tuple(instance) and witness.decodes == decodes
    assert "#1 decodes 1" in lines[2] and "c=12, e=1, decoding" in lines[2]


def test_cli(tmp_path: Path, cli: Cli) -> None:
    out = tmp_path / "out"
    args = ["system", "vllm-0.33", "--prove", "--depth", "2", "--out", str(out)]
    args += [f"--{k.replace('_', '-')}={v}" for k, v in HOL_RANGE.items()]
    run = cli(*args)
    assert run.code == 1
    assert "HOL      VIOLATED" in run.out and "P0       BOUNDED" in run.out
    assert "no violation within 2 steps: not a proof" in run.out
    assert (out / "vllm-0.33" / "system-HOL.json").exists()
    run = cli(*args, "--json")
    assert run.code == 1
    document = run.json()
    verdicts = {v["property"]: v for v in document["verdicts"]}
    assert verdicts["HOL"]["status"] == VIOLATED and verdicts["P0"]["status"] == BOUNDED
    assert document["searched"]["depth"] == 2
    assert document["searched"]["cells_left_out"] == 0
    assert verdicts["HOL"]["example_cell"]["block"] == 4


def test_a_search_that_finds_nothing_exits_unknown(tmp_path: Path, cli: Cli) -> None:
    """No violation within the depth is BOUNDED, not PROVED: exit 3 (SPEC CLI), never 0
    (block-aligned prompts: no zero at the head of the queue)."""
    aligned = {**HOL_RANGE, "prompt": "4,8"}
    args = ["system", "vllm-0.33", "--prove", "--depth", "2", "--out", str(tmp_path), "--json"]
    run = cli(*args, *[f"--{k.replace('_', '-')}={v}" for k, v in aligned.items()])
    assert {v["status"] for v in run.json()["verdicts"]} == {BOUNDED}
    assert run.code == 3


@pytest.mark.parametrize("name", ["vllm-0.32", "vllm-0.33"])
def test_the_symbolic_step_caps_with_the_per_step_threshold(name: str) -> None:
    """The explicit model's theta_eff test (tests/test_scheduler_step.py), step for step on the
    symbolic form: request 0 (T=20) and request 1 (T=3), B=4, theta=5, M=12."""
    policy = get_builtin(name)
    texts = {**THETA, "threshold": "5"}
    (cell,) = cells(space_of(texts))
    model = SymbolicSchedulerStep(policy, SystemCell.uniform(cell, 2))
    named = {str(p): p for p in model.parameters}

    def next_c(state: list[tuple[int, int, int, int]], budget: int) -> list[int]:
        """c of each request after one step from (phase, c, rank, e) per request."""
        s, a = model.state("s"), model.action("a")
        solver = z3.Solver()
        solver.add(model.constraint, named["prompt#0"] == 20, named["prompt#1"] == 3)
        solver.add(*[v == x for v, x in zip(s, [x for part in state for x in part], strict=True)])
        solver.add(a[0] == budget)
        target = model.next(s, a)
        assert solver.check() == z3.sat
        found = solver.model()
        return [found.eval(c).as_long() for c in fields(target)[1]]

    assert next_c([(WAITING, 0, 0, 0), (WAITING, 0, 1, 0)], 12) == [4, 3]
    assert next_c([(WAITING, 0, 1, 0), (FINISHED, 3, 0, 0)], 12) == [12, 3]
    assert next_c([(WAITING, 0, 1, 0), (FINISHED, 3, 0, 0)], 11) == [4, 3]


@pytest.mark.slow
def test_spacer_proves_p0_with_a_certificate_and_is_killed_at_its_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``unbounded``: on the guide's HOL range, with the completeness check left undecided (it
    proves P0 and S-LIVE there: two steps finish every request; ``test_a_complete_search_is_a_
    proof``), Spacer proves P0 (its invariant written as a certificate and re-checked), leaves
    S-LIVE open, which stays BOUNDED once the child is killed at the timeout, and changes
    nothing where the bounded search found a violation.
    Spacer runs with seed 1 and no resource limit (it proves P0 in about 2-4 s quiet): which
    of the default schedule's seeds proves it within its slice depends on what the process
    solved before (two loaded CI runs, when the slices were cut by time, found P0 BOUNDED)."""
    monkeypatch.setattr(chc, "SEEDS", ((1, 0),))
    monkeypatch.setattr(system_prove, "loop_free_run", lambda *args: "unknown")
    with run_folder(tmp_path) as out:
        proofs, info = prove_system(
            get_builtin("vllm-0.33"), space_of(HOL_RANGE), 2, 4, timeout_ms=30_000, out=out,
            unbounded=True,
        )  # fmt: skip
    status = {p.property: p.status for p in proofs}
    assert status == {"P0": PROVED, "S-LIVE": BOUNDED, "HOL": VIOLATED, "STARVE": VIOLATED}
    (p0,) = next(p for p in proofs if p.property == "P0").cells
    assert p0.method == "spacer" and "re-checked" in p0.detail
    (certificate,) = [Path(f) for f in out.written if str(f).endswith(".smt2")]
    assert certificate.exists()
    assert holds(recheck(certificate))
    (live,) = next(p for p in proofs if p.property == "S-LIVE").cells
    assert "Spacer" in live.detail and "undecided in the timeout" in live.detail
    assert info["seconds"] < 120


def test_a_solver_call_in_a_child_is_killed_at_its_deadline() -> None:
    started = time.monotonic()
    assert isolated.call(lambda: time.sleep(600), 0.2) is None
    assert time.monotonic() - started < 10
    assert isolated.call(lambda: 6 * 7, 5) == 42
    assert isolated.call(lambda: 1 // 0, 5) is None


def test_unbounded_needs_prove(cli: Cli) -> None:
    run = cli("system", "vllm-0.33", "--unbounded")
    assert run.code == 2 and run.err.count("\n") == 1 and "only with --prove" in run.err


MIXED = {"block": "4", "lookahead": "0", "drop": "off", "prompt": "16", "max_sched": "6"}
MIXED |= {"layout": "none;1+4,6+4"}
"""The guide's #40707 range: a request with two images the cache holds one at a time, or none."""

ENGINE = {"block": "1", "lookahead": "0", "drop": "off", "prompt": "8", "max_sched": "4"}
ENGINE |= {"layout": "0+6;1+3,4+3"}
"""vLLM's cache is max(M, the model's largest item): 6 beside a 6-embedding image, where a
request with two 3-embedding images alone would have 4 and could not hold both."""

FULL = {"block": "1", "lookahead": "0", "drop": "off", "prompt": "8", "max_sched": "4"}
FULL |= {"layout": "none;0+6"}
"""An image that fills the cache (6) beside a text request, which references none of it."""


@pytest.mark.parametrize(
    ("name", "texts"),
    [
        ("vllm-0.27", MIXED),
        ("vllm-0.28", MIXED),
        ("vllm-0.28", ENGINE),
        ("vllm-0.28", FULL),
        ("vllm-0.28", SHARED_CACHE),
        ("vllm-0.33", SHARED_CACHE),
        ("vllm==0.28.0", SHARED_CACHE),  # real code: its own call gives the items encoded
        ("vllm-0.28", DECODE),
        ("vllm==0.30.0", DECODE),
    ],
)
def test_the_symbolic_step_is_the_explicit_one_on_every_transition(
    name: str, texts: dict[str, str]
) -> None:
    """Every transition the explorer takes from the requests of an item range (each request's
    e, the cache the others reference, items of one pattern or two), asked of the Z3 step at
    the same state, budget and requests: the same next state (each request's list, place, c
    and e) and the same properties broken."""
    policy = resolve_policy(name)
    space = space_of(texts)
    checked = 0
    for instance in request_sets(policy, list(space.configs()), 2):
        explicit = SchedulerStepModel(policy, [instance], symmetry=False)
        (batch,) = explicit.batches()
        explored = explore_batch(explicit, batch)
        by_pattern = sorted(range(2), key=lambda i: len(instance[i].items))
        (cell,) = [
            cell
            for cell in system_cells(space, 2)
            if [len(layout) for layout in cell.layouts]
            == [len(instance[i].items) for i in by_pattern]
        ]
        symbolic = SymbolicSchedulerStep(policy, cell)
        pinned = _pinned(symbolic, [instance[i] for i in by_pattern])
        steps = explored.steps
        for t in range(len(steps.source)):
            row, target = explored.states[steps.source[t]], steps.target[t]
            s, a = symbolic.state("s"), symbolic.action("a")
            solver = z3.Solver()
            solver.add(pinned, a[0] == split_action(int(steps.action[t]))[0])
            state = _symbolic_state(row, by_pattern)
            if symbolic.decodes:
                advance = decode_advances(int(steps.action[t]), 2)
                rank = fields(state, symbolic.pooled).rank
                solver.add(*[a[-2 + i] == advance[rank[i]] for i in range(2)])
            solver.add(*[v == x for v, x in zip(s, state, strict=True)], symbolic.guard(s, a))
            assert solver.check() == z3.sat
            found = solver.model()
            after = [found.eval(v).as_long() for v in symbolic.next(s, a)]
            assert _places(after) == _places(_symbolic_state(target, by_pattern)), (instance, t)
            for pid in symbolic.properties:
                broken = z3.is_true(found.eval(symbolic.violation(pid, s, a)))
                assert broken == bool(steps.bad[pid][t]), (instance, t, pid)
            checked += 1
    assert checked > 0


def _pinned(model: SymbolicSchedulerStep, requests: list[Config]) -> z3.BoolRef:
    """The cell's constraint with each request's prompt, c0, x and items those of
    ``requests``, where they are symbolic (the range fixes every other input)."""
    named = {str(p): p for p in model.parameters}
    equal = [model.constraint]
    for i, cfg in enumerate(requests):
        values = {"prompt": cfg.prompt, "start": cfg.start, "external": cfg.external}
        for j, (start, length) in enumerate(cfg.items):
            values |= {f"item{j}_start": start, f"item{j}_length": length}
        equal += [named[f"{k}#{i}"] == v for k, v in values.items() if f"{k}#{i}" in named]
    return z3.And(*equal)


def _symbolic_state(row: np.ndarray, by_pattern: list[int], pooled: bool = False) -> list[int]:
    """An explicit state row as the Z3 step's state vector, request i being the instance's
    ``by_pattern[i]``: (phase, c, rank, e) per request, and its stale flag when ``pooled``."""
    parts = [row[1 + FIELDS * p : 1 + FIELDS * (p + 1)] for p in range(len(by_pattern))]
    rank = {int(label): p for p, (label, *_) in enumerate(parts)}
    state = []
    for label in by_pattern:
        _, phase, c, e, stale = (int(v) for v in parts[rank[label]])
        state += [phase, c, rank[label], e, *([stale] if pooled else [])]
    return state


def _places(state: list[int], pooled: bool = False) -> list[tuple[int, int, int, int, int]]:
    """Per request: its phase, its place in its list (-1 when finished: the two forms order
    the finished requests differently, and no loop visits them), its c, its e and its stale
    flag (0 without a pool)."""
    phase, c, rank, e, stale = fields(state, pooled)
    places = []
    for i, ph in enumerate(phase):
        ahead = sum(1 for j, other in enumerate(phase) if other == ph and rank[j] < rank[i])
        places.append((ph, -1 if ph == FINISHED else ahead, c[i], e[i], stale[i]))
    return places
