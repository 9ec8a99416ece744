"""Complete reachability over a finite list of concrete states, for any
:class:`~chunkproof.spec.interface.SymbolicModel` whose runs, under a constraint, stay among a
few states the caller knows: one copy of the transition per listed state, each state a
constant (so the policy's arithmetic on it folds), where an unrolling copies the transition
per step with the state symbolic and Spacer searches for an invariant. On the minimisation
queries of a production proof (is there a violation with T below 17?) it answers in about a
second where Spacer ran out of its 60 s.

The states are listed in an order every move follows (a move leads to a later state: for the
single-request model, c grows). A run along the list visits each state once, so one action
per state covers every run:

    visited(i)  =  init(s_i)  or  some j < i: visited(j), moves(j), next(s_j, a_j) = s_i
    moves(j)    => guard(s_j, a_j) and follows(s_j, a_j)
    query:   some i: visited(i), not moves(i), guard(s_i, a_i), violation(s_i, a_i)
          or some j: visited(j), moves(j), next(s_j, a_j) is no later listed state
          or some initial state is not listed

unsat: no reachable state violates (by induction on a run's length every run stays on the
list in its order, and is one the query ranges over); sat through a violation: one is
reachable (the visited states form the run); sat otherwise, or a timeout: unknown (the list
does not hold every run).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import z3

from chunkproof.spec.interface import SymbolicModel


def finite_reachable_violation(
    model: SymbolicModel,
    pid: str,
    extra: Any,
    states: Sequence[Sequence[int]],
    timeout_ms: int,
) -> str:
    """Is a state violating ``pid`` reachable where ``extra`` holds, the runs being among
    ``states`` (module docstring)? "sat", "unsat" or "unknown"."""
    listed = [[z3.IntVal(v) for v in s] for s in states]
    actions = [model.action(f"a{i}") for i in range(len(listed))]
    moves = [z3.Bool(f"moves{i}") for i in range(len(listed))]
    visited = [z3.Bool(f"visited{i}") for i in range(len(listed))]
    parts = [model.constraint, extra]
    reached: list[list[Any]] = []
    violations = []
    left = []
    for i, (state, action) in enumerate(zip(listed, actions, strict=True)):
        guard = model.guard(state, action)
        after = model.next(state, action)
        comes = [z3.And(visited[j], moves[j], _equal(reached[j], state)) for j in range(i)]
        parts.append(visited[i] == z3.Or(model.init(state), *comes))
        parts.append(z3.Implies(moves[i], z3.And(guard, model.follows(state, action))))
        reached.append(after)
        later = [_equal(after, s) for s in listed[i + 1 :]]
        left.append(z3.And(visited[i], moves[i], z3.Not(z3.Or(*later))))
        violations.append(
            z3.And(visited[i], z3.Not(moves[i]), guard, model.violation(pid, state, action))
        )
    unlisted = model.state("unlisted")
    left.append(z3.And(model.init(unlisted), *[z3.Not(_equal(unlisted, s)) for s in listed]))
    violated = z3.Bool("violated")
    parts += [violated == z3.Or(*violations), z3.Or(violated, *left)]
    solver = z3.Solver()
    solver.set("timeout", max(timeout_ms, 1))
    solver.add(*parts)
    answer = solver.check()
    if answer == z3.sat and z3.is_true(solver.model().eval(violated, model_completion=True)):
        return "sat"
    return "unsat" if answer == z3.unsat else "unknown"


def _equal(state: list[Any], other: list[Any]) -> Any:
    return z3.And(*[a == b for a, b in zip(state, other, strict=True)])
