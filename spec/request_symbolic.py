"""The single-request model (:mod:`chunkproof.spec.request`) in its symbolic form: one proof
cell, derived from the same policy source and property predicates by the Z3 form of the
policy-subset interpreter (:mod:`chunkproof.model.symbolic`); nothing is re-encoded by hand.

A *cell* fixes the inputs of :data:`CELL_INPUTS` (the block sizes, the hash block and the
checkpoint alignment, which divide; the retention interval, which real code's stand-ins need as
one plain value) and splits the lookahead in two classes, L = 0 and L >= 1 (a stand-in's
``speculative_config`` is None exactly without a lookahead); within the class L >= 1 the
lookahead is symbolic. Every other input of SPEC S1 is a Z3 constant constrained to its value
set in the range (:mod:`chunkproof.spec.constraints`), to a well-formed configuration
(:data:`~chunkproof.model.config.WELL_FORMED`), to the release's acceptance rules and to the
verdict's main category (outside the degenerate region of SPEC CLI). The state is c; the
action is the budget b.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import z3

from chunkproof.model import stages
from chunkproof.model.config import WELL_FORMED, Config, Items, item_views
from chunkproof.model.policy import Policy
from chunkproof.model.splits import prefill_end
from chunkproof.model.step import ENCODER_VIEW_DEFAULTS, passed_on, stage_order, step_view
from chunkproof.model.subset import SubsetFunction, parse
from chunkproof.model.symbolic import Z3Domain, symbolic
from chunkproof.model.symbolic import integer as symbolic_integer
from chunkproof.spec import properties as props
from chunkproof.spec.constraints import member
from chunkproof.spec.request import encoder_forced
from chunkproof.spec.space import INPUT_NAMES, Grid, Ints, ItemPattern, Layouts, Space, grid_from

CELL_INPUTS = ("block", "split_block", "hash_block", "checkpoint_alignment", "retention")
"""Inputs a proof cell keeps concrete (module docstring); the lookahead is split in two
classes, the others are symbolic."""

NO_SHARED = ENCODER_VIEW_DEFAULTS["encoder_shared"]
"""A request alone: no other request's encoder entries in the cache."""

_BOOLEANS = ("drop", "checkpoints", "exact_junction")
_INTEGERS = (
    "lookahead",
    "threshold",
    "hash_lookahead",
    "uncached_prefix",
    "prompt",
    "tokens",
    "start",
    "external",
    "junction",
    "max_sched",
    "encoder_cache",
    "encoder_budget",
)


@dataclass(frozen=True)
class Cell:
    """The concrete inputs of one proof cell, its lookahead class (L = 0, or L >= 1 symbolic)
    and the grid whose sets bound the symbolic inputs."""

    values: tuple[tuple[str, int], ...]
    speculative: bool
    """The lookahead class: L >= 1 (an EAGLE-family method is configured) or L = 0."""
    grid: Grid
    layout: tuple[ItemPattern, ...] = ()
    """The encoder-item pattern of the cell: one alternative of the grid's ``--items``, so the
    number of items is concrete and their positions and lengths symbolic."""

    def value(self, name: str) -> int:
        return dict(self.values)[name]

    def describe(self) -> dict[str, Any]:
        items = {"items": Layouts((self.layout,)).describe()} if self.layout else {}
        return {**dict(self.values), "lookahead": ">= 1" if self.speculative else 0, **items}


def cells(space: Space) -> list[Cell]:
    """Every combination of :data:`CELL_INPUTS` and lookahead class of every grid of
    ``space``. The alignment alpha is 0 in the cells where the checkpoints K are off (it matters
    only with K)."""
    found: list[Cell] = []
    seen: set[tuple[Any, ...]] = set()
    for grid in space.grids:
        names = [n for n in INPUT_NAMES if n in CELL_INPUTS or n in ("checkpoints", "lookahead")]
        skipped = [n for n in INPUT_NAMES if n not in names]
        layouts = grid.sets["layout"]
        alternatives = layouts.alternatives if isinstance(layouts, Layouts) else ((),)
        for family in grid.families(without=skipped):
            values = tuple((n, int(family[n])) for n in CELL_INPUTS)
            for layout in alternatives:
                key = (values, family["lookahead"] >= 1, id(grid), layout)
                if key not in seen:
                    seen.add(key)
                    found.append(Cell(values, family["lookahead"] >= 1, grid, layout))
    return found


