"""The engines run for a command: the explorer over a space, the prover over its cells, each
turned into one verdict per property (SPEC P) with its files in the run folder.

This is the orchestration above both engines; :mod:`chunkproof.checker.cli.main` only parses
arguments and prints.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from chunkproof.checker.engines import least_counterexample
from chunkproof.checker.engines.executor import Executor, as_executor
from chunkproof.checker.engines.search import explore
from chunkproof.checker.engines.verdicts import EMPTY, PROVED, UNKNOWN, VIOLATED, Verdict
from chunkproof.checker.kinds import save_counterexample
from chunkproof.checker.reports.output import RunFolder
from chunkproof.checker.reports.report import exploration_verdicts
from chunkproof.model.counterexample import Counterexample
from chunkproof.model.errors import ConfigError
from chunkproof.model.policy import Policy
from chunkproof.proofs import prover
from chunkproof.spec.properties import WINDOW_FORMS, property_scope
from chunkproof.spec.request import RequestModel
from chunkproof.spec.request_symbolic import CELL_INPUTS, Cell, SymbolicRequest, cells
from chunkproof.spec.space import Bools, Grid, Ints, Layouts, Retentions, Space, TermSet, ValueSet

Tick = Callable[[int, int], None]

PROVER_PROPERTIES = ("P0", "P1", "P3", "P4", "P5", "P6", "P8")
"""Properties the prover decides; P2 and P7 are figures, computed by the explorer."""
MAX_CELLS = 10_000
"""Most proof cells one run takes (a default production range has at most about 110)."""


def value_count(values: ValueSet) -> int:
    """How many values a set holds at most, whatever the earlier inputs (1 for a set of
    another form: the cell inputs have none)."""
    if isinstance(values, Ints):
        return values.size()
    if isinstance(values, Bools | Retentions):
        return len(values.options)
    if isinstance(values, Layouts):
        return len(values.alternatives)
    if isinstance(values, TermSet):
        numbers = values.numbers.size() if values.numbers is not None else 0
        return numbers + sum(term.high - term.low + 1 for term in values.terms)
    return 1


def cell_count(space: Space) -> int:
    """At most how many proof cells ``space`` has (:func:`~chunkproof.spec.request_symbolic.
    cells`: each combination of :data:`~chunkproof.spec.request_symbolic.CELL_INPUTS`, the
    checkpoints, the two lookahead classes L = 0 and L >= 1, and the item layouts), counted
    without enumerating them."""
    total = 0
    for grid in space.grids:
        size = min(value_count(grid.sets["lookahead"]), 2)
        for name in (*CELL_INPUTS, "checkpoints", "layout"):
            size *= value_count(grid.sets[name])
        total += size
    return total


def check_cell_count(space: Space) -> None:
    """Refuse a range of more than :data:`MAX_CELLS` proof cells before any is built."""
    count = cell_count(space)
    if count > MAX_CELLS:
        raise ConfigError(
            f"the range has about {count:.3g} proof cells; the prover takes at most "
            f"{MAX_CELLS}: narrow the inputs each cell fixes (B, G, H, alpha, R)"
        )


MAX_CONFIGS = 5_000_000
"""Most configurations the explorer enumerates in one run."""
MAX_PAIRS = 1 << 32
"""Most (state, budget) pairs the explorer evaluates in one run: about 100 times those of
the default grids (4.2e7 for ``vllm-0.33``), whose ``check`` explores them in seconds."""


def explorer_pairs(space: Space) -> int:
    """About how many (state, budget) pairs the explorer evaluates on ``space``: each
    configuration's E >= P states under each budget 1..min(M, T, the ``--budget`` cap), that is
    P * min(M, P, cap) summed over the prompts and Ms of each grid (in closed form: a prompt
    range can hold 2^40 values), times its B and L values; the other inputs only multiply it."""
    cap = space.budget[1] if space.budget is not None else None
    total = 0
    for grid in space.grids:
        prompts, ms = grid.sets["prompt"], grid.sets["max_sched"]
        assert isinstance(prompts, Ints) and isinstance(ms, Ints)
        pairs = sum(
            _pairs(low, high, m_low, m_high, cap)
            for low, high in prompts.intervals
            for m_low, m_high in ms.intervals
        )
        total += value_count(grid.sets["block"]) * value_count(grid.sets["lookahead"]) * pairs
    return total


def _pairs(low: int, high: int, m_low: int, m_high: int, cap: int | None) -> int:
    """The sum over P in [``low``, ``high``] of P * g(min(P, ``cap``)), g(c) being the sum of
    min(M, c) over M in [``m_low``, ``m_high``]. 2g is a polynomial in c on each of c <= m_low,
    m_low <= c <= m_high and c >= m_high, so the sum is one of power sums of P per piece."""
    a, b = m_low, m_high
    pieces = (  # (first P, last P, the coefficients of 2g(c) in c)
        (low, a, (0, 2 * (b - a + 1), 0)),
        (a + 1, b, (a - a * a, 2 * b + 1, -1)),
        (b + 1, high, ((a + b) * (b - a + 1), 0, 0)),
    )
    last = high if cap is None else min(high, cap)
    twice = 0
    for first, end, coefficients in pieces:  # c = P: P * 2g(P), degree up to 3
        first, end = max(first, low), min(end, last)
        twice += sum(k * _power_sum(n + 1, first, end) for n, k in enumerate(coefficients))
    if cap is not None and cap < high:  # c = cap for every P past it
        coefficients = next(k for _, end, k in pieces if cap <= end or end == high)
        twice_at_cap = sum(k * cap**n for n, k in enumerate(coefficients))
        twice += twice_at_cap * _power_sum(1, max(low, cap + 1), high)
    return twice // 2


def _power_sum(power: int, first: int, last: int) -> int:
    """The sum of x**``power`` over x in [``first``, ``last``] (0 when empty; 1 <= power <= 3)."""
    if first > last:
        return 0

    def upto(n: int) -> int:
        triangle = n * (n + 1) // 2
        return (triangle, n * (n + 1) * (2 * n + 1) // 6, triangle * triangle)[power - 1]

    return upto(last) - upto(first - 1)


def check_explorer_size(space: Space) -> None:
    """Refuse, before any configuration is built, a range the explorer cannot enumerate: more
    than :data:`MAX_CONFIGS` configurations, or more than :data:`MAX_PAIRS` (state, budget)
    pairs (:func:`explorer_pairs`: a single long prompt has a state per position)."""
    configs = 0
    for grid in space.grids:
        size = 1
        for name in ("prompt", "max_sched", "block", "lookahead"):
            size *= value_count(grid.sets[name])
        configs += size
    if configs > MAX_CONFIGS:
        raise ConfigError(
            f"the range has about {configs:.2g} configurations; the explorer enumerates at most "
            f"{MAX_CONFIGS:.0e}: narrow it (or use `chunkproof prove`)"
        )
    pairs = explorer_pairs(space)
    if pairs > MAX_PAIRS:
        raise ConfigError(
            f"the range has about {pairs:.2g} (state, budget) pairs to explore (a state per "
            f"prompt position, a budget per value up to M); the explorer evaluates at most "
            f"{MAX_PAIRS:.2g}: narrow --prompt or --max-sched (or use `chunkproof prove`)"
        )


def explorer_range(space: Space, configs: dict[str, int]) -> dict[str, Any]:
    """The range a verdict of the explorer states: every input of every grid, and how many
    configurations it covered and excluded."""
    excluded = {k: v for k, v in configs.items() if k != "main" and v}
    return {**space.describe(), "configurations": configs["main"], "excluded": excluded}


def explore_space(
    policy: Policy,
    space: Space,
    wanted: tuple[str, ...],
    window: str,
    jobs: int | Executor,
    out: RunFolder | None,
    tick: Tick | None = None,
) -> tuple[list[Verdict], dict[str, Any]]:
    """The explorer on ``space``, its batches on ``jobs`` (an executor, or the size of the
    local pool): one verdict per property, and what it explored."""
    started = time.monotonic()
    model = RequestModel(policy, space, window)
    exploration = explore(model, wanted, jobs, tick)
    tally = exploration.tally
    rng = {**explorer_range(space, tally.configs), "window": window}
    save = None if out is None else partial(_save, policy, out)
    verdicts = name_window(exploration_verdicts(exploration, rng, save), window)
    info = {
        "configs": tally.configs,
        "states": tally.states,
        "transitions": tally.transitions,
        "seconds": round(time.monotonic() - started, 3),
    }
    return verdicts, info


def _save(policy: Policy, out: RunFolder, cx: Counterexample, name: str) -> tuple[str, str]:
    """Write ``cx`` and its picture into ``out``
    (:func:`~chunkproof.checker.kinds.save_counterexample`)."""
    return save_counterexample(cx, policy, out, name)


def name_window(verdicts: list[Verdict], window: str) -> list[Verdict]:
    """P5's verdict names the form it checked (SPEC P5: strict is the property, relaxed a
    trade-off); the range of every verdict records it as ``window``."""
    for verdict in verdicts:
        if verdict.property == "P5":
            verdict.summary = f"{WINDOW_FORMS[window]}; {verdict.summary}"
    return verdicts


@dataclass(frozen=True)
class ProofRun:
    """How the prover runs: P5's form, the timeout per query, where its cells run (an executor,
    or the size of the local pool), whether violated cells get their minimal counterexample,
    and Z3's resource limit per query (``--rlimit``; None: the timeout alone)."""

    window: str
    timeout_ms: int
    jobs: int | Executor
    minimise: bool
    rlimit: int | None = None


