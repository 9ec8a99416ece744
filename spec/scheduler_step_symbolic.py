"""The scheduler-step model (:mod:`chunkproof.spec.scheduler_step`) in its symbolic form, for
K = 2 or 3 requests and one proof cell (SPEC N1). The third model behind
:class:`~chunkproof.spec.interface.SymbolicModel`.

* Cell: what a single-request cell keeps concrete (:data:`~chunkproof.spec.request_symbolic.
  CELL_INPUTS` and the lookahead class, :class:`~chunkproof.spec.request_symbolic.Cell`) is
  shared by the K requests, as every engine setting is
  (:func:`~chunkproof.spec.scheduler_step.engine_settings`); the other engine settings (L, M,
  theta, ...) are symbolic and shared too. Each request's own inputs
  (:data:`~chunkproof.spec.scheduler_step.REQUEST_FIELDS`: prompt, tokens, start, junction,
  items, ...) are its own Z3 constants, each request within the cell's grid and accepted by
  the release (SPEC S1b). Every configuration counts, the degenerate region of SPEC CLI too,
  as in the explicit model. The K requests share the cell's grid; each carries one of its
  encoder-item patterns (:class:`SystemCell`: a multiset of the grid's ``--items``
  alternatives, so every instance the explicit model pairs is in one cell), its items' starts
  and lengths its own constants.
* Encoder cache (:mod:`chunkproof.model.encoder_items`): the requests share the engine's cache
  C and compute budget b0 (the largest of the requests' own, as
  :func:`~chunkproof.spec.scheduler_step.shared_encoder`); a request's stages run with them
  (its acceptance with its own) and see C less the ``shared`` embeddings the other requests'
  entries reference; two requests with items need b0 >= C
  (:func:`~chunkproof.spec.scheduler_step.encoder_exact`). Each request's e, its referenced
  embeddings and the items its call encodes through are the subset functions of
  :mod:`~chunkproof.model.encoder_items` translated to Z3 (real code's call gives its own
  count, as in the explicit model).
* Policy: one :class:`~chunkproof.spec.request_symbolic.SymbolicRequest` per item pattern
  translates the policy once; request i's stages are its pattern's translation with its
  constants renamed. The request at a position of a list is the one whose rank is that
  position: its inputs are chosen among the requests' of each pattern by rank, so each loop
  evaluates the policy once per position and pattern.
* State, per request: its phase (:data:`~chunkproof.spec.scheduler_loops.RUNNING`,
  ``DECODING``, ``WAITING``, ``FINISHED``), its c, its rank (its position in the explicit
  model's row: the running list in order, then the waiting queue in order, then the finished
  requests) and its e (0 once finished: its entries are freed).
* Init: every arrival order (the ranks any permutation), every request waiting at c0, e = 0.
* Action: the budget b offered to the step, 1..M, and with the adaptive floor the eligible
  count n, any from :func:`~chunkproof.spec.scheduler_loops.least_eligible` up (the explicit
  model enumerates only the least n of each theta_eff; here n is free). From C8 each request
  is offered the budget left capped by theta_eff, as in the explicit model
  (:func:`~chunkproof.spec.scheduler_loops.theta_cap`); the floor M // n is non-linear, which
  the bounded search solves and Spacer may leave undecided. Where a request carries items
  under the releases' encoder call, each request's decode advance: 1..its free margin for a
  decoding request the running loop reaches, else 0 (the explicit model enumerates the same
  choices, those past what frees its items once).
* Next: the loop rules the explicit model runs (:func:`~chunkproof.spec.scheduler_loops.
  schedule_step`, written once for both: the running loop's ``continue``, the waiting loop's
  ``break``, from C9 the ``skip`` of a zero after the split) over Z3 terms, then ``arrange``:
  the new ranks sort (list, old rank). The explicit model sorts the finished requests by
  (label, c) instead, for a canonical row; no loop visits them, so that order changes no
  transition.
* KV block pool (``pools``, SPEC KV2 rule 5, as the explicit model's ``blocks``): each
  request's state gets its stale flag; N is a parameter, one of the sizes given and at least
  the release's start-up minimum; ``max_model_len`` is the longest prompt + 1; each request
  lies inside rule 5's scope (:meth:`SymbolicSchedulerStep._pool_constraint`); the loops run
  the same :class:`~chunkproof.spec.scheduler_loops.Ledger` over Z3 terms; a preempted
  request waits again keeping its c (group 2 of ``settle``), and the action sets each
  request's resume hit (rule 5e: on its resume grid up to min(c, T - 1) for a waiting request at
  c > 0, or a connector's x with its flag set (rule 5g), else 0), at which the loops see it and
  the rules ask it as at a hit, at x as at an external one (c0 and x stay symbols of the
  translation for that). Cells with encoder items are outside it.
* Properties: P0, S-LIVE, HOL, STARVE on a transition, with the predicates of
  :mod:`chunkproof.spec.system_properties` (S-LIVE and STARVE are about a self-loop, which that
  module shows is every cycle of this model without a pool, so they too are transition
  predicates). With a pool, S-POOL is a property of runs that go on for ever
  (``cycle_properties``, :meth:`SymbolicSchedulerStep.cycle_edge`), asked as a reachable
  state by :class:`~chunkproof.proofs.lasso.LassoModel`.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import z3

from chunkproof.model.config import Config, encoder_capacity, encoder_compute_budget
from chunkproof.model.encoder_items import call_rules, encoded_through, referenced_embeds
from chunkproof.model.errors import ConfigError
from chunkproof.model.policy import Policy
from chunkproof.model.step import stage_order
from chunkproof.spec.interface import as_term
from chunkproof.spec.kv_blocks import (
    connector_hit,
    external_miscount,
    held_in_list,
    leaves_stale,
    longest_model_len,
    pool_rules,
    resume_grid,
    resume_hit_top,
    shared_asked,
    shared_pool_exclusions,
)
from chunkproof.spec.request_symbolic import Cell, SymbolicRequest, cells
from chunkproof.spec.scheduler_loops import (
    DECODING,
    FINISHED,
    RUNNING,
    WAITING,
    Got,
    Ops,
    Pool,
    Positions,
    alone,
    alone_fit,
    least_eligible,
    schedule_step,
    settle,
    stalled,
    theta_cap,
)
from chunkproof.spec.scheduler_step import (
    MAX_SEQS,
    REQUEST_FIELDS,
    SCHEDULER_PROPERTIES,
    check_adaptive,
    check_encoder_call,
    check_threshold_cap,
    per_step_theta,
    step_loop_rules,
)
from chunkproof.spec.space import INPUT_NAMES, ItemPattern, Layouts, Space
from chunkproof.spec.system_properties import POOL_PROPERTIES

SYMBOLIC_REQUESTS = (2, 3)
"""The numbers of requests the symbolic form covers (SPEC N1): each loop evaluates the
policy once per position and item pattern, on inputs chosen among the requests' by rank."""


