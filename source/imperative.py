"""The policy subset extended for real code that keeps state: loops and mutable data, lane-wise.

The split and the reservation are pure functions of their inputs, so the policy subset
(:mod:`chunkproof.model.subset`) has no loops and no data but numbers. The encoder scheduling
of vLLM (``Scheduler._try_schedule_encoder_inputs``) and the ``EncoderCacheManager`` methods it
calls are not: they loop over a request's multimodal items and read and write sets, dicts and
lists. This module interprets that code, read from source as syntax trees (never compiled or
executed), over the same value domains (Python scalars, NumPy lanes, Z3 terms):

* statements: everything of the policy subset, plus ``for`` (over a tuple, ``enumerate``,
  ``range`` and the containers below), ``while``, ``break``, ``continue``, expression
  statements (calls), ``del`` of a dict entry, and assignment to a tuple of names, to an
  attribute of a stand-in object, or to a dict entry; a function may end without ``return``
  (it returns ``None``);
* expressions: subscripts, ``in``/``not in``, list/set/dict displays and single-loop
  comprehensions, ``lambda`` (as the ``key`` of ``bisect``), calls to ``len``, ``range``,
  ``enumerate``, ``set``, ``list``, ``dict``, ``int``, ``any``, ``OrderedDict`` and
  ``bisect.bisect_left``, and the container methods ``add``, ``append``, ``discard``,
  ``remove``, ``get``, ``setdefault``, ``pop`` and ``popitem``.

**Lanes.** Every value may differ between lanes (the states, budgets and configurations one
vectorised call covers, or the models of a Z3 term). Control flow is per lane: a ``break``,
``continue`` or ``return`` stops the lanes that take it. Each branch of an ``if`` and each pass
of a loop runs on its own copy of the variables, merged back lane-wise (``ite``) for the lanes
that ran it, and a ``break`` or ``continue`` keeps the variables of its lanes as they were
there, so a lane that left a loop keeps its values; writes to objects (stand-in attributes,
containers) change only the lanes that execute them. A variable holding different objects on
different lanes cannot be read. Containers hold, per key or element, a membership that is a
domain boolean (:class:`LaneSet`, :class:`LaneDict`, :class:`LaneList`); their keys must be the
same on every lane (strings, numbers, ``None``: the item identifiers and ids vLLM uses). A loop
runs its body once per possible element, each time for the lanes that have it, in order;
``range`` needs bounds it can bound (plain integers, arrays, or a :class:`Bounded` value). A
value that is ``None`` on some lanes and a number on others is a :class:`Maybe`. A ``while``
loop is unrolled until no lane still loops (a solver term is simplified to see that).

**Stand-in objects.** A :class:`~chunkproof.model.subset.SourceObject` is read data first,
then members of its class (so a stand-in's data can replace a property of the real class), and
an assignment to one of its attributes writes the lanes that execute it; a new attribute may be
created only on every lane (as ``__init__`` does).

**Crashes (SPEC P0).** As in the subset, plus a ``KeyError`` (a missing dict entry), an
``IndexError`` (a tuple index out of range) and ``popitem`` on an empty dict: the lanes that
raise stop there.

Nothing is ever imported from the code interpreted: ``bisect.bisect_left`` and ``OrderedDict``
are modelled here (the standard library's documented behaviour), every other call must reach a
syntax tree.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunkproof.model.errors import SubsetError
from chunkproof.model.subset import (
    _BINOPS,
    _CMPOPS,
    UNSET,
    BoundMember,
    Conflict,
    Domain,
    Interpreter,
    Member,
    SourceClass,
    SourceObject,
    StandInError,
    SubsetFunction,
    Value,
    _Frame,
    starred_arguments,
)

MAX_ITERATIONS = 4096
"""A ``while`` loop still running on some lane after this many iterations is an error."""


# -- values -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bounded:
    """An integer known to lie in [low, high] on every lane (``bisect_left``'s result: between
    0 and the list's length), so that ``range`` over it can be unrolled over Z3 terms."""

    value: Value
    low: int
    high: int


@dataclass(frozen=True)
class Maybe:
    """A value that is ``None`` on the lanes where ``present`` is false."""

    present: Value
    value: Value


@dataclass(frozen=True)
class StdlibName:
    """A standard-library module or name the code imports; only the names this module models
    can be used (``bisect``, ``bisect.bisect_left``, ``OrderedDict``)."""

    name: str


@dataclass(frozen=True)
class Closure:
    """A ``lambda`` and the variables it sees."""

    node: ast.Lambda
    env: Mapping[str, Value]
    func: SubsetFunction


@dataclass(frozen=True)
class Logger:
    """A module's logger (``logger = init_logger(__name__)``): logging changes nothing the
    scheduler decides, so every call on it does nothing and returns ``None``."""

    name: str


@dataclass(frozen=True)
class Method:
    """A container's method before its call."""

    owner: Any
    name: str


Key = str | int | bool | None | tuple[Any, ...]


def _key(value: Value, where: str) -> Key:
    """A container key: the same on every lane."""
    if isinstance(value, Bounded | Maybe | np.ndarray):
        raise SubsetError(f"{where}: a container key that differs between lanes")
    if isinstance(value, np.generic):
        return value.item()  # type: ignore[no-any-return]
    if value is None or isinstance(value, str | int | bool):
        return value
    if isinstance(value, tuple):
        return tuple(_key(v, where) for v in value)
    raise SubsetError(f"{where}: a container key that differs between lanes")


class LaneSet:
    """A set per lane: each key with its membership (a domain boolean)."""

    def __init__(self, members: dict[Key, Value] | None = None) -> None:
        self.members: dict[Key, Value] = dict(members or {})

    def entries(self) -> Iterator[tuple[Value, Value]]:
        """(element, membership) in insertion order."""
        yield from self.members.items()


class LaneDict:
    """A dict per lane (insertion-ordered like ``dict`` and ``OrderedDict``): each key with its
    presence (a domain boolean) and its value."""

    def __init__(self, entries: dict[Key, tuple[Value, Value]] | None = None) -> None:
        self.entries_: dict[Key, tuple[Value, Value]] = dict(entries or {})

    def entries(self) -> Iterator[tuple[Value, Value]]:
        """(key, presence) in insertion order."""
        for key, (present, _) in self.entries_.items():
            yield key, present


class LaneList:
    """A list per lane: the elements appended, each with the lanes it was appended on."""

    def __init__(self, items: list[tuple[Value, Value]] | None = None) -> None:
        self.items: list[tuple[Value, Value]] = list(items or [])

    def entries(self) -> Iterator[tuple[Value, Value]]:
        """(element, membership) in order."""
        yield from self.items


Container = LaneSet | LaneDict | LaneList


@dataclass(frozen=True)
class _Range:
    """The values ``range`` takes, each with the lanes that reach it."""

    elements: list[tuple[Value, Value]] = field(default_factory=list)


_SIMPLE = (str, type(None), tuple, SourceObject, BoundMember, SubsetFunction, Maybe, Bounded)
_SPECIAL = (StdlibName, Closure, Method, Logger, LaneSet, LaneDict, LaneList, _Range)


def is_domain(value: Value) -> bool:
    """Whether ``value`` is a number or boolean of some domain (not data of this module)."""
    return not isinstance(value, (*_SIMPLE, *_SPECIAL, Conflict))


def plain(value: Value) -> Value:
    """A :class:`Bounded` or :class:`Maybe` as the number it holds."""
    if isinstance(value, Bounded):
        return value.value
    if isinstance(value, Maybe):
        return value.value
    return value


# -- validation ---------------------------------------------------------------------------------

_ALLOWED = (
    ast.FunctionDef,
    ast.arguments,
    ast.arg,
    ast.Assign,
    ast.AnnAssign,
    ast.AugAssign,
    ast.If,
    ast.For,
    ast.While,
    ast.Break,
    ast.Continue,
    ast.Return,
    ast.Assert,
    ast.Raise,
    ast.Pass,
    ast.Expr,
    ast.Delete,
    ast.Constant,
    ast.Name,
    ast.Attribute,
    ast.Subscript,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.IfExp,
    ast.Call,
    ast.Tuple,
    ast.List,
    ast.Set,
    ast.Dict,
    ast.Lambda,
    ast.GeneratorExp,
    ast.ListComp,
    ast.SetComp,
    ast.comprehension,
    ast.keyword,
    ast.Load,
    ast.Store,
    ast.Del,
    ast.And,
    ast.Or,
    ast.Not,
    ast.USub,
    ast.Is,
    ast.IsNot,
    ast.In,
    ast.NotIn,
    *_BINOPS,
    *_CMPOPS,
)


def validate(func: SubsetFunction) -> None:
    """Reject every construct outside the extended subset (module docstring), naming file and
    line. The messages of ``assert`` and the exception of ``raise`` are never evaluated and so
    not inspected."""
    node = func.node
    if node.decorator_list or node.args.vararg or node.args.kwarg or node.args.posonlyargs:
        raise SubsetError(
            f"{func.where(node)}: {func.name}: decorators and */** parameters are outside the "
            "subset"
        )
    starred = starred_arguments(node)
    stack: list[ast.AST] = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        if id(child) not in starred:
            _check(func, child)
        if isinstance(child, ast.Raise):
            continue
        if isinstance(child, ast.Assert):
            stack.append(child.test)
            continue
        stack.extend(ast.iter_child_nodes(child))


def _check(func: SubsetFunction, child: ast.AST) -> None:
    where = func.where(child)
    if isinstance(child, ast.FunctionDef):
        raise SubsetError(f"{where}: a nested function is outside the subset")
    if not isinstance(child, _ALLOWED):
        raise SubsetError(f"{where}: {type(child).__name__} is outside the subset (in {func.name})")
    if isinstance(child, ast.For | ast.While) and child.orelse:
        raise SubsetError(f"{where}: a loop's else clause is outside the subset")
    if isinstance(child, ast.comprehension) and (child.is_async or len(child.ifs) > 1):
        raise SubsetError(f"{where}: a comprehension with more than one if is outside the subset")
    if (
        isinstance(child, ast.GeneratorExp | ast.ListComp | ast.SetComp)
        and len(child.generators) != 1
    ):
        raise SubsetError(f"{where}: only single-loop comprehensions are in the subset")
    if isinstance(child, ast.Lambda) and (
        child.args.vararg or child.args.kwarg or child.args.kwonlyargs or child.args.defaults
    ):
        raise SubsetError(f"{where}: only plain one-expression lambdas are in the subset")
    if isinstance(child, ast.Constant) and not isinstance(
        child.value, int | str | type(None) | bool
    ):
        raise SubsetError(f"{where}: constant {child.value!r} is outside the subset")
    if isinstance(child, ast.Name) and child.id.startswith("__"):
        raise SubsetError(f"{where}: the name {child.id!r} is outside the subset")
    if isinstance(child, ast.Attribute) and child.attr.startswith("__"):
        raise SubsetError(f"{where}: the attribute {child.attr!r} is outside the subset")
    if isinstance(child, ast.keyword) and child.arg is None:
        raise SubsetError(f"{where}: **keyword arguments are outside the subset")
    if isinstance(child, ast.Subscript) and isinstance(child.slice, ast.Slice):
        raise SubsetError(f"{where}: slices are outside the subset")
    if isinstance(child, ast.Assign | ast.AugAssign | ast.AnnAssign):
        targets = child.targets if isinstance(child, ast.Assign) else [child.target]
        if len(targets) != 1 or not _assignable(targets[0]):
            raise SubsetError(
                f"{where}: assignment to one name, a tuple of names, an attribute or an entry only"
            )


def _assignable(target: ast.expr) -> bool:
    if isinstance(target, ast.Name | ast.Attribute | ast.Subscript):
        return True
    return isinstance(target, ast.Tuple) and all(isinstance(t, ast.Name) for t in target.elts)


# -- the interpreter ----------------------------------------------------------------------------


@dataclass
class _Loop:
    """The lanes that left the current iteration by ``break`` or ``continue``, each with its
    variables at that point."""

    broken: list[tuple[Value, dict[str, Value]]] = field(default_factory=list)
    continued: list[tuple[Value, dict[str, Value]]] = field(default_factory=list)


MAX_DEPTH = 64


class ImperativeInterpreter(Interpreter):
    """Evaluates the extended subset (module docstring) over a domain."""

    def __init__(self, domain: Domain) -> None:
        super().__init__(domain)
        self.loops: list[_Loop] = []
        self.validated: set[int] = set()

    # -- calls ----------------------------------------------------------------------------------

    def call(
        self,
        func: SubsetFunction,
        args: list[Value],
        kwargs: Mapping[str, Value] | None = None,
        active: Value = True,
    ) -> Value:
        """Run ``func`` for the lanes ``active``; lanes that end without ``return`` return
        ``None``."""
        if id(func.node) not in self.validated:
            validate(func)
            self.validated.add(id(func.node))
        if self.depth >= MAX_DEPTH:
            raise SubsetError(f"{func.where(func.node)}: {func.name}: calls nest too deeply")
        if self.domain.truth(active) is False:
            return None
        self.depth += 1
        loops, self.loops = self.loops, []
        try:
            frame = _Frame(self._bind(func, args, dict(kwargs or {}), active), active)
            self._block(func, func.node.body, frame)
        finally:
            self.depth -= 1
            self.loops = loops
        if frame.result is UNSET:
            return None
        if self.domain.truth(frame.active) is not False:
            return self.merge(frame.active, None, frame.result)
        return frame.result

    def call_value(self, target: Value, args: list[Value], active: Value, where: str) -> Value:
        """Call ``target`` (a member bound to an object, a closure, a subset function)."""
        if isinstance(target, BoundMember):
            given = target.member.kind == "returns"  # a --set call value: any arguments
            bound = [] if target.member.kind == "staticmethod" else [target.obj]
            return self.call(
                target.member.function, bound if given else [*bound, *args], {}, active
            )
        if isinstance(target, Closure):
            return self._lambda(target, args, active)
        if isinstance(target, SubsetFunction):
            return self.call(target, args, {}, active)
        raise SubsetError(f"{where}: a call to something that is not code read from source")

    # -- merging lanes --------------------------------------------------------------------------

    def merge(self, cond: Value, then: Value, other: Value) -> Value:
        """Lane-wise ``then if cond else other`` for any value of this module."""
        d = self.domain
        if then is other:
            return then
        known = d.truth(cond)
        if known is True:
            return then
        if known is False:
            return other
        if is_domain(then) and is_domain(other):
            return d.ite(cond, then, other)
        if isinstance(then, Bounded) and isinstance(other, Bounded):
            return Bounded(
                d.ite(cond, then.value, other.value),
                min(then.low, other.low),
                max(then.high, other.high),
            )
        if isinstance(then, Bounded) or isinstance(other, Bounded):
            return self.merge(cond, plain(then), plain(other))
        if isinstance(then, tuple) and isinstance(other, tuple) and len(then) == len(other):
            return tuple(self.merge(cond, a, b) for a, b in zip(then, other, strict=True))
        if then is None or other is None or isinstance(then, Maybe) or isinstance(other, Maybe):
            return self._merge_maybe(cond, then, other)
        if isinstance(then, str) and then == other:
            return then
        if type(then) is type(other) and isinstance(then, LaneSet | LaneDict | LaneList):
            return self._merge_containers(cond, then, other)
        return Conflict(f"{_kind(then)} on some lanes and {_kind(other)} on others")

    def _merge_maybe(self, cond: Value, then: Value, other: Value) -> Value:
        d = self.domain

        def parts(v: Value) -> tuple[Value, Value]:
            if v is None:
                return False, None
            if isinstance(v, Maybe):
                return v.present, v.value
            return True, v

        p1, v1 = parts(then)
        p2, v2 = parts(other)
        if v1 is None and v2 is None:
            return None
        value = v2 if v1 is None else v1 if v2 is None else self.merge(cond, v1, v2)
        return Maybe(d.ite(cond, p1, p2) if p1 is not p2 else p1, value)

    def _merge_containers(self, cond: Value, then: Container, other: Container) -> Container:
        d = self.domain
        if isinstance(then, LaneList) and isinstance(other, LaneList):
            return LaneList(
                [(v, d.and_(cond, m)) for v, m in then.items]
                + [(v, d.and_(d.not_(cond), m)) for v, m in other.items]
            )
        if isinstance(then, LaneSet) and isinstance(other, LaneSet):
            keys = list(dict.fromkeys([*then.members, *other.members]))
            return LaneSet(
                {
                    k: d.ite(cond, then.members.get(k, False), other.members.get(k, False))
                    for k in keys
                }
            )
        assert isinstance(then, LaneDict) and isinstance(other, LaneDict)
        merged: dict[Key, tuple[Value, Value]] = {}
        for k in dict.fromkeys([*then.entries_, *other.entries_]):
            a = then.entries_.get(k)
            b = other.entries_.get(k)
            if a is None:
                assert b is not None
                merged[k] = (d.and_(d.not_(cond), b[0]), b[1])
            elif b is None:
                merged[k] = (d.and_(cond, a[0]), a[1])
            else:
                merged[k] = (d.ite(cond, a[0], b[0]), self.merge(cond, a[1], b[1]))
        return LaneDict(merged)

    # -- statements -----------------------------------------------------------------------------

    def _stmt(self, func: SubsetFunction, stmt: ast.stmt, frame: Any) -> None:
        d = self.domain
        if isinstance(stmt, ast.Assign):
            value = self._expr(func, stmt.value, frame.env, frame.active)
            self._assign(func, stmt.targets[0], value, frame)
        elif isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                value = self._expr(func, stmt.value, frame.env, frame.active)
                self._assign(func, stmt.target, value, frame)
        elif isinstance(stmt, ast.AugAssign):
            current = self._expr(func, _load(stmt.target), frame.env, frame.active)
            rhs = self._expr(func, stmt.value, frame.env, frame.active)
            op = _BINOPS[type(stmt.op)]
            value = self._binop(func, stmt, op, plain(current), plain(rhs), frame.active)
            self._assign(func, stmt.target, value, frame)
        elif isinstance(stmt, ast.Return):
            value = (
                None
                if stmt.value is None
                else self._expr(func, stmt.value, frame.env, frame.active)
            )
            if frame.result is UNSET:
                frame.result = value
            else:
                frame.result = self.merge(frame.active, value, frame.result)
            frame.active = False
        elif isinstance(stmt, ast.If):
            self._if(func, stmt, frame)
        elif isinstance(stmt, ast.For):
            self._for(func, stmt, frame)
        elif isinstance(stmt, ast.While):
            self._while(func, stmt, frame)
        elif isinstance(stmt, ast.Break | ast.Continue):
            if not self.loops:
                raise SubsetError(f"{func.where(stmt)}: break or continue outside a loop")
            loop = self.loops[-1]
            left = loop.broken if isinstance(stmt, ast.Break) else loop.continued
            left.append((frame.active, dict(frame.env)))
            frame.active = False
        elif isinstance(stmt, ast.Expr):
            if not (isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)):
                self._expr(func, stmt.value, frame.env, frame.active)
        elif isinstance(stmt, ast.Delete):
            for target in stmt.targets:
                self._delete(func, target, frame)
        elif isinstance(stmt, ast.Assert):
            ok = self._test(func, stmt.test, frame.env, frame.active)
            self._crash(func, stmt, d.and_(frame.active, d.not_(ok)), "assertion failed", frame)
        elif isinstance(stmt, ast.Raise):
            self._crash(func, stmt, frame.active, "raise", frame)
        elif not isinstance(stmt, ast.Pass):
            raise SubsetError(f"{func.where(stmt)}: {type(stmt).__name__} is outside the subset")

    def _assign(self, func: SubsetFunction, target: ast.expr, value: Value, frame: Any) -> None:
        """Write ``value`` on the lanes that execute the assignment."""
        active = frame.active
        if isinstance(target, ast.Name):
            frame.env[target.id] = value
        elif isinstance(target, ast.Tuple):
            values = self._unpack(func, target, value)
            for element, part in zip(target.elts, values, strict=True):
                self._assign(func, element, part, frame)
        elif isinstance(target, ast.Attribute):
            obj = self._expr(func, target.value, frame.env, active)
            if not isinstance(obj, SourceObject):
                raise SubsetError(
                    f"{func.where(target)}: assignment to an attribute of {_kind(obj)}"
                )
            name = target.attr
            if name in obj.attributes:
                obj.attributes[name] = self.merge(active, value, obj.attributes[name])
            elif self.domain.truth(active) is True:
                obj.attributes[name] = value
            else:
                raise StandInError(
                    f"{func.where(target)}: the code creates {obj.label}.{name} on some lanes only"
                )
        else:
            assert isinstance(target, ast.Subscript)
            owner = self._expr(func, target.value, frame.env, active)
            key = self._expr(func, target.slice, frame.env, active)
            if not isinstance(owner, LaneDict):
                raise SubsetError(f"{func.where(target)}: assignment to an entry of {_kind(owner)}")
            self._dict_write(owner, _key(key, func.where(target)), value, active)

    def _unpack(self, func: SubsetFunction, target: ast.Tuple, value: Value) -> tuple[Value, ...]:
        if isinstance(value, tuple) and len(value) == len(target.elts):
            return value
        raise SubsetError(
            f"{func.where(target)}: cannot unpack {_kind(value)} into {len(target.elts)} names"
        )

    def _delete(self, func: SubsetFunction, target: ast.expr, frame: Any) -> None:
        if not isinstance(target, ast.Subscript):
            raise SubsetError(f"{func.where(target)}: only `del d[key]` is in the subset")
        owner = self._expr(func, target.value, frame.env, frame.active)
        key = _key(self._expr(func, target.slice, frame.env, frame.active), func.where(target))
        if not isinstance(owner, LaneDict):
            raise SubsetError(f"{func.where(target)}: `del` of an entry of {_kind(owner)}")
        d = self.domain
        present = self._dict_present(owner, key)
        missing = d.and_(frame.active, d.not_(present))
        self._crash(func, target, missing, "KeyError", frame)
        if key in owner.entries_:
            p, v = owner.entries_[key]
            owner.entries_[key] = (d.and_(p, d.not_(frame.active)), v)

    def _for(self, func: SubsetFunction, stmt: ast.For, frame: Any) -> None:
        """One pass of the body per possible element, for the lanes that have it; each pass
        runs on its own copy of the variables, merged back for the lanes that ran it."""
        d = self.domain
        elements = self._iteration(func, stmt.iter, frame.env, frame.active)
        loop = _Loop()
        self.loops.append(loop)
        running = frame.active
        env = frame.env
        try:
            for value, member in elements:
                live = d.and_(running, member)
                if d.truth(live) is False:
                    continue
                sub = self._pass(func, stmt, loop, frame, env, live, value)
                done, env_after = self._finish_pass(loop, sub)
                env = self._merge_env(done, env_after, env)
                running = d.or_(d.and_(running, d.not_(member)), done)
        finally:
            self.loops.pop()
        self._leave(loop, frame, running, env)

    def _pass(
        self,
        func: SubsetFunction,
        stmt: ast.For | ast.While,
        loop: _Loop,
        frame: Any,
        env: dict[str, Value],
        live: Value,
        value: Value = None,
    ) -> _Frame:
        """One pass of a loop's body for the lanes ``live``, on a copy of ``env``."""
        sub = _Frame(dict(env), live)
        sub.result = frame.result
        loop.continued = []
        if isinstance(stmt, ast.For):
            self._assign(func, stmt.target, value, sub)
        self._block(func, stmt.body, sub)
        frame.result = sub.result
        return sub

    def _finish_pass(self, loop: _Loop, sub: _Frame) -> tuple[Value, dict[str, Value]]:
        """The lanes that go on after a pass (its end, or ``continue``) and their variables."""
        d = self.domain
        done = sub.active
        env = sub.env
        for mask, snapshot in loop.continued:
            done = d.or_(done, mask)
            env = self._merge_env(mask, snapshot, env)
        return done, env

    def _leave(self, loop: _Loop, frame: Any, running: Value, env: dict[str, Value]) -> None:
        """After a loop: the lanes that ran it to the end, and those that broke out, each with
        their variables."""
        d = self.domain
        active = running
        for mask, snapshot in loop.broken:
            env = self._merge_env(mask, snapshot, env)
            active = d.or_(active, mask)
        frame.env = env
        frame.active = active

    def _merge_env(
        self, cond: Value, then: dict[str, Value], other: dict[str, Value]
    ) -> dict[str, Value]:
        """Variables of ``then`` on the lanes ``cond``, of ``other`` elsewhere."""
        if self.domain.truth(cond) is True:
            return dict(then)
        merged = dict(other)
        for name, value in then.items():
            merged[name] = value if name not in other else self.merge(cond, value, other[name])
        return merged

    def _while(self, func: SubsetFunction, stmt: ast.While, frame: Any) -> None:
        """Unrolled until no lane loops any more (at most :data:`MAX_ITERATIONS` times)."""
        d = self.domain
        loop = _Loop()
        self.loops.append(loop)
        looping = frame.active
        left: Value = False
        env = frame.env
        try:
            for _ in range(MAX_ITERATIONS):
                cond = self._test(func, stmt.test, env, looping)
                live = d.and_(looping, cond)
                left = d.or_(left, d.and_(looping, d.not_(cond)))
                if self._decided(live) is False:
                    break
                sub = self._pass(func, stmt, loop, frame, env, live)
                looping, env_after = self._finish_pass(loop, sub)
                env = self._merge_env(looping, env_after, env)
                if self._decided(looping) is False:
                    break
            else:
                raise SubsetError(f"{func.where(stmt)}: the while loop does not end in time")
        finally:
            self.loops.pop()
        self._leave(loop, frame, left, env)

    def _decided(self, cond: Value) -> bool | None:
        """``truth``, simplifying a solver term first (a loop guard that no lane satisfies
        must be recognised as such to stop unrolling)."""
        known = self.domain.truth(cond)
        if known is not None or not hasattr(cond, "ctx"):
            return known
        import z3  # only symbolic terms have a ``ctx``

        return self.domain.truth(z3.simplify(cond))

    def _iteration(
        self, func: SubsetFunction, node: ast.expr, env: Mapping[str, Value], active: Value
    ) -> list[tuple[Value, Value]]:
        """The elements a ``for`` loop (or comprehension) visits, each with the lanes that
        have it, in order."""
        value = self._expr(func, node, env, active)
        return self._elements(func, node, value, active)

    def _elements(
        self, func: SubsetFunction, node: ast.AST, value: Value, active: Value
    ) -> list[tuple[Value, Value]]:
        if isinstance(value, _Range):
            return value.elements
        if isinstance(value, tuple):
            return [(v, True) for v in value]
        if isinstance(value, LaneSet | LaneList):
            return list(value.entries())
        if isinstance(value, LaneDict):
            return list(value.entries())
        if isinstance(value, Maybe) and isinstance(value.value, LaneSet | LaneDict | LaneList):
            d = self.domain
            return [(v, d.and_(value.present, m)) for v, m in value.value.entries()]
        raise SubsetError(f"{func.where(node)}: a loop over {_kind(value)}")

    # -- expressions ----------------------------------------------------------------------------

    def _expr(
        self, func: SubsetFunction, node: ast.expr, env: Mapping[str, Value], active: Value
    ) -> Value:
        d = self.domain
        if isinstance(node, ast.Subscript):
            owner = self._expr(func, node.value, env, active)
            index = self._expr(func, node.slice, env, active)
            return self._subscript(func, node, owner, index, active)
        if isinstance(node, ast.List):
            return LaneList([(self._expr(func, e, env, active), True) for e in node.elts])
        if isinstance(node, ast.Set):
            values = [_key(self._expr(func, e, env, active), func.where(node)) for e in node.elts]
            return LaneSet(dict.fromkeys(values, True))
        if isinstance(node, ast.Dict):
            entries: dict[Key, tuple[Value, Value]] = {}
            for k, v in zip(node.keys, node.values, strict=True):
                if k is None:
                    raise SubsetError(f"{func.where(node)}: ** in a dict display")
                key = _key(self._expr(func, k, env, active), func.where(node))
                entries[key] = (True, self._expr(func, v, env, active))
            return LaneDict(entries)
        if isinstance(node, ast.Lambda):
            return Closure(node, dict(env), func)
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp):
            return self._comprehension(func, node, env, active)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return self._test(func, node, env, active)
        if isinstance(node, ast.IfExp):
            cond = self._test(func, node.test, env, active)
            known = d.truth(cond)
            if known is not None:
                return self._expr(func, node.body if known else node.orelse, env, active)
            then = self._expr(func, node.body, env, d.and_(active, cond))
            other = self._expr(func, node.orelse, env, d.and_(active, d.not_(cond)))
            return self.merge(cond, then, other)
        if isinstance(node, ast.BinOp):
            left = plain(self._expr(func, node.left, env, active))
            right = plain(self._expr(func, node.right, env, active))
            return self._binop(func, node, _BINOPS[type(node.op)], left, right, active)
        if isinstance(node, ast.UnaryOp):
            return d.neg(plain(self._expr(func, node.operand, env, active)))
        return super()._expr(func, node, env, active)

    def _truthy(self, value: Value) -> Value:
        """Python's truth of ``value`` as a domain boolean (SPEC Q1), for this module's values
        too: a container is true where it has a member, an object always."""
        d = self.domain
        if isinstance(value, Bounded):
            return super()._truthy(value.value)
        if isinstance(value, Maybe):
            return d.and_(value.present, self._truthy(value.value))
        if isinstance(value, LaneSet | LaneDict | LaneList):
            found: Value = False
            for _, member in value.entries():
                found = d.or_(found, member)
            return found
        if isinstance(value, SourceObject | BoundMember | SubsetFunction):
            return True
        return super()._truthy(value)

    def _compare(
        self, func: SubsetFunction, node: ast.Compare, env: Mapping[str, Value], active: Value
    ) -> Value:
        d = self.domain
        left = self._expr(func, node.left, env, active)
        result: Value = True
        live = active
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = self._expr(func, right_node, env, live)
            if isinstance(op, ast.In | ast.NotIn):
                test = self._contains(func, node, right, left)
                if isinstance(op, ast.NotIn):
                    test = d.not_(test)
            elif isinstance(op, ast.Is | ast.IsNot):
                test = self._identical(left, right)
                if isinstance(op, ast.IsNot):
                    test = d.not_(test)
            elif type(op) in _CMPOPS:
                a, b = plain(left), plain(right)
                if isinstance(a, str) or isinstance(b, str) or a is None or b is None:
                    if not (is_domain(a) or is_domain(b)):
                        test = (a == b) if isinstance(op, ast.Eq) else (a != b)
                        if not isinstance(op, ast.Eq | ast.NotEq):
                            raise SubsetError(f"{func.where(node)}: ordering of text or None")
                    else:
                        test = isinstance(op, ast.NotEq)
                else:
                    test = d.binop(_CMPOPS[type(op)], a, b)
            else:
                raise SubsetError(f"{func.where(node)}: comparison outside the subset")
            result = d.and_(result, test)
            live = d.and_(live, test)
            left = right
        return result

    def _identical(self, left: Value, right: Value) -> Value:
        """``left is right`` where one side is ``None`` (or the same object)."""
        if right is None and isinstance(left, Maybe):
            return self.domain.not_(left.present)
        if left is None and isinstance(right, Maybe):
            return self.domain.not_(right.present)
        return left is right

    def _contains(self, func: SubsetFunction, node: ast.AST, container: Value, key: Value) -> Value:
        """``key in container``."""
        d = self.domain
        if isinstance(container, Maybe):
            return d.and_(container.present, self._contains(func, node, container.value, key))
        if isinstance(container, tuple):
            found: Value = False
            for element in container:
                found = d.or_(found, self._equal(element, key))
            return found
        if isinstance(container, LaneDict | LaneSet | LaneList):
            if isinstance(container, LaneList) or not _keyable(key):
                found = False
                for element, member in container.entries():
                    found = d.or_(found, d.and_(member, self._equal(element, key)))
                return found
            k = _key(key, func.where(node))
            if isinstance(container, LaneSet):
                return container.members.get(k, False)
            return self._dict_present(container, k)
        raise SubsetError(f"{func.where(node)}: `in` on {_kind(container)}")

    def _equal(self, a: Value, b: Value) -> Value:
        a, b = plain(a), plain(b)
        if is_domain(a) and is_domain(b):
            return self.domain.binop("==", a, b)
        return a == b if type(a) is type(b) else False

    def _subscript(
        self, func: SubsetFunction, node: ast.AST, owner: Value, index: Value, active: Value
    ) -> Value:
        d = self.domain
        if isinstance(owner, Maybe):
            owner = owner.value
        if isinstance(owner, tuple):
            i = plain(index)
            if not isinstance(i, int) or isinstance(i, bool):
                raise SubsetError(f"{func.where(node)}: a tuple index that differs between lanes")
            if -len(owner) <= i < len(owner):
                return owner[i]
            self.domain.crash(active, f"{func.where(node)}: IndexError in {func.name}")
            return 0
        if isinstance(owner, LaneDict):
            key = _key(index, func.where(node))
            present = self._dict_present(owner, key)
            missing = d.and_(active, d.not_(present))
            if d.truth(missing) is not False:
                d.crash(missing, f"{func.where(node)}: KeyError in {func.name}")
            entry = owner.entries_.get(key)
            return 0 if entry is None else entry[1]
        if isinstance(owner, LaneList):
            raise SubsetError(f"{func.where(node)}: indexing a list built by the code")
        raise SubsetError(f"{func.where(node)}: a subscript of {_kind(owner)}")

    def _comprehension(
        self, func: SubsetFunction, node: ast.AST, env: Mapping[str, Value], active: Value
    ) -> Value:
        """A list or set comprehension, or a generator (as a list: ``any`` consumes it)."""
        d = self.domain
        assert isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp)
        comp = node.generators[0]
        if not isinstance(comp.target, ast.Name):
            raise SubsetError(f"{func.where(node)}: a comprehension needs one plain loop variable")
        items: list[tuple[Value, Value]] = []
        for value, member in self._iteration(func, comp.iter, env, active):
            scope = {**env, comp.target.id: value}
            keep = d.and_(active, member)
            for cond in comp.ifs:
                keep = d.and_(keep, self._test(func, cond, scope, keep))
            if d.truth(keep) is False:
                continue
            items.append((self._expr(func, node.elt, scope, keep), keep))
        if isinstance(node, ast.SetComp):
            members: dict[Key, Value] = {}
            for value, keep in items:
                k = _key(value, func.where(node))
                members[k] = d.or_(members.get(k, False), keep)
            return LaneSet(members)
        return LaneList(items)

    def _lambda(self, closure: Closure, args: list[Value], active: Value) -> Value:
        params = [a.arg for a in closure.node.args.args]
        if len(params) != len(args):
            raise SubsetError(f"{closure.func.where(closure.node)}: lambda called with {len(args)}")
        scope = {**closure.env, **dict(zip(params, args, strict=True))}
        return self._expr(closure.func, closure.node.body, scope, active)

    # -- names and attributes -------------------------------------------------------------------

    def _name(
        self, func: SubsetFunction, node: ast.AST, name: str, env: Mapping[str, Value]
    ) -> Value:
        if name in env:
            value = env[name]
            if isinstance(value, Conflict):
                raise SubsetError(f"{func.where(node)}: {name!r} holds {value.what}")
            return value
        if name in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[name]
        if name in func.namespace:
            value = func.namespace[name]
            reason = getattr(value, "reason", None)
            if isinstance(reason, str):
                raise SubsetError(f"{func.where(node)}: {reason}")
            return value
        if name in BUILTINS:
            return StdlibName(name)
        raise SubsetError(f"{func.where(node)}: unknown name {name!r} in {func.name}")

    def _attribute(
        self, func: SubsetFunction, node: ast.Attribute, base: Value, active: Value
    ) -> Value:
        if isinstance(base, Maybe):
            base = base.value
        if isinstance(base, SourceObject):
            if node.attr in base.attributes:
                value = base.attributes[node.attr]
                if isinstance(value, Conflict):
                    raise SubsetError(f"{func.where(node)}: {node.attr!r} holds {value.what}")
                return value
            member = base.cls.members.get(node.attr) if base.cls else None
            if member is None:
                return base.read(node.attr)
            if member.kind == "property":
                return self.call(member.function, [base], active=active)
            return BoundMember(base, member)
        if isinstance(base, LaneSet | LaneDict | LaneList):
            if node.attr not in _METHODS[type(base)]:
                raise SubsetError(f"{func.where(node)}: {node.attr!r} of {_kind(base)}")
            return Method(base, node.attr)
        if isinstance(base, Logger):
            return Method(base, node.attr)
        if isinstance(base, StdlibName):
            qualified = f"{base.name}.{node.attr}"
            if qualified not in MODELLED:
                raise SubsetError(
                    f"{func.where(node)}: {qualified} is a standard-library name this "
                    "interpreter does not model"
                )
            return StdlibName(qualified)
        return super()._attribute(func, node, base, active)

    # -- calls ----------------------------------------------------------------------------------

    def _call(
        self, func: SubsetFunction, node: ast.Call, env: Mapping[str, Value], active: Value
    ) -> Value:
        if isinstance(node.func, ast.Attribute):
            target = self._expr(func, node.func, env, active)
        elif isinstance(node.func, ast.Name):
            name = node.func.id
            if name in ("min", "max", "float") and name not in env and name not in func.namespace:
                return super()._call(func, node, env, active)
            target = self._name(func, node.func, name, env)
        else:
            raise SubsetError(f"{func.where(node)}: a call outside the subset")
        if isinstance(target, StdlibName) and target.name == "any" and len(node.args) == 1:
            values = self._expr(func, node.args[0], env, active)
            return self._any(func, node, values, active)
        if isinstance(target, BoundMember):
            return self.bound_call(func, node, target, env, active)
        args = self._arguments(func, node, env, active)
        kwargs = self._keywords(func, node, env, active)
        if isinstance(target, Method) and isinstance(target.owner, Logger):
            return None
        if isinstance(target, Method):
            return self._method(func, node, target, args, kwargs, active)
        if isinstance(target, StdlibName):
            return self._builtin(func, node, target.name, args, kwargs, active)
        if isinstance(target, SubsetFunction):
            return self.call(target, args, kwargs, active)
        if isinstance(target, Closure) and not kwargs:
            return self._lambda(target, args, active)
        raise SubsetError(
            f"{func.where(node)}: call to {ast.unparse(node.func)!r}, which is not code read "
            "from source"
        )

    def _any(self, func: SubsetFunction, node: ast.AST, values: Value, active: Value) -> Value:
        d = self.domain
        found: Value = False
        for value, member in self._elements(func, node, values, active):
            found = d.or_(found, d.and_(member, self._truthy(value)))
        return found

    def _builtin(
        self,
        func: SubsetFunction,
        node: ast.AST,
        name: str,
        args: list[Value],
        kwargs: dict[str, Value],
        active: Value,
    ) -> Value:
        d = self.domain
        where = func.where(node)
        if name in ("set", "list") and not kwargs and len(args) <= 1:
            if not args:
                return LaneSet() if name == "set" else LaneList()
            elements = self._elements(func, node, args[0], active)
            if name == "list":
                return LaneList(elements)
            members: dict[Key, Value] = {}
            for value, member in elements:
                k = _key(value, where)
                members[k] = d.or_(members.get(k, False), member)
            return LaneSet(members)
        if name in ("dict", "collections.OrderedDict", "OrderedDict") and not args and not kwargs:
            return LaneDict()
        if name == "len" and len(args) == 1:
            return self._len(func, node, args[0])
        if name == "int" and len(args) == 1 and not kwargs:
            value = plain(args[0])
            if isinstance(value, str) or value is None:
                raise SubsetError(f"{where}: int() of {_kind(value)}")
            return value
        if name == "enumerate" and len(args) == 1 and not kwargs:
            elements = self._elements(func, node, args[0], active)
            if not all(d.truth(m) is True for _, m in elements):
                raise SubsetError(f"{where}: enumerate over a container built by the code")
            return tuple((i, v) for i, (v, _) in enumerate(elements))
        if name == "range" and 1 <= len(args) <= 2 and not kwargs:
            low, high = (0, args[0]) if len(args) == 1 else (args[0], args[1])
            return self._range(where, low, high, active)
        if name == "bisect.bisect_left" and len(args) == 2 and set(kwargs) <= {"key"}:
            return self._bisect_left(func, node, args[0], args[1], kwargs.get("key"), active)
        raise SubsetError(f"{where}: {name}() as called here is outside the subset")

    def _len(self, func: SubsetFunction, node: ast.AST, value: Value) -> Value:
        d = self.domain
        if isinstance(value, tuple | str):
            return len(value)
        if isinstance(value, LaneSet | LaneDict | LaneList):
            total: Value = 0
            for _, member in value.entries():
                total = d.binop("+", total, d.ite(member, 1, 0))
            return total
        raise SubsetError(f"{func.where(node)}: len() of {_kind(value)}")

    def _range(self, where: str, low: Value, high: Value, active: Value) -> _Range:
        """``range(low, high)`` as the values it can take, each with the lanes that reach it."""
        d = self.domain
        bounds = [_bounds(v, active) for v in (low, high)]
        if any(b is None for b in bounds):
            raise SubsetError(f"{where}: range() with bounds this interpreter cannot bound")
        (lo_min, _), (_, hi_max) = bounds  # type: ignore[misc]
        elements = []
        a, b = plain(low), plain(high)
        for i in range(lo_min, hi_max):
            member = d.and_(d.binop("<=", a, i), d.binop("<", i, b))
            elements.append((i, member))
        return _Range(elements)

    def _bisect_left(
        self,
        func: SubsetFunction,
        node: ast.AST,
        sequence: Value,
        x: Value,
        key: Value,
        active: Value,
    ) -> Value:
        """``bisect.bisect_left(a, x, key=k)`` on a list sorted by ``k`` (its documented
        precondition, which vLLM's sorted, non-overlapping features meet): the number of
        elements whose key is below ``x``."""
        d = self.domain
        if not isinstance(sequence, tuple):
            raise SubsetError(f"{func.where(node)}: bisect over {_kind(sequence)}")
        count: Value = 0
        for element in sequence:
            k = (
                element
                if key is None
                else self.call_value(key, [element], active, func.where(node))
            )
            count = d.binop("+", count, d.ite(d.binop("<", plain(k), plain(x)), 1, 0))
        if isinstance(count, int):
            return count
        return Bounded(count, 0, len(sequence))

    def _method(
        self,
        func: SubsetFunction,
        node: ast.AST,
        method: Method,
        args: list[Value],
        kwargs: dict[str, Value],
        active: Value,
    ) -> Value:
        d = self.domain
        where = func.where(node)
        owner, name = method.owner, method.name
        if isinstance(owner, LaneSet):
            if name == "add" and len(args) == 1:
                k = _key(args[0], where)
                owner.members[k] = d.or_(owner.members.get(k, False), active)
                return None
            if name in ("discard", "remove") and len(args) == 1:
                k = _key(args[0], where)
                current = owner.members.get(k, False)
                if name == "remove":
                    missing = d.and_(active, d.not_(current))
                    if d.truth(missing) is not False:
                        d.crash(missing, f"{where}: KeyError in {func.name}")
                if k in owner.members:
                    owner.members[k] = d.and_(current, d.not_(active))
                return None
        if isinstance(owner, LaneList) and name == "append" and len(args) == 1:
            owner.items.append((args[0], active))
            return None
        if isinstance(owner, LaneDict):
            return self._dict_method(func, node, owner, name, args, kwargs, active)
        raise SubsetError(f"{where}: {name}() of {_kind(owner)} as called here")

    def _dict_method(
        self,
        func: SubsetFunction,
        node: ast.AST,
        owner: LaneDict,
        name: str,
        args: list[Value],
        kwargs: dict[str, Value],
        active: Value,
    ) -> Value:
        d = self.domain
        where = func.where(node)
        if name == "popitem" and not args and set(kwargs) <= {"last"}:
            if kwargs.get("last", True) is not False:
                raise SubsetError(f"{where}: popitem() from the end is outside the subset")
            return self._popitem(func, node, owner, active)
        if not args:
            raise SubsetError(f"{where}: {name}() without a key")
        k = _key(args[0], where)
        present = self._dict_present(owner, k)
        entry = owner.entries_.get(k)
        if name == "get" and len(args) <= 2 and not kwargs:
            default = args[1] if len(args) == 2 else None
            if entry is None:
                return default
            return self._present_or(present, entry[1], default)
        if name == "setdefault" and len(args) == 2 and not kwargs:
            self._dict_write(owner, k, args[1], d.and_(active, d.not_(present)))
            return owner.entries_[k][1]
        if name == "pop" and len(args) in (1, 2) and not kwargs:
            if len(args) == 1:
                missing = d.and_(active, d.not_(present))
                if d.truth(missing) is not False:
                    d.crash(missing, f"{where}: KeyError in {func.name}")
            value = (
                (args[1] if len(args) == 2 else 0)
                if entry is None
                else self._present_or(present, entry[1], args[1] if len(args) == 2 else 0)
            )
            if entry is not None:
                owner.entries_[k] = (d.and_(entry[0], d.not_(active)), entry[1])
            return value
        raise SubsetError(f"{where}: {name}() of a dict as called here")

    def _present_or(self, present: Value, value: Value, default: Value) -> Value:
        """``value`` where the entry is present, else ``default`` (a read-only view when the
        default is an empty collection)."""
        d = self.domain
        known = d.truth(present)
        if known is True:
            return value
        if known is False:
            return default
        if default is None:
            return Maybe(present, value)
        if (isinstance(default, tuple) and not default) or (
            isinstance(default, LaneSet | LaneDict | LaneList) and not list(default.entries())
        ):
            if isinstance(value, LaneSet):
                return LaneSet({k: d.and_(present, m) for k, m in value.members.items()})
            if isinstance(value, LaneDict):
                return LaneDict(
                    {k: (d.and_(present, p), v) for k, (p, v) in value.entries_.items()}
                )
            if isinstance(value, LaneList):
                return LaneList([(v, d.and_(present, m)) for v, m in value.items])
        return self.merge(present, value, default)

    def _popitem(
        self, func: SubsetFunction, node: ast.AST, owner: LaneDict, active: Value
    ) -> Value:
        """``popitem(last=False)``: the first entry, which must be the same on every live
        lane; on an empty dict a ``KeyError``."""
        d = self.domain
        for key, (present, value) in owner.entries_.items():
            here = d.and_(active, present)
            if self._decided(here) is False:
                continue
            if self._decided(d.and_(active, d.not_(present))) is not False:
                raise SubsetError(
                    f"{func.where(node)}: popitem() whose first entry differs between lanes"
                )
            owner.entries_[key] = (d.and_(present, d.not_(active)), value)
            return (key, value)
        d.crash(active, f"{func.where(node)}: KeyError in {func.name}")
        return (None, 0)

    def _dict_present(self, owner: LaneDict, key: Key) -> Value:
        entry = owner.entries_.get(key)
        return False if entry is None else entry[0]

    def _dict_write(self, owner: LaneDict, key: Key, value: Value, active: Value) -> None:
        d = self.domain
        if d.truth(active) is False:
            return
        entry = owner.entries_.get(key)
        if entry is None:
            owner.entries_[key] = (active, value)
            return
        present, old = entry
        owner.entries_[key] = (d.or_(present, active), self.merge(active, value, old))


