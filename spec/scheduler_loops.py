"""The loop rules of one ``schedule()`` step (history note 6), written once over a value domain:
NumPy lanes for the explorer (:mod:`chunkproof.spec.scheduler_step`), Z3 terms for the prover
(:mod:`chunkproof.spec.scheduler_step_symbolic`).

A step sees the k positions of the state in list order: the running list, then the waiting
queue, then the finished requests, each position with its phase and c. A request in the running
list is running (its prefill) or decoding (its prefill done, its encoder entries still
referenced: :data:`DECODING`). ``stages(p, c, offer, where)`` is the policy's step (SPEC S3)
of the request at position ``p``; ``where`` marks the lanes whose value is read (a domain may
evaluate only those). Both forms share these rules; only the domain's four connectives
(:class:`Ops`) differ, so the explorer and the prover cannot drift apart.

SPEC Q3: a loop acts on the chunk the release's code gives after every clamp it applies,
whether or not a stage broke SPEC P0 on the way (a split below 0 that the reservation's
``max(..., 0)`` turns into 0 is a zero the loop skips, 0.28 on; one that no clamp catches is
scheduled as it is: ``token_budget -= num_new_tokens`` gives the budget back, up to 0.27).
The releases' zero tests are ``num_new_tokens == 0``, so a value below 0 passes them. Only a
request whose code raises schedules nothing: the engine core is down, and the loop visits no
request after it. The system properties judge every step that does not raise
(:func:`stalled`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from chunkproof.model.policy import LoopRules

RUNNING, WAITING, FINISHED, DECODING = 0, 1, 2, 3
"""Phase codes. A row lists the running list (running and decoding requests in its order),
the waiting queue, then the finished requests. A decoding request has c >= E and still
references an encoder cache entry: ``_free_encoder_inputs`` frees an item only once its end
plus the release's free margin is at most c (0.24-0.32: use_eagle or L), so an item that ends
within the margin of E stays referenced through the request's first decode steps. It keeps its
running seat; the tokens its decode steps take are part of the rest of M (SPEC S4
``adversarial``), not of the step's budget b."""


class Got(NamedTuple):
    """A position's step: the chunk, the split's value, whether it breaks SPEC P0, whether its
    code raises (a P0 breach that schedules nothing, SPEC Q3), and the count of encoder items
    up to the last one its encoder call scheduled or found cached
    (:func:`~chunkproof.model.encoder_items.encoded_through`; 0 without items)."""

    chunk: Any
    split: Any
    unsafe: Any
    crashed: Any
    encoded: Any


Stages = Callable[[int, Any, Any, Any, Any], Got]
"""``stages(p, c, offer, where, shared)``: the step of the request at position ``p`` (module
docstring), ``shared`` the encoder cache embeddings the other requests' entries reference."""

Held = Callable[[int, Any, Any], Any]
"""``held(p, c, e)``: the encoder cache embeddings the entries of the request at position
``p`` reference at state (c, e) (:func:`~chunkproof.model.encoder_items.referenced_embeds`;
a finished request has e = 0: ``_free_request`` freed its entries)."""


@dataclass(frozen=True)
class Pool:
    """The KV block pool the requests of a step share (SPEC KV2 rule 5), as the step reads it:
    ``blocks`` N (the null block among them) and per position whether the request still holds
    the state block of its chunk before the last (``stale``: ``remove_skipped_blocks`` frees it
    when the request next calls ``allocate_slots``); and, per position p, the blocks a request
    in the running list holds at (c, stale) (``held(p, c, stale)``), the blocks a chunk
    [c, e) asks once its stale block is freed (``asked(p, c, e)``), whether that chunk leaves
    a stale block (``leaves_stale(p, c, e)``), what the waiting loop's admission test asks
    for the whole sequence (``gate(p)``: ``full_sequence_must_fit``, 0 where the release has
    none) and the blocks an admission takes beyond its ask (``miscount(p, c, e)``: rule 2e's
    at a connector's hit, rule 5g). The requests carry no encoder items."""

    blocks: Any
    stale: Sequence[Any]
    held: Callable[[int, Any, Any], Any]
    asked: Callable[[int, Any, Any], Any]
    leaves_stale: Callable[[int, Any, Any], Any]
    gate: Callable[[int], Any]
    miscount: Callable[[int, Any, Any], Any]


