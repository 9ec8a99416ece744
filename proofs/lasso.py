"""A run that goes on for ever, as a reachable violation (liveness to safety, after Biere, Artho
and Schuppan, 2002), for any :class:`~chunkproof.spec.interface.SymbolicModel` that lists the
property in its ``cycle_properties`` and names the steps such a run is held to
(``cycle_edge(pid, state, action)``; for S-POOL: the step offered the whole budget M).

The model's state s gets a copy ``saved`` and a flag ``armed``; the action gets ``save``:

    Init:   init(s), saved = s, armed = 0
    guard:  guard(s, a), save in {0, 1}, armed = 1 -> save = 0,
            armed = 1 or save = 1 -> cycle_edge(s, a)
    Next:   s' = next(s, a), saved' = s if save = 1 else saved, armed' = max(armed, save)
    bad:    armed = 1 and s = saved

A reachable bad state is a lasso: the path to the state saved, then steps along the chosen
edges (each one the model ``follows``: no crash, progress, work left) back to it. As the
state space of an instance is finite, such a lasso exists exactly when some reachable state
starts an infinite run along those edges, which is what the explorer's graph search judges
(:mod:`chunkproof.checker.engines.lassos`). The bounded search finds lassos up to its depth
(path and loop together); Spacer's unsat, with its certificate, proves there is none.
"""

from __future__ import annotations

from typing import Any

import z3

from chunkproof.spec.interface import SymbolicModel


class LassoModel:
    """``model``'s cycle property ``pid`` as a reachability question (module docstring): a
    :class:`~chunkproof.spec.interface.SymbolicModel` whose one property is ``pid``."""

    def __init__(self, model: Any, pid: str) -> None:
        self.model, self.pid = model, pid
        self.parameters = model.parameters
        self.constraint = model.constraint
        self.properties = (pid,)
        self.width = len(model.state("lasso.width"))

    def parts(self, state: list[Any]) -> tuple[list[Any], list[Any], Any]:
        """A state vector's model state, its saved copy and its armed flag."""
        w = self.width
        return state[:w], state[w : 2 * w], state[2 * w]

    def state(self, name: str) -> list[Any]:
        model: SymbolicModel = self.model
        return [*model.state(name), *model.state(f"{name}.saved"), z3.Int(f"{name}.armed")]

    def action(self, name: str) -> list[Any]:
        return [*self.model.action(name), z3.Int(f"{name}.save")]

    def saves(self, action: list[Any]) -> Any:
        """Whether the action saves the state (the loop starts at this step)."""
        return action[-1]

    def init(self, state: list[Any]) -> Any:
        now, saved, armed = self.parts(state)
        same = [a == b for a, b in zip(now, saved, strict=True)]
        return z3.And(self.model.init(now), *same, armed == 0)

    def guard(self, state: list[Any], action: list[Any]) -> Any:
        now, _, armed = self.parts(state)
        step, save = action[:-1], action[-1]
        return z3.And(
            self.model.guard(now, step),
            z3.Or(save == 0, save == 1),
            z3.Implies(armed == 1, save == 0),
            z3.Implies(z3.Or(armed == 1, save == 1), self.model.cycle_edge(self.pid, now, step)),
        )

    def next(self, state: list[Any], action: list[Any]) -> list[Any]:
        now, saved, armed = self.parts(state)
        step, save = action[:-1], action[-1]
        moved = self.model.next(now, step)
        kept = [z3.If(save == 1, a, b) for a, b in zip(now, saved, strict=True)]
        return [*moved, *kept, z3.If(save == 1, 1, armed)]

    def follows(self, state: list[Any], action: list[Any]) -> Any:
        now, _, _ = self.parts(state)
        return self.model.follows(now, action[:-1])

    def violation(self, pid: str, state: list[Any], action: list[Any]) -> Any:
        """The run is back at the state it saved: a loop along the chosen edges."""
        now, saved, armed = self.parts(state)
        return z3.And(armed == 1, *[a == b for a, b in zip(now, saved, strict=True)])

    def scope(self, pid: str) -> Any:
        return self.model.scope(self.pid)
