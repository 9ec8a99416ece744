"""The scheduler step's counterexamples (SPEC C for several requests, SPEC N1): for a violated
property, the smallest instance's witness path recomputed step by step with every request's
stages (:func:`~chunkproof.spec.scheduler_trace.run_instance`) and its verdict in words; read,
replayed, drawn and made a repro as every model's are (:class:`SystemKind`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from chunkproof.checker.reports.system_picture import save_system_picture
from chunkproof.checker.repro.pool import pool_repro_source
from chunkproof.checker.repro.system import system_repro_source
from chunkproof.model.config import Config
from chunkproof.model.errors import ChunkproofError
from chunkproof.model.policy import Policy
from chunkproof.model.step import Step, step
from chunkproof.model.system_counterexample import SYSTEM_FORMAT, SystemCounterexample, SystemStep
from chunkproof.model.trace_file import TraceFile, TraceFormat
from chunkproof.spec.scheduler_step import SCHEDULER_PROPERTIES
from chunkproof.spec.scheduler_trace import (
    Run,
    arrival_order,
    loops_back,
    replay,
    run_instance,
)
from chunkproof.spec.system_properties import POOL_PROPERTIES


@dataclass(frozen=True)
class Witness:
    """A violating path the explorer found: the instance, the waiting queue at Init as the
    state row names it (least labels of equal configurations), the budgets offered, with the
    adaptive floor the eligible counts (``None`` without it), per step the decode advances
    per position of the state row (:func:`~chunkproof.spec.scheduler_trace.run_instance`), the
    KV block pool's N (0: none), for a run that goes on for ever (S-POOL) the step its loop
    starts at (the state after the last step is the one before it), and with a pool per step
    the resume hit of each position (SPEC KV2 rule 5e; ``None``: 0 each) and 1 where that is a
    connector's (rule 5g; ``None``: none)."""

    instance: tuple[Config, ...]
    queue: tuple[int, ...]
    budgets: tuple[int, ...]
    eligible: tuple[int, ...] | None
    decodes: tuple[tuple[int, ...], ...]
    blocks: int = 0
    loop: int | None = None
    hits: tuple[tuple[int, ...], ...] | None = None
    connected: tuple[tuple[int, ...], ...] | None = None


def labelled_run(policy: Policy, witness: Witness, max_seqs: int) -> tuple[tuple[int, ...], Run]:
    """``witness`` on the model's Next with every request under its own label: the initial
    queue's labels (:func:`~chunkproof.spec.scheduler_trace.arrival_order`) and the run."""
    arrival = arrival_order(witness.instance, witness.queue)
    run = run_instance(
        policy,
        witness.instance,
        arrival,
        witness.budgets,
        max_seqs,
        witness.eligible,
        witness.decodes,
        witness.blocks,
        witness.hits,
        witness.connected,
    )
    return arrival, run


def build(
    policy: Policy, witness: Witness, pid: str, max_seqs: int, details: dict[str, Any]
) -> SystemCounterexample:
    """The counterexample of ``pid`` along ``witness``, recomputed on the model's Next; its
    last step must break ``pid``, or for a run that goes on for ever return to the state
    before the loop's first step (equal requests are interchangeable, so the labelled run
    breaks it where the reduced one did, and loops back up to which of them is where)."""
    arrival, run = labelled_run(policy, witness, max_seqs)
    steps = run.steps
    assert len(steps) == len(witness.budgets), (pid, witness)
    if witness.loop is None:
        assert pid in steps[-1].breaks, (pid, witness)
        verdict = verdict_words(policy, witness.instance, steps[-1], pid)
    else:
        assert loops_back(run, witness.loop), (pid, witness)
        verdict = loop_words(witness.instance, steps, witness.loop, witness.blocks)
    return SystemCounterexample(
        policy=policy.name,
        source_sha256=policy.source_sha256,
        policy_options=policy.options,
        requests=witness.instance,
        arrival=arrival,
        max_seqs=max_seqs,
        adaptive=witness.eligible is not None,
        property=pid,
        steps=steps,
        verdict=verdict,
        details=details,
        blocks=witness.blocks,
        loop=witness.loop,
    )