@dataclass(frozen=True)
class Positions:
    """The k positions of a state as a step reads them, in list order: each one's phase, c and
    e (:mod:`chunkproof.model.encoder_items`), the policy's step of the request there
    (``stages``), the encoder cache embeddings its entries reference (``held``) and, when the
    step allocates KV blocks, the pool they share (``pool``; ``None``: no allocation fails)."""

    phase: Sequence[Any]
    c: Sequence[Any]
    encoded: Sequence[Any]
    stages: Stages
    held: Held
    pool: Pool | None = None


@dataclass(frozen=True)
class Ops:
    """A value domain's connectives: conjunction and disjunction of any number of terms,
    negation, ``then if cond else other`` lane-wise and the floor of ``a / b`` for b >= 1;
    ``false`` is the constant."""

    all_: Callable[..., Any]
    any_: Callable[..., Any]
    not_: Callable[[Any], Any]
    where: Callable[[Any, Any, Any], Any]
    div: Callable[[Any, Any], Any]
    false: Any


@dataclass(frozen=True)
class Outcome:
    """What one step did, per position: the tokens taken (the chunk the release schedules,
    below 0 where no clamp caught a stage below 0: SPEC Q3), the budget offered (0: no loop
    reached it) and whether the waiting loop admitted it; and for the step: the budget left,
    whether the waiting loop broke at a zero, whether a waiting request behind that break
    would have got a chunk (HOL), whether a stage broke P0, and whether a request's code
    raised (the loops stop there, and nothing of the step is judged but P0)."""

    chunk: list[Any]
    offered: list[Any]
    admitted: list[Any]
    left: Any
    broke: Any
    behind_fit: Any
    unsafe: Any
    crashed: Any
    encoded: list[Any]
    """Per position, e after the step (:mod:`chunkproof.model.encoder_items`)."""
    shared: list[Any]
    """Per position, the embeddings the other requests' entries referenced when a loop
    visited it (0 where none did)."""
    decoded: list[Any]
    """Per position, whether the running loop reached a decoding request there (budget left
    and the loop not stopped): its decode step ran, so its c advances by at least 1; one the
    loop did not reach keeps its c."""
    ledger: Ledger | None = None
    """With a pool (:class:`Pool`), what the step's allocations left: the blocks each request
    holds, its stale flag and whether the step preempted it."""


def least_eligible(ops: Ops, phase: Sequence[Any], budget: Any, whole: Any) -> Any:
    """The fewest requests ``schedule()`` counts as eligible (``len(running) + len(waiting)``,
    history note 6): the instance's unfinished ones (a decoding request is in the running
    list), plus one when b < M (the rest of M went to another request's decode)."""
    return sum(ops.where(ph != FINISHED, 1, 0) for ph in phase) + ops.where(budget < whole, 1, 0)


def alone(ops: Ops, phase: Sequence[Any], budget: Any, whole: Any, eligible: Any | None) -> Any:
    """Whether no eligible request is outside the instance: always without the adaptive floor
    (``eligible`` None), else when the environment's count is :func:`least_eligible` (S-LIVE
    asks for the instance alone)."""
    if eligible is None:
        return ops.not_(ops.false)
    return eligible == least_eligible(ops, phase, budget, whole)