Begin = dict[str, list[Any]] | None
"""Per request, the c0 (``start``) and x (``external``) a pooled step's views see in place of
its inputs (SPEC KV2 rules 5e-5g; ``None``: its own)."""


class RequestVars(NamedTuple):
    """A state vector's variables by kind, each a list with one per request; a request's own
    are in this order in the state vector. ``stale`` is a state variable only with a KV block
    pool (:class:`~chunkproof.spec.scheduler_loops.Pool`); without one it is 0."""

    phase: list[Any]
    c: list[Any]
    rank: list[Any]
    e: list[Any]
    stale: list[Any]


STATE_FIELDS = RequestVars._fields[:4]
"""The state variables of a request, in the order of the state vector."""
POOL_STATE_FIELDS = RequestVars._fields
"""The state variables of a request when the requests share a KV block pool."""

Z3_OPS = Ops(
    all_=lambda *terms: z3.And(*terms),
    any_=lambda *terms: z3.Or(*terms),
    not_=z3.Not,
    where=lambda cond, then, other: z3.If(cond, as_term(then), as_term(other)),
    div=lambda a, b: as_term(a) / as_term(b),
    false=z3.BoolVal(False),
)
""":class:`~chunkproof.spec.scheduler_loops.Ops` over Z3 terms."""


@dataclass(frozen=True)
class StepTerms:
    """One step (state, b) as terms: the next state, whether a scheduled stage broke P0,
    whether a request's code raised, whether the step made no progress
    (:func:`~chunkproof.spec.scheduler_loops.stalled`), and the flags the system properties
    read."""

    target: list[Any]
    decoded: list[Any]
    """Per request, whether the running loop reached it decoding."""
    unsafe: Any
    crashed: Any
    stalled: Any
    unfinished: Any
    broke: Any
    behind_fit: Any
    alone_fit: Any


@dataclass(frozen=True)
class SystemCell:
    """A proof cell of the scheduler step: the engine's cell (its concrete inputs and lookahead
    class, which the requests share) and the encoder-item pattern of each request, a multiset
    of the grid's ``--items`` alternatives in the order of :func:`system_cells`."""

    engine: Cell
    layouts: tuple[tuple[ItemPattern, ...], ...]

    @classmethod
    def uniform(cls, cell: Cell, k: int) -> SystemCell:
        """``k`` requests, each with ``cell``'s item pattern."""
        return cls(cell, (cell.layout,) * k)

    def describe(self) -> dict[str, Any]:
        """The cell's inputs; with items, each request's pattern (``none`` for no items)."""
        described = {k: v for k, v in self.engine.describe().items() if k != "items"}
        if any(self.layouts):
            patterns = [Layouts((layout,)).describe() for layout in self.layouts]
            described["items"] = " | ".join(patterns)
        return described


