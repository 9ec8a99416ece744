"""One request under a policy, as a model both engines check (SPEC S2-S4, P0-P8).

* Instance: a configuration (SPEC S1), taken from a :class:`~chunkproof.spec.space.Space`.
* Init: c = c0, the admission start (the request is waiting; the waiting loop admits it at
  c0, and a step there that yields 0 leaves it waiting at c0).
* Actions: the budget b the environment offers, any of [low, high] at every step
  (SPEC S4 ``adversarial``): low from the range's ``--budget`` (1 by default), high =
  min(the range's top, M, T - c0), since every composition starts with n = min(T - c, ..., b)
  and a budget above T - c0 behaves as T - c0.
* Next: c + chunk, the policy's stages at (c, b) (:mod:`chunkproof.model.step`). A step that
  breaks P0 (the code raises, or a stage leaves [0, its input]) does not lead on: in vLLM the
  engine core is down. The prefill is over at c >= E.
* Properties: P0, P1 (the largest budget, high, makes no progress at a reachable c < E: a
  chunk <= 0 from code that does not raise, even when a stage broke P0 on the way, SPEC Q3),
  P3-P6 on every reachable step (:mod:`chunkproof.spec.properties`); P2 and P7 are figures over
  the reachable steps and the ``const(b)`` runs (:meth:`RequestModel.figures`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, overload

import numpy as np

from chunkproof.model.config import ENCODER_FIELDS, Config, item_views
from chunkproof.model.policy import STAGE_NAMES, Policy
from chunkproof.model.step import stage_order, unsafe_lanes, vectorised_stages
from chunkproof.model.subset import parse
from chunkproof.model.vectorised import evaluate
from chunkproof.spec import properties as props
from chunkproof.spec.interface import Transitions
from chunkproof.spec.space import Space

STEP_PROPERTIES = ("P0", "P1", "P3", "P4", "P5", "P6", "P8")
"""The properties judged on single transitions; P2 and P7 are figures."""

ALWAYS = ("P0", "P1")
"""The step properties every transition records whichever are selected: P2, P7's ``const(b)``
runs and the tables compare reads rest on them, so no selection changes another verdict."""

BATCH_LANES = 1 << 22
"""About how many (state, budget) lanes one vectorised evaluation covers."""

LISTED_LANES = 1 << 18
LEVEL_LANES = 4096
"""A batch's states are listed for the explorer (:meth:`RequestModel.state_space`) when its
table has at most :data:`LISTED_LANES` lanes and at most :data:`LEVEL_LANES` per level of the
longest search it could need (a level's fixed cost is about that of evaluating 4096 lanes)."""


def batch_key(cfg: Config) -> tuple[Any, ...]:
    """What one batch holds as plain values (the other fields are arrays where they differ):
    the stand-ins of real code need them plain (``speculative_config`` is None without a
    lookahead, the alignment and the retention interval are None when off), and the number of
    encoder items (the items are a tuple of that length, their positions arrays)."""
    return (cfg.lookahead >= 1, cfg.checkpoint_alignment, cfg.retention, len(cfg.items))


def budget_bounds(
    cfg: Config, budget: tuple[int, int] | None, max_sched: int | None = None
) -> tuple[int, int]:
    """Offered budgets [low, high] for ``cfg`` (SPEC S4: adversarial(1..M), narrowed by the
    range's ``--budget``); high is capped at T - c0 (module docstring). With ``max_sched``,
    for ``cfg`` at that M instead of its own."""
    m = cfg.max_sched if max_sched is None else max_sched
    low = budget[0] if budget is not None else 1
    return low, int(highest_budget(m, cfg.T, cfg.start, budget))


def highest_budget(max_sched: Any, tokens: Any, start: Any, budget: tuple[int, int] | None) -> Any:
    """The high end of :func:`budget_bounds`: min(M, T - c0, the top of ``--budget``), for
    plain integers or elementwise over a batch's arrays."""
    high = np.minimum(max_sched, tokens - start)
    return high if budget is None else np.minimum(high, budget[1])


@dataclass
class Batch:
    """Configurations evaluated together: their fields (plain when shared, else arrays), and
    their budget bounds."""

    configs: Sequence[Config]
    fields: dict[str, Any]
    low: np.ndarray
    high: np.ndarray
    start: np.ndarray
    end: np.ndarray
    items: tuple[tuple[Any, Any], ...] = ()
    """The encoder items: (starts, lengths) per item, plain where the batch shares them.
    ``fields["items"]`` is only their minimisation key (``int(Items)``), like every field
    an integer column."""

    def __len__(self) -> int:
        return len(self.configs)

    def view(self, index: np.ndarray) -> SimpleNamespace:
        """The fields of the instances ``index`` (one lane each), with the encoder items as
        :class:`~chunkproof.model.config.ItemView` values."""
        fields = {
            k: v if not isinstance(v, np.ndarray) else v[index] for k, v in self.fields.items()
        }
        fields.pop("items", None)
        pairs = [tuple(_lanes(v, index) for v in pair) for pair in self.items]
        return SimpleNamespace(**fields, mm_items=item_views(pairs), has_items=bool(self.items))


def _lanes(value: Any, index: np.ndarray) -> Any:
    return value[index] if isinstance(value, np.ndarray) else value


def _column(values: Sequence[Any]) -> Any:
    """One field over a batch: a plain value when every configuration shares it."""
    if values.count(values[0]) == len(values):
        return values[0]
    return np.asarray(values, dtype=np.int64)


class FamilyConfigs(Sequence[Config]):
    """A batch's configurations, made when asked for: instance i is the configuration
    ``bases[owner[i]]`` with M = ``ms[i]`` (a batch of 250,000 configurations comes from a
    few tens of thousands of families that differ in M only)."""

    def __init__(self, bases: list[Config], owner: np.ndarray, ms: np.ndarray) -> None:
        self.bases, self.owner, self.ms = bases, owner, ms

    def __len__(self) -> int:
        return len(self.ms)

    @overload
    def __getitem__(self, index: int) -> Config: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Config]: ...

    def __getitem__(self, index: int | slice) -> Config | Sequence[Config]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self.bases[int(self.owner[index])].replace(max_sched=int(self.ms[index]))


