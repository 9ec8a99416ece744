"""The composition read from ``schedule()`` (SPEC X3; history note section 6).

vLLM's ``Scheduler.schedule()`` computes each request's chunk ``num_new_tokens`` (n) by a
sequence of caps in two loops: the running loop (requests already running) and the waiting loop
(admissions). :func:`extract_composition` reads that sequence from the syntax tree of the
``schedule()`` a policy really runs (its class's, a fork's, a subclass's copy), never from a
release number:

1. **The loops** are the outermost ``while`` loops of ``schedule()`` (not inside a nested
   ``def``) that assign n and call ``*.allocate_slots(...)``; the running loop is the one whose
   test or body reads ``self.running``, the other the waiting loop (their headers changed
   between releases, so they are recognised by content).
2. **The chain** of a loop runs from the first store to n whose value is the initial chunk
   (``request.num_tokens_with_spec ... - request.num_computed_tokens`` in the running loop,
   ``request.num_tokens - num_computed_tokens`` in the waiting loop) to the statement that
   calls ``allocate_slots`` (the commit). Every store to n and every test of n in between is an
   event, with the ``if`` tests that guard it.
3. **Each event is classified by shape** (history note section 6): the initial chunk, the
   threshold cap ``if 0 < theta < n: n = theta``, the budget ``n = min(n, token_budget, ...)``,
   the max_model_len cap, the split ``self._mamba_block_aligned_split(...)``, the encoder cap
   ``self._try_schedule_encoder_inputs(...)``, the reservation
   ``self._reserve_prefill_lookahead(...)``, the decode padding, zero tests (``if n == 0:``
   with what the zero does: ``continue`` past the loop's counter, ``break``, ``skip_request``
   + ``continue``, or a ``continue`` that stays on the request) and other exits; the zero
   tests give the loop rules of the scheduler step (:meth:`Composition.loop_rules`). Any
   other store to n (a call of another method, arithmetic) is an **extra stage**.
4. **What the model keeps** (SPEC S3, one text-only request in align mode): the initial chunk,
   theta, the budget, the split, the reservation, extra stages and the tests that turn n into
   0. Stages outside the model's assumptions are dropped, and those for an input the model
   fixes named (:meth:`Composition.fixed`, every report's ``fixed``): the encoder cap (a text
   request has no encoder inputs, history note 10), the max_model_len cap (the model has no
   max_model_len), the asynchronous-KV-load chunk of 0 (the external hit is loaded
   synchronously), the decode padding (an admission with one token left under speculative
   decoding, history note 10), the no-chunked-prefill exit (align mode requires chunked
   prefill), and the replay adjustment of c (0 for Mamba models, C8).
5. **Locals of ``schedule()``** the kept statements read are bound to model values: the
   budgets ``token_budget``, ``input_budget`` and ``request_token_budget`` to the offered budget
   b (first stage only: the budget model offers b per step, SPEC S4), ``draft_slots`` to 0
   (MTP drafts take no extra slots), ``num_eligible_reqs`` to 1 (one request), the waiting
   loop's ``num_computed_tokens``, ``num_new_local_computed_tokens``,
   ``num_external_computed_tokens`` and ``num_uncached_common_prefix_tokens`` to the
   admission's c, l, x and u, and the flags ``load_kv_async``, ``defer_prefills`` and
   ``pad_spec_decode`` to false; any other local is inlined from its definitions earlier in the
   loop or in ``schedule()``'s prologue (the per-step threshold of C8-C9 included), or is one
   named error.

The chain becomes policy stages (:func:`composition_stages`): a request is admitted by the
waiting loop at c = c0 and runs in the running loop after (:data:`~chunkproof.model.step.
VIEW_FIELDS`), so every stage runs the waiting loop's statements at c = c0 and the running
loop's otherwise. Stages of the shapes every release has are the built-in stages (the budget cap
:func:`~chunkproof.model.stages.cap_static_threshold`, or
:func:`~chunkproof.model.stages.cap_lone_request` for the per-step threshold of C8-C9, which is
0 for one request) and the real methods (:class:`~chunkproof.source.methods.MethodStage`);
every other stage is the statements themselves, interpreted in the policy subset
(:class:`ScheduleStage`), its guards included. A zero test before a stage makes that stage
return 0 on a chunk of 0 (the loop stopped there). ``interpreted=True`` builds every stage
from the statements, which is how a test proves each release's extraction equal to its
built-in C-variant (``conform``).
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chunkproof.model import stages as builtin_stages
from chunkproof.model.errors import PolicyError
from chunkproof.model.policy import FIXED_INPUTS, LoopRules
from chunkproof.model.subset import SubsetFunction, Value
from chunkproof.source.classes import ClassLoader, ClassValue, FunctionValue
from chunkproof.source.extraction import RESERVE_METHOD, SPLIT_METHOD
from chunkproof.source.functions import interpret

N = "num_new_tokens"
C = "chunkproof_c"
START = "chunkproof_c0"
"""The synthesized stages' parameters for c and c0 (names no vLLM code uses)."""
ENCODER_METHOD = "_try_schedule_encoder_inputs"
COMMIT = "allocate_slots"
POP = "pop_request"
"""What takes a request out of its queue (``RequestQueue.pop_request``)."""

ANCHORS = ("split", "reservation")
"""Stage kinds both loops must call in the same order."""
CAP_KINDS = frozenset({"init", "theta", "budget", "assert"})

FIXED_BY = {
    "mml": "max_model_len",
    "async-init": "load_kv_async",
    "pad": "pad_spec_decode",
    "pad-drop": "pad_spec_decode",
    "pad-exit": "pad_spec_decode",
}
"""Stages the model leaves out because they read a fixed input: the input's
:data:`~chunkproof.model.policy.FIXED_INPUTS` key, by stage kind."""
INACTIVE = {
    "encoder": "the encoder cap: it runs as the encoder stage, the real "
    "_try_schedule_encoder_inputs at the place schedule() calls it (SPEC X5)",
    **{kind: FIXED_INPUTS[key] for kind, key in FIXED_BY.items()},
    "nochunk": "the no-chunked-prefill exit: align mode requires chunked prefill",
    "nochunk-zero": "the no-chunked-prefill zero of a request the encoder cache would split: "
    "align mode requires chunked prefill",
    "c-adjust": "the replay adjustment of c: 0 for Mamba models (C8)",
}
"""Stages outside the model's assumptions, and why (module docstring, point 4)."""

FIRST_STAGE_LOCALS = {
    "token_budget": "the offered budget b",
    "input_budget": "the offered budget b",
    "request_token_budget": "the offered budget b",
}
CONSTANT_LOCALS: dict[str, Any] = {
    "draft_slots": 0,
    "num_eligible_reqs": 1,
    "load_kv_async": False,
    "defer_prefills": False,
    "pad_spec_decode": False,
}
VIEW_LOCALS: dict[str, Callable[[Any, Value], Value]] = {
    "num_computed_tokens": lambda view, c: c,
    "num_new_local_computed_tokens": lambda view, c: view.local,
    "num_external_computed_tokens": lambda view, c: view.external,
    "num_uncached_common_prefix_tokens": lambda view, c: view.uncached_prefix,
}
"""Locals of the waiting loop and the step-view value they hold at admission (module
docstring, point 5)."""

