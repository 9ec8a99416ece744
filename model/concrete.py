"""The concrete form of a subset function read from a user's file: its syntax tree interpreted
over Python integers, never compiled or executed.

chunkproof's own built-in policies run natively (they are the definition); code from a vLLM
tree or a ``module:function`` file runs only through this interpreter, after validation
(:mod:`chunkproof.source.functions`). Integers are bounded
(:data:`~chunkproof.model.errors.MAX_BITS`) so that hostile arithmetic fails fast with a clear
error instead of running for minutes.
"""

from __future__ import annotations

from chunkproof.model.errors import bounded
from chunkproof.model.subset import FoldingLogic, Interpreter, SubsetFunction, Value
from chunkproof.model.vectorised import Outcome


class ScalarDomain(FoldingLogic):
    """Python ints and bools; records the first crash (SPEC P0)."""

    def __init__(self) -> None:
        self.crashed = False
        self.where: str | None = None

    def truth(self, cond: Value) -> bool | None:
        return bool(cond)

    def number(self, value: Value) -> bool:
        return isinstance(value, int)

    def truthy(self, value: Value) -> Value:
        return bool(value)

    def ite(self, cond: Value, then: Value, other: Value) -> Value:
        return then if cond else other

    def binop(self, op: str, left: Value, right: Value) -> Value:
        if op == "+":
            result = left + right
        elif op == "-":
            result = left - right
        elif op == "*":
            result = left * right
        elif op == "//":
            result = left // right if right else 0
        elif op == "%":
            result = left % right if right else 0
        else:
            return _compare(op, left, right)
        return bounded(result)

    def constant(self, value: Value) -> bool | None:
        return bool(value)

    def conjoin(self, left: Value, right: Value) -> Value:
        return bool(left) and bool(right)

    def disjoin(self, left: Value, right: Value) -> Value:
        return bool(left) or bool(right)

    def not_(self, value: Value) -> Value:
        return not value

    def neg(self, value: Value) -> Value:
        return -value

    def minimum(self, left: Value, right: Value) -> Value:
        return min(left, right)

    def maximum(self, left: Value, right: Value) -> Value:
        return max(left, right)

    def crash(self, cond: Value, where: str) -> None:
        if cond and not self.crashed:
            self.crashed, self.where = True, where


def _compare(op: str, left: Value, right: Value) -> bool:
    if op == "<":
        return bool(left < right)
    if op == "<=":
        return bool(left <= right)
    if op == ">":
        return bool(left > right)
    if op == ">=":
        return bool(left >= right)
    if op == "==":
        return bool(left == right)
    return bool(left != right)


def run(func: SubsetFunction, args: list[Value]) -> Outcome:
    """Interpret ``func`` on Python values: its value (``None`` if it crashed) and whether it
    crashed, and where."""
    domain = ScalarDomain()
    value = Interpreter(domain).result(func, args)
    return Outcome(None if domain.crashed else value, domain.crashed, domain.where)
