"""Conformance of two policies (SPEC CLI ``conform``): the same chunk for every state and budget.

Two policies conform over a range when, for every configuration both accept (SPEC S1b), every
state c in [c0, E) and every offered budget b, their steps are equal: the same chunk, and the
same SPEC P0 outcome (both safe, or both breaking it). It is decided twice:

* symbolically, per proof cell of the range: both policies' symbolic models
  (:class:`~chunkproof.spec.request_symbolic.SymbolicRequest`) share the symbolic inputs (Z3
  constants are identified by name), and Z3 is asked for an input where the steps differ:
  unsat in every cell means equal over the whole range;
* exhaustively on a small grid: both policies' dense tables
  (:meth:`~chunkproof.spec.request.RequestModel.table`) are compared entry by entry.

A difference is one concrete input (config, c, b) with both policies' chunks, evaluated
natively; a Z3 answer of ``unknown`` leaves the verdict unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import z3

from chunkproof.checker.engines.executor import Executor, as_executor
from chunkproof.checker.engines.search import categories
from chunkproof.model.config import Config
from chunkproof.model.policy import Policy
from chunkproof.model.step import step
from chunkproof.proofs import solving
from chunkproof.spec.request import Batch, RequestModel
from chunkproof.spec.request_symbolic import Cell, SymbolicRequest, cells
from chunkproof.spec.space import Space

EQUAL = "EQUAL"
DIFFERENT = "DIFFERENT"
UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class Difference:
    """One input on which the policies differ, with both chunks (concrete evaluation; -1 for a
    step that breaks P0)."""

    config: Config
    c: int
    budget: int
    chunk_a: int
    chunk_b: int
    found_by: str
    """``"z3"`` or ``"grid"``."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "c": self.c,
            "budget": self.budget,
            "chunk_a": self.chunk_a,
            "chunk_b": self.chunk_b,
            "found_by": self.found_by,
        }


@dataclass(frozen=True)
class Conformance:
    """The verdict: :data:`EQUAL`, :data:`DIFFERENT` (with a difference) or :data:`UNKNOWN`."""

    status: str
    cells: int
    unknown_cells: tuple[Cell, ...]
    grid_configs: int
    difference: Difference | None


def conform(
    a: Policy,
    b: Policy,
    production: Space,
    grid: Space,
    timeout_ms: int,
    tick: Callable[[int, int], None] | None = None,
    rlimit: int | None = None,
    jobs: int | Executor = 1,
) -> Conformance:
    """The grid first (cheap, concrete), then Z3 on every cell until a difference is found,
    each cell's query within ``timeout_ms`` and ``rlimit`` units, the cells spread over
    ``jobs`` workers and taken in cell order (the first difference is the same whatever
    ``jobs``)."""
    configs, difference = grid_difference(a, b, grid, jobs)
    found = cells(production)
    todo = found if difference is None else []
    unknown: list[Cell] = []
    shared = (a, b, production.budget, timeout_ms, rlimit)
    answers = as_executor(jobs).map(cell_difference, shared, todo)
    for done, (cell, (status, difference)) in enumerate(zip(todo, answers, strict=True), 1):
        if status == UNKNOWN:
            unknown.append(cell)
        if tick is not None:
            tick(done, len(found))
        if difference is not None:
            break
    status = EQUAL if difference is None and not unknown else UNKNOWN
    if difference is not None:
        status = DIFFERENT
    return Conformance(status, len(found), tuple(unknown), configs, difference)


