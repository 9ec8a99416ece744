"""The policy subset: parse a plain Python function once and evaluate it over any value domain.

A policy stage is written once, as an ordinary Python function in this subset:

* statements: assignment to a name (plain, annotated or augmented), ``if``/``elif``/``else``,
  ``return``, ``assert``, ``raise`` (its exception expression is never evaluated), ``pass`` and
  a docstring;
* expressions: integer, string and ``None`` constants, names, attribute reads (``cfg.block``,
  ``self.cache_config.block_size``), ``+ - * // %``, unary ``-`` and ``not``, comparisons
  (chained too; ``is``/``is not`` only against ``None``, decided concretely since no domain
  value is ``None``), ``and``/``or``, ``x if c else y``, tuples, calls to helper functions
  written in the same subset (inlined), calls to members of a :class:`SourceObject` (methods,
  static methods; properties are read), and ``min``/``max`` over arguments or over a generator
  with an ``if`` filter and a ``default=``;
* a starred argument ``f(*xs)``, ``min(*xs)`` whose value is a tuple (its elements are the
  arguments, as in Python);
* ``float("inf")`` and ``float("-inf")`` (:class:`Infinity`), in the only places where their
  value is exact on every domain without a float: comparisons with integers (an integer is
  always below ``inf``, so ``n < float("inf")`` is the constant ``True``), ``min``/``max``
  (``min(n, float("inf"))`` is ``n``), unary minus, truth (true), ``is None``, and as a value
  passed around; arithmetic on it, returning it as a chunk, and a variable that is infinite
  on some lanes and an integer on others are one :class:`SubsetError` naming the line (SPEC
  Q1: the forms never approximate infinity by a large integer).

The *vectorised* and *symbolic* forms of a function come from :class:`Interpreter`, which runs
the syntax tree over a :class:`Domain`: NumPy arrays (:mod:`chunkproof.model.vectorised`),
Python scalars (:mod:`chunkproof.model.concrete`) or Z3 terms. Branches whose condition is not
a plain ``bool`` run both ways and merge their variables with ``ite``; an early ``return`` is
recorded per lane.

**Types.** Arithmetic, orderings, unary minus, ``min``/``max`` and the value a policy returns
need integers or booleans of the domain (:meth:`Domain.number`); strings and ``None`` only
compare with ``==``/``!=`` (as Python does) and ``is None``. Anything else (a string added to a
number, ``None < n``, a returned tuple) is a one-line :class:`SubsetError` naming file and line,
never a traceback. Every domain bounds plain integers
(:data:`~chunkproof.model.errors.MAX_BITS`).

**Python's meaning (SPEC Q1).** Every form computes what CPython computes: ``a and b`` is ``b``
on the lanes where ``a`` is true and ``a`` elsewhere (``or`` the other way round), so it yields
an operand, not a boolean; a condition (``if``, ``x if c else y``, ``assert``, ``not``, a
generator's filter) takes an integer's truth (non-zero); booleans are the integers 0 and 1 in
arithmetic, orderings, ``min``/``max`` and a policy's result. A value the array and solver
forms cannot hold lane-wise (a string on some lanes and a number on others, from ``x or "s"``
or from the two branches of an ``if``) is a :class:`SubsetError` where it is read, naming the
line.

**Crashes (SPEC P0).** A lane that fails an ``assert``, reaches a ``raise`` or divides by zero
while it is live is a crash: the interpreter reports the condition to the domain
(:meth:`Domain.crash`) and the lane stops there, as Python would stop. ``and``/``or`` and
``x if c else y`` evaluate their operands only on the lanes Python would evaluate them on.

**Nothing else runs.** The interpreter never calls a function it was not given as a syntax tree
(:class:`SubsetFunction`), except ``min``/``max`` and the trusted functions of chunkproof's own
built-in policies, which it parses from their source. Code read from a user's file becomes
:class:`SubsetFunction` objects and :class:`SourceObject` stand-ins without being compiled or
executed (:mod:`chunkproof.source.functions`).
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from chunkproof.model.errors import SubsetError
from chunkproof.model.own_source import own_source

Value = Any
"""A value of some domain: a Python int/bool, an array, a solver term, or a tuple of those."""


class Domain(Protocol):
    """The operations the interpreter needs from a value domain."""

    def truth(self, cond: Value) -> bool | None:
        """``True``/``False`` when ``cond`` is known to be constant, else ``None``."""

    def number(self, value: Value) -> bool:
        """Whether ``value`` is an integer or a boolean of this domain (arithmetic, ordering,
        ``min``/``max`` and a policy's result need one)."""

    def truthy(self, value: Value) -> Value:
        """Python's truth of a number of this domain, as a domain boolean: an integer is true
        where it is not 0 (SPEC Q1)."""

    def ite(self, cond: Value, then: Value, other: Value) -> Value:
        """Lane-wise ``then if cond else other``."""

    def binop(self, op: str, left: Value, right: Value) -> Value:
        """``+ - * // %`` and the comparisons ``< <= > >= == !=``."""

    def and_(self, left: Value, right: Value) -> Value:
        """Conjunction of two domain booleans (the interpreter's lane masks and conditions;
        Python's ``and`` on values is :meth:`Interpreter._bool_op`)."""

    def or_(self, left: Value, right: Value) -> Value:
        """Disjunction of two domain booleans."""

    def not_(self, value: Value) -> Value:
        """Negation of a domain boolean."""

    def neg(self, value: Value) -> Value:
        """Integer negation."""

    def minimum(self, left: Value, right: Value) -> Value:
        """Lane-wise ``min``."""

    def maximum(self, left: Value, right: Value) -> Value:
        """Lane-wise ``max``."""

    def crash(self, cond: Value, where: str) -> None:
        """The lanes where ``cond`` holds raise at ``where`` (``file:line: what``), SPEC P0."""


class FoldingLogic:
    """``and``/``or`` that fold operands known to be constant; a domain supplies
    :meth:`constant` (a plain bool, or None for a lane-wise or symbolic value) and the lane-wise
    :meth:`conjoin` and :meth:`disjoin`."""

    def constant(self, value: Value) -> bool | None:
        raise NotImplementedError

    def conjoin(self, left: Value, right: Value) -> Value:
        raise NotImplementedError

    def disjoin(self, left: Value, right: Value) -> Value:
        raise NotImplementedError

    def and_(self, left: Value, right: Value) -> Value:
        for a, b in ((left, right), (right, left)):
            known = self.constant(a)
            if known is False:
                return False
            if known is True:
                return b
        return self.conjoin(left, right)

    def or_(self, left: Value, right: Value) -> Value:
        for a, b in ((left, right), (right, left)):
            known = self.constant(a)
            if known is True:
                return True
            if known is False:
                return b
        return self.disjoin(left, right)


_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_ALLOWED_NODES = (
    ast.FunctionDef,
    ast.arguments,
    ast.arg,
    ast.Assign,
    ast.AnnAssign,
    ast.AugAssign,
    ast.If,
    ast.Return,
    ast.Assert,
    ast.Raise,
    ast.Pass,
    ast.Expr,
    ast.Constant,
    ast.Name,
    ast.Attribute,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.IfExp,
    ast.Call,
    ast.Tuple,
    ast.GeneratorExp,
    ast.comprehension,
    ast.keyword,
    ast.Load,
    ast.Store,
    ast.And,
    ast.Or,
    ast.Not,
    ast.USub,
    ast.Is,
    ast.IsNot,
    *_BINOPS,
    *_CMPOPS,
)
_IDENTITY = (ast.Is, ast.IsNot)
_INFINITE_TEXTS = {"inf": False, "+inf": False, "infinity": False, "+infinity": False}
_INFINITE_TEXTS |= {"-inf": True, "-infinity": True}
"""The texts ``float()`` turns into an infinity (case and surrounding blanks ignored, as
Python does), and whether it is negative."""
_MIN_MAX = {"min": True, "max": False}
"""The only builtins a subset function may call (True: ``min``)."""


@dataclass(frozen=True)
class SubsetFunction:
    """A parsed, validated subset function and the namespace its global names resolve in.

    ``namespace`` maps a global name to another :class:`SubsetFunction`, to a trusted Python
    function of chunkproof's own policies (parsed from its source on first call), or to an
    integer, string or ``None`` constant.
    """

    name: str
    node: ast.FunctionDef
    filename: str
    namespace: Mapping[str, Any] = field(repr=False, compare=False, hash=False)

    @property
    def params(self) -> list[str]:
        return [a.arg for a in self.node.args.args]

    def where(self, node: ast.AST) -> str:
        """``file:line`` of a node, for error messages."""
        return f"{self.filename}:{getattr(node, 'lineno', self.node.lineno)}"


@functools.cache
def parse(fn: Callable[..., Any]) -> SubsetFunction:
    """Parse and validate one of chunkproof's own (trusted) Python functions as a subset
    function, cached per function. Its globals are its namespace; its text is the code that
    runs (:func:`~chunkproof.model.own_source.own_source`).

    User code never comes through here: it is read from its file as a syntax tree
    (:mod:`chunkproof.source.functions`).
    """
    source = own_source(fn)
    node = source.tree()
    func = SubsetFunction(fn.__name__, node, source.filename, fn.__globals__)
    validate(func)
    return func


def validate(func: SubsetFunction) -> None:
    """Reject every construct outside the subset, naming file and line. The exception
    expression of a ``raise`` is never evaluated and so not inspected. A starred expression is
    in the subset only as a positional argument of a call."""
    node = func.node
    if node.decorator_list or node.args.vararg or node.args.kwarg or node.args.kwonlyargs:
        raise SubsetError(
            f"{func.where(node)}: {func.name}: decorators and */** parameters "
            "are outside the policy subset"
        )
    if node.args.posonlyargs:
        raise SubsetError(
            f"{func.where(node)}: {func.name}: positional-only parameters are outside the subset"
        )
    starred = starred_arguments(node)
    stack: list[tuple[ast.AST, ast.AST]] = [(c, node) for c in ast.iter_child_nodes(node)]
    while stack:
        child, parent = stack.pop()
        at = child if hasattr(child, "lineno") else parent
        if id(child) not in starred:
            _check_node(func, child, at)
        if not isinstance(child, ast.Raise):
            stack.extend((c, at) for c in ast.iter_child_nodes(child))


def _check_node(func: SubsetFunction, child: ast.AST, at: ast.AST) -> None:
    """One node of a subset function's body (see :func:`validate`); ``at`` is the node
    itself or, for one without a line (an operator), the nearest enclosing node with one."""
    if isinstance(child, (ast.FunctionDef, ast.Lambda)):
        raise SubsetError(f"{func.where(at)}: a nested function is outside the policy subset")
    if not isinstance(child, _ALLOWED_NODES):
        raise SubsetError(
            f"{func.where(at)}: {type(child).__name__} is outside the policy "
            f"subset (in {func.name})"
        )
    if isinstance(child, ast.Expr) and not _is_docstring(child):
        raise SubsetError(
            f"{func.where(at)}: a bare expression statement is outside the policy subset"
        )
    if isinstance(child, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = child.targets if isinstance(child, ast.Assign) else [child.target]
        if len(targets) != 1 or not isinstance(targets[0], ast.Name):
            raise SubsetError(
                f"{func.where(at)}: only assignment to one plain name is in the policy subset"
            )
    if isinstance(child, ast.AugAssign) and type(child.op) not in _BINOPS:
        raise SubsetError(
            f"{func.where(at)}: operator {type(child.op).__name__} is outside the policy subset"
        )
    if isinstance(child, ast.BinOp) and type(child.op) not in _BINOPS:
        raise SubsetError(
            f"{func.where(at)}: operator {type(child.op).__name__} is outside the policy subset"
        )
    if isinstance(child, ast.UnaryOp) and not isinstance(child.op, (ast.USub, ast.Not)):
        raise SubsetError(
            f"{func.where(at)}: operator {type(child.op).__name__} is outside the policy subset"
        )
    if (
        isinstance(child, ast.Constant)
        and not isinstance(child.value, (int, str))
        and child.value is not None
    ):
        raise SubsetError(
            f"{func.where(at)}: constant {child.value!r} is outside the policy subset"
        )
    if isinstance(child, ast.Compare) and not _identity_with_none(child):
        raise SubsetError(f"{func.where(at)}: `is` compares with None only in the subset")
    if isinstance(child, ast.GeneratorExp) and len(child.generators) != 1:
        raise SubsetError(f"{func.where(at)}: only single-loop generators are in the subset")
    if isinstance(child, ast.comprehension) and child.is_async:
        raise SubsetError(f"{func.where(at)}: async generators are outside the subset")
    if isinstance(child, ast.keyword) and child.arg is None:
        raise SubsetError(f"{func.where(at)}: **keyword arguments are outside the subset")
    if isinstance(child, ast.Name) and child.id.startswith("__"):
        raise SubsetError(f"{func.where(at)}: the name {child.id!r} is outside the subset")
    if isinstance(child, ast.Attribute) and child.attr.startswith("_") and child.attr.endswith("_"):
        raise SubsetError(
            f"{func.where(at)}: the attribute {child.attr!r} is outside the policy subset"
        )


def starred_arguments(node: ast.AST) -> set[int]:
    """The ids of the starred positional arguments of the calls below ``node``."""
    return {
        id(arg)
        for call in ast.walk(node)
        if isinstance(call, ast.Call)
        for arg in call.args
        if isinstance(arg, ast.Starred)
    }


def any_starred(call: ast.Call) -> bool:
    """Whether a positional argument of ``call`` is starred."""
    return any(isinstance(arg, ast.Starred) for arg in call.args)


def _identity_with_none(node: ast.Compare) -> bool:
    """Every ``is``/``is not`` of the comparison has the constant ``None`` on one side."""
    operands = [node.left, *node.comparators]
    return all(
        any(_is_none(x) for x in operands[i : i + 2])
        for i, op in enumerate(node.ops)
        if isinstance(op, _IDENTITY)
    )


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _is_docstring(stmt: ast.Expr) -> bool:
    return isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


# -- stand-ins for objects of real code ---------------------------------------------------------


class StandInError(SubsetError):
    """Code read (or wrote) an attribute a stand-in does not have: an input the model lacks."""


@dataclass(frozen=True)
class Member:
    """A member of a class read from source: ``kind`` is ``method``, ``property``,
    ``staticmethod`` or ``classmethod``, ``function`` its syntax tree."""

    kind: str
    function: SubsetFunction


@dataclass(frozen=True)
class SourceClass:
    """A class read from source as data: its members by name (never compiled)."""

    name: str
    members: Mapping[str, Member] = field(compare=False, hash=False)


class SourceObject:
    """A stand-in object: exactly the attributes it is given, plus the members of ``cls``.

    Reading any other attribute is a :class:`StandInError` naming its path (``self.x.y``),
    produced by ``missing``; it is deliberately not an ``AttributeError``.
    """

    __slots__ = ("attributes", "cls", "label", "missing")

    def __init__(
        self,
        label: str,
        attributes: Mapping[str, Value],
        cls: SourceClass | None = None,
        missing: Callable[[str], str] | None = None,
    ) -> None:
        self.label = label
        self.attributes = dict(attributes)
        self.cls = cls
        self.missing = missing

    def read(self, name: str) -> Value:
        """A data attribute; a missing one is a :class:`StandInError`."""
        if name in self.attributes:
            return self.attributes[name]
        path = f"{self.label}.{name}"
        message = (
            self.missing(path) if self.missing else f"the code reads {path}, which is not given"
        )
        raise StandInError(message)

    def __repr__(self) -> str:
        return f"<{self.label}>"


@dataclass(frozen=True)
class BoundMember:
    """``obj.method`` before its call: the member and the object it is bound to."""

    obj: SourceObject
    member: Member


@dataclass(frozen=True)
class Infinity:
    """``float("inf")`` (``negative``: ``float("-inf")``), module docstring."""

    negative: bool = False

    def __repr__(self) -> str:
        return 'float("-inf")' if self.negative else 'float("inf")'

    @property
    def rank(self) -> int:
        """Its place among the integers: above all of them (1) or below (-1)."""
        return -1 if self.negative else 1


INFINITY = Infinity()


def infinity(text: str) -> Infinity | None:
    """What ``float(text)`` is when ``text`` names an infinity, else ``None``."""
    negative = _INFINITE_TEXTS.get(text.strip().lower())
    return None if negative is None else Infinity(negative)


# -- the interpreter ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Conflict:
    """A value that differs in kind between lanes (a string on some, a number on others): no
    lane-wise form of it exists, so reading it is an error (SPEC Q1)."""

    what: str


class _Unset:
    """No lane has returned yet."""


UNSET: Any = _Unset()
"""The returned value of a body no lane has left by ``return`` (a returned ``None`` is a
value)."""


class _Frame:
    """Execution state of one function body: variables, live lanes, and the returned value."""

    def __init__(self, env: dict[str, Value], active: Value) -> None:
        self.env = env
        self.active = active
        self.result: Value = UNSET


MAX_DEPTH = 64
"""Nested subset calls deeper than this are an error (the subset has no loops, so only
recursion can go deeper)."""


class Interpreter:
    """Evaluates subset functions over a :class:`Domain` (see the module docstring)."""

    def __init__(self, domain: Domain) -> None:
        self.domain = domain
        self.depth = 0
        self.crashed = False
        """Whether some lane may have raised (SPEC P0)."""

    def call(
        self,
        func: SubsetFunction,
        args: list[Value],
        kwargs: Mapping[str, Value] | None = None,
        active: Value = True,
    ) -> Value:
        """Run ``func`` on ``args`` for the lanes ``active``; every live lane must reach a
        ``return`` or crash."""
        if self.depth >= MAX_DEPTH:
            raise SubsetError(f"{func.where(func.node)}: {func.name}: calls nest too deeply")
        if self.domain.truth(active) is False:
            return 0  # no live lane needs the value: any value of the domain will do
        self.depth += 1
        try:
            frame = _Frame(self._bind(func, args, dict(kwargs or {}), active), active)
            self._block(func, func.node.body, frame)
        except RecursionError:
            raise SubsetError(
                f"{func.where(func.node)}: {func.name}: calls and branches nest too deeply "
                "to interpret"
            ) from None
        finally:
            self.depth -= 1
        if self.domain.truth(frame.active) is not False:
            raise SubsetError(f"{func.where(func.node)}: {func.name} can end without a return")
        if frame.result is UNSET:
            return 0  # every live lane raised (SPEC P0): any value of the domain will do
        return frame.result

    def result(self, func: SubsetFunction, args: list[Value]) -> Value:
        """A policy function's value on ``args``: :meth:`call`, and the value must be a number
        of the domain (a stage yields a chunk length)."""
        value = self.call(func, args)
        if not self.domain.number(value):
            raise SubsetError(
                f"{func.where(func.node)}: {func.name} returns {_kind(value)}, not an integer"
            )
        return value

    def _number(self, func: SubsetFunction, node: ast.AST, value: Value, what: str) -> Value:
        """``value``, which ``what`` (an operator, min, max) needs to be an integer or bool."""
        if not self.domain.number(value):
            raise SubsetError(
                f"{func.where(node)}: {what} applied to {_kind(value)} in {func.name} "
                "(the policy subset computes on integers)"
            )
        return value

    # -- statements ---------------------------------------------------------------------------

    def _bind(
        self, func: SubsetFunction, args: list[Value], kwargs: dict[str, Value], active: Value
    ) -> dict[str, Value]:
        params = func.params
        if len(args) > len(params):
            raise SubsetError(
                f"{func.where(func.node)}: {func.name} takes {len(params)} "
                f"arguments, got {len(args)}"
            )
        env = dict(zip(params, args, strict=False))
        defaults = func.node.args.defaults
        first_default = len(params) - len(defaults)
        for i, name in enumerate(params[len(args) :], start=len(args)):
            if name in kwargs:
                env[name] = kwargs.pop(name)
            elif i >= first_default:
                env[name] = self._expr(func, defaults[i - first_default], {}, active)
            else:
                raise SubsetError(
                    f"{func.where(func.node)}: {func.name}: missing argument {name!r}"
                )
        if kwargs:
            raise SubsetError(
                f"{func.where(func.node)}: {func.name}: unexpected argument(s) {', '.join(kwargs)}"
            )
        return env

    def _block(self, func: SubsetFunction, body: list[ast.stmt], frame: _Frame) -> None:
        for stmt in body:
            if self.domain.truth(frame.active) is False:
                return
            self._stmt(func, stmt, frame)

    def _stmt(self, func: SubsetFunction, stmt: ast.stmt, frame: _Frame) -> None:
        d = self.domain
        if isinstance(stmt, ast.Assign):
            value = self._expr(func, stmt.value, frame.env, frame.active)
            frame.env[_target(stmt.targets[0])] = value
        elif isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                value = self._expr(func, stmt.value, frame.env, frame.active)
                frame.env[_target(stmt.target)] = value
        elif isinstance(stmt, ast.AugAssign):
            name = _target(stmt.target)
            current = self._name(func, stmt.target, name, frame.env)
            rhs = self._expr(func, stmt.value, frame.env, frame.active)
            op = _BINOPS[type(stmt.op)]
            frame.env[name] = self._binop(func, stmt, op, current, rhs, frame.active)
        elif isinstance(stmt, ast.Return):
            if stmt.value is None:
                raise SubsetError(f"{func.where(stmt)}: a bare return is outside the subset")
            value = self._expr(func, stmt.value, frame.env, frame.active)
            frame.result = (
                value
                if frame.result is UNSET
                else self._merged(func, stmt, frame.active, value, frame.result)
            )
            frame.active = False
        elif isinstance(stmt, ast.If):
            self._if(func, stmt, frame)
        elif isinstance(stmt, ast.Assert):
            ok = self._test(func, stmt.test, frame.env, frame.active)
            self._crash(func, stmt, d.and_(frame.active, d.not_(ok)), "assertion failed", frame)
        elif isinstance(stmt, ast.Raise):
            self._crash(func, stmt, frame.active, "raise", frame)
        # ast.Pass and docstrings do nothing.

    def _crash(
        self, func: SubsetFunction, node: ast.AST, cond: Value, what: str, frame: _Frame
    ) -> None:
        """The lanes ``cond`` crash at ``node`` (SPEC P0) and stop executing."""
        d = self.domain
        if d.truth(cond) is False:
            return
        d.crash(cond, f"{func.where(node)}: {what} in {func.name}")
        self.crashed = True
        frame.active = d.and_(frame.active, d.not_(cond))

    def _if(self, func: SubsetFunction, stmt: ast.If, frame: _Frame) -> None:
        d = self.domain
        cond = self._test(func, stmt.test, frame.env, frame.active)
        known = self._decided(cond)
        if known is not None:
            self._block(func, stmt.body if known else stmt.orelse, frame)
            return
        branches = []
        for body, guard in ((stmt.body, cond), (stmt.orelse, d.not_(cond))):
            sub = _Frame(dict(frame.env), d.and_(frame.active, guard))
            sub.result = frame.result
            if d.truth(sub.active) is not False:
                self._block(func, body, sub)
            frame.result = sub.result
            branches.append(sub)
        then, other = branches
        frame.active = d.or_(then.active, other.active)
        merged = {}
        for name in then.env.keys() | other.env.keys():
            if name not in other.env:
                merged[name] = then.env[name]
            elif name not in then.env:
                merged[name] = other.env[name]
            else:
                merged[name] = self.merge(cond, then.env[name], other.env[name])
        frame.env = merged

    def _truthy(self, value: Value) -> Value:
        """Python's truth of ``value`` as a domain boolean (SPEC Q1): a string, ``None`` or a
        tuple by Python's rule, a number of the domain by :meth:`Domain.truthy`."""
        if value is None or isinstance(value, (str, tuple, Infinity)):
            return bool(value)
        return self.domain.truthy(value)

    def _test(
        self, func: SubsetFunction, node: ast.expr, env: Mapping[str, Value], active: Value
    ) -> Value:
        """The truth of ``node`` used as a condition, a domain boolean (SPEC Q1). Only its
        truth matters there, so ``and``/``or``/``not`` combine their operands' truths (as
        Python's truth of ``a and b`` is ``a``'s and ``b``'s), each operand evaluated only on
        the lanes Python evaluates it on."""
        d = self.domain
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return d.not_(self._test(func, node.operand, env, active))
        if not isinstance(node, ast.BoolOp):
            return self._truthy(self._expr(func, node, env, active))
        is_and = isinstance(node.op, ast.And)
        truth = self._test(func, node.values[0], env, active)
        live = active
        for operand in node.values[1:]:
            live = d.and_(live, truth if is_and else d.not_(truth))
            if d.truth(live) is False:
                break
            right = self._test(func, operand, env, live)
            truth = d.and_(truth, right) if is_and else d.or_(truth, right)
        return truth

    def _decided(self, cond: Value) -> bool | None:
        """Whether ``cond`` holds on every live lane (True), on none (False), or is open."""
        return self.domain.truth(cond)

    def merge(self, cond: Value, then: Value, other: Value) -> Value:
        """Lane-wise ``then if cond else other``, for the values the subset has: numbers of
        the domain, equal strings or ``None``, tuples element by element; anything else is a
        :class:`Conflict` (SPEC Q1)."""
        d = self.domain
        if then is other:
            return then
        known = d.truth(cond)
        if known is not None:
            return then if known else other
        if d.number(then) and d.number(other):
            return d.ite(cond, then, other)
        if isinstance(then, tuple) and isinstance(other, tuple) and len(then) == len(other):
            return tuple(self.merge(cond, a, b) for a, b in zip(then, other, strict=True))
        if isinstance(then, _PLAIN) and type(then) is type(other) and then == other:
            return then
        return Conflict(f"{self._kind(then)} on some lanes and {self._kind(other)} on others")

    def _kind(self, value: Value) -> str:
        """What a value is, for an error message: ``an integer`` (of any domain), ``a str``,
        ``None``, ``a tuple``, ..."""
        return "an integer" if self.domain.number(value) else _kind(value)

    # -- expressions --------------------------------------------------------------------------

    def _expr(
        self, func: SubsetFunction, node: ast.expr, env: Mapping[str, Value], active: Value
    ) -> Value:
        """The value of ``node`` on the lanes ``active`` (other lanes hold junk)."""
        d = self.domain
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self._name(func, node, node.id, env)
        if isinstance(node, ast.Attribute):
            return self._attribute(func, node, self._expr(func, node.value, env, active), active)
        if isinstance(node, ast.BinOp):
            left = self._expr(func, node.left, env, active)
            right = self._expr(func, node.right, env, active)
            return self._binop(func, node, _BINOPS[type(node.op)], left, right, active)
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                return self._test(func, node, env, active)
            operand = self._expr(func, node.operand, env, active)
            if isinstance(operand, Infinity):
                return Infinity(not operand.negative)
            return d.neg(self._number(func, node, operand, "unary -"))
        if isinstance(node, ast.BoolOp):
            return self._bool_op(func, node, env, active)
        if isinstance(node, ast.Compare):
            return self._compare(func, node, env, active)
        if isinstance(node, ast.IfExp):
            cond = self._test(func, node.test, env, active)
            known = d.truth(cond)
            if known is not None:
                return self._expr(func, node.body if known else node.orelse, env, active)
            live_then, live_else = d.and_(active, cond), d.and_(active, d.not_(cond))
            if d.truth(live_then) is False:
                return self._expr(func, node.orelse, env, live_else)
            if d.truth(live_else) is False:
                return self._expr(func, node.body, env, live_then)
            then = self._expr(func, node.body, env, live_then)
            other = self._expr(func, node.orelse, env, live_else)
            return self._merged(func, node, cond, then, other)
        if isinstance(node, ast.Tuple):
            return tuple(self._expr(func, elt, env, active) for elt in node.elts)
        if isinstance(node, ast.Call):
            return self._call(func, node, env, active)
        raise SubsetError(f"{func.where(node)}: {type(node).__name__} is outside the subset")

    def _binop(
        self, func: SubsetFunction, node: ast.AST, op: str, left: Value, right: Value, active: Value
    ) -> Value:
        """``left op right`` on integers; a division by zero on a live lane is a crash (SPEC
        P0)."""
        d = self.domain
        self._number(func, node, left, op)
        self._number(func, node, right, op)
        if op in ("//", "%"):
            by_zero = d.and_(active, d.binop("==", right, 0))
            if d.truth(by_zero) is not False:
                d.crash(by_zero, f"{func.where(node)}: division by zero in {func.name}")
                self.crashed = True
        return d.binop(op, left, right)

    def _bool_op(
        self, func: SubsetFunction, node: ast.BoolOp, env: Mapping[str, Value], active: Value
    ) -> Value:
        """``a and b`` is ``b`` where ``a`` is true and ``a`` elsewhere; ``a or b`` is ``a``
        where ``a`` is true and ``b`` elsewhere: an operand, as in Python (SPEC Q1). Each
        operand is evaluated only on the lanes Python evaluates it on."""
        d = self.domain
        is_and = isinstance(node.op, ast.And)
        value = self._expr(func, node.values[0], env, active)
        live = active
        for operand in node.values[1:]:
            truth = self._truthy(value)
            onward = truth if is_and else d.not_(truth)
            live = d.and_(live, onward)
            if d.truth(live) is False:
                break
            right = self._expr(func, operand, env, live)
            value = self._merged(func, node, onward, right, value)
        return value

    def _merged(
        self,
        func: SubsetFunction,
        node: ast.expr | ast.Return,
        cond: Value,
        then: Value,
        other: Value,
    ) -> Value:
        """:meth:`merge` of an expression's (or the returned) two values, which is read at
        once: a :class:`Conflict` is an error naming the expression (SPEC Q1)."""
        value = self.merge(cond, then, other)
        if isinstance(value, Conflict):
            what = (
                f"{func.name} returns"
                if isinstance(node, ast.Return)
                else f"{ast.unparse(node)!r} in {func.name} is"
            )
            raise SubsetError(
                f"{func.where(node)}: {what} {value.what}, which no lane-wise form holds"
            )
        return value

    def _name(
        self, func: SubsetFunction, node: ast.AST, name: str, env: Mapping[str, Value]
    ) -> Value:
        if name in env:
            value = env[name]
            if isinstance(value, Conflict):
                raise SubsetError(f"{func.where(node)}: {name!r} in {func.name} holds {value.what}")
            return value
        if name in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[name]
        if name in func.namespace:
            return func.namespace[name]
        raise SubsetError(f"{func.where(node)}: unknown name {name!r} in {func.name}")

    def _attribute(
        self, func: SubsetFunction, node: ast.Attribute, base: Value, active: Value
    ) -> Value:
        """``base.attr``: a stand-in's member (a property is run, a method bound) or data
        attribute, or an attribute of a trusted value (a configuration view)."""
        if isinstance(base, SourceObject):
            member = base.cls.members.get(node.attr) if base.cls else None
            if member is None:
                return base.read(node.attr)
            if member.kind == "property":
                return self.call(member.function, [base], active=active)
            return BoundMember(base, member)
        if isinstance(base, (SubsetFunction, BoundMember)):
            raise SubsetError(f"{func.where(node)}: attribute {ast.unparse(node)!r} of a function")
        try:
            return getattr(base, node.attr)
        except AttributeError:
            raise SubsetError(
                f"{func.where(node)}: no value for attribute {ast.unparse(node)!r}"
            ) from None

    def _compare(
        self, func: SubsetFunction, node: ast.Compare, env: Mapping[str, Value], active: Value
    ) -> Value:
        d = self.domain
        left = self._expr(func, node.left, env, active)
        result: Value = True
        live = active
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            if not isinstance(op, _IDENTITY) and type(op) not in _CMPOPS:
                raise SubsetError(
                    f"{func.where(node)}: comparison {type(op).__name__} is outside the subset"
                )
            right = self._expr(func, right_node, env, live)
            if isinstance(op, _IDENTITY):
                test: Value = (left is right) == isinstance(op, ast.Is)
            else:
                test = self._comparison(func, node, _CMPOPS[type(op)], left, right)
            result = d.and_(result, test)
            live = d.and_(live, test)
            left = right
        return result

    def _comparison(
        self, func: SubsetFunction, node: ast.AST, op: str, left: Value, right: Value
    ) -> Value:
        """``left op right``: an ordering needs two integers; ``==``/``!=`` also compare two
        plain non-numbers (strings, None) as Python does, and a number is never equal to one."""
        d = self.domain
        if op in ("==", "!=") and not (d.number(left) and d.number(right)):
            others = [v for v in (left, right) if not d.number(v)]
            if all(isinstance(v, _PLAIN) for v in others):
                equal = len(others) == 2 and left == right
                return equal == (op == "==")
        if isinstance(left, Infinity) or isinstance(right, Infinity):
            return self._infinite_order(func, node, op, left, right)
        self._number(func, node, left, op)
        self._number(func, node, right, op)
        return d.binop(op, left, right)

    def _infinite_order(
        self, func: SubsetFunction, node: ast.AST, op: str, left: Value, right: Value
    ) -> bool:
        """An ordering with an infinity on one side (module docstring): exact, since every
        integer lies strictly between ``float("-inf")`` and ``float("inf")``."""
        ranks = []
        for value in (left, right):
            if isinstance(value, Infinity):
                ranks.append(value.rank)
            else:
                self._number(func, node, value, op)
                ranks.append(0)
        low, high = ranks
        return {"<": low < high, "<=": low <= high, ">": low > high, ">=": low >= high}[op]

    def _arguments(
        self, func: SubsetFunction, node: ast.Call, env: Mapping[str, Value], active: Value
    ) -> list[Value]:
        """The positional arguments of a call, a starred one's tuple spread in place."""
        values: list[Value] = []
        for arg in node.args:
            if not isinstance(arg, ast.Starred):
                values.append(self._expr(func, arg, env, active))
                continue
            spread = self._expr(func, arg.value, env, active)
            if not isinstance(spread, tuple):
                raise SubsetError(
                    f"{func.where(arg)}: *{ast.unparse(arg.value)} spreads {self._kind(spread)}; "
                    "the subset spreads a tuple only"
                )
            values.extend(spread)
        return values

    def _keywords(
        self, func: SubsetFunction, node: ast.Call, env: Mapping[str, Value], active: Value
    ) -> dict[str, Value]:
        return {k.arg: self._expr(func, k.value, env, active) for k in node.keywords if k.arg}

    def bound_call(
        self,
        func: SubsetFunction,
        node: ast.Call,
        target: BoundMember,
        env: Mapping[str, Value],
        active: Value,
    ) -> Value:
        """A call of a stand-in's member. A member of kind ``returns`` (a call's value given
        with ``--set``, whatever its arguments) evaluates its arguments as Python does, for
        their crashes, except that an argument that is a plain attribute path the stand-ins
        do not model (an object passed along, which reading cannot make raise) is not read."""
        if target.member.kind == "returns":
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                self._given_argument(func, arg, env, active)
            return self.call(target.member.function, [target.obj], active=active)
        args = self._arguments(func, node, env, active)
        kwargs = self._keywords(func, node, env, active)
        bound = [] if target.member.kind == "staticmethod" else [target.obj]
        return self.call(target.member.function, [*bound, *args], kwargs, active)

    def _given_argument(
        self, func: SubsetFunction, arg: ast.expr, env: Mapping[str, Value], active: Value
    ) -> None:
        """An argument of a call whose value is given (:meth:`bound_call`)."""
        value = arg.value if isinstance(arg, ast.Starred) else arg
        try:
            self._expr(func, value, env, active)
        except StandInError:
            if not _is_path(value):
                raise

    def _call(
        self, func: SubsetFunction, node: ast.Call, env: Mapping[str, Value], active: Value
    ) -> Value:
        if isinstance(node.func, ast.Attribute):
            target = self._expr(func, node.func, env, active)
            if not isinstance(target, BoundMember):
                raise SubsetError(
                    f"{func.where(node)}: call to {ast.unparse(node.func)!r}, which is not a "
                    "member read from source"
                )
            return self.bound_call(func, node, target, env, active)
        if not isinstance(node.func, ast.Name):
            raise SubsetError(
                f"{func.where(node)}: only calls to named helper functions are in the subset"
            )
        name = node.func.id
        if name in _MIN_MAX and name not in func.namespace:
            return self._min_max(func, node, env, active, _MIN_MAX[name])
        if name == "float" and name not in func.namespace:
            return self._float(func, node)
        target = func.namespace.get(name)
        if isinstance(target, SubsetFunction):
            helper = target
        elif inspect.isfunction(target) and _trusted(target):
            helper = parse(target)
        else:
            raise SubsetError(
                f"{func.where(node)}: call to {name!r}, which is not a subset helper function"
            )
        args = self._arguments(func, node, env, active)
        return self.call(helper, args, self._keywords(func, node, env, active), active)

    def _float(self, func: SubsetFunction, node: ast.Call) -> Infinity:
        """``float("inf")``/``float("-inf")``; any other ``float()`` is outside the subset."""
        text = node.args[0] if len(node.args) == 1 and not node.keywords else None
        if isinstance(text, ast.Constant) and isinstance(text.value, str):
            value = infinity(text.value)
            if value is not None:
                return value
        raise SubsetError(
            f"{func.where(node)}: {ast.unparse(node)[:60]} in {func.name}: the subset computes "
            'on integers; float("inf") and float("-inf") are its only floats'
        )

    def _min_max(
        self,
        func: SubsetFunction,
        node: ast.Call,
        env: Mapping[str, Value],
        active: Value,
        is_min: bool,
    ) -> Value:
        d = self.domain
        pick = d.minimum if is_min else d.maximum
        if len(node.args) == 1 and isinstance(node.args[0], ast.GeneratorExp):
            return self._fold_generator(func, node, node.args[0], env, active, is_min)
        if node.keywords or (len(node.args) < 2 and not any_starred(node)):
            raise SubsetError(
                f"{func.where(node)}: min/max take two or more values, or one "
                "generator with default="
            )
        what = "min" if is_min else "max"
        values = self._arguments(func, node, env, active)
        if len(values) < 2:
            raise SubsetError(
                f"{func.where(node)}: {what} of {len(values)} value(s); the subset takes two "
                "or more"
            )
        finite = [self._number(func, node, v, what) for v in values if not isinstance(v, Infinity)]
        infinite = [v for v in values if isinstance(v, Infinity)]
        extreme = [v for v in infinite if v.negative == is_min]
        if extreme:
            return extreme[0]  # below (min) or above (max) every integer
        if finite:
            return functools.reduce(pick, finite)
        return infinite[0]

    def _fold_generator(
        self,
        func: SubsetFunction,
        call: ast.Call,
        gen: ast.GeneratorExp,
        env: Mapping[str, Value],
        active: Value,
        is_min: bool,
    ) -> Value:
        """``min((x for x in xs if cond), default=d)``, unrolled over the tuple ``xs``."""
        d = self.domain
        comp = gen.generators[0]
        defaults = [k.value for k in call.keywords if k.arg == "default"]
        if len(defaults) != 1 or len(call.keywords) != 1 or not isinstance(comp.target, ast.Name):
            raise SubsetError(
                f"{func.where(call)}: a generator in min/max needs one plain loop "
                "variable and default="
            )
        items = self._expr(func, comp.iter, env, active)
        if not isinstance(items, tuple):
            raise SubsetError(f"{func.where(call)}: min/max iterate over a tuple only")
        default = self._expr(func, defaults[0], env, active)
        best = 0 if isinstance(default, Infinity) else default
        have: Value = False
        for item in items:
            scope = {**env, comp.target.id: item}
            keep: Value = True
            for cond in comp.ifs:
                keep = d.and_(keep, self._test(func, cond, scope, d.and_(active, keep)))
            value = self._expr(func, gen.elt, scope, d.and_(active, keep))
            self._number(func, call, value, "min" if is_min else "max")
            better = d.binop("<" if is_min else ">", value, best)
            take = d.and_(keep, d.or_(d.not_(have), better))
            best = d.ite(take, value, best)
            have = d.or_(have, keep)
        if isinstance(default, Infinity):
            return self._or_infinite(func, call, have, best, default, active)
        return best

    def _or_infinite(
        self,
        func: SubsetFunction,
        call: ast.Call,
        have: Value,
        best: Value,
        default: Infinity,
        active: Value,
    ) -> Value:
        """A generator's fold whose default is an infinity: ``best`` where some item was
        kept, the default where none was (Python uses the default only then), on the live
        lanes ``active``."""
        d = self.domain
        if d.truth(d.and_(active, d.not_(have))) is False:
            return best
        if d.truth(d.and_(active, have)) is False:
            return default
        raise SubsetError(
            f"{func.where(call)}: {ast.unparse(call)[:60]} in {func.name} is {default!r} on "
            "some lanes and an integer on others, which no lane-wise form holds"
        )


_PLAIN = (str, type(None), Infinity)
"""The non-numbers ``==`` and ``!=`` compare (as Python does)."""


def _kind(value: Value) -> str:
    """What a non-number is, for an error message: ``a str``, ``None``, ``a tuple``, ..."""
    if isinstance(value, Infinity):
        return repr(value)
    return "None" if value is None else f"a {type(value).__name__}"


def _is_path(node: ast.expr) -> bool:
    """``a.b.c``: a name and attribute reads only."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _trusted(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is one of chunkproof's own functions (the built-in policies)."""
    return getattr(fn, "__module__", "").startswith("chunkproof.")


def _target(node: ast.expr) -> str:
    assert isinstance(node, ast.Name)
    return node.id