_BUDGET_NAMES = frozenset({"token_budget", "input_budget", "draft_slots", "request_token_budget"})
_GUARD_TRUE: dict[str, Any] = {
    "load_kv_async": False,
    "defer_prefills": False,
    "pad_spec_decode": False,
    "self.need_mamba_block_aligned_split": True,
    "self.has_mamba_layers": True,
    "self.cache_config.mamba_cache_mode": "align",
    "request.has_encoder_inputs": False,
}
"""What the model's single text request in align mode holds, for deciding guards."""


# --- the extracted chain -----------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One store to n, or test of n, in a loop's chain."""

    kind: str
    line: int
    node: ast.stmt
    guards: tuple[tuple[ast.expr, bool], ...]
    action: str = ""
    """For a zero test or an exit: what the loop does (``continue``, ``break``, ``skip``)."""
    method: str = ""
    """For a call stage: the method called."""

    @property
    def active(self) -> bool:
        return self.kind not in INACTIVE and not _guards_false(self.guards)

    def text(self) -> str:
        return ast.unparse(self.node).split("\n")[0][:80]


@dataclass(frozen=True)
class Loop:
    """One loop's chain."""

    role: str
    line: int
    events: tuple[Event, ...]
    commit: int

    @property
    def active(self) -> list[Event]:
        return [e for e in self.events if e.active]

    def signature(self) -> str:
        """The chain as the history note's section 6 writes it (``init > theta > ...``)."""
        return " > ".join(t for t in (_token(e) for e in self.events) if t)


@dataclass
class Composition:
    """The composition one ``schedule()`` applies (module docstring)."""

    schedule: FunctionValue
    label: str
    line: int
    running: Loop
    waiting: Loop
    prologue: list[ast.stmt] = field(repr=False)
    loops: dict[str, ast.While] = field(repr=False)
    name: str = ""
    """The built-in C-variant whose chain this is (``C1`` ... ``C9``), with ``+extra`` for
    stages none has; ``schedule()`` when no C-variant matches."""
    theta: str = ""
    """``static`` (theta read from the scheduler config) or ``lone`` (C8-C9: per step, 0 for
    one request), or ``""`` if no threshold cap was recognised."""

    def fixed(self) -> tuple[str, ...]:
        """What the model fixes of this ``schedule()`` (:data:`~chunkproof.model.policy.
        FIXED_INPUTS`): the stages it leaves out for a fixed input, and the flags of
        :data:`CONSTANT_LOCALS` the function reads, once each."""
        keys = [
            FIXED_BY[e.kind]
            for loop in (self.running, self.waiting)
            for e in loop.events
            if e.kind in FIXED_BY
        ]
        read = {n.id for n in ast.walk(self.schedule.node) if isinstance(n, ast.Name)}
        read |= {n.attr for n in ast.walk(self.schedule.node) if isinstance(n, ast.Attribute)}
        keys += sorted(read & FIXED_INPUTS.keys())
        return tuple(FIXED_INPUTS[key] for key in dict.fromkeys(keys))

    def extras(self) -> list[str]:
        """The extra stages (:func:`extra_label`), once each, running loop first."""
        names: dict[str, None] = {}
        for loop in (self.running, self.waiting):
            for event in loop.active:
                if event.kind in ("extra", "exit"):
                    names.setdefault(extra_label(event), None)
        return list(names)

    def encoder_after_split(self) -> bool | None:
        """Whether the running loop calls the encoder cap after the split (0.28 on) or before
        it (up to 0.27, history note 6); ``None`` when it calls no encoder cap or no split.
        The encoder stage runs with the real ``_try_schedule_encoder_inputs`` at that place
        (:func:`~chunkproof.source.encoder.with_source_encoder`)."""
        kinds = [e.kind for e in self.running.events]  # its guard reads the request's items
        if "encoder" not in kinds or "split" not in kinds:
            return None
        return kinds.index("encoder") > kinds.index("split")

    def loop_rules(self) -> LoopRules:
        """What a zero does in each loop (:class:`~chunkproof.model.policy.LoopRules`), read
        from the zero tests a request with encoder items reaches (the encoder cap's own test
        included): in the running loop the action of every one; in the waiting loop the action
        of the first after the split, which every one before it must share (a zero before the
        split stays 0 through it), and that of every one after it (the first's, if none is).
        ``unknown`` says why there are no such rules (:func:`_unruled`), which tests of one
        part disagree, that a stage between the split and its test would have its zero taken
        for a later stage's, or that a running request is taken out of a queue."""
        running = [e for e in self.running.events if _reached(e)]
        waiting = [e for e in self.waiting.events if _reached(e)]
        problem = _unruled("running", running) or _unruled("waiting", waiting)
        if problem:
            return LoopRules(unknown=problem)
        split = next(i for i, e in enumerate(waiting) if e.kind == "split")
        first = next(i for i, e in enumerate(waiting) if e.kind == "zero" and i > split)
        parts = {
            "running loop": _actions(running),
            "waiting loop up to the split": _actions(waiting[: first + 1]),
            "waiting loop after the split": _actions(waiting[first + 1 :]),
        }
        if not parts["waiting loop after the split"]:
            parts["waiting loop after the split"] = parts["waiting loop up to the split"]
        for where, actions in parts.items():
            if len(actions) > 1:
                return LoopRules(
                    unknown=f"the zero tests of the {where} disagree ({', '.join(actions)})"
                )
        between = [e for e in waiting[split + 1 : first] if e.kind in STAGE_KINDS]
        waiting_actions = {
            *parts["waiting loop up to the split"],
            *parts["waiting loop after the split"],
        }
        if between and len(waiting_actions) > 1:
            return LoopRules(
                unknown=f"a stage of the waiting loop ({between[0].text()}) runs between the "
                "split and its zero test, whose action differs from a later zero's (the step "
                "tells a split's zero from a later one by the split's value)"
            )
        if parts["running loop"] == ["skip"]:
            return LoopRules(
                unknown="the running loop's zero test takes the request out of a queue (the "
                "step keeps a running request in the running list until its prefill ends)"
            )
        return LoopRules(*(actions[0] for actions in parts.values()))

    def describe(self) -> str:
        stages = [_short(e) for e in self.running.active if e.kind not in ("zero",)]
        return " > ".join(dict.fromkeys(stages))


LOOP_ACTIONS = ("continue", "break", "skip", "stay")
"""What a zero test can do that the scheduler step models (:class:`LoopRules`)."""
STAGE_KINDS = frozenset({"split", "encoder", "reservation", "extra"})
"""Events whose store to n can make it 0."""
ENCODER_GUARD = "request.has_encoder_inputs"


def _reached(event: Event) -> bool:
    """Whether a request with encoder items reaches ``event`` under the model's other
    assumptions (the encoder cap and the tests it guards included)."""
    guards = tuple(g for g in event.guards if ast.unparse(g[0]) != ENCODER_GUARD)
    return not _guards_false(guards)