def theta_cap(
    ops: Ops,
    phase: Sequence[Any],
    budget: Any,
    whole: Any,
    theta: Any | None,
    eligible: Any | None = None,
) -> Callable[[Any], Any]:
    """What a position is offered from the budget left: the budget left itself when the
    policy has no per-step threshold (``theta`` None), else C8-C9's (history note 6): theta_eff
    is the static theta when two or more requests are eligible, else 0; a theta_eff > 0 caps
    the budget left. Without the adaptive floor (``eligible`` None) the eligible requests are
    :func:`least_eligible` (more would give the same theta_eff). With it
    (``long_prefill_token_threshold_adaptive``), ``eligible`` is the environment's count (at
    least :func:`least_eligible`: the others wait, or decode in the rest of M) and a theta_eff
    > 0 is raised to M // eligible where that is larger."""
    if theta is None:
        return lambda left: left
    count = least_eligible(ops, phase, budget, whole) if eligible is None else eligible
    theta_eff = ops.where(count >= 2, theta, 0)
    if eligible is not None:
        # a count of 0 (no request left) has theta_eff 0; the guard keeps M // count defined
        share = ops.div(whole, ops.where(count >= 1, count, 1))
        theta_eff = ops.where(ops.all_(theta_eff > 0, share > theta_eff), share, theta_eff)
    return lambda left: ops.where(ops.all_(theta_eff > 0, left > theta_eff), theta_eff, left)


class Ledger:
    """What a step's allocations do to its :class:`Pool` (SPEC KV2 rule 5), position by
    position as the loops visit them: the blocks each request holds (``holding``), its stale
    flag, whether the step preempted it (``out``) and whether its admission made the pool
    raise (``raised``, rule 5g)."""

    def __init__(self, ops: Ops, pool: Pool, phase: Sequence[Any], c: Sequence[Any]) -> None:
        self.ops, self.pool = ops, pool
        self.holding = [
            ops.where(ph == RUNNING, pool.held(p, c[p], pool.stale[p]), 0)
            for p, ph in enumerate(phase)
        ]
        self.stale = list(pool.stale)
        self.out = [ops.false] * len(phase)
        self.raised = [ops.false] * len(phase)

    def free(self) -> Any:
        """The free blocks: all but the null block and those the requests hold (a cached
        block no request holds counts free)."""
        return self.pool.blocks - 1 - sum(self.holding)

    def running(
        self, p: int, phase: Sequence[Any], c: Any, chunk: Any, taken: Any
    ) -> tuple[Any, Any]:
        """Rule 5c: the running request at ``p`` asks for the chunk ``taken`` marks; its stale
        block is freed first, granted or not. While the ask exceeds the free blocks the last
        request of the running list is preempted (``running.pop()``: one the loop has not
        visited, its blocks freed), until the ask fits or the request preempts itself, which
        ends the running loop. (granted, preempted itself)."""
        ops = self.ops
        self.holding[p] = ops.where(taken, self.holding[p] - self.stale[p], self.holding[p])
        self.stale[p] = ops.where(taken, 0, self.stale[p])
        ask = self._asked(p, c, chunk)
        short = ops.all_(taken, ask > self.free())
        for q in range(len(phase) - 1, p, -1):
            self._evict(q, ops.all_(short, phase[q] == RUNNING, ops.not_(self.out[q])))
            short = ops.all_(short, ask > self.free())
        self._evict(p, short)
        granted = ops.all_(taken, ops.not_(short))
        self.holding[p] = ops.where(granted, self.holding[p] + ask, self.holding[p])
        leaves = self.pool.leaves_stale(p, c, c + chunk)
        self.stale[p] = ops.where(granted, leaves, self.stale[p])
        return granted, short

    def waiting(self, p: int, c: Any, chunk: Any, taken: Any) -> tuple[Any, Any]:
        """Rule 5b: the waiting request at ``p`` is admitted when the admission test's blocks
        for its whole sequence and its chunk's blocks are each at most the free blocks; a
        refusal ends the waiting loop. An admission at a hit (rule 5e, ``c`` the hit) leaves
        the hit's state block stale. Rule 5g: an admission at a connector's hit takes its ask
        and rule 2e's miscount; where the free blocks cover the ask and not the miscount the
        pool raises (``raised``: the engine core is down). (granted, refused)."""
        ops = self.ops
        free = self.free()
        ask = self._asked(p, c, chunk)
        refused = ops.all_(taken, ops.any_(self.pool.gate(p) > free, ask > free))
        took = ask + ops.where(chunk > 0, self.pool.miscount(p, c, c + chunk), 0)
        self.raised[p] = ops.all_(taken, ops.not_(refused), took > free)
        granted = ops.all_(taken, ops.not_(refused), ops.not_(self.raised[p]))
        self.holding[p] = ops.where(granted, took, self.holding[p])
        leaves = self.pool.leaves_stale(p, c, c + chunk)
        self.stale[p] = ops.where(granted, leaves, self.stale[p])
        return granted, refused

    def _asked(self, p: int, c: Any, chunk: Any) -> Any:
        """The chunk's ask, at least 0 (a chunk below 0, SPEC Q3, allocates nothing)."""
        ask = self.pool.asked(p, c, c + chunk)
        return self.ops.where(ask > 0, ask, 0)

    def _evict(self, q: int, where: Any) -> None:
        """Preempt the request at ``q`` on the lanes ``where``: its blocks are freed."""
        ops = self.ops
        self.out[q] = ops.any_(self.out[q], where)
        self.holding[q] = ops.where(where, 0, self.holding[q])
        self.stale[q] = ops.where(where, 0, self.stale[q])


