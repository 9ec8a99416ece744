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

The result of a batch (:class:`Explored`) holds every reachable state with its BFS-tree parent
and every transition, so a counterexample trace is the parent chain to the witness, and a model
can compute figures over the reachable transitions. Each verdict built on it is a complete
enumeration of the batch's instances.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from chunkproof.spec.interface import ExplicitModel, Transitions

NO_WITNESS = -1


@dataclass
class Explored:
    """One batch, exhaustively: states (rows), their BFS-tree ``parent`` (index, -1 at Init),
    the ``via`` action and ``depth``; every transition (``steps.source`` indexes ``states``);
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
    """Breadth-first search of every instance of ``batch`` (module docstring)."""
    states = model.initial(batch)
    keys = model.key(batch, states)
    order = np.argsort(keys, kind="stable")
    visited_keys, visited_index = keys[order], order
    parent = np.full(len(states), -1, dtype=np.int64)
    via = np.zeros(len(states), dtype=np.int64)
    depth = np.zeros(len(states), dtype=np.int64)
    frontier = np.arange(len(states))
    levels: list[Transitions] = []
    witness: dict[str, np.ndarray] = {
        pid: np.full(len(batch), NO_WITNESS, dtype=np.int64) for pid in model.properties
    }
    violating = {pid: np.zeros(len(batch), dtype=np.int64) for pid in model.properties}
    offset = 0
    level = 0
    while len(frontier):
        steps = model.successors(batch, states[frontier])
        steps.source = frontier[steps.source]
        inst = states[steps.source, 0]
        for pid in model.properties:
            mask = steps.bad.get(pid)
            if mask is None or not mask.any():
                continue
            hits = np.flatnonzero(mask)
            np.add.at(violating[pid], inst[hits], steps.weight[hits])
            _first_witness(witness[pid], inst, hits, offset, keys[steps.source], steps.action)
        levels.append(steps)
        offset += len(steps.source)
        targets = steps.target[steps.follow]
        sources = steps.source[steps.follow]
        actions = steps.action[steps.follow]
        target_keys = model.key(batch, targets)
        unique, first = np.unique(target_keys, return_index=True)
        known = _contains(visited_keys, unique)
        new_keys, new_first = unique[~known], first[~known]
        new_index = np.arange(len(states), len(states) + len(new_keys))
        states = np.concatenate([states, targets[new_first]])
        keys = np.concatenate([keys, new_keys])
        parent = np.concatenate([parent, sources[new_first]])
        via = np.concatenate([via, actions[new_first]])
        level += 1
        depth = np.concatenate([depth, np.full(len(new_keys), level, dtype=np.int64)])
        merged = np.concatenate([visited_keys, new_keys])
        order = np.argsort(merged, kind="stable")
        visited_keys = merged[order]
        visited_index = np.concatenate([visited_index, new_index])[order]
        frontier = new_index
    return Explored(batch, states, parent, via, depth, _concatenate(levels), witness, violating)


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