def _unruled(role: str, events: list[Event]) -> str:
    """Why the reached ``events`` of the ``role`` loop give no loop rules: an exit test other
    than ``n == 0``, an action the step does not model, no zero test (in the waiting loop,
    none after the split), or a stage after the last zero test (its zero would reach the
    commit); empty when they give them."""
    exits = [e for e in events if e.kind == "exit"]
    if exits:
        return f"the {role} loop leaves on another test than a zero ({exits[0].text()})"
    odd = [e for e in events if e.kind == "zero" and e.action not in LOOP_ACTIONS]
    if odd:
        return f"the {role} loop's zero test {odd[0].text()} does {odd[0].action or 'nothing'}"
    kinds = [e.kind for e in events]
    if "zero" not in kinds:
        return f"the {role} loop tests no zero"
    if role == "waiting" and ("split" not in kinds or "zero" not in kinds[kinds.index("split") :]):
        return "the waiting loop tests no zero after the split"
    last = max(i for i, kind in enumerate(kinds) if kind == "zero")
    if any(kind in STAGE_KINDS for kind in kinds[last + 1 :]):
        return f"a stage of the {role} loop comes after its last zero test"
    return ""


def _actions(events: list[Event]) -> list[str]:
    """The distinct actions of the zero tests of ``events``, in order."""
    return list(dict.fromkeys(e.action for e in events if e.kind == "zero"))


def _short(event: Event) -> str:
    if event.kind in CAP_KINDS:
        return "cap"
    if event.method in (SPLIT_METHOD, RESERVE_METHOD):
        return "split" if event.method == SPLIT_METHOD else "reservation"
    return extra_label(event)


def extra_label(event: Event) -> str:
    """An extra stage's name: its method without leading underscores, or its statement (the
    test, for an exit) in brackets."""
    if event.method:
        return event.method.lstrip("_")
    node = event.node
    text = ast.unparse(node.test if isinstance(node, ast.If) else node)
    return f"[{text}]"


# --- finding the loops -------------------------------------------------------------------------


def extract_composition(
    loader: ClassLoader, schedule: FunctionValue, version: str | None
) -> Composition:
    """The composition of ``schedule`` (module docstring); ``version`` (if known) names the
    C-variant when the chain matches it."""
    label = loader.label(schedule)
    node = schedule.node
    loops = _candidate_loops(node)
    roles: dict[str, ast.While] = {}
    for loop in loops:
        role = _role(loop)
        if role in roles:
            role = "waiting" if role == "running" else "running"
        roles.setdefault(role, loop)
    if set(roles) != {"running", "waiting"}:
        raise PolicyError(
            f"{label}:{node.lineno}: schedule() has {len(loops)} scheduling loop(s) that set "
            f"{N} and call {COMMIT}; chunkproof needs the running and the waiting loop "
            "(use --compose Cn to choose a built-in composition)"
        )
    first = min(loop.lineno for loop in loops)
    prologue = [s for s in node.body if s.lineno < first]
    chains = {}
    removers = _removers(node)
    for role, loop in roles.items():
        walker = _Walker(role, removers, _names(loop.test))
        walker.walk(loop.body, ())
        if not walker.events or walker.commit is None:
            raise PolicyError(
                f"{label}:{loop.lineno}: the {role} loop of schedule() has no chain from the "
                f"initial {N} to {COMMIT}"
            )
        chains[role] = Loop(role, loop.lineno, tuple(walker.events), walker.commit)
    composition = Composition(
        schedule, label, node.lineno, chains["running"], chains["waiting"], prologue, roles
    )
    composition.theta = _theta_mode(composition)
    composition.name = _variant(composition, version)
    return composition


def _candidate_loops(function: ast.FunctionDef) -> list[ast.While]:
    found: list[ast.While] = []

    def visit(stmts: list[ast.stmt]) -> None:
        for s in stmts:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(s, ast.While) and _stores_n(s) and _calls(s, COMMIT):
                found.append(s)
                continue
            for name in ("body", "orelse", "finalbody"):
                sub = getattr(s, name, None)
                if isinstance(sub, list):
                    visit([x for x in sub if isinstance(x, ast.stmt)])
            for handler in getattr(s, "handlers", []):
                visit(handler.body)

    visit(function.body)
    return found


def _role(loop: ast.While) -> str:
    text = ast.unparse(loop.test)
    if "self.running" in text:
        return "running"
    for node in ast.walk(loop):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "running"
        ):
            return "running"
    return "waiting"


def _stores_n(node: ast.AST) -> bool:
    return any(_targets_n(s) for s in ast.walk(node) if isinstance(s, ast.stmt))


def _targets_n(stmt: ast.stmt) -> bool:
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        targets = [stmt.target]
    return any(
        isinstance(n, ast.Name) and n.id == N and isinstance(n.ctx, ast.Store)
        for t in targets
        for n in ast.walk(t)
    )


def _calls(node: ast.AST, attr: str) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == attr
        for n in ast.walk(node)
    )


def _reads_n(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id == N for n in ast.walk(node))


def _self_method(value: ast.expr | None) -> str | None:
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and isinstance(value.func.value, ast.Name)
        and value.func.value.id == "self"
    ):
        return value.func.attr
    return None


