"""The policy subset: parse a plain Python function once and evaluate it over any value domain.

A policy stage is written once, as an ordinary Python function in this subset:

* statements: assignment to a name (plain, annotated or augmented), ``if``/``elif``/``else``,
  ``return``, ``assert``, ``pass`` and a docstring;
* expressions: integer and boolean constants, names, attribute reads (``cfg.block``,
  ``self.cache_config.block_size``), ``+ - * // %``, unary ``-`` and ``not``, comparisons
  (chained too; ``is``/``is not`` only against ``None``, decided concretely since no domain
  value is ``None``), ``and``/``or``, ``x if c else y``, tuples, calls to helper functions
  written in the same subset (inlined), and ``min``/``max`` over arguments or over a generator
  with an ``if`` filter and a ``default=``.

Its *concrete* form is the function itself, called natively. Its *vectorised* and *symbolic*
forms come from :class:`Interpreter`, which runs the same syntax tree over a :class:`Domain`:
NumPy arrays (:mod:`chunkproof.model.vectorised`) or, later, Z3 terms. Branches whose condition
is not a plain ``bool`` run both ways and merge their variables with ``ite``; an early
``return`` is recorded per lane. Anything outside the subset is a :class:`SubsetError` naming
the file and line.
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from chunkproof.model.errors import SubsetError

Value = Any
"""A value of some domain: a Python int/bool, an array, a solver term, or a tuple of those."""


class Domain(Protocol):
    """The operations the interpreter needs from a value domain."""

    def truth(self, cond: Value) -> bool | None:
        """``True``/``False`` when ``cond`` is known to be constant, else ``None``."""

    def ite(self, cond: Value, then: Value, other: Value) -> Value:
        """Lane-wise ``then if cond else other``."""

    def binop(self, op: str, left: Value, right: Value) -> Value:
        """``+ - * // %`` and the comparisons ``< <= > >= == !=``."""

    def and_(self, left: Value, right: Value) -> Value:
        """Boolean conjunction."""

    def or_(self, left: Value, right: Value) -> Value:
        """Boolean disjunction."""

    def not_(self, value: Value) -> Value:
        """Boolean negation."""

    def neg(self, value: Value) -> Value:
        """Integer negation."""

    def minimum(self, left: Value, right: Value) -> Value:
        """Lane-wise ``min``."""

    def maximum(self, left: Value, right: Value) -> Value:
        """Lane-wise ``max``."""

    def assume(self, cond: Value) -> bool:
        """An ``assert``: ``False`` if ``cond`` is known to fail; symbolic domains record it as a
        path condition."""


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

SUBSET_ATTRIBUTE = "__chunkproof_subset__"
"""A function compiled from a syntax tree (real vLLM code, see
:mod:`chunkproof.model.vllm_source`) carries its :class:`SubsetFunction` under this attribute:
:func:`parse` returns it instead of reading source text, so the compiled function and its
interpreted forms share one syntax tree."""


@dataclass(frozen=True)
class SubsetFunction:
    """A parsed, validated subset function and the namespace its helper names resolve in."""

    name: str
    node: ast.FunctionDef
    filename: str
    namespace: Mapping[str, Any] = field(repr=False)

    @property
    def params(self) -> list[str]:
        return [a.arg for a in self.node.args.args]

    def where(self, node: ast.AST) -> str:
        """``file:line`` of a node, for error messages."""
        return f"{self.filename}:{getattr(node, 'lineno', self.node.lineno)}"


@functools.cache
def parse(fn: Callable[..., Any]) -> SubsetFunction:
    """Parse and validate a Python function as a subset function (cached per function).

    A function carrying a :data:`SUBSET_ATTRIBUTE` is validated and returned as it is.
    """
    attached = getattr(fn, SUBSET_ATTRIBUTE, None)
    if isinstance(attached, SubsetFunction):
        validate(attached)
        return attached
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        _, first_line = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or "<unknown>"
    except (OSError, TypeError) as exc:
        raise SubsetError(f"cannot read the source of {fn!r}: {exc}") from None
    tree = ast.parse(source)
    ast.increment_lineno(tree, first_line - 1)
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef):
        raise SubsetError(f"{filename}:{first_line}: {fn.__name__} is not a plain function")
    func = SubsetFunction(fn.__name__, node, filename, fn.__globals__)
    validate(func)
    return func