def cell_difference(
    a: Policy,
    b: Policy,
    budget: tuple[int, int] | None,
    timeout_ms: int,
    rlimit: int | None,
    cell: Cell,
) -> tuple[str, Difference | None]:
    """Z3 on one cell: (EQUAL, None) if no input both accept separates the steps, (DIFFERENT,
    the input) if one does, (UNKNOWN, None) on a timeout or past ``rlimit`` units. Decided by
    the solver portfolio (:mod:`chunkproof.proofs.solving`; one solver with one seed ran past
    a 120 s timeout on a cell the portfolio decides in seconds), case by case of the step's
    shape (:meth:`SymbolicRequest.cases`: a query that ran past 20 s decides in 0.1 s)."""
    ma, mb = SymbolicRequest(a, cell, budget), SymbolicRequest(b, cell, budget)
    state, action = ma.state("c"), ma.action("b")
    c, b_ = state[0], action[0]
    unsafe_a, unsafe_b = ma.unsafe(c, b_), mb.unsafe(c, b_)
    differ = z3.Or(
        unsafe_a != unsafe_b,
        z3.And(z3.Not(unsafe_a), ma.stages(c, b_)["chunk"] != mb.stages(c, b_)["chunk"]),
    )
    query = z3.And(
        ma.constraint, mb.constraint, ma.guard(state, action), mb.guard(state, action), differ
    )
    answer, model = solving.solve_cases(query, ma.cases(c), timeout_ms, rlimit)
    if answer == "unsat":
        return EQUAL, None
    if model is None:
        return UNKNOWN, None
    cfg = Config(**ma.concrete(model))
    at = (model.eval(c, True).as_long(), model.eval(b_, True).as_long())
    return DIFFERENT, _difference(a, b, cfg, *at, found_by="z3")


def grid_difference(
    a: Policy, b: Policy, grid: Space, jobs: int | Executor = 1
) -> tuple[int, Difference | None]:
    """Compare the dense tables of every configuration of ``grid`` both policies accept, the
    batches on ``jobs``: (configurations compared, the first difference in batch order or
    None)."""
    model_a, model_b = RequestModel(a, grid), RequestModel(b, grid)
    compared = 0
    answers = as_executor(jobs).map(batch_difference, (model_a, model_b), list(model_a.batches()))
    for count, found in answers:
        compared += count
        if found is not None:
            cfg, c, budget = found
            return compared, _difference(a, b, cfg, c, budget, found_by="grid")
    return compared, None


def batch_difference(
    model_a: RequestModel, model_b: RequestModel, batch: Batch
) -> tuple[int, tuple[Config, int, int] | None]:
    """One batch of :func:`grid_difference`: the configurations both policies accept, and the
    first input (config, c, b) where their tables differ, or None."""
    a, b = model_a.policy, model_b.policy
    accepted = (categories(a, batch) != 2) & (categories(b, batch) != 2)
    ta, tb = model_a.table(batch), model_b.table(batch)
    differ = accepted[:, None, None] & ta.valid & (ta.chunk != tb.chunk)
    hits = np.argwhere(differ)
    if not len(hits):
        return int(accepted.sum()), None
    i, row, column = (int(x) for x in hits[0])
    cfg = batch.configs[i]
    return int(accepted.sum()), (cfg, cfg.start + row, int(batch.low[i]) + column)


def _difference(
    a: Policy, b: Policy, cfg: Config, c: int, budget: int, found_by: str
) -> Difference:
    """Both steps at (cfg, c, budget), concretely (-1 for a step that breaks P0)."""

    def chunk(policy: Policy) -> int:
        s = step(policy, cfg, c, budget)
        return -1 if s.unsafe is not None else s.chunk

    return Difference(cfg, c, budget, chunk(a), chunk(b), found_by)


def describe(result: Conformance, a: Policy, b: Policy, ranges: Iterable[str]) -> str:
    """The one-row verdict of SPEC CLI ``conform``, then the ranges it covers."""
    over = "\n".join(ranges)
    if result.status == EQUAL:
        return f"EQUAL over\n{over}"
    if result.status == UNKNOWN:
        shown = ", ".join(str(c.describe()) for c in result.unknown_cells[:3])
        return (
            f"UNKNOWN: Z3 gave up on {len(result.unknown_cells)} cells ({shown} ...) over\n{over}"
        )
    d = result.difference
    assert d is not None
    return (
        f"DIFFERENT at {d.config.describe()} c={d.c} b={d.budget}: "
        f"{a.name} gives {d.chunk_a}, {b.name} gives {d.chunk_b} (found by {d.found_by})"
    )