def schedule_step(
    ops: Ops,
    at: Positions,
    budget: Any,
    cap: Callable[[Any], Any],
    max_seqs: int,
    rules: LoopRules,
) -> Outcome:
    """The two loops of ``schedule()`` (history note 6) at budget ``budget``, each request
    offered ``cap(budget left)``, a zero doing what ``rules`` say, each request's chunk the
    one its code gives after every clamp (SPEC Q3: P0-violating or not; module docstring).
    Running loop: each running request in order gets its chunk and ``token_budget -= chunk``;
    a zero is ``continue`` (every release) or ``break``; the loop stops when no budget is left.
    A decoding request the loop reaches decodes (its tokens are outside b: :data:`DECODING`).
    Waiting loop: the waiting requests in queue order while budget and a seat (``max_seqs``)
    remain; a request whose chunk is not 0 is admitted; a zero the split gives (its test, right
    after it, sees 0), and one a later stage gives (the split's value passed that test), each
    breaks the loop (every release) or passes the request, which keeps its place
    (``skip_request`` from C9, a later stage's; ``stay`` is refused before). Every waiting
    request behind a break is run at the budget left, for HOL. A request whose code raises
    takes nothing and ends the step (the engine core is down).

    The encoder cache is the step's, shared: each request's call sees what the entries of the
    others reference (``held`` at their state (c, e)), and a request the step schedules
    allocates what its call scheduled, so its e becomes max(e, the call's count) before the
    next request is visited (``schedule()`` allocates in the loop; entries are freed after the
    step, in ``update_from_output``).

    With a KV block pool (``at.pool``, SPEC KV2 rule 5) every chunk the loops take asks for
    its blocks (:class:`Ledger`): a running request the pool refuses preempts the last of the
    running list until it fits, or itself, which ends the running loop; the waiting loop runs
    only when the step preempted nothing, and a refusal there ends it (read from the FCFS
    ``schedule()``: ``running.pop()``, ``if not preempted_reqs``, ``break``). An admission
    the pool raises at (rule 5g) breaks P0 and ends the step, as a request whose code raises."""
    phase, c, held = at.phase, at.c, at.held
    k = len(phase)
    ledger = None if at.pool is None else Ledger(ops, at.pool, phase, c)
    chunk: list[Any] = []
    offered: list[Any] = []
    after = list(at.encoded)
    refs = [held(p, c[p], after[p]) for p in range(k)]
    shared: list[Any] = [0] * k

    def visit(p: int, offer: Any, where: Any, reach: Any) -> tuple[Got, Any]:
        """The step of position ``p`` on the lanes ``where``, and the lanes where the loop
        schedules it: a loop reached it (``reach``), its code does not raise and its chunk is
        not 0 (the releases' zero tests are ``== 0``); there it allocates what its call
        scheduled."""
        shared[p] = ops.where(where, sum(refs) - refs[p], shared[p])
        got = at.stages(p, c[p], offer, where, shared[p])
        taken = ops.all_(reach, ops.not_(got.crashed), got.chunk != 0)
        grown = ops.all_(taken, got.encoded > after[p])
        after[p] = ops.where(grown, got.encoded, after[p])
        refs[p] = held(p, c[p], after[p])
        return got, taken

    left, unsafe, crashed, stopped = budget, ops.false, ops.false, ops.false
    decoded = []
    for p in range(k):
        going = ops.all_(left > 0, ops.not_(stopped), ops.not_(crashed))
        decoded.append(ops.all_(phase[p] == DECODING, going))
        reach = ops.all_(phase[p] == RUNNING, going)
        if ledger is not None:
            reach = ops.all_(reach, ops.not_(ledger.out[p]))
        offer = cap(left)
        got, taken = visit(p, offer, reach, reach)
        if ledger is not None:
            taken, itself = ledger.running(p, phase, c[p], got.chunk, taken)
            stopped = ops.any_(stopped, itself)
        chunk.append(ops.where(taken, got.chunk, 0))
        offered.append(ops.where(reach, offer, 0))
        unsafe = ops.any_(unsafe, ops.all_(reach, got.unsafe))
        crashed = ops.any_(crashed, ops.all_(reach, got.crashed))
        if rules.running == "break":
            zero = ops.all_(reach, ops.not_(got.crashed), got.chunk == 0)
            stopped = ops.any_(stopped, zero)
        left = left - chunk[p]
    admitted: list[Any] = []
    seated = sum(ops.where(ops.any_(ph == RUNNING, ph == DECODING), 1, 0) for ph in phase)
    broke = behind_fit = full = ops.false
    if ledger is not None:  # the waiting loop runs only in a step that preempted nothing
        full = ops.any_(*ledger.out)
    for p in range(k):
        waiting = phase[p] == WAITING
        going = ops.all_(ops.not_(broke), ops.not_(crashed), left > 0, seated < max_seqs)
        reach = ops.all_(waiting, going, ops.not_(full))
        behind = ops.all_(waiting, broke)
        offer = cap(left)
        got, taken = visit(p, offer, ops.any_(reach, behind), reach)
        runs = ops.not_(got.crashed)
        behind_fit = ops.any_(behind_fit, ops.all_(behind, runs, got.chunk > 0))
        zero = ops.all_(runs, got.chunk == 0)
        breaks = [got.split == 0] if rules.split == "break" else []
        breaks += [got.split != 0] if rules.later == "break" else []
        stop = ops.all_(zero, ops.any_(*breaks)) if breaks else ops.false
        broke = ops.any_(broke, ops.all_(reach, stop))
        if ledger is not None:
            taken, refused = ledger.waiting(p, c[p], got.chunk, taken)
            full = ops.any_(full, refused)
            unsafe = ops.any_(unsafe, ledger.raised[p])
            crashed = ops.any_(crashed, ledger.raised[p])
        admitted.append(taken)
        seated = seated + ops.where(taken, 1, 0)
        got_chunk = ops.where(taken, got.chunk, 0)
        chunk[p] = chunk[p] + got_chunk
        offered[p] = ops.where(reach, offer, offered[p])
        unsafe = ops.any_(unsafe, ops.all_(reach, got.unsafe))
        crashed = ops.any_(crashed, ops.all_(reach, got.crashed))
        left = left - got_chunk
    return Outcome(
        chunk,
        offered,
        admitted,
        left,
        broke,
        behind_fit,
        unsafe,
        crashed,
        after,
        shared,
        decoded,
        ledger,
    )


