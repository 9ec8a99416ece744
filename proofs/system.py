"""The transition system of one proof cell, derived from the policy's own source (SPEC S2-S4).

A *cell* fixes the parameters that stay concrete: block size B, lookahead L, the EAGLE block
drop D and the hash lookahead L_h. Everything else is symbolic: the prompt length T (= P, a
fresh request), M = max_num_scheduled_tokens, the static threshold theta, the per-step budget
b in [1, M] and the state c. The chunk term is the policy's stages translated by
:mod:`chunkproof.proofs.z3domain`, and each property is its predicate in
:mod:`chunkproof.checker.properties`, translated the same way: nothing is re-encoded by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import z3

from chunkproof.checker import properties as props
from chunkproof.model.policy import Policy
from chunkproof.model.splits import prefill_end
from chunkproof.model.subset import SubsetFunction, parse
from chunkproof.proofs.z3domain import symbolic


@dataclass(frozen=True)
class Cell:
    """The concrete parameters of one cell."""

    block: int
    lookahead: int
    drop: bool
    hash_lookahead: int = 0

    def describe(self) -> dict[str, Any]:
        return {"B": self.block, "L": self.lookahead, "D": self.drop, "L_h": self.hash_lookahead}


@dataclass(frozen=True)
class Scope:
    """The range of the symbolic parameters; ``None`` upper bounds are unbounded.

    theta ranges over {0} and [max(L, 1), inf) (or {0} alone without ``threshold``); M over
    [max(L, 1, max_sched_min), max_sched_max]
    (SPEC CLI: outside that, the reservation alone can hold a request, a finding of its own).
    """

    prompt_max: int | None = 1 << 20
    max_sched_max: int | None = 1 << 16
    threshold: bool = True
    prompt_min: int = 1
    max_sched_min: int = 1

    def describe(self, cell: Cell) -> dict[str, Any]:
        low = max(cell.lookahead, 1)
        top = "inf" if self.max_sched_max is None else str(self.max_sched_max)
        return {
            "prompt": f"{max(low, self.prompt_min)}-{self.prompt_max or 'inf'}",
            "max_sched": f"{max(low, self.max_sched_min)}-{top}",
            "threshold": f"0 or {low}-inf" if self.threshold else "0",
            "budget": "1-M per step",
        }


class TransitionSystem:
    """Symbolic parameters, their constraints, and the step relation of one cell."""

    def __init__(self, policy: Policy, cell: Cell, scope: Scope) -> None:
        self.policy, self.cell, self.scope = policy, cell, scope
        self.T, self.M, self.theta = z3.Ints("T M theta")
        self.view = SimpleNamespace(
            block=cell.block, prompt=self.T, tokens=self.T, max_sched=self.M,
            lookahead=cell.lookahead, threshold=self.theta if scope.threshold else 0,
            hash_block=cell.block, sched_block=cell.block, drop=cell.drop,
            hash_lookahead=cell.hash_lookahead, start=0, junction=0, exact_junction=False,
            partial_hits=False, checkpoints=False, checkpoint_alignment=0, uncached_prefix=0,
        )  # fmt: skip
        self.assumptions: list[z3.BoolRef] = []
        self._stages: dict[tuple[tuple[str, int], tuple[str, int]], dict[str, Any]] = {}
        self.E = self._call(prefill_end, [self.view])
        self.params = z3.And(self._parameter_range(), *self._accepted())

    @property
    def parameters(self) -> list[z3.ArithRef]:
        return [self.T, self.M, self.theta]

    def _call(self, func: Callable[..., Any] | SubsetFunction, args: list[Any]) -> Any:
        """Translate one call of a subset function (or its parsed tree) to a term."""
        value, assumptions = symbolic(
            func if isinstance(func, SubsetFunction) else parse(func), args
        )
        self.assumptions.extend(assumptions)
        return value

    def _parameter_range(self) -> z3.BoolRef:
        low = max(self.cell.lookahead, 1)
        parts = [
            self.T >= max(low, self.scope.prompt_min),
            self.M >= max(low, self.scope.max_sched_min),
            z3.Or(self.theta == 0, self.theta >= low),
        ]
        if self.scope.prompt_max is not None:
            parts.append(self.T <= self.scope.prompt_max)
        if self.scope.max_sched_max is not None:
            parts.append(self.M <= self.scope.max_sched_max)
        if not self.scope.threshold:
            parts.append(self.theta == 0)
        return z3.And(*parts)

    def _accepted(self) -> list[Any]:
        """SPEC S1b: the release's start-up checks, translated from their subset source."""
        return [self._call(rule.holds, [self.view]) for rule in self.policy.acceptance]

    def stages(self, c: Any, b: Any) -> dict[str, Any]:
        """The value after each stage for state c and budget b (SPEC S3), as terms (translated
        once per pair of terms)."""
        key = (_term_id(c), _term_id(b))
        if key not in self._stages:
            self._stages[key] = self._translate_stages(c, b)
        return self._stages[key]

    def _translate_stages(self, c: Any, b: Any) -> dict[str, Any]:
        values: dict[str, Any] = {}
        n = b
        for stage in self.policy.stages:
            n = self._call(stage.subset(), stage.arguments(self.view, c, n))
            values[stage.name] = n
        values["chunk"] = n
        return values

    def chunk(self, c: Any, b: Any) -> Any:
        return self.stages(c, b)["chunk"]

    def in_prefill(self, c: Any) -> z3.BoolRef:
        return z3.And(c >= 0, c < self.E)

    def budget_ok(self, b: Any) -> z3.BoolRef:
        return z3.And(b >= 1, b <= self.M)

    def violation(self, pid: str, c: Any, b: Any, window: str = "relaxed") -> Any:
        """The property predicate of ``pid`` for a step (c, b), as a term (SPEC P).

        P1/P2/P7: the largest budget M yields 0; step properties: the step (c, b) breaks it.
        """
        if pid in props.STUCK_PROPERTIES:
            return self._call(props.stuck, [self.view, c, self.chunk(c, self.M)])
        values = self.stages(c, b)
        e = c + values["chunk"]
        moving = values["chunk"] > 0
        if pid == "P5":
            pred = props.WINDOW_PROPERTIES[window]
            return z3.And(moving, self._call(pred, [self.view, c, values["cap"], e]))
        return z3.And(moving, self._call(props.EDGE_PROPERTIES[pid], [self.view, c, e]))

    def concrete(self, model: z3.ModelRef) -> dict[str, int]:
        """The parameter values of a model."""
        return {str(p): model.eval(p, model_completion=True).as_long() for p in self.parameters}


def _term_id(value: Any) -> tuple[str, int]:
    return ("term", value.get_id()) if isinstance(value, z3.AstRef) else ("int", int(value))