@dataclass(frozen=True)
class CellModel:
    """A cell's symbolic model of ``policy`` (picklable: the prover's workers build it)."""

    policy: Policy
    budget: tuple[int, int] | None
    window: str

    def __call__(self, cell: Cell) -> SymbolicRequest:
        return SymbolicRequest(self.policy, cell, self.budget, self.window)


@dataclass(frozen=True)
class CertificateName:
    """The certificate file of a (cell, property) of a space of ``grids``: every value that
    tells cells apart is in its name."""

    grids: tuple[Grid, ...]

    def __call__(self, cell: Cell, pid: str) -> str:
        values = "-".join(f"{k}{v}" for k, v in cell.values)
        lookahead = "L1+" if cell.speculative else "L0"
        return f"{pid}-{values}-{lookahead}-grid{self.grids.index(cell.grid)}.smt2"


def prover_range(space: Space, proved: list[Cell], empty: int) -> dict[str, Any]:
    """The range a verdict of the prover states: every input of every grid, which inputs each
    cell keeps concrete (the rest are symbolic), and how many cells held no configuration."""
    return {
        **space.describe(),
        "cells": len(proved),
        "concrete_per_cell": list(CELL_INPUTS),
        "symbolic": "every other input",
        "cells_without_configuration": empty,
    }


