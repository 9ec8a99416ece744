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
    minimise: bool = True,
) -> CellVerdict:
    """The verdict of ``pid`` on one cell (module docstring); with ``minimise`` off, a violated
    cell gets Spacer's verdict without a counterexample."""
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
    if not minimise:
        return done(VIOLATED, "spacer", "Spacer: a reachable state violates it")
    cx, how = minimal_counterexample_for_cell(ts, pid, window, timeout_ms)
    if cx is None:
        return done(UNKNOWN, "bmc", f"Spacer found a reachable violation but {how}")
    return done(VIOLATED, "bmc+spacer", how, counterexample=cx)


def _cell_name(policy: Policy, cell: Cell, pid: str) -> str:
    drop = "on" if cell.drop else "off"
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in policy.name)
    return f"{safe}/{pid}-B{cell.block}-L{cell.lookahead}-D{drop}-Lh{cell.hash_lookahead}.smt2"


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
    return prove_cell(s.policy, cell, s.scope, pid, s.window, s.timeout_ms, s.out_dir, s.minimise)


def prove_cells(
    settings: Settings,
    tasks: list[tuple[Cell, str]],
    jobs: int,
    tick: Callable[[int, int], None] | None = None,
) -> list[CellVerdict]:
    """Every (cell, property) of ``tasks``, ``jobs`` at a time; forked workers inherit the
    settings (policies hold functions, which are not pickled)."""
    results: list[CellVerdict] = []
    if jobs <= 1 or len(tasks) < 2:
        _init(settings)
        verdicts = map(_prove, tasks)
        for i, verdict in enumerate(verdicts, 1):
            results.append(verdict)
            if tick:
                tick(i, len(tasks))
        return results
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(jobs, initializer=_init, initargs=(settings,)) as pool:
        for i, verdict in enumerate(pool.imap(_prove, tasks), 1):
            results.append(verdict)
            if tick:
                tick(i, len(tasks))
    return results