def system_cells(space: Space, k: int) -> list[SystemCell]:
    """Every engine cell of ``space`` (:func:`~chunkproof.spec.request_symbolic.cells` without
    their item patterns) with every multiset of ``k`` of its grid's item patterns: the
    explicit model pairs any requests of a grid, whatever items each carries."""
    patterns: dict[tuple[Any, ...], list[Cell]] = {}
    for cell in cells(space):
        key = (cell.values, cell.speculative, id(cell.grid))
        patterns.setdefault(key, []).append(cell)
    return [
        SystemCell(alike[0], tuple(cell.layout for cell in chosen))
        for alike in patterns.values()
        for chosen in itertools.combinations_with_replacement(alike, k)
    ]


class SymbolicSchedulerStep:
    """One proof cell of the scheduler step over its requests (module docstring): a
    :class:`~chunkproof.spec.interface.SymbolicModel`."""

    def __init__(
        self,
        policy: Policy,
        cell: SystemCell,
        max_seqs: int = MAX_SEQS,
        adaptive: bool = False,
        pools: Sequence[int | str] = (),
    ) -> None:
        if adaptive:
            check_adaptive(policy)
        self.pooled = bool(pools)
        """Whether the requests share a KV block pool (SPEC KV2 rule 5; module docstring)."""
        if self.pooled and (adaptive or any(cell.layouts)):
            raise ConfigError(
                "--pool: the shared pool model covers no adaptive floor and no encoder items"
            )
        k = len(cell.layouts)
        if k not in SYMBOLIC_REQUESTS:
            raise ConfigError(f"the symbolic scheduler step covers {SYMBOLIC_REQUESTS} requests")
        self.policy, self.cell, self.k, self.max_seqs = policy, cell, k, max_seqs
        self.adaptive = adaptive
        self.properties = SCHEDULER_PROPERTIES + (POOL_PROPERTIES if self.pooled else ())
        self.cycle_properties = POOL_PROPERTIES if self.pooled else ()
        """The properties of runs that go on for ever (:meth:`cycle_edge`)."""
        self.rules = step_loop_rules(policy)
        self.encoder_call = call_rules(policy.stage("encoder"))
        check_encoder_call(policy, sum(1 for layout in cell.layouts if layout))
        self.decodes = self.encoder_call is not None and any(cell.layouts)
        """Whether a request can decode (:data:`~chunkproof.spec.scheduler_loops.DECODING`):
        some request carries items and the encoder call has a free margin rule (a margin
        that is 0 keeps every advance 0)."""
        patterns = list(dict.fromkeys(cell.layouts))
        kept = ("start", "external") if self.pooled else ()
        self.templates = [
            SymbolicRequest(
                policy,
                dataclasses.replace(cell.engine, layout=p),
                None,
                main=False,
                symbolic=kept,
            )
            for p in patterns
        ]
        self.pattern = [patterns.index(layout) for layout in cell.layouts]
        """Per request, the index of its pattern's template."""
        self.renaming = [
            [
                (p, z3.Const(f"{p}#{i}", p.sort()))
                for p in self._template(i).parameters
                if _per_request(str(p))
            ]
            for i in range(k)
        ]
        shared = {
            str(p): p
            for template in self.templates
            for p in template.parameters
            if not _per_request(str(p))
        }
        self.parameters = [*shared.values(), *(new for pairs in self.renaming for _, new in pairs)]
        view = self.templates[0].view
        self.whole = as_term(view.max_sched)
        self.starts = [self.of(i, self._template(i).view.start) for i in range(k)]
        self.externals = [self.of(i, self._template(i).view.external) for i in range(k)]
        self.ends = [self.of(i, self._template(i).end) for i in range(k)]
        self.grids = [
            as_term(self.of(i, self._template(i).call(resume_grid, [self._template(i).view])))
            for i in range(k)
        ]
        self.tokens = [self.of(i, self._template(i).view.tokens) for i in range(k)]
        self.constraint = z3.And(
            *[self.of(i, self._template(i).constraint) for i in range(k)], self._share_encoder()
        )
        self.pool_rules = pool_rules(policy.kv_release)
        self.blocks: Any = 0
        """The KV block pool's N (a parameter with a pool; 0: none)."""
        self.model_len: Any = 0
        """``max_model_len`` of the engine, with a pool: the largest request's own
        (:func:`~chunkproof.spec.scheduler_step.pool_model_len`'s rule, translated)."""
        if self.pooled:
            self.blocks = z3.Int("pool_blocks")
            self.parameters.append(self.blocks)
            lengths = [
                self.of(
                    i, as_term(self._template(i).call(longest_model_len, [self._template(i).view]))
                )
                for i in range(k)
            ]
            self.model_len = _largest(lengths)
            self.constraint = z3.And(self.constraint, self._pool_constraint(pools))
        self._steps: dict[tuple[int, ...], StepTerms] = {}
        self._encoded: dict[tuple[int, ...], Any] = {}
        self.theta = as_term(view.threshold) if per_step_theta(policy) else None
        self.threshold_positive = not _never_positive(self.constraint, as_term(view.threshold))
        """Whether some configuration of the cell has a threshold > 0."""
        if self.threshold_positive:
            check_threshold_cap(policy)

    def _pool_constraint(self, pools: Sequence[int | str]) -> Any:
        """Each request inside rule 5's scope (none of :func:`~chunkproof.spec.kv_blocks.
        shared_pool_exclusions` leaves it out; no encoder items is the cell's) and the pool one
        of ``pools`` (a size, or ``"min"``), at least what the release's start-up check accepts
        (:func:`~chunkproof.spec.scheduler_step.least_pool`: the largest request's minimum,
        which grows with its prompt, and at least 2)."""
        rules = self.pool_rules
        scope = []
        least: list[Any] = [z3.IntVal(2)]
        exclusions = shared_pool_exclusions(rules)
        for i in range(self.k):
            template = self._template(i)
            view = template.view
            holds = [(template.holds(x.predicate, [view]), x.excluded) for x in exclusions]
            inside = [z3.Not(term) if excluded else term for term, excluded in holds]
            scope.append(self.of(i, z3.And(*inside)))
            least.append(self.of(i, as_term(template.call(rules.startup_pool, [view]))))
        smallest = _largest(least)
        sizes = [self.blocks == (smallest if size == "min" else int(size)) for size in pools]
        return z3.And(*scope, self.blocks >= smallest, z3.Or(*sizes))

    def _template(self, i: int) -> SymbolicRequest:
        """The translation of request ``i``'s item pattern (its constants not renamed)."""
        return self.templates[self.pattern[i]]

    def of(self, i: int, value: Any) -> Any:
        """A term of request ``i``'s template as request ``i``'s (its own constants renamed)."""
        term = as_term(value)
        return z3.substitute(term, *self.renaming[i]) if self.renaming[i] else term

    def _share_encoder(self) -> Any:
        """The engine's encoder cache C and compute budget b0, the largest of the requests' own
        (:func:`~chunkproof.spec.scheduler_step.shared_encoder`), put into the stages of the
        patterns with items; with two or more requests with items, b0 >= C
        (:func:`~chunkproof.spec.scheduler_step.encoder_exact`)."""
        if not any(self.cell.layouts):
            return z3.BoolVal(True)
        sizes = [
            [
                self.of(i, self._template(i).call(size, [self._template(i).view]))
                for i in range(self.k)
            ]
            for size in (encoder_capacity, encoder_compute_budget)
        ]
        capacity, budget = (_largest(values) for values in sizes)
        for template in self.templates:
            if template.cell.layout:
                template.use_engine_encoder(capacity, budget)
        with_items = sum(1 for layout in self.cell.layouts if layout)
        return budget >= capacity if with_items > 1 else z3.BoolVal(True)

    # -- the policy at one position -------------------------------------------------------------

    def _at(self, here: Sequence[Any], c: Any, budget: Any, shared: Any, begin: Begin) -> Got:
        """The stages of the request at a position (``here[i]``: request i is there) at
        (c, budget) with ``shared`` embeddings of the others' entries referenced: each
        pattern's translation with each request constant chosen by ``here``, then the
        pattern of the request there; request i admitted at ``begin`` (``None``: its c0)."""
        return Got(
            *_choose(
                self._by_pattern(here, begin),
                [self._got(template, c, budget, shared) for template in self.templates],
            )
        )

    def _held_at(self, here: Sequence[Any], c: Any, e: Any) -> Any:
        """The embeddings the entries of the request at a position reference at (c, e)."""
        values = [self._held(template, c, e) for template in self.templates]
        return _choose(self._by_pattern(here), [[v] for v in values])[0]

    def _by_pattern(
        self, here: Sequence[Any], begin: Begin = None
    ) -> list[tuple[Any, list[tuple[Any, Any]]]]:
        """Per pattern: whether the request at the position carries it, and its template's own
        constants chosen among its requests' by ``here``; c0 and x (``start``, ``external``)
        replaced by request i's entries of ``begin`` where given (a resume hit, SPEC KV2 rules
        5e-5g)."""
        out = []
        for index in range(len(self.templates)):
            members = [i for i in range(self.k) if self.pattern[i] == index]
            where = [here[i] for i in members]
            chosen = []
            for n, (template, _) in enumerate(self.renaming[members[0]]):
                own = [self.renaming[i][n][1] for i in members]
                if begin is not None and str(template) in begin:
                    own = [begin[str(template)][i] for i in members]
                chosen.append((template, _pick(where, own)))
            out.append((z3.Or(*where), chosen))
        return out

    def _alone(self, i: int, c: Any, budget: Any, shared: Any, begin: Begin) -> Got:
        """Request ``i``'s stages at (c, budget) with ``shared`` embeddings referenced,
        admitted at its entries of ``begin`` (``None``: its c0 and x)."""
        got = self._got(self._template(i), c, budget, shared)
        terms = [self.of(i, term) for term in got]
        if begin is not None:
            pairs = [
                (self.starts[i], as_term(begin["start"][i])),
                (self.externals[i], as_term(begin["external"][i])),
            ]
            terms = [z3.substitute(as_term(t), *pairs) for t in terms]
        return Got(*terms)

    def _got(self, template: SymbolicRequest, c: Any, budget: Any, shared: Any) -> Got:
        """One template's stages at (c, budget, shared): chunk, split, P0's breach and the
        items its encoder call encodes through."""
        values = template.stages(c, budget, shared)
        unsafe = template.unsafe(c, budget, shared)
        encoded = values.get("encoded")
        if encoded is None:
            encoded = self._through(template, c, budget, values, shared)
        crashed = as_term(values["crashed"])
        return Got(values["chunk"], values["split"], unsafe, crashed, as_term(encoded))

    def _through(
        self, template: SymbolicRequest, c: Any, budget: Any, values: dict[str, Any], shared: Any
    ) -> Any:
        """:func:`~chunkproof.model.encoder_items.encoded_through` of a built-in encoder stage
        at the value the stage before it handed it (as the explicit model's); 0 without items
        or call rules."""
        rules = self.encoder_call
        if not template.cell.layout or rules is None or rules.scheduled_shift is None:
            return 0
        key = (id(template), *(as_term(v).get_id() for v in (c, budget, shared)))
        if key not in self._encoded:
            order = stage_order(self.policy)
            at = order.index("encoder")
            n = values[order[at - 1]] if at else budget
            view = template.engine_view(shared)
            shift, margin = (template.call(f, [view]) for f in (rules.shift, rules.margin))
            scheduled = shift if rules.scheduled_shift else 0
            arguments = [view, c, n, shift, margin, scheduled]
            self._encoded[key] = template.call(encoded_through, arguments)
        return self._encoded[key]

    def _held(self, template: SymbolicRequest, c: Any, e: Any) -> Any:
        """:func:`~chunkproof.model.encoder_items.referenced_embeds` of one template's request
        at (c, e); 0 without items or call rules (as the explicit model's)."""
        if not template.cell.layout or self.encoder_call is None:
            return 0
        margin = self._margin(template)
        return template.call(referenced_embeds, [template.view, c, e, margin])

    def _margin(self, template: SymbolicRequest) -> Any:
        """One template's free margin under the encoder call rules (asked only with them). Only
        a request with items reads it (it alone decodes or references embeddings), so the
        0 :func:`~chunkproof.spec.scheduler_step.free_margins` gives one without is not
        needed here."""
        rules = self.encoder_call
        assert rules is not None, "a free margin is asked only under encoder call rules"
        return template.call(rules.margin, [template.view])

    def _pool_at(self, here: Sequence[Any], stale: Sequence[Any], begin: Begin) -> Pool | None:
        """With a KV block pool, the pool the positions share (``here[p][i]``: request i is at
        position p): each rule of rule 5 (:func:`~chunkproof.spec.kv_blocks.held_in_list`,
        ``shared_asked``, ``leaves_stale``, the release's admission test and rule 2e's
        ``external_miscount``) translated once per template and chosen as :meth:`_at` chooses
        the stages, request i admitted at its entries of ``begin`` (rules 5e-5g)."""
        if not self.pooled:
            return None
        rules = self.pool_rules

        def value(p: int, func: Any, *args: Any) -> Any:
            values = [[template.call(func, [template.view, *args])] for template in self.templates]
            return _choose(self._by_pattern(here[p], begin), values)[0]

        return Pool(
            self.blocks,
            [_pick(here[p], stale) for p in range(self.k)],
            lambda p, c, kept: value(p, held_in_list, c, kept, self.model_len),
            lambda p, c, end: value(p, shared_asked, c, end, self.model_len),
            lambda p, c, end: value(p, leaves_stale, c, end),
            lambda p: value(p, rules.admission, self.model_len),
            lambda p, c, end: value(p, external_miscount, c, end),
        )

    def fields(self, state: Sequence[Any]) -> RequestVars:
        """A state vector's variables by kind (:func:`fields`)."""
        return fields(state, self.pooled)

    def cycle_edge(self, pid: str, state: list[Any], action: list[Any]) -> Any:
        """The steps a run that goes on for ever is held to for ``pid`` (S-POOL): each offered
        the whole budget M (``SchedulerStepModel.cycle_edges``)."""
        return action[0] == self.whole

    # -- Next ------------------------------------------------------------------------------------

    def step(self, state: list[Any], action: list[Any]) -> StepTerms:
        """:meth:`~chunkproof.spec.scheduler_step.SchedulerStepModel.step` at (state, b)."""
        key = tuple(t.get_id() for t in (*state, *action))
        if key not in self._steps:
            self._steps[key] = self._step(state, action)
        return self._steps[key]

    def _step(self, state: list[Any], action: list[Any]) -> StepTerms:
        """The loop rules (:func:`~chunkproof.spec.scheduler_loops.schedule_step`) over the
        positions: the request at position p is the one of rank p. With a pool a waiting
        request is seen at its resume hit and admitted there (at a connector's hit with x the
        hit), a running one past its admission (c0 = x = 0), as the explicit step has them."""
        k = self.k
        phase, c, rank, e, stale = self.fields(state)
        here = [[rank[i] == p for i in range(k)] for p in range(k)]
        resumed, begin = list(c), None
        if self.pooled:
            hits = self._hits(action)
            resumed = [z3.If(phase[i] == WAITING, hits[i], c[i]) for i in range(k)]
            connected = [
                z3.And(phase[i] == WAITING, flag == 1)
                for i, flag in enumerate(self._connectors(action))
            ]
            begin = {
                "start": [z3.If(phase[i] == WAITING, hits[i], 0) for i in range(k)],
                "external": [z3.If(connected[i], hits[i], 0) for i in range(k)],
            }
        at = Positions(
            [_pick(here[p], phase) for p in range(k)],
            [_pick(here[p], resumed) for p in range(k)],
            [_pick(here[p], e) for p in range(k)],
            lambda p, c_p, offer, where, shared: self._at(here[p], c_p, offer, shared, begin),
            lambda p, c_p, e_p: self._held_at(here[p], c_p, e_p),
            self._pool_at(here, stale, begin),
        )
        b = action[0]
        cap = theta_cap(Z3_OPS, phase, b, self.whole, self.theta, self._eligible(action))
        done = schedule_step(Z3_OPS, at, b, cap, self.max_seqs, self.rules)
        mine = [[rank[i] == p for p in range(k)] for i in range(k)]
        got_chunk = [_pick(mine[i], done.chunk) for i in range(k)]
        got_admitted = [_pick(mine[i], done.admitted) for i in range(k)]
        got_encoded = [_pick(mine[i], done.encoded) for i in range(k)]
        decoded = [_pick(mine[i], done.decoded) for i in range(k)]
        taken = [got_chunk[i] + self._advance(action, i) for i in range(k)]
        out: list[Any] = [False] * k
        kept: list[Any] = [0] * k
        if done.ledger is not None:
            out = [_pick(mine[i], done.ledger.out) for i in range(k)]
            kept = [_pick(mine[i], done.ledger.stale) for i in range(k)]
        target = self._arrange(state, taken, got_admitted, got_encoded, out, kept, resumed)
        still = stalled(Z3_OPS, done)
        each = Positions(
            phase,
            resumed,
            e,
            lambda i, c_i, offer, where, shared: self._alone(i, c_i, offer, shared, begin),
            lambda i, c_i, e_i: self.of(i, self._held(self._template(i), c_i, e_i)),
        )
        alone = alone_fit(Z3_OPS, each, cap(b), z3.BoolVal(True))
        return StepTerms(
            target,
            decoded,
            done.unsafe,
            done.crashed,
            still,
            z3.Or(*[ph != FINISHED for ph in phase]),
            done.broke,
            done.behind_fit,
            alone,
        )

    def _eligible(self, action: list[Any]) -> Any | None:
        """The eligible count the action sets with the adaptive floor, else ``None``."""
        return action[1] if self.adaptive else None

    def _connector(self, i: int) -> Any:
        """SPEC KV2 rule 5g: the connector's hit request ``i`` is offered waiting
        (:func:`~chunkproof.spec.kv_blocks.connector_hit`; 0: none)."""
        template = self._template(i)
        return self.of(i, as_term(template.call(connector_hit, [template.view])))

    def _hits(self, action: list[Any]) -> list[Any]:
        """Each request's resume hit the action sets (with a pool, rule 5e)."""
        return action[1 : 1 + self.k]

    def _connectors(self, action: list[Any]) -> list[Any]:
        """Per request, 1 where the action's hit is the connector's (with a pool, rule 5g),
        else 0."""
        return action[1 + self.k : 1 + 2 * self.k]

    def _advance(self, action: list[Any], i: int) -> Any:
        """Request ``i``'s decode advance the action sets (0 in a cell whose requests never
        decode: :attr:`decodes`)."""
        return action[-self.k + i] if self.decodes else 0

    def _arrange(
        self,
        state: list[Any],
        taken: list[Any],
        admitted: list[Any],
        encoded: list[Any],
        preempted: list[Any],
        stale: list[Any],
        resumed: list[Any],
    ) -> list[Any]:
        """The next state (``SchedulerStepModel.step`` and ``arrange``): each request where
        :func:`~chunkproof.spec.scheduler_loops.settle` puts it after ``taken`` tokens (its
        chunk from ``resumed``, or its decode advance) or its preemption (keeping its c), e 0
        once finished, its stale flag kept only in the running list, and the ranks sorted by
        (group, old rank)."""
        k = self.k
        phase, c, rank, _, _ = self.fields(state)
        keys = []
        rows: list[list[Any]] = []
        for i in range(k):

            def held_at(at_c: Any, i: int = i) -> Any:
                return self.of(i, self._held(self._template(i), at_c, encoded[i]))

            place = settle(
                Z3_OPS,
                phase[i],
                c[i],
                taken[i],
                admitted[i],
                self.ends[i],
                held_at,
                as_term(preempted[i]),
                resumed[i],
            )
            rows.append([place.phase, place.c, None, z3.If(place.phase == FINISHED, 0, encoded[i])])
            if self.pooled:
                rows[i].append(z3.If(place.phase == RUNNING, as_term(stale[i]), 0))
            keys.append(place.group * k + rank[i])
        for i in range(k):
            rows[i][2] = z3.Sum([z3.If(keys[j] < keys[i], 1, 0) for j in range(k) if j != i])
        return [v for row in rows for v in row]

    # -- the SymbolicModel interface --------------------------------------------------------------

    def state(self, name: str) -> list[Any]:
        names = POOL_STATE_FIELDS if self.pooled else STATE_FIELDS
        return [z3.Int(f"{name}_{part}{i}") for i in range(self.k) for part in names]

    def action(self, name: str) -> list[Any]:
        """The budget b, with the adaptive floor the eligible count n, with a pool each
        request's resume hit (rule 5e) and then whether each is the connector's (rule 5g),
        and where a request can decode (:attr:`decodes`) each request's decode advance
        (module docstring)."""
        eligible = [z3.Int(f"{name}.eligible")] if self.adaptive else []
        hits = [z3.Int(f"{name}.hit{i}") for i in range(self.k)] if self.pooled else []
        if self.pooled:
            hits += [z3.Int(f"{name}.connector{i}") for i in range(self.k)]
        advances = [z3.Int(f"{name}.decode{i}") for i in range(self.k)] if self.decodes else []
        return [z3.Int(name), *eligible, *hits, *advances]

    def init(self, state: list[Any]) -> Any:
        """Every request waiting at c0 with no item encoded (and no stale block), in any
        arrival order."""
        phase, c, rank, e, stale = self.fields(state)
        return z3.And(
            *[ph == WAITING for ph in phase],
            *[c[i] == self.starts[i] for i in range(self.k)],
            *[x == 0 for x in (*e, *stale)],
            *[z3.And(r >= 0, r < self.k) for r in rank],
            z3.Distinct(*rank),
        )

    def guard(self, state: list[Any], action: list[Any]) -> Any:
        """Any budget 1..M (SPEC S4 ``adversarial``), and any eligible count from
        :func:`~chunkproof.spec.scheduler_loops.least_eligible` up."""
        budget = z3.And(
            action[0] >= 1,
            action[0] <= self.whole,
            *self._decode_guard(state, action),
            *self._hit_guard(state, action),
        )
        if not self.adaptive:
            return budget
        least = least_eligible(Z3_OPS, self.fields(state).phase, action[0], self.whole)
        return z3.And(budget, action[1] >= least)

    def _hit_guard(self, state: list[Any], action: list[Any]) -> list[Any]:
        """SPEC KV2 rules 5e-5g (``SchedulerStepModel.resume_choices``): with a pool, a waiting
        request at c > 0 (preempted, or not yet admitted at its c0) resumes at any point of its
        resume grid from 0 to :func:`~chunkproof.spec.kv_blocks.resume_hit_top`, a connector's
        request at its x too (the action's connector flag 1); every other request's hit is 0
        (and every flag 0)."""
        if not self.pooled:
            return []
        phase, c = self.fields(state).phase, self.fields(state).c
        guards = []
        flags = self._connectors(action)
        for i, hit in enumerate(self._hits(action)):
            template = self._template(i)
            top = self.of(i, as_term(template.call(resume_hit_top, [template.view, c[i]])))
            on_grid = z3.And(hit >= 0, hit <= top, hit % self.grids[i] == 0)
            x = self._connector(i)
            connected = z3.And(x > 0, hit == x)
            choices = z3.If(flags[i] == 1, connected, z3.And(flags[i] == 0, on_grid))
            at_hit = z3.And(phase[i] == WAITING, c[i] > 0)
            guards.append(z3.If(at_hit, choices, z3.And(hit == 0, flags[i] == 0)))
        return guards

    def _decode_guard(self, state: list[Any], action: list[Any]) -> list[Any]:
        """Each decoding request the running loop reaches advances by 1..its free margin,
        every other request by 0 (``SchedulerStepModel.step``)."""
        if not self.decodes:
            return []
        reached = self.step(state, action).decoded
        guards = []
        for i in range(self.k):
            advance = self._advance(action, i)
            margin = self.of(i, self._margin(self._template(i)))
            decodes = z3.And(self.fields(state).phase[i] == DECODING, reached[i])
            guards.append(z3.If(decodes, z3.And(advance >= 1, advance <= margin), advance == 0))
        return guards

    def next(self, state: list[Any], action: list[Any]) -> list[Any]:
        return self.step(state, action).target

    def scope(self, pid: str) -> Any:
        """Every property of the scheduler step judges every instance."""
        return z3.BoolVal(True)

    def follows(self, state: list[Any], action: list[Any]) -> Any:
        """The search leads on: the step breaks no stage range, makes progress and leaves
        some request unfinished (``Transitions.follow`` of the explicit model)."""
        got = self.step(state, action)
        phases = self.fields(got.target).phase
        return z3.And(
            z3.Not(got.unsafe), z3.Not(got.stalled), z3.Or(*[p != FINISHED for p in phases])
        )

    def violation(self, pid: str, state: list[Any], action: list[Any]) -> Any:
        """The transition breaks ``pid`` (:mod:`chunkproof.spec.system_properties`); the
        system properties on every step whose code does not raise (SPEC Q3)."""
        got = self.step(state, action)
        if pid == "P0":
            return got.unsafe
        if pid == "S-LIVE":
            by_itself = alone(
                Z3_OPS, self.fields(state).phase, action[0], self.whole, self._eligible(action)
            )
            return z3.And(got.stalled, got.unfinished, action[0] == self.whole, by_itself)
        if pid == "HOL":
            return z3.And(z3.Not(got.crashed), got.broke, got.behind_fit)
        if pid == "STARVE":
            return z3.And(got.stalled, got.alone_fit)
        raise ConfigError(f"the scheduler step judges {', '.join(self.properties)}, not {pid}")

    # -- reading a solver model -------------------------------------------------------------------

    def instance(self, model: z3.ModelRef) -> tuple[Config, ...]:
        """The requests of a solver model, each a full configuration."""
        return tuple(
            Config(
                **self._template(i).concrete(cast(z3.ModelRef, _Renamed(model, self.renaming[i])))
            )
            for i in range(self.k)
        )


