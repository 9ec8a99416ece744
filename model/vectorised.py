"""The vectorised form of a subset function: the same syntax tree evaluated over NumPy arrays.

Python ints and bools stay Python values, so a call on plain scalars computes exactly what the
native function computes (the tests check this); arrays broadcast, so one call evaluates a
policy on a whole grid of states, budgets and configurations.

Integers are int64 lanes. A product whose magnitude could leave the exact range of int64
(:data:`LIMIT`) is an error rather than a silent wrap-around, so the vectorised form never
disagrees with Python's unbounded integers without saying so.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from chunkproof.model.errors import ChunkproofError
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


class ValueTooLarge(ChunkproofError):
    """An intermediate integer of a policy grew past what the tool evaluates exactly."""


def _is_array(value: Value) -> bool:
    return isinstance(value, np.ndarray)


class NumpyDomain(FoldingLogic):
    """Lane-wise integer/boolean operations on NumPy arrays and Python scalars; records the
    lanes that crash (SPEC P0) in :attr:`crashed`."""

    def __init__(self) -> None:
        self.crashed: Value = False
        self.where: str | None = None

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
        arrays = _is_array(left) or _is_array(right)
        if op in ("//", "%") and arrays:
            # Lanes that are not live may divide by zero; their values are never selected.
            with np.errstate(divide="ignore", invalid="ignore"):
                return _OPS[op](left, right)
        if op == "*" and arrays:
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
        return -value

    def minimum(self, left: Value, right: Value) -> Value:
        if _is_array(left) or _is_array(right):
            return np.minimum(left, right)
        return min(left, right)

    def maximum(self, left: Value, right: Value) -> Value:
        if _is_array(left) or _is_array(right):
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
    value = Interpreter(domain).call(func, args)
    return Outcome(value, domain.crashed, domain.where)
