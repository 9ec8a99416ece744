"""Compare two policies (SPEC CLI ``compare``): what a change fixes, what it breaks, where, and
what it costs.

* **Verdicts.** Each policy is checked by the engines of ``chunkproof check`` (the explorer on
  the grid, the prover on the production range unless ``--no-prove``); per property the change
  from A to B is :data:`FIXED`, :data:`INTRODUCED`, :data:`CHANGED`, :data:`UNCHANGED` or, when
  either side is UNKNOWN, :data:`UNDECIDED` (:func:`verdict_change`).
* **Where each fails** (SPEC CLI ``compare``). For every property, the configurations of the grid
  where only A fails, only B fails, and both fail (:class:`WhereTally`), with the smallest
  configuration of each, re-checked natively (:func:`example_failures`). A row whose two
  verdicts agree reads "changed" when those sets differ.
* **Behaviour.** On every configuration of the grid, for every constant budget (SPEC S4
  ``const(b)``), the chunk sequences of A and B from c0 are computed together from the
  policies' tables (:func:`tables`), and every pair that differs is classified
  (:data:`KINDS`); the (state, budget) steps reachable under either policy (SPEC S4
  adversarial budgets) whose chunks differ are counted as well.
* **Cost.** SPEC P7 from the same runs: steps to finish against ceil((E - c0) / b).

One vectorised pass per batch of configurations computes all of it: a breadth-first search
over the states either policy reaches evaluates both policies at each of them with every
offered budget (:func:`tables`), keeping, besides every chunk, every step property; the states
each policy reaches under adversarial budgets (:func:`reachable`) select the transitions the
explorer visits, so a configuration fails a step property exactly when a reachable transition
violates it (P2 follows P1, P7 is a const(b) run that never finishes), as in
:mod:`chunkproof.checker.engines.search`. Each policy's counts inside its own verdict's scope must
equal
the explorer's (:func:`check_agreement`).

The population of the last three is the configurations both policies' verdicts cover: both
accept them (SPEC S1b), neither finds them degenerate (SPEC CLI), with budgets b in the range's
low..min(M, T - c0) (budgets above T - c0 give the run of T - c0: every composition starts with
n = min(T - c, ..., b)).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunkproof.checker.engines.executor import Executor, as_executor
from chunkproof.checker.engines.explorer import NO_WITNESS, explore_batch
from chunkproof.checker.engines.search import (
    Candidate,
    categories,
    constant_run,
    rank,
    replay_candidate,
    scope_lanes,
)
from chunkproof.checker.engines.traces import ModelMismatch, violates
from chunkproof.checker.engines.verdicts import EMPTY, PROVED, UNKNOWN, VIOLATED, Verdict
from chunkproof.model.config import Config
from chunkproof.model.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNKNOWN, EXIT_VIOLATED
from chunkproof.model.policy import Policy
from chunkproof.model.step import Step, step
from chunkproof.model.trajectory import Trajectory, run
from chunkproof.spec.properties import (
    DEFAULT_WINDOW,
    PROPERTIES,
    Scope,
    ideal_steps,
    property_scope,
)
from chunkproof.spec.request import (
    STEP_PROPERTIES,
    Batch,
    RequestModel,
    budget_bounds,
    make_batch,
)
from chunkproof.spec.space import Space

FIXED, INTRODUCED, UNCHANGED, UNDECIDED = "fixed", "introduced", "unchanged", "undecided"
CHANGED = "changed"


def verdict_change(a: str, b: str, moved: bool = False) -> str:
    """The change of one property's verdict from A to B.

    * undecided whenever either side is UNKNOWN (SPEC P: UNKNOWN is never treated as a pass,
      nor as a failure);
    * fixed: VIOLATED -> PROVED; introduced: PROVED or EMPTY -> VIOLATED (B fails where A
      covered nothing, or held);
    * changed: the same status, but the configurations where each fails differ (``moved``:
      only A or only B fails somewhere on the grid), or one side is EMPTY (no configuration in
      scope) and the other is not: an EMPTY is not a pass, so VIOLATED -> EMPTY is no fix;
    * unchanged otherwise.
    """
    if UNKNOWN in (a, b):
        return UNDECIDED
    if (a, b) == (VIOLATED, PROVED):
        return FIXED
    if b == VIOLATED and a in (PROVED, EMPTY):
        return INTRODUCED
    if a != b or moved:
        return CHANGED
    return UNCHANGED


@dataclass(frozen=True)
class Side:
    """One policy of a comparison with its ``check`` verdicts, what the engines did, and its
    explorer's own verdicts on the grid (``explored``; the same as ``verdicts`` with
    ``--no-prove``). A ``check`` verdict combines the grid with the production range, and when
    only the prover fails a property its counts are the prover's cells: the grid's
    per-configuration tallies are compared with ``explored`` alone (:func:`check_agreement`)."""

    policy: Policy
    verdicts: tuple[Verdict, ...]
    engines: dict[str, Any]
    explored: tuple[Verdict, ...]

    def grid_verdict(self, pid: str) -> Verdict | None:
        """The explorer's verdict of ``pid`` on the grid, if it was checked."""
        return next((v for v in self.explored if v.property == pid), None)


# -- where each fails -----------------------------------------------------------------------------

GROUPS: dict[str, str] = {
    "only_a": "only A fails",
    "only_b": "only B fails",
    "both": "both fail",
    "a_where_b_crashes": "A fails where B breaks P0",
    "b_where_a_crashes": "B fails where A breaks P0",
}
"""How the configurations where a property fails split between the two policies. A step that
breaks P0 has no successor (SPEC Q3), so a side that breaks P0 in a configuration holds another
property there only on the states before its crash: that is its P0 failure, never a pass of
the other property, and a configuration where only the other side fails that property is
counted apart from "only A fails" and "only B fails"."""