def validate(func: SubsetFunction) -> None:
    """Reject every construct outside the subset, naming file and line."""
    node = func.node
    if node.decorator_list or node.args.vararg or node.args.kwarg or node.args.kwonlyargs:
        raise SubsetError(
            f"{func.where(node)}: {func.name}: decorators and */** parameters "
            "are outside the policy subset"
        )
    for child in ast.walk(node):
        if child is node:
            continue
        if isinstance(child, ast.FunctionDef):
            raise SubsetError(
                f"{func.where(child)}: nested function {child.name!r} is outside the policy subset"
            )
        if not isinstance(child, _ALLOWED_NODES):
            raise SubsetError(
                f"{func.where(child)}: {type(child).__name__} is outside the policy "
                f"subset (in {func.name})"
            )
        if isinstance(child, ast.Expr) and not _is_docstring(child):
            raise SubsetError(
                f"{func.where(child)}: a bare expression statement is outside the policy subset"
            )
        if isinstance(child, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = child.targets if isinstance(child, ast.Assign) else [child.target]
            if len(targets) != 1 or not isinstance(targets[0], ast.Name):
                raise SubsetError(
                    f"{func.where(child)}: only assignment to one plain name is in "
                    "the policy subset"
                )
        if isinstance(child, ast.AugAssign) and type(child.op) not in _BINOPS:
            raise SubsetError(
                f"{func.where(child)}: operator {type(child.op).__name__} is outside "
                "the policy subset"
            )
        if (
            isinstance(child, ast.Constant)
            and not isinstance(child.value, (int, str))
            and child.value is not None
        ):
            raise SubsetError(
                f"{func.where(child)}: constant {child.value!r} is outside the policy subset"
            )
        if isinstance(child, ast.Compare) and not _identity_with_none(child):
            raise SubsetError(f"{func.where(child)}: `is` compares with None only in the subset")
        if isinstance(child, ast.GeneratorExp) and len(child.generators) != 1:
            raise SubsetError(f"{func.where(child)}: only single-loop generators are in the subset")


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


class _Frame:
    """Execution state of one function body: variables, live lanes, and the returned value."""

    def __init__(self, env: dict[str, Value], active: Value) -> None:
        self.env = env
        self.active = active
        self.result: Value = None


class Interpreter:
    """Evaluates subset functions over a :class:`Domain` (see the module docstring)."""

    def __init__(self, domain: Domain) -> None:
        self.domain = domain

    def call(
        self, func: SubsetFunction, args: list[Value], kwargs: Mapping[str, Value] | None = None
    ) -> Value:
        """Run ``func`` on ``args``; every lane must reach a ``return``."""
        frame = _Frame(self._bind(func, args, dict(kwargs or {})), True)
        self._block(func, func.node.body, frame)
        if self.domain.truth(frame.active) is not False:
            raise SubsetError(f"{func.where(func.node)}: {func.name} can end without a return")
        return frame.result

    # -- statements ---------------------------------------------------------------------------

    def _bind(
        self, func: SubsetFunction, args: list[Value], kwargs: dict[str, Value]
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
                env[name] = self._expr(func, defaults[i - first_default], {})
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
            frame.env[_target(stmt.targets[0])] = self._expr(func, stmt.value, frame.env)
        elif isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                frame.env[_target(stmt.target)] = self._expr(func, stmt.value, frame.env)
        elif isinstance(stmt, ast.AugAssign):
            name = _target(stmt.target)
            current = self._name(func, stmt.target, name, frame.env)
            rhs = self._expr(func, stmt.value, frame.env)
            frame.env[name] = d.binop(_BINOPS[type(stmt.op)], current, rhs)
        elif isinstance(stmt, ast.Return):
            if stmt.value is None:
                raise SubsetError(f"{func.where(stmt)}: a bare return is outside the subset")
            value = self._expr(func, stmt.value, frame.env)
            frame.result = (
                value if frame.result is None else d.ite(frame.active, value, frame.result)
            )
            frame.active = False
        elif isinstance(stmt, ast.If):
            self._if(func, stmt, frame)
        elif isinstance(stmt, ast.Assert):
            self._assert(func, stmt, frame)
        # ast.Pass and docstrings do nothing.

    def _if(self, func: SubsetFunction, stmt: ast.If, frame: _Frame) -> None:
        d = self.domain
        cond = self._expr(func, stmt.test, frame.env)
        known = d.truth(cond)
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
            elif then.env[name] is other.env[name]:
                merged[name] = then.env[name]
            else:
                merged[name] = d.ite(cond, then.env[name], other.env[name])
        frame.env = merged

    def _assert(self, func: SubsetFunction, stmt: ast.Assert, frame: _Frame) -> None:
        """An assertion holds on every live lane, or the evaluation fails with file:line."""
        d = self.domain
        ok = self._expr(func, stmt.test, frame.env)
        if not d.assume(d.or_(d.not_(frame.active), ok)):
            raise SubsetError(f"{func.where(stmt)}: assertion failed in {func.name}")

    # -- expressions --------------------------------------------------------------------------

    def _expr(self, func: SubsetFunction, node: ast.expr, env: Mapping[str, Value]) -> Value:
        d = self.domain
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self._name(func, node, node.id, env)
        if isinstance(node, ast.Attribute):
            base = self._expr(func, node.value, env)
            try:
                return getattr(base, node.attr)
            except AttributeError:
                raise SubsetError(
                    f"{func.where(node)}: no value for attribute {ast.unparse(node)!r}"
                ) from None
        if isinstance(node, ast.BinOp):
            return d.binop(
                _BINOPS[type(node.op)],
                self._expr(func, node.left, env),
                self._expr(func, node.right, env),
            )
        if isinstance(node, ast.UnaryOp):
            operand = self._expr(func, node.operand, env)
            return d.not_(operand) if isinstance(node.op, ast.Not) else d.neg(operand)
        if isinstance(node, ast.BoolOp):
            combine = d.and_ if isinstance(node.op, ast.And) else d.or_
            value = self._expr(func, node.values[0], env)
            for operand in node.values[1:]:
                value = combine(value, self._expr(func, operand, env))
            return value
        if isinstance(node, ast.Compare):
            return self._compare(func, node, env)
        if isinstance(node, ast.IfExp):
            cond = self._expr(func, node.test, env)
            known = d.truth(cond)
            if known is not None:
                return self._expr(func, node.body if known else node.orelse, env)
            return d.ite(cond, self._expr(func, node.body, env), self._expr(func, node.orelse, env))
        if isinstance(node, ast.Tuple):
            return tuple(self._expr(func, elt, env) for elt in node.elts)
        if isinstance(node, ast.Call):
            return self._call(func, node, env)
        raise SubsetError(f"{func.where(node)}: {type(node).__name__} is outside the subset")

    def _name(
        self, func: SubsetFunction, node: ast.AST, name: str, env: Mapping[str, Value]
    ) -> Value:
        if name in env:
            return env[name]
        if name in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[name]
        if name in func.namespace:
            return func.namespace[name]
        raise SubsetError(f"{func.where(node)}: unknown name {name!r} in {func.name}")

    def _compare(self, func: SubsetFunction, node: ast.Compare, env: Mapping[str, Value]) -> Value:
        d = self.domain
        left = self._expr(func, node.left, env)
        result: Value = True
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            if not isinstance(op, _IDENTITY) and type(op) not in _CMPOPS:
                raise SubsetError(
                    f"{func.where(node)}: comparison {type(op).__name__} is outside the subset"
                )
            right = self._expr(func, right_node, env)
            if isinstance(op, _IDENTITY):
                test: Value = (left is right) == isinstance(op, ast.Is)
            else:
                test = d.binop(_CMPOPS[type(op)], left, right)
            result = d.and_(result, test)
            left = right
        return result

    def _call(self, func: SubsetFunction, node: ast.Call, env: Mapping[str, Value]) -> Value:
        if isinstance(node.func, ast.Attribute):
            return self._method(func, node, node.func, env)
        if not isinstance(node.func, ast.Name):
            raise SubsetError(
                f"{func.where(node)}: only calls to named helper functions are in the subset"
            )
        name = node.func.id
        target = func.namespace.get(name, getattr(builtins, name, None))
        if target is min or target is max:
            return self._min_max(func, node, env, target is min)
        if not inspect.isfunction(target):
            raise SubsetError(
                f"{func.where(node)}: call to {name!r}, which is not a subset helper function"
            )
        args = [self._expr(func, a, env) for a in node.args]
        kwargs = {k.arg: self._expr(func, k.value, env) for k in node.keywords if k.arg}
        return self.call(parse(target), args, kwargs)

    def _method(
        self, func: SubsetFunction, node: ast.Call, attr: ast.Attribute, env: Mapping[str, Value]
    ) -> Value:
        """``obj.method(...)``: a method written in the subset, inlined with ``obj`` as self."""
        target = getattr(self._expr(func, attr.value, env), attr.attr, None)
        if not inspect.ismethod(target) or not inspect.isfunction(target.__func__):
            raise SubsetError(
                f"{func.where(node)}: call to {ast.unparse(attr)!r}, which is not a subset method"
            )
        args = [target.__self__, *(self._expr(func, a, env) for a in node.args)]
        kwargs = {k.arg: self._expr(func, k.value, env) for k in node.keywords if k.arg}
        return self.call(parse(target.__func__), args, kwargs)

    def _min_max(
        self, func: SubsetFunction, node: ast.Call, env: Mapping[str, Value], is_min: bool
    ) -> Value:
        d = self.domain
        pick = d.minimum if is_min else d.maximum
        if len(node.args) == 1 and isinstance(node.args[0], ast.GeneratorExp):
            return self._fold_generator(func, node, node.args[0], env, is_min)
        if len(node.args) < 2 or node.keywords:
            raise SubsetError(
                f"{func.where(node)}: min/max take two or more values, or one "
                "generator with default="
            )
        values = [self._expr(func, a, env) for a in node.args]
        return functools.reduce(pick, values)

    def _fold_generator(
        self,
        func: SubsetFunction,
        call: ast.Call,
        gen: ast.GeneratorExp,
        env: Mapping[str, Value],
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
        items = self._expr(func, comp.iter, env)
        if not isinstance(items, tuple):
            raise SubsetError(f"{func.where(call)}: min/max iterate over a tuple only")
        best = self._expr(func, defaults[0], env)
        have: Value = False
        for item in items:
            scope = {**env, comp.target.id: item}
            keep: Value = True
            for cond in comp.ifs:
                keep = d.and_(keep, self._expr(func, cond, scope))
            value = self._expr(func, gen.elt, scope)
            better = d.binop("<" if is_min else ">", value, best)
            take = d.and_(keep, d.or_(d.not_(have), better))
            best = d.ite(take, value, best)
            have = d.or_(have, keep)
        return best


def _target(node: ast.expr) -> str:
    assert isinstance(node, ast.Name)
    return node.id
