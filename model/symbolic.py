"""The symbolic form of a subset function: the same syntax tree evaluated over Z3 terms.

Integers are Z3 ``Int`` terms (or Python ints for concrete parameters), conditions Z3 ``Bool``
terms. A boolean meeting an integer (``True + 1``, ``b == 1``, ``min(b, n)``, ``b or n``) is the
integer 0 or 1 there, as in Python (SPEC Q1); two booleans stay a ``Bool``. ``//`` and ``%``
keep Python's floor semantics for any divisor sign: ``//`` is SMT-LIB ``div`` for a positive
divisor (which floors there) and ``-left div -right`` otherwise, and ``%`` is ``left - right *
(left // right)``. The conditions under which the code raises (SPEC P0: a failed ``assert``, a
``raise``, a division by zero) are collected in :attr:`Z3Domain.crashed`.
"""

from __future__ import annotations

from typing import Any

import z3

from chunkproof.model.errors import bounded
from chunkproof.model.subset import FoldingLogic, Interpreter, SubsetFunction, Value


def _is_term(value: Value) -> bool:
    return isinstance(value, z3.ExprRef)


def _boolean(value: Value) -> bool:
    """Whether ``value`` is a boolean: a Python ``bool`` or a Z3 ``Bool`` term."""
    return isinstance(value, (bool, z3.BoolRef))


def _condition(value: Value) -> Value:
    """Python truthiness: an integer term used as a condition means ``value != 0``."""
    if isinstance(value, z3.ArithRef):
        return value != 0
    return value


def integer(value: Value) -> Value:
    """A boolean as the integer 0 or 1, as in Python's arithmetic (SPEC Q1)."""
    if isinstance(value, z3.BoolRef):
        return z3.If(value, 1, 0)
    return int(value) if isinstance(value, bool) else value


class Z3Domain(FoldingLogic):
    """Integer and boolean operations on Z3 terms and Python constants."""

    def __init__(self) -> None:
        self.crashed: Value = False

    def truth(self, cond: Value) -> bool | None:
        cond = _condition(cond)
        if isinstance(cond, bool):
            return cond
        if _is_term(cond):
            # Conditions on concrete parameters are already Python bools; a symbolic one is
            # decided only when it is a literal (simplifying every condition costs more than
            # the branches it would prune).
            if z3.is_true(cond):
                return True
            if z3.is_false(cond):
                return False
            return None
        return bool(cond)

    def number(self, value: Value) -> bool:
        return isinstance(value, (int, z3.ArithRef, z3.BoolRef))

    def truthy(self, value: Value) -> Value:
        return _condition(value) if _is_term(value) else bool(value)

    def ite(self, cond: Value, then: Value, other: Value) -> Value:
        known = self.truth(cond)
        if known is not None:
            return then if known else other
        cond = _condition(cond)
        if isinstance(then, bool) and isinstance(other, bool):
            return z3.And(cond, then) if other is False else z3.Or(z3.Not(cond), then)
        if not (_boolean(then) and _boolean(other)):
            then, other = integer(then), integer(other)
        return z3.If(cond, then, other)

    def binop(self, op: str, left: Value, right: Value) -> Value:
        if not (_is_term(left) or _is_term(right)):
            return _concrete(op, left, right)
        if op not in ("==", "!=") or not (_boolean(left) and _boolean(right)):
            left, right = integer(left), integer(right)
        if op == "//":
            return self._floordiv(left, right)
        if op == "%":
            return left - right * self._floordiv(left, right)
        return _SYMBOLIC[op](left, right)

    def _floordiv(self, left: Value, right: Value) -> Value:
        """Python's floor division: SMT-LIB ``div`` floors for a positive divisor."""
        if isinstance(right, int):
            if right > 0:
                return left / right
            return (-left) / (-right)
        return z3.If(right > 0, left / right, (-left) / (-right))

    def constant(self, value: Value) -> bool | None:
        return None if _is_term(value) else bool(value)

    def conjoin(self, left: Value, right: Value) -> Value:
        return z3.And(_condition(left), _condition(right))

    def disjoin(self, left: Value, right: Value) -> Value:
        return z3.Or(_condition(left), _condition(right))

    def not_(self, value: Value) -> Value:
        return z3.Not(_condition(value)) if _is_term(value) else not value

    def neg(self, value: Value) -> Value:
        return -integer(value)

    def minimum(self, left: Value, right: Value) -> Value:
        if not (_is_term(left) or _is_term(right)):
            return min(left, right)
        left, right = integer(left), integer(right)
        return z3.If(left <= right, left, right)

    def maximum(self, left: Value, right: Value) -> Value:
        if not (_is_term(left) or _is_term(right)):
            return max(left, right)
        left, right = integer(left), integer(right)
        return z3.If(left >= right, left, right)

    def crash(self, cond: Value, where: str) -> None:
        self.crashed = self.or_(self.crashed, cond)


_SYMBOLIC: dict[str, Any] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


def _concrete(op: str, left: Value, right: Value) -> Value:
    """``left op right`` on plain integers, bounded as in the concrete form; a zero divisor
    gives 0 (the interpreter has recorded the crash, and the value is never used)."""
    if op in _SYMBOLIC:
        return bounded(_SYMBOLIC[op](left, right))
    if not right:
        return 0
    return left // right if op == "//" else left % right


def symbolic(func: SubsetFunction, args: list[Value]) -> tuple[Value, Value]:
    """Translate one call of ``func``: its result term and the condition under which it raises
    (``False`` when it never does)."""
    domain = Z3Domain()
    return Interpreter(domain).result(func, args), domain.crashed
