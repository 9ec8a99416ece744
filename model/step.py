"""One scheduling step (SPEC S3): the stages of a policy applied to (c, b), and what SPEC P0
asks of it.

Every stage is a clamp: it maps its input ``n`` to a value in ``[0, n]``. A step whose policy
code raises, or one of whose stages leaves that interval, breaks SPEC P0 (SAFE): in vLLM that
takes the engine core down (or schedules a negative or oversized chunk), so the engines record
it as a violation and do not follow the step.

SPEC Q3: a step whose code does not raise still schedules its last stage's value, ``chunk``,
P0-violating or not (the real reservation clamps a negative split to 0 and the request is
skipped); P1, P2 and P7 judge that chunk, ``chunk <= 0`` being no progress
(:func:`chunkproof.spec.properties.stuck`). Only a step that raises schedules nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from chunkproof.model import vectorised
from chunkproof.model.config import Config
from chunkproof.model.errors import PolicyCrash
from chunkproof.model.policy import STAGE_NAMES, Policy
from chunkproof.model.subset import Value, parse
from chunkproof.model.vectorised import NumpyDomain, Outcome, evaluate

CRASHES = (AssertionError, ArithmeticError, PolicyCrash)
"""What the concrete form of a stage raises when the policy code crashes (SPEC P0): a built-in
policy runs natively, code read from a file raises :class:`PolicyCrash` from the interpreter."""


@dataclass(frozen=True)
class Step:
    """One step of a trace (SPEC C): the value after each stage, and the chunk taken.

    ``n`` is the chunk after the budget and theta caps, ``split``, ``encoder`` and
    ``reservation`` the values after those stages (a stage a policy does not have passes its
    input through), ``chunk`` what the request is scheduled. ``crash`` says where the policy
    raised (SPEC P0); the stage values from there on are 0. ``encoder_first`` says the
    composition applies the encoder cap before the split (0.15-0.27, history note 6), so the
    split's input is the encoder's value rather than ``n``.
    """

    c: int
    budget: int
    n: int
    split: int
    encoder: int
    reservation: int
    chunk: int
    crash: str | None = None
    encoder_first: bool = False

    @property
    def order(self) -> tuple[str, ...]:
        """The stages in the order the step applied them."""
        return ENCODER_FIRST_ORDER if self.encoder_first else STAGE_NAMES

    @property
    def end(self) -> int:
        """The chunk end c + chunk."""
        return self.c + self.chunk

    @property
    def unsafe(self) -> str | None:
        """Why the step breaks SPEC P0, or None: the code raised, or a stage returned a value
        outside [0, its input]."""
        if self.crash is not None:
            return f"the policy raises at {self.crash}"
        previous = ("budget", self.budget)
        for name in self.order:
            value = getattr(self, "n" if name == "cap" else name)
            if not 0 <= value <= previous[1]:
                return (
                    f"{'the budget cap' if name == 'cap' else 'the ' + name} returns {value}, "
                    f"outside [0, {previous[1]}] (its input, the {previous[0]})"
                )
            previous = (name, value)
        return None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.crash is None:
            del data["crash"]
        if not self.encoder_first:
            del data["encoder_first"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Step:
        fields = ("c", "budget", "n", "split", "encoder", "reservation", "chunk")
        crash = data.get("crash")
        return cls(
            **{k: int(data[k]) for k in fields},
            crash=None if crash is None else str(crash),
            encoder_first=bool(data.get("encoder_first", False)),
        )


ENCODER_FIRST_ORDER = ("cap", "encoder", "split", "reservation")
"""The stage order of C1-C4 (0.15-0.27): the encoder cap runs before the split."""


def encoder_first(policy: Policy) -> bool:
    """Whether ``policy`` applies its encoder cap before its split (history note 6, C1-C4)."""
    names = [stage.name for stage in policy.stages]
    return "encoder" in names and "split" in names and names.index("encoder") < names.index("split")


def stage_order(policy: Policy) -> tuple[str, ...]:
    """The order of ``policy``'s stage columns: the order it applies them."""
    return ENCODER_FIRST_ORDER if encoder_first(policy) else STAGE_NAMES