def stalled(ops: Ops, done: Outcome) -> Any:
    """Whether a step makes no progress, the system form of SPEC P1's chunk <= 0 (SPEC Q3):
    no request's code raised (a step that raises is P0 alone: the engine core is down), no
    request got a chunk > 0 and no decode step ran. With every chunk 0 the state is its own
    successor; a chunk below 0 (a P0 breach no clamp caught) moves c back, no progress
    either. Stage values outside their range do not stop the judgement: the release schedules
    what its code gives. A step that preempts a request changes the state (the request waits
    again), so it is no stall either (:class:`Ledger`)."""
    preempted = done.ledger.out if done.ledger is not None else []
    return ops.all_(
        ops.not_(done.crashed),
        *[taken <= 0 for taken in done.chunk],
        *[ops.not_(ran) for ran in done.decoded],
        *[ops.not_(out) for out in preempted],
    )


def alone_fit(ops: Ops, at: Positions, offer: Any, where: Any) -> Any:
    """Whether some request in its prefill (running or waiting) would get a chunk > 0 if it
    were offered ``offer`` (the whole budget b, capped by theta_eff) as the only one (STARVE),
    on the lanes ``where``; the other requests' encoder entries stay referenced. The chunk is
    the one its code gives, unless it raises (SPEC Q3)."""
    refs = [at.held(p, at.c[p], e) for p, e in enumerate(at.encoded)]
    fit = ops.false
    for p, ph in enumerate(at.phase):
        mine = ops.all_(where, ops.any_(ph == RUNNING, ph == WAITING))
        got = at.stages(p, at.c[p], offer, mine, sum(refs) - refs[p])
        fit = ops.any_(fit, ops.all_(mine, ops.not_(got.crashed), got.chunk > 0))
    return fit