CRASH_GROUPS = {"a_where_b_crashes": 1, "b_where_a_crashes": 0}
"""The groups where a side breaks P0 and the other fails the property: the crashing side."""


_HEAD = ("tokens", "block", "lookahead", "max_sched")


def config_key(cfg: Config) -> tuple[int, ...]:
    """SPEC C's order of configurations: T, then B, L, M, then every other field."""
    fields = cfg.to_dict()
    rest = tuple(int(v) for k, v in fields.items() if k not in _HEAD)
    return (*(int(fields[k]) for k in _HEAD), *rest)


@dataclass(frozen=True, order=True)
class ConfigAt:
    """One configuration of the grid with the properties each policy fails there, as the
    tables say (A's at index 0)."""

    key: tuple[int, ...]
    cfg: Config = field(compare=False)
    fails: tuple[frozenset[str], frozenset[str]] = field(compare=False)


@dataclass
class WhereTally:
    """One property over the configurations both verdicts cover: how many fail under only A,
    only B, both, and the smallest of each (:func:`config_key`); ``own`` counts each policy's
    failing configurations inside its own verdict's scope (what its explorer verdict counts)."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GROUPS, 0))
    smallest: dict[str, ConfigAt] = field(default_factory=dict)
    own: list[int] = field(default_factory=lambda: [0, 0])

    @property
    def moved(self) -> bool:
        """Whether the two policies fail in different configurations."""
        return any(self.counts[g] for g in GROUPS if g != "both")

    def only_where_crashed(self, side: int) -> bool:
        """Whether the policy at index ``side`` fails on the grid, and only in configurations
        where the other breaks P0 (:data:`GROUPS`)."""
        crash_group = "b_where_a_crashes" if side == 1 else "a_where_b_crashes"
        alone = "only_b" if side == 1 else "only_a"
        return bool(self.counts[crash_group]) and not (self.counts[alone] or self.counts["both"])

    @property
    def failing(self) -> int:
        return sum(self.counts.values())

    def offer(self, group: str, at: ConfigAt) -> None:
        if group not in self.smallest or at < self.smallest[group]:
            self.smallest[group] = at

    def merge(self, other: WhereTally) -> None:
        for group, count in other.counts.items():
            self.counts[group] += count
        for group, at in other.smallest.items():
            self.offer(group, at)
        self.own = [x + y for x, y in zip(self.own, other.own, strict=True)]


@dataclass(frozen=True)
class NativeRun:
    """One configuration under one policy, explored natively (the concrete form, state by
    state): the witness trace of every property it fails (breadth-first: shortest, then the
    least state and budget; for P7 the const(b) run of the least budget that never finishes)
    and how many states are reachable."""

    witness: dict[str, tuple[Step, ...]]
    states: int

    @property
    def fails(self) -> frozenset[str]:
        return frozenset(self.witness)


def native_failures(
    policy: Policy, cfg: Config, window: str, budget: tuple[int, int] | None
) -> NativeRun:
    """Every property ``policy`` fails at ``cfg`` (module docstring), natively: a breadth-first
    search of the states reachable under every offered budget (SPEC S4), each step checked
    with :func:`chunkproof.checker.engines.traces.violates`, and the const(b) runs (P7)."""
    low, high = budget_bounds(cfg, budget)
    parent: dict[int, tuple[int, Step] | None] = {cfg.start: None}
    witness: dict[str, tuple[Step, ...]] = {}

    def path(c: int) -> list[Step]:
        steps: list[Step] = []
        link = parent[c]
        while link is not None:
            steps.append(link[1])
            link = parent[link[0]]
        return steps[::-1]

    frontier = [cfg.start]
    while frontier:
        following = []
        for c in sorted(frontier):
            for b in range(low, high + 1):
                s = step(policy, cfg, c, b)
                for pid in STEP_PROPERTIES:
                    if pid not in witness and violates(pid, cfg, s, window, high, policy=policy):
                        witness[pid] = (*path(c), s)
                moves = s.unsafe is None and s.chunk > 0 and s.end < cfg.prefill_end
                if moves and s.end not in parent:
                    parent[s.end] = (c, s)
                    following.append(s.end)
        frontier = following
    if "P1" in witness:
        witness["P2"] = witness["P1"]
    for b in range(low, high + 1):
        steps = constant_run(policy, cfg, b)
        if steps and violates("P7", cfg, steps[-1], window, high, policy=policy):
            witness["P7"] = tuple(steps)
            break
    order = {pid: i for i, pid in enumerate(PROPERTIES)}
    return NativeRun(dict(sorted(witness.items(), key=lambda kv: order[kv[0]])), len(parent))


NATIVE_LANES = 1 << 15
"""Most (state, budget) pairs of a configuration :func:`example_failures` searches natively;
a larger one is searched by the explorer, and its witnesses are replayed natively."""


def example_failures(
    policy: Policy, cfg: Config, window: str, budget: tuple[int, int] | None
) -> NativeRun:
    """:func:`native_failures` when ``cfg`` is small enough (:data:`NATIVE_LANES`), else
    :func:`replayed_failures`."""
    low, high = budget_bounds(cfg, budget)
    if (cfg.prefill_end - cfg.start) * max(high - low + 1, 0) <= NATIVE_LANES:
        return native_failures(policy, cfg, window, budget)
    return replayed_failures(policy, cfg, window, budget)


def replayed_failures(
    policy: Policy, cfg: Config, window: str, budget: tuple[int, int] | None
) -> NativeRun:
    """Every property ``policy`` fails at ``cfg``, by the explorer
    (:func:`~chunkproof.checker.engines.explorer.explore_batch` on this configuration alone), each
    witness replayed natively: every step must land where the explorer says, and the last one
    must violate the property."""
    model = RequestModel(policy, Space((), budget), window)
    batch = make_batch([cfg], budget)
    explored = explore_batch(model, batch)
    figures = model.figures(batch, explored.states, explored.steps)
    high = budget_bounds(cfg, budget)[1]
    found: dict[str, tuple[tuple[tuple[int, int], ...], tuple[int, int]]] = {}
    for pid in STEP_PROPERTIES:
        index = int(explored.witness[pid][0])
        if index != NO_WITNESS:
            state = int(explored.steps.source[index])
            path = tuple((int(explored.states[s, 1]), a) for s, a in explored.path(state))
            found[pid] = (path, (int(explored.states[state, 1]), int(explored.steps.action[index])))
    if "P1" in found:
        found["P2"] = found["P1"]
    if figures.stuck_runs[0] > 0:
        found["P7"] = ((), (cfg.start, int(figures.first_stuck_budget[0])))
    witness = {}
    for pid in PROPERTIES:
        if pid in found:
            path, final = found[pid]
            steps = replay_candidate(policy, Candidate(rank(cfg, 0), cfg, path, final), pid)
            if not violates(pid, cfg, steps[-1], window, high, policy=policy):
                raise ModelMismatch(f"{cfg.describe()}: the explorer's {pid} witness replays clean")
            witness[pid] = tuple(steps)
    return NativeRun(witness, int(explored.instance_states()[0]))


@dataclass(frozen=True)
class WhereExample:
    """The smallest configuration of one group (:data:`GROUPS`) of one property, with both
    policies' native runs (they agree with the tables on every property)."""

    pid: str
    group: str
    cfg: Config
    a: NativeRun
    b: NativeRun


