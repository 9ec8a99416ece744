"""What a counterexample says about every candidate at once (SPEC Y2): the holes of the
synthesis template (:mod:`chunkproof.model.holes`) as Z3 constants, the condition under which a
candidate does not exhibit a counterexample, and the solver that picks the next candidate.

A counterexample is a configuration, a trace of steps (c_i, b_i) and the property its last step
breaks. A candidate exhibits it when every earlier step of the candidate at (c_i, b_i) leads on
(it does not raise, SPEC P0, and its chunk is positive) with the recorded chunk, so the
candidate reaches the last state along the same budgets, and the last step breaks the property
there too. The refutation is the negation, over the hole constants: the template is run by the
Z3 form of the subset interpreter at the constant configuration
(:meth:`~chunkproof.spec.request_symbolic.SymbolicRequest.at_config`), and the property is
the prover's own :meth:`~chunkproof.spec.request_symbolic.SymbolicRequest.violation`. It is
exact: a candidate that keeps the property refutes every counterexample of it, so no correct
candidate is ever excluded, and when no candidate refutes a set of counterexamples, none keeps
their properties together (SPEC Y3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import z3

from chunkproof.model.counterexample import Counterexample
from chunkproof.model.holes import HOLES, candidate_policy
from chunkproof.model.policy import Policy
from chunkproof.spec.request_symbolic import SymbolicRequest


def hole_constants() -> dict[str, Any]:
    """One Z3 integer per hole (``hole_finish``, ...)."""
    return {hole.name: z3.Int(f"hole_{hole.name}") for hole in HOLES}


def hole_domain(holes: Mapping[str, Any]) -> list[Any]:
    """Each hole within its values: 0 <= h < its number of actions."""
    return [z3.And(holes[h.name] >= 0, holes[h.name] < h.size) for h in HOLES]


def refutation(base: Policy, cx: Counterexample, window: str, holes: Mapping[str, Any]) -> Any:
    """The candidates of ``base`` that do not exhibit ``cx`` (module docstring), a condition
    over ``holes``."""
    model = SymbolicRequest.at_config(candidate_policy(base, holes), cx.config, window)
    *earlier, last = cx.steps
    departs = []
    for s in earlier:
        same = z3.And(
            model.follows([s.c], [s.budget]), model.stages(s.c, s.budget)["chunk"] == s.chunk
        )
        departs.append(z3.Not(same))
    breaks = model.violation(cx.property, [last.c], [last.budget])
    return z3.simplify(z3.Or(*departs, z3.Not(breaks)))


@dataclass
class Witness:
    """A counterexample the search has met, and its refutation; ``regression`` when its
    configuration is one where the base keeps the property (SPEC Y3: it counts while the
    property is guarded, not only while it is kept)."""

    cx: Counterexample
    condition: Any
    literal: Any
    regression: bool = False


@dataclass
class HoleSolver:
    """The candidates consistent with every counterexample so far (SPEC Y2), with P5 judged in
    the form ``window``. A pick is the least change from the base (SPEC Y4): the fewest holes
    away from 0, then the least sum of their values."""

    base: Policy
    window: str
    holes: dict[str, Any] = field(default_factory=hole_constants)
    witnesses: list[Witness] = field(default_factory=list)

    def add(self, cx: Counterexample, regression: bool = False) -> Witness:
        """Record ``cx`` (module docstring)."""
        condition = refutation(self.base, cx, self.window, self.holes)
        literal = z3.Bool(f"witness_{len(self.witnesses)}")
        witness = Witness(cx, condition, literal, regression)
        self.witnesses.append(witness)
        return witness

    def rewindow(self, window: str) -> None:
        """Judge P5 in the form ``window`` from now on, its witnesses' refutations again."""
        self.window = window
        for w in self.witnesses:
            if w.cx.property == "P5":
                w.condition = refutation(self.base, w.cx, window, self.holes)

    def asked(self, kept: Sequence[str], guarded: Sequence[str]) -> list[Witness]:
        """The witnesses that count: every one of a kept property, the regressions of a
        guarded one."""
        return [
            w
            for w in self.witnesses
            if w.cx.property in kept or (w.regression and w.cx.property in guarded)
        ]

    def _constraints(self) -> list[Any]:
        return [
            *hole_domain(self.holes),
            *[z3.Implies(w.literal, w.condition) for w in self.witnesses],
        ]

    def pick(
        self,
        kept: Sequence[str],
        guarded: Sequence[str],
        tried: Sequence[Mapping[str, int]] = (),
    ) -> dict[str, int] | None:
        """The least-change candidate not among ``tried`` that refutes every witness that
        counts, or None when there is none (without ``tried``: then :meth:`conflict` says
        which witnesses clash)."""
        opt = z3.Optimize()
        opt.add(*self._constraints())
        for measured in tried:
            opt.add(z3.Or(*[self.holes[name] != value for name, value in measured.items()]))
        holes = list(self.holes.values())
        opt.minimize(z3.Sum(*[z3.If(h != 0, 1, 0) for h in holes]))
        opt.minimize(z3.Sum(*holes))
        if opt.check(*[w.literal for w in self.asked(kept, guarded)]) != z3.sat:
            return None
        model = opt.model()
        return {
            name: model.eval(h, model_completion=True).as_long() for name, h in self.holes.items()
        }

    def consistent(
        self, values: Mapping[str, int], kept: Sequence[str], guarded: Sequence[str]
    ) -> bool:
        """Whether the candidate at ``values`` refutes every witness that counts."""
        return all(self.refutes(values, w) for w in self.asked(kept, guarded))

    def refutes(self, values: Mapping[str, int], witness: Witness) -> bool:
        """Whether the candidate at ``values`` does not exhibit ``witness``."""
        at = [(self.holes[name], z3.IntVal(value)) for name, value in values.items()]
        return bool(z3.is_true(z3.simplify(z3.substitute(witness.condition, *at))))

    def conflict(self, kept: Sequence[str], guarded: Sequence[str]) -> list[Witness]:
        """A set of the witnesses that count no candidate refutes together, made minimal (no
        proper subset is unrefutable); empty when some candidate refutes them all."""
        solver = z3.Solver()
        solver.add(*self._constraints())
        core = self.asked(kept, guarded)
        if solver.check(*[w.literal for w in core]) != z3.unsat:
            return []
        index = 0
        while index < len(core):
            trial = core[:index] + core[index + 1 :]
            if solver.check(*[w.literal for w in trial]) == z3.unsat:
                core = trial
            else:
                index += 1
        return core
