"""Every input the model lacks, found in one run (SPEC X4).

Real code may read attributes of ``self`` and ``request`` that the stand-ins do not have
(:mod:`chunkproof.source.methods`): inputs chunkproof does not model. Instead of failing on
the first one a run happens to read, :func:`missing_inputs` collects all of them statically:
each stage's syntax tree is run by the policy-subset interpreter itself over an *abstract*
domain, in which every configuration value, c and n are unknown. A branch whose condition is
unknown runs both ways (the interpreter's lane semantics), so every path of the reachable code
is visited; branches whose condition is a constant of the model (a flag the stand-ins fix, a
``--set`` value) are pruned as Python would prune them. A read of an attribute the stand-in
lacks is recorded with its first source line and yields a placeholder, whose own attribute
reads and calls are recorded in turn (``self.vllm_config.model_config``, then
``self.vllm_config.model_config.get_mamba_chunk_size()``). The inputs are the recorded paths
nothing else is read from: leaves, and the results of calls. The stand-ins' own ``None`` and
configuration-dependent forms (L = 0 or not, alpha and the retention interval set or not) are
each visited.

The same run records how each input is used (as an integer in arithmetic or an ordering, as a
condition, as an object, called), which is what :func:`check_overrides` checks every ``--set``
value against: a value for an attribute the code reads as an object or calls, a call value for
an attribute the code reads as data, or ``None`` where the code computes with an integer, is an
error naming the line.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import product
from types import SimpleNamespace
from typing import Any

from chunkproof.model.config import Config
from chunkproof.model.errors import ChunkproofError, PolicyError
from chunkproof.model.policy import Policy
from chunkproof.model.step import VIEW_FIELDS
from chunkproof.model.subset import (
    FoldingLogic,
    Interpreter,
    SourceObject,
    SubsetFunction,
    Value,
)
from chunkproof.source.methods import Overrides


class _Unknown:
    """A value the analysis does not know: arithmetic on it stays unknown."""

    def __repr__(self) -> str:
        return "<unknown>"

    def _same(self, *_: Any) -> _Unknown:
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _same
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __neg__ = _same


UNKNOWN = _Unknown()


@dataclass(frozen=True)
class Placeholder:
    """The value of an input the stand-ins lack (``path``)."""

    path: str


@dataclass
class Reads:
    """What the analysis found: each input path, where it is first read, and its uses."""

    first: dict[str, str] = field(default_factory=dict)
    uses: dict[str, dict[str, str]] = field(default_factory=dict)
    """path -> use (``object``, ``call``, ``integer``, ``condition``) -> first line."""

    def read(self, path: str, where: str, parent: Placeholder | None = None) -> Placeholder:
        known = self.first.get(path)
        if known is None or _earlier(where, known):
            self.first[path] = where
        if parent is not None:
            self.use(parent, "object", where)
        return Placeholder(path)

    def use(self, value: Any, kind: str, where: str) -> None:
        if isinstance(value, Placeholder):
            self.uses.setdefault(value.path, {}).setdefault(kind, where)

    def inputs(self) -> list[tuple[str, str]]:
        """The leaves (paths nothing is read from and that are not called), in first-read
        order, with their first line."""
        return [
            (path, where)
            for path, where in self.first.items()
            if not {"object", "call"} & self.uses.get(path, {}).keys()
        ]


def _earlier(where: str, than: str) -> bool:
    """``file:line`` ``where`` is on an earlier line of the same file than ``than``."""
    file, _, line = where.rpartition(":")
    other, _, other_line = than.rpartition(":")
    return file == other and line.isdigit() and other_line.isdigit() and int(line) < int(other_line)


class _Domain(FoldingLogic):
    """Python constants where known, :data:`UNKNOWN` elsewhere; uses of placeholders are
    recorded."""

    def __init__(self, reads: Reads) -> None:
        self.reads = reads
        self.where = ""

    def _known(self, *values: Value) -> bool:
        return all(v is None or isinstance(v, (bool, int, str)) for v in values)

    def truth(self, cond: Value) -> bool | None:
        self.reads.use(cond, "condition", self.where)
        if self._known(cond):
            return bool(cond)
        return None

    def number(self, value: Value) -> bool:
        """Every value passes: this domain only records what the code reads (a value's type
        is checked when a real form evaluates it)."""
        return True

    def truthy(self, value: Value) -> Value:
        self.reads.use(value, "condition", self.where)
        return bool(value) if self._known(value) else UNKNOWN

    def ite(self, cond: Value, then: Value, other: Value) -> Value:
        known = self.truth(cond)
        if known is not None:
            return then if known else other
        if self._known(then, other) and then == other and type(then) is type(other):
            return then
        return UNKNOWN

    def binop(self, op: str, left: Value, right: Value) -> Value:
        kind = "integer" if op in ("+", "-", "*", "//", "%", "<", "<=", ">", ">=") else "value"
        for value in (left, right):
            self.reads.use(value, kind, self.where)
        if not self._known(left, right):
            return UNKNOWN
        try:
            return _python(op, left, right)
        except (TypeError, ZeroDivisionError):
            return UNKNOWN

    def constant(self, value: Value) -> bool | None:
        return bool(value) if self._known(value) else None

    def conjoin(self, left: Value, right: Value) -> Value:
        return UNKNOWN

    def disjoin(self, left: Value, right: Value) -> Value:
        return UNKNOWN

    def not_(self, value: Value) -> Value:
        self.reads.use(value, "condition", self.where)
        return (not value) if self._known(value) else UNKNOWN

    def neg(self, value: Value) -> Value:
        self.reads.use(value, "integer", self.where)
        return -value if self._known(value) and isinstance(value, int) else UNKNOWN

    def minimum(self, left: Value, right: Value) -> Value:
        return self._pick(min, left, right)

    def maximum(self, left: Value, right: Value) -> Value:
        return self._pick(max, left, right)

    def _pick(self, pick: Any, left: Value, right: Value) -> Value:
        for value in (left, right):
            self.reads.use(value, "integer", self.where)
        if isinstance(left, int) and isinstance(right, int):
            return pick(left, right)
        return UNKNOWN

    def crash(self, cond: Value, where: str) -> None:
        return None


def _python(op: str, left: Any, right: Any) -> Any:
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    if op == "//":
        return left // right
    if op == "%":
        return left % right
    if op == "<":
        return left < right
    if op == "<=":
        return left <= right
    if op == ">":
        return left > right
    if op == ">=":
        return left >= right
    if op == "==":
        return left == right
    return left != right


class _Recording(SourceObject):
    """A stand-in whose missing attributes are recorded instead of raising."""

    __slots__ = ("domain", "reads")

    def __init__(self, original: SourceObject, reads: Reads, domain: _Domain) -> None:
        attributes = {
            name: _recording(value, reads, domain) for name, value in original.attributes.items()
        }
        super().__init__(original.label, attributes, original.cls, original.missing)
        self.reads = reads
        self.domain = domain

    def read(self, name: str) -> Value:
        if name in self.attributes:
            return self.attributes[name]
        return self.reads.read(f"{self.label}.{name}", self.domain.where)


def _recording(value: Any, reads: Reads, domain: _Domain) -> Any:
    if isinstance(value, SourceObject) and not isinstance(value, _Recording):
        return _Recording(value, reads, domain)
    return value


class _Explorer(Interpreter):
    """The subset interpreter over the abstract domain, following reads of placeholders."""

    def __init__(self, domain: _Domain) -> None:
        super().__init__(domain)
        self.abstract = domain

    def _attribute(
        self, func: SubsetFunction, node: ast.Attribute, base: Value, active: Value
    ) -> Value:
        self.abstract.where = func.where(node)
        if isinstance(base, Placeholder):
            return self.abstract.reads.read(f"{base.path}.{node.attr}", func.where(node), base)
        if base is UNKNOWN:
            return UNKNOWN
        return super()._attribute(func, node, base, active)

    def _expr(self, func: SubsetFunction, node: ast.expr, env: Any, active: Value) -> Value:
        self.abstract.where = func.where(node)
        return super()._expr(func, node, env, active)

    def _call(self, func: SubsetFunction, node: ast.Call, env: Any, active: Value) -> Value:
        if isinstance(node.func, ast.Attribute):
            target = self._expr(func, node.func, env, active)
            if isinstance(target, Placeholder) or target is UNKNOWN:
                for arg in [*node.args, *(k.value for k in node.keywords)]:
                    self._expr(func, arg, env, active)
                if not isinstance(target, Placeholder):
                    return UNKNOWN
                reads = self.abstract.reads
                reads.use(target, "call", func.where(node))
                return reads.read(f"{target.path}()", func.where(node))
        return super()._call(func, node, env, active)


class _AbstractView(SimpleNamespace):
    """A step view whose every field is unknown but those that must be plain per batch."""

    def __getattr__(self, name: str) -> Any:
        return UNKNOWN


_PLAIN_VARIANTS = {
    "speculative": (False, True),
    "checkpoint_alignment": (0, 1),
    "retention": (-1, 0),
}
"""The fields a stand-in needs as one plain value, and the values whose forms differ."""


def _views() -> Iterator[_AbstractView]:
    names = [f for f in Config.__dataclass_fields__] + list(VIEW_FIELDS)
    for values in product(*_PLAIN_VARIANTS.values()):
        view = _AbstractView(**dict.fromkeys(names, UNKNOWN))
        vars(view).update(dict(zip(_PLAIN_VARIANTS, values, strict=True)))
        yield view


def explore(policy: Policy) -> Reads:
    """Run every stage of ``policy`` read from source over the abstract domain (module
    docstring); the reads it records. A stage the analysis cannot run (outside the subset, or
    a form of the stand-ins it cannot build) is skipped: the concrete run reports it."""
    reads = Reads()
    for view in _views():
        for stage in policy.stages:
            if stage.source is None:
                continue
            domain = _Domain(reads)
            try:
                args = [
                    _recording(a, reads, domain) for a in stage.arguments(view, UNKNOWN, UNKNOWN)
                ]
                _Explorer(domain).call(stage.subset(), args)
            except (ChunkproofError, TypeError, AttributeError, RecursionError):
                continue
    return reads


def missing_inputs(policy: Policy) -> tuple[tuple[str, str], ...]:
    """Every input the policy's code reads that the stand-ins (with the ``--set`` values) do
    not have, with where it is first read, in first-read order."""
    return tuple(explore(policy).inputs())


def check_overrides(policy: Policy, overrides: Overrides) -> None:
    """Check each ``--set`` value against how the code uses its path (module docstring);
    ``policy`` must be built without those overrides, so that their paths are recorded."""
    if not overrides:
        return
    reads = explore(policy)
    for path, value in overrides:
        base = path.removesuffix("()")
        uses = reads.uses.get(base, {})
        shown = f"--set {path}={value}"
        if path.endswith("()"):
            if base in reads.first and "call" not in uses:
                where = reads.first[base]
                raise PolicyError(
                    f"{shown}: the code reads {base} as a value at {where}, not as a call; "
                    f"give --set {base}=VALUE"
                )
            uses = reads.uses.get(path, {})
        elif "call" in uses:
            raise PolicyError(
                f"{shown}: the code calls {path} at {uses['call']}; give the value of the call "
                f"with --set '{path}()=VALUE'"
            )
        if "object" in uses:
            deeper = next((p for p in reads.first if p.startswith(path + ".")), path)
            raise PolicyError(
                f"{shown}: the code reads {path} as an object ({deeper} at {uses['object']}), "
                "not as a value"
            )
        if value is None and "integer" in uses:
            raise PolicyError(
                f"{shown}: the code computes with {path} as an integer at {uses['integer']}"
            )
        if isinstance(value, str) and "integer" in uses:
            raise PolicyError(
                f"{shown}: the code computes with {path} as an integer at {uses['integer']}, "
                "not a string"
            )