def _names(node: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return out


def _exit_action(body: list[ast.stmt], removers: frozenset[str], counters: frozenset[str]) -> str:
    """What an exit test's body does: ``break``, ``return``, or for a ``continue``: ``skip``
    after a call that takes the request out of its queue (``*.pop_request(...)``, or a
    function of ``schedule()`` that calls it, ``removers``: 0.33's ``skip_request``),
    ``continue`` after a step of the loop's counter (``req_index += 1``: a name of the loop's
    test, ``counters``), else ``stay``: the next turn of the loop finds the same request (a
    log line does not move it); empty when the body does not leave the loop."""
    last = body[-1] if body else None
    if isinstance(last, ast.Continue):
        if any(_removes(stmt, removers) for stmt in body):
            return "skip"
        steps = [
            stmt
            for stmt in body
            if isinstance(stmt, ast.AugAssign)
            and isinstance(stmt.op, ast.Add)
            and isinstance(stmt.target, ast.Name)
            and stmt.target.id in counters
        ]
        return "continue" if steps else "stay"
    if isinstance(last, ast.Break):
        return "break"
    if isinstance(last, ast.Return):
        return "return"
    return ""


def _removes(stmt: ast.stmt, removers: frozenset[str]) -> bool:
    """Whether ``stmt`` calls ``*.pop_request(...)`` or a function named in ``removers``."""
    for node in ast.walk(stmt):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == POP:
                return True
            if isinstance(func, ast.Name) and func.id in removers:
                return True
    return False


def _removers(function: ast.FunctionDef) -> frozenset[str]:
    """The functions defined in ``function``'s body that call ``*.pop_request(...)``."""
    return frozenset(
        node.name
        for node in ast.walk(function)
        if isinstance(node, ast.FunctionDef)
        and node is not function
        and any(_removes(stmt, frozenset()) for stmt in node.body)
    )


def _is_zero_test(test: ast.expr) -> bool:
    """``n == 0``, ``n <= 0``, ``not n``, ``0 == n``."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return isinstance(test.operand, ast.Name) and test.operand.id == N
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right = test.left, test.comparators[0]
        zero = (ast.Eq, ast.LtE) if isinstance(left, ast.Name) else (ast.Eq, ast.GtE)
        named, other = (left, right) if isinstance(left, ast.Name) else (right, left)
        return (
            isinstance(named, ast.Name)
            and named.id == N
            and isinstance(other, ast.Constant)
            and other.value == 0
            and isinstance(test.ops[0], zero)
        )
    return False


class _Walker:
    """Linearises one loop body into events (module docstring, points 2-3)."""

    def __init__(self, role: str, removers: frozenset[str], counters: set[str]) -> None:
        self.role = role
        self.removers = removers
        self.counters = frozenset(counters)
        self.events: list[Event] = []
        self.commit: int | None = None
        self.started = False

    def add(
        self,
        kind: str,
        stmt: ast.stmt,
        guards: tuple[tuple[ast.expr, bool], ...],
        action: str = "",
        method: str = "",
    ) -> None:
        self.events.append(Event(kind, stmt.lineno, stmt, guards, action, method))

    def walk(self, stmts: list[ast.stmt], guards: tuple[tuple[ast.expr, bool], ...]) -> bool:
        """Walk ``stmts``; True once the commit is reached."""
        for s in stmts:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if self.started and _calls(s, COMMIT) and not isinstance(s, ast.If):
                self.commit = s.lineno
                return True
            if _targets_n(s):
                self.store(s, guards)
                continue
            if isinstance(s, ast.If):
                if self.started and _reads_n(s.test) and self.test(s, guards):
                    continue
                if self.walk(s.body, (*guards, (s.test, True))):
                    return True
                if s.orelse and self.walk(s.orelse, (*guards, (s.test, False))):
                    return True
                continue
            if isinstance(s, (ast.With, ast.Try)):
                if self.walk(s.body, guards):
                    return True
                continue
            if not self.started:
                continue
            if (
                isinstance(s, ast.AugAssign)
                and isinstance(s.target, ast.Name)
                and s.target.id == "num_computed_tokens"
            ):
                self.add("c-adjust", s, guards)
            elif isinstance(s, ast.Assert) and _reads_n(s.test):
                self.add("assert", s, guards)
        return self.commit is not None

    def store(self, s: ast.stmt, guards: tuple[tuple[ast.expr, bool], ...]) -> None:
        value = s.value if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)) else None
        guard_names = set().union(*(_names(t) for t, _ in guards)) if guards else set()
        loading = any(held and "load_kv_async" in _names(t) for t, held in guards)
        if isinstance(s, ast.Assign) and isinstance(s.targets[0], (ast.Tuple, ast.List)):
            method = _self_method(value) or ""
            kind = "encoder" if method == ENCODER_METHOD else "extra"
            if self.started:
                self.add(kind, s, guards, method=method)
            return
        if isinstance(s, ast.AugAssign):
            if self.started:
                self.add("extra", s, guards)
            return
        assert value is not None
        method = _self_method(value) or ""
        names = _names(value)
        if not self.started:
            if "num_tokens_with_spec" in names or (
                "num_tokens" in names and isinstance(value, ast.BinOp)
            ):
                self.started = True
                self.add("init", s, guards)
            elif isinstance(value, ast.Constant) and value.value == 0 and loading:
                self.started = True
                self.add("async-init", s, guards)
            return
        if method == SPLIT_METHOD:
            self.add("split", s, guards, method=method)
        elif method == RESERVE_METHOD:
            self.add("reservation", s, guards, method=method)
        elif method == ENCODER_METHOD:
            self.add("encoder", s, guards, method=method)
        elif method:
            self.add("extra", s, guards, method=method)
        elif (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and (value.func.id == "min")
            and any(isinstance(a, ast.Name) and a.id == N for a in value.args)
        ):
            others = [a for a in value.args if not (isinstance(a, ast.Name) and a.id == N)]
            kinds = {_min_kind(a) or "extra" for a in others}
            self.add(kinds.pop() if len(kinds) == 1 else "extra", s, guards)
        elif "num_tokens_with_spec" in names or (
            "num_tokens" in names and isinstance(value, ast.BinOp) and N not in names
        ):
            self.add("init", s, guards)
        elif isinstance(value, ast.Constant) and value.value == 0 and loading:
            self.add("async-init", s, guards)
        elif (
            isinstance(value, ast.Constant)
            and value.value == 0
            and "enable_chunked_prefill" in guard_names
        ):
            self.add("nochunk-zero", s, guards)
        elif (
            isinstance(value, ast.Constant)
            and value.value == 1
            and ("pad_spec_decode" in guard_names)
        ):
            self.add("pad-drop", s, guards)
        elif names & {"num_spec_tokens", "padded_num_tokens"}:
            self.add("pad", s, guards)
        else:
            self.add("extra", s, guards)

    def test(self, s: ast.If, guards: tuple[tuple[ast.expr, bool], ...]) -> bool:
        """An ``if`` testing n; True when it is an event (not walked into)."""
        action = _exit_action(s.body, self.removers, self.counters)
        if _is_zero_test(s.test) and action and not s.orelse:
            self.add("zero", s, guards, action=action)
            return True
        body = s.body
        if (
            len(body) == 1
            and isinstance(body[0], ast.Assign)
            and _targets_n(body[0])
            and not s.orelse
            and isinstance(s.test, ast.Compare)
            and len(s.test.ops) == 2
            and isinstance(s.test.left, ast.Constant)
            and s.test.left.value == 0
            and ast.dump(s.test.comparators[0]) == ast.dump(body[0].value)
        ):
            self.add("theta", s, guards)
            return True
        if action:
            names = _names(s.test)
            if "enable_chunked_prefill" in names:
                self.add("nochunk", s, guards, action=action)
            elif names & {"max_model_len", "padded_num_tokens", "num_spec_tokens"} or any(
                "pad_spec_decode" in _names(t) for t, _ in guards
            ):
                self.add("pad-exit", s, guards, action=action)
            else:
                self.add("exit", s, guards, action=action)
            return True
        return False


def _min_kind(arg: ast.expr) -> str | None:
    names = _names(arg)
    if "max_model_len" in names:
        return "mml"
    if names and names <= _BUDGET_NAMES | {"self"}:
        return "budget"
    return None


def _guards_false(guards: tuple[tuple[ast.expr, bool], ...]) -> bool:
    """Some guard is false for the model's single text request in align mode."""
    return any(_truth(test) is (not polarity) for test, polarity in guards)


def _truth(node: ast.expr) -> bool | None:
    value = _evaluate(node)
    return None if value is _UNKNOWN else bool(value)


_UNKNOWN = object()


def _evaluate(node: ast.expr) -> Any:
    """A guard under :data:`_GUARD_TRUE` (``_UNKNOWN`` when it depends on anything else)."""
    text = ast.unparse(node)
    if text in _GUARD_TRUE:
        return _GUARD_TRUE[text]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _evaluate(node.operand)
        return _UNKNOWN if inner is _UNKNOWN else not inner
    if isinstance(node, ast.BoolOp):
        values = [_evaluate(v) for v in node.values]
        is_and = isinstance(node.op, ast.And)
        for value in values:
            if value is not _UNKNOWN and bool(value) is not is_and:
                return value
        return _UNKNOWN if any(v is _UNKNOWN for v in values) else values[-1]
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = _evaluate(node.left), _evaluate(node.comparators[0])
        if left is _UNKNOWN or right is _UNKNOWN:
            return _UNKNOWN
        if isinstance(node.ops[0], ast.Eq):
            return left == right
        if isinstance(node.ops[0], ast.NotEq):
            return left != right
    return _UNKNOWN


# --- the signature and the C-variant -----------------------------------------------------------


def _token(event: Event) -> str:
    """One event as a token of the history note's section 6 notation."""
    text = ast.unparse(event.node)
    kind = event.kind
    guards = " ".join(ast.unparse(t) for t, _ in event.guards)
    if kind == "init":
        return "init"
    if kind == "async-init":
        return "init0"
    if kind in ("theta", "pad", "pad-drop", "c-adjust"):
        return kind
    if kind == "pad-exit":
        return f"pad-test=>{event.action}"
    if kind == "nochunk":
        return f"nochunk=>{event.action}"
    if kind == "nochunk-zero":
        return "nochunk0"
    if kind == "budget":
        value = event.node.value if isinstance(event.node, ast.Assign) else None
        names = _names(value) if value is not None else set()
        return "budget+input" if names & {"input_budget", "request_token_budget"} else "budget"
    if kind == "mml":
        return "mml(-1)" if "- 1 -" in text else "mml(-s)"
    if kind == "encoder":
        return "enc(1|0)" if "use_eagle" in text else "enc(L)"
    if kind == "split":
        call = event.node.value if isinstance(event.node, ast.Assign) else None
        count = len(call.args) if isinstance(call, ast.Call) else 0
        return f"split/{count}" + ("!async" if "load_kv_async" in guards else "")
    if kind == "reservation":
        return "resv"
    if kind == "zero":
        return f"0=>{event.action}"
    if kind == "exit":
        return f"exit@{event.line}=>{event.action}"
    if kind == "extra":
        return f"extra:{event.method or 'arith'}"
    return ""


_RUN_OLD = "init > theta > budget > mml(-1) > enc(1|0) > split/2 > 0=>continue"
_RUN_C3 = "init > theta > budget > mml(-s) > enc(1|0) > split/2 > 0=>continue"
_RUN_NEW = "init > theta > budget+input > mml(-s) > split/2 > enc(L) > resv > 0=>continue"
_W_C1 = "init0 > init > theta > nochunk=>break > budget > enc(1|0) > 0=>break > split/4 > 0=>break"
_W_C2 = _W_C1.replace("split/4", "split/4!async")
_W_C3 = _W_C1.replace("split/4", "split/5!async")
_W_C4_25 = (
    "init0 > init > pad > pad-test=>break > theta > nochunk=>break > budget > enc(1|0) > "
    "0=>break > split/5!async > 0=>break"
)
_W_C4 = _W_C4_25.replace("split/5", "split/4")
_W_C5 = (
    "init0 > init > pad > pad-test=>break > theta > nochunk=>break > budget+input > "
    "split/4!async > 0=>break > enc(L) > resv > 0=>break"
)
_W_C6 = (
    "init0 > init > pad > theta > nochunk=>break > budget+input > split/4!async > 0=>break > "
    "pad-drop > enc(L) > resv > 0=>break"
)
_W_C8 = _W_C6.replace("init0 > init", "init0 > c-adjust > init")
_W_C9 = _W_C8.replace("resv > 0=>break", "resv > 0=>skip")
_W_C9_34 = _W_C9.replace("resv > 0=>skip", "resv > nochunk0 > 0=>skip")

VARIANTS: tuple[tuple[str, str, str, str], ...] = (
    ("C1", "static", _RUN_OLD, _W_C1),
    ("C2", "static", _RUN_OLD, _W_C2),
    ("C3", "static", _RUN_C3, _W_C3),
    ("C4", "static", _RUN_C3, _W_C4_25),
    ("C4", "static", _RUN_C3, _W_C4),
    ("C5", "static", _RUN_NEW, _W_C5),
    ("C6", "static", _RUN_NEW, _W_C6),
    ("C7", "static", _RUN_NEW, _W_C6),
    ("C8", "lone", _RUN_NEW, _W_C8),
    ("C9", "lone", _RUN_NEW, _W_C9),
    ("C9", "lone", _RUN_NEW, _W_C9_34),
)
"""The chains of the C-variants (history note section 6), in the notation of
:meth:`Loop.signature`: (name, threshold, running loop, waiting loop). C6 and C7 differ only
inside the decode padding's condition. 0.34's C9 adds a zero after the reservation that only
chunked prefill off reaches (``nochunk0``), which align mode refuses, so its chain is C9's."""


def _variant(composition: Composition, version: str | None) -> str:
    """The C-variant the chain matches (the release's own when it is one of them, else the
    latest), with ``+extra`` for extra stages; ``schedule()`` when none matches."""
    extras = [t for t in _extra_tokens(composition.running) + _extra_tokens(composition.waiting)]

    def plain(loop: Loop) -> str:
        return " > ".join(
            t for t in (_token(e) for e in loop.events) if t and not _is_extra_token(t)
        )

    running, waiting = plain(composition.running), plain(composition.waiting)
    matches = [
        name
        for name, theta, run, wait in VARIANTS
        if (run, wait, theta) == (running, waiting, composition.theta)
    ]
    if not matches:
        return "schedule()"
    name = matches[-1]
    if version is not None:
        from chunkproof.model.builtin import policy_for_release

        try:
            own = policy_for_release(version).composition
        except PolicyError:
            own = None
        if own in matches:
            name = own
    suffix = "".join(f"+{e}" for e in dict.fromkeys(extras))
    return name + suffix


def _extra_tokens(loop: Loop) -> list[str]:
    return [extra_label(e) for e in loop.active if e.kind in ("extra", "exit")]


def _is_extra_token(token: str) -> bool:
    return token.startswith(("extra:", "exit@"))


def _theta_mode(composition: Composition) -> str:
    """How the running loop's threshold cap reads theta: ``static`` (the scheduler config's
    value), ``lone`` (a per-step value that is 0 when one request is eligible, C8-C9), or
    ``""``."""
    for event in composition.running.events:
        if event.kind != "theta" or not isinstance(event.node, ast.If):
            continue
        test = event.node.test
        assert isinstance(test, ast.Compare)
        theta = test.comparators[0]
        if _is_static_theta(theta):
            return "static"
        if isinstance(theta, ast.Name):
            definitions = _definitions(composition.prologue, theta.id)
            if definitions and _is_lone_theta(composition.prologue, definitions, theta.id):
                return "lone"
            if (
                len(definitions) == 1
                and isinstance(definitions[0], ast.Assign)
                and (_is_static_theta(definitions[0].value))
            ):
                return "static"
    return ""


def _is_static_theta(node: ast.expr) -> bool:
    return ast.unparse(node) == "self.scheduler_config.long_prefill_token_threshold"


ADAPTIVE_FLOOR = (
    "if {theta} > 0 and self.adaptive_long_prefill_threshold:\n"
    "    {theta} = max({theta}, input_budget // num_eligible_reqs)"
)
"""The adaptive floor of 0.31-0.33 (history note 6), the one rewrite of a per-step theta the
model has (``chunkproof system --adaptive-threshold``), as ``ast.unparse`` prints it."""
INPUT_BUDGET = "input_budget = self.scheduler_config.max_num_batched_tokens"
"""What the floor divides: M, as 0.31-0.33 define it."""


def _is_lone_theta(prologue: list[ast.stmt], definitions: list[ast.stmt], name: str) -> bool:
    """``theta = <static> if <more than one request> else 0``, then at most the release's
    adaptive floor (:data:`ADAPTIVE_FLOOR`, over M: :data:`INPUT_BUDGET`); any other rewrite is
    code the model does not know."""
    first = definitions[0]
    if not (isinstance(first, ast.Assign) and isinstance(first.value, ast.IfExp)):
        return False
    value = first.value
    if not (
        _is_static_theta(value.body)
        and isinstance(value.orelse, ast.Constant)
        and value.orelse.value == 0
        and "num_eligible_reqs" in _names(value.test)
    ):
        return False
    floor = ADAPTIVE_FLOOR.format(theta=name)
    if any(ast.unparse(later) != floor for later in definitions[1:]):
        return False
    budget = _definitions(prologue, "input_budget")
    return len(definitions) == 1 or (bool(budget) and ast.unparse(budget[0]) == INPUT_BUDGET)


def _definitions(stmts: list[ast.stmt], name: str) -> list[ast.stmt]:
    """The statements of ``stmts`` (top level) that assign ``name``: assignments, and ``if``
    statements whose body assigns it."""
    found: list[ast.stmt] = []
    for stmt in stmts:
        assigns = isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and _assigns(
            stmt, name
        )
        guarded = isinstance(stmt, ast.If) and any(
            isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and _assigns(s, name)
            for s in ast.walk(stmt)
        )
        if assigns or guarded:
            found.append(stmt)
    return found


def _assigns(stmt: ast.stmt, name: str) -> bool:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]  # type: ignore[attr-defined]
    return any(isinstance(t, ast.Name) and t.id == name for t in targets)


