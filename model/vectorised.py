"""The vectorised form of a subset function: the same syntax tree evaluated over NumPy arrays.

Python ints and bools stay Python values, so a call on plain scalars computes exactly what the
native function computes (the tests check this); arrays broadcast, so one call evaluates a
policy on a whole grid of states, budgets and configurations.

Integers are int64 lanes. A product whose magnitude could leave the exact range of int64
(:data:`LIMIT`), or a plain integer of that size meeting an array, is an error rather than a
silent wrap-around, so the vectorised form never disagrees with Python's unbounded integers
without saying so; plain integers alone are bounded as in the concrete form
(:data:`~chunkproof.model.errors.MAX_BITS`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from chunkproof.model.errors import ValueTooLarge, bounded
from chunkproof.model.subset import FoldingLogic, Interpreter, SubsetFunction, Value

LIMIT = 1 << 62
"""Largest magnitude an int64 lane may hold after a product."""

_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "//": operator.floordiv,
    "%": operator.mod,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}


_ARITHMETIC = frozenset({"+", "-", "*", "//", "%"})


def _is_array(value: Value) -> bool:
    return isinstance(value, np.ndarray)


def _lanes(*values: Value) -> bool:
    """Whether an operation on ``values`` is lane-wise (one of them is an array); a plain
    integer beyond :data:`LIMIT` cannot join int64 lanes exactly, so it is refused here."""
    if not any(_is_array(v) for v in values):
        return False
    for value in values:
        if isinstance(value, int) and abs(value) >= LIMIT:
            raise ValueTooLarge("an integer exceeds 2^62 in the vectorised evaluation")
    return True


def _magnitude(value: Value) -> int:
    """The largest magnitude among ``value``'s lanes (a bound for a product's: when the bounds'
    product stays below :data:`LIMIT`, no lane's product can leave it)."""
    if not _is_array(value):
        return abs(int(value))
    if not value.size:
        return 0
    return max(abs(int(value.max())), abs(int(value.min())))


def integer(value: Value) -> Value:
    """Booleans as int64 lanes or Python ints (SPEC Q1): NumPy's own arithmetic on booleans is
    logical (``True + True`` is ``True``) or refused (``-True``), not Python's."""
    if _is_array(value):
        return value.astype(np.int64) if value.dtype == np.bool_ else value
    return int(value) if isinstance(value, (bool, np.bool_)) else value


class NumpyDomain(FoldingLogic):
    """Lane-wise integer/boolean operations on NumPy arrays and Python scalars; records the
    lanes that crash (SPEC P0) in :attr:`crashed`."""

    def __init__(self) -> None:
        self.crashed: Value = False
        self.where: str | None = None
        self._judged: tuple[Value, bool | None] = (None, None)
        """The last array :meth:`truth` judged, and its answer: the interpreter asks about
        the same live-lane mask before every statement (arrays are never changed in place)."""

    def truth(self, cond: Value) -> bool | None:
        if isinstance(cond, (bool, np.bool_)):
            return bool(cond)
        if _is_array(cond):
            if cond is self._judged[0]:
                return self._judged[1]
            held = np.count_nonzero(cond)
            answer = True if held == cond.size else (False if held == 0 else None)
            self._judged = (cond, answer)
            return answer
        return bool(cond)

    def number(self, value: Value) -> bool:
        if _is_array(value):
            return bool(value.dtype.kind in "biu")
        return isinstance(value, (int, np.integer, np.bool_))

    def truthy(self, value: Value) -> Value:
        if _is_array(value):
            return value if value.dtype == np.bool_ else value != 0
        return bool(value)

    def ite(self, cond: Value, then: Value, other: Value) -> Value:
        known = self.truth(cond)
        if known is not None:
            return then if known else other
        _lanes(cond, then, other)
        return np.where(cond, then, other)

    def binop(self, op: str, left: Value, right: Value) -> Value:
        if op in _ARITHMETIC:
            left, right = integer(left), integer(right)
        arrays = _lanes(left, right)
        if not arrays:
            if op in ("//", "%") and not right:
                return 0  # the interpreter has recorded the crash; the value is never used
            return bounded(_OPS[op](left, right))
        if op in ("//", "%") and arrays:
            # Lanes that are not live may divide by zero; their values are never selected.
            with np.errstate(divide="ignore", invalid="ignore"):
                return _OPS[op](left, right)
        if op == "*" and arrays and _magnitude(left) * _magnitude(right) >= LIMIT:
            bound = np.abs(np.asarray(left, dtype=np.float64)) * np.abs(
                np.asarray(right, dtype=np.float64)
            )
            if bound.size and float(bound.max()) >= LIMIT:
                raise ValueTooLarge("a product exceeds 2^62 in the vectorised evaluation")
        return _OPS[op](left, right)

    def constant(self, value: Value) -> bool | None:
        return None if _is_array(value) else bool(value)

    def conjoin(self, left: Value, right: Value) -> Value:
        return np.logical_and(left, right)

    def disjoin(self, left: Value, right: Value) -> Value:
        return np.logical_or(left, right)

    def not_(self, value: Value) -> Value:
        if _is_array(value):
            return np.logical_not(value)
        return not value

    def neg(self, value: Value) -> Value:
        return -integer(value)

    def minimum(self, left: Value, right: Value) -> Value:
        if _lanes(left, right):
            return np.minimum(left, right)
        return min(left, right)

    def maximum(self, left: Value, right: Value) -> Value:
        if _lanes(left, right):
            return np.maximum(left, right)
        return max(left, right)

    def crash(self, cond: Value, where: str) -> None:
        self.crashed = np.logical_or(self.crashed, cond)
        if self.where is None:
            self.where = where


@dataclass(frozen=True)
class Outcome:
    """A function's value on every lane, and the lanes where it raised (SPEC P0)."""

    value: Value
    crashed: Value
    where: str | None


def evaluate(func: SubsetFunction, args: list[Value]) -> Outcome:
    """Run ``func`` over arrays: its value per lane and the lanes that crashed."""
    domain = NumpyDomain()
    value = Interpreter(domain).result(func, args)
    return Outcome(value, domain.crashed, domain.where)
