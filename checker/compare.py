"""Compare two policies (SPEC CLI ``compare``): what a change fixes, what it breaks, what it
costs.

* **Verdicts.** Each policy is checked by the engines of ``chunkproof check`` (the explorer on
  the grid, the prover on the production range unless ``--no-prove``); per property the change
  from A to B is :data:`FIXED`, :data:`INTRODUCED`, :data:`UNCHANGED` or, when either side is
  UNKNOWN, :data:`UNDECIDED` (:func:`verdict_change`).
* **Behaviour.** On every configuration of the grid, for every constant budget (SPEC S4
  ``const(b)``), the chunk sequences of A and B from c0 are computed together from the
  models' dense tables (:meth:`chunkproof.spec.request.RequestModel.table`), and every
  pair that differs is classified (:data:`KINDS`); the (state, budget) steps reachable under
  either policy (SPEC S4 adversarial budgets) whose chunks differ are counted as well.
* **Cost.** SPEC P7 from the same runs: steps to finish against ceil((E - c0) / b).

The population of the last two is the verdicts' range: the configurations both policies accept
(SPEC S1b) outside the degenerate region (SPEC CLI), with budgets b in the range's low..min(M,
T - c0) (budgets above T - c0 give the run of T - c0: every composition starts with
n = min(T - c, ..., b)).
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunkproof.checker.report import PROVED, UNKNOWN, VIOLATED, Verdict
from chunkproof.checker.search import categories, usable_jobs
from chunkproof.model.config import Config
from chunkproof.model.errors import EXIT_OK, EXIT_UNKNOWN, EXIT_VIOLATED
from chunkproof.model.policy import Policy
from chunkproof.model.trajectory import Trajectory, run
from chunkproof.spec.request import Batch, RequestModel
from chunkproof.spec.space import Space

FIXED, INTRODUCED, UNCHANGED, UNDECIDED = "fixed", "introduced", "unchanged", "undecided"


def verdict_change(a: str, b: str) -> str:
    """The change of one property's verdict from A to B: fixed (VIOLATED -> PROVED),
    introduced (PROVED -> VIOLATED), unchanged (same status), and undecided whenever either
    side is UNKNOWN (SPEC P: UNKNOWN is never treated as a pass, nor as a failure)."""
    if UNKNOWN in (a, b):
        return UNDECIDED
    if a == b:
        return UNCHANGED
    return FIXED if (a, b) == (VIOLATED, PROVED) else INTRODUCED


@dataclass(frozen=True)
class Side:
    """One policy of a comparison with its ``check`` verdicts and what the engines did."""

    policy: Policy
    verdicts: tuple[Verdict, ...]
    engines: dict[str, Any]


@dataclass(frozen=True)
class VerdictRow:
    """One property's verdicts under A and B."""

    pid: str
    a: Verdict
    b: Verdict

    @property
    def change(self) -> str:
        return verdict_change(self.a.status, self.b.status)


def verdict_rows(a: Side, b: Side) -> list[VerdictRow]:
    """The verdicts side by side, in the order they were checked."""
    by_pid = {v.property: v for v in b.verdicts}
    return [VerdictRow(v.property, v, by_pid[v.property]) for v in a.verdicts]


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
    """``const(b)`` from c0 under A (axis 0) and B (axis 1) for every (M, b) of a family:
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
    every step."""
    shape = (2, *valid.shape)
    side, rows, cols = np.indices(shape)
    first = start[rows]
    c = first.copy()
    steps = np.zeros(shape, dtype=np.int64)
    stuck = np.zeros(shape, dtype=bool)
    differ = np.zeros(valid.shape, dtype=bool)
    live = np.broadcast_to(valid, shape).copy()
    while live.any():
        k = np.where(live, chunks[side, rows, np.where(live, c - first, 0), cols], 0)
        stuck |= live & (k <= 0)
        live &= k > 0
        c += np.where(live, k, 0)
        steps += live
        live &= c < end[rows]
        differ |= c[0] != c[1]
    return PairedRuns(steps, c, stuck, differ & valid)


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