# -- behaviour ------------------------------------------------------------------------------------

KINDS: dict[str, str] = {
    "a_stuck_b_finishes": "A stuck, B finishes",
    "a_finishes_b_stuck": "A finishes, B stuck",
    "b_more_steps": "both finish, B takes more steps",
    "b_fewer_steps": "both finish, B takes fewer steps",
    "same_steps_other_ends": "both finish in as many steps, at other chunk ends",
    "stuck_elsewhere": "both stuck, at different points",
    "stuck_same_point": "both stuck at the same point, by other chunk ends",
}
"""Kinds of difference between two const(b) runs that do not take the same chunks."""

_KIND_NAMES = tuple(KINDS)
IDENTICAL = -1

EXAMPLES_PER_KIND = 3


def kind_codes(
    differ: np.ndarray,
    stuck: np.ndarray,
    steps: np.ndarray,
    last: np.ndarray,
) -> np.ndarray:
    """The kind of each pair of runs (an index into :data:`KINDS`), :data:`IDENTICAL` where
    the chunk sequences are equal. ``stuck``, ``steps`` (chunks taken) and ``last`` (the final
    state) hold A along axis 0 and B along axis 1."""
    finish = ~stuck[0] & ~stuck[1]
    conditions = [
        ~differ,
        stuck[0] & ~stuck[1],
        ~stuck[0] & stuck[1],
        finish & (steps[1] > steps[0]),
        finish & (steps[1] < steps[0]),
        finish,
        last[0] != last[1],
    ]
    return np.select(conditions, [IDENTICAL, 0, 1, 2, 3, 4, 5], default=6)


def classify(a: Trajectory, b: Trajectory) -> str | None:
    """:func:`kind_codes` for two native trajectories: the kind's key, ``None`` if equal."""
    code = int(
        kind_codes(
            np.asarray(a.ends != b.ends),
            np.asarray([not a.finished, not b.finished]),
            np.asarray([len(a.chunks), len(b.chunks)]),
            np.asarray([a.steps[-1].end, b.steps[-1].end]),
        )
    )
    return None if code == IDENTICAL else _KIND_NAMES[code]


@dataclass(frozen=True)
class PairedRuns:
    """``const(b)`` from c0 under A (axis 0) and B (axis 1) for every (instance, budget):
    chunks taken, the final state, whether the run got stuck; ``differ`` where the two chunk
    sequences are not equal."""

    steps: np.ndarray
    last: np.ndarray
    stuck: np.ndarray
    differ: np.ndarray


def paired_runs(
    chunks: np.ndarray, valid: np.ndarray, start: np.ndarray, end: np.ndarray
) -> PairedRuns:
    """Run both policies' tables ``chunks[p, i, c - c0_i, j]`` in lockstep on the runs marked
    ``valid[i, j]`` (SPEC S4 ``const(low_i + j)`` for instance i, which starts at ``start[i]``
    and finishes at ``end[i]``). A step of 0 under a constant budget repeats forever (SPEC P1:
    c, T and the flags do not change), and a step that breaks P0 (-1 in the table) ends the run,
    so both count as stuck; two runs take the same chunks exactly when their states agree at
    every step. Each step moves only the runs still going (flat indices into the arrays)."""
    _, instances, depth, width = chunks.shape
    pairs = instances * width
    c = np.broadcast_to(start[:, None], valid.shape).astype(np.int64).ravel()
    c = np.concatenate([c, c])
    steps = np.zeros(2 * pairs, dtype=np.int64)
    stuck = np.zeros(2 * pairs, dtype=bool)
    differ = np.zeros(pairs, dtype=bool)
    table = chunks.ravel()
    own = np.flatnonzero(valid.ravel())
    live = np.concatenate([own, own + pairs])
    while len(live):
        side, pair = np.divmod(live, pairs)
        row, col = np.divmod(pair, width)
        k = table[((side * instances + row) * depth + c[live] - start[row]) * width + col]
        moving = k > 0
        stuck[live[~moving]] = True
        live, pair, row = live[moving], pair[moving], row[moving]
        c[live] += k[moving]
        steps[live] += 1
        differ[pair] |= c[pair] != c[pair + pairs]
        live = live[c[live] < end[row]]
    shape = (2, *valid.shape)
    return PairedRuns(
        steps.reshape(shape), c.reshape(shape), stuck.reshape(shape), differ.reshape(valid.shape)
    )