class SymbolicRequest:
    """One proof cell of the single-request model (module docstring): a
    :class:`~chunkproof.spec.interface.SymbolicModel`."""

    def __init__(
        self,
        policy: Policy,
        cell: Cell,
        budget: tuple[int, int] | None,
        window: str = props.DEFAULT_WINDOW,
        main: bool = True,
        constants: dict[str, Any] | None = None,
        symbolic: tuple[str, ...] = (),
    ) -> None:
        """``main``: the constraint excludes SPEC CLI's degenerate region (the verdicts' main
        category); the scheduler step, which judges every configuration, passes False.
        ``constants``: every input the cell does not fix, as a constant (:meth:`at_config`);
        the model then ranges over nothing and its constraint is true. ``symbolic``: inputs
        kept symbols even where the range fixes them (the pooled step puts a resume hit in
        place of c0)."""
        self.policy, self.cell, self.budget, self.window = policy, cell, budget, window
        self.main = main
        if constants is not None:
            self.symbols = {}
            self._view(constants)
            self.constraint = z3.BoolVal(True)
            self.parameters = []
            return
        self.symbols = {n: z3.Int(n) for n in _INTEGERS} | {n: z3.Bool(n) for n in _BOOLEANS}
        for index in range(len(cell.layout)):
            for part in ("start", "length"):
                name = _item_symbol(index, part)
                self.symbols[name] = z3.Int(name)
        self._build(self.symbols)
        fixed = {n: v for n, v in self._fixed().items() if n not in symbolic}
        if fixed:
            self._build({**self.symbols, **fixed})
        self.parameters = [t for n, t in self.symbols.items() if n not in fixed]

    @classmethod
    def at_config(cls, policy: Policy, cfg: Config, window: str) -> SymbolicRequest:
        """The model at one configuration: every input the constant ``cfg`` holds, the policy
        alone symbolic (a candidate whose holes are Z3 constants, SPEC Y2). Its constraint is
        true: it ranges over nothing."""
        pairs = tuple(cfg.items)
        layout = tuple(ItemPattern(Ints(((s, s),)), False, Ints(((n, n),))) for s, n in pairs)
        values = tuple((name, int(getattr(cfg, name))) for name in CELL_INPUTS)
        cell = Cell(values, cfg.lookahead >= 1, grid_from({}), layout)
        constants: dict[str, Any] = {name: getattr(cfg, name) for name in _DERIVED}
        for index, (start, length) in enumerate(pairs):
            constants[_item_symbol(index, "start")] = start
            constants[_item_symbol(index, "length")] = length
        return cls(policy, cell, None, window, main=False, constants=constants)

    def _build(self, values: dict[str, Any]) -> None:
        """The view, the prefill end, the largest budget and the constraint, with the symbolic
        inputs set to ``values`` (terms, or constants where the range fixes them)."""
        self._view(values)
        self.constraint = z3.And(
            *self._ranges(),
            *[self.holds(rule, [self.view]) for rule, _ in WELL_FORMED],
            *[self.holds(rule.holds, [self.view]) for rule in self.policy.acceptance],
            z3.Not(self._degenerate()) if self.main else z3.BoolVal(True),
            self._low() <= self.high,
        )

    def _view(self, values: dict[str, Any]) -> None:
        """The view, the prefill end and the largest budget, with the inputs set to
        ``values``."""
        cell = self.cell
        concrete = dict(cell.values)
        block, split = concrete["block"], concrete["split_block"]
        fields: dict[str, Any] = {
            **concrete,
            "sched_block": math.lcm(block, split),
            "partial_hits": concrete["hash_block"] < block,
            **values,
            "speculative": cell.speculative,
        }
        if not cell.speculative:
            fields["lookahead"] = 0
        pairs = [
            (fields.pop(_item_symbol(i, "start")), fields.pop(_item_symbol(i, "length")))
            for i in range(len(cell.layout))
        ]
        fields["mm_items"] = item_views(pairs)
        fields["has_items"] = bool(pairs)
        self.view = SimpleNamespace(**fields)
        self._stages: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._template: dict[str, Any] | None = None
        self._engine: dict[str, Any] = {}
        self.end = self.call(prefill_end, [self.view])
        self.high = self._high()

    def _fixed(self) -> dict[str, Any]:
        """The symbolic inputs the constraint fixes: to a constant (``start`` = 0 when the range
        holds no other start), or ``tokens`` to the prompt (fresh requests only). They are put
        into the translation as such, so the solver works on fewer unknowns."""
        fixed: dict[str, Any] = {}
        solver = z3.Solver()
        solver.set("timeout", FIXING_MS)
        solver.add(self.constraint)
        if solver.check() != z3.sat:
            return fixed
        model = solver.model()
        for name, term in self.symbols.items():
            value = model.eval(term, model_completion=True)
            if solver.check(term != value) == z3.unsat:
                fixed[name] = z3.is_true(value) if z3.is_bool(term) else value.as_long()
        prompt = self.symbols["prompt"]
        if "tokens" not in fixed and solver.check(self.symbols["tokens"] != prompt) == z3.unsat:
            fixed["tokens"] = fixed.get("prompt", prompt)
        return fixed

    # -- building -------------------------------------------------------------------------------

    def call(self, func: Callable[..., Any] | SubsetFunction, args: list[Any]) -> Any:
        """Translate one call of one of chunkproof's own subset functions (they do not
        crash), over this request's terms."""
        tree = func if isinstance(func, SubsetFunction) else parse(func)
        value, _ = symbolic(tree, args)
        return value

    def holds(self, func: Callable[..., Any], args: list[Any]) -> Any:
        """The truth of one of chunkproof's own predicates (a rule, a property), as a ``Bool``:
        a predicate written with ``and``/``or`` may yield an integer operand (SPEC Q1)."""
        return Z3Domain().truthy(self.call(func, args))

    def _ranges(self) -> Iterator[Any]:
        """Every symbolic input in its value set of the cell's grid."""
        sets = self.cell.grid.sets
        ctx = {**vars(self.view), "prefill_end": self.end}
        for name in INPUT_NAMES:
            if name in CELL_INPUTS:
                continue
            if name == "start":
                yield member(sets[name], (self.view.start, self.view.external), ctx)
            elif name == "layout":
                yield from self._layout()
            else:
                yield member(sets[name], getattr(self.view, name), ctx)
        alpha = self.cell.value("checkpoint_alignment")
        yield self.view.checkpoints == (alpha > 0)
        if self.cell.speculative:
            yield self.view.lookahead >= 1

    def _layout(self) -> Iterator[Any]:
        """The cell's item pattern: each start (absolute, or a gap after the previous end)
        and length in its set (:class:`~chunkproof.spec.space.ItemPattern`)."""
        for pattern, item in zip(self.cell.layout, self.view.mm_items, strict=True):
            origin = item.start - item.prev_end if pattern.relative else item.start
            yield member(pattern.start, origin, {})
            yield member(pattern.length, item.length, {})

    def _low(self) -> int:
        return 1 if self.budget is None else self.budget[0]

    def _high(self) -> Any:
        """The largest offered budget: min(the range's top, M, T - c0) (SPEC S4)."""
        v = self.view
        top = v.tokens - v.start
        high = z3.If(v.max_sched <= top, v.max_sched, top)
        if self.budget is not None:
            high = z3.If(high <= self.budget[1], high, self.budget[1])
        return high

    def _degenerate(self) -> Any:
        """SPEC CLI's degenerate region (the reservation alone can hold a request): L >= 2 and
        M < L, or a static 0 < theta < L; outside every verdict's main category."""
        v = self.view
        if self.policy.stage("reservation") is None or not self.cell.speculative:
            return z3.BoolVal(False)
        cap = self.policy.stage("cap")
        static = cap is not None and cap.function is stages.cap_static_threshold
        low_theta = z3.And(v.threshold > 0, v.threshold < v.lookahead) if static else False
        return z3.And(v.lookahead >= 2, z3.Or(v.max_sched < v.lookahead, low_theta))

    def stages(self, c: Any, b: Any, shared: Any = NO_SHARED) -> dict[str, Any]:
        """The value after each stage, ``chunk`` and ``crashed`` for state c and budget b
        (SPEC S3), as terms; with ``shared``, the encoder cache embeddings other requests'
        entries reference (the scheduler step's), and an encoder stage of real code also
        gives ``encoded`` (:func:`~chunkproof.model.step.vectorised_stages`). The policy is
        translated once, over fresh constants, and every other triple of terms is
        substituted into that translation."""
        key = (_term_id(c), _term_id(b), _term_id(shared))
        if key not in self._stages:
            if self._template is None:
                self._template = self._translate(*_TEMPLATE)
            pairs = [(_TEMPLATE[0], _as_term(c)), (_TEMPLATE[1], _as_term(b))]
            pairs.append((_TEMPLATE[2], _as_term(shared)))
            self._stages[key] = {
                name: z3.substitute(_as_term(value), *pairs)
                for name, value in self._template.items()
            }
        return self._stages[key]

    def _translate(self, c: Any, b: Any, shared: Any) -> dict[str, Any]:
        view = step_view(self.engine_view(shared), c, lambda f, args: self.call(f, args))
        values: dict[str, Any] = {}
        crashed: Any = False
        encoded = None
        n = b
        for stage in self.policy.stages:
            run = getattr(stage.source, "run", None)
            runner = getattr(stage.source, "interpret", None)
            if run is not None:  # real encoder code: the items it scheduled too
                domain = Z3Domain()
                (value, encoded), crash = run(domain, view, c, n), domain.crashed
            elif runner is not None:  # real code that keeps state
                domain = Z3Domain()
                value, crash = runner(domain, view, c, n), domain.crashed
            else:
                value, crash = symbolic(stage.subset(), stage.arguments(view, c, n))
            crashed = z3.Or(crashed, crash) if crash is not False else crashed
            n = passed_on(value, symbolic_integer)
            values[stage.name] = n
        filled: dict[str, Any] = {}
        current = b
        for name in stage_order(self.policy):
            current = values.get(name, current)
            filled[name] = current
        filled["chunk"] = n
        filled["crashed"] = crashed
        if encoded is not None:
            filled["encoded"] = encoded
        return filled

    def use_engine_encoder(self, capacity: Any, budget: Any) -> None:
        """Run the stages with the engine's encoder cache and compute budget (terms) in place
        of the request's own (:func:`~chunkproof.spec.scheduler_step.engine_encoder`); the
        constraint and :meth:`concrete` keep the request's own, as vLLM accepts a request by
        them."""
        self._engine = {"encoder_cache": capacity, "encoder_budget": budget}
        self._stages, self._template = {}, None

    def engine_view(self, shared: Any) -> SimpleNamespace:
        """The request's view as its engine runs it: the engine's encoder sizes
        (:meth:`use_engine_encoder`), ``shared`` embeddings of other requests' entries
        referenced."""
        return SimpleNamespace(**{**vars(self.view), **self._engine, "encoder_shared": shared})

    def unsafe(self, c: Any, b: Any, shared: Any = NO_SHARED) -> Any:
        """SPEC P0 at (c, b) (and ``shared``, as :meth:`stages`): the code raises, or a stage
        leaves [0, its input]."""
        values = self.stages(c, b, shared)
        breaches = [values["crashed"]]
        previous = b
        for name in stage_order(self.policy):
            breaches.append(z3.Or(values[name] < 0, values[name] > previous))
            previous = values[name]
        return z3.Or(*breaches)

    # -- the SymbolicModel interface ---------------------------------------------------------------

    def state(self, name: str) -> list[Any]:
        return [z3.Int(name)]

    def action(self, name: str) -> list[Any]:
        return [z3.Int(name)]

    def init(self, state: list[Any]) -> Any:
        return state[0] == self.view.start

    def guard(self, state: list[Any], action: list[Any]) -> Any:
        c, b = state[0], action[0]
        return z3.And(c >= self.view.start, c < self.end, b >= self._low(), b <= self.high)

    def next(self, state: list[Any], action: list[Any]) -> list[Any]:
        return [state[0] + self.stages(state[0], action[0])["chunk"]]

    def follows(self, state: list[Any], action: list[Any]) -> Any:
        c, b = state[0], action[0]
        return z3.And(z3.Not(self.unsafe(c, b)), self.stages(c, b)["chunk"] > 0)

    def violation(self, pid: str, state: list[Any], action: list[Any]) -> Any:
        """The transition (c, b) violates ``pid`` (SPEC P); P1 looks at the largest budget, at
        the chunk its code schedules unless it raises, P0-violating or not (SPEC Q3)."""
        c, b = state[0], action[0]
        if pid == "P0":
            return self.unsafe(c, b)
        if pid == "P1":
            largest = self.stages(c, self.high)
            stuck = self.holds(props.stuck, [self.view, c, largest["chunk"]])
            return z3.And(z3.Not(largest["crashed"]), stuck)
        values = self.stages(c, b)
        e = c + values["chunk"]
        moving = z3.And(z3.Not(self.unsafe(c, b)), values["chunk"] > 0)
        if pid == "P5":
            window = props.WINDOW_PROPERTIES[self.window]
            return z3.And(moving, self.holds(window, [self.view, c, values["cap"], e]))
        bad = z3.And(moving, self.holds(props.edge_properties(self.policy)[pid], [self.view, c, e]))
        if pid == "P4" and self.cell.layout:
            return z3.And(bad, z3.Not(encoder_forced(stage_order(self.policy), values)))
        return bad

    def cases(self, c: Any) -> list[Any]:
        """A case split of the step at state ``c`` (terms whose disjunction is valid): every
        value of the Boolean inputs (the drop flag and the like), each at admission (c = c0,
        where the waiting loop passes the hits and ``num_computed_tokens`` is 0) and in the
        running loop. The split and the composition branch on these first of all, so a query
        split by them leaves the solver one shape of the step per case
        (:func:`~chunkproof.proofs.solving.solve_cases`)."""
        flags = [p for p in self.parameters if z3.is_bool(p)]
        admission = c == self.view.start
        cases = []
        for values in itertools.product((False, True), repeat=len(flags)):
            fixed = [flag == value for flag, value in zip(flags, values, strict=True)]
            cases += [z3.And(*fixed, admission), z3.And(*fixed, z3.Not(admission))]
        return cases

    def scope(self, pid: str) -> Any:
        """:func:`~chunkproof.spec.properties.property_scope` of ``pid`` over this cell."""
        found = props.property_scope(self.policy, pid)
        return z3.BoolVal(True) if found is None else self.holds(found.holds, [self.view])

    def states_below(self, tokens: int) -> list[list[int]]:
        """Every state a run can be in when T <= ``tokens``, in the order every move follows:
        c <= E <= T (SPEC S1: E = max(P, T - 1), P <= T; c = E when the prefill is done), and
        a move adds a chunk > 0 (:mod:`chunkproof.proofs.finite` checks both on the query it
        is given)."""
        return [[c] for c in (*range(tokens), tokens)]

    def concrete(self, model: z3.ModelRef) -> dict[str, Any]:
        """The configuration fields of a solver model (cell inputs included)."""
        out: dict[str, Any] = dict(self.cell.values)
        for name in self.symbols:
            if name.startswith(_ITEM_PREFIX):
                continue
            value = model.eval(_as_term(getattr(self.view, name)), model_completion=True)
            out[name] = z3.is_true(value) if name in _BOOLEANS else value.as_long()
        pairs = []
        for item in self.view.mm_items:
            start, length = (
                model.eval(_as_term(v), model_completion=True).as_long()
                for v in (item.start, item.length)
            )
            pairs.append((start, length))
        if pairs:
            out["items"] = Items(pairs)
        return out


_ITEM_PREFIX = "item"


def _item_symbol(index: int, part: str) -> str:
    """The Z3 name of an encoder item's start or length (``item0_start``)."""
    return f"{_ITEM_PREFIX}{index}_{part}"


_DERIVED = (*_INTEGERS, *_BOOLEANS, "sched_block", "partial_hits")
"""The fields :meth:`SymbolicRequest.at_config` takes from a configuration (the cell inputs
besides): the symbolic inputs, and those a cell derives, as the configuration holds them."""

FIXING_MS = 2_000
"""Timeout of each query that looks for inputs the range fixes (unknown: left symbolic)."""

_TEMPLATE = (z3.Int("c_template"), z3.Int("b_template"), z3.Int("shared_template"))
"""The constants the policy is translated over once per model (:meth:`SymbolicRequest.stages`)."""


def _as_term(value: Any) -> Any:
    """A Python int or bool as a Z3 value; a term as it is."""
    if isinstance(value, z3.ExprRef):
        return value
    if isinstance(value, bool):
        return z3.BoolVal(value)
    return z3.IntVal(value)


def _term_id(value: Any) -> tuple[str, int]:
    return ("term", value.get_id()) if isinstance(value, z3.AstRef) else ("int", int(value))
