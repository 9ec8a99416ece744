"""Explore a space with the explicit engine, classify what fails, and minimise counterexamples
across configurations (the single-request model, SPEC P0-P8).

Each configuration falls in one category (:func:`category`): inside the verdict's range
(``main``), in the degenerate region of SPEC CLI (``degenerate``), or outside what the release
accepts (``refused``, SPEC S1b). Workers explore batches
(:func:`chunkproof.checker.engines.explorer.
explore_batch`) and return a :class:`Tally`; only the best candidate of each (property,
category) travels back, with its trace as (state, budget) pairs. The main process rebuilds the
trace with the policy's concrete form, which must land where the explorer says
(:func:`minimal_counterexample`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunkproof.checker.engines.executor import Executor, as_executor
from chunkproof.checker.engines.explorer import NO_WITNESS, Explored, explore_batch
from chunkproof.checker.engines.traces import ModelMismatch, build_counterexample, violates
from chunkproof.model import stages
from chunkproof.model.config import Config
from chunkproof.model.counterexample import Counterexample
from chunkproof.model.policy import Policy
from chunkproof.model.step import Step, step
from chunkproof.model.subset import parse
from chunkproof.model.vectorised import evaluate
from chunkproof.spec.properties import Scope, property_scope
from chunkproof.spec.request import Batch, Figures, RequestModel, budget_bounds

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


def rank(cfg: Config, length: int) -> tuple[Any, ...]:
    """SPEC C's minimisation order: T, then B, L, M, then the trace length, then every other
    field."""
    rest = tuple(
        int(v)
        for k, v in cfg.to_dict().items()
        if k not in ("tokens", "block", "lookahead", "max_sched")
    )
    return (cfg.T, cfg.block, cfg.lookahead, cfg.max_sched, length, *rest)


@dataclass(frozen=True)
class Candidate:
    """A violating configuration and how to reach the violation: the steps (c, budget) from c0,
    then the violating step."""

    rank: tuple[Any, ...]
    cfg: Config
    path: tuple[tuple[int, int], ...]
    final: tuple[int, int]


@dataclass
class Tally:
    """Counts, figures and the minimal candidate per property and category; mergeable."""

    failing: dict[tuple[str, str], int] = field(default_factory=dict)
    best: dict[tuple[str, str], Candidate] = field(default_factory=dict)
    configs: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    scoped: dict[tuple[str, str], int] = field(default_factory=dict)
    """Per (property, category), the configurations inside the property's scope, for a
    property that judges only some (:func:`~chunkproof.spec.properties.property_scope`)."""
    states: int = 0
    transitions: int = 0
    progress_budgets: dict[str, int] = field(
        default_factory=lambda: {
            "max": 0,
            "below_block": 0,
            "at_block": 0,
            "above_block": 0,
            "none": 0,
        }
    )
    cost: dict[str, Any] = field(
        default_factory=lambda: {
            "runs": 0,
            "stuck_runs": 0,
            "stuck_runs_below_block": 0,
            "worst_excess": None,
            "at": None,
        }
    )

    def merge(self, other: Tally) -> None:
        for slot, count in other.failing.items():
            self.failing[slot] = self.failing.get(slot, 0) + count
        for slot, cand in other.best.items():
            current = self.best.get(slot)
            if current is None or cand.rank < current.rank:
                self.best[slot] = cand
        for cat, count in other.configs.items():
            self.configs[cat] += count
        for slot, count in other.scoped.items():
            self.scoped[slot] = self.scoped.get(slot, 0) + count
        self.states += other.states
        self.transitions += other.transitions
        fig = self.progress_budgets
        for name, value in other.progress_budgets.items():
            fig[name] = max(fig[name], value) if name == "max" else fig[name] + value
        for name in ("runs", "stuck_runs", "stuck_runs_below_block"):
            self.cost[name] += other.cost[name]
        worst = self.cost["worst_excess"]
        theirs = other.cost["worst_excess"]
        if theirs is not None and (worst is None or theirs > worst):
            self.cost["worst_excess"], self.cost["at"] = theirs, other.cost["at"]

    def add_figures(
        self, batch: Batch, figures: Figures, main: np.ndarray, livelock: np.ndarray
    ) -> None:
        """P2's b* and P7's const runs of the batch's configurations inside the range."""
        fig = self.progress_budgets
        fig["none"] += int((main & livelock).sum())
        live = main & ~livelock
        b = figures.progress_budget[live]
        block = np.broadcast_to(np.asarray(batch.fields["block"]), (len(batch),))[live]
        if len(b):
            fig["max"] = max(fig["max"], int(b.max()))
        fig["at_block"] += int((b == block).sum())
        fig["below_block"] += int((b < block).sum())
        fig["above_block"] += int((b > block).sum())
        cost = self.cost
        cost["runs"] += int(figures.runs[main].sum())
        cost["stuck_runs"] += int(figures.stuck_runs[main].sum())
        cost["stuck_runs_below_block"] += int(figures.stuck_below_block[main].sum())
        worst = np.where(main, figures.worst_excess, -1)
        if len(worst) and worst.max() >= 0:
            i = int(worst.argmax())
            if cost["worst_excess"] is None or int(worst[i]) > cost["worst_excess"]:
                cost["worst_excess"] = int(worst[i])
                cost["at"] = {
                    "config": batch.configs[i].describe(),
                    "budget": int(figures.worst_budget[i]),
                }