def make_batch(configs: Sequence[Config], budget: tuple[int, int] | None) -> Batch:
    """A batch of ``configs`` (they must agree on :func:`batch_key`)."""
    return family_batch([(cfg, [cfg.max_sched]) for cfg in configs], budget)


def family_batch(
    families: Sequence[tuple[Config, list[int]]], budget: tuple[int, int] | None
) -> Batch:
    """A batch of every configuration of ``families`` (a configuration and the values of M
    it takes, in order; they must agree on :func:`batch_key`), read from the family
    configurations once each. Without encoder items its fields are those of the first
    configuration's :meth:`Config.to_dict`; with them every configuration names the encoder
    fields."""
    bases = [base for base, _ in families]
    counts = np.fromiter((len(ms) for _, ms in families), dtype=np.int64, count=len(bases))
    owner = np.repeat(np.arange(len(bases)), counts)
    ms = np.fromiter((m for _, values in families for m in values), dtype=np.int64)
    names = list(bases[0].to_dict())
    if bases[0].items:
        names += [name for name in ENCODER_FIELDS if name not in names]
    rows = map(operator.attrgetter(*names), bases)
    columns = dict(zip(names, zip(*rows, strict=True), strict=True))
    if "items" in columns:
        columns["items"] = tuple(int(items) for items in columns["items"])
    columns["speculative"] = tuple(base.lookahead >= 1 for base in bases)

    def column(values: Sequence[Any]) -> Any:
        shared = _column(values)
        return shared[owner] if isinstance(shared, np.ndarray) else shared

    fields = {
        name: _column(ms.tolist()) if name == "max_sched" else column(values)
        for name, values in columns.items()
    }
    count = len(bases[0].items)
    items = tuple(
        (
            column([base.items[i][0] for base in bases]),
            column([base.items[i][1] for base in bases]),
        )
        for i in range(count)
    )
    tokens, start, end = (
        np.broadcast_to(np.asarray(value, dtype=np.int64), ms.shape)
        for value in (fields["tokens"], fields["start"], column([b.prefill_end for b in bases]))
    )
    low = budget[0] if budget is not None else 1
    return Batch(
        FamilyConfigs(bases, owner, ms),
        fields,
        np.full(len(ms), low, dtype=np.int64),
        highest_budget(ms, tokens, start, budget),
        start.copy(),
        end.copy(),
        items,
    )


