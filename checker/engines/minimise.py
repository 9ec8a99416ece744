"""Minimal counterexamples of a violated proof cell: the solver finds and certifies the smallest
T, the explorer minimises M and the trace at that T (SPEC C). This orchestration sits above
both engines, which know nothing of each other.

1. Bounded search (:func:`chunkproof.proofs.bounded.bounded_search`): the transition relation
   unrolled 1, 2, 4, 8 steps, a violation at the last state, minimising the cell's inputs in
   SPEC C's order (T, L, M, then the other fields: :func:`_objectives`), so no
   input is left to whichever model the solver returns. When that search runs long, the least
   T is found over every state instead (:func:`_least_tokens`) and the other inputs are
   minimised at that T.
2. The minimum is certified for traces of any length: a reachable violation with a smaller T
   is sought (:func:`reachable_below`: over every state of such runs when they are few, else by
   Spacer); unsat proves T minimal.
3. At that T, with every other symbolic input at the solver's minimum except the flags (D, K,
   S: both values where the cell has both), the explorer enumerates every M of the range up to
   the solver's, exhaustively and in groups of ascending M until one holds a counterexample,
   and returns the least counterexample in SPEC C's order (the smallest M, its BFS-shortest
   trace, then the flags), rebuilt by the concrete policy; so the result does not depend on
   which model the solver happened to return. When the Ms up to the least violating one are
   too many to enumerate, :func:`reachable_below` finds the smallest M by bisection (each
   answer holds for traces of any length) and the explorer takes the shortest trace at that
   one M. If a query times out, the solver's own trace is replayed instead, and the result says
   which dimensions were minimised within the bounded search only.

``--timeout`` bounds it all (SPEC: every phase): once a violating trace is found, no step that
refines it (a query, a group of the explorer, a bisection step) starts past
:data:`MINIMISING_TIMEOUTS` timeouts; the trace found so far is then reported with what was
established and the words "not proved minimal" (:data:`OUT_OF_TIME`).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import z3

from chunkproof.checker.engines.search import Candidate, explore, minimal_counterexample, rank
from chunkproof.checker.engines.search import replay_candidate as replay
from chunkproof.checker.engines.traces import ModelMismatch, build_counterexample, violates
from chunkproof.model.config import Config
from chunkproof.model.counterexample import Counterexample
from chunkproof.proofs.bounded import SolverTrace, bounded_search
from chunkproof.proofs.chc import reachable_violation
from chunkproof.proofs.finite import finite_reachable_violation
from chunkproof.spec.interface import as_term
from chunkproof.spec.request import RequestModel, budget_bounds
from chunkproof.spec.request_symbolic import SymbolicRequest
from chunkproof.spec.space import Bools, Ints, Junctions, Retentions, Space, Starts, TermSet

DEPTHS = (1, 2, 4, 8)
EXPLORER_LANES = 30_000_000
"""Largest (state, budget, M) table the explorer minimises M over."""
FIRST_GROUP_LANES = 32_768
GROUP_LANES = 2_000_000
"""Lanes of the first and of the largest explorer run of :func:`_explore_ascending`."""
FIRST_SEARCH_MS = 5_000
"""How long the first bounded search (T and the other inputs minimised together) may take
before the least T is sought over every state instead (:func:`_least_trace`): Optimize's time
on the same query of a production cell ranged from under 1 s to over 60 s between runs."""
FINITE_TOKENS = 32
"""The largest T :func:`_least_tokens` asks about (over every state c <= 32 a query took 1-6 s
on a production cell, c <= 64 8-35 s)."""
FINITE_STATES = 64
"""The most states :func:`reachable_below` lists for a query over every state; beyond, Spacer
alone answers (the query grows with the square of the states)."""
MINIMISING_TIMEOUTS = 6
"""How many ``--timeout`` the minimisation of one cell, and the search for the least
counterexample across cells, may take (a :class:`Deadline` each): past it no further step
starts, and what was found is reported as not proved minimal."""
EVERY_STATE = "Z3 over every state c < T"
SPACER = "Spacer"
UNASKED = "not asked"
OUT_OF_TIME = (
    f"; not proved minimal: the minimisation stopped at its time limit ({MINIMISING_TIMEOUTS} "
    "times --timeout)"
)


class Deadline:
    """When a minimisation stops refining what it found (``--timeout`` bounds every phase):
    a step (a query, a group of the explorer) starts only before it, so the search ends at
    most one step after it. The time is the wall clock's (seconds since the epoch): the
    deadline travels to pool and Dask workers, whose monotonic clocks are not the caller's.
    :attr:`cut` records that a step was left out: the result is then not proved minimal."""

    def __init__(self, at: float) -> None:
        self.at = at
        self.cut = False

    @classmethod
    def after(cls, timeout_ms: int) -> Deadline:
        """:data:`MINIMISING_TIMEOUTS` timeouts from now."""
        return cls(time.time() + MINIMISING_TIMEOUTS * timeout_ms / 1000)

    def allows(self) -> bool:
        """Whether a further step may start (when not, the result is cut short)."""
        if time.time() < self.at:
            return True
        self.cut = True
        return False


@dataclass(frozen=True)
class Reached:
    """A reachability answer ("sat", "unsat" or "unknown") and the engine that gave it."""

    status: str
    by: str


def reachable_below(
    model: SymbolicRequest, pid: str, extra: Any, tokens: int, timeout_ms: int
) -> Reached:
    """Whether a violation of ``pid`` is reachable where ``extra`` holds, ``extra`` bounding T
    by ``tokens``; for traces of any length either way. First over every state of such runs
    (:func:`~chunkproof.proofs.finite.finite_reachable_violation`, with half the timeout) when
    they are at most :data:`FINITE_STATES`, then by Spacer with the time left: on the production
    range's minimisation queries (T below 17 or 25) the first answers in about a second where
    Spacer ran out of its 60 s."""
    started = time.monotonic()
    if tokens <= FINITE_STATES:
        status = _over_states(model, pid, extra, tokens, timeout_ms // 2)
        if status != "unknown":
            return Reached(status, EVERY_STATE)
    left = timeout_ms - int((time.monotonic() - started) * 1000)
    return Reached(reachable_violation(model, pid, extra, max(left, 1)).status, SPACER)


def _over_states(model: SymbolicRequest, pid: str, extra: Any, tokens: int, timeout_ms: int) -> str:
    """The query over every state of the runs with T <= ``tokens``
    (:func:`~chunkproof.proofs.finite.finite_reachable_violation` on
    :meth:`~chunkproof.spec.request_symbolic.SymbolicRequest.states_below`)."""
    states = model.states_below(tokens)
    return finite_reachable_violation(model, pid, extra, states, timeout_ms)


def violation_ranked_below(
    model: SymbolicRequest, pid: str, best: Config, timeout_ms: int
) -> Reached:
    """Whether the cell has a reachable violation of ``pid`` whose (T, B, L, M) comes before
    ``best``'s in SPEC C's order (:func:`reachable_below`, traces of any length).
    Only then can the cell's minimal counterexample rank before ``best``'s: one with the same
    (T, B, L, M) could differ in its trace length only, which no claim across cells covers
    (they say no other cell holds a smaller T)."""
    v = model.view
    keys = [(v.tokens, best.T), (v.block, best.block), (v.lookahead, best.lookahead)]
    before = as_term(v.max_sched < best.max_sched)
    for term, value in reversed(keys):
        before = z3.Or(as_term(term < value), z3.And(as_term(term == value), before))
    return reachable_below(model, pid, before, best.T, timeout_ms)


def minimal_for_cell(
    model: SymbolicRequest, pid: str, timeout_ms: int
) -> tuple[Counterexample | None, str]:
    """The cell's minimal counterexample (module docstring); None, and why, when the search
    is undecided. Past :data:`MINIMISING_TIMEOUTS` timeouts (:class:`Deadline`) no step
    refines what was found: the violating trace found so far is reported, with what its
    search established and :data:`OUT_OF_TIME`."""
    until = Deadline.after(timeout_ms)
    least = _least_trace(model, pid, timeout_ms, until)
    if isinstance(least, str):
        return None, least
    found, certified = least
    cfg = Config(**model.concrete(found.model))
    how = _tokens_claim(found, certified)
    how += f"; L and the inputs after M are the least at that T in {_steps(found.depth)}"
    cx, about_m = _least_max_sched(model, pid, cfg, found, timeout_ms, until)
    return cx, how + about_m + (OUT_OF_TIME if until.cut else "")


def _least_max_sched(
    model: SymbolicRequest,
    pid: str,
    cfg: Config,
    found: SolverTrace,
    timeout_ms: int,
    until: Deadline,
) -> tuple[Counterexample, str]:
    """The counterexample at ``cfg``'s T with the least M and the shortest trace there
    (module docstring, 3), and what is claimed of them: by the explorer, else by bisection,
    else the solver's trace ``found``, its M and length minimal within its depth only."""
    ms = [m for m in _max_sched_values(model, cfg) if m <= cfg.max_sched]
    cx = _explore_ascending(model, pid, cfg, ms, until) if until.allows() else None
    if cx is not None:
        return cx, "; M and the trace length are minimal at that T (explorer, exhaustive)"
    bisected = _bisect_max_sched(model, pid, cfg, timeout_ms, until)
    if bisected is not None and until.allows():
        smallest, by = bisected
        cx = _explore_at(model, pid, cfg.replace(max_sched=smallest), [smallest])
        if cx is not None:
            return cx, (
                f"; M is minimal at that T (bisection, {by}), the trace is the shortest at "
                "that M (explorer)"
            )
    replayed = _replayed(model, pid, cfg, found)
    return replayed, f"; M and the trace length are minimal in {_steps(found.depth)} only"