@dataclass
class Exploration:
    """The outcome of exploring a space."""

    model: RequestModel
    properties: tuple[str, ...]
    tally: Tally

    @property
    def policy(self) -> Policy:
        return self.model.policy

    @property
    def window(self) -> str:
        return self.model.window

    def failing(self, pid: str, cat: str) -> int:
        return self.tally.failing.get((pid, cat), 0)


def categories(policy: Policy, batch: Batch) -> np.ndarray:
    """The category of every instance (an index into :data:`CATEGORIES`), from the rules of
    :func:`category` evaluated over the batch at once."""
    view = batch.view(np.arange(len(batch)))
    size = len(batch)
    accepted = np.ones(size, dtype=bool)
    for rule in policy.acceptance:
        holds = evaluate(parse(rule.holds), [view]).value  # a truth, maybe an operand (SPEC Q1)
        accepted &= np.broadcast_to(np.asarray(holds, dtype=bool), size)
    degenerate = np.zeros(size, dtype=bool)
    if policy.stage("reservation") is not None:
        cap = policy.stage("cap")
        static_theta = cap is not None and cap.function is stages.cap_static_threshold
        lookahead = np.broadcast_to(np.asarray(view.lookahead), size)
        m = np.broadcast_to(np.asarray(view.max_sched), size)
        theta = np.broadcast_to(np.asarray(view.threshold), size)
        low_theta = (0 < theta) & (theta < lookahead) if static_theta else np.zeros(size, bool)
        degenerate = (lookahead >= 2) & ((m < lookahead) | low_theta)
    return np.where(~accepted, 2, np.where(degenerate, 1, 0))


def _rank_columns(batch: Batch, length: np.ndarray) -> list[np.ndarray]:
    """:func:`rank` of every instance, column by column (most significant first)."""
    size = len(batch)

    def column(name: str) -> np.ndarray:
        return np.broadcast_to(np.asarray(batch.fields[name], dtype=np.int64), (size,))

    head = [column(n) for n in ("tokens", "block", "lookahead", "max_sched")]
    rest = [
        column(n) for n in batch.fields if n not in ("tokens", "block", "lookahead", "max_sched")
    ]
    return [*head, length, *rest]


def tally_batch(model: RequestModel, wanted: tuple[str, ...], batch: Batch) -> Tally:
    """Explore one batch and tally it (module docstring)."""
    explored = explore_batch(model, batch)
    figures = model.figures(batch, explored.states, explored.steps)
    cats = categories(model.policy, batch)
    tally = Tally()
    for index, cat in enumerate(CATEGORIES):
        tally.configs[cat] = int((cats == index).sum())
    tally.states = int(explored.instance_states().sum())
    tally.transitions = int(explored.instance_transitions().sum())
    livelock = explored.witness["P1"] != NO_WITNESS
    for pid in wanted:
        scope = property_scope(model.policy, pid)
        if scope is not None:
            inside = scope_lanes(scope, batch)
            for index, cat in enumerate(CATEGORIES):
                tally.scoped[(pid, cat)] = int((inside & (cats == index)).sum())
        violated, length = _violations(explored, pid, figures)
        columns = _rank_columns(batch, length)
        for index, cat in enumerate(CATEGORIES):
            members = np.flatnonzero(violated & (cats == index))
            if not len(members):
                continue
            order = np.lexsort([col[members] for col in reversed(columns)])
            best = int(members[order[0]])
            slot = (pid, cat)
            tally.failing[slot] = len(members)
            tally.best[slot] = _candidate(explored, pid, best, batch.configs[best], figures)
    main = cats == 0
    tally.add_figures(batch, figures, main, livelock)
    return tally