def loop_words(
    instance: tuple[Config, ...], steps: tuple[SystemStep, ...], loop: int, blocks: int
) -> str:
    """What a lasso shows (S-POOL): offered the whole budget M at every step, the run comes back
    to the state before step ``loop``; the requests the loop preempts, each where the pool
    refused it, and the hits the loop resumes them at (SPEC KV2 rule 5e)."""
    preempted = [
        f"#{label} (T={instance[label].T}) at c={part.c}"
        for stepped in steps[loop:]
        for label, part in enumerate(stepped.requests)
        if part.preempted
    ]
    unfinished = [
        f"#{label}" for label, part in enumerate(steps[loop].requests) if part.queue != "finished"
    ]
    resumed = [
        f"#{label} at {part.hit}"
        for stepped in steps[loop:]
        for label, part in enumerate(stepped.requests)
        if part.hit is not None and part.scheduled
    ]
    again = f"; the loop resumes {', '.join(resumed)}" if resumed else ""
    return (
        f"offered the whole budget M={steps[loop].budget} at every step, the run from step "
        f"{loop} returns to the same state after {len(steps) - loop} step(s) and repeats for "
        f"ever with {', '.join(unfinished)} unfinished: the pool of {blocks} KV blocks refuses "
        f"a chunk and the running loop preempts {', '.join(preempted)}{again}"
    )


def verdict_words(policy: Policy, instance: tuple[Config, ...], last: SystemStep, pid: str) -> str:
    """What the last step shows, by property: P0 the request whose stages raise or leave
    [0, its input], or whose admission makes the pool raise (SPEC KV2 rule 5g); S-LIVE the
    whole budget M making no progress with work left; STARVE a step that makes no progress
    while a request alone would get a chunk from the same budget; HOL the waiting request the
    loop breaks at and one behind it the budget left would serve
    (:mod:`chunkproof.spec.system_properties`). A system property on a step that also breaks
    P0 says so (SPEC Q3: the step is judged on the chunks the release schedules)."""
    parts = last.requests

    def name(label: int) -> str:
        part = parts[label]
        resumes = f", resuming at {part.hit_words}" if part.hit is not None else ""
        return f"#{label} (T={instance[label].T}, c={part.c}{resumes})"

    def alone(label: int, budget: int) -> int:
        cfg, part = instance[label], parts[label]
        if part.hit is not None:  # SPEC KV2 rules 5e-5g: admitted at its resume hit
            cfg = replace(cfg, start=part.hit, external=part.hit if part.connector else 0)
        got = step(policy, cfg, part.resumed, budget)
        return got.chunk if got.crash is None else 0

    def breach() -> str:
        raised = [i for i, part in enumerate(parts) if part.pool_raised]
        if raised:  # SPEC KV2 rules 2e and 5g
            label = raised[0]
            stages = parts[label].stages
            assert stages is not None
            return (
                f"{name(label)}, offered {stages.budget} tokens, passes the admission test and "
                f"its chunk's count, and the pool's get_new_blocks raises on the block loaded "
                f"at x that the count left out (the engine core is down)"
            )
        label, found = next(
            (i, r.stages) for i, r in enumerate(parts) if r.stages and r.stages.unsafe
        )
        return f"{name(label)}, offered {found.budget} tokens: {found.unsafe}"

    if pid == "P0":
        return breach()
    also = f"; the step also breaks P0: {breach()}" if "P0" in last.breaks else ""
    backwards = [f"#{i}: {part.chunk}" for i, part in enumerate(parts) if part.chunk < 0]
    nothing = "schedules nothing"
    if backwards:
        nothing = f"makes no progress (it schedules {', '.join(backwards)}: below 0, c moves back)"
    unfinished = [i for i, part in enumerate(parts) if part.queue != "finished"]
    if pid == "S-LIVE":
        have = "has" if len(unfinished) == 1 else "have"
        why = "the state is its own successor, so no request progresses for ever"
        if backwards:
            why = "no request progresses"
        return (
            f"offered the whole budget M={last.budget}, the step {nothing} while "
            f"{', '.join(name(i) for i in unfinished)} {have} work left: {why}{also}"
        )
    if pid == "STARVE":
        prefilling = [i for i, part in enumerate(parts) if part.queue in ("running", "waiting")]
        label = next(i for i in prefilling if alone(i, last.budget) > 0)
        repeats = "" if backwards else " (it repeats for ever under that budget)"
        return (
            f"offered {last.budget} tokens, the step {nothing}{repeats}, while {name(label)} "
            f"alone would get a chunk of {alone(label, last.budget)}{also}"
        )
    waiting = [i for i, r in enumerate(parts) if r.queue == "waiting"]
    head = max((i for i in waiting if parts[i].stages is not None), key=lambda i: parts[i].place)
    breaking = parts[head].stages
    assert breaking is not None
    left = breaking.budget
    behind = next(i for i in waiting if parts[i].place > parts[head].place and alone(i, left) > 0)
    return (
        f"the waiting loop breaks at {name(head)}: offered {left} tokens, "
        f"{_zero_stage(breaking)} gives 0, while {name(behind)} behind it would get a chunk of "
        f"{alone(behind, left)} from them{also}"
    )


