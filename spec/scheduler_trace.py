"""One instance of the scheduler-step model along given budgets (SPEC N1): the trace a
multi-request counterexample records (:mod:`chunkproof.model.system_counterexample`), and its
replay.

Each step is the model's own Next, :meth:`~chunkproof.spec.scheduler_step.SchedulerStepModel.
step`, on the one global state reached so far (no symmetry reduction: every request keeps its
label). Per request it records the list it was in and its place, and, where a loop reached it,
the SPEC C stage values of its step at the budget that loop offered it, from the policy's
concrete stages (:func:`chunkproof.model.step.step`, SPEC S3); per step, the properties the
model finds broken on the transition. Replay recomputes all of it and compares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from chunkproof.model.config import Config
from chunkproof.model.policy import Policy
from chunkproof.model.step import step
from chunkproof.model.system_counterexample import RequestStep, SystemCounterexample, SystemStep
from chunkproof.spec.scheduler_loops import (
    DECODING,
    FINISHED,
    RUNNING,
    WAITING,
    least_eligible,
)
from chunkproof.spec.scheduler_step import (
    FIELDS,
    PHASE_NAMES,
    SchedulerBatch,
    SchedulerStepModel,
    engine_encoder,
    numpy_ops,
    shared_encoder,
)

_IN_RUNNING_LIST = (PHASE_NAMES[RUNNING], PHASE_NAMES[DECODING])
"""The lists a request of vLLM's running list is recorded in."""


def arrival_order(instance: tuple[Config, ...], labels: Sequence[int]) -> tuple[int, ...]:
    """The labels of an initial queue whose rows name a request by the least label of an equal
    configuration (symmetry reduction): equal requests are interchangeable, so the k-th
    occurrence of a class takes the k-th label of that configuration."""
    free: dict[Config, list[int]] = {}
    for label, cfg in enumerate(instance):
        free.setdefault(cfg, []).append(label)
    return tuple(free[instance[label]].pop(0) for label in labels)


@dataclass(frozen=True)
class Run:
    """A run of one instance (:func:`run_instance`): its steps, and the global states, the
    state row before each step and the one after the last (every request with its own label),
    in ``batch``."""

    steps: tuple[SystemStep, ...]
    rows: tuple[np.ndarray, ...]
    batch: SchedulerBatch

    def encoded(self, index: int) -> tuple[int, ...]:
        """Each request's e in the state before step ``index`` (after the last at
        ``len(steps)``), in label order: the state a step's record does not show."""
        row, k = self.rows[index], self.batch.k
        by_label = {}
        for p in range(k):
            label, _, _, e, _ = (int(v) for v in row[1 + FIELDS * p : 1 + FIELDS * (p + 1)])
            by_label[label] = e
        return tuple(by_label[label] for label in range(k))


def run_instance(
    policy: Policy,
    instance: tuple[Config, ...],
    arrival: Sequence[int],
    budgets: Sequence[int],
    max_seqs: int,
    eligible: Sequence[int] | None = None,
    decodes: Sequence[Sequence[int]] | None = None,
    blocks: int = 0,
    hits: Sequence[Sequence[int]] | None = None,
    connected: Sequence[Sequence[int]] | None = None,
) -> Run:
    """The steps of ``instance`` from Init with the waiting queue ``arrival`` (labels), offered
    ``budgets`` in order, with the adaptive floor at the ``eligible`` counts (``None``: the
    floor off), each decoding request the running loop reaches advancing by its entry of
    ``decodes`` (per step, per position of the state row; ``None``: 1 each) (module
    docstring), the requests sharing a KV block pool of ``blocks`` (0: none), each waiting
    request resuming at its entry of ``hits`` (per step, per position; ``None``: 0 each; SPEC
    KV2 rule 5e), the connector's where its entry of ``connected`` is 1 (rule 5g; ``None``:
    none), and the states they pass through. The run ends early where the model's
    search would stop (a step that breaks P0, or after which every request has finished),
    and where the step has no transition with the given advances and hits."""
    pool = [blocks] if blocks else []
    model = SchedulerStepModel(
        policy,
        [instance],
        symmetry=False,
        max_seqs=max_seqs,
        adaptive=eligible is not None,
        blocks=pool,
    )
    batch = model.batch([instance], pool or None)
    label = np.array([arrival], dtype=np.int64)
    phase = np.full(label.shape, WAITING, dtype=np.int64)
    starts = np.array([[instance[i].start for i in arrival]], dtype=np.int64)
    zero = np.zeros(1, dtype=np.int64)
    nothing = np.zeros_like(starts)
    row = model.arrange(batch, zero, label, phase, starts, nothing, phase, nothing)[0]
    steps = []
    rows = [row]
    for index, budget in enumerate(budgets):
        count = None if eligible is None else eligible[index]
        lanes = None if count is None else np.array([count])
        source, index_hits = np.zeros(1, dtype=np.int64), None
        if blocks:
            source, index_hits = model.resume_choices(batch, row[None, :])
        offered = np.full(len(source), budget)
        moved = model.step(batch, row[None, :], source, offered, lanes, index_hits)
        advanced = np.stack([moved.record[f"decoded{p}"] for p in range(batch.k)], axis=1)
        wanted = decodes[index] if decodes is not None else None
        resumed = [0] * batch.k if hits is None else list(hits[index])
        flags = [0] * batch.k if connected is None else list(connected[index])
        chosen = [
            lane
            for lane in range(len(moved.source))
            if (wanted is None or advanced[lane].tolist() == list(wanted))
            and (
                not blocks
                or (
                    [int(moved.record[f"hit{p}"][lane]) for p in range(batch.k)] == resumed
                    and [int(moved.record[f"connector{p}"][lane]) for p in range(batch.k)] == flags
                )
            )
        ]
        if not chosen:
            break
        lane = chosen[0]
        breaks = tuple(pid for pid in model.properties if moved.bad[pid][lane])
        record = {name: values[lane] for name, values in moved.record.items()}
        parts = _requests(policy, instance, row, record)
        steps.append(SystemStep(budget, parts, breaks, count))
        row = moved.target[lane]
        rows.append(row)
        if not moved.follow[lane]:
            break
    return Run(tuple(steps), tuple(rows), batch)