def _bounds(value: Value, active: Value) -> tuple[int, int] | None:
    """Least and greatest value of ``value`` on the live lanes, if known."""
    if isinstance(value, Bounded):
        return value.low, value.high
    if isinstance(value, bool):
        return int(value), int(value)
    if isinstance(value, int | np.integer):
        return int(value), int(value)
    if isinstance(value, np.ndarray):
        lanes = (
            value
            if not isinstance(active, np.ndarray)
            else value[np.broadcast_to(active, value.shape)]
        )
        if lanes.size == 0:
            return 0, 0
        return int(lanes.min()), int(lanes.max())
    return None


def _keyable(value: Value) -> bool:
    return value is None or isinstance(value, str | int | bool | tuple)


def _load(target: ast.expr) -> ast.expr:
    """The target of an augmented assignment, read."""
    node = ast.fix_missing_locations(ast.copy_location(_as_load(target), target))
    return node


def _as_load(target: ast.expr) -> ast.expr:
    if isinstance(target, ast.Name):
        return ast.Name(target.id, ast.Load())
    if isinstance(target, ast.Attribute):
        return ast.Attribute(target.value, target.attr, ast.Load())
    if isinstance(target, ast.Subscript):
        return ast.Subscript(target.value, target.slice, ast.Load())
    raise SubsetError("an augmented assignment to something other than a name or attribute")