@dataclass(frozen=True, order=True)
class RunAt:
    """One ``const(b)`` run of one configuration, ordered by SPEC C's minimisation key:
    T, then B, L, M, the budget, then D, theta, H."""

    key: tuple[int, ...]
    cfg: Config = field(compare=False)
    budget: int = field(compare=False)

    @classmethod
    def of(cls, cfg: Config, budget: int) -> RunAt:
        key = (cfg.T, cfg.block, cfg.lookahead, cfg.max_sched, budget)
        return cls((*key, int(cfg.drop), cfg.threshold, cfg.H), cfg, budget)

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
            "worst_at": None if self.worst is None else _run_dict(self.worst[1]),
        }


def _run_dict(at: RunAt) -> dict[str, Any]:
    return {"config": at.cfg.to_dict(), "budget": at.budget, "describe": at.describe()}


@dataclass
class BehaviourTally:
    """Differences and costs over a grid; mergeable across batches of families."""

    configs: int = 0
    excluded: dict[str, int] = field(default_factory=dict)
    differing_configs: int = 0
    runs: int = 0
    kinds: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    smallest: dict[str, dict[tuple[int, int], RunAt]] = field(
        default_factory=lambda: {kind: {} for kind in KINDS}
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
        self.differing_configs += other.differing_configs
        self.runs += other.runs
        for kind, count in other.kinds.items():
            self.kinds[kind] += count
            for at in other.smallest[kind].values():
                self.offer(kind, at)
        self.states = [x + y for x, y in zip(self.states, other.states, strict=True)]
        self.reachable_steps += other.reachable_steps
        self.differing_steps += other.differing_steps
        for mine, theirs in zip(
            self.cost + self.both_finished, other.cost + other.both_finished, strict=True
        ):
            mine.merge(theirs)


EXCLUSIONS = ("refused by A", "refused by B", "in the degenerate region")


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
    tally.configs = int(included.sum())
    ta, tb = a.table(batch), b.table(batch)
    width = ta.chunk.shape[2]
    budgets = batch.low[:, None] + np.arange(width)[None, :]
    valid = included[:, None] & (budgets <= batch.high[:, None])
    chunks = np.stack([ta.chunk, tb.chunk])
    runs = paired_runs(chunks, valid, batch.start, batch.end)
    _tally_kinds(tally, runs, valid, batch.configs, budgets)
    _tally_steps(tally, chunks, valid, batch.end - batch.start)
    _tally_cost(tally, runs, valid, batch, budgets)
    return tally


def _tally_kinds(
    tally: BehaviourTally,
    runs: PairedRuns,
    valid: np.ndarray,
    cfgs: list[Config],
    budgets: np.ndarray,
) -> None:
    tally.runs += int(valid.sum())
    tally.differing_configs += int(runs.differ.any(axis=1).sum())
    codes = np.where(valid, kind_codes(runs.differ, runs.stuck, runs.steps, runs.last), IDENTICAL)
    for code, kind in enumerate(_KIND_NAMES):
        hits = np.argwhere(codes == code)
        if len(hits):
            tally.kinds[kind] += len(hits)
            for i, j in hits[np.lexsort((hits[:, 1], hits[:, 0]))][:EXAMPLES_PER_KIND]:
                tally.offer(kind, RunAt.of(cfgs[i], int(budgets[i, j])))


def _tally_steps(
    tally: BehaviourTally, chunks: np.ndarray, valid: np.ndarray, length: np.ndarray
) -> None:
    """Reachable (state, budget) steps, per policy and under either, and those that differ."""
    reach = reachable(chunks, valid, length)
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
) -> None:
    """SPEC P7: steps against ceil((E - c0) / b), per policy and over the runs both finish."""
    ideal = -(-(batch.end - batch.start)[:, None] // np.maximum(budgets, 1))
    finished = valid & ~runs.stuck
    both = finished[0] & finished[1]
    block = np.broadcast_to(np.asarray(batch.fields["block"]), (len(batch),))
    below_block = budgets < block[:, None]
    for side in (0, 1):
        cfgs = batch.configs
        _add_cost(tally.cost[side], valid, finished[side], runs.steps[side], ideal, cfgs, budgets)
        tally.cost[side].starved += int((valid & ~finished[side] & below_block).sum())
        _add_cost(tally.both_finished[side], both, both, runs.steps[side], ideal, cfgs, budgets)


def _add_cost(
    cost: CostTally,
    runs: np.ndarray,
    finished: np.ndarray,
    steps: np.ndarray,
    ideal: np.ndarray,
    cfgs: list[Config],
    budgets: np.ndarray,
) -> None:
    """Add the runs marked ``runs`` (those marked ``finished`` with their steps) to ``cost``."""
    cost.runs += int(runs.sum())
    cost.finished += int(finished.sum())
    cost.steps += int(steps[finished].sum())
    cost.ideal += int(ideal[finished].sum())
    if finished.any():
        excess = np.where(finished, steps - ideal, np.iinfo(np.int64).min)
        i, j = np.argwhere(excess == excess.max())[0]
        cost.offer_worst(int(excess[i, j]), RunAt.of(cfgs[i], int(budgets[i, j])))


_WORKER: dict[str, Any] = {}


def _worker_init(a: RequestModel, b: RequestModel) -> None:
    _WORKER.update(a=a, b=b)


def _worker(batch: Batch) -> BehaviourTally:
    return _batch_tally(_WORKER["a"], _WORKER["b"], batch)


def _tallies(
    a: RequestModel, b: RequestModel, batches: list[Batch], jobs: int
) -> Iterator[BehaviourTally]:
    if usable_jobs(jobs) <= 1 or len(batches) < 2:
        for batch in batches:
            yield _batch_tally(a, b, batch)
        return
    # fork: the policies (functions, syntax trees) are inherited, not pickled.
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(usable_jobs(jobs), initializer=_worker_init, initargs=(a, b)) as pool:
        yield from pool.imap_unordered(_worker, batches)


@dataclass(frozen=True)
class Example:
    """One run of a kind, with both policies' native trajectories."""

    run: RunAt
    a: Trajectory
    b: Trajectory


@dataclass(frozen=True)
class Behaviour:
    """Where A and B behave differently on the grid, and what each costs (SPEC P7)."""

    tally: BehaviourTally
    examples: dict[str, list[Example]]
    seconds: float


def compare_behaviour(
    a: Policy,
    b: Policy,
    space: Space,
    jobs: int = 1,
    tick: Callable[[int, int], None] | None = None,
) -> Behaviour:
    """Every const(b) run of every configuration of ``space`` under both policies (module
    docstring); the examples are re-run natively and must show the kind the tables gave."""
    started = time.monotonic()
    model_a, model_b = RequestModel(a, space), RequestModel(b, space)
    batches = list(model_a.batches())
    total = BehaviourTally()
    for done, tally in enumerate(_tallies(model_a, model_b, batches, jobs), 1):
        total.merge(tally)
        if tick is not None:
            tick(done, len(batches))
    examples = {kind: [_example(a, b, at, kind) for at in total.examples(kind)] for kind in KINDS}
    return Behaviour(total, examples, time.monotonic() - started)


def _example(a: Policy, b: Policy, at: RunAt, kind: str) -> Example:
    example = Example(at, run(a, at.cfg, [at.budget]), run(b, at.cfg, [at.budget]))
    native = classify(example.a, example.b)
    if native != kind:
        raise AssertionError(f"{at.describe()}: the tables say {kind}, native runs say {native}")
    return example


# -- the comparison -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """Everything ``chunkproof compare`` reports."""

    a: Side
    b: Side
    space: Space
    prover_range: dict[str, Any] | None
    behaviour: Behaviour
    command: str

    @property
    def rows(self) -> list[VerdictRow]:
        return verdict_rows(self.a, self.b)


def exit_status(comparison: Comparison) -> int:
    """SPEC CLI ``compare``: 1 when B introduces a violation A did not have (a regression),
    else 3 when a verdict is undecided, else 0."""
    changes = {row.change for row in comparison.rows}
    if INTRODUCED in changes:
        return EXIT_VIOLATED
    if UNDECIDED in changes:
        return EXIT_UNKNOWN
    return EXIT_OK