def _tokens_claim(found: SolverTrace, certified: Reached) -> str:
    """What the search established about T (:func:`_least_trace`)."""
    if certified.status == "unsat":
        return (
            f"in its cell, T is the minimum over traces of any length ({certified.by}: no "
            "smaller T violates)"
        )
    if certified.by == UNASKED:
        return f"T is the minimum over traces of {_steps(found.depth)} (not certified beyond)"
    return (
        f"T is the minimum over traces of {_steps(found.depth)} ({certified.by}: "
        f"{certified.status})"
    )


def _least_trace(
    model: SymbolicRequest, pid: str, timeout_ms: int, until: Deadline
) -> tuple[SolverTrace, Reached] | str:
    """A violating trace at the least T of the bounded search, the other inputs least at
    that T in SPEC C's order, and the answer on whether a smaller T violates at any depth
    (module docstring, 1 and 2); or why there is none. A bounded search that runs past
    :data:`FIRST_SEARCH_MS` leaves the least T to :func:`_least_tokens` and the other inputs
    to a search at that T (:func:`_trace_at`); when these find nothing, it is run again with
    the whole timeout, as are the searches at the depths after it. Once a trace is found,
    no further query starts past ``until``."""
    v = model.view
    found: SolverTrace | None = None
    certified = Reached("unknown", SPACER)
    first_ms = min(timeout_ms, FIRST_SEARCH_MS)
    for depth in DEPTHS:
        if found is not None and not until.allows():
            break
        result = bounded_search(model, pid, depth, _objectives(model), first_ms)
        if result == "unknown" and first_ms < timeout_ms:
            least = _least_tokens(model, pid, timeout_ms)
            at = _trace_at(model, pid, least, timeout_ms) if least is not None else None
            if isinstance(at, tuple):
                return at
            first_ms = timeout_ms  # the states gave no answer: not asked again
            result = bounded_search(model, pid, depth, _objectives(model), timeout_ms)
        if result == "unknown":
            return f"the bounded search at depth {depth} timed out"
        if isinstance(result, SolverTrace):
            found = result
            if not until.allows():
                certified = Reached("unknown", UNASKED)
                break
            tokens = _value(result, v.tokens)
            smaller = as_term(v.tokens < tokens)
            certified = reachable_below(model, pid, smaller, tokens - 1, timeout_ms)
            if certified.status == "unsat":
                break
    if found is None:
        return f"no violation within {DEPTHS[-1]} steps"
    return found, certified


