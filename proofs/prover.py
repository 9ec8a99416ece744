"""Per-cell verdicts from the solver, for any :class:`~chunkproof.spec.interface.SymbolicModel`.

For each cell and property, in order:

0. *Scope*: if no parameter value satisfies the cell's constraint, the cell is EMPTY: it holds
   no configuration, so nothing is proved there.
1. *Direct induction*: no state, reachable or not, violates the property for any action: the
   certificate of the invariant "true" re-checks within :data:`INDUCTION_FIRST_MS`.
2. *Spacer* (CHC): unsat is PROVED, Spacer's cover being the invariant; sat is VIOLATED (a
   reachable state violates it; its minimal counterexample is found above the engines, in
   :mod:`chunkproof.checker.engines.minimise`). When the cover is "true" itself, or Spacer is
   undecided, and step 1 ran out of its time, step 1's certificate is re-checked again with
   the whole timeout.
3. Only when Spacer is undecided, *bounded model checking* at small depths
   (:data:`SHALLOW_DEPTHS`): a violation a few steps from an initial state is VIOLATED;
   otherwise the cell is UNKNOWN. (Spacer goes first because it is faster here: on 50
   (cell, property) pairs of ``lookahead-in-split``'s production range it decided all 50 in
   11.7 s, where the 1- and 2-step unrollings took 52.9 s and left 19 undecided.)

Every PROVED verdict has its invariant written as an SMT-LIB certificate and re-checked by a
fresh solver (initiation, consecution, safety) before it is reported. A solver timeout is
UNKNOWN, and so is a query past its resource limit (``rlimit``, Z3's units: what ``--rlimit``
sets); under one, the times above are turned into units
(:func:`~chunkproof.proofs.solving.try_limits`) and the timeout is a guard only, so that no
verdict depends on the machine's load. A task proves in a scratch folder of the machine it
runs on and returns its certificates' text, which :func:`prove_range` writes where the run
keeps them: a worker on another machine needs no filesystem shared with the caller.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import z3

from chunkproof.proofs import certificate, solving
from chunkproof.proofs.bounded import shallow_violation
from chunkproof.proofs.chc import Invariant, reachable_violation
from chunkproof.spec.interface import SymbolicModel

PROVED, VIOLATED, UNKNOWN, EMPTY = "PROVED", "VIOLATED", "UNKNOWN", "EMPTY"

INDUCTION_FIRST_MS = 500
"""How long step 1 may take before Spacer is asked. On a violated cell step 1 fails only when
the solver finds a state violating the property, and on ``lookahead-in-split``'s production
range that took the solver 118 s over the 308 violated (cell, property) pairs, where Spacer
finds a reachable one in a fraction of a second each; all but 9 of the 352 pairs step 1 proves
there re-check within this time (with :mod:`~chunkproof.proofs.solving`'s portfolio)."""

SHALLOW_DEPTHS = (1, 2)
SHALLOW_MS = 1_000
"""Bounded model checking at these depths, each with this timeout, when Spacer is undecided:
most violations are a few steps from an admission start."""


@dataclass
class CellVerdict:
    """One property on one cell."""

    cell: Any
    property: str
    status: str
    method: str
    seconds: float
    detail: str = ""
    certificate: str | None = None
    certificate_text: str | None = None
    """The certificate's contents, from a task (:func:`prove_task`), until the caller writes
    them at ``certificate``."""


def _certify(
    model: SymbolicModel,
    pid: str,
    invariant: Invariant,
    path: Path,
    header: str,
    timeout_ms: int,
    rlimit: int | None = None,
) -> tuple[str, str]:
    """Write the invariant's certificate and re-check it with a fresh solver (removed when it
    does not hold): "unsat" when every obligation holds, "sat" when one fails, else "unknown";
    and what the re-check said."""
    cert = certificate.write(path, model, pid, invariant, header)
    confirmed, results = certificate.confirm(path, timeout_ms, rlimit)
    answer = "unsat" if confirmed else "sat" if "sat" in results.values() else "unknown"
    return answer, f"invariant {cert.invariant}; re-check {results}"


def _true(state: list[Any]) -> Any:
    """The invariant of step 1 (module docstring)."""
    return z3.BoolVal(True)


def has_configuration(
    model: SymbolicModel, timeout_ms: int, rlimit: int | None = None, within: Any = True
) -> str:
    """sat when the cell holds a configuration (``within``: one where that holds), unsat when
    it holds none, else unknown."""
    return solving.check_formula(z3.And(model.constraint, within), timeout_ms, rlimit)


def prove_cell(
    model: SymbolicModel,
    cell: Any,
    pid: str,
    timeout_ms: int,
    certificate_path: Path,
    rlimit: int | None = None,
) -> CellVerdict:
    """The verdict of ``pid`` on one cell (module docstring), each query within ``timeout_ms``
    and ``rlimit`` units."""
    started = time.monotonic()

    def done(status: str, method: str, detail: str = "", path: Path | None = None) -> CellVerdict:
        return CellVerdict(
            cell,
            pid,
            status,
            method,
            time.monotonic() - started,
            detail,
            str(path) if path else None,
        )

    within = model.scope(pid)
    scope = has_configuration(model, timeout_ms, rlimit, within)
    if scope == "unsat":
        judged = "" if z3.is_true(within) else f" within {pid}'s scope"
        return done(EMPTY, "scope", f"no configuration in this cell{judged}")
    if scope != "sat":
        return done(UNKNOWN, "scope", "the solver could not decide whether the cell is empty")
    header = f"{pid} cell {cell}"

    def induction(ms: int, units: int | None) -> tuple[str, str]:
        return _certify(model, pid, _true, certificate_path, f"{header} (induction)", ms, units)

    inductive, text = induction(*solving.try_limits(timeout_ms, rlimit, INDUCTION_FIRST_MS))
    if inductive == "unsat":
        return done(PROVED, "induction", text, certificate_path)
    chc = reachable_violation(model, pid, True, timeout_ms, rlimit)
    if chc.status == "sat":
        return done(VIOLATED, "spacer", f"{chc.attempts()}: a reachable state violates it")
    cover = chc.invariant if chc.status == "unsat" else None
    if cover is not None and not z3.is_true(z3.simplify(cover(model.state("s")))):
        answer, text = _certify(
            model, pid, cover, certificate_path, f"{header} (spacer)", timeout_ms, rlimit
        )
        if answer == "unsat":
            return done(PROVED, "spacer", f"{chc.attempts()}; {text}", certificate_path)
        return done(UNKNOWN, "spacer", f"{chc.attempts()}: the invariant did not re-check: {text}")
    if inductive == "unknown":
        inductive, text = induction(timeout_ms, rlimit)
        if inductive == "unsat":
            return done(PROVED, "induction", text, certificate_path)
    if cover is not None:
        detail = f"{chc.attempts()}: the invariant is true, as tried above: {text}"
        return done(UNKNOWN, "spacer", detail)
    for depth in SHALLOW_DEPTHS:
        shallow = solving.try_limits(timeout_ms, rlimit, SHALLOW_MS)
        if shallow_violation(model, pid, depth, *shallow) == "sat":
            return done(VIOLATED, "bmc", f"a violation {depth} steps from an initial state")
    return done(UNKNOWN, "spacer", f"{chc.attempts()} gave up or ran out of time")


@dataclass(frozen=True)
class Settings:
    """What every cell of one run shares: how to build a cell's model, the solver timeout, the
    folder certificates go to (one file per cell and property, named by ``name``) and the
    solver's resource limit per query (``rlimit``; None: the timeout alone).
    Picklable when ``make_model`` and ``name`` are, so that workers of another machine can
    receive it."""

    make_model: Callable[[Any], SymbolicModel]
    name: Callable[[Any, str], str]
    timeout_ms: int
    certificates: Path
    rlimit: int | None = None


TaskMap = Callable[[Callable[..., Any], tuple[Any, ...], list[Any]], Iterable[Any]]
"""How the caller runs tasks: ``run(function, shared, tasks)`` yields ``function(*shared,
task)`` for every task, in task order (serially, on a local pool or on a cluster: the checker's
executors); ``shared`` goes once to each worker."""


def prove_task(settings: Settings, task: tuple[Any, tuple[str, ...]]) -> list[CellVerdict]:
    """Every property of one cell, on one model (its translation is shared), its certificates
    written and re-checked in a scratch folder of this machine and returned as text (module
    docstring)."""
    cell, pids = task
    model = settings.make_model(cell)
    verdicts = []
    with tempfile.TemporaryDirectory(prefix="chunkproof-cell-") as scratch:
        for pid in pids:
            name = settings.name(cell, pid)
            path = Path(scratch) / name
            verdict = prove_cell(model, cell, pid, settings.timeout_ms, path, settings.rlimit)
            if verdict.certificate is not None:
                verdict.certificate_text = Path(verdict.certificate).read_text()
                verdict.certificate = str(settings.certificates / name)
            verdicts.append(verdict)
    return verdicts


def prove_range(
    settings: Settings,
    cells: list[Any],
    pids: tuple[str, ...],
    run: TaskMap,
    tick: Callable[[int, int], None] | None = None,
) -> list[CellVerdict]:
    """Every (cell, property), one task per cell, the tasks run by ``run``; each certificate
    written (atomically) in ``settings.certificates``."""
    tasks = [(c, pids) for c in cells]
    verdicts: list[CellVerdict] = []
    for done, found in enumerate(run(prove_task, (settings,), tasks), 1):
        for verdict in found:
            if verdict.certificate is not None and verdict.certificate_text is not None:
                certificate.atomic_write(Path(verdict.certificate), verdict.certificate_text)
                verdict.certificate_text = None
        verdicts.extend(found)
        if tick:
            tick(done, len(tasks))
    return verdicts
