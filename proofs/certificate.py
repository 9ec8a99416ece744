"""Inductive-invariant certificates: written as SMT-LIB, re-checked by a fresh solver.

A certificate for "no reachable state violates property p" is an invariant Inv(c, T, M, theta)
with three obligations, each an SMT-LIB query that must be unsat:

* initiation:   params and c = c0            and not Inv(c)
* consecution:  Inv(c) and c < E and 1 <= b <= M and c' = c + chunk(c, b)   and not Inv(c')
* safety:       Inv(c) and c < E and 1 <= b <= M   and violation_p(c, b)

The file holds the three queries as independent sections; :func:`recheck` parses each one in a
new Z3 context (nothing shared with the solver that found the invariant) and requires unsat.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import z3

from chunkproof.proofs import solving
from chunkproof.proofs.system import TransitionSystem

SECTION = "; ---- obligation: "
OBLIGATIONS = ("initiation", "consecution", "safety")


@dataclass(frozen=True)
class Certificate:
    """The SMT-LIB text of the three obligations, and where it was written."""

    path: Path
    invariant: str


def obligations(ts: TransitionSystem, pid: str, invariant: Any, window: str) -> dict[str, Any]:
    """The three obligations for ``invariant`` (a function of the state term), as formulas."""
    c, c2, b = z3.Ints("c c_next b")
    inv = invariant(c)
    step = z3.And(ts.in_prefill(c), ts.budget_ok(b), c2 == c + ts.chunk(c, b))
    return {
        "initiation": z3.And(ts.params, c == 0, z3.Not(inv)),
        "consecution": z3.And(ts.params, inv, step, z3.Not(invariant(c2))),
        "safety": z3.And(
            ts.params, inv, ts.in_prefill(c), ts.budget_ok(b), ts.violation(pid, c, b, window)
        ),
    }


def write(
    path: Path, ts: TransitionSystem, pid: str, invariant: Any, window: str, header: str
) -> Certificate:
    """Write the obligations of ``invariant`` as SMT-LIB sections."""
    parts = [f"; chunkproof certificate: {header}", f"; invariant: {invariant(z3.Int('c'))}"]
    for name, formula in obligations(ts, pid, invariant, window).items():
        solver = z3.Solver()
        solver.add(formula, *ts.assumptions)
        parts.append(f"{SECTION}{name} (expected: unsat)\n{solver.sexpr()}(check-sat)")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts) + "\n")
    return Certificate(path, str(invariant(z3.Int("c"))))


def recheck(path: Path, timeout_ms: int = 20_000) -> dict[str, str]:
    """Re-check every obligation of a certificate file in a fresh context: name -> result."""
    sections = path.read_text().split(SECTION)[1:]
    results: dict[str, str] = {}
    for section in sections:
        name = section.split(" ", 1)[0]
        body = section.split("\n", 1)[1].replace("(check-sat)", "")
        results[name] = solving.check_text(body, timeout_ms)
    return results


def holds(results: dict[str, str]) -> bool:
    """All three obligations were checked, and each is unsat."""
    return set(results) == set(OBLIGATIONS) and all(r == "unsat" for r in results.values())