def prove_space(
    policy: Policy,
    space: Space,
    wanted: tuple[str, ...],
    run: ProofRun,
    out: RunFolder | None,
    tick: Tick | None = None,
    minimising_tick: Tick | None = None,
) -> tuple[list[Verdict], dict[str, Any]]:
    """The prover on every cell of ``space`` (certificates in the run folder), one verdict per
    property of :data:`PROVER_PROPERTIES` among ``wanted``; ``tick`` follows the cells, and
    ``minimising_tick`` the search for the least counterexamples
    (:func:`~chunkproof.checker.engines.least_counterexample.least_counterexamples`)."""
    started = time.monotonic()
    pids = tuple(p for p in wanted if p in PROVER_PROPERTIES)
    found = cells(space)
    stem = policy.file_stem
    certificates = out.certificates(stem) if out is not None else _scratch()
    make = CellModel(policy, space.budget, run.window)
    name = CertificateName(space.grids)
    settings = prover.Settings(make, name, run.timeout_ms, certificates, run.rlimit)
    results = prover.prove_range(settings, found, pids, as_executor(run.jobs).map, tick)
    proved_at = time.monotonic()
    empty_cells = {id(v.cell) for v in results if v.status == prover.EMPTY}
    violated = {
        pid: [v.cell for v in results if v.property == pid and v.status == prover.VIOLATED]
        for pid in pids
    }
    minimal = least_counterexample.least_counterexamples
    least = (
        minimal(violated, make, run.timeout_ms, run.jobs, minimising_tick) if run.minimise else {}
    )
    verdicts = []
    for pid in pids:
        mine = [v for v in results if v.property == pid]
        verdicts.append(_proof_verdict(policy, space, pid, mine, run, out, least.get(pid)))
    verdicts_at = time.monotonic()
    name_window(verdicts, run.window)
    if out is not None:
        for v in results:
            if v.certificate:
                out.record(Path(v.certificate))
    info = {
        "cells": len(found),
        "empty_cells": len(empty_cells),
        "seconds": round(time.monotonic() - started, 3),
        "seconds_proving_cells": round(proved_at - started, 3),
        "seconds_minimising": round(verdicts_at - proved_at, 3),
    }
    return verdicts, info