def computed_tokens(cfg: Config, c: int) -> int:
    """``request.num_computed_tokens`` when the split runs at c: 0 at admission (c = c0, the
    waiting loop passes the hits as arguments), c in the running loop (history note 2)."""
    return 0 if c == cfg.start else c


def local_hit(cfg: Config, c: int) -> int:
    """The local prefix hit the waiting loop passes at admission (c0 - x); 0 after."""
    return cfg.start - cfg.external if c == cfg.start else 0


def external_hit(cfg: Config, c: int) -> int:
    """The external (KV connector) hit x the waiting loop passes at admission; 0 after."""
    return cfg.external if c == cfg.start else 0


def uncached_at(cfg: Config, c: int) -> int:
    """V3's u, passed by the waiting loop only (history note 3, V3)."""
    return cfg.uncached_prefix if c == cfg.start else 0


def eagle_family(cfg: Config, c: int) -> bool:
    """``use_eagle``: an EAGLE-family speculative method is configured. It is D itself where D
    is ``use_eagle`` (0.15-0.29), and L >= 1 exactly with such a method (history note 5)."""
    return cfg.drop or cfg.lookahead >= 1


def speculative_tokens(cfg: Config, c: int) -> int:
    """k = ``num_speculative_tokens``, taken to be L (exact for multi-module MTP, L >= 2)."""
    return cfg.lookahead


VIEW_FIELDS: dict[str, Callable[[Config, int], int]] = {
    "computed": computed_tokens,
    "local": local_hit,
    "external": external_hit,
    "uncached_prefix": uncached_at,
    "eagle": eagle_family,
    "spec_tokens": speculative_tokens,
}
"""What a step view holds besides the configuration: the call site's per-step values and the
scheduler flags the configuration implies. A request is admitted by the waiting loop at c = c0
(a step there that yields 0 leaves it waiting at c0) and runs in the running loop at every
c > c0, so the loop is a function of c."""


def step_view(cfg: Any, c: Value, call: Callable[[Callable[..., Any], list[Value]], Value]) -> Any:
    """``cfg`` with the fields of :data:`VIEW_FIELDS` at state ``c``, computed by
    ``call(function, args)`` in the caller's value domain; ``external`` and
    ``uncached_prefix`` then hold what the call site passes at this step. ``speculative``
    (L >= 1, plain per batch or proof cell) is added when ``cfg`` does not say it."""
    fields = vars(cfg).copy() if isinstance(cfg, SimpleNamespace) else cfg.to_dict()
    if "speculative" not in fields:
        fields["speculative"] = fields["lookahead"] >= 1
    if isinstance(cfg, Config):
        fields.update(mm_items=cfg.mm_items, has_items=cfg.has_items)
    for name, default in ENCODER_VIEW_DEFAULTS.items():
        fields.setdefault(name, default)
    view = SimpleNamespace(**fields)
    per_step = {name: call(function, [cfg, c]) for name, function in VIEW_FIELDS.items()}
    vars(view).update(per_step)
    return view


ENCODER_VIEW_DEFAULTS: dict[str, Any] = {
    "mm_items": (),
    "has_items": False,
    "encoder_cache": 0,
    "encoder_budget": 0,
    "encoder_shared": 0,
}
"""The encoder fields of a step view without encoder items (SPEC S1: the optional feature
off): ``mm_items`` are :class:`~chunkproof.model.config.ItemView` values, ``has_items`` a plain
bool for the whole batch or proof cell."""


def _native(function: Callable[..., Any], args: list[Value]) -> Value:
    return function(*args)


def _vectorised(function: Callable[..., Any], args: list[Value]) -> Value:
    return evaluate(parse(function), args).value


def _fill(values: dict[str, Value], budget: Value, order: tuple[str, ...]) -> dict[str, Value]:
    """Stage values in application ``order``; a missing stage passes its input through."""
    filled: dict[str, Value] = {}
    current = budget
    for name in order:
        current = values.get(name, current)
        filled[name] = current
    return filled


