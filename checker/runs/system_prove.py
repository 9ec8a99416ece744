"""The scheduler step over 2-3 requests, searched by the solver (SPEC N1): orchestration of
:func:`~chunkproof.proofs.bounded.bounded_search` on
:class:`~chunkproof.spec.scheduler_step_symbolic.SymbolicSchedulerStep`, one proof cell at a
time.

Per cell (:func:`~chunkproof.spec.scheduler_step_symbolic.system_cells`: the engine's
inputs and each request's encoder-item pattern) and property (P0, S-LIVE, HOL, STARVE):

1. *Scope*: a cell whose constraint holds no request set is empty and judges nothing.
2. *Bounded search* to 1, 2, 4, ... and finally ``depth`` steps (idle steps allowed, so every
   shorter trace counts; a plain solver first, briefly, for an unsat, then Optimize), the
   least total T at the first depth that has a violation. A solver trace is replayed on the
   explicit model's own Next (:func:`~chunkproof.spec.scheduler_trace.run_instance`, the concrete
   policy): every state (each request's list, place, c and e) must be the solver's and the
   last step must break the property, else
   the tool is wrong (:class:`~chunkproof.checker.engines.traces.ModelMismatch`, never a verdict).
   It
   is then VIOLATED, with the instance, the trace and, with a run folder, a multi-request
   counterexample file.
3. No violation within ``depth`` steps is not a proof: the cell is BOUNDED at that depth.
   With ``unbounded`` it is then asked of Spacer (:func:`~chunkproof.proofs.chc.
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
from chunkproof.checker.runs.system import describe_instance, threshold_words, trace_lines
from chunkproof.model.config import Config
from chunkproof.model.errors import ChunkproofError
from chunkproof.model.policy import Policy
from chunkproof.model.system_counterexample import SystemStep
from chunkproof.proofs import certificate, isolated, solving
from chunkproof.proofs.bounded import SolverTrace, bounded_search, shallow_violation
from chunkproof.proofs.chc import reachable_violation
from chunkproof.spec.scheduler_loops import DECODING, RUNNING
from chunkproof.spec.scheduler_step import (
    MAX_SEQS,
    PHASE_NAMES,
    step_loop_rules,
    threshold_rule,
)
from chunkproof.spec.scheduler_step_symbolic import (
    SYMBOLIC_REQUESTS,
    SymbolicSchedulerStep,
    SystemCell,
    fields,
    system_cells,
)
from chunkproof.spec.scheduler_trace import run_instance
from chunkproof.spec.space import Space

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
            "example": describe_instance(example.instance) if example else None,
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
) -> tuple[list[SystemProof], dict[str, Any]]:
    """Every property on every cell of ``space`` (module docstring), with the adaptive floor
    when ``adaptive``; with ``out``, each violated property's counterexample file and picture,
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
    proofs: dict[str, SystemProof] = {}
    judged = 0
    positive = False
    folder = _certificate_folder(policy, out) if unbounded else None
    for index, cell in enumerate(found):
        model = SymbolicSchedulerStep(policy, cell, max_seqs, adaptive)
        positive |= model.threshold_positive
        for pid in model.properties:
            proofs.setdefault(pid, SystemProof(pid, EMPTY, depth))
        scope = solving.check_formula(model.constraint, timeout_ms)
        if scope == "unsat":
            continue
        judged += 1
        for pid in model.properties:
            if scope != "sat":
                result = CellResult(cell, pid, UNKNOWN, "scope", "the scope is undecided")
            else:
                result = _judge(model, pid, depth, timeout_ms, rlimit)
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
        # the key scripts read; no cell is left out since the Z3 step has encoder items
        "cells_left_out": 0,
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
        found = reachable_violation(model, pid, True, timeout_ms)
        if found.status == "unsat" and found.invariant is not None:
            certificate.write(path, model, pid, found.invariant, f"{header} (spacer)")
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
    """Steps 2-4 of the module docstring on one cell."""
    cell = model.cell
    found: SolverTrace | str | None = None
    for bound in _depths(depth):
        quick = (
            (QUICK_MS, None) if rlimit is None else (timeout_ms, rlimit * QUICK_MS // TIMEOUT_MS)
        )
        if shallow_violation(model, pid, bound, *quick) != "unsat":
            objective = [z3.Sum(model.tokens)]
            found = bounded_search(model, pid, bound, objective, timeout_ms, rlimit=rlimit)
        if found is not None:
            break
    if isinstance(found, SolverTrace):
        instance, witness, trace = replayed(model, pid, found)
        steps = len(witness.budgets)
        detail = f"a violation {steps} step{'' if steps == 1 else 's'} from an initial state"
        return CellResult(cell, pid, VIOLATED, "bounded search", detail, instance, witness, trace)
    if found == "unknown":
        return CellResult(cell, pid, UNKNOWN, "bounded search", f"timed out at depth {bound}")
    return CellResult(cell, pid, BOUNDED, "bounded search", f"no violation within {depth} steps")


def _depths(depth: int) -> list[int]:
    """1, 2, 4, ... up to ``depth``, then ``depth``: a shallow violation is found by a small
    unrolling (and with a short trace); the last search covers every trace of ``depth`` steps."""
    bounds = [1]
    while bounds[-1] * 2 < depth:
        bounds.append(bounds[-1] * 2)
    return bounds if bounds[-1] == depth else [*bounds, depth]


def replayed(
    model: SymbolicSchedulerStep, pid: str, found: SolverTrace
) -> tuple[tuple[Config, ...], Witness, tuple[str, ...]]:
    """The solver's trace on the explicit model's Next (module docstring, step 2): the
    instance, the witness (arrival order, budgets) and the trace lines; a trace that does not
    replay is :class:`ModelMismatch`."""
    instance = model.instance(found.model)
    states = [*found.states, found.final_state]
    arrival = tuple(sorted(range(model.k), key=lambda i: fields(states[0]).rank[i]))
    actions = (*found.actions, found.final_action)
    budgets = tuple(a[0] for a in actions)
    eligible = tuple(a[1] for a in actions) if model.adaptive else None
    decodes = tuple(
        _by_position(state, action[len(action) - model.k :] if model.decodes else None)
        for state, action in zip(states, actions, strict=True)
    )
    run = run_instance(model.policy, instance, arrival, budgets, model.max_seqs, eligible, decodes)
    steps = run.steps
    if len(steps) != len(budgets) or pid not in steps[-1].breaks:
        raise ModelMismatch(f"{pid}: the solver's trace of the scheduler step does not replay")
    for index, (state, stepped) in enumerate(zip(states, steps, strict=True)):
        if _lists(state) != _recorded(stepped, run.encoded(index)):
            raise ModelMismatch(
                f"{pid}: step {index} of the solver's trace is not the explicit model's state"
            )
    witness = Witness(instance, arrival, budgets, eligible, decodes)
    return instance, witness, trace_lines(run, witness)


def _by_position(state: list[int], advances: Sequence[int] | None) -> tuple[int, ...]:
    """A solver action's decode advances (one per request) per position of the state row
    (a request's position is its rank); all 0 where the cell's requests never decode."""
    rank = fields(state).rank
    by_position = [0] * len(rank)
    for i, advance in enumerate(advances or ()):
        by_position[rank[i]] = advance
    return tuple(by_position)


def _lists(state: list[int]) -> list[tuple[str, int, int, int]]:
    """Per request (label order): its phase, its place in its list (-1 when finished: the
    explicit model orders the finished requests by label; a decoding request's in the running
    list), its c and its e."""
    phase, c, rank, e = fields(state)
    listed = [RUNNING if ph == DECODING else ph for ph in phase]
    out = []
    for i, r in enumerate(rank):
        place = sum(1 for j, other in enumerate(listed) if other == listed[i] and rank[j] < r)
        name = PHASE_NAMES[phase[i]]
        out.append((name, -1 if name == "finished" else place, c[i], e[i]))
    return out


def _recorded(stepped: SystemStep, encoded: tuple[int, ...]) -> list[tuple[str, int, int, int]]:
    return [
        (r.queue, -1 if r.queue == "finished" else r.place, r.c, e)
        for r, e in zip(stepped.requests, encoded, strict=True)
    ]


def report_lines(proofs: list[SystemProof], info: dict[str, Any]) -> list[str]:
    """The verdicts as text: one line per property, then per cell its status, and the
    violating instance of least total T with its fixed cell inputs and trace."""
    lines = [
        f"{info['cells_with_requests']} of {info['cells']} cells hold requests; "
        f"{info['requests']} requests per instance (max_num_seqs {info['max_seqs']}, every "
        f"budget 1..M per step{threshold_words(info)}), bounded search to {info['depth']} "
        f"steps{_spacer_words(info)} in {info['seconds']} s",
    ]
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
            lines.append(f"      smallest found: {describe_instance(example.instance)}")
            lines.extend(f"        {line}" for line in example.trace)
            lines.append("      (replayed on the explicit model: the same states, the same break)")
        if proof.counterexample is not None:
            lines.append(f"      counterexample: {proof.counterexample}")
            lines.append(f"      picture: {proof.picture}")
    return lines