class Settled(NamedTuple):
    """A request's place after a step: its phase, its c and the group of the list it is in
    (0 the running list, 1 admitted by the step, 2 preempted by the step (the head of the
    waiting queue, in running-list order: each victim is prepended as it is popped from the
    end), 3 the waiting queue, 4 finished)."""

    phase: Any
    c: Any
    group: Any


def settle(
    ops: Ops,
    phase: Any,
    c: Any,
    taken: Any,
    admitted: Any,
    end: Any,
    held_at: Callable[[Any], Any],
    preempted: Any = False,
    resumed: Any = None,
) -> Settled:
    """Where a request is after a step that gave it ``taken`` tokens (its chunk, or a decoding
    request's decode advance) (history note 6; :data:`DECODING`): at c + taken >= E it has
    done its prefill, and is decoding while its entries still reference an item at that c
    (``held_at(c + taken)`` > 0, the entries its step left), else finished, at c = E (its
    later decode steps are part of the rest of M). Otherwise a running or admitted request is
    running, a waiting one waits. A request the waiting loop admitted ran from ``resumed``
    (its hit, SPEC KV2 rule 5e; ``None``: c). A request the step preempted (it took nothing)
    waits at the head of the queue and keeps its c, the tokens it computed, whose blocks the
    prefix cache may still hold (``_preempt_request`` sets num_computed_tokens = 0; its next
    admission starts from the hit the lookup then finds, rule 5e); a waiting request the
    step did not admit keeps its c too."""
    start = c if resumed is None else ops.where(admitted, resumed, c)
    after = start + taken
    done = after >= end
    freed = ops.all_(done, held_at(after) <= 0)
    in_list = ops.any_(phase == RUNNING, phase == DECODING, admitted)
    new_phase = ops.where(
        preempted,
        WAITING,
        ops.where(freed, FINISHED, ops.where(done, DECODING, ops.where(in_list, RUNNING, phase))),
    )
    group = ops.where(
        preempted,
        2,
        ops.where(freed, 4, ops.where(admitted, 1, ops.where(in_list, 0, 3))),
    )
    c_after = ops.where(freed, end, after)
    return Settled(new_phase, c_after, group)