# --- stages ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    """One stage of the composition: a kind (``cap``, ``split``, ``reservation``, or
    ``extra`` for the statements after an anchor), and the events of each loop."""

    kind: str
    running: tuple[Event, ...]
    waiting: tuple[Event, ...]
    zero_guard: tuple[bool, bool]
    """(running, waiting): a zero test or exit precedes the segment in that loop."""


def segments(composition: Composition) -> list[Segment]:
    """The kept events of both loops grouped into stages: the cap (the initial chunk, theta,
    the budget and whatever sits among them), each anchor (split, reservation), and between
    and after them the extra statements; both loops must call the anchors in the same order."""
    label = composition.label
    grouped = {
        loop.role: _groups(loop, label) for loop in (composition.running, composition.waiting)
    }
    running, waiting = grouped["running"], grouped["waiting"]
    anchors_r = [k for k, _, _ in running if k in ANCHORS]
    anchors_w = [k for k, _, _ in waiting if k in ANCHORS]
    if anchors_r != anchors_w:
        running_calls = " then ".join(anchors_r) or "no stage"
        waiting_calls = " then ".join(anchors_w) or "no stage"
        raise PolicyError(
            f"{label}:{composition.line}: the running loop calls {running_calls} and the "
            f"waiting loop {waiting_calls}; chunkproof runs one chain of stages for both loops "
            "(SPEC S3)"
        )
    result: list[Segment] = []
    order = ["cap", "extra-cap"]
    for anchor in anchors_r:
        order += [anchor, f"extra-{anchor}"]
    for kind in order:
        r = next(((evs, z) for k, evs, z in running if k == kind), ((), False))
        w = next(((evs, z) for k, evs, z in waiting if k == kind), ((), False))
        if not r[0] and not w[0]:
            continue
        result.append(Segment(kind, tuple(r[0]), tuple(w[0]), (r[1], w[1])))
    return result


def _groups(loop: Loop, label: str) -> list[tuple[str, list[Event], bool]]:
    """One loop's kept events as (segment kind, events, whether a zero test or an exit comes
    before them): the cap, then the anchors with the events between and after them (a zero
    test that only ends a group is dropped: a chunk of 0 is the end of the step anyway)."""
    active = loop.active
    last_budget = max((i for i, e in enumerate(active) if e.kind == "budget"), default=-1)
    first_anchor = next((i for i, e in enumerate(active) if e.kind in ANCHORS), len(active))
    cut = max(last_budget + 1, 0)
    while cut < len(active) and active[cut].kind == "assert":
        cut += 1
    if cut > first_anchor:
        raise PolicyError(
            f"{label}:{active[first_anchor].line}: the {loop.role} loop caps the budget "
            "after calling the split; chunkproof passes the budget to the first stage only"
        )
    groups: list[tuple[str, list[Event], bool]] = [("cap", active[:cut], False)]
    zero = any(e.kind in ("zero", "exit") for e in active[:cut])
    pending: list[Event] = []
    pending_kind, pending_zero = "extra-cap", zero
    for event in [*active[cut:], None]:
        if event is None or event.kind in ANCHORS:
            while pending and pending[-1].kind == "zero":
                pending.pop()
            if pending:
                groups.append((pending_kind, list(pending), pending_zero))
            pending = []
            if event is not None:
                groups.append((event.kind, [event], zero))
                pending_kind, pending_zero = f"extra-{event.kind}", zero
            continue
        if not pending and event.kind == "zero":
            zero = pending_zero = True
            continue
        pending.append(event)
        if event.kind in ("zero", "exit"):
            zero = True
    return groups


def stage_name(kind: str) -> str:
    """The stage name (:data:`~chunkproof.model.policy.STAGE_NAMES`) a segment's value is
    recorded under in a trace step: statements before the split are part of n (SPEC C: "n
    before the split"), those after an anchor are recorded with it."""
    return {
        "cap": "cap",
        "extra-cap": "cap",
        "split": "split",
        "extra-split": "split",
        "reservation": "reservation",
        "extra-reservation": "reservation",
    }[kind]


@dataclass(frozen=True)
class ScheduleStage:
    """A stage made of ``schedule()``'s own statements (module docstring), interpreted in the
    policy subset on the stand-ins of a step view: ``self``, ``request``, n, c, c0, then the
    step values of :data:`VIEW_LOCALS` the statements read, and (first stage) the budget."""

    function: SubsetFunction
    methods: Any
    """The :class:`~chunkproof.source.methods.SchedulerMethods` whose class and ``--set``
    values the stand-ins get."""
    locals: tuple[str, ...]
    running_only: bool = False
    """The running loop's statements at every c: ``request.num_computed_tokens`` is c."""

    def __call__(self, view: Any, c: int, n: int) -> int:
        return interpret(self.function, self.arguments(view, c, n), self.function.filename)

    def subset(self) -> SubsetFunction:
        return self.function

    def arguments(self, view: Any, c: Value, n: Value) -> list[Value]:
        from chunkproof.source.methods import standins

        methods = self.methods
        computed = c if self.running_only else view.computed
        scheduler, request = standins(
            view, computed, methods.cls, methods.overrides, methods.unmodelled
        )
        values: list[Value] = [scheduler, request, n, c, view.start]
        for name in self.locals:
            values.append(n if name in FIRST_STAGE_LOCALS else VIEW_LOCALS[name](view, c))
        return values


def stage_function(
    loader: ClassLoader,
    composition: Composition,
    segment: Segment,
    first: bool,
    running_only: bool = False,
) -> tuple[FunctionValue, tuple[str, ...]]:
    """The segment as a synthesized function of ``schedule()``'s module: the waiting loop's
    statements at c == c0, the running loop's otherwise (module docstring, point 5); its
    parameters after ``self, request, num_new_tokens, c, c0`` are the bound locals.
    ``running_only``: the running loop's statements at every c (the running-loop
    composition; :class:`ScheduleStage` then gives ``request.num_computed_tokens`` = c)."""
    line = (segment.running or segment.waiting)[0].line
    branches: list[list[ast.stmt]] = []
    params: list[str] = []
    constants: dict[str, ast.stmt] = {}
    loops = [
        ("waiting", segment.waiting, segment.zero_guard[1]),
        ("running", segment.running, segment.zero_guard[0]),
    ]
    for role, events, zero in loops[1:] if running_only else loops:
        body: list[ast.stmt] = []
        if zero:
            body.append(_parse_stmt(f"if {N} == 0:\n    return 0", line))
        body.extend(_guarded(event) for event in events)
        where = max((e.line for e in events), default=line)
        prelude = _bind(composition, role, where, body, first, params, constants)
        branches.append([*prelude, *body] or [ast.Pass()])
    role_test = _parse_expr(f"{C} == {START}", line)
    if running_only:
        body = [*constants.values(), *branches[0]]
    else:
        body = [*constants.values(), ast.If(role_test, branches[0], branches[1])]
    arguments = ["self", "request", N, C, START, *params]
    node = ast.FunctionDef(
        name=f"schedule_{segment.kind.replace('-', '_')}_L{line}",
        args=ast.arguments(
            posonlyargs=[],
            args=[ast.arg(p) for p in arguments],
            vararg=None,
            kwonlyargs=[],
            kw_defaults=[],
            kwarg=None,
            defaults=[],
        ),
        body=[*body, ast.Return(ast.Name(N, ast.Load()))],
        decorator_list=[],
        returns=None,
        type_comment=None,
        lineno=line,
        col_offset=0,
    )
    for child in ast.walk(node):
        if isinstance(child, (ast.stmt, ast.expr)) and not hasattr(child, "lineno"):
            child.lineno = line
    ast.fix_missing_locations(node)
    schedule = composition.schedule
    return (
        FunctionValue(node, schedule.rel, schedule.user, schedule.closure, schedule.owner),
        tuple(params),
    )


def _guarded(event: Event) -> ast.stmt:
    """The event's statement inside its guards; an exit or zero test returns 0."""
    stmt = copy.deepcopy(event.node)
    if event.kind in ("exit", "zero") and isinstance(stmt, ast.If):
        stmt.body = [ast.copy_location(ast.Return(ast.Constant(0)), stmt)]
    for test, polarity in reversed(event.guards):
        condition = copy.deepcopy(test)
        if not polarity:
            condition = ast.copy_location(ast.UnaryOp(ast.Not(), condition), test)
        stmt = ast.copy_location(ast.If(condition, [stmt], []), stmt)
    return stmt


def _bind(
    composition: Composition,
    role: str,
    line: int,
    body: list[ast.stmt],
    first: bool,
    params: list[str],
    constants: dict[str, ast.stmt],
) -> list[ast.stmt]:
    """Bind the locals ``body`` (statements of the ``role`` loop at ``line``) reads: step
    values become parameters (added to ``params``), constants assignments (``constants``), and
    other locals their definitions earlier in that loop or in the prologue, returned to run
    before ``body`` (module docstring, point 5)."""
    prelude: list[ast.stmt] = []
    defined = {"self", "request", N, C, START, "min", "max", "True", "False", "None"}
    pending = _free_names(body, defined)
    seen: set[str] = set()
    while pending:
        name = pending.pop(0)
        if name in seen or name in defined:
            continue
        seen.add(name)
        if name in FIRST_STAGE_LOCALS:
            if not first:
                raise PolicyError(
                    f"{composition.label}:{line}: a stage of schedule() after the first reads "
                    f"{name!r}; chunkproof passes the budget to the first stage only"
                )
            if name not in params:
                params.append(name)
        elif name in VIEW_LOCALS:
            if name not in params:
                params.append(name)
        elif name in CONSTANT_LOCALS:
            constants.setdefault(name, _parse_stmt(f"{name} = {CONSTANT_LOCALS[name]!r}", line))
        else:
            definitions = _reaching(composition, role, name, line)
            if not definitions:
                if _is_global(composition, name):
                    continue
                raise PolicyError(
                    f"{composition.label}:{line}: a stage of schedule() reads {name!r}, a local "
                    "chunkproof cannot bind (it is neither a model input nor defined by a plain "
                    "assignment earlier in the loop or in schedule())"
                )
            copies = [copy.deepcopy(d) for d in definitions]
            prelude = [*copies, *prelude]
            pending.extend(_free_names(copies, defined | {name}))
    return prelude


def _reaching(composition: Composition, role: str, name: str, line: int) -> list[ast.stmt]:
    """Definitions of local ``name`` before ``line`` in the ``role`` loop: its last plain
    assignment there, else the prologue's assignments (and ``if`` statements assigning it)."""
    loop = composition.loops[role]
    found = [
        node
        for node in ast.walk(loop)
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        and node.lineno < line
        and _assigns(node, name)
    ]
    if found:
        return [max(found, key=lambda node: node.lineno)]
    return _definitions(composition.prologue, name)


def _is_global(composition: Composition, name: str) -> bool:
    """A name of ``schedule()``'s module (a helper function), resolved with the stage."""
    return name not in {a.arg for a in composition.schedule.node.args.args} and not any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
        for n in ast.walk(composition.schedule.node)
    )