def fields(state: Sequence[Any], pooled: bool = False) -> RequestVars:
    """A state vector's variables by kind (:class:`RequestVars`), ``pooled`` when the
    requests share a KV block pool (a stale flag per request; else 0)."""
    width = len(POOL_STATE_FIELDS if pooled else STATE_FIELDS)
    kinds = [list(state[j::width]) for j in range(width)]
    if not pooled:
        kinds.append([0] * (len(state) // width))
    return RequestVars(*kinds)


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
    chosen = as_term(values[-1])
    for cond, value in zip(reversed(here[:-1]), reversed(values[:-1]), strict=True):
        chosen = z3.If(cond, as_term(value), chosen)
    return chosen


def _largest(values: Sequence[Any]) -> Any:
    """The largest of some terms."""
    largest = as_term(values[0])
    for value in values[1:]:
        largest = z3.If(as_term(value) > largest, as_term(value), largest)
    return largest


def _choose(
    patterns: Sequence[tuple[Any, list[tuple[Any, Any]]]], values: Sequence[Sequence[Any]]
) -> list[Any]:
    """Per field of ``values`` (one sequence per pattern, over its template's constants): the
    value of the pattern whose condition holds, its constants chosen as ``patterns`` say
    (:meth:`SymbolicSchedulerStep._by_pattern`)."""
    chosen = []
    for n in range(len(values[0])):
        terms = [
            z3.substitute(as_term(v[n]), *pairs) if pairs else as_term(v[n])
            for (_, pairs), v in zip(patterns, values, strict=True)
        ]
        chosen.append(_pick([cond for cond, _ in patterns], terms))
    return chosen