def _least_tokens(model: SymbolicRequest, pid: str, timeout_ms: int) -> tuple[int, Reached] | None:
    """The least T with a reachable violation, at any depth, by queries over every state
    (:func:`_over_states`): is there one with
    T <= 1, 2, 4, ... :data:`FINITE_TOKENS`, then bisection below the first bound that has
    one; with the answer that no smaller T violates. None when there is none up to
    :data:`FINITE_TOKENS` or a query is undecided."""
    v = model.view

    def violates_by(tokens: int) -> str:
        return _over_states(model, pid, as_term(v.tokens <= tokens), tokens, timeout_ms)

    low, high = 1, 1
    while True:
        answer = violates_by(high)
        if answer == "sat":
            break
        if answer == "unknown" or high >= FINITE_TOKENS:
            return None
        low, high = high + 1, min(2 * high, FINITE_TOKENS)
    while low < high:
        middle = (low + high) // 2
        answer = violates_by(middle)
        if answer == "unknown":
            return None
        low, high = (low, middle) if answer == "sat" else (middle + 1, high)
    return high, Reached("unsat", EVERY_STATE)


def _trace_at(
    model: SymbolicRequest, pid: str, least: tuple[int, Reached], timeout_ms: int
) -> tuple[SolverTrace, Reached] | str:
    """A violating trace at T = ``least``'s, the other inputs least at that T in SPEC C's
    order within the fewest steps of :data:`DEPTHS` that hold one."""
    tokens, certified = least
    at = as_term(model.view.tokens == tokens)
    for depth in DEPTHS:
        result = bounded_search(model, pid, depth, _objectives(model), timeout_ms, at)
        if result == "unknown":
            return f"the bounded search at T={tokens}, depth {depth}, timed out"
        if isinstance(result, SolverTrace):
            return result, certified
    return f"no violation at T={tokens} within {DEPTHS[-1]} steps"