def _zero_stage(stages: Step) -> str:
    """The first stage of a step that returns 0, in the order the step applies them (S3)."""
    zero = next(s for s in stages.order if getattr(stages, "n" if s == "cap" else s) == 0)
    return "the budget cap" if zero == "cap" else f"the {zero}"


def _mine(cx: TraceFile) -> SystemCounterexample:
    assert isinstance(cx, SystemCounterexample), type(cx)
    return cx


@dataclass(frozen=True)
class SystemKind:
    """The scheduler step's counterexamples (:class:`~chunkproof.checker.kinds.TraceKind`)."""

    format: TraceFormat = SYSTEM_FORMAT
    properties: tuple[str, ...] = (*SCHEDULER_PROPERTIES, *POOL_PROPERTIES)

    def owns(self, cx: TraceFile) -> bool:
        return isinstance(cx, SystemCounterexample)

    def replay(self, policy: Policy, cx: TraceFile) -> str | None:
        """:func:`~chunkproof.spec.scheduler_trace.replay`: every step, every request."""
        return replay(policy, _mine(cx))

    def replayed_words(self, cx: TraceFile) -> str:
        """The file's verdict, escaped where it was read."""
        return _mine(cx).verdict

    def draw(self, cx: TraceFile, policy: Callable[[], Policy], path: Path) -> Path:
        """The lanes picture (it needs no policy: the file holds every stage)."""
        return save_system_picture(_mine(cx), path)

    def graph(self, cx: TraceFile, policy: Callable[[], Policy], path: Path) -> Path:
        raise ChunkproofError(
            "--graph: a multi-request counterexample has no single-request state graph"
        )

    def repro_source(self, cx: TraceFile, source_name: str, style: str) -> str:
        """The standalone form only: the short form has no ``schedule()`` loops. Where the
        requests share a KV block pool, every chunk asks the tree's own manager
        (:mod:`chunkproof.checker.repro.pool`)."""
        mine = _mine(cx)
        if style == "vllm":
            raise ChunkproofError(
                "--style vllm: a multi-request counterexample needs schedule()'s loops; "
                "use --style standalone"
            )
        if mine.blocks:
            return pool_repro_source(mine, source_name)
        return system_repro_source(mine, source_name)


SYSTEM = SystemKind()
