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
does not hold every run). The query goes to a portfolio of its own (:data:`ATTEMPTS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import z3

from chunkproof.proofs import solving
from chunkproof.spec.interface import SymbolicModel, as_term

ATTEMPTS: solving.Attempts = ((solving.OLD_ARITH, 0, 2_000), (solving.PIPELINE, 0, 0))
"""The solvers of the query (:mod:`~chunkproof.proofs.solving`). Measured on the minimisation
queries of ``lookahead-in-split``'s production range, each solver alone: on 247 that are
unsat (a violation before the least T of P3, P4 or P6?), Z3's default solver took 72.6 s, the
preprocessing pipeline 9.5 s, the pipeline with the older arithmetic engine 8.0 s; on 64 of
P3 before T = 25 (20 sat), 80.2, 50.9 and 24.5 s."""


def finite_reachable_violation(
    model: SymbolicModel,
    pid: str,
    extra: Any,
    states: Sequence[Sequence[int]],
    timeout_ms: int,
    rlimit: int | None = None,
) -> str:
    """Is a state violating ``pid`` reachable where ``extra`` holds, the runs being among
    ``states`` (module docstring)? "sat", "unsat" or "unknown" (past ``timeout_ms`` or
    ``rlimit`` units, :func:`~chunkproof.proofs.solving.try_limits`)."""
    listed = [[z3.IntVal(v) for v in s] for s in states]
    actions = [model.action(f"a{i}") for i in range(len(listed))]
    moves = [z3.Bool(f"moves{i}") for i in range(len(listed))]
    visited = [z3.Bool(f"visited{i}") for i in range(len(listed))]
    at = _Transition(model, pid)
    parts = [model.constraint, extra]
    reached: list[list[Any]] = []
    violations = []
    left = []
    for i, (state, action) in enumerate(zip(listed, actions, strict=True)):
        guard, follows, after, violation, init = at(state, action)
        comes = [z3.And(visited[j], moves[j], _equal(reached[j], state)) for j in range(i)]
        parts.append(visited[i] == z3.Or(init, *comes))
        parts.append(z3.Implies(moves[i], z3.And(guard, follows)))
        reached.append(after)
        later = [_equal(after, s) for s in listed[i + 1 :]]
        left.append(z3.And(visited[i], moves[i], z3.Not(z3.Or(*later))))
        violations.append(z3.And(visited[i], z3.Not(moves[i]), guard, violation))
    unlisted = model.state("unlisted")
    left.append(z3.And(model.init(unlisted), *[z3.Not(_equal(unlisted, s)) for s in listed]))
    violated = z3.Bool("violated")
    parts += [violated == z3.Or(*violations), z3.Or(violated, *left)]
    answer, found = solving.solve_formula(z3.And(*parts), max(timeout_ms, 1), ATTEMPTS, rlimit)
    if found is not None and z3.is_true(found.eval(violated, model_completion=True)):
        return "sat"
    return "unsat" if answer == "unsat" else "unknown"


def _equal(state: list[Any], other: list[Any]) -> Any:
    return z3.And(*[a == b for a, b in zip(state, other, strict=True)])


class _Transition:
    """The model's guard, follows, next state, violation of ``pid`` and init, built once over a
    symbolic state and action, then instantiated at each listed state by substitution (one
    call into Z3 per term, where building them again runs the policy's interpreter)."""

    def __init__(self, model: SymbolicModel, pid: str) -> None:
        self.state, self.action = model.state("s"), model.action("a")
        self.terms = [
            model.guard(self.state, self.action),
            model.follows(self.state, self.action),
            *model.next(self.state, self.action),
            model.violation(pid, self.state, self.action),
            model.init(self.state),
        ]
        self.width = len(self.state)

    def __call__(self, state: list[Any], action: list[Any]) -> tuple[Any, Any, list[Any], Any, Any]:
        pairs = [*zip(self.state, state, strict=True), *zip(self.action, action, strict=True)]
        guard, follows, *rest = [z3.substitute(as_term(t), *pairs) for t in self.terms]
        return guard, follows, rest[: self.width], rest[self.width], rest[self.width + 1]