def _free_names(stmts: list[ast.stmt], defined: set[str]) -> list[str]:
    """Names the statements read before assigning them (in order of first read)."""
    order: list[str] = []
    assigned: set[str] = set(defined)
    for stmt in stmts:
        for node in ast.walk(stmt):
            loads = isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
            if loads and node.id not in assigned and node.id not in order:  # type: ignore[attr-defined]
                order.append(node.id)  # type: ignore[attr-defined]
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                assigned.add(node.id)
    return order


def _parse_stmt(text: str, line: int) -> ast.stmt:
    stmt = ast.parse(text).body[0]
    for node in ast.walk(stmt):
        if isinstance(node, (ast.stmt, ast.expr)):
            node.lineno = line
            node.end_lineno = line
    return stmt


def _parse_expr(text: str, line: int) -> ast.expr:
    expr = ast.parse(text, mode="eval").body
    for node in ast.walk(expr):
        if isinstance(node, (ast.stmt, ast.expr)):
            node.lineno = line
    return expr


# --- recognised stages -------------------------------------------------------------------------

_RUNNING_INIT = {
    "num_new_tokens = request.num_tokens_with_spec + request.num_output_placeholders - "
    "request.num_computed_tokens",
    "num_new_tokens = request.num_tokens_with_spec - request.num_computed_tokens",
}
_WAITING_INIT = {"num_new_tokens = request.num_tokens - num_computed_tokens"}
_BUDGETS = {
    "num_new_tokens = min(num_new_tokens, token_budget)",
    "num_new_tokens = min(num_new_tokens, token_budget, input_budget - draft_slots)",
    "num_new_tokens = min(num_new_tokens, request_token_budget)",
}
_SPLIT_RUNNING = {
    "num_new_tokens = self._mamba_block_aligned_split(request, num_new_tokens)",
}
_SPLIT_WAITING = {
    "num_new_tokens = self._mamba_block_aligned_split(request, num_new_tokens, "
    "num_new_local_computed_tokens, num_external_computed_tokens)",
    "num_new_tokens = self._mamba_block_aligned_split(request, num_new_tokens, "
    "num_new_local_computed_tokens, num_external_computed_tokens, "
    "num_uncached_common_prefix_tokens)",
}
_RESERVE_RUNNING = {
    "num_new_tokens = self._reserve_prefill_lookahead(request, request.num_computed_tokens, "
    "num_new_tokens)"
}
_RESERVE_WAITING = {
    "num_new_tokens = self._reserve_prefill_lookahead(request, num_computed_tokens, num_new_tokens)"
}