def reachable(chunks: np.ndarray, valid: np.ndarray, length: np.ndarray) -> np.ndarray:
    """``reach[p, i, s]``: state c0_i + s < E_i (``length[i]`` = E_i - c0_i) is reachable from
    c0 under policy p when any budget ``valid[i]`` offers may come at each step (SPEC S4
    adversarial budgets). Chunks never go back, so one pass in increasing c is complete."""
    sides, instances, states, _ = chunks.shape
    reach = np.zeros((sides, instances, states), dtype=bool)
    reach[:, :, 0] = True
    inside = length[None, :, None]
    for s in range(states):
        k = chunks[:, :, s, :]
        target = s + k
        moves = reach[:, :, s, None] & valid[None] & (k > 0) & (target < inside)
        p, i, j = np.nonzero(moves)
        reach[p, i, target[p, i, j]] = True
    return reach & (np.arange(states)[None, None, :] < length[None, :, None])


@dataclass(frozen=True)
class Tables:
    """Both policies (A at index 0) on every state c in [c0, E) of every instance that either
    reaches under adversarial budgets (SPEC S4), with every offered budget:
    ``chunk[p, i, c - c0_i, b - low_i]`` (-1 where the step breaks P0, and at the entries not
    evaluated: states neither policy reaches, budgets not offered) and, per step property,
    where the step violates it."""

    chunk: np.ndarray
    bad: dict[str, np.ndarray]


def tables(models: tuple[RequestModel, RequestModel], batch: Batch) -> Tables:
    """:class:`Tables` by a breadth-first search over the states either policy reaches: each
    level is one vectorised step of each policy over the frontier, every offered budget. Which
    policy reaches which of those states is :func:`reachable`, from the tables. A batch whose
    states the explorer would list (:meth:`RequestModel.state_space`: a long prefill under
    small budgets is thousands of levels of a few states each) is stepped at every state
    c in [c0, E) in one level instead; the entries of states neither policy reaches are then
    filled too, and every reader masks them by :func:`reachable`."""
    size = len(batch)
    length = batch.end - batch.start
    depth = int(length.max())
    width = int(max((batch.high - batch.low).max() + 1, 1))
    chunk = np.full((2, size * depth * width), -1, dtype=np.int64)
    bad = {pid: np.zeros((2, size * depth * width), dtype=bool) for pid in STEP_PROPERTIES}
    filling = _Filling(models, batch, depth, width, chunk, bad)
    if models[0].state_space(batch) is not None:
        inst, offset = _lanes(np.maximum(length, 0))
        filling.step(inst * depth + offset)
    else:
        seen = np.zeros(size * depth, dtype=bool)
        frontier = np.flatnonzero(length > 0) * depth
        seen[frontier] = True
        while len(frontier):
            following = filling.step(frontier)
            frontier = following[~seen[following]]
            seen[frontier] = True
    shape = (2, size, depth, width)
    return Tables(chunk.reshape(shape), {pid: m.reshape(shape) for pid, m in bad.items()})


@dataclass(frozen=True)
class _Filling:
    """The tables :func:`tables` fills, and how to step a set of states into them."""

    models: tuple[RequestModel, RequestModel]
    batch: Batch
    depth: int
    width: int
    chunk: np.ndarray
    bad: dict[str, np.ndarray]

    def step(self, frontier: np.ndarray) -> np.ndarray:
        """Step both policies at the states ``frontier`` (instance * depth + c - c0) with
        every offered budget, fill their entries, and give the states either leads on to."""
        batch, depth = self.batch, self.depth
        length = batch.end - batch.start
        inst, offset = np.divmod(frontier, depth)
        states = np.stack([inst, batch.start[inst] + offset], axis=1)
        source, column = _lanes(np.maximum(batch.high - batch.low + 1, 0)[inst])
        at = frontier[source] * self.width + column
        owner = inst[source]
        targets = []
        for side, model in enumerate(self.models):
            steps = model.step(batch, states, source, batch.low[owner] + column)
            k = np.where(steps.bad["P0"], -1, steps.record["chunk"])
            self.chunk[side, at] = k
            for pid in STEP_PROPERTIES:
                self.bad[pid][side, at] = steps.bad[pid]
            target = offset[source] + k
            targets.append((owner * depth + target)[(k > 0) & (target < length[owner])])
        following: np.ndarray = np.unique(np.concatenate(targets))
        return following


