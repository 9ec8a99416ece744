"""The scheduler step over 2-3 requests, searched by the solver (SPEC N1): orchestration of
:func:`~chunkproof.proofs.bounded.bounded_search` on
:class:`~chunkproof.spec.scheduler_step_symbolic.SymbolicSchedulerStep`, one proof cell at a
time.

Per cell (:func:`~chunkproof.spec.scheduler_step_symbolic.system_cells`: the engine's
inputs and each request's encoder-item pattern; with a KV block pool, a pool size of the
given ones, SPEC KV2 rule 5) and property (P0, S-LIVE, HOL, STARVE; with a pool, S-POOL, asked
as a lasso: :class:`~chunkproof.proofs.lasso.LassoModel`):

1. *Scope*: a cell whose constraint holds no request set is empty and judges nothing.
2. *Bounded search* to 1, 2, 4, ... and finally ``depth`` steps (idle steps allowed, so every
   shorter trace counts; a plain solver first, briefly, for an unsat, then Optimize, and
   where Optimize is undecided the plain question again with the whole limits: :func:`_search`),
   the least total T at the first depth that has a violation. A solver trace is replayed on the
   explicit model's own Next (:func:`~chunkproof.spec.scheduler_trace.run_instance`, the
   concrete policy): every state (each request's list, place, c, e and stale flag) must be
   the solver's, and the last step must break the property (a lasso: the run must come back
   to the state its loop starts at), else the tool is wrong
   (:class:`~chunkproof.checker.engines.traces.ModelMismatch`, never a verdict). It is then
   VIOLATED, with the instance, the trace and, with a run folder, a multi-request
   counterexample file.
3. No violation within ``depth`` steps is not a proof: the cell is BOUNDED at that depth.
   With ``unbounded`` the search is first asked whether it was complete: no run of
   ``depth + 1`` steps passes only new states (:func:`~chunkproof.proofs.complete.
   loop_free_run`'s unsat), so every reachable state was within ``depth``; then PROVED.
   Otherwise the cell is asked of Spacer (:func:`~chunkproof.proofs.chc.
   reachable_violation`) in a child process killed at the timeout
   (:func:`~chunkproof.proofs.isolated.call`: Spacer overran its own timeout on this model,
   and a call in progress cannot be interrupted). Spacer's unsat is PROVED only once its
   inductive invariant is written as a certificate and re-checked in a fresh context
   (:mod:`~chunkproof.proofs.certificate`); its sat is VIOLATED, without a trace (one deeper
   than ``depth``); anything else leaves the cell BOUNDED.
4. A timeout of the bounded search is UNKNOWN.

Over the cells a property is VIOLATED if some cell violates it (the least total T is shown),
UNKNOWN if some cell is undecided, BOUNDED if some cell is only bounded (with the depth),
PROVED when every cell holding a request set is, and EMPTY when no cell holds one.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import z3

from chunkproof.checker.engines.traces import ModelMismatch
from chunkproof.checker.engines.verdicts import EMPTY, PROVED, UNKNOWN, VIOLATED
from chunkproof.checker.kinds import save_counterexample
from chunkproof.checker.kinds.system import Witness, build
from chunkproof.checker.reports.output import RunFolder
from chunkproof.checker.runs.requests import check_cell_count
from chunkproof.checker.runs.system import (
    NO_POOL,
    describe_instance,
    step_properties,
    threshold_words,
    trace_lines,
)
from chunkproof.model.config import Config
from chunkproof.model.errors import ChunkproofError
from chunkproof.model.policy import Policy
from chunkproof.proofs import certificate, isolated, solving
from chunkproof.proofs.bounded import SolverTrace, bounded_search, shallow_violation, unrolled
from chunkproof.proofs.chc import reachable_violation
from chunkproof.proofs.complete import loop_free_run
from chunkproof.proofs.lasso import LassoModel
from chunkproof.spec.interface import SymbolicModel
from chunkproof.spec.scheduler_loops import DECODING, RUNNING
from chunkproof.spec.scheduler_step import (
    FIELDS,
    MAX_SEQS,
    PHASE_NAMES,
    step_loop_rules,
    threshold_rule,
)
from chunkproof.spec.scheduler_step_symbolic import (
    SYMBOLIC_REQUESTS,
    SymbolicSchedulerStep,
    SystemCell,
    system_cells,
)
from chunkproof.spec.scheduler_trace import Run, loops_back, run_instance
from chunkproof.spec.space import Space

Place = tuple[str, int, int, int, int]
"""A request's place in a state: its phase's name, its place in its list, c, e and stale."""

BOUNDED = "BOUNDED"
"""No violation within the depth searched: not a proof."""
DEFAULT_DEPTH = 4
MAX_DEPTH = 64
"""Deepest bounded search (the unrolling grows with the depth times the requests; a deeper
violation is Spacer's to find, ``--unbounded``)."""
TIMEOUT_MS = 60_000
QUICK_MS = 2_000
"""The plain solver's try at each depth: most no-violation answers come fast from it, while
its heavy tail is left to Optimize. Under a resource limit (``rlimit``) its try gets the same
share of that limit instead."""


@dataclass(frozen=True)
class CellResult:
    """One property on one cell: its status, how it was found, and for a violation the
    instance (least total T within the depth), its arrival order, budgets and trace lines."""

    cell: SystemCell
    property: str
    status: str
    method: str
    detail: str = ""
    instance: tuple[Config, ...] = ()
    witness: Witness | None = None
    trace: tuple[str, ...] = ()


@dataclass
class SystemProof:
    """One property over every cell (module docstring)."""

    property: str
    status: str
    depth: int
    cells: list[CellResult] = field(default_factory=list)
    counterexample: str | None = None
    picture: str | None = None
    pools: tuple[str, ...] = (NO_POOL,)
    """The pools the search ran on (:data:`~chunkproof.checker.runs.system.NO_POOL`, or the
    sizes asked)."""

    def example(self) -> CellResult | None:
        """The violating cell result of least total T."""
        found = [c for c in self.cells if c.status == VIOLATED and c.witness is not None]
        return min(found, key=lambda c: sum(cfg.tokens for cfg in c.instance), default=None)

    def to_dict(self) -> dict[str, Any]:
        example = self.example()
        return {
            "property": self.property,
            "status": self.status,
            "depth": self.depth,
            "cells": [
                {
                    "cell": r.cell.describe(),
                    "status": r.status,
                    "method": r.method,
                    "detail": r.detail,
                }
                for r in self.cells
            ],
            "example": (
                describe_instance(example.instance, example.witness.blocks)
                if example and example.witness
                else None
            ),
            "example_cell": example.cell.describe() if example else None,
            "trace": list(example.trace) if example else [],
            "counterexample": self.counterexample,
            "picture": self.picture,
        }


def prove_system(
    policy: Policy,
    space: Space,
    requests: int,
    depth: int = DEFAULT_DEPTH,
    max_seqs: int = MAX_SEQS,
    timeout_ms: int = TIMEOUT_MS,
    out: RunFolder | None = None,
    unbounded: bool = False,
    adaptive: bool = False,
    rlimit: int | None = None,
    pools: Sequence[int | str] = (),
) -> tuple[list[SystemProof], dict[str, Any]]:
    """Every property on every cell of ``space`` (module docstring), with the adaptive floor
    when ``adaptive``, the requests sharing a KV block pool of one of ``pools`` (sizes, or
    ``"min"``; empty: no pool; a cell with encoder items is outside the pool model and left
    out); with ``out``, each violated property's counterexample file and picture,
    and the certificates of the cells Spacer proves (``unbounded``). ``rlimit`` bounds each
    query of the bounded search by Z3's resource count as well as by ``timeout_ms``: a bound
    that does not depend on the machine's speed, which a test sets so that no wall clock
    decides its verdict."""
    if requests not in SYMBOLIC_REQUESTS:
        raise ChunkproofError(f"--prove: --requests must be one of {SYMBOLIC_REQUESTS}")
    if not 1 <= depth <= MAX_DEPTH:
        raise ChunkproofError(
            f"--depth {depth}: the bounded search goes 1 to {MAX_DEPTH} steps deep (beyond: "
            "--unbounded)"
        )
    check_cell_count(space)
    started = time.monotonic()
    found = system_cells(space, requests)
    outside = 0
    if pools:
        inside = [cell for cell in found if not any(cell.layouts)]
        outside, found = len(found) - len(inside), inside
    judged_properties = step_properties(bool(pools))
    searched = tuple(str(size) for size in pools) or (NO_POOL,)
    proofs = {pid: SystemProof(pid, EMPTY, depth, pools=searched) for pid in judged_properties}
    judged = 0
    positive = False
    folder = _certificate_folder(policy, out) if unbounded else None
    for index, cell in enumerate(found):
        model = SymbolicSchedulerStep(policy, cell, max_seqs, adaptive, pools)
        positive |= model.threshold_positive
        scope = solving.check_formula(model.constraint, timeout_ms)
        if scope == "unsat":
            continue
        judged += 1
        complete: dict[bool, str] = {}
        for pid in model.properties:
            if scope != "sat":
                result = CellResult(cell, pid, UNKNOWN, "scope", "the scope is undecided")
            else:
                result = _judge(model, pid, depth, timeout_ms, rlimit)
            if unbounded and result.status == BOUNDED:
                result = _complete(model, pid, result, depth, timeout_ms, rlimit, complete)
            if folder is not None and result.status == BOUNDED:
                path = folder / f"cell-{index}-{pid}.smt2"
                result = _unbounded(model, pid, result, path, timeout_ms, depth)
                if result.status == PROVED and out is not None:
                    out.record(path)
            proofs[pid].cells.append(result)
    for proof in proofs.values():
        proof.status = _overall([r.status for r in proof.cells])
        example = proof.example()
        if out is not None and example is not None and example.witness is not None:
            details = {"method": "bounded search", "depth": depth}
            cx = build(policy, example.witness, proof.property, max_seqs, details)
            name = f"system-{proof.property}"
            proof.counterexample, proof.picture = save_counterexample(cx, policy, out, name)
    info = {
        "requests": requests,
        "max_seqs": max_seqs,
        "loops": step_loop_rules(policy).describe(),
        "threshold": threshold_rule(policy, positive, adaptive),
        "adaptive": adaptive,
        "depth": depth,
        "cells": len(found),
        "cells_with_requests": judged,
        # the key scripts read: with a pool, the cells with encoder items (outside its model)
        "cells_left_out": outside,
        "pools": [str(size) for size in pools],
        "unbounded": unbounded,
        "timeout_seconds": timeout_ms / 1000,
        "seconds": round(time.monotonic() - started, 3),
    }
    return list(proofs.values()), info


def _overall(statuses: list[str]) -> str:
    if not statuses:
        return EMPTY
    for status in (VIOLATED, UNKNOWN, BOUNDED):
        if status in statuses:
            return status
    return PROVED


def _spacer_words(info: dict[str, Any]) -> str:
    """The Spacer pass of a run's ``info``, for its header line."""
    if not info.get("unbounded"):
        return ""
    return f", then Spacer on each bounded cell (killed after {info['timeout_seconds']:g} s)"


def _certificate_folder(policy: Policy, out: RunFolder | None) -> Path:
    """Where Spacer's certificates go: the run folder's, else a scratch folder (they are
    still written and re-checked: the re-check reads them)."""
    if out is not None:
        return out.certificates(policy.file_stem)
    return Path(tempfile.mkdtemp(prefix="chunkproof-certificates-"))


def _unbounded(
    model: SymbolicSchedulerStep,
    pid: str,
    bounded: CellResult,
    path: Path,
    timeout_ms: int,
    depth: int,
) -> CellResult:
    """Step 3 of the module docstring: Spacer on a BOUNDED cell, in a child killed at the
    timeout; PROVED only with a re-checked certificate."""
    header = f"{pid} on the scheduler step of {model.policy.name}, cell {model.cell.describe()}"

    def attempt() -> tuple[str, str]:
        question = searched(model, pid)
        found = reachable_violation(question, pid, True, timeout_ms)
        if found.status == "unsat" and found.invariant is not None:
            certificate.write(path, question, pid, found.invariant, f"{header} (spacer)")
        elif found.status == "unsat":
            return "unknown", found.attempts()
        return found.status, found.attempts()

    status, seeds = isolated.call(attempt, timeout_ms / 1000) or ("unknown", "Spacer")
    cell = model.cell
    if status == "unsat":
        confirmed, results = certificate.confirm(path, timeout_ms)
        if confirmed:
            return CellResult(
                cell, pid, PROVED, "spacer", f"{seeds}; certificate {path.name} re-checked"
            )
        return CellResult(
            cell, pid, UNKNOWN, "spacer", f"{seeds}: the invariant did not re-check: {results}"
        )
    if status == "sat":
        return CellResult(
            cell,
            pid,
            VIOLATED,
            "spacer",
            f"{seeds}: a reachable state violates it, deeper than the {depth} steps searched "
            "(raise --depth for a replayed trace)",
        )
    return CellResult(
        cell, pid, BOUNDED, bounded.method, f"{bounded.detail}; {seeds} undecided in the timeout"
    )


def _judge(
    model: SymbolicSchedulerStep,
    pid: str,
    depth: int,
    timeout_ms: int,
    rlimit: int | None = None,
) -> CellResult:
    """Steps 2 and 4 of the module docstring on one cell (3: :func:`_complete`,
    :func:`_unbounded`)."""
    cell = model.cell
    question = searched(model, pid)
    found: SolverTrace | str | None = None
    for bound in _depths(depth):
        found = _search(question, pid, bound, [z3.Sum(model.tokens)], timeout_ms, rlimit)
        if found is not None:
            break
    if isinstance(found, SolverTrace):
        instance, witness, trace = replayed(model, pid, found)
        steps = len(witness.budgets)
        detail = f"a violation {steps} step{'' if steps == 1 else 's'} from an initial state"
        if witness.loop is not None:
            detail = f"a run of {steps} steps whose loop from step {witness.loop} repeats for ever"
        return CellResult(cell, pid, VIOLATED, "bounded search", detail, instance, witness, trace)
    if found == "unknown":
        return CellResult(cell, pid, UNKNOWN, "bounded search", f"timed out at depth {bound}")
    return CellResult(cell, pid, BOUNDED, "bounded search", f"no violation within {depth} steps")


def _search(
    question: SymbolicModel,
    pid: str,
    bound: int,
    objective: list[Any],
    timeout_ms: int,
    rlimit: int | None,
) -> SolverTrace | str | None:
    """Step 2 of the module docstring at one depth: a plain solver's brief try, for an unsat;
    else Optimize for the least violation; and when Optimize is undecided, the plain question
    again with the whole limits, asked of the portfolio in a fresh context
    (:func:`~chunkproof.proofs.solving.check_apart`), whose unsat is an answer too. Measured
    on the pooled STARVE cell of 0.29 (B = 4, L = 0, T in {6, 8}, M = 8, N = 6) at depth 4:
    Optimize's unsat takes about 25 s (past the tests' resource limit), the portfolio's 12 s.
    A violation it finds without Optimize's trace stays undecided ("unknown")."""
    quick = (QUICK_MS, None) if rlimit is None else (timeout_ms, rlimit * QUICK_MS // TIMEOUT_MS)
    if shallow_violation(question, pid, bound, *quick) == "unsat":
        return None
    found = bounded_search(question, pid, bound, objective, timeout_ms, rlimit=rlimit)
    if found != "unknown":
        return found
    plain = solving.check_apart(z3.And(*unrolled(question, pid, bound)), timeout_ms, rlimit)
    return None if plain == "unsat" else found


def _complete(
    model: SymbolicSchedulerStep,
    pid: str,
    bounded: CellResult,
    depth: int,
    timeout_ms: int,
    rlimit: int | None,
    known: dict[bool, str],
) -> CellResult:
    """Step 3 of the module docstring, its first half: a BOUNDED cell is PROVED when no run of
    one step more than the search passes only new states. ``known`` keeps the cell's answers
    (one for the model, one for a lasso question) across its properties."""
    question = searched(model, pid)
    lasso = isinstance(question, LassoModel)
    steps = depth + 1
    if lasso not in known:
        known[lasso] = loop_free_run(question, steps, timeout_ms, rlimit)
    if known[lasso] != "unsat":
        return bounded
    detail = f"{bounded.detail}, and no run of {steps} steps passes only new states: complete"
    return CellResult(bounded.cell, pid, PROVED, bounded.method, detail)


def _depths(depth: int) -> list[int]:
    """1, 2, 4, ... up to ``depth``, then ``depth``: a shallow violation is found by a small
    unrolling (and with a short trace); the last search covers every trace of ``depth`` steps."""
    bounds = [1]
    while bounds[-1] * 2 < depth:
        bounds.append(bounds[-1] * 2)
    return bounds if bounds[-1] == depth else [*bounds, depth]


def searched(model: SymbolicSchedulerStep, pid: str) -> SymbolicModel:
    """What the solver is asked for ``pid``: the model itself, or for a property of runs that
    go on for ever (S-POOL) the lasso question (:class:`~chunkproof.proofs.lasso.LassoModel`)."""
    return LassoModel(model, pid) if pid in model.cycle_properties else model


def replayed(
    model: SymbolicSchedulerStep, pid: str, found: SolverTrace
) -> tuple[tuple[Config, ...], Witness, tuple[str, ...]]:
    """The solver's trace on the explicit model's Next (module docstring, step 2): the
    instance, the witness (arrival order, budgets, the KV block pool) and the trace lines; a
    trace that does not replay is :class:`ModelMismatch`. A lasso's (S-POOL) steps are those
    that move, the loop starting at the one that saved the state; the run must come back to
    it (the final action is none of the run's)."""
    instance = model.instance(found.model)
    states = [*found.states, found.final_state]
    actions = [*found.actions, found.final_action]
    loop = None
    if pid in model.cycle_properties:
        lasso = LassoModel(model, pid)
        states = [lasso.parts(state)[0] for state in states]
        loop = next(i for i, action in enumerate(actions) if lasso.saves(action))
        actions = [action[:-1] for action in actions[:-1]]
    arrival = tuple(sorted(range(model.k), key=lambda i: model.fields(states[0]).rank[i]))
    budgets = tuple(a[0] for a in actions)
    eligible = tuple(a[1] for a in actions) if model.adaptive else None
    decodes = tuple(
        _by_position(model, state, action[len(action) - model.k :] if model.decodes else None)
        for state, action in zip(states[: len(actions)], actions, strict=True)
    )
    blocks = found.model.eval(model.blocks, model_completion=True).as_long() if model.pooled else 0
    hits = connected = None
    if model.pooled:
        pairs = list(zip(states[: len(actions)], actions, strict=True))
        hits = tuple(_by_position(model, state, action[1 : 1 + model.k]) for state, action in pairs)
        connected = tuple(
            _by_position(model, state, action[1 + model.k : 1 + 2 * model.k])
            for state, action in pairs
        )
    run = run_instance(
        model.policy,
        instance,
        arrival,
        budgets,
        model.max_seqs,
        eligible,
        decodes,
        blocks,
        hits,
        connected,
    )
    steps = run.steps
    replays = loops_back(run, loop) if loop is not None else bool(steps) and pid in steps[-1].breaks
    if len(steps) != len(budgets) or not replays:
        raise ModelMismatch(f"{pid}: the solver's trace of the scheduler step does not replay")
    for index, state in enumerate(states):
        if _lists(model, state) != _row_lists(run, index):
            raise ModelMismatch(
                f"{pid}: step {index} of the solver's trace is not the explicit model's state"
            )
    witness = Witness(instance, arrival, budgets, eligible, decodes, blocks, loop, hits, connected)
    return instance, witness, trace_lines(run, witness)


def _by_position(
    model: SymbolicSchedulerStep, state: list[int], values: Sequence[int] | None
) -> tuple[int, ...]:
    """A solver action's per-request values (decode advances, resume hits, connector flags) per
    position of the state row (a request's position is its rank); all 0 where the action has
    none."""
    rank = model.fields(state).rank
    by_position = [0] * len(rank)
    for i, value in enumerate(values or ()):
        by_position[rank[i]] = value
    return tuple(by_position)


def _lists(model: SymbolicSchedulerStep, state: list[int]) -> list[Place]:
    """Per request (label order) in a solver state: its phase, its place in its list (-1 when
    finished: the explicit model orders the finished requests by label; a decoding request's
    in the running list), its c, its e and its stale flag (0 without a pool)."""
    phase, c, rank, e, stale = model.fields(state)
    listed = [RUNNING if ph == DECODING else ph for ph in phase]
    out = []
    for i, r in enumerate(rank):
        place = sum(1 for j, other in enumerate(listed) if other == listed[i] and rank[j] < r)
        name = PHASE_NAMES[phase[i]]
        out.append((name, -1 if name == "finished" else place, c[i], e[i], stale[i]))
    return out


def _row_lists(run: Run, index: int) -> list[Place]:
    """:func:`_lists` of the explicit run's state before step ``index`` (after the last at
    ``len(run.steps)``): its row lists the running list, the waiting queue, then the finished
    requests."""
    row = run.rows[index]
    by_label: dict[int, Place] = {}
    seen: dict[int, int] = {}
    for p in range(run.batch.k):
        label, phase, c, e, stale = (int(v) for v in row[1 + FIELDS * p : 1 + FIELDS * (p + 1)])
        listed = RUNNING if phase == DECODING else phase
        place = seen.get(listed, 0)
        seen[listed] = place + 1
        name = PHASE_NAMES[phase]
        by_label[label] = (name, -1 if name == "finished" else place, c, e, stale)
    return [by_label[label] for label in range(run.batch.k)]


def report_lines(proofs: list[SystemProof], info: dict[str, Any]) -> list[str]:
    """The verdicts as text: one line per property, then per cell its status, and the
    violating instance of least total T with its fixed cell inputs and trace."""
    lines = [
        f"{info['cells_with_requests']} of {info['cells']} cells hold requests; "
        f"{info['requests']} requests per instance (max_num_seqs {info['max_seqs']}, every "
        f"budget 1..M per step{threshold_words(info)}), bounded search to {info['depth']} "
        f"steps{_spacer_words(info)} in {info['seconds']} s",
    ]
    if info.get("pools"):
        lines.append(
            f"KV block pool: N in {', '.join(info['pools'])} (min: the least the release's "
            "start-up check accepts; a pool below it is not run), max_model_len the longest "
            "prompt + 1; each request inside the pool model (fresh, at an identical "
            "request's hit or at a connector's hit x = c0; no junction or uncached prefix; no "
            "internal checkpoints or tail copy); "
            f"{info['cells_left_out']} cell(s) with encoder items left out"
        )
    lines.append("")
    for proof in proofs:
        qualifier = f" (no violation within {proof.depth} steps: not a proof)"
        lines.append(
            f"  {proof.property:<8} {proof.status}{qualifier if proof.status == BOUNDED else ''}"
        )
        for r in proof.cells:
            fixed = ", ".join(f"{k}={v}" for k, v in r.cell.describe().items())
            lines.append(f"      cell {fixed}: {r.status} ({r.method}: {r.detail})")
        example = proof.example()
        if example is not None:
            blocks = example.witness.blocks if example.witness is not None else 0
            lines.append(f"      smallest found: {describe_instance(example.instance, blocks)}")
            lines.extend(f"        {line}" for line in example.trace)
            again = "the same break"
            if example.witness is not None and example.witness.loop is not None:
                again = "back to the loop's first state"
            lines.append(f"      (replayed on the explicit model: the same states, {again})")
        if proof.counterexample is not None:
            lines.append(f"      counterexample: {proof.counterexample}")
            lines.append(f"      picture: {proof.picture}")
    return lines