def recognised(segment: Segment, composition: Composition) -> str | None:
    """The built-in stage a segment is: ``cap_static``, ``cap_lone``, ``split`` or
    ``reservation`` (the call sites and guards every release has, guards true for the model);
    ``None`` for any other, which runs as its statements."""
    if any(not _guards_true(e) for e in (*segment.running, *segment.waiting)):
        return None
    if segment.kind == "cap":
        if (
            not composition.theta
            or not _cap_shape(segment.running, _RUNNING_INIT)
            or not (_cap_shape(segment.waiting, _WAITING_INIT))
        ):
            return None
        return "cap_static" if composition.theta == "static" else "cap_lone"
    if segment.kind in ANCHORS and len(segment.running) == 1 and len(segment.waiting) == 1:
        run, wait = (_text(segment.running[0]), _text(segment.waiting[0]))
        if segment.kind == "split" and run in _SPLIT_RUNNING and wait in _SPLIT_WAITING:
            return "split"
        if segment.kind == "reservation" and run in _RESERVE_RUNNING and wait in _RESERVE_WAITING:
            return "reservation"
    return None


def _text(event: Event) -> str:
    return ast.unparse(event.node)


def _guards_true(event: Event) -> bool:
    return all(_truth(test) is polarity for test, polarity in event.guards)