def encoder_forced(order: tuple[str, ...], record: Mapping[str, Any]) -> Any:
    """SPEC P4 exemption (b): the chunk ends where the encoder cap put it. The cap lowered its
    input (the budget cap's value up to 0.27, the split's from 0.28) and no later stage moved
    the end (``record`` holds the stage values in any domain: arrays or Z3 terms)."""
    if "encoder" not in order:
        return False
    before = order[order.index("encoder") - 1]
    lowered = record["encoder"] < record[before]
    kept = record["chunk"] == record["encoder"]
    if isinstance(lowered, (bool, np.bool_)) and isinstance(kept, (bool, np.bool_)):
        return bool(lowered and kept)
    if isinstance(lowered, np.ndarray) or isinstance(kept, np.ndarray):
        return np.logical_and(lowered, kept)
    import z3

    return z3.And(lowered, kept)


@dataclass(frozen=True)
class EdgeRuns:
    """Lanes grouped in runs of one chunk [c, e) of one instance: ``first`` the first lane of
    each run, ``run`` the run of every lane."""

    first: np.ndarray
    run: np.ndarray


def _edge_runs(source: np.ndarray, target: np.ndarray, moving: np.ndarray) -> EdgeRuns:
    """The runs of adjacent lanes with the same source state, end and ``moving``: an edge
    property is a function of (the instance, c, e), so it is judged once per run. A state's
    budgets come in order and give few distinct chunks (a block multiple, the remainder), so
    a run usually holds several budgets; a chunk that comes back after another is a run of its
    own, judged again."""
    starts = np.ones(len(source), dtype=bool)
    starts[1:] = (
        (source[1:] != source[:-1]) | (target[1:] != target[:-1]) | (moving[1:] != moving[:-1])
    )
    return EdgeRuns(np.flatnonzero(starts), np.cumsum(starts) - 1)


def _predicate(func: Callable[..., Any], args: list[Any], size: int) -> np.ndarray:
    """A property predicate over lanes (its own crashes are impossible: it is ours)."""
    value = evaluate(parse(func), args).value
    return np.broadcast_to(np.asarray(value, dtype=bool), (size,))


