"""The scheduler-step model (:mod:`chunkproof.spec.scheduler_step`) in its symbolic form, for
K = 2 or 3 requests and one proof cell (issue 11 item 2: "Z3 does bounded search for 2-3
requests"). The third model behind :class:`~chunkproof.spec.interface.SymbolicModel`.

* Cell: what a single-request cell keeps concrete (:data:`~chunkproof.spec.request_symbolic.
  CELL_INPUTS` and the lookahead class, :class:`~chunkproof.spec.request_symbolic.Cell`) is
  shared by the K requests, as every engine setting is
  (:func:`~chunkproof.spec.scheduler_step.engine_settings`); the other engine settings (L, M,
  theta, ...) are symbolic and shared too. Each request's own inputs
  (:data:`~chunkproof.spec.scheduler_step.REQUEST_FIELDS`: prompt, tokens, start, junction,
  items, ...) are its own Z3 constants, each request within the cell's grid and accepted by
  the release (SPEC S1b). Every configuration counts, the degenerate region of SPEC CLI too,
  as in the explicit model. The K requests share the cell's grid and item pattern, which
  must have no encoder items: requests carrying items share the encoder cache, whose state
  (each request's e, :mod:`chunkproof.model.encoder_items`) this form does not have yet; the
  explicit model does.
* Policy: one :class:`~chunkproof.spec.request_symbolic.SymbolicRequest` translates the policy
  once; request i's stages are that translation with its constants renamed. The request at a
  position of a list is the one whose rank is that position: its inputs are chosen among the
  requests' by rank, so each loop evaluates the policy once per position.
* State, per request: its phase (:data:`~chunkproof.spec.scheduler_step.RUNNING`, ``WAITING``,
  ``FINISHED``), its c, and its rank: its position in the explicit model's row (the running
  list in order, then the waiting queue in order, then the finished requests).
* Init: every arrival order (the ranks any permutation), every request waiting at c0.
* Action: the budget b offered to the step, 1..M, and with the adaptive floor the eligible
  count n, any from :func:`~chunkproof.spec.scheduler_loops.least_eligible` up (the explicit
  model enumerates only the least n of each theta_eff; here n is free). From C8 each request
  is offered the budget left capped by theta_eff, as in the explicit model
  (:func:`~chunkproof.spec.scheduler_loops.theta_cap`); the floor M // n is non-linear, which
  the bounded search solves and Spacer may leave undecided.
* Next: the loop rules the explicit model runs (:func:`~chunkproof.spec.scheduler_loops.
  schedule_step`, written once for both: the running loop's ``continue``, the waiting loop's
  ``break``, from C9 the ``skip`` of a zero after the split) over Z3 terms, then ``arrange``:
  the new ranks sort (list, old rank). The explicit model sorts the finished requests by
  (label, c) instead, for a canonical row; no loop visits them, so that order changes no
  transition.
* Properties: P0, S-LIVE, HOL, STARVE on a transition, with the predicates of
  :mod:`chunkproof.spec.system_properties` (S-LIVE and STARVE are about a self-loop, which that
  module shows is every cycle of this model, so they too are transition predicates).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import z3

from chunkproof.model.config import Config
from chunkproof.model.errors import ConfigError
from chunkproof.model.policy import Policy
from chunkproof.spec.request_symbolic import Cell, SymbolicRequest
from chunkproof.spec.scheduler_loops import (
    FINISHED,
    RUNNING,
    WAITING,
    Got,
    Ops,
    Positions,
    alone,
    alone_fit,
    least_eligible,
    schedule_step,
    theta_cap,
)
from chunkproof.spec.scheduler_step import (
    MAX_SEQS,
    REQUEST_FIELDS,
    SCHEDULER_PROPERTIES,
    check_adaptive,
    check_threshold_cap,
    per_step_theta,
    step_loop_rules,
)
from chunkproof.spec.space import INPUT_NAMES

SYMBOLIC_REQUESTS = (2, 3)
"""The numbers of requests the symbolic form covers (issue 11 item 2): each loop evaluates the
policy once per position, on inputs chosen among the K requests' by rank."""

_PHASE, _C, _RANK = range(3)
"""The state variables of a request, in the order of the state vector."""