def _cap_shape(events: tuple[Event, ...], inits: set[str]) -> bool:
    """The initial chunk, one theta cap, the budget min (and an ``assert n > 0``), in order."""
    kinds = [e.kind for e in events]
    if kinds not in (["init", "theta", "budget"], ["init", "theta", "budget", "assert"]):
        return False
    if _text(events[0]) not in inits or _text(events[2]) not in _BUDGETS:
        return False
    return len(events) == 3 or _text(events[3]) == f"assert {N} > 0"


BUILTIN_CAPS = {
    "cap_static": builtin_stages.cap_static_threshold,
    "cap_lone": builtin_stages.cap_lone_request,
}


def effective_schedule(loader: ClassLoader, key: Any) -> FunctionValue | None:
    """The ``schedule()`` whose loops the policy class runs: the class's own (MRO), or, for a
    wrapper without the loops (a subclass's post-processing, a patch), the one it calls
    (``super().schedule()``, a captured original, ``Base.schedule(self)``); ``None`` when no
    class defines one."""
    value = loader.lookup(key, "schedule")
    seen: set[int] = set()
    while isinstance(value, FunctionValue):
        if id(value) in seen:
            break
        seen.add(id(value))
        label = loader.label(value)
        delegated = _delegated(loader, value, label)
        if _candidate_loops(value.node):
            if delegated is not None:
                raise PolicyError(_two_schedules(loader, value, delegated, label))
            return value
        if delegated is None:
            raise PolicyError(
                f"{label}:{value.node.lineno}: schedule() neither contains vLLM's scheduling "
                "loops nor calls another schedule(); chunkproof cannot read the composition "
                "from it (use --compose Cn to choose a built-in one)"
            )
        value = delegated
    return value if isinstance(value, FunctionValue) else None


def _two_schedules(
    loader: ClassLoader, own: FunctionValue, delegated: FunctionValue, label: str
) -> str:
    """The error for a ``schedule()`` that runs its own scheduling loops and also calls
    another ``schedule()`` (a pre-pass, then the base's): which of the two a request meets is
    decided at run time by state the model does not have (the queues, the pre-pass's own
    tests), so neither composition is the one every request runs; ``--compose`` checks the
    class's split and reservation in a built-in composition instead."""
    loops = ", ".join(str(loop.lineno) for loop in _candidate_loops(own.node))
    call = next(
        (
            node.lineno
            for node in ast.walk(own.node)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            in ("schedule", delegated.node.name)
        ),
        own.node.lineno,
    )
    owner = delegated.owner[1] + "." if delegated.owner else ""
    return (
        f"{label}:{own.node.lineno}: schedule() runs its own scheduling loops (line "
        f"{loops}) and also calls {owner}schedule() (line {call}); which of them schedules a "
        "request depends on run-time state chunkproof does not model, so it reads neither "
        "composition: give --compose Cn to check the class's split and reservation in a "
        "built-in composition (this schedule() is then not read)"
    )


def _delegated(loader: ClassLoader, fv: FunctionValue, label: str) -> FunctionValue | None:
    """The other ``schedule()`` a wrapper calls, if exactly one."""
    targets: dict[int, FunctionValue] = {}
    for call in ast.walk(fv.node):
        if not isinstance(call, ast.Call):
            continue
        func = call.func
        target: Any = None
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "schedule"
            and isinstance(func.value, ast.Call)
            and isinstance(func.value.func, ast.Name)
            and func.value.func.id == "super"
        ):
            target = loader.super_target(fv, "schedule", label, call.lineno)
        elif isinstance(func, ast.Name) and fv.user:
            target = loader._glue_lookup(fv, func.id)
        elif (
            isinstance(func, ast.Attribute)
            and func.attr == "schedule"
            and isinstance(func.value, ast.Name)
            and fv.user
        ):
            owner = loader._glue_lookup(fv, func.value.id)
            if isinstance(owner, ClassValue):
                target = loader.lookup(owner.key, "schedule")
        if (isinstance(target, FunctionValue) and target.node.name == "schedule") or (
            isinstance(target, FunctionValue) and _candidate_loops(target.node)
        ):
            targets[id(target)] = target
    if len(targets) > 1:
        raise PolicyError(f"{label}:{fv.node.lineno}: schedule() calls several schedule()s")
    return next(iter(targets.values()), None)