def scope_lanes(scope: Scope, batch: Batch) -> np.ndarray:
    """Which instances of ``batch`` lie inside ``scope``."""
    inside = evaluate(parse(scope.holds), [batch.view(np.arange(len(batch)))]).value
    return np.broadcast_to(np.asarray(inside, dtype=bool), (len(batch),))


def _violations(explored: Explored, pid: str, figures: Figures) -> tuple[np.ndarray, np.ndarray]:
    """Which instances violate ``pid`` (P2 with P1; P7 from its const runs), and the length of
    each one's witness trace."""
    if pid == "P7":
        violated = figures.stuck_runs > 0
        return violated, np.zeros(len(violated), dtype=np.int64)
    witness = explored.witness["P1" if pid == "P2" else pid]
    violated = witness != NO_WITNESS
    source = explored.steps.source[np.where(violated, witness, 0)]
    return violated, np.where(violated, explored.depth[source] + 1, 0)


def _candidate(explored: Explored, pid: str, i: int, cfg: Config, figures: Figures) -> Candidate:
    """Instance ``i``'s witness of ``pid`` (it violates it): its BFS-shortest trace, or for P7
    the const run of the least budget that never finishes."""
    if pid == "P7":
        budget = int(figures.first_stuck_budget[i])
        return Candidate(rank(cfg, 0), cfg, (), (cfg.start, budget))
    index = int(explored.witness["P1" if pid == "P2" else pid][i])
    state = int(explored.steps.source[index])
    path = tuple((int(explored.states[s, 1]), action) for s, action in explored.path(state))
    final = (int(explored.states[state, 1]), int(explored.steps.action[index]))
    return Candidate(rank(cfg, len(path) + 1), cfg, path, final)


def explore(
    model: RequestModel,
    wanted: tuple[str, ...],
    jobs: int | Executor = 1,
    tick: Callable[[int, int], None] | None = None,
) -> Exploration:
    """Explore every configuration of the model's space and tally the violations of
    ``wanted``, the batches on ``jobs`` (an executor, or the size of the local pool);
    ``tick(done, total)`` after each batch."""
    batches = list(model.batches())
    total = Tally()
    tallies = as_executor(jobs).map(tally_batch, (model, wanted), batches)
    for done, tally in enumerate(tallies, 1):
        total.merge(tally)
        if tick is not None:
            tick(done, len(batches))
    return Exploration(model, wanted, total)


def minimal_counterexample(exploration: Exploration, pid: str, cat: str) -> Counterexample | None:
    """The minimal counterexample of ``pid`` in category ``cat`` (SPEC C: smallest T, B, L, M,
    then the shortest trace), its steps rebuilt by the policy's concrete form."""
    cand = exploration.tally.best.get((pid, cat))
    if cand is None:
        return None
    model = exploration.model
    steps = replay_candidate(model.policy, cand, pid)
    high = budget_bounds(cand.cfg, model.space.budget)[1]
    if not violates(pid, cand.cfg, steps[-1], model.window, high, policy=model.policy):
        raise ModelMismatch(f"{pid}: the explorer's witness does not violate on replay")
    return build_counterexample(
        model.policy, cand.cfg, pid, steps, model.window, model.space.budget, model.space.describe()
    )


def replay_candidate(policy: Policy, cand: Candidate, pid: str) -> list[Step]:
    """The candidate's trace, step by step in the concrete form: each step must land on the next
    recorded state (the vectorised and concrete forms agree)."""
    if pid == "P7":
        return constant_run(policy, cand.cfg, cand.final[1])
    steps = []
    targets = [c for c, _ in cand.path[1:]] + [cand.final[0]]
    for (c, budget), target in zip(cand.path, targets[: len(cand.path)], strict=True):
        s = step(policy, cand.cfg, c, budget)
        if s.end != target or s.unsafe is not None:
            raise ModelMismatch(
                f"{policy.name}: the vectorised form goes {c} -> {target} with budget {budget}, "
                f"the concrete form to {s.end}"
            )
        steps.append(s)
    steps.append(step(policy, cand.cfg, *cand.final))
    return steps


def constant_run(policy: Policy, cfg: Config, budget: int) -> list[Step]:
    """``const(budget)`` from c0 until the prefill ends, a step yields 0, or a step breaks P0."""
    c, steps = cfg.start, []
    while c < cfg.prefill_end:
        s = step(policy, cfg, c, budget)
        steps.append(s)
        if s.chunk <= 0 or s.unsafe is not None:
            break
        c = s.end
    return steps