def _requests(
    policy: Policy, instance: tuple[Config, ...], row: np.ndarray, record: dict[str, np.ndarray]
) -> tuple[RequestStep, ...]:
    """Each request's part in one step, in label order: from the state row its list, place
    (a decoding request's in the running list) and c; from the step's record the budget it
    was offered (0: not reached), the encoder cache the others referenced then, its chunk (the
    one the release schedules, P0-violating or not: SPEC Q3) and its decode advance. A
    request with encoder items runs with the engine's cache and compute budget
    (:func:`~chunkproof.spec.scheduler_step.engine_encoder`)."""
    parts: dict[int, RequestStep] = {}
    places = [0] * len(PHASE_NAMES)
    encoder = shared_encoder(instance)
    for p in range(len(instance)):
        label, phase, c, _, _ = (int(v) for v in row[1 + FIELDS * p : 1 + FIELDS * (p + 1)])
        offered = int(record[f"offered{p}"])
        cfg = engine_encoder(instance[label], encoder)
        shared = int(record[f"shared{p}"])
        hit, connector = None, bool(record.get(f"connector{p}", False))
        if f"hit{p}" in record and phase == WAITING and c > 0:  # rule 5e: it resumes at a hit
            hit = int(record[f"hit{p}"])
            cfg = replace(cfg, start=hit, external=hit if connector else 0)  # rule 5g
        at = c if hit is None else hit
        stages = step(policy, cfg, at, offered, shared) if offered > 0 else None
        scheduled = int(record[f"chunk{p}"]) != 0  # SPEC Q3: below 0 where no clamp caught it
        listed = RUNNING if phase == DECODING else phase
        decoded = int(record[f"decoded{p}"])
        queue = PHASE_NAMES[phase]
        preempted = bool(record.get(f"preempted{p}", False))  # only a pooled step preempts
        raised = bool(record.get(f"raised{p}", False))
        parts[label] = RequestStep(
            queue, places[listed], c, scheduled, stages, decoded, preempted, hit, connector, raised
        )
        places[listed] += 1
    return tuple(parts[label] for label in range(len(instance)))


