"""Conformance of two policies (SPEC CLI ``conform``): the same chunk for every state and budget.

Two policies conform over a range when, for every configuration both accept (SPEC S1b), every
state c in [0, E) and every budget b in [1, M], their chunks are equal. It is decided twice:

* symbolically, per cell (B, L, D) of the range: both policies' :class:`TransitionSystem` share
  the symbolic parameters T, M and theta (Z3 constants are identified by name), and Z3 is asked
  for c and b with different chunks: unsat in every cell means equal over the whole range;
* exhaustively on a small grid: both policies' vectorised chunk tables
  (:func:`chunkproof.checker.explorer.family_tables`) are compared cell by cell.

A difference is one concrete input (config, c, b) with both policies' chunks, evaluated
natively; a Z3 answer of ``unknown`` leaves the verdict unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import z3

from chunkproof.checker.explorer import family_tables
from chunkproof.checker.ranges import Ranges
from chunkproof.model.config import Config
from chunkproof.model.policy import Policy
from chunkproof.model.step import chunk
from chunkproof.proofs.system import Cell, Scope, TransitionSystem

EQUAL = "EQUAL"
DIFFERENT = "DIFFERENT"
UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class Difference:
    """One input on which the policies differ, with both chunks (native evaluation)."""

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
    cells: Sequence[Cell],
    scope: Scope,
    grid: Ranges,
    timeout_ms: int,
    tick: Callable[[int, int], None] | None = None,
) -> Conformance:
    """The grid first (cheap, concrete), then Z3 on every cell until a difference is found."""
    configs, difference = grid_difference(a, b, grid)
    unknown: list[Cell] = []
    for done, cell in enumerate(cells, 1):
        if difference is not None:
            break
        status, difference = cell_difference(a, b, cell, scope, timeout_ms)
        if status == UNKNOWN:
            unknown.append(cell)
        if tick is not None:
            tick(done, len(cells))
    status = EQUAL if difference is None and not unknown else UNKNOWN
    if difference is not None:
        status = DIFFERENT
    return Conformance(status, len(cells), tuple(unknown), configs, difference)


def cell_difference(
    a: Policy, b: Policy, cell: Cell, scope: Scope, timeout_ms: int
) -> tuple[str, Difference | None]:
    """Z3 on one cell: (EQUAL, None) if no accepted (T, M, theta, c, b) separates the chunks,
    (DIFFERENT, the input) if one does, (UNKNOWN, None) on a timeout."""
    ta, tb = TransitionSystem(a, cell, scope), TransitionSystem(b, cell, scope)
    c, budget = z3.Ints("c b")
    solver = z3.Solver()
    solver.set("timeout", timeout_ms)
    solver.add(ta.params, tb.params, ta.in_prefill(c), ta.budget_ok(budget))
    solver.add(ta.chunk(c, budget) != tb.chunk(c, budget), *ta.assumptions, *tb.assumptions)
    answer = solver.check()
    if answer == z3.unsat:
        return EQUAL, None
    if answer != z3.sat:
        return UNKNOWN, None
    model = solver.model()
    values = ta.concrete(model)
    cfg = Config(
        block=cell.block,
        prompt=values["T"],
        max_sched=values["M"],
        lookahead=cell.lookahead,
        threshold=values["theta"],
        drop=cell.drop,
        hash_lookahead=cell.hash_lookahead,
    )
    at = (model.eval(c).as_long(), model.eval(budget).as_long())
    return DIFFERENT, _difference(a, b, cfg, *at, found_by="z3")


def grid_difference(a: Policy, b: Policy, grid: Ranges) -> tuple[int, Difference | None]:
    """Compare the vectorised chunk tables of every configuration of ``grid`` both policies
    accept: (configurations compared, the first difference or None)."""
    compared = 0
    for batch in grid.batches():
        tables = zip(
            family_tables(a, batch, grid.max_sched, grid.budget),
            family_tables(b, batch, grid.max_sched, grid.budget),
            strict=True,
        )
        for ta, tb in tables:
            for i, m in enumerate(ta.ms):
                cfg = ta.base.replace(max_sched=m)
                if a.accepts(cfg) or b.accepts(cfg):
                    continue
                compared += 1
                differ = np.argwhere(_valid(ta.budgets, m) & (ta.chunk[i] != tb.chunk[i]))
                if len(differ):
                    j, k = differ[0]
                    found = (int(ta.states[j]), int(ta.budgets[k]))
                    return compared, _difference(a, b, cfg, *found, found_by="grid")
    return compared, None


def _valid(budgets: np.ndarray, m: int) -> np.ndarray:
    """The budget columns offered under M = m (SPEC S4: 1..M), as a row mask."""
    return (budgets <= m)[None, :]


def _difference(
    a: Policy, b: Policy, cfg: Config, c: int, budget: int, found_by: str
) -> Difference:
    """Both chunks at (cfg, c, budget), natively."""
    return Difference(cfg, c, budget, chunk(a, cfg, c, budget), chunk(b, cfg, c, budget), found_by)


def describe(result: Conformance, a: Policy, b: Policy, ranges: Iterable[str]) -> str:
    """The one-row verdict of SPEC CLI ``conform``."""
    over = "; ".join(ranges)
    if result.status == EQUAL:
        return f"EQUAL over {over}"
    if result.status == UNKNOWN:
        cells = ", ".join(str(c.describe()) for c in result.unknown_cells[:3])
        return f"UNKNOWN: Z3 gave up on {len(result.unknown_cells)} cells ({cells} ...) over {over}"
    d = result.difference
    assert d is not None
    cfg = d.config
    return (
        f"DIFFERENT at B={cfg.block} L={cfg.lookahead} D={'on' if cfg.drop else 'off'} "
        f"T={cfg.T} M={cfg.max_sched} theta={cfg.threshold} c={d.c} b={d.budget}: "
        f"{a.name} gives {d.chunk_a}, {b.name} gives {d.chunk_b} (found by {d.found_by})"
    )