def _kind(value: Value) -> str:
    if value is None:
        return "None"
    if isinstance(value, SourceObject):
        return f"the stand-in {value.label}"
    if isinstance(value, LaneSet):
        return "a set"
    if isinstance(value, LaneDict):
        return "a dict"
    if isinstance(value, LaneList):
        return "a list"
    if isinstance(value, tuple):
        return "a tuple"
    if isinstance(value, str):
        return "text"
    if isinstance(value, Maybe):
        return "a value that may be None"
    return "a number"


_METHODS: dict[type, frozenset[str]] = {
    LaneSet: frozenset({"add", "discard", "remove"}),
    LaneList: frozenset({"append"}),
    LaneDict: frozenset({"get", "setdefault", "pop", "popitem"}),
}

BUILTINS = frozenset({"set", "list", "dict", "len", "int", "enumerate", "range", "any"})
"""Builtins the code may call (``min``/``max`` come from the policy subset)."""

MODELLED = frozenset({"bisect.bisect_left", "collections.OrderedDict"})
"""Standard-library names this module models (module docstring)."""


def stdlib_value(module: str, name: str | None) -> Value:
    """What ``import module`` / ``from module import name`` binds for the interpreter: a
    modelled name, or ``None`` when the name is not modelled."""
    if name is None:
        return StdlibName(module) if any(m.startswith(module + ".") for m in MODELLED) else None
    qualified = f"{module}.{name}"
    if qualified in MODELLED:
        return StdlibName("OrderedDict" if name == "OrderedDict" else qualified)
    return None


def run(
    domain: Domain,
    func: SubsetFunction,
    args: list[Value],
    prelude: Callable[[ImperativeInterpreter], None] | None = None,
) -> Value:
    """Interpret ``func`` on ``args`` over ``domain`` (crashes go to ``domain.crash``), after
    ``prelude`` (which may run other code on the same interpreter)."""
    interpreter = ImperativeInterpreter(domain)
    if prelude is not None:
        prelude(interpreter)
    return interpreter.call(func, args)


__all__ = [
    "BUILTINS",
    "MODELLED",
    "Bounded",
    "Closure",
    "ImperativeInterpreter",
    "LaneDict",
    "LaneList",
    "LaneSet",
    "Maybe",
    "Member",
    "SourceClass",
    "StdlibName",
    "is_domain",
    "plain",
    "run",
    "stdlib_value",
    "validate",
]