def replay(policy: Policy, cx: SystemCounterexample) -> str | None:
    """Re-run ``cx``'s budgets on ``policy``; ``None`` when every step is as recorded and the
    last one still breaks the property, else the first difference."""
    budgets = [s.budget for s in cx.steps]
    top = cx.budget_model().high
    if any(not 1 <= b <= top for b in budgets):
        return f"a recorded budget lies outside the budget model's 1..{top}"
    eligible = [int(s.eligible or 0) for s in cx.steps] if cx.adaptive else None
    decodes = [recorded_advances(s) for s in cx.steps]
    hits = [recorded_hits(s) for s in cx.steps]
    connected = [recorded_hits(s, connector=True) for s in cx.steps]
    run = run_instance(
        policy,
        cx.requests,
        cx.arrival,
        budgets,
        cx.max_seqs,
        eligible,
        decodes,
        cx.blocks,
        hits,
        connected,
    )
    replayed = run.steps
    for index, (recorded, actual) in enumerate(zip(cx.steps, replayed, strict=False)):
        phases = [np.array([PHASE_NAMES.index(r.queue)]) for r in actual.requests]
        offered = np.array([actual.budget])
        least = int(least_eligible(numpy_ops(1), phases, offered, np.array([top]))[0])
        if recorded.eligible is not None and recorded.eligible < least:
            return (
                f"step {index}: {recorded.eligible} eligible requests recorded, fewer than the "
                f"{least} the step has"
            )
        if len(recorded.requests) != len(actual.requests):
            recorded_count, replayed_count = len(recorded.requests), len(actual.requests)
            return f"step {index}: {recorded_count} requests recorded, not {replayed_count}"
        for label, (mine, theirs) in enumerate(
            zip(recorded.requests, actual.requests, strict=True)
        ):
            if mine != _same_crash(mine, theirs):
                return (
                    f"step {index} (budget {recorded.budget}), request #{label}: recorded "
                    f"{mine.to_dict()}, replayed {theirs.to_dict()}"
                )
        if recorded.breaks != actual.breaks:
            return (
                f"step {index} (budget {recorded.budget}): recorded breaking "
                f"{list(recorded.breaks)}, replayed {list(actual.breaks)}"
            )
    if len(replayed) < len(cx.steps):
        return (
            f"the replay stops after step {len(replayed) - 1}: the rest cannot be taken (every "
            "request finished, a step broke P0, or the next step's recorded decode advances "
            "or resume hits are none it allows)"
        )
    if cx.loop is not None:
        return _loop_difference(cx, run)
    if cx.property not in replayed[-1].breaks:
        return f"the last step no longer breaks {cx.property}"
    return None


def _loop_difference(cx: SystemCounterexample, run: Run) -> str | None:
    """For a run that goes on for ever: ``None`` when every step from the loop's first is
    offered the whole budget M and the state after the last is the one before the loop's
    first, else what differs."""
    assert cx.loop is not None
    if not 0 <= cx.loop < len(cx.steps):
        return f"the loop starts at step {cx.loop}, outside the trace"
    whole = cx.requests[0].max_sched
    if any(s.budget != whole for s in cx.steps[cx.loop :]):
        return f"a step of the loop is offered less than the whole budget M={whole}"
    if not loops_back(run, cx.loop):
        return f"the state after the last step is not the one before step {cx.loop}"
    return None


def loops_back(run: Run, loop: int) -> bool:
    """Whether the state after the run's last step is the one before step ``loop``, up to which
    of two equal requests is where (:func:`canonical`)."""
    return canonical(run.batch, run.rows[-1]) == canonical(run.batch, run.rows[loop])


def canonical(batch: SchedulerBatch, row: np.ndarray) -> tuple[tuple[int, ...], ...]:
    """A state row with every label replaced by the least label of an equal configuration (as
    the search's symmetry reduction names requests), the finished requests in sorted order:
    two rows are the same state exactly when these agree."""
    listed: list[tuple[int, ...]] = []
    finished: list[tuple[int, ...]] = []
    for p in range(batch.k):
        label, phase, c, e, stale = (int(v) for v in row[1 + FIELDS * p : 1 + FIELDS * (p + 1)])
        place = (int(batch.klass[label]), phase, c, e, stale)
        (finished if phase == FINISHED else listed).append(place)
    return (*listed, *sorted(finished))


def recorded_advances(stepped: SystemStep) -> tuple[int, ...]:
    """A recorded step's decode advances per position of its state row (a decoding request's
    place in the running list is its position: that list comes first)."""
    advances = [0] * len(stepped.requests)
    for part in stepped.requests:
        if part.queue == PHASE_NAMES[DECODING]:
            advances[part.place] = part.decoded
    return tuple(advances)


def recorded_hits(stepped: SystemStep, connector: bool = False) -> tuple[int, ...]:
    """A recorded step's resume hits per position of its state row (rule 5e: the waiting queue
    follows the running list, so a waiting request's position is the running list's length
    plus its place; 0 where none is recorded); with ``connector``, 1 where the hit is a
    connector's (rule 5g), else 0."""
    listed = sum(1 for part in stepped.requests if part.queue in _IN_RUNNING_LIST)
    hits = [0] * len(stepped.requests)
    for part in stepped.requests:
        if part.hit is not None:
            hits[listed + part.place] = int(part.connector) if connector else part.hit
    return tuple(hits)


def _same_crash(recorded: RequestStep, actual: RequestStep) -> RequestStep:
    """``actual`` with the recorded crash text where both steps crash: the built-in and the
    source form of one release name the same failing check differently (SPEC P0)."""
    mine, theirs = recorded.stages, actual.stages
    if mine is None or theirs is None or mine.crash is None or theirs.crash is None:
        return actual
    return replace(actual, stages=replace(theirs, crash=mine.crash))
