"""Solver calls with a small portfolio: Z3's times on these queries have a heavy tail.

A query runs with a preprocessing pipeline (simplify, solve-eqs, smt) under a few random seeds
and arithmetic engines, each try under a short timeout, the timeouts doubling, until the
query's own timeout is spent. Only sat and unsat are answers; anything else is "unknown".

Measured on the 660 safety obligations of ``lookahead-in-split``'s production range (the
direct-induction certificates of :mod:`chunkproof.proofs.prover`; each try alone on every
query, 4 s cap): the pipeline left 7 queries undecided at 4 s, Z3's default solver 47, the
pipeline with the older arithmetic engine (``arith.solver=2``) 57, while deciding in 0.02 to
0.05 s two that the others left open for 20 s; the default solver, which the previous
portfolio alternated with, was the slowest on both answers. Simulated on those times, this
portfolio spends 139 s on them where the previous one spent 199 s and left 3 undecided
(``bench/prove.py`` (e) prints the ratio of the two cell procedures).

With a resource limit (``rlimit``: Z3's resource units, what ``--rlimit`` sets) the tries are
cut by units instead of the clock (:func:`try_limits`), and the timeout is a guard only: the
answer then does not depend on the machine's load.
"""

from __future__ import annotations

import time
from typing import Any

import z3

PIPELINE, OLD_ARITH, DEFAULT = "pipeline", "pipeline, arith.solver=2", "default"

Attempts = tuple[tuple[str, int, int], ...]

ATTEMPTS: Attempts = (
    (PIPELINE, 0, 500),
    (PIPELINE, 7, 1_000),
    (OLD_ARITH, 0, 2_000),
    (PIPELINE, 0, 0),
)
"""(solver, random seed, milliseconds; 0 = the rest of the timeout), in order."""

UNITS_PER_MS = 20_000
"""Z3 resource units a try spends per millisecond, to turn a try's milliseconds into units
under a resource limit (:func:`try_limits`). Measured on the portfolio's queries of the
prover and conform in the tests (certificate obligations, scope, equivalence) on 2-core x86:
11 to 18 thousand units per millisecond on the largest (2.6 to 3.4 million units each)."""


def try_limits(timeout_ms: int, rlimit: int | None, ms: int) -> tuple[int, int | None]:
    """(timeout, resource limit) of a try of ``ms`` milliseconds within a query bounded by
    ``timeout_ms`` and ``rlimit``. Without ``rlimit`` the clock cuts the try: ``ms`` (at most
    the timeout). With it, its share of units (``ms`` * :data:`UNITS_PER_MS`, at most
    ``rlimit``) does, and the timeout is a guard only: whether the try answers does not depend
    on the machine's load."""
    if rlimit is None:
        return min(ms, timeout_ms), None
    return timeout_ms, min(rlimit, ms * UNITS_PER_MS)


def limit(solver: Any, timeout_ms: int, rlimit: int | None) -> None:
    """Bound ``solver``'s checks by ``timeout_ms`` and, when given, by ``rlimit`` units (past
    either, the check is unknown)."""
    solver.set("timeout", timeout_ms)
    if rlimit is not None:
        solver.set("rlimit", rlimit)


def _solver(kind: str, seed: int, ctx: z3.Context | None) -> z3.Solver:
    """The pipeline (with the older arithmetic engine for :data:`OLD_ARITH`), or Z3's default
    solver for :data:`DEFAULT`."""
    if kind == DEFAULT:
        solver = z3.Solver(ctx=ctx)
    else:
        solver = z3.Then("simplify", "solve-eqs", "smt", ctx=ctx).solver()
    if kind == OLD_ARITH:
        solver.set("arith.solver", 2)
    solver.set("random_seed", seed)
    return solver


def check_text(smtlib: str, timeout_ms: int, rlimit: int | None = None) -> str:
    """sat, unsat or unknown for SMT-LIB assertions, parsed in a fresh context."""
    ctx = z3.Context()
    return _portfolio(lambda s: s.from_string(smtlib), ctx, timeout_ms, None, rlimit)[0]


def check_formula(formula: Any, timeout_ms: int, rlimit: int | None = None) -> str:
    """sat, unsat or unknown for a formula of the main context."""
    return solve_formula(formula, timeout_ms, rlimit=rlimit)[0]


def check_apart(formula: Any, timeout_ms: int, rlimit: int | None = None) -> str:
    """:func:`check_formula` on a copy of ``formula`` in a fresh context: Z3's search follows
    its terms' ids, which in the main context depend on every term the process made before, so
    only a fresh copy answers the same under ``rlimit`` whatever ran first. Measured on the
    loop-free run of :mod:`~chunkproof.proofs.complete` on test_system_prove's HOL range (3
    steps): 1.2 s in the main context after the other tests of that file, 15 s alone, and in a
    fresh context 0.14 to 1.1 s (the pipeline's tries; Z3's default solver ran there past 6
    minutes)."""
    ctx = z3.Context()
    return _portfolio(lambda s: s.add(formula.translate(ctx)), ctx, timeout_ms, None, rlimit)[0]


def solve_formula(
    formula: Any, timeout_ms: int, attempts: Attempts | None = None, rlimit: int | None = None
) -> tuple[str, z3.ModelRef | None]:
    """:func:`check_formula` (with ``attempts`` in place of :data:`ATTEMPTS` if given), and on
    sat the model of the solver that found it."""
    answer, solver = _portfolio(lambda s: s.add(formula), None, timeout_ms, attempts, rlimit)
    return answer, solver.model() if answer == "sat" and solver is not None else None


def solve_cases(
    formula: Any, cases: list[Any], timeout_ms: int, rlimit: int | None = None
) -> tuple[str, z3.ModelRef | None]:
    """:func:`solve_formula` of ``formula`` split into ``cases`` (terms whose disjunction is
    valid): sat with the first case's model that is sat, unsat when every case is, else
    unknown. Each case gets the whole ``timeout_ms`` and ``rlimit``.

    A case split is exact, and on a query whose formula branches on the cases' terms it can
    be decisive: on conform's default range of vllm-0.33 against vLLM 0.33.0, the query of one
    cell split by the drop flag and by admission (c = c0) decided its 4 cases in 0.02 s each,
    where the whole query ran past 20 s; all 110 cells took 14 s instead of 13 minutes with
    69 left undecided."""
    undecided = False
    for case in cases:
        answer, model = solve_formula(z3.And(formula, case), timeout_ms, rlimit=rlimit)
        if answer == "sat":
            return answer, model
        undecided = undecided or answer != "unsat"
    return ("unknown" if undecided else "unsat"), None


def _portfolio(
    load: Any,
    ctx: z3.Context | None,
    timeout_ms: int,
    attempts: Attempts | None = None,
    rlimit: int | None = None,
) -> tuple[str, z3.Solver | None]:
    """The first answer of the attempts, and the solver that gave it; each try bounded by
    :func:`try_limits` (the last, of 0 ms, by the time left and the whole ``rlimit``)."""
    deadline = time.monotonic() + timeout_ms / 1000
    for kind, seed, budget in ATTEMPTS if attempts is None else attempts:
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0:
            break
        solver = _solver(kind, seed, ctx)
        limit(solver, *(try_limits(left, rlimit, budget) if budget else (left, rlimit)))
        load(solver)
        answer = str(solver.check())
        if answer in ("sat", "unsat"):
            return answer, solver
    return "unknown", None
