"""Per-cell verdicts from the solver (issue 3): proofs with certificates, or counterexamples.

For each cell and property, in order:

1. *Direct induction*: no state c in [0, E), reachable or not, violates the property for any
   budget: the certificate of the invariant c >= 0 re-checks.
2. *Spacer* (CHC): no reachable state violates it; Spacer's cover is the invariant.
3. Otherwise a reachable violation exists: :mod:`chunkproof.proofs.search` finds the minimal one.

Every PROVED verdict has its invariant written as an SMT-LIB certificate and re-checked by a
fresh solver (initiation, consecution, safety) before it is reported. A solver timeout is
UNKNOWN.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chunkproof.model.counterexample import Counterexample
from chunkproof.model.policy import Policy
from chunkproof.proofs import certificate
from chunkproof.proofs.chc import reachable_violation
from chunkproof.proofs.search import minimal_counterexample_for_cell
from chunkproof.proofs.system import Cell, Scope, TransitionSystem

PROVED, VIOLATED, UNKNOWN = "PROVED", "VIOLATED", "UNKNOWN"


@dataclass
class CellVerdict:
    """One property on one cell."""

    cell: Cell
    property: str
    status: str
    method: str
    seconds: float
    detail: str = ""
    certificate: str | None = None
    counterexample: Counterexample | None = None


def _certify(
    ts: TransitionSystem,
    pid: str,
    window: str,
    invariant: Any,
    path: Path,
    method: str,
    timeout_ms: int,
) -> tuple[dict[str, str], str]:
    """Write the invariant's certificate and re-check it with a fresh solver."""
    header = f"{ts.policy.name} {pid} cell {ts.cell.describe()} scope {ts.scope.describe(ts.cell)}"
    cert = certificate.write(path, ts, pid, invariant, window, f"{header} ({method})")
    results = certificate.recheck(path, timeout_ms)
    return results, f"invariant {cert.invariant}; re-check {results}"


def prove_cell(
    policy: Policy,
    cell: Cell,
    scope: Scope,
    pid: str,
    window: str,
    timeout_ms: int,
    out_dir: Path,
) -> CellVerdict:
    """The verdict of ``pid`` on one cell (module docstring); a violated cell gets Spacer's
    verdict, and :func:`counterexample_below` its counterexample."""
    started = time.monotonic()
    ts = TransitionSystem(policy, cell, scope)
    cert_path = out_dir / _cell_name(policy, cell, pid)

    def done(status: str, method: str, detail: str = "", **kw: Any) -> CellVerdict:
        return CellVerdict(cell, pid, status, method, time.monotonic() - started, detail, **kw)

    # Direct induction: the invariant c >= 0 holds in every state, so its safety obligation
    # says no state at all violates the property; the fresh-solver re-check is the proof.
    results, text = _certify(ts, pid, window, lambda s: s >= 0, cert_path, "induction", timeout_ms)
    if certificate.holds(results):
        return done(PROVED, "induction", text, certificate=str(cert_path))
    chc = reachable_violation(ts, pid, window, True, timeout_ms)
    if chc.status == "unsat" and chc.invariant is not None:
        results, text = _certify(ts, pid, window, chc.invariant, cert_path, "spacer", timeout_ms)
        if certificate.holds(results):
            return done(PROVED, "spacer", text, certificate=str(cert_path))
        return done(UNKNOWN, "spacer", f"Spacer's invariant did not re-check: {text}")
    cert_path.unlink(missing_ok=True)
    if chc.status == "unknown":
        return done(UNKNOWN, "spacer", "Spacer gave up or timed out")
    return done(VIOLATED, "spacer", "Spacer: a reachable state violates it")


