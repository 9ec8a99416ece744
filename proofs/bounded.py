"""Bounded search for a violation with Z3's Optimize, for any
:class:`~chunkproof.spec.interface.SymbolicModel`: the transition relation unrolled ``depth``
steps (idle steps allowed, so shorter traces count), a violation at the last state, and the
``objectives`` minimised in order. Used to find a smallest counterexample, which Spacer then
certifies minimal over traces of any length."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import z3

from chunkproof.spec.interface import SymbolicModel


@dataclass(frozen=True)
class SolverTrace:
    """A bounded-search model: the solver's model, and the states and actions of the non-idle
    steps, then the final (violating) state and action."""

    model: z3.ModelRef
    states: list[list[int]]
    actions: list[list[int]]
    final_state: list[int]
    final_action: list[int]
    depth: int


def shallow_violation(
    model: SymbolicModel, pid: str, depth: int, timeout_ms: int, rlimit: int | None = None
) -> str:
    """sat when a violation is reachable within ``depth`` steps (a plain solver: no
    minimisation), unsat when not, else unknown (past ``timeout_ms`` or Z3's resource limit
    ``rlimit``: a deterministic bound, what a test sets). A cheap first look before Spacer."""
    solver = z3.Solver()
    solver.set("timeout", timeout_ms)
    if rlimit is not None:
        solver.set("rlimit", rlimit)
    solver.add(z3.And(*unrolled(model, pid, depth)))
    return str(solver.check())


def unrolled(model: SymbolicModel, pid: str, depth: int, extra: Any = True) -> list[Any]:
    """The question of :func:`bounded_search` without its objectives, as its conjuncts: the
    relation unrolled ``depth`` steps from an initial state (idle steps allowed), ``extra``
    (if given), a violation at the last state."""
    states = [model.state(f"s{i}") for i in range(depth + 1)]
    actions = [model.action(f"a{i}") for i in range(depth)]
    parts = [model.constraint, model.init(states[0]), *([] if extra is True else [extra])]
    for i in range(depth):
        idle = z3.Bool(f"idle{i}")
        move = z3.And(model.guard(states[i], actions[i]), model.follows(states[i], actions[i]))
        parts.append(z3.Implies(z3.Not(idle), move))
        nxt = model.next(states[i], actions[i])
        for now, after, moved in zip(states[i], states[i + 1], nxt, strict=True):
            parts.append(after == z3.If(idle, now, moved))
    final = model.action("a_final")
    parts += [model.guard(states[depth], final), model.violation(pid, states[depth], final)]
    return parts


def bounded_search(
    model: SymbolicModel,
    pid: str,
    depth: int,
    objectives: Sequence[Any],
    timeout_ms: int,
    extra: Any = True,
    rlimit: int | None = None,
) -> SolverTrace | str | None:
    """A violation within ``depth`` steps minimising ``objectives``; None if none; "unknown"
    past ``timeout_ms`` or Z3's resource limit ``rlimit`` (deterministic: what a test sets)."""
    opt = z3.Optimize()
    opt.set("timeout", timeout_ms)
    if rlimit is not None:
        opt.set("rlimit", rlimit)
    opt.add(*unrolled(model, pid, depth, extra))
    # the unrolling's variables, by their names
    states = [model.state(f"s{i}") for i in range(depth + 1)]
    actions = [model.action(f"a{i}") for i in range(depth)]
    idle = [z3.Bool(f"idle{i}") for i in range(depth)]
    final = model.action("a_final")
    last = states[depth]
    for objective in objectives:
        opt.minimize(objective)
    answer = opt.check()
    if answer == z3.unknown:
        return "unknown"
    if answer == z3.unsat:
        return None
    solved = opt.model()

    def values(terms: list[Any]) -> list[int]:
        return [solved.eval(t, model_completion=True).as_long() for t in terms]

    moving = [i for i in range(depth) if not z3.is_true(solved.eval(idle[i], True))]
    return SolverTrace(
        solved,
        [values(states[i]) for i in moving],
        [values(actions[i]) for i in moving],
        values(last),
        values(final),
        depth,
    )
