"""Solver calls with a small portfolio: Z3's times on these queries have a heavy tail.

A query runs with a preprocessing pipeline (simplify, solve-eqs, smt) and with the default
solver, each first under a short timeout, then again with another random seed and longer
timeouts, until its own timeout is spent. Only sat and unsat are answers; anything else is
"unknown".
"""

from __future__ import annotations

import time
from typing import Any

import z3

ATTEMPTS = ((0, 250), (0, 250), (7, 1_000), (7, 1_000), (13, 0))
"""(random seed, milliseconds; 0 = the rest of the timeout), alternating the two solvers."""


def _solver(index: int, seed: int, ctx: z3.Context | None) -> z3.Solver:
    solver = (
        z3.Then("simplify", "solve-eqs", "smt", ctx=ctx).solver()
        if index % 2 == 0
        else z3.Solver(ctx=ctx)
    )
    solver.set("random_seed", seed)
    return solver


def check_text(smtlib: str, timeout_ms: int) -> str:
    """sat, unsat or unknown for SMT-LIB assertions, parsed in a fresh context."""
    ctx = z3.Context()
    return _portfolio(lambda s: s.from_string(smtlib), ctx, timeout_ms)[0]


def check_formula(formula: Any, timeout_ms: int) -> str:
    """sat, unsat or unknown for a formula of the main context."""
    return solve_formula(formula, timeout_ms)[0]


def solve_formula(formula: Any, timeout_ms: int) -> tuple[str, z3.ModelRef | None]:
    """:func:`check_formula`, and on sat the model of the solver that found it."""
    answer, solver = _portfolio(lambda s: s.add(formula), None, timeout_ms)
    return answer, solver.model() if answer == "sat" and solver is not None else None


def _portfolio(load: Any, ctx: z3.Context | None, timeout_ms: int) -> tuple[str, z3.Solver | None]:
    """The first answer of the attempts, and the solver that gave it."""
    deadline = time.monotonic() + timeout_ms / 1000
    for index, (seed, budget) in enumerate(ATTEMPTS):
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0:
            break
        solver = _solver(index, seed, ctx)
        solver.set("timeout", min(budget, left) if budget else left)
        load(solver)
        answer = str(solver.check())
        if answer in ("sat", "unsat"):
            return answer, solver
    return "unknown", None
