"""The explicit-state engine: every reachable state of every instance of a model, exhaustively.

Generic over :class:`~chunkproof.spec.interface.ExplicitModel`: it knows states only as rows of
integers and keys, transitions only as the arrays a model returns. For one batch of instances
it runs a breadth-first search, one level at a time, each level one vectorised call of the
model's Next on the whole frontier:

1. the initial states are level 0;
2. every transition out of the frontier is recorded with the properties it violates; the first
   violation of each property in each instance is kept as its witness (breadth-first, so the
   witness is at the least depth, ties broken by the smallest state key and action);
3. the targets of the transitions the model lets the search follow, not yet visited, are the
   next frontier, each with its parent and the action that reached it.

When the model lists every state a batch can be in (``state_space``: a long prefill under small
budgets is thousands of levels of a few states each, and each level has a fixed cost), Next is
evaluated on all of them in one call, the levels are found on the integer graph of the
transitions that lead on, and the result is assembled in the same order as the search's: the
two give the same :class:`Explored`, field for field.

The result of a batch (:class:`Explored`) holds every reachable state with its BFS-tree parent
and every transition, so a counterexample trace is the parent chain to the witness, and a model
can compute figures over the reachable transitions. Each verdict built on it is a complete
enumeration of the batch's instances.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from chunkproof.checker.engines.lassos import judge_cycles
from chunkproof.spec.interface import ExplicitModel, Transitions

NO_WITNESS = -1

DENSE_KEYS = 1 << 26
"""Visited keys below this are kept as a bitmap (64 MB at most), above it as a sorted array."""


@dataclass
class Explored:
    """One batch, exhaustively: states (rows), their BFS-tree ``parent`` (index, -1 at Init),
    the ``via`` action and ``depth``; every transition (``steps.source`` indexes ``states``,
    in order: a state's transitions together, in the order the model gave them);
    per property, the witness transition of each instance (or :data:`NO_WITNESS`) and how many
    transitions violate it."""

    batch: Any
    states: np.ndarray
    parent: np.ndarray
    via: np.ndarray
    depth: np.ndarray
    steps: Transitions
    witness: dict[str, np.ndarray]
    violating: dict[str, np.ndarray]

    def instance_states(self) -> np.ndarray:
        """Reachable states per instance."""
        return np.bincount(self.states[:, 0], minlength=len(self.batch))

    def instance_transitions(self) -> np.ndarray:
        """Transitions per instance (weighted)."""
        inst = self.states[self.steps.source, 0]
        return np.bincount(inst, weights=self.steps.weight, minlength=len(self.batch)).astype(
            np.int64
        )

    def path(self, state: int) -> list[tuple[int, int]]:
        """(state index, action taken there) from Init to ``state``, excluding ``state``."""
        chain: list[tuple[int, int]] = []
        here = state
        while self.parent[here] >= 0:
            chain.append((int(self.parent[here]), int(self.via[here])))
            here = int(self.parent[here])
        return chain[::-1]


def explore_batch(model: ExplicitModel, batch: Any) -> Explored:
    """Breadth-first search of every instance of ``batch`` (module docstring), then the
    model's properties of runs that go on for ever (:func:`~chunkproof.checker.engines.lassos.
    judge_cycles`) on the whole graph."""
    listed = model.state_space(batch)
    explored = (
        _explore_listed(model, batch, listed)
        if listed is not None
        else _explore_levels(model, batch)
    )
    if getattr(model, "cycle_properties", ()):
        judge_cycles(model, explored)
    return explored


def _explore_levels(model: ExplicitModel, batch: Any) -> Explored:
    """:func:`explore_batch` one BFS level at a time (module docstring)."""
    frontier_states = model.initial(batch)
    frontier_keys = model.key(batch, frontier_states)
    visited = VisitedKeys(frontier_keys)
    count = len(frontier_states)
    frontier = np.arange(count)
    states, keys = [frontier_states], [frontier_keys]
    parent = [np.full(count, -1, dtype=np.int64)]
    via = [np.zeros(count, dtype=np.int64)]
    depth = [np.zeros(count, dtype=np.int64)]
    levels: list[Transitions] = []
    witness: dict[str, np.ndarray] = {
        pid: np.full(len(batch), NO_WITNESS, dtype=np.int64) for pid in model.properties
    }
    violating = {pid: np.zeros(len(batch), dtype=np.int64) for pid in model.properties}
    offset = 0
    level = 0
    while len(frontier):
        steps = model.successors(batch, frontier_states)
        local = steps.source
        steps.source = frontier[local]
        inst = frontier_states[local, 0]
        for pid in model.properties:
            mask = steps.bad.get(pid)
            if mask is None or not mask.any():
                continue
            hits = np.flatnonzero(mask)
            np.add.at(violating[pid], inst[hits], steps.weight[hits])
            _first_witness(witness[pid], inst, hits, offset, frontier_keys[local], steps.action)
        levels.append(steps)
        offset += len(steps.source)
        targets = steps.target[steps.follow]
        target_keys = model.key(batch, targets)
        unique, first = np.unique(target_keys, return_index=True)
        fresh = ~visited.contains(unique)
        new_keys, new_first = unique[fresh], first[fresh]
        visited.add(new_keys)
        level += 1
        frontier_states, frontier_keys = targets[new_first], new_keys
        frontier = np.arange(count, count + len(new_keys))
        count += len(new_keys)
        states.append(frontier_states)
        keys.append(new_keys)
        parent.append(steps.source[steps.follow][new_first])
        via.append(steps.action[steps.follow][new_first])
        depth.append(np.full(len(new_keys), level, dtype=np.int64))
    return Explored(
        batch,
        np.concatenate(states),
        np.concatenate(parent),
        np.concatenate(via),
        np.concatenate(depth),
        _concatenate(levels),
        witness,
        violating,
    )


def _explore_listed(model: ExplicitModel, batch: Any, listed: np.ndarray) -> Explored:
    """:func:`explore_batch` from Next evaluated once on every state of ``listed`` (module
    docstring): states in BFS order (level, then Init's order at level 0 and the key's after),
    transitions in the order of their sources, then the model's; each state's parent is the
    first transition of the level before that reaches it, each witness the first violation at
    the least level by (state key, action), as the search picks them."""
    keys = model.key(batch, listed)
    order = np.argsort(keys, kind="stable")
    listed, keys = listed[order], keys[order]
    every = model.successors(batch, listed)
    init = _positions(keys, model.key(batch, model.initial(batch)), "an initial state")
    leads = np.flatnonzero(every.follow)
    goes_to = np.full(len(every.source), -1, dtype=np.int64)
    goes_to[leads] = _positions(keys, model.key(batch, every.target[leads]), "a target")
    level = _levels(len(listed), init, every.source[leads], goes_to[leads])
    tie = np.arange(len(listed))  # within a level: the key's order, Init's at level 0
    tie[init] = np.arange(len(init))
    reached = np.flatnonzero(level >= 0)
    states = reached[np.lexsort((tie[reached], level[reached]))]
    renumber = np.full(len(listed), -1, dtype=np.int64)
    renumber[states] = np.arange(len(states))
    rows = np.flatnonzero(level[every.source] >= 0)
    origin = every.source[rows]
    rows = rows[np.lexsort((rows, tie[origin], level[origin]))]
    origin, goes_to = every.source[rows], goes_to[rows]
    steps = _take(every, rows)
    steps.source = renumber[origin]
    parent = np.full(len(states), -1, dtype=np.int64)
    via = np.zeros(len(states), dtype=np.int64)
    entering = np.flatnonzero(goes_to >= 0)
    entering = entering[level[goes_to[entering]] == level[origin[entering]] + 1]
    reached_by, first = np.unique(renumber[goes_to[entering]], return_index=True)
    parent[reached_by] = steps.source[entering[first]]
    via[reached_by] = steps.action[entering[first]]
    inst = listed[origin, 0]
    witness: dict[str, np.ndarray] = {}
    violating: dict[str, np.ndarray] = {}
    for pid in model.properties:
        witness[pid] = np.full(len(batch), NO_WITNESS, dtype=np.int64)
        violating[pid] = np.zeros(len(batch), dtype=np.int64)
        mask = steps.bad.get(pid)
        if mask is None or not mask.any():
            continue
        hits = np.flatnonzero(mask)
        np.add.at(violating[pid], inst[hits], steps.weight[hits])
        ranked = hits[
            np.lexsort((steps.action[hits], keys[origin[hits]], level[origin[hits]], inst[hits]))
        ]
        firsts = ranked[np.unique(inst[ranked], return_index=True)[1]]
        witness[pid][inst[firsts]] = firsts
    return Explored(batch, listed[states], parent, via, level[states], steps, witness, violating)


def _positions(sorted_keys: np.ndarray, keys: np.ndarray, what: str) -> np.ndarray:
    """Where each of ``keys`` sits in ``sorted_keys``; each must be there (a model's
    ``state_space`` lists every state its Init and Next can produce)."""
    at = np.minimum(np.searchsorted(sorted_keys, keys), max(len(sorted_keys) - 1, 0))
    if len(keys) and not (sorted_keys[at] == keys).all():
        raise AssertionError(f"{what} lies outside the model's listed states")
    return at


def _levels(count: int, init: np.ndarray, source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The BFS level of each of ``count`` states from the states ``init`` along the edges
    (source, target); -1 where unreached. A plain loop over the distinct edges: the levels are
    sequential, and a level of a long search holds a few states."""
    edges = np.unique(source * count + target)
    ends = np.searchsorted(edges // count, np.arange(count + 1)).tolist()
    heads = (edges % count).tolist()
    level = [-1] * count
    frontier = init.tolist()
    for state in frontier:
        level[state] = 0
    depth = 0
    while frontier:
        depth += 1
        found = []
        for state in frontier:
            for head in heads[ends[state] : ends[state + 1]]:
                if level[head] < 0:
                    level[head] = depth
                    found.append(head)
        frontier = found
    return np.asarray(level, dtype=np.int64)


def _take(steps: Transitions, rows: np.ndarray) -> Transitions:
    """The transitions ``rows`` of ``steps``, in that order."""
    return Transitions(
        source=steps.source[rows],
        action=steps.action[rows],
        target=steps.target[rows],
        follow=steps.follow[rows],
        bad={pid: mask[rows] for pid, mask in steps.bad.items()},
        weight=steps.weight[rows],
        record={name: values[rows] for name, values in steps.record.items()},
    )


class VisitedKeys:
    """The keys of the visited states: a bitmap while every key is in [0, :data:`DENSE_KEYS`)
    (one byte per possible key), else a sorted array."""

    def __init__(self, keys: np.ndarray) -> None:
        self.seen: np.ndarray | None = np.zeros(0, dtype=bool)
        self.sorted = np.zeros(0, dtype=np.int64)
        self.add(keys)

    def contains(self, keys: np.ndarray) -> np.ndarray:
        if self.seen is not None:
            inside = keys < len(self.seen)
            found = np.zeros(len(keys), dtype=bool)
            found[inside] = self.seen[keys[inside]]
            return found
        return _contains(self.sorted, keys)

    def add(self, keys: np.ndarray) -> None:
        """Record ``keys`` (not yet visited)."""
        if self.seen is not None and len(keys) and not 0 <= keys.min() <= keys.max() < DENSE_KEYS:
            self.sorted = np.sort(np.flatnonzero(self.seen))
            self.seen = None
        if self.seen is None:
            merged = np.concatenate([self.sorted, keys])
            self.sorted = merged[np.argsort(merged, kind="stable")]
            return
        if len(keys) and int(keys.max()) >= len(self.seen):
            grown = np.zeros(max(2 * len(self.seen), int(keys.max()) + 1), dtype=bool)
            grown[: len(self.seen)] = self.seen
            self.seen = grown
        self.seen[keys] = True


def _first_witness(
    found: np.ndarray,
    inst: np.ndarray,
    hits: np.ndarray,
    offset: int,
    source_keys: np.ndarray,
    actions: np.ndarray,
) -> None:
    """For each instance without a witness yet, the violating transition of this level with the
    smallest (state key, action)."""
    fresh = hits[found[inst[hits]] == NO_WITNESS]
    if not len(fresh):
        return
    order = np.lexsort((actions[fresh], source_keys[fresh], inst[fresh]))
    ranked = fresh[order]
    first = np.unique(inst[ranked], return_index=True)[1]
    chosen = ranked[first]
    found[inst[chosen]] = chosen + offset


def _contains(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Whether each of ``keys`` is in the sorted array ``sorted_keys``."""
    if not len(sorted_keys):
        return np.zeros(len(keys), dtype=bool)
    at = np.searchsorted(sorted_keys, keys)
    at = np.minimum(at, len(sorted_keys) - 1)
    found: np.ndarray = sorted_keys[at] == keys
    return found


def _concatenate(levels: list[Transitions]) -> Transitions:
    """The transitions of every level, in order."""
    first = levels[0]
    return Transitions(
        source=np.concatenate([t.source for t in levels]),
        action=np.concatenate([t.action for t in levels]),
        target=np.concatenate([t.target for t in levels]),
        follow=np.concatenate([t.follow for t in levels]),
        bad={pid: np.concatenate([t.bad[pid] for t in levels]) for pid in first.bad},
        weight=np.concatenate([t.weight for t in levels]),
        record={name: np.concatenate([t.record[name] for t in levels]) for name in first.record},
    )
