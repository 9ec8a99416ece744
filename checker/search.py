"""Explore a grid, classify violations, and minimise counterexamples across configurations."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from chunkproof.checker.explorer import (
    ConfigResult,
    StateGraph,
    Witness,
    budget_bounds,
    evaluate_config,
    family_tables,
    shortest_path,
    state_graphs,
)
from chunkproof.checker.ranges import Ranges
from chunkproof.checker.traces import build_counterexample, trace_to, violates
from chunkproof.model import stages
from chunkproof.model.config import Config
from chunkproof.model.counterexample import Counterexample
from chunkproof.model.policy import Policy

CATEGORIES = ("main", "degenerate", "refused")
"""Where a violating configuration lies: inside the verdict's range, in the degenerate region
of SPEC CLI (M < L, or a static 0 < theta < L), or outside what the release accepts (S1b)."""


def category(policy: Policy, cfg: Config) -> str:
    """Classify a configuration (SPEC S1b and the degenerate region of SPEC CLI)."""
    if policy.accepts(cfg) is not None:
        return "refused"
    if policy.stage("reservation") is not None and cfg.lookahead >= 2:
        cap = policy.stage("cap")
        static_theta = cap is not None and cap.function is stages.cap_static_threshold
        if cfg.max_sched < cfg.lookahead or (static_theta and 0 < cfg.threshold < cfg.lookahead):
            return "degenerate"
    return "main"


@dataclass(frozen=True)
class Candidate:
    """A violating (configuration, state, budget), ordered by the minimisation key."""

    key: tuple[int, ...]
    cfg: Config
    c: int
    budget: int


def _key(cfg: Config) -> tuple[int, ...]:
    return (cfg.T, cfg.block, cfg.lookahead, cfg.max_sched, int(cfg.drop), cfg.threshold, cfg.H)


@dataclass
class Tally:
    """Counts and minimal candidates, per property and category; mergeable across families."""

    failing: dict[tuple[str, str], int] = field(default_factory=dict)
    best: dict[tuple[str, str], list[Candidate]] = field(default_factory=dict)
    configs: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    states: int = 0
    transitions: int = 0
    evaluations: int = 0
    progress_budgets: dict[str, int] = field(
        default_factory=lambda: {
            "max": 0,
            "below_block": 0,
            "at_block": 0,
            "above_block": 0,
            "none": 0,
        }
    )
    cost: dict[str, Any] = field(default_factory=lambda: {"worst_excess": None, "at": None})

    def offer(self, slot: tuple[str, str], cands: list[Candidate]) -> None:
        """Keep only the candidates with the smallest (T, B, L, M)."""
        current = self.best.get(slot)
        if not current or cands[0].key[:4] < current[0].key[:4]:
            self.best[slot] = cands
        elif cands[0].key[:4] == current[0].key[:4]:
            self.best[slot] = current + cands

    def add(self, policy: Policy, result: ConfigResult, wanted: Sequence[str]) -> None:
        cat = category(policy, result.cfg)
        self.configs[cat] += 1
        self.states += len(result.reach)
        self.transitions += result.transitions
        key = _key(result.cfg)
        for pid in wanted:
            if not result.violated(pid):
                continue
            slot = (pid, cat)
            self.failing[slot] = self.failing.get(slot, 0) + 1
            head = self.best.get(slot)
            if not head or key[:4] <= head[0].key[:4]:
                self.offer(
                    slot, [Candidate(key, result.cfg, w.c, w.budget) for w in result.witnesses(pid)]
                )
        if cat == "main":
            self._figures(result)

    def _figures(self, result: ConfigResult) -> None:
        b, block, fig = result.progress_budget, result.cfg.block, self.progress_budgets
        if b is None:
            fig["none"] += 1
        else:
            fig["max"] = max(fig["max"], b)
            fig["at_block" if b == block else "below_block" if b < block else "above_block"] += 1
        excess = result.cost.get("worst_excess")
        worst = self.cost["worst_excess"]
        if excess is not None and (worst is None or excess > worst):
            self.cost = {
                "worst_excess": excess,
                "at": {**_brief(result.cfg), "budget": result.cost["worst_budget"]},
            }

    def merge(self, other: Tally) -> None:
        for slot, count in other.failing.items():
            self.failing[slot] = self.failing.get(slot, 0) + count
        for slot, cands in other.best.items():
            self.offer(slot, cands)
        for cat, count in other.configs.items():
            self.configs[cat] += count
        self.states += other.states
        self.transitions += other.transitions
        self.evaluations += other.evaluations
        fig = self.progress_budgets
        for name, value in other.progress_budgets.items():
            fig[name] = max(fig[name], value) if name == "max" else fig[name] + value
        worst = self.cost["worst_excess"]
        if other.cost["worst_excess"] is not None and (
            worst is None or other.cost["worst_excess"] > worst
        ):
            self.cost = other.cost


@dataclass
class Exploration:
    """The outcome of exploring a grid."""

    policy: Policy
    ranges: Ranges
    properties: tuple[str, ...]
    window: str
    tally: Tally

    def failing(self, pid: str, cat: str) -> int:
        return self.tally.failing.get((pid, cat), 0)


def _explore_batch(
    policy: Policy, batch: list[Config], ranges: Ranges, wanted: Sequence[str], window: str
) -> Tally:
    tally = Tally()
    for tables in family_tables(policy, batch, ranges.max_sched, ranges.budget, wanted, window):
        tally.evaluations += tables.chunk.size
        for sg in state_graphs(tables):
            for m in sg.ms:
                tally.add(policy, evaluate_config(tables, sg, m, ranges.budget), wanted)
    return tally


_WORKER: dict[str, Any] = {}


def _worker_init(policy: Policy, ranges: Ranges, wanted: Sequence[str], window: str) -> None:
    _WORKER.update(policy=policy, ranges=ranges, wanted=wanted, window=window)


def _worker(batch: list[Config]) -> Tally:
    return _explore_batch(
        _WORKER["policy"], batch, _WORKER["ranges"], _WORKER["wanted"], _WORKER["window"]
    )


def _tallies(
    policy: Policy,
    batches: list[list[Config]],
    ranges: Ranges,
    wanted: Sequence[str],
    window: str,
    jobs: int,
) -> Iterator[Tally]:
    if jobs <= 1 or len(batches) < 2:
        for batch in batches:
            yield _explore_batch(policy, batch, ranges, wanted, window)
        return
    # fork: the policy (functions, closures) is inherited, not pickled.
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(
        jobs, initializer=_worker_init, initargs=(policy, ranges, wanted, window)
    ) as pool:
        yield from pool.imap_unordered(_worker, batches)


def explore(
    policy: Policy,
    ranges: Ranges,
    wanted: Sequence[str],
    window: str = "relaxed",
    jobs: int = 1,
    tick: Callable[[int, int], None] | None = None,
) -> Exploration:
    """Explore every configuration of ``ranges`` and tally the violations of ``wanted``.

    ``tick(done, total)`` is called after each batch of families.
    """
    batches = ranges.batches()
    total = Tally()
    for done, tally in enumerate(_tallies(policy, batches, ranges, wanted, window, jobs), 1):
        total.merge(tally)
        if tick is not None:
            tick(done, len(batches))
    return Exploration(policy, ranges, tuple(wanted), window, total)


def _brief(cfg: Config) -> dict[str, Any]:
    return {
        "T": cfg.T,
        "B": cfg.block,
        "L": cfg.lookahead,
        "M": cfg.max_sched,
        "drop": cfg.drop,
        "theta": cfg.threshold,
    }


def minimal_counterexample(exploration: Exploration, pid: str, cat: str) -> Counterexample | None:
    """The minimal counterexample of ``pid`` in category ``cat``: smallest T, B, L, M (the
    candidates kept by the tally), then the shortest trace, then D, theta, H, c."""
    cands = exploration.tally.best.get((pid, cat))
    if not cands:
        return None
    policy, ranges = exploration.policy, exploration.ranges
    graphs: dict[tuple[int, ...], StateGraph] = {}
    best: tuple[tuple[int, ...], Candidate, StateGraph] | None = None
    for cand in cands:
        sg = graphs.get(cand.key)
        if sg is None:
            sg = _graph_for(policy, cand.cfg, ranges)
            graphs[cand.key] = sg
        high = budget_bounds(cand.cfg, ranges.budget)[1]
        length = len(shortest_path(sg, cand.cfg.start, cand.c, high))
        rank = (*cand.key[:4], length, *cand.key[4:], cand.c)
        if best is None or rank < best[0]:
            best = (rank, cand, sg)
    assert best is not None
    _, cand, sg = best
    steps = trace_to(policy, cand.cfg, sg, Witness(cand.c, cand.budget), ranges.budget)
    high = budget_bounds(cand.cfg, ranges.budget)[1]
    if not violates(pid, cand.cfg, steps[-1], exploration.window, high):
        raise AssertionError(f"{pid}: the explorer's witness does not violate on replay")
    return build_counterexample(
        policy, cand.cfg, pid, steps, exploration.window, ranges.budget, ranges.describe()
    )


def _graph_for(policy: Policy, cfg: Config, ranges: Ranges) -> StateGraph:
    tables = family_tables(policy, [cfg], (cfg.max_sched,), ranges.budget)
    return state_graphs(tables[0])[0]