def _lanes(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ``counts[k]`` lanes of each k: the owner k of every lane and its index within k."""
    owner = np.repeat(np.arange(len(counts)), counts)
    first = np.cumsum(counts) - counts
    return owner, np.arange(len(owner)) - first[owner]


@dataclass(frozen=True, order=True)
class RunAt:
    """One ``const(b)`` run of one configuration, ordered by SPEC C's minimisation key:
    T, then B, L, M, the budget, then every other field."""

    key: tuple[int, ...]
    cfg: Config = field(compare=False)
    budget: int = field(compare=False)

    @classmethod
    def of(cls, cfg: Config, budget: int) -> RunAt:
        key = config_key(cfg)
        return cls((*key[:4], budget, *key[4:]), cfg, budget)

    @property
    def cell(self) -> tuple[int, int]:
        """(B, L): examples of one kind come from distinct (B, L)."""
        return (self.key[1], self.key[2])

    def describe(self) -> str:
        return f"{self.cfg.describe()} const({self.budget})"


@dataclass
class CostTally:
    """SPEC P7 over the const(b) runs of one policy: how many finish, how many of the others
    have a budget below one block (``starved``, SPEC P2), the finished runs' steps against the
    ideal ceil((E - c0) / b), and the worst excess (the smallest run that has it)."""

    runs: int = 0
    finished: int = 0
    starved: int = 0
    steps: int = 0
    ideal: int = 0
    worst: tuple[int, RunAt] | None = None

    @property
    def stuck(self) -> int:
        return self.runs - self.finished

    @property
    def excess(self) -> int:
        return self.steps - self.ideal

    @property
    def mean_excess(self) -> float | None:
        return self.excess / self.finished if self.finished else None

    def offer_worst(self, excess: int, at: RunAt) -> None:
        if self.worst is None or (-excess, at) < (-self.worst[0], self.worst[1]):
            self.worst = (excess, at)

    def merge(self, other: CostTally) -> None:
        self.runs += other.runs
        self.finished += other.finished
        self.starved += other.starved
        self.steps += other.steps
        self.ideal += other.ideal
        if other.worst is not None:
            self.offer_worst(*other.worst)

    def to_dict(self) -> dict[str, Any]:
        mean = self.mean_excess
        return {
            "runs": self.runs,
            "finished": self.finished,
            "not_finished": self.stuck,
            "not_finished_below_block": self.starved,
            "steps": self.steps,
            "ideal_steps": self.ideal,
            "mean_excess": None if mean is None else round(mean, 4),
            "worst_excess": None if self.worst is None else self.worst[0],
            "worst_at": None if self.worst is None else run_dict(self.worst[1]),
        }


def run_dict(at: RunAt) -> dict[str, Any]:
    return {"config": at.cfg.to_dict(), "budget": at.budget, "describe": at.describe()}


@dataclass
class BehaviourTally:
    """Differences, where each policy fails, and costs over a grid; mergeable across
    batches."""

    configs: int = 0
    excluded: dict[str, int] = field(default_factory=dict)
    own_configs: list[int] = field(default_factory=lambda: [0, 0])
    """Configurations inside each policy's own verdict scope (its explorer's ``main``)."""
    own_scoped: dict[str, list[int]] = field(default_factory=dict)
    """For a property that judges only some configurations
    (:func:`~chunkproof.spec.properties.property_scope`), those of :attr:`own_configs` inside
    its scope under each policy's release (what its explorer verdict counts)."""
    differing_configs: int = 0
    runs: int = 0
    kinds: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    smallest: dict[str, dict[tuple[int, int], RunAt]] = field(
        default_factory=lambda: {kind: {} for kind in KINDS}
    )
    where: dict[str, WhereTally] = field(
        default_factory=lambda: {pid: WhereTally() for pid in PROPERTIES}
    )
    states: list[int] = field(default_factory=lambda: [0, 0])
    reachable_steps: int = 0
    differing_steps: int = 0
    cost: list[CostTally] = field(default_factory=lambda: [CostTally(), CostTally()])
    both_finished: list[CostTally] = field(default_factory=lambda: [CostTally(), CostTally()])
    """SPEC P7 of A and of B over the runs both finish."""

    @property
    def differing_runs(self) -> int:
        return sum(self.kinds.values())

    def offer(self, kind: str, at: RunAt) -> None:
        """Keep the smallest run of each kind per cell."""
        cells = self.smallest[kind]
        if at.cell not in cells or at < cells[at.cell]:
            cells[at.cell] = at

    def examples(self, kind: str) -> list[RunAt]:
        """The smallest runs of a kind, one per cell, at most :data:`EXAMPLES_PER_KIND`."""
        return sorted(self.smallest[kind].values())[:EXAMPLES_PER_KIND]

    def merge(self, other: BehaviourTally) -> None:
        self.configs += other.configs
        for why, count in other.excluded.items():
            self.excluded[why] = self.excluded.get(why, 0) + count
        self.own_configs = [x + y for x, y in zip(self.own_configs, other.own_configs, strict=True)]
        for pid, counts in other.own_scoped.items():
            before = self.own_scoped.get(pid, [0, 0])
            self.own_scoped[pid] = [x + y for x, y in zip(before, counts, strict=True)]
        self.differing_configs += other.differing_configs
        self.runs += other.runs
        for kind, count in other.kinds.items():
            self.kinds[kind] += count
            for at in other.smallest[kind].values():
                self.offer(kind, at)
        for pid, where in other.where.items():
            self.where[pid].merge(where)
        self.states = [x + y for x, y in zip(self.states, other.states, strict=True)]
        self.reachable_steps += other.reachable_steps
        self.differing_steps += other.differing_steps
        for mine, theirs in zip(
            self.cost + self.both_finished, other.cost + other.both_finished, strict=True
        ):
            mine.merge(theirs)


EXCLUSIONS = ("refused by A", "refused by B", "in the degenerate region")


@dataclass(frozen=True)
class _Order:
    """The instances of a batch in SPEC C's order: ``head`` holds T, B, L, M per instance,
    ``position`` each instance's place in :func:`config_key` order."""

    head: np.ndarray
    position: np.ndarray

    @classmethod
    def of(cls, batch: Batch) -> _Order:
        size = len(batch)

        def column(name: str) -> np.ndarray:
            return np.broadcast_to(np.asarray(batch.fields[name], dtype=np.int64), (size,))

        names = [f for f in batch.configs[0].to_dict() if f not in _HEAD]
        columns = [column(n) for n in (*_HEAD, *names)]
        position = np.empty(size, dtype=np.int64)
        position[np.lexsort(columns[::-1])] = np.arange(size)
        return cls(np.stack(columns[:4], axis=1), position)

    def runs(self, hits: np.ndarray, budgets: np.ndarray) -> np.ndarray:
        """``hits`` (rows of (instance, budget column)) in :class:`RunAt` order: T, B, L, M,
        the budget, then the other fields."""
        i = hits[:, 0]
        head = self.head[i]
        keys = (self.position[i], budgets[i, hits[:, 1]], head[:, 3], head[:, 2], head[:, 1])
        return hits[np.lexsort((*keys, head[:, 0]))]