def _objectives(model: SymbolicRequest) -> list[Any]:
    """The cell's integer inputs in SPEC C's order of minimisation: T, L, M (B is a cell
    input), then the other configuration fields in their order, each encoder item's start and
    length at the items' place. Minimised in this order, they leave the solver no choice, so
    a counterexample does not depend on which model it happens to return."""
    v = model.view
    first = ("tokens", "lookahead", "max_sched")
    terms = [getattr(v, name) for name in first]
    for field in dataclasses.fields(Config):
        if field.name == "items":
            terms += [part for item in v.mm_items for part in (item.start, item.length)]
        elif field.name in model.symbols and field.name not in first:
            terms.append(getattr(v, field.name))
    return [t for t in terms if z3.is_arith(t) and not z3.is_int_value(t)]


def _steps(depth: int) -> str:
    return "1 step" if depth == 1 else f"up to {depth} steps"


def _value(trace: SolverTrace, term: Any) -> int:
    return int(trace.model.eval(as_term(term), model_completion=True).as_long())


def _max_sched_values(model: SymbolicRequest, cfg: Config) -> list[int]:
    """The M values of the cell's range up to ``cfg``'s, at least max(L, 1) (the main
    category), capped at a million values."""
    values = model.cell.grid.sets["max_sched"]
    assert isinstance(values, Ints)
    low = max(values.low, 1)
    found = []
    for low_i, high_i in values.intervals:
        for m in range(max(low_i, low), min(high_i, cfg.max_sched) + 1):
            found.append(m)
            if len(found) > 1_000_000:
                return found
    return found


def _lanes(model: SymbolicRequest, cfg: Config, ms: list[int]) -> int:
    """The (state, budget) lanes the explorer evaluates at ``cfg`` over the M values ``ms``, at
    most (:func:`_lanes_per_budget`, min(M, T) budgets per M)."""
    return _lanes_per_budget(model, cfg) * sum(min(m, cfg.T) for m in ms)


def _lanes_per_budget(model: SymbolicRequest, cfg: Config) -> int:
    """The lanes of one budget at ``cfg``: E states for every combination of the flags the
    cell's grid leaves both values (:func:`_fixed` keeps their sets)."""
    sets = model.cell.grid.sets
    flags = 1 << sum(
        isinstance(sets.get(name), Bools) and not sets[name].fixed() for name in cfg.to_dict()
    )
    return cfg.prefill_end * flags


