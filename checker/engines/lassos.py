"""Properties of runs that go on for ever, judged on an explored graph: a reachable state from
which the environment can keep the run inside a chosen set of transitions for ever (a lasso:
a path into a cycle, TLA+'s form of a liveness counterexample).

Generic over :class:`~chunkproof.spec.interface.ExplicitModel`: a model that has such
properties lists them in ``cycle_properties`` and names, per property, the transitions the run
is held to (``cycle_edges(batch, steps, pid)``: for S-POOL, the step offered the whole budget
M, one per state). The explorer calls :func:`judge_cycles` on a batch it has searched
completely (:func:`~chunkproof.checker.engines.explorer.explore_batch`), so the verdict is a
complete enumeration like every other.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from chunkproof.checker.engines.explorer import Explored


def endless(count: int, source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Of ``count`` states, those with an infinite path along the edges (source, target):
    every state is dropped whose edges all lead to dropped states (or that has none), until
    none is left to drop; the rest reach a cycle."""
    out = np.bincount(source, minlength=count)
    order = np.argsort(target, kind="stable")
    starts = np.searchsorted(target[order], np.arange(count + 1))
    into = source[order].tolist()
    ends = starts.tolist()
    left = out.tolist()
    queue = deque(int(state) for state in np.flatnonzero(out == 0))
    while queue:
        state = queue.popleft()
        for before in into[ends[state] : ends[state + 1]]:
            left[before] -= 1
            if left[before] == 0:
                queue.append(before)
    survives: np.ndarray = np.asarray(left, dtype=np.int64) > 0
    return survives


def judge_cycles(model: Any, explored: Explored) -> None:
    """For each of ``model.cycle_properties``: every transition of the chosen set out of a
    state with an infinite path in it violates the property (``explored.steps.bad``), each
    instance's witness is the first such transition in the search's order (the least depth),
    and its count of them is its violating figure."""
    steps = explored.steps
    keys = model.key(explored.batch, explored.states)
    order = np.argsort(keys, kind="stable")
    inst = explored.states[steps.source, 0]
    for pid in model.cycle_properties:
        chosen = np.flatnonzero(model.cycle_edges(explored.batch, steps, pid) & steps.follow)
        target_keys = model.key(explored.batch, steps.target[chosen])
        at = np.searchsorted(keys[order], target_keys)
        target = order[np.minimum(at, len(order) - 1)]
        assert (keys[target] == target_keys).all()  # a followed step's target was visited
        source = steps.source[chosen]
        survives = endless(len(explored.states), source, target)
        hits = chosen[survives[source] & survives[target]]
        bad = np.zeros(len(steps.source), dtype=bool)
        bad[hits] = True
        steps.bad[pid] = bad
        witness = explored.witness[pid].copy()  # no witness yet: no level marks this property
        firsts = np.unique(inst[hits], return_index=True)[1]
        witness[inst[hits[firsts]]] = hits[firsts]
        explored.witness[pid] = witness
        violating = np.zeros(len(explored.batch), dtype=np.int64)
        np.add.at(violating, inst[hits], steps.weight[hits])
        explored.violating[pid] = violating


def around(explored: Explored, transition: int, pid: str) -> tuple[list[int], int]:
    """From a witness ``transition`` of a cycle property, the transitions the run takes along
    the property's violating edges (each state's first) until it reaches a state it has
    passed, ``transition`` first; and the index among them of the transition that leaves that
    state: the lasso's loop starts there."""
    steps = explored.steps
    leaving: dict[int, int] = {}
    for edge in np.flatnonzero(steps.bad[pid])[::-1]:
        leaving[int(steps.source[edge])] = int(edge)
    state_of = {explored.states[state].tobytes(): state for state in leaving}
    taken: list[int] = []
    seen: dict[int, int] = {}
    here = transition
    while (state := int(steps.source[here])) not in seen:
        seen[state] = len(taken)
        taken.append(here)
        here = leaving[state_of[steps.target[here].tobytes()]]
    return taken, seen[state]