def _inside(scope: Scope | None, batch: Batch) -> np.ndarray:
    """The instances of ``batch`` inside ``scope`` (every one without a scope)."""
    return np.ones(len(batch), dtype=bool) if scope is None else scope_lanes(scope, batch)


def _batch_tally(a: RequestModel, b: RequestModel, batch: Batch) -> BehaviourTally:
    """The tally of one batch of configurations: the configurations both policies' verdicts
    cover (both accept them, neither finds them degenerate), every const(b) run of each."""
    tally = BehaviourTally()
    cat_a, cat_b = categories(a.policy, batch), categories(b.policy, batch)
    reasons = np.select(
        [cat_a == 2, cat_b == 2, (cat_a == 1) | (cat_b == 1)], [0, 1, 2], default=-1
    )
    for index, why in enumerate(EXCLUSIONS):
        count = int((reasons == index).sum())
        if count:
            tally.excluded[why] = tally.excluded.get(why, 0) + count
    included = reasons < 0
    own = np.stack([cat_a == 0, cat_b == 0])
    tally.configs = int(included.sum())
    tally.own_configs = [int(x) for x in own.sum(axis=1)]
    for pid in PROPERTIES:
        scopes = [property_scope(model.policy, pid) for model in (a, b)]
        if scopes[0] is not None or scopes[1] is not None:
            tally.own_scoped[pid] = [
                int((own[side] & _inside(scope, batch)).sum()) for side, scope in enumerate(scopes)
            ]
    both = tables((a, b), batch)
    width = both.chunk.shape[3]
    budgets = batch.low[:, None] + np.arange(width)[None, :]
    offered = budgets <= batch.high[:, None]
    valid = included[:, None] & offered
    chunks = both.chunk
    length = batch.end - batch.start
    runs = paired_runs(chunks, offered, batch.start, batch.end)
    reach = reachable(chunks, offered, length)
    order = _Order.of(batch)
    _tally_kinds(tally, runs, valid, batch.configs, budgets, order)
    _tally_steps(tally, chunks, reach, valid)
    _tally_cost(tally, runs, valid, batch, budgets, order)
    _tally_where(tally, both, reach, runs, offered, included, own, batch, order)
    return tally


def _tally_kinds(
    tally: BehaviourTally,
    runs: PairedRuns,
    valid: np.ndarray,
    cfgs: Sequence[Config],
    budgets: np.ndarray,
    order: _Order,
) -> None:
    tally.runs += int(valid.sum())
    differ = runs.differ & valid
    tally.differing_configs += int(differ.any(axis=1).sum())
    codes = np.where(valid, kind_codes(differ, runs.stuck, runs.steps, runs.last), IDENTICAL)
    block, lookahead = order.head[:, 1], order.head[:, 2]
    for code, kind in enumerate(_KIND_NAMES):
        hits = np.argwhere(codes == code)
        if not len(hits):
            continue
        tally.kinds[kind] += len(hits)
        ordered = order.runs(hits, budgets)
        cell = block[ordered[:, 0]] * (int(lookahead.max()) + 1) + lookahead[ordered[:, 0]]
        _, first = np.unique(cell, return_index=True)
        for i, j in ordered[np.sort(first)]:
            tally.offer(kind, RunAt.of(cfgs[i], int(budgets[i, j])))


def _tally_steps(
    tally: BehaviourTally, chunks: np.ndarray, reach: np.ndarray, valid: np.ndarray
) -> None:
    """Reachable (state, budget) steps, per policy and under either, and those that differ."""
    offered = valid.sum(axis=1)
    tally.states = [int((r.sum(axis=1) * (offered > 0)).sum()) for r in reach]
    either = reach[0] | reach[1]
    tally.reachable_steps = int((either.sum(axis=1) * offered).sum())
    differ = either[:, :, None] & valid[:, None, :] & (chunks[0] != chunks[1])
    tally.differing_steps = int(differ.sum())


def _tally_cost(
    tally: BehaviourTally,
    runs: PairedRuns,
    valid: np.ndarray,
    batch: Batch,
    budgets: np.ndarray,
    order: _Order,
) -> None:
    """SPEC P7: steps against ceil((E - c0) / b), per policy and over the runs both finish."""
    ideal = ideal_steps(batch.end[:, None], batch.start[:, None], np.maximum(budgets, 1))
    finished = valid & ~runs.stuck
    both = finished[0] & finished[1]
    block = np.broadcast_to(np.asarray(batch.fields["block"]), (len(batch),))
    below_block = budgets < block[:, None]
    for side in (0, 1):
        steps = runs.steps[side]
        add = _CostAdder(batch.configs, budgets, ideal, order)
        add(tally.cost[side], valid, finished[side], steps)
        tally.cost[side].starved += int((valid & ~finished[side] & below_block).sum())
        add(tally.both_finished[side], both, both, steps)


@dataclass(frozen=True)
class _CostAdder:
    cfgs: Sequence[Config]
    budgets: np.ndarray
    ideal: np.ndarray
    order: _Order

    def __call__(
        self, cost: CostTally, runs: np.ndarray, finished: np.ndarray, steps: np.ndarray
    ) -> None:
        """Add the runs marked ``runs`` (those marked ``finished`` with their steps)."""
        cost.runs += int(runs.sum())
        cost.finished += int(finished.sum())
        cost.steps += int(steps[finished].sum())
        cost.ideal += int(self.ideal[finished].sum())
        if finished.any():
            excess = np.where(finished, steps - self.ideal, np.iinfo(np.int64).min)
            hits = np.argwhere(excess == excess.max())
            i, j = self.order.runs(hits, self.budgets)[0]
            cost.offer_worst(int(excess[i, j]), RunAt.of(self.cfgs[i], int(self.budgets[i, j])))