def _explore_ascending(
    model: SymbolicRequest, pid: str, cfg: Config, ms: list[int], until: Deadline
) -> Counterexample | None:
    """The explorer's minimal counterexample at ``cfg`` over the ascending M values ``ms``,
    explored in groups of ascending M (the first of :data:`FIRST_GROUP_LANES` lanes, each next
    twice as large up to :data:`GROUP_LANES`, :data:`EXPLORER_LANES` in all) until a group
    holds one: every smaller M was explored exhaustively before it, so its least M is the least
    of ``ms``. None when the lanes run out first (at B = 528 the least M can be 3 where the
    solver's is 526: the first group finds it), or when ``until`` comes before a group."""
    per_budget = _lanes_per_budget(model, cfg)
    spent = grouped = 0
    size = FIRST_GROUP_LANES
    group: list[int] = []
    for m in ms:
        lanes = per_budget * min(m, cfg.T)
        spent += lanes
        if spent > EXPLORER_LANES:
            break
        group.append(m)
        grouped += lanes
        if grouped >= size:
            if not until.allows():
                return None
            found = _explore_at(model, pid, cfg, group)
            if found is not None:
                return found
            group, grouped, size = [], 0, min(2 * size, GROUP_LANES)
    return _explore_at(model, pid, cfg, group) if group and until.allows() else None


def _explore_at(
    model: SymbolicRequest, pid: str, cfg: Config, ms: list[int]
) -> Counterexample | None:
    """The explorer's minimal counterexample at ``cfg`` over the M values ``ms``, or None when
    there is none or it is too large to enumerate."""
    if not ms or _lanes(model, cfg, ms) > EXPLORER_LANES:
        return None
    grid = model.cell.grid.narrowed(_fixed(cfg.to_dict()) | {"max_sched": Ints.of(ms)})
    explicit = RequestModel(model.policy, Space((grid,), model.budget), model.window)
    exploration = explore(explicit, (pid,))
    return minimal_counterexample(exploration, pid, "main")


def _fixed(fields: dict[str, Any]) -> dict[str, Any]:
    """Value sets fixing every input but M and the flags at ``fields``' values. The flags
    (D, K, S) keep the cell's own sets: the explorer then takes the least of them in SPEC C's
    order, where the solver's model would hold whichever value it happened to find (which
    differs between processes)."""
    out: dict[str, Any] = {}
    for name, value in fields.items():
        if name in ("max_sched", "sched_block", "partial_hits", "external") or isinstance(
            value, bool
        ):
            continue
        if name == "start":
            out[name] = Starts((), Ints(((value, value),))) if value else Starts(("0",))
        elif name == "junction":
            out[name] = Junctions((), Ints(((value, value),))) if value else Junctions(("0",))
        elif name == "retention":
            out[name] = Retentions((value,))
        else:
            out[name] = TermSet(Ints(((value, value),)), ())
    return out


def _bisect_max_sched(
    model: SymbolicRequest, pid: str, cfg: Config, timeout_ms: int, until: Deadline
) -> tuple[int, str] | None:
    """The least M <= cfg.max_sched with a reachable violation at cfg's other inputs, by
    bisection (:func:`reachable_below`), and the engines that answered; None if a query is
    undecided or ``until`` comes before one."""
    v = model.view
    fixed = z3.And(
        *[
            as_term(getattr(v, name) == value)
            for name, value in cfg.to_dict().items()
            if name in model.symbols and name != "max_sched"
        ]
    )
    low, high = max(cfg.lookahead, 1), cfg.max_sched
    engines: set[str] = set()
    while low < high:
        if not until.allows():
            return None
        middle = (low + high) // 2
        extra = z3.And(fixed, as_term(v.max_sched <= middle))
        answer = reachable_below(model, pid, extra, cfg.T, timeout_ms)
        engines.add(answer.by)
        if answer.status == "sat":
            high = middle
        elif answer.status == "unsat":
            low = middle + 1
        else:
            return None
    return high, " and ".join(sorted(engines)) or "no query: the least M in scope"


def _replayed(model: SymbolicRequest, pid: str, cfg: Config, found: SolverTrace) -> Counterexample:
    """The solver's trace rebuilt by the concrete policy; it must land where the solver says."""
    path = tuple((s[0], a[0]) for s, a in zip(found.states, found.actions, strict=True))
    high = budget_bounds(cfg, model.budget)[1]
    final_budget = high if pid in ("P1", "P2") else found.final_action[0]
    cand = Candidate(rank(cfg, len(path) + 1), cfg, path, (found.final_state[0], final_budget))
    steps = replay(model.policy, cand, pid)
    if not violates(pid, cfg, steps[-1], model.window, high, policy=model.policy):
        raise ModelMismatch(f"{pid}: the solver's counterexample does not replay natively")
    return build_counterexample(model.policy, cfg, pid, steps, model.window, model.budget, {})
