"""A value set of :mod:`chunkproof.spec.space` as a Z3 constraint, so that a range means the same
configurations in the prover as in the explorer.

``ctx`` maps each earlier input (and the derived ``sched_block`` and ``prefill_end``) to a
Python value (an input the proof cell keeps concrete) or a Z3 term (a symbolic one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import z3

from chunkproof.model.errors import ConfigError
from chunkproof.spec.space import (
    Bools,
    Ints,
    Junctions,
    Retentions,
    Starts,
    Term,
    TermSet,
    ValueSet,
)


def member(values: ValueSet, var: Any, ctx: Mapping[str, Any]) -> Any:
    """``var`` lies in ``values`` (``var`` is ``(c0, x)`` for the start)."""
    if isinstance(values, Ints):
        return z3.Or(*[z3.And(var >= lo, var <= hi) for lo, hi in values.intervals])
    if isinstance(values, Bools):
        return z3.BoolVal(True) if len(values.options) == 2 else var == values.options[0]
    if isinstance(values, TermSet):
        options = [_term(term, var, ctx) for term in values.terms]
        if values.numbers is not None:
            options.append(member(values.numbers, var, ctx))
        return z3.Or(*options)
    if isinstance(values, Retentions):
        return z3.Or(*[var == r for r in values.options])
    if isinstance(values, Starts):
        return _starts(values, var, ctx)
    if isinstance(values, Junctions):
        return _junctions(values, var, ctx)
    raise ConfigError(f"no constraint for the value set {values.describe()}")


def _term(term: Term, var: Any, ctx: Mapping[str, Any]) -> Any:
    """``var`` = origin + k, k in [low, high] (:class:`~chunkproof.spec.space.Term`)."""
    base = ctx[term.base]
    if isinstance(base, int):
        origin = base * term.mul // term.div
    elif term.div != 1:
        raise ConfigError(f"{term.describe()} needs {term.base} to be concrete in the prover")
    else:
        origin = base * term.mul
    return z3.And(var - origin >= term.low, var - origin <= term.high)


def _hit_unit(ctx: Mapping[str, Any]) -> Any:
    fine = ctx["hash_block"] < ctx["block"]
    return ctx["hash_block"] if fine else ctx["sched_block"]


def _starts(values: Starts, var: Any, ctx: Mapping[str, Any]) -> Any:
    """Kinds of admission start (:class:`~chunkproof.spec.space.Starts`)."""
    start, external = var
    end = ctx["prefill_end"]
    sched, hash_block = ctx["sched_block"], ctx["hash_block"]
    fine = hash_block < ctx["block"]
    inside = z3.And(start > 0, start < end)
    options = []
    for kind in values.kinds:
        if kind == "0":
            options.append(z3.And(start == 0, external == 0))
        elif kind == "block":
            options.append(z3.And(inside, start % sched == 0, external == 0))
        elif kind == "hash" and fine:
            options.append(
                z3.And(inside, start % hash_block == 0, start % sched != 0, external == 0)
            )
        elif kind == "external":
            options.append(z3.And(inside, external == start))
    if values.numbers is not None:
        unit = _hit_unit(ctx)
        number = member(values.numbers, start, ctx)
        options.append(z3.And(number, start < end, external == start % unit))
    return z3.Or(*options) if options else z3.BoolVal(False)


def _junctions(values: Junctions, var: Any, ctx: Mapping[str, Any]) -> Any:
    """Kinds of junction (:class:`~chunkproof.spec.space.Junctions`)."""
    unit = _hit_unit(ctx)
    options = []
    if "0" in values.kinds:
        options.append(var == 0)
    if "any" in values.kinds:
        options.append(z3.And(var > ctx["start"], var <= ctx["tokens"] - 1, var % unit == 0))
    if values.numbers is not None:
        options.append(z3.And(member(values.numbers, var, ctx), var <= ctx["tokens"]))
    return z3.Or(*options) if options else z3.BoolVal(False)