def counterexample_below(
    policy: Policy,
    cell: Cell,
    scope: Scope,
    pid: str,
    window: str,
    timeout_ms: int,
    bound: int | None,
) -> tuple[Counterexample | None, str]:
    """The cell's minimal counterexample if it has one with T < ``bound`` (any, if None)."""
    ts = TransitionSystem(policy, cell, scope)
    if bound is not None:
        below = reachable_violation(ts, pid, window, ts.T < bound, timeout_ms).status
        if below != "sat":
            return None, f"Spacer: {below} for T < {bound}"
    return minimal_counterexample_for_cell(ts, pid, window, timeout_ms)


def _cell_name(policy: Policy, cell: Cell, pid: str) -> str:
    drop = "on" if cell.drop else "off"
    name = f"{pid}-B{cell.block}-L{cell.lookahead}-D{drop}-Lh{cell.hash_lookahead}.smt2"
    return f"{policy.file_stem}/{name}"


PROVER_PROPERTIES = ("P1", "P3", "P4", "P5", "P6")
"""Properties the prover decides; P2 and P7 are figures, computed by the explorer."""


@dataclass(frozen=True)
class Settings:
    """What every cell of one run shares."""

    policy: Policy
    scope: Scope
    window: str
    timeout_ms: int
    out_dir: Path
    minimise: bool


_SHARED: dict[str, Settings] = {}


def _init(settings: Settings) -> None:
    _SHARED["settings"] = settings


def _prove(task: tuple[Cell, str]) -> CellVerdict:
    s = _SHARED["settings"]
    cell, pid = task
    return prove_cell(s.policy, cell, s.scope, pid, s.window, s.timeout_ms, s.out_dir)


def _below(task: tuple[Cell, str, int | None]) -> tuple[Counterexample | None, str]:
    s = _SHARED["settings"]
    cell, pid, bound = task
    return counterexample_below(s.policy, cell, s.scope, pid, s.window, s.timeout_ms, bound)


def _parallel(
    settings: Settings,
    work: Callable[[Any], Any],
    tasks: list[Any],
    jobs: int,
    tick: Callable[[int, int], None] | None,
) -> list[Any]:
    """``work`` over ``tasks``, ``jobs`` at a time, in order; forked workers inherit the
    settings (policies hold functions, which are not pickled)."""
    results: list[Any] = []
    if jobs <= 1 or len(tasks) < 2:
        _init(settings)
        outputs: Any = map(work, tasks)
        pool = None
    else:
        pool = multiprocessing.get_context("fork").Pool(jobs, _init, (settings,))
        outputs = pool.imap(work, tasks)
    try:
        for i, output in enumerate(outputs, 1):
            results.append(output)
            if tick:
                tick(i, len(tasks))
    finally:
        if pool is not None:
            pool.terminate()
    return results


def prove_range(
    settings: Settings,
    cells: list[Cell],
    pids: tuple[str, ...],
    jobs: int,
    tick: Callable[[int, int], None] | None = None,
) -> list[CellVerdict]:
    """Every (cell, property); with ``settings.minimise``, the minimal counterexample of each
    violated property over all cells (smallest T, then B, L, M, then the trace): the first
    violated cell in (B, L, D) order is minimised, then every other violated cell is asked by
    Spacer for a smaller T, and only those that have one are minimised."""
    verdicts: list[CellVerdict] = _parallel(
        settings, _prove, [(c, p) for p in pids for c in cells], jobs, tick
    )
    if not settings.minimise:
        return verdicts
    for pid in pids:
        violated = sorted(
            (v for v in verdicts if v.property == pid and v.status == VIOLATED),
            key=lambda v: (v.cell.block, v.cell.lookahead, v.cell.drop),
        )
        if not violated:
            continue
        first = violated[0]
        cx, first.detail = _parallel(settings, _below, [(first.cell, pid, None)], 1, None)[0]
        first.counterexample = cx
        if cx is None:
            continue
        rest = [(v.cell, pid, cx.config.T) for v in violated[1:]]
        for verdict, (other, how) in zip(
            violated[1:], _parallel(settings, _below, rest, jobs, None), strict=True
        ):
            verdict.counterexample, verdict.detail = other, how
    return verdicts
