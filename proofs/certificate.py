"""Inductive-invariant certificates: written as SMT-LIB, re-checked by a fresh solver.

A certificate for "no reachable state violates property p" of a
:class:`~chunkproof.spec.interface.SymbolicModel` is an invariant Inv(s, params) with three
obligations, each an SMT-LIB query that must be unsat:

* initiation:   constraint and init(s)                                   and not Inv(s)
* consecution:  constraint and Inv(s) and guard(s, a) and follows(s, a)
                and s' = next(s, a)                                       and not Inv(s')
* safety:       constraint and Inv(s) and guard(s, a)                    and violation_p(s, a)

The file holds the three queries as independent sections; :func:`recheck` parses each one in a
new Z3 context (nothing shared with the solver that found the invariant) and requires unsat.
Files are written atomically (a temporary file, then a rename).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import z3

from chunkproof.proofs import solving
from chunkproof.proofs.chc import Invariant
from chunkproof.spec.interface import SymbolicModel

SECTION = "; ---- obligation: "
OBLIGATIONS = ("initiation", "consecution", "safety")


@dataclass(frozen=True)
class Certificate:
    """The SMT-LIB text of the three obligations, and where it was written."""

    path: Path
    invariant: str


def obligations(model: SymbolicModel, pid: str, invariant: Invariant) -> dict[str, Any]:
    """The three obligations for ``invariant``, as formulas."""
    state, following, action = model.state("s"), model.state("s_next"), model.action("a")
    inv = invariant(state)
    nxt = model.next(state, action)
    step = z3.And(
        model.guard(state, action),
        model.follows(state, action),
        *[f == n for f, n in zip(following, nxt, strict=True)],
    )
    return {
        "initiation": z3.And(model.constraint, model.init(state), z3.Not(inv)),
        "consecution": z3.And(model.constraint, inv, step, z3.Not(invariant(following))),
        "safety": z3.And(
            model.constraint, inv, model.guard(state, action), model.violation(pid, state, action)
        ),
    }


def write(
    path: Path, model: SymbolicModel, pid: str, invariant: Invariant, header: str
) -> Certificate:
    """Write the obligations of ``invariant`` as SMT-LIB sections (atomically)."""
    shown = invariant(model.state("s"))
    parts = [f"; chunkproof certificate: {header}", f"; invariant: {shown}"]
    for name, formula in obligations(model, pid, invariant).items():
        solver = z3.Solver()
        solver.add(formula)
        parts.append(f"{SECTION}{name} (expected: unsat)\n{solver.sexpr()}(check-sat)")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, "\n".join(parts) + "\n")
    return Certificate(path, str(shown))


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename, so
    a reader never sees a partial file."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def recheck(path: Path, timeout_ms: int = 20_000, rlimit: int | None = None) -> dict[str, str]:
    """Re-check every obligation of a certificate file in a fresh context, each within
    ``timeout_ms`` and ``rlimit`` units (:mod:`~chunkproof.proofs.solving`): name -> result."""
    sections = path.read_text().split(SECTION)[1:]
    results: dict[str, str] = {}
    for section in sections:
        name = section.split(" ", 1)[0]
        body = section.split("\n", 1)[1].replace("(check-sat)", "")
        results[name] = solving.check_text(body, timeout_ms, rlimit)
    return results


def holds(results: dict[str, str]) -> bool:
    """All three obligations were checked, and each is unsat."""
    return set(results) == set(OBLIGATIONS) and all(r == "unsat" for r in results.values())


def confirm(path: Path, timeout_ms: int, rlimit: int | None = None) -> tuple[bool, dict[str, str]]:
    """Re-check the certificate at ``path`` (:func:`recheck`): whether it :func:`holds`, and
    the results. A certificate that does not hold is removed, so that no file named as a
    certificate stands beside a verdict that is not PROVED."""
    results = recheck(path, timeout_ms, rlimit)
    confirmed = holds(results)
    if not confirmed:
        path.unlink(missing_ok=True)
    return confirmed, results