Z3_OPS = Ops(
    all_=lambda *terms: z3.And(*terms),
    any_=lambda *terms: z3.Or(*terms),
    not_=z3.Not,
    where=lambda cond, then, other: z3.If(cond, _term(then), _term(other)),
    div=lambda a, b: _term(a) / _term(b),
    false=z3.BoolVal(False),
)
""":class:`~chunkproof.spec.scheduler_loops.Ops` over Z3 terms."""


@dataclass(frozen=True)
class StepTerms:
    """One step (state, b) as terms: the next state, whether a scheduled stage broke P0,
    whether the step scheduled nothing, and the flags the system properties read."""

    target: list[Any]
    unsafe: Any
    unchanged: Any
    unfinished: Any
    broke: Any
    behind_fit: Any
    alone_fit: Any


class SymbolicSchedulerStep:
    """One proof cell of the scheduler step over ``k`` requests (module docstring): a
    :class:`~chunkproof.spec.interface.SymbolicModel`."""

    def __init__(
        self, policy: Policy, cell: Cell, k: int, max_seqs: int = MAX_SEQS, adaptive: bool = False
    ) -> None:
        if adaptive:
            check_adaptive(policy)
        if k not in SYMBOLIC_REQUESTS:
            raise ConfigError(f"the symbolic scheduler step covers {SYMBOLIC_REQUESTS} requests")
        if cell.layout:
            raise ConfigError("the symbolic scheduler step covers requests without encoder items")
        self.policy, self.cell, self.k, self.max_seqs = policy, cell, k, max_seqs
        self.adaptive = adaptive
        self.properties = SCHEDULER_PROPERTIES
        self.rules = step_loop_rules(policy)
        self.request = SymbolicRequest(policy, cell, None, main=False)
        own = [p for p in self.request.parameters if _per_request(str(p))]
        shared = [p for p in self.request.parameters if not _per_request(str(p))]
        self.renaming = [[(p, z3.Const(f"{p}#{i}", p.sort())) for p in own] for i in range(k)]
        self.parameters = shared + [new for pairs in self.renaming for _, new in pairs]
        view = self.request.view
        self.constraint = z3.And(*[self.of(i, self.request.constraint) for i in range(k)])
        self.whole = _term(view.max_sched)
        self.starts = [self.of(i, view.start) for i in range(k)]
        self.ends = [self.of(i, self.request.end) for i in range(k)]
        self.tokens = [self.of(i, view.tokens) for i in range(k)]
        self._steps: dict[tuple[int, ...], StepTerms] = {}
        self.theta = _term(view.threshold) if per_step_theta(policy) else None
        self.threshold_positive = not _never_positive(self.constraint, _term(view.threshold))
        """Whether some configuration of the cell has a threshold > 0."""
        if self.threshold_positive:
            check_threshold_cap(policy)

    def of(self, i: int, value: Any) -> Any:
        """A term of the template request as request ``i``'s (its own constants renamed)."""
        term = _term(value)
        return z3.substitute(term, *self.renaming[i]) if self.renaming[i] else term

    # -- the policy at one position -------------------------------------------------------------

    def _at(self, here: Sequence[Any], c: Any, budget: Any) -> Got:
        """The stages of the request at a position (``here[i]``: request i is there) at
        (c, budget): the template's stages with each request constant chosen by ``here``."""
        chosen = [
            (template, _pick(here, [pairs[n][1] for pairs in self.renaming]))
            for n, (template, _) in enumerate(self.renaming[0])
        ]
        values = self.request.stages(c, budget)
        unsafe = self.request.unsafe(c, budget)

        def sub(term: Any) -> Any:
            return z3.substitute(_term(term), *chosen) if chosen else _term(term)

        return Got(sub(values["chunk"]), sub(values["split"]), sub(unsafe), 0)

    def _alone(self, i: int, c: Any, budget: Any) -> Got:
        """Request ``i``'s stages at (c, budget)."""
        values = self.request.stages(c, budget)
        unsafe = self.request.unsafe(c, budget)
        chunk, split = self.of(i, values["chunk"]), self.of(i, values["split"])
        return Got(chunk, split, self.of(i, unsafe), 0)

    # -- Next ------------------------------------------------------------------------------------

    def step(self, state: list[Any], action: list[Any]) -> StepTerms:
        """:meth:`~chunkproof.spec.scheduler_step.SchedulerStepModel.step` at (state, b)."""
        key = tuple(t.get_id() for t in (*state, *action))
        if key not in self._steps:
            self._steps[key] = self._step(state, action)
        return self._steps[key]

    def _step(self, state: list[Any], action: list[Any]) -> StepTerms:
        """The loop rules (:func:`~chunkproof.spec.scheduler_loops.schedule_step`) over the
        positions: the request at position p is the one of rank p."""
        k = self.k
        phase, c, rank = (state[j::3] for j in (_PHASE, _C, _RANK))
        here = [[rank[i] == p for i in range(k)] for p in range(k)]
        phases = [_pick(here[p], phase) for p in range(k)]
        cs = [_pick(here[p], c) for p in range(k)]
        b = action[0]
        cap = theta_cap(Z3_OPS, phase, b, self.whole, self.theta, self._eligible(action))
        at = Positions(
            phases,
            cs,
            [0] * k,
            lambda p, c_p, offer, where, shared: self._at(here[p], c_p, offer),
            _nothing_held,
        )
        done = schedule_step(Z3_OPS, at, b, cap, self.max_seqs, self.rules)
        mine = [[rank[i] == p for p in range(k)] for i in range(k)]
        got_chunk = [_pick(mine[i], done.chunk) for i in range(k)]
        got_admitted = [_pick(mine[i], done.admitted) for i in range(k)]
        target = self._arrange(state, got_chunk, got_admitted)
        unchanged = z3.And(z3.Not(done.unsafe), z3.Sum(got_chunk) == 0)
        each = Positions(
            phase,
            c,
            [0] * k,
            lambda i, c_i, offer, where, shared: self._alone(i, c_i, offer),
            _nothing_held,
        )
        alone = alone_fit(Z3_OPS, each, cap(b), z3.BoolVal(True))
        return StepTerms(
            target,
            done.unsafe,
            unchanged,
            z3.Or(*[ph != FINISHED for ph in phase]),
            done.broke,
            done.behind_fit,
            alone,
        )

    def _eligible(self, action: list[Any]) -> Any | None:
        """The eligible count the action sets with the adaptive floor, else ``None``."""
        return action[1] if self.adaptive else None

    def _arrange(self, state: list[Any], chunk: list[Any], admitted: list[Any]) -> list[Any]:
        """The next state: c += chunk, the phases, and the ranks sorted by (group, old rank),
        group 0 the running list, 1 the admitted, 2 the waiting queue, 3 the finished
        (``SchedulerStepModel.step`` and ``arrange``)."""
        k = self.k
        phase, c, rank = (state[j::3] for j in (_PHASE, _C, _RANK))
        after = [c[i] + chunk[i] for i in range(k)]
        keys = []
        new_phase = []
        for i in range(k):
            finished = after[i] >= self.ends[i]
            moved = z3.Or(phase[i] == RUNNING, admitted[i])
            new_phase.append(z3.If(finished, FINISHED, z3.If(moved, RUNNING, phase[i])))
            group = z3.If(finished, 3, z3.If(admitted[i], 1, z3.If(moved, 0, 2)))
            keys.append(group * k + rank[i])
        new_rank = [
            z3.Sum([z3.If(keys[j] < keys[i], 1, 0) for j in range(k) if j != i]) for i in range(k)
        ]
        return [v for i in range(k) for v in (new_phase[i], after[i], new_rank[i])]

    # -- the SymbolicModel interface --------------------------------------------------------------

    def state(self, name: str) -> list[Any]:
        return [
            z3.Int(f"{name}_{part}{i}") for i in range(self.k) for part in ("phase", "c", "rank")
        ]

    def action(self, name: str) -> list[Any]:
        """The budget b, and with the adaptive floor the eligible count n (module docstring)."""
        return [z3.Int(name), *([z3.Int(f"{name}.eligible")] if self.adaptive else [])]

    def init(self, state: list[Any]) -> Any:
        """Every request waiting at c0, in any arrival order."""
        phase, c, rank = (state[j::3] for j in (_PHASE, _C, _RANK))
        return z3.And(
            *[ph == WAITING for ph in phase],
            *[c[i] == self.starts[i] for i in range(self.k)],
            *[z3.And(r >= 0, r < self.k) for r in rank],
            z3.Distinct(*rank),
        )

    def guard(self, state: list[Any], action: list[Any]) -> Any:
        """Any budget 1..M (SPEC S4 ``adversarial``), and any eligible count from
        :func:`~chunkproof.spec.scheduler_loops.least_eligible` up."""
        budget = z3.And(action[0] >= 1, action[0] <= self.whole)
        if not self.adaptive:
            return budget
        least = least_eligible(Z3_OPS, state[_PHASE::3], action[0], self.whole)
        return z3.And(budget, action[1] >= least)

    def next(self, state: list[Any], action: list[Any]) -> list[Any]:
        return self.step(state, action).target

    def follows(self, state: list[Any], action: list[Any]) -> Any:
        """The search leads on: the step breaks no stage range, schedules something and
        leaves some request unfinished (``Transitions.follow`` of the explicit model)."""
        got = self.step(state, action)
        phases = got.target[_PHASE::3]
        return z3.And(
            z3.Not(got.unsafe), z3.Not(got.unchanged), z3.Or(*[p != FINISHED for p in phases])
        )

    def violation(self, pid: str, state: list[Any], action: list[Any]) -> Any:
        """The transition breaks ``pid`` (:mod:`chunkproof.spec.system_properties`)."""
        got = self.step(state, action)
        if pid == "P0":
            return got.unsafe
        if pid == "S-LIVE":
            by_itself = alone(
                Z3_OPS, state[_PHASE::3], action[0], self.whole, self._eligible(action)
            )
            return z3.And(got.unchanged, got.unfinished, action[0] == self.whole, by_itself)
        if pid == "HOL":
            return z3.And(z3.Not(got.unsafe), got.broke, got.behind_fit)
        if pid == "STARVE":
            return z3.And(got.unchanged, got.alone_fit)
        raise ConfigError(f"the scheduler step judges {', '.join(self.properties)}, not {pid}")

    # -- reading a solver model -------------------------------------------------------------------

    def instance(self, model: z3.ModelRef) -> tuple[Config, ...]:
        """The requests of a solver model, each a full configuration."""
        return tuple(
            Config(**self.request.concrete(cast(z3.ModelRef, _Renamed(model, self.renaming[i]))))
            for i in range(self.k)
        )


