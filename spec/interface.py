"""What both engines check: a model, in the style of Stateright's ``Model`` and TLA+'s
Init/Next/invariants, in a form each engine can evaluate in bulk.

A model is a family of transition systems, one per *instance* (a parameter point: TLA+'s
CONSTANTS). Each has initial states (Init), the environment's choices at a state (the actions)
and a next-state function (Next); properties are judged on transitions. The explorer
(:mod:`chunkproof.checker.engines.explorer`) enumerates instances and states; the prover
(:mod:`chunkproof.proofs`) keeps instances and states symbolic. Neither knows what a request,
a budget or a chunk is: the single-request policy (:mod:`chunkproof.spec.request`) and the
scheduler step are two models behind these interfaces.

**Explicit form** (:class:`ExplicitModel`). States are rows of an int64 matrix: column 0 is the
instance index within a batch, the rest the state vector. :meth:`ExplicitModel.successors`
evaluates every action of every given state at once and returns a :class:`Transitions`.

A model may also judge properties of runs that go on for ever: it lists them in
``cycle_properties`` and names the transitions such a run is held to (``cycle_edges(batch,
steps, pid)``); the explorer judges them on the whole graph of a batch it has searched
(:mod:`chunkproof.checker.engines.lassos`).

**Symbolic form** (:class:`SymbolicModel`). Parameters, state variables and the action are Z3
terms; the model gives the initial-state predicate, the guard, the next state and, per
property, the condition under which a transition violates it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import z3


@dataclass
class Transitions:
    """Transitions out of a set of states, as parallel arrays (one entry per transition).

    ``source`` indexes the rows of the states they leave, ``action`` is the environment's
    choice, ``target`` the next states (rows, same layout as the states), ``follow`` marks the
    transitions the search continues along (a step that crashes or finishes does not lead on),
    ``bad[pid]`` the transitions that violate property ``pid``, and ``weight`` how many
    transitions of the model each entry stands for (a model may merge choices that behave
    identically). ``record`` holds the model's per-transition values a trace shows.
    """

    source: np.ndarray
    action: np.ndarray
    target: np.ndarray
    follow: np.ndarray
    bad: dict[str, np.ndarray]
    weight: np.ndarray
    record: dict[str, np.ndarray] = field(default_factory=dict)


class ExplicitModel(Protocol):
    """A model the explorer enumerates."""

    properties: tuple[str, ...]
    """The transition properties it judges (ids of SPEC P)."""

    def batches(self) -> Iterator[Any]:
        """The instances, grouped so that one evaluation covers a batch (of the model's own
        type, with ``len``)."""

    def initial(self, batch: Any) -> np.ndarray:
        """Init: the initial states of every instance of the batch (rows)."""

    def successors(self, batch: Any, states: np.ndarray) -> Transitions:
        """Next: every action of every state (rows of ``states``)."""

    def key(self, batch: Any, states: np.ndarray) -> np.ndarray:
        """A unique int64 per (instance, state) row, for the visited set."""

    def state_space(self, batch: Any) -> np.ndarray | None:
        """Every state the batch's instances can be in (rows, each once, the initial states
        among them: a superset of the reachable ones) when evaluating Next on all of them at
        once costs less than a search level by level; else None."""


class SymbolicModel(Protocol):
    """A model the prover translates to Z3 (one proof cell: some inputs concrete)."""

    parameters: list[Any]
    """The symbolic parameters (Z3 constants), shared by every state of a run."""
    constraint: Any
    """What the parameters range over (the scope, and the release's acceptance)."""

    def state(self, name: str) -> list[Any]:
        """Fresh state variables (Z3 constants) named after ``name``."""

    def action(self, name: str) -> list[Any]:
        """Fresh action variables (the environment's choice)."""

    def init(self, state: list[Any]) -> Any:
        """Init: the state is an initial state."""

    def guard(self, state: list[Any], action: list[Any]) -> Any:
        """The action may be taken at the state (and the state is not final)."""

    def next(self, state: list[Any], action: list[Any]) -> list[Any]:
        """Next: the state after the action."""

    def violation(self, pid: str, state: list[Any], action: list[Any]) -> Any:
        """The transition (state, action) violates property ``pid``."""

    def follows(self, state: list[Any], action: list[Any]) -> Any:
        """The transition leads on (it does not crash)."""

    def scope(self, pid: str) -> Any:
        """The parameters property ``pid`` judges (True: all of them); outside, its violation
        is false, so a cell with none inside holds nothing for it to prove."""


def as_term(value: Any) -> Any:
    """A Z3 term for a value a :class:`SymbolicModel` may give as a Python constant (an input
    its cell fixes, a test that folds to a truth value)."""
    if isinstance(value, z3.ExprRef):
        return value
    return z3.BoolVal(value) if isinstance(value, bool) else z3.IntVal(value)