@dataclass
class RequestModel:
    """The single-request model over a space of configurations (module docstring); the
    explicit form the explorer enumerates."""

    policy: Policy
    space: Space
    window: str = props.DEFAULT_WINDOW
    properties: tuple[str, ...] = STEP_PROPERTIES
    """The step properties judged: those given, and always :data:`ALWAYS`."""
    unoffered: int = 0
    """Configurations of the space the budget range offers no budget (counted by
    :meth:`batches`; not part of any verdict)."""

    def __post_init__(self) -> None:
        self.properties = tuple(
            pid for pid in STEP_PROPERTIES if pid in self.properties or pid in ALWAYS
        )

    def batches(self) -> Iterator[Batch]:
        """The configurations of the space that are offered some budget, grouped by
        :func:`batch_key`, at most about :data:`BATCH_LANES` table lanes per batch."""
        groups: dict[tuple[Any, ...], list[tuple[Config, list[int], int]]] = {}
        self.unoffered = 0
        for base, ms in self.space.config_families():
            # budget_bounds at M = m: [low, min(cap, m)], as m <= max(ms); offered when
            # low <= min(cap, m)
            low, cap = budget_bounds(base, self.space.budget, max(ms))
            offered = ms if low <= min(cap, min(ms)) else [m for m in ms if low <= min(cap, m)]
            self.unoffered += len(ms) - len(offered)  # the range's budgets offer these none
            if offered:
                groups.setdefault(batch_key(base), []).append((base, offered, cap))
        for families in groups.values():
            batch: list[tuple[Config, list[int]]] = []
            lanes = 0
            for base, ms, cap in families:
                family_lanes = base.prefill_end * sum(min(cap, m) for m in ms)
                if lanes + family_lanes <= BATCH_LANES:  # the whole family fits
                    batch.append((base, ms))
                    lanes += family_lanes
                    continue
                sizes = [base.prefill_end * min(cap, m) for m in ms]
                for m, size in zip(ms, sizes, strict=True):
                    if batch and lanes + size > BATCH_LANES:
                        yield family_batch(batch, self.space.budget)
                        batch, lanes = [], 0
                    if not batch or batch[-1][0] is not base:
                        batch.append((base, []))
                    batch[-1][1].append(m)
                    lanes += size
            if batch:
                yield family_batch(batch, self.space.budget)

    def initial(self, batch: Batch) -> np.ndarray:
        """Init: (instance, c0) for every instance."""
        return np.stack([np.arange(len(batch), dtype=np.int64), batch.start], axis=1)

    def key(self, batch: Batch, states: np.ndarray) -> np.ndarray:
        """instance * (max E + 1) + c."""
        stride = int(batch.end.max()) + 1
        keys: np.ndarray = states[:, 0] * stride + states[:, 1]
        return keys

    def state_space(self, batch: Batch) -> np.ndarray | None:
        """Every c in [c0, E) of every instance, when the batch's table is small beside the
        levels a search could take: every chunk that leads on is at least one token, so a
        search takes up to max(E - c0) levels, each with a fixed cost (a long prefill with
        small budgets: thousands of levels of a few lanes each). None otherwise."""
        span = batch.end - batch.start
        lanes = int((span * np.maximum(batch.high - batch.low + 1, 0)).sum())
        if lanes > LISTED_LANES or lanes > LEVEL_LANES * int(span.max(initial=0)):
            return None
        inst = np.repeat(np.arange(len(batch), dtype=np.int64), span)
        first = np.cumsum(span) - span
        c = batch.start[inst] + np.arange(len(inst)) - first[inst]
        return np.stack([inst, c], axis=1)

    def successors(self, batch: Batch, states: np.ndarray) -> Transitions:
        """Every offered budget at every state (module docstring)."""
        inst = states[:, 0]
        counts = np.maximum(batch.high[inst] - batch.low[inst] + 1, 0)
        source = np.repeat(np.arange(len(states)), counts)
        lane_inst = inst[source]
        first = np.cumsum(counts) - counts
        budget = batch.low[lane_inst] + (np.arange(len(source)) - first[source])
        return self.step(batch, states, source, budget)

    def step(
        self, batch: Batch, states: np.ndarray, source: np.ndarray, budget: np.ndarray
    ) -> Transitions:
        """The transitions (states[source], budget): Next and every step property; the record
        holds each chunk and whether the code raised (what the figures, compare and the
        pictures read)."""
        lane_inst = states[source, 0]
        c = states[source, 1]
        view = batch.view(lane_inst)
        values = vectorised_stages(self.policy, view, c, budget)
        size = len(source)
        stage = {
            name: np.broadcast_to(np.asarray(values[name], dtype=np.int64), (size,))
            for name in (*STAGE_NAMES, "chunk")
        }
        crashed = np.broadcast_to(np.asarray(values["crashed"], dtype=bool), (size,))
        order = stage_order(self.policy)
        unsafe = unsafe_lanes(values, budget, order)
        chunk = stage["chunk"]
        target = c + chunk
        moving = ~unsafe & (chunk > 0)
        bad: dict[str, np.ndarray] = {"P0": unsafe}
        bad["P1"] = self._livelocked(batch, lane_inst, c, budget, chunk, crashed)
        edge_properties = props.edge_properties(self.policy)  # SPEC KV1: the release's P6
        judging = [pid for pid in self.properties if pid in edge_properties]
        if judging:
            edges = _edge_runs(source, target, moving)
            edge_view = batch.view(lane_inst[edges.first])
            edge_args = [edge_view, c[edges.first], target[edges.first]]
        for pid in self.properties:
            if pid in judging:
                judged = _predicate(edge_properties[pid], edge_args, len(edges.first))
                bad[pid] = moving & judged[edges.run]
                if pid == "P4":
                    bad[pid] &= ~encoder_forced(order, stage)
            elif pid == "P5":
                window = props.WINDOW_PROPERTIES[self.window]
                bad[pid] = moving & _predicate(window, [view, c, stage["cap"], target], size)
        return Transitions(
            source=source,
            action=budget,
            target=np.stack([lane_inst, target], axis=1),
            follow=moving & (target < batch.end[lane_inst]),
            bad={pid: m for pid, m in bad.items() if pid in self.properties},
            weight=np.ones(size, dtype=np.int64),
            record={"chunk": chunk, "crashed": crashed.astype(np.int64)},
        )

    def _livelocked(
        self,
        batch: Batch,
        lane_inst: np.ndarray,
        c: np.ndarray,
        budget: np.ndarray,
        chunk: np.ndarray,
        crashed: np.ndarray,
    ) -> np.ndarray:
        """SPEC P1 over the lanes: the largest budget makes no progress (``props.stuck``) and
        the code does not raise (SPEC Q3); the predicate is judged on the largest budget's
        lanes only."""
        largest = np.flatnonzero((budget == batch.high[lane_inst]) & ~crashed)
        view = batch.view(lane_inst[largest])
        stuck = _predicate(props.stuck, [view, c[largest], chunk[largest]], len(largest))
        livelocked = np.zeros(len(budget), dtype=bool)
        livelocked[largest] = stuck
        return livelocked

    def table(self, batch: Batch) -> Table:
        """Every state c in [c0, E) of every instance with every offered budget, reachable or
        not: the dense form compare and conform read (:class:`Table`)."""
        depth = int((batch.end - batch.start).max())
        width = int(max((batch.high - batch.low).max() + 1, 1))
        inst = np.repeat(np.arange(len(batch)), depth)
        c = batch.start[inst] + np.tile(np.arange(depth), len(batch))
        states = np.stack([inst, c], axis=1)
        rows = np.flatnonzero(c < batch.end[inst])  # the states of the prefill
        steps = self.successors(batch, states[rows])
        source = rows[steps.source]
        cell = source * width + steps.action - batch.low[inst[source]]  # its place in the table
        chunk = np.full(len(states) * width, -1, dtype=np.int64)
        chunk[cell] = np.where(steps.bad["P0"], -1, steps.record["chunk"])
        valid = np.zeros(len(states) * width, dtype=bool)
        valid[cell] = True
        return Table(
            batch,
            chunk.reshape(len(batch), depth, width),
            valid.reshape(len(batch), depth, width),
        )

    def figures(self, batch: Batch, states: np.ndarray, steps: Transitions) -> Figures:
        """P2 and P7 for every instance from all its reachable transitions ``steps`` (leaving
        the reachable ``states``). A step makes no progress when its chunk is <= 0 and its code
        does not raise (SPEC Q3, as P1 judges it); a ``const(b)`` run also ends at a step that
        breaks P0 (it does not lead on)."""
        inst = states[steps.source, 0]
        c = states[steps.source, 1]
        crashed = steps.record["crashed"].astype(bool)
        zero = (steps.record["chunk"] <= 0) & ~crashed & (c < batch.end[inst])
        last_zero = np.zeros(len(batch), dtype=np.int64)
        np.maximum.at(last_zero, inst[zero], steps.action[zero])
        runs = _constant_runs(batch, states, steps)
        width = runs.shape[1]
        budgets = batch.low[:, None] + np.arange(width)[None, :]
        valid = budgets <= batch.high[:, None]
        stuck = valid & (runs < 0)
        finished = valid & (runs >= 0)
        ideal = props.ideal_steps(batch.end[:, None], batch.start[:, None], np.maximum(budgets, 1))
        excess = np.where(finished, runs - ideal, -1)
        worst = excess.argmax(axis=1)
        rows = np.arange(len(batch))
        first_stuck = np.where(stuck.any(axis=1), budgets[rows, stuck.argmax(axis=1)], 0)
        block = np.broadcast_to(np.asarray(batch.fields["block"]), (len(batch),))
        return Figures(
            progress_budget=np.maximum(last_zero + 1, batch.low),
            runs=valid.sum(axis=1),
            stuck_runs=stuck.sum(axis=1),
            stuck_below_block=(stuck & (budgets < block[:, None])).sum(axis=1),
            first_stuck_budget=first_stuck,
            worst_excess=np.where(finished.any(axis=1), excess[rows, worst], -1),
            worst_budget=budgets[rows, worst],
        )