def _tally_where(
    tally: BehaviourTally,
    both: Tables,
    reach: np.ndarray,
    runs: PairedRuns,
    offered: np.ndarray,
    included: np.ndarray,
    own: np.ndarray,
    batch: Batch,
    order: _Order,
) -> None:
    """Which configurations fail each property under A and under B (module docstring)."""
    fails = {pid: np.zeros((2, len(batch)), dtype=bool) for pid in PROPERTIES}
    for side in (0, 1):
        visited = reach[side][:, :, None] & offered[:, None, :]
        for pid in STEP_PROPERTIES:
            fails[pid][side] = (both.bad[pid][side] & visited).any(axis=(1, 2))
        fails["P7"][side] = (runs.stuck[side] & offered).any(axis=1)
    fails["P2"] = fails["P1"]

    def failing(i: int) -> tuple[frozenset[str], frozenset[str]]:
        sets = (frozenset(p for p in PROPERTIES if fails[p][side, i]) for side in (0, 1))
        return (next(sets), next(sets))

    crash_a, crash_b = fails["P0"]
    for pid, where in tally.where.items():
        a, b = fails[pid]
        where.own = [int((own[0] & a).sum()), int((own[1] & b).sum())]
        groups = {
            "only_a": a & ~b & ~crash_b,
            "only_b": ~a & b & ~crash_a,
            "both": a & b,
            "a_where_b_crashes": a & ~b & crash_b,
            "b_where_a_crashes": ~a & b & crash_a,
        }
        for group, mask in groups.items():
            members = np.flatnonzero(mask & included)
            where.counts[group] = len(members)
            if len(members):
                i = int(members[order.position[members].argmin()])
                cfg = batch.configs[i]
                where.offer(group, ConfigAt(config_key(cfg), cfg, failing(i)))


@dataclass(frozen=True)
class Example:
    """One run of a kind, with both policies' native trajectories."""

    run: RunAt
    a: Trajectory
    b: Trajectory


@dataclass(frozen=True)
class Behaviour:
    """Where A and B behave differently on the grid, where each fails, and what each costs
    (SPEC P7); the P5 form the failures were judged under."""

    tally: BehaviourTally
    examples: dict[str, list[Example]]
    seconds: float
    where: dict[str, dict[str, WhereExample]] = field(default_factory=dict)
    window: str = DEFAULT_WINDOW


def compare_behaviour(
    a: Policy,
    b: Policy,
    space: Space,
    jobs: int | Executor = 1,
    tick: Callable[[int, int], None] | None = None,
    window: str = DEFAULT_WINDOW,
) -> Behaviour:
    """Every const(b) run and every reachable step of every configuration of ``space`` under
    both policies (module docstring), the batches on ``jobs`` (an executor, or the size of the
    local pool); the examples are re-run natively and must show what the tables gave."""
    started = time.monotonic()
    model_a, model_b = RequestModel(a, space, window), RequestModel(b, space, window)
    batches = list(model_a.batches())
    total = BehaviourTally()
    tallies = as_executor(jobs).map(_batch_tally, (model_a, model_b), batches)
    for done, tally in enumerate(tallies, 1):
        total.merge(tally)
        if tick is not None:
            tick(done, len(batches))
    examples = {kind: [_example(a, b, at, kind) for at in total.examples(kind)] for kind in KINDS}
    where = _where_examples(a, b, total.where, window, space.budget)
    return Behaviour(total, examples, time.monotonic() - started, where, window)


def _example(a: Policy, b: Policy, at: RunAt, kind: str) -> Example:
    example = Example(at, run(a, at.cfg, [at.budget]), run(b, at.cfg, [at.budget]))
    native = classify(example.a, example.b)
    if native != kind:
        raise ModelMismatch(f"{at.describe()}: the tables say {kind}, native runs say {native}")
    return example


def _where_examples(
    a: Policy,
    b: Policy,
    where: Mapping[str, WhereTally],
    window: str,
    budget: tuple[int, int] | None,
) -> dict[str, dict[str, WhereExample]]:
    """The smallest configuration of every (property, group), explored natively under both
    policies: the properties each fails there must be those the tables gave."""
    natives: dict[tuple[int, tuple[int, ...]], NativeRun] = {}

    def native(side: int, at: ConfigAt) -> NativeRun:
        slot = (side, at.key)
        if slot not in natives:
            found = example_failures((a, b)[side], at.cfg, window, budget)
            if found.fails != at.fails[side]:
                label = "AB"[side]
                raise ModelMismatch(
                    f"{at.cfg.describe()}: under {label} the tables fail "
                    f"{sorted(at.fails[side]) or 'nothing'}, the native search "
                    f"{sorted(found.fails) or 'nothing'}"
                )
            natives[slot] = found
        return natives[slot]

    examples: dict[str, dict[str, WhereExample]] = {}
    for pid, tally in where.items():
        for group in GROUPS:
            at = tally.smallest.get(group)
            if at is None:
                continue
            example = WhereExample(pid, group, at.cfg, native(0, at), native(1, at))
            if _native_group(pid, example.a, example.b) != group:
                raise ModelMismatch(f"{pid} at {at.cfg.describe()} is not {GROUPS[group]}")
            examples.setdefault(pid, {})[group] = example
    return examples


