"""When a bounded search is a proof: the recurrence diameter (Kroening and Strichman, 2003), for
any :class:`~chunkproof.spec.interface.SymbolicModel`.

A *loop-free* run passes no state twice. If no loop-free run of ``steps`` moves leaves an
initial state (for every parameter of the cell), every reachable state is reached by one of
fewer moves: a shortest run to a state is loop-free. So a bounded search to ``steps - 1``
moves (idle steps allowed, :mod:`~chunkproof.proofs.bounded`) has seen every reachable state,
and its unsat is a proof over the whole cell, as complete as an enumeration:

    query:  constraint, init(s_0), for i < steps: guard(s_i, a_i), follows(s_i, a_i),
            s_{i+1} = next(s_i, a_i); for i < j: s_i != s_j

unsat: the bound holds; sat: some run is longer, and the bounded search is not a proof;
unknown: past the timeout or Z3's resource limit. The query is asked of the portfolio of
:mod:`~chunkproof.proofs.solving` in a fresh context (:func:`~chunkproof.proofs.solving.
check_apart`): Z3's default solver has a heavy tail on it, past ten minutes in one context
where another answered in a second, and it spends its resource units unevenly there (a
test's run reached its ten-minute wall-clock guard under the tests' resource limit).
"""

from __future__ import annotations

from typing import Any

import z3

from chunkproof.proofs import solving
from chunkproof.spec.interface import SymbolicModel


def loop_free_run(
    model: SymbolicModel, steps: int, timeout_ms: int, rlimit: int | None = None
) -> str:
    """sat when some run of ``steps`` moves from an initial state passes no state twice,
    unsat when none does (module docstring), else unknown."""
    states = [model.state(f"s{i}") for i in range(steps + 1)]
    actions = [model.action(f"a{i}") for i in range(steps)]
    parts: list[Any] = [model.constraint, model.init(states[0])]
    for i in range(steps):
        parts += [model.guard(states[i], actions[i]), model.follows(states[i], actions[i])]
        nxt = model.next(states[i], actions[i])
        parts += [after == moved for after, moved in zip(states[i + 1], nxt, strict=True)]
    for j in range(steps + 1):
        for i in range(j):
            parts.append(z3.Or(*[a != b for a, b in zip(states[i], states[j], strict=True)]))
    return solving.check_apart(z3.And(*parts), timeout_ms, rlimit)