@dataclass(frozen=True)
class Table:
    """``chunk[i, c - c0_i, b - low_i]`` for instance i (-1 where the step breaks P0), and
    ``valid`` where (c, b) is a state of the prefill and an offered budget."""

    batch: Batch
    chunk: np.ndarray
    valid: np.ndarray


@dataclass(frozen=True)
class Figures:
    """P2 and P7 of every instance of a batch (arrays over instances).

    ``progress_budget``: P2's b*, the least budget from which every reachable c < E progresses
    for every larger budget (meaningful only when P1 holds). ``stuck_runs``: how many of the
    ``const(b)`` runs (one per offered budget) never finish, P7 breaking on each;
    ``first_stuck_budget`` the least such b (0: none). The excess figures are over the runs that
    finish (``worst_excess`` -1: none finishes).
    """

    progress_budget: np.ndarray
    runs: np.ndarray
    stuck_runs: np.ndarray
    stuck_below_block: np.ndarray
    first_stuck_budget: np.ndarray
    worst_excess: np.ndarray
    worst_budget: np.ndarray


def _constant_runs(batch: Batch, states: np.ndarray, steps: Transitions) -> np.ndarray:
    """Steps to finish under ``const(b)`` for every instance and budget column b - low; -1 when
    the run gets stuck or breaks P0. Every state on a const run is reachable, so its steps are
    among ``steps``: the explorer gives each state's transitions together, sources in order
    (:class:`~chunkproof.checker.engines.explorer.Explored`), and :meth:`RequestModel.successors`
    gives them budget by budget from low; so the step of budget b at state s is row
    first[s] + b - low, and a reachable (instance, c) is found by direct address."""
    width = int(max((batch.high - batch.low).max() + 1, 1))
    assert (np.diff(steps.source) >= 0).all(), "the transitions are not grouped by source"
    counts = np.bincount(steps.source, minlength=len(states))
    first = np.cumsum(counts) - counts
    span = batch.end - batch.start
    base = np.cumsum(span) - span  # instance i's states c0..E-1 at base[i] + c - c0
    state_at = np.full(int(span.sum()), -1, dtype=np.int64)
    state_at[base[states[:, 0]] + states[:, 1] - batch.start[states[:, 0]]] = np.arange(len(states))
    nxt = np.where(steps.bad["P0"] == 0, states[steps.source, 1] + steps.record["chunk"], -1)
    rows = np.repeat(np.arange(len(batch)), width)
    cols = np.tile(np.arange(width), len(batch))
    valid = cols <= (batch.high - batch.low)[rows]
    count = np.zeros(len(rows), dtype=np.int64)
    stuck = np.zeros(len(rows), dtype=bool)
    # the runs still going (indices into rows), their column, where their instance's states
    # sit in state_at, its E, and where each run is; finished runs drop out
    live = np.flatnonzero(valid & (batch.start[rows] < batch.end[rows]))
    column = cols[live]
    offset = (base - batch.start)[rows[live]]
    end = batch.end[rows[live]]
    here = batch.start[rows[live]]
    while len(live):
        state = state_at[offset + here]
        assert (state >= 0).all(), "a const(b) run left the reachable states"
        following = nxt[first[state] + column]
        moved = following > here
        stuck[live[~moved]] = True
        count[live[moved]] += 1
        going = moved & (following < end)
        live, column, offset, end = live[going], column[going], offset[going], end[going]
        here = following[going]
    result = np.where(stuck, -1, count)
    return result.reshape(len(batch), width)