def _native_group(pid: str, a: NativeRun, b: NativeRun) -> str | None:
    """The group (:data:`GROUPS`) of ``pid`` at one configuration from both native runs."""
    fails = (pid in a.fails, pid in b.fails)
    crashed = ("P0" in a.fails, "P0" in b.fails)
    if fails == (True, True):
        return "both"
    if fails == (True, False):
        return "a_where_b_crashes" if crashed[1] else "only_a"
    if fails == (False, True):
        return "b_where_a_crashes" if crashed[0] else "only_b"
    return None


# -- the comparison -------------------------------------------------------------------------------


@dataclass(frozen=True)
class VerdictRow:
    """One property's verdicts under A and B, each side's explorer verdict on the grid
    (``grid``, A's first), and where each fails on the grid."""

    pid: str
    a: Verdict
    b: Verdict
    where: WhereTally | None = None
    grid: tuple[Verdict | None, Verdict | None] = (None, None)

    @property
    def change(self) -> str:
        """:func:`verdict_change`, except that a side's failures on the grid that all lie where
        the other side breaks P0 (:data:`GROUPS`) are no fix and no new violation: the other
        side did not pass there, it crashed."""
        moved = self.where is not None and self.where.moved
        change = verdict_change(self.a.status, self.b.status, moved)
        failing = {FIXED: 0, INTRODUCED: 1}.get(change)
        if failing is not None and self._fails_only_where_other_crashed(failing):
            return CHANGED
        return change

    def _fails_only_where_other_crashed(self, side: int) -> bool:
        """Whether side ``side``'s verdict is the grid's (its explorer found the violation)
        and every configuration of the grid where it fails is one where the other crashes."""
        grid = self.grid[side]
        return (
            grid is not None
            and grid.status == VIOLATED
            and self.where is not None
            and self.where.only_where_crashed(side)
        )

    def verdict_scope(self, side: int) -> str:
        """Where the verdict of side ``side`` (0: A) was decided: ``"grid"`` when its counts
        are its explorer's on the grid, ``"production"`` when only the prover found its
        violation (its counts are then the prover's cells)."""
        verdict, grid = (self.a, self.b)[side], self.grid[side]
        if verdict.status == VIOLATED and grid is not None and grid.status != VIOLATED:
            return "production"
        return "grid"


def verdict_rows(a: Side, b: Side, where: Mapping[str, WhereTally]) -> list[VerdictRow]:
    """The verdicts side by side, in the order they were checked."""
    by_pid = {v.property: v for v in b.verdicts}
    return [
        VerdictRow(
            v.property,
            v,
            by_pid[v.property],
            where.get(v.property),
            (a.grid_verdict(v.property), b.grid_verdict(v.property)),
        )
        for v in a.verdicts
    ]


@dataclass(frozen=True)
class Comparison:
    """Everything ``chunkproof compare`` reports. Built only from parts that agree: each
    policy's failing configurations in the behaviour pass are its explorer's
    (:func:`check_agreement`)."""

    a: Side
    b: Side
    space: Space
    prover_range: dict[str, Any] | None
    behaviour: Behaviour
    command: str

    def __post_init__(self) -> None:
        check_agreement(self)

    @property
    def rows(self) -> list[VerdictRow]:
        return verdict_rows(self.a, self.b, self.behaviour.tally.where)


def explorer_range(verdict: Verdict) -> dict[str, Any]:
    """The range of a verdict's explorer part (a ``check`` row holds both engines')."""
    rng = verdict.range
    inner = rng.get("explorer", rng)
    return inner if isinstance(inner, dict) else {}


def same_grid(verdict: Verdict, space: Space) -> bool:
    """Whether the verdict's explorer covered exactly ``space``."""
    rng = explorer_range(verdict)
    described = space.describe()
    return bool(rng) and all(rng.get(k) == v for k, v in described.items())


def check_agreement(comparison: Comparison) -> None:
    """Each policy's explorer verdicts (:attr:`Side.explored`, never the verdicts combined
    with the prover's production range, whose scope is another), where they cover the
    comparison's grid, count the configurations and the failing ones the behaviour pass counts
    (SPEC P: one model, two forms of evaluation); a disagreement is a bug of the tool
    (:class:`ModelMismatch`)."""
    tally = comparison.behaviour.tally
    for index, side in enumerate((comparison.a, comparison.b)):
        for verdict in side.explored:
            if not same_grid(verdict, comparison.space):
                continue
            label = "AB"[index]
            covered = tally.own_scoped.get(verdict.property, tally.own_configs)[index]
            if verdict.configs != covered:
                raise ModelMismatch(
                    f"{verdict.property} of {label}: the explorer covers {verdict.configs} "
                    f"configurations, the comparison {covered}"
                )
            counted = tally.where[verdict.property].own[index]
            if verdict.violating != counted:
                raise ModelMismatch(
                    f"{verdict.property} of {label}: the explorer finds {verdict.violating} "
                    f"failing configurations, the comparison {counted} (--window "
                    f"{comparison.behaviour.window})"
                )


def regressed(row: VerdictRow) -> bool:
    """B introduces a violation A did not have: a new violated verdict, or configurations of
    the grid where only B fails."""
    return row.change == INTRODUCED or (row.where is not None and row.where.counts["only_b"] > 0)


def exit_status(comparison: Comparison) -> int:
    """SPEC CLI ``compare``: 1 when B introduces a violation A did not have (:func:`regressed`),
    else 3 when a verdict is undecided, else 2 when no verdict of either side covers a
    configuration (nothing was compared), else 0."""
    rows = comparison.rows
    if any(regressed(row) for row in rows):
        return EXIT_VIOLATED
    if any(row.change == UNDECIDED for row in rows):
        return EXIT_UNKNOWN
    if rows and all(row.a.status == row.b.status == EMPTY for row in rows):
        return EXIT_BAD_INPUT
    return EXIT_OK
