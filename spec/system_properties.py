"""System properties of one ``schedule()`` step over several requests (SPEC N1), beside
the per-request properties P0-P8 (SPEC P).

They are judged on the transitions of :class:`~chunkproof.spec.scheduler_step.SchedulerStepModel`
(a global state and the token budget b the environment offers the step), from what the step
computed: whether it scheduled any request, which requests a zero blocked, and what each request
would have been given alone. Each predicate returns ``True`` where the transition *violates*
the property (the ``bad[pid]`` arrays of a :class:`~chunkproof.spec.interface.Transitions`).

"For ever" is a cycle of global states. In the scheduler-step model without a KV block pool
every request's c only grows and the two queues keep their order (the model's docstring), so
every cycle is a self-loop: a step that schedules nothing. A property about what happens for
ever is therefore a property of one transition whose target is its source. With a pool a
preempted request resumes at a hit at most its c (SPEC KV2 rule 5e), 0 included, so its c can
fall and a cycle can pass through many states: S-POOL judges those on the whole explored
graph.

SPEC Q3: the properties judge every step whose code does not raise, P0-violating or not, on the
chunks the release schedules after every clamp it applies. A step "schedules nothing" when it
makes no progress (:func:`~chunkproof.spec.scheduler_loops.stalled`): every chunk is at most 0
and no decode step ran. A chunk below 0 (a stage below 0 that no clamp catches, SPEC P0) moves
c back rather than forward: no progress either, as SPEC P1 counts it for one request.
"""

from __future__ import annotations

import numpy as np

from chunkproof.spec.properties import Property

SYSTEM_PROPERTIES: dict[str, Property] = {
    p.id: p
    for p in (
        Property(
            "S-LIVE",
            "SYSTEM-LIVE",
            "no reachable global state with unfinished work schedules nothing when the step "
            "is offered the whole budget M (it would stay there for ever)",
        ),
        Property(
            "HOL",
            "HEAD-OF-LINE",
            "no step's waiting loop stops on a zero at its head while a waiting request behind "
            "it would get a chunk > 0 from the budget left",
        ),
        Property(
            "STARVE",
            "STARVATION",
            "no reachable step that schedules nothing (a cycle: it repeats for ever under the "
            "same budget) leaves out a request that the budget alone would give a chunk > 0",
        ),
        Property(
            "S-POOL",
            "POOL-LIVE",
            "with a KV block pool, no reachable state starts a run of steps each offered the "
            "whole budget M that never finishes every request (a cycle through preemption: "
            "a preempted request resumes at a hit at most its c)",
            "the instance alone in the engine; a preempted request resumes at any hit on its "
            "resume grid (B with fine hits, else B_s) up to min(c, T - 1), or at 0 (SPEC KV2 "
            "rule 5e)",
        ),
    )
}
"""The system properties, in the order reports list them. S-POOL is judged only where the
requests share a KV block pool (``chunkproof system --pool``)."""

POOL_PROPERTIES = ("S-POOL",)
"""The system properties of runs that go on for ever through preemption (judged on the whole
explored graph: :mod:`chunkproof.checker.engines.lassos`)."""


def system_live(
    stalled: np.ndarray,
    unfinished: np.ndarray,
    budget: np.ndarray,
    whole: np.ndarray,
    alone: np.ndarray,
) -> np.ndarray:
    """S-LIVE is violated by a step offered the whole budget (``budget == whole``, M) from a
    state where some request is unfinished, with no eligible request outside the instance
    (``alone``: :func:`~chunkproof.spec.scheduler_loops.alone`), that schedules nothing:
    the state is its own successor when the instance runs alone under the best budget the
    environment can give, so no request progresses for ever (the system form of SPEC P1).
    ``stalled``: the step makes no progress (module docstring, SPEC Q3)."""
    bad: np.ndarray = stalled & unfinished & (budget == whole) & alone
    return bad


def head_of_line(broke: np.ndarray, behind_fit: np.ndarray) -> np.ndarray:
    """HOL is violated by a step whose waiting loop broke on a zero (``broke``; history note
    6: a split zero in every release, any zero up to 0.32) while some waiting request behind
    the break would have got a chunk > 0 from the budget left (``behind_fit``: the model runs
    the stages of every request behind the break at that budget). Judged on every step whose
    code does not raise (module docstring)."""
    bad: np.ndarray = broke & behind_fit
    return bad


def starvation(stalled: np.ndarray, alone_fit: np.ndarray) -> np.ndarray:
    """STARVE is violated by a step that schedules nothing (``stalled``: no progress, a cycle of
    global states, module docstring) while some unfinished request would get a chunk > 0 from
    the same budget if it were scheduled first (``alone_fit``): offered that budget for ever,
    the request is never scheduled although the budget would serve it."""
    bad: np.ndarray = stalled & alone_fit
    return bad
