"""The vectorised form of a subset function: the same syntax tree evaluated over NumPy arrays.

Python ints and bools stay Python values, so a call on plain scalars computes exactly what the
native function computes (the tests check this); arrays broadcast, so one call evaluates a
policy on a whole grid of states, budgets and configurations.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from chunkproof.model.subset import FoldingLogic, Interpreter, Value

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


def _is_array(value: Value) -> bool:
    return isinstance(value, np.ndarray)


class NumpyDomain(FoldingLogic):
    """Lane-wise integer/boolean operations on NumPy arrays and Python scalars."""

    def truth(self, cond: Value) -> bool | None:
        if isinstance(cond, (bool, np.bool_)):
            return bool(cond)
        if _is_array(cond):
            if cond.all():
                return True
            if not cond.any():
                return False
            return None
        return bool(cond)

    def ite(self, cond: Value, then: Value, other: Value) -> Value:
        known = self.truth(cond)
        if known is not None:
            return then if known else other
        return np.where(cond, then, other)

    def binop(self, op: str, left: Value, right: Value) -> Value:
        if op in ("//", "%") and (_is_array(right) or _is_array(left)):
            # Masked lanes may divide by zero; their values are never selected.
            with np.errstate(divide="ignore", invalid="ignore"):
                return _OPS[op](left, right)
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
        return -value

    def minimum(self, left: Value, right: Value) -> Value:
        if _is_array(left) or _is_array(right):
            return np.minimum(left, right)
        return min(left, right)

    def maximum(self, left: Value, right: Value) -> Value:
        if _is_array(left) or _is_array(right):
            return np.maximum(left, right)
        return max(left, right)

    def assume(self, cond: Value) -> bool:
        return bool(np.all(cond))


INTERPRETER = Interpreter(NumpyDomain())
"""The interpreter every vectorised evaluation uses."""
