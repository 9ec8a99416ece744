"""The state-graph explorer: every configuration of a grid, exhaustively (SPEC S4, P).

For one *family* (a configuration with every parameter fixed but M) the explorer

1. evaluates the policy's vectorised form on every state c in [c0, E), every budget b and every
   M of the grid at once (:func:`family_tables`);
2. groups the M values whose transition tables agree on their common budgets (checked, not
   assumed) and builds, per group, one networkx DiGraph of the states reachable from c0: nodes
   are states c, an edge c -> c + k carries the chunk k and the least budget that yields it;
3. for each M, takes the states reachable with budgets up to M (the least budget bound that
   reaches each node is a bottleneck path, computed once per graph) and evaluates the
   properties of :mod:`chunkproof.checker.properties` on every reachable (c, b).

Each verdict is a complete enumeration over the grid; counterexample traces come from a BFS on
the same graph (:func:`shortest_path`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import networkx as nx
import numpy as np

from chunkproof.checker import properties as props
from chunkproof.model.config import Config
from chunkproof.model.policy import Policy
from chunkproof.model.step import vectorised_stages
from chunkproof.model.subset import parse
from chunkproof.model.vectorised import INTERPRETER


@dataclass(frozen=True)
class FamilyTables:
    """Stage tables of one family: ``chunk[i, j, k]`` for M = ms[i], c = states[j],
    b = budgets[k]; ``n`` is the chunk before the split."""

    base: Config
    ms: tuple[int, ...]
    states: np.ndarray
    budgets: np.ndarray
    n: np.ndarray
    chunk: np.ndarray
    bad: dict[str, np.ndarray]


def budget_bounds(cfg: Config, budget: tuple[int, int] | None) -> tuple[int, int]:
    """Offered budgets [low, high] for M = cfg.max_sched (SPEC S4: adversarial(1..M)).

    Budgets above T - c0 give the same step as T - c0, because every composition starts with
    n := min(T - c, ..., b), so ``high`` is capped there.
    """
    low, high = budget if budget is not None else (1, cfg.max_sched)
    return low, min(high, cfg.max_sched, cfg.T - cfg.start)


def family_tables(
    policy: Policy,
    bases: Sequence[Config],
    ms: Sequence[int],
    budget: tuple[int, int] | None,
    wanted: Sequence[str] = (),
    window: str = "relaxed",
) -> list[FamilyTables]:
    """Evaluate the policy's vectorised form, and the step properties of ``wanted``, on every
    (family, M, c, b) of a batch of families at once (families may differ in any field; c0
    must be shared)."""
    start = bases[0].start
    assert all(b.start == start for b in bases)
    tops = [budget_bounds(b.replace(max_sched=max(ms)), budget) for b in bases]
    low = tops[0][0]
    states = np.arange(start, max(b.prefill_end for b in bases), dtype=np.int64)
    budgets = np.arange(low, max(max(h for _, h in tops), low - 1) + 1, dtype=np.int64)
    view = _batch_view(bases)
    view.max_sched = np.asarray(ms, dtype=np.int64)[None, :, None, None]
    shape = (len(bases), len(ms), len(states), len(budgets))
    c = states[None, None, :, None]
    values = vectorised_stages(policy, view, c, budgets[None, None, None, :])
    n = np.broadcast_to(values["cap"], shape)
    chunk = np.broadcast_to(values["chunk"], shape)
    e = c + chunk
    moving = chunk > 0
    bad = {"P1": _pred(props.stuck, view, shape, c, chunk)}
    for pid in wanted:
        if pid in props.EDGE_PROPERTIES:
            bad[pid] = _pred(props.EDGE_PROPERTIES[pid], view, shape, c, e) & moving
        elif pid == "P5":
            bad[pid] = _pred(props.WINDOW_PROPERTIES[window], view, shape, c, n, e) & moving
    out = []
    for f, (base, (_, high)) in enumerate(zip(bases, tops, strict=True)):
        rows = base.prefill_end - start
        cols = int(np.searchsorted(budgets, high, side="right"))
        out.append(
            FamilyTables(
                base,
                tuple(ms),
                states[:rows],
                budgets[:cols],
                n[f, :, :rows, :cols],
                chunk[f, :, :rows, :cols],
                {pid: t[f, :, :rows, :cols] for pid, t in bad.items()},
            )
        )
    return out


def _batch_view(bases: Sequence[Config]) -> SimpleNamespace:
    """A config whose fields that differ across ``bases`` are arrays along the first axis."""
    fields = bases[0].to_dict()
    for name in fields:
        values = [getattr(b, name) for b in bases]
        if any(v != values[0] for v in values):
            fields[name] = np.asarray(values)[:, None, None, None]
    return SimpleNamespace(**fields)


def _pred(func: Any, cfg: Any, shape: tuple[int, ...], *args: Any) -> np.ndarray:
    """A property predicate of :mod:`chunkproof.checker.properties`, evaluated over arrays."""
    value = INTERPRETER.call(parse(func), [cfg, *args])
    return np.broadcast_to(np.asarray(value, dtype=bool), shape)


@dataclass
class StateGraph:
    """The reachable states of one family under budgets up to ``high`` (nodes: c; edges:
    ``budget`` = least budget giving the edge, ``chunk``), shared by the M values ``ms``."""

    graph: nx.DiGraph[int]
    need: np.ndarray  # need[c - c0]: least budget bound reaching c (a huge value if none)
    ms: list[int]
    const_steps: np.ndarray  # P7: steps under const(budgets[j]); -1 if stuck


def _reachable_graph(
    start: int, end: int, states: np.ndarray, budgets: np.ndarray, chunk: np.ndarray
) -> nx.DiGraph[int]:
    graph: nx.DiGraph[int] = nx.DiGraph()
    graph.add_node(start)
    stack = [start]
    offset = int(states[0]) if len(states) else start
    while stack:
        c = stack.pop()
        row = chunk[c - offset]
        ks, first = np.unique(row, return_index=True)
        for k, j in zip(ks.tolist(), first.tolist(), strict=True):
            target = c + k
            is_new = target not in graph
            graph.add_edge(c, target, budget=int(budgets[j]), chunk=k)
            if is_new and target < end:
                stack.append(target)
    return graph


UNREACHABLE = np.iinfo(np.int64).max


def _bottleneck(graph: nx.DiGraph[int], start: int, end: int) -> np.ndarray:
    """need[c - c0]: the least budget bound under which state c < E is reachable (chunks never
    go back, so one pass in increasing c is a complete bottleneck-path computation)."""
    need = np.full(end - start, UNREACHABLE, dtype=np.int64)
    need[0] = 0
    for c in sorted(graph.nodes):
        if c >= end or need[c - start] == UNREACHABLE:
            continue
        for _, target, data in graph.out_edges(c, data=True):
            if c < target < end:
                need[target - start] = min(
                    need[target - start], max(need[c - start], data["budget"])
                )
    return need


def state_graphs(tables: FamilyTables) -> list[StateGraph]:
    """Group the M values whose tables agree on their common budgets; one graph per group."""
    base = tables.base
    groups: list[tuple[int, list[int]]] = []  # (index of reference M, members)
    for i, m in enumerate(tables.ms):
        width = int(np.searchsorted(tables.budgets, m, side="right"))
        if groups:
            ref = groups[-1][0]
            if np.array_equal(
                tables.chunk[i, :, :width], tables.chunk[ref, :, :width]
            ) and np.array_equal(tables.n[i, :, :width], tables.n[ref, :, :width]):
                groups[-1] = (i, [*groups[-1][1], m])
                continue
        groups.append((i, [m]))
    graphs = []
    for ref, members in groups:
        graph = _reachable_graph(
            base.start, base.prefill_end, tables.states, tables.budgets, tables.chunk[ref]
        )
        graphs.append(
            StateGraph(
                graph,
                _bottleneck(graph, base.start, base.prefill_end),
                members,
                _const_steps(base, tables.chunk[ref]),
            )
        )
    return graphs


def shortest_path(state_graph: StateGraph, start: int, target: int, high: int) -> list[int]:
    """BFS shortest path of states from ``start`` to ``target`` using budgets <= ``high``."""
    graph = state_graph.graph
    view = nx.subgraph_view(graph, filter_edge=lambda u, v: graph[u][v]["budget"] <= high)
    path: list[int] = nx.shortest_path(view, start, target)
    return path


def edge_budget(state_graph: StateGraph, u: int, v: int) -> int:
    """The least budget that takes the request from u to v."""
    budget: int = state_graph.graph[u][v]["budget"]
    return budget


@dataclass(frozen=True)
class Witness:
    """A violating step: state c (reachable) and budget b."""

    c: int
    budget: int


@dataclass
class ConfigResult:
    """What one configuration (one M of a family) showed: per property, a mask over its
    reachable states x offered budgets marking the violating steps (P1: the largest budget)."""

    cfg: Config
    reach: np.ndarray
    budgets: np.ndarray
    masks: dict[str, np.ndarray]
    progress_budget: int | None  # P2's b*, None when some reachable state never progresses
    cost: dict[str, Any]  # P7 figures
    transitions: int

    def violated(self, pid: str) -> bool:
        mask = self.masks.get(pid)
        return mask is not None and bool(mask.any())

    def witnesses(self, pid: str) -> list[Witness]:
        """For each violating state, its first violating budget."""
        bad = self.masks[pid]
        rows = np.flatnonzero(bad.any(axis=1))
        cols = bad[rows].argmax(axis=1)
        return [
            Witness(int(self.reach[r]), int(self.budgets[j]))
            for r, j in zip(rows, cols, strict=True)
        ]


def evaluate_config(
    tables: FamilyTables, sg: StateGraph, m: int, budget: tuple[int, int] | None
) -> ConfigResult:
    """The properties for M = m on the reachable states of its graph (SPEC P1-P7)."""
    cfg = tables.base.replace(max_sched=m)
    high = budget_bounds(cfg, budget)[1]
    i = tables.ms.index(m)
    width = int(np.searchsorted(tables.budgets, high, side="right"))
    rows = np.flatnonzero(sg.need <= high)
    budgets = tables.budgets[:width]
    reach = tables.states[rows]
    k = tables.chunk[i][rows, :width]
    if width == 0:
        return ConfigResult(cfg, reach, budgets, {}, None, {}, 0)
    stuck = tables.bad["P1"][i][rows, width - 1]
    masks = {pid: bad[i][rows, :width] for pid, bad in tables.bad.items() if pid != "P1"}
    at_largest = np.zeros((len(rows), width), dtype=bool)
    at_largest[:, -1] = stuck
    masks["P1"] = masks["P2"] = at_largest
    cost = _cost(cfg, sg.const_steps[:width], budgets)
    masks["P7"] = at_largest if cost["stuck_at_max"] else np.zeros_like(at_largest)
    return ConfigResult(
        cfg, reach, budgets, masks, _progress_budget(k, budgets, stuck), cost, int(k.size)
    )


def _progress_budget(k: np.ndarray, budgets: np.ndarray, stuck: np.ndarray) -> int | None:
    """P2: b* = 1 + the largest zero-yielding budget over reachable states (None if stuck)."""
    if stuck.any():
        return None
    zero = k == 0
    if not zero.any():
        return int(budgets[0])
    last_zero = budgets[zero.shape[1] - 1 - np.argmax(zero[:, ::-1], axis=1)]
    return int(last_zero[zero.any(axis=1)].max()) + 1


def _const_steps(cfg: Config, chunk: np.ndarray) -> np.ndarray:
    """P7: steps to finish under const(b) for every budget column of ``chunk``; -1 if stuck."""
    width = chunk.shape[1]
    c = np.full(width, cfg.start, dtype=np.int64)
    steps = np.zeros(width, dtype=np.int64)
    stuck = np.zeros(width, dtype=bool)
    cols = np.arange(width)
    live = c < cfg.prefill_end
    while live.any():
        k = chunk[np.where(live, c - cfg.start, 0), cols]
        stuck |= live & (k == 0)
        advance = live & (k > 0)
        c = np.where(advance, c + k, c)
        steps += advance
        live = ~stuck & (c < cfg.prefill_end)
    return np.where(stuck, -1, steps)


def _cost(cfg: Config, steps: np.ndarray, budgets: np.ndarray) -> dict[str, Any]:
    """P7 figures for the offered budgets: worst and mean excess over ceil((E - c0) / b)."""
    finished = steps >= 0
    excess = (steps - (-(-(cfg.prefill_end - cfg.start) // budgets)))[finished]
    return {
        "worst_excess": int(excess.max()) if excess.size else None,
        "mean_excess": float(excess.mean()) if excess.size else None,
        "worst_budget": int(budgets[finished][excess.argmax()]) if excess.size else None,
        "stuck_budgets": int((~finished).sum()),
        "stuck_at_max": bool(not finished[-1]),
    }