class _Renamed:
    """A solver model read as one request's: a term of the template request is evaluated as
    request i's (for :meth:`SymbolicRequest.concrete`)."""

    def __init__(self, model: z3.ModelRef, pairs: list[tuple[Any, Any]]) -> None:
        self.model, self.pairs = model, pairs

    def eval(self, term: Any, model_completion: bool = False) -> Any:
        renamed = z3.substitute(term, *self.pairs) if self.pairs else term
        return self.model.eval(renamed, model_completion=model_completion)


def _per_request(name: str) -> bool:
    """A symbol belongs to one request: one of :data:`REQUEST_FIELDS`, or an input the ranges
    do not name (``external``, an encoder item's start or length)."""
    return name in REQUEST_FIELDS or name not in INPUT_NAMES


def _never_positive(constraint: Any, threshold: Any) -> bool:
    """Whether no configuration of the cell has a threshold > 0."""
    solver = z3.Solver()
    solver.add(constraint, threshold > 0)
    return bool(solver.check() == z3.unsat)


def _pick(here: Sequence[Any], values: Sequence[Any]) -> Any:
    """The value of the one index where ``here`` holds."""
    chosen = _term(values[-1])
    for cond, value in zip(reversed(here[:-1]), reversed(values[:-1]), strict=True):
        chosen = z3.If(cond, _term(value), chosen)
    return chosen


def _term(value: Any) -> Any:
    if isinstance(value, z3.ExprRef):
        return value
    if isinstance(value, bool):
        return z3.BoolVal(value)
    return z3.IntVal(value)


def _nothing_held(p: int, c: Any, e: Any) -> int:
    """No request references an encoder entry: a cell has no encoder items (module
    docstring)."""
    return 0