def _scratch() -> Path:
    """A folder for the certificates of a run that keeps no files (they are still written and
    re-checked: the re-check reads them)."""
    return Path(tempfile.mkdtemp(prefix="chunkproof-certificates-"))


def _other_cells(
    unknown: list[prover.CellVerdict], empty: list[prover.CellVerdict], within: str
) -> str:
    """What a VIOLATED verdict adds about its cells that are not violated and not proved: those
    the solver left undecided (a violation may hide there too) and those that hold no
    configuration (in the property's scope, ``within``)."""
    parts = []
    if unknown:
        parts.append(f"{len(unknown)} cell(s) undecided ({unknown[0].detail})")
    if empty:
        parts.append(f"{len(empty)} cell(s) hold no configuration{within}")
    return "; " + "; ".join(parts) if parts else ""


def _proof_verdict(
    policy: Policy,
    space: Space,
    pid: str,
    cell_verdicts: list[prover.CellVerdict],
    run: ProofRun,
    out: RunFolder | None,
    least: tuple[Counterexample | None, str] | None,
) -> Verdict:
    """One property's verdict from its cells: VIOLATED if a cell is (with ``least``, the least
    counterexample over the violated cells and its claim, when the run minimises), else UNKNOWN
    if a cell is, else PROVED over the cells that hold a configuration, else EMPTY."""
    scope = property_scope(policy, pid)
    within = "" if scope is None else f" in its scope ({scope.words})"
    violated = [v for v in cell_verdicts if v.status == prover.VIOLATED]
    unknown = [v for v in cell_verdicts if v.status == prover.UNKNOWN]
    empty = [v for v in cell_verdicts if v.status == prover.EMPTY]
    proved = [v for v in cell_verdicts if v.status == prover.PROVED]
    methods: dict[str, int] = {}
    for v in proved:
        methods[v.method] = methods.get(v.method, 0) + 1
    rng = {**prover_range(space, [v.cell for v in cell_verdicts], len(empty)), "window": run.window}
    figure = {
        "cells": len(cell_verdicts),
        "proved_by": methods,
        "violated_cells": [v.cell.describe() for v in violated],
        "unknown_cells": [{**v.cell.describe(), "why": v.detail} for v in unknown],
        "empty_cells": len(empty),
    }
    path = picture = cx = None
    if violated:
        status = VIOLATED
        cx, how = least if least is not None else (None, "")
        if cx is not None:
            summary = f"{cx.config.describe()}: {cx.verdict} ({how})"
            if out is not None:
                path, picture = save_counterexample(cx, policy, out, f"{pid}-prove")
        else:
            summary = (
                f"violated in {len(violated)} of {len(cell_verdicts)} cells ({violated[0].detail})"
            )
        summary += _other_cells(unknown, empty, within)
    elif unknown:
        status = UNKNOWN
        summary = f"{len(unknown)} of {len(cell_verdicts)} cells undecided: {unknown[0].detail}"
    elif proved:
        status = PROVED
        how = ", ".join(f"{m} {n}" for m, n in sorted(methods.items()))
        skipped = f"; {len(empty)} cells hold no configuration{within}" if empty else ""
        judged = f"; judged{within}" if within and not empty else ""
        summary = (
            f"proved on all {len(proved)} cells ({how}){skipped}{judged}; certificates re-checked"
        )
    else:
        status = EMPTY
        summary = f"no configuration in range{within} (all {len(empty)} cells are empty)"
    return Verdict(
        pid,
        status,
        rng,
        path,
        summary,
        "z3",
        len(cell_verdicts),
        len(violated),
        figure,
        picture=picture,
        witness=cx,
    )