def step(policy: Policy, cfg: Config, c: int, budget: int, shared: int = 0) -> Step:
    """SPEC S3: run the policy's stages on (c, b) in their concrete form; ``shared`` is the
    encoder cache the other requests of the step reference (0: the request alone)."""
    view = step_view(cfg, c, _native)
    view.encoder_shared = shared
    order = stage_order(policy)
    first = order is ENCODER_FIRST_ORDER
    values: dict[str, Value] = {}
    n = budget
    for stage in policy.stages:
        try:
            n = passed_on(stage.function(view, c, n))
        except CRASHES as exc:
            where = str(exc.args[0]) if isinstance(exc, PolicyCrash) else type(exc).__name__
            for later in order[order.index(stage.name) :]:
                values.setdefault(later, 0)
            f = _fill(values, budget, order)
            return Step(
                c, budget, f["cap"], f["split"], f["encoder"], f["reservation"], 0, where, first
            )
        values[stage.name] = n
    f = _fill(values, budget, order)
    return Step(c, budget, f["cap"], f["split"], f["encoder"], f["reservation"], n, None, first)


def passed_on(value: Value, integer: Callable[[Value], Value] = vectorised.integer) -> Value:
    """What a stage hands the next one (SPEC S3): its value as an integer of its form
    (``integer``: a boolean is 0 or 1, SPEC Q1), or 0 when it has none because it raised on
    every lane (SPEC P0 has recorded the crash; the later stages still run, as a stage's input
    they must accept)."""
    return 0 if value is None else integer(value)


def unsafe_lanes(values: dict[str, Value], budget: np.ndarray, order: tuple[str, ...]) -> Any:
    """SPEC P0 over the lanes of :func:`vectorised_stages`' ``values``: the policy raised, or a
    stage's value left [0, its input] (a stage's input is the value before it in ``order``,
    the first stage's the budget)."""
    size = len(budget)
    unsafe = np.broadcast_to(np.asarray(values["crashed"], dtype=bool), (size,)).copy()
    previous = budget
    for name in order:
        value = np.broadcast_to(np.asarray(values[name], dtype=np.int64), (size,))
        unsafe |= (value < 0) | (value > previous)
        previous = value
    return unsafe


def vectorised_stages(policy: Policy, cfg: Any, c: Value, budget: Value) -> dict[str, Value]:
    """Every stage's value over arrays, plus ``"chunk"`` and ``"crashed"`` (the lanes where
    the policy raises, SPEC P0): the vectorised form of :func:`step`.

    Derived from the stage source by :mod:`chunkproof.model.vectorised`. ``cfg`` may be a
    :class:`Config` or any object with the same attributes holding arrays. An encoder stage of
    real code also gives ``"encoded"``: the count of items up to the last one its call
    scheduled (:meth:`~chunkproof.source.encoder.EncoderMethodStage.run`).
    """
    view = step_view(cfg, c, _vectorised)
    values: dict[str, Value] = {}
    crashed: Value = False
    encoded: Value | None = None
    n = budget
    for stage in policy.stages:
        run = getattr(stage.source, "run", None)
        interpret = getattr(stage.source, "interpret", None)
        if run is not None:  # real encoder code: the items it scheduled too
            domain = NumpyDomain()
            value, encoded = run(domain, view, c, n)
            outcome = Outcome(value, domain.crashed, domain.where)
        elif interpret is not None:  # real code that keeps state
            domain = NumpyDomain()
            value = interpret(domain, view, c, n)
            outcome = Outcome(value, domain.crashed, domain.where)
        else:
            outcome = evaluate(stage.subset(), stage.arguments(view, c, n))
        n = passed_on(outcome.value)
        crashed = np.logical_or(crashed, outcome.crashed)
        values[stage.name] = n
    filled = _fill(values, budget, stage_order(policy))
    filled["chunk"] = n
    filled["crashed"] = crashed
    if encoded is not None:
        filled["encoded"] = encoded
    return filled
