"""The scheduler step over several requests, checked (SPEC N1): orchestration of the
explorer on :class:`~chunkproof.spec.scheduler_step.SchedulerStepModel`.

The requests of an instance are drawn from the configurations of a :class:`Space` (each one a
request: its prompt, start, items, ...), as every multiset of k of them that one engine can run
(they share the engine's settings and the release accepts each, SPEC S1b:
:func:`~chunkproof.spec.scheduler_step.request_sets`). Every instance is explored exhaustively
under every offered budget 1..M per step; each property (P0 and the system properties S-LIVE,
HOL, STARVE of :mod:`chunkproof.spec.system_properties`) is PROVED when no reachable
transition of any instance violates it, else VIOLATED with the smallest violating instance
(least total T, then the requests' configurations in SPEC C order) and its BFS-shortest trace,
written with a run folder as a multi-request counterexample file (SPEC C,
:mod:`chunkproof.checker.kinds.system`). The pools asked (``pools``) are an input
like the others: ``none``, the step without a pool, and KV block pool sizes (SPEC KV2 rule 5),
where each request set inside the pool model is an instance per size. A property is judged over
the instances of both steps, S-POOL over the pooled ones on the whole explored graph of each
instance: its trace is a lasso, the path to the first state that starts an endless run offered
M, then that run's cycle. A property with no instance in scope is EMPTY (exit 2 unless another
is violated), never PROVED: S-POOL when every pool asked is below the release's start-up check.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from chunkproof.checker.engines.explorer import NO_WITNESS, Explored, explore_batch
from chunkproof.checker.engines.lassos import around
from chunkproof.checker.engines.verdicts import EMPTY, PROVED, VIOLATED
from chunkproof.checker.kinds import save_counterexample
from chunkproof.checker.kinds.system import Witness, build, labelled_run
from chunkproof.checker.reports.output import RunFolder
from chunkproof.model.config import Config
from chunkproof.model.errors import ChunkproofError
from chunkproof.model.policy import Policy
from chunkproof.spec.kv_blocks import outside_shared_pool, pool_rules
from chunkproof.spec.scheduler_step import (
    ACTION_STRIDE,
    FIELDS,
    MAX_SEQS,
    SCHEDULER_PROPERTIES,
    SchedulerBatch,
    SchedulerStepModel,
    decode_advances,
    describe_state,
    engine_settings,
    hit_indices,
    least_pool,
    request_sets,
    split_action,
    step_loop_rules,
    threshold_rule,
)
from chunkproof.spec.scheduler_trace import Run
from chunkproof.spec.space import Ints, Space
from chunkproof.spec.system_properties import POOL_PROPERTIES, SYSTEM_PROPERTIES

MAX_INSTANCES = 200_000
"""Most request sets one run explores (a larger space is refused before they are built), and
most (request set, pool) instances of its pooled step."""
MAX_REQUESTS = 4
"""Most requests per instance: every arrival order is an initial state (k! of them)."""

NO_POOL = "none"
"""The pool value of the scheduler step without a KV block pool: no allocation fails, and each
request's decode steps are modelled (SPEC N1)."""


@dataclass(frozen=True)
class SystemVerdict:
    """One property over every instance: its status, how many instances violate it, and the
    smallest one's trace (one line per step: the two lists, then the budget offered), with
    the paths of its counterexample file and picture when they were written, and the pools of
    the instances it was judged on (:data:`NO_POOL` and the sizes asked)."""

    property: str
    status: str
    instances: int
    violating: int
    example: str | None
    trace: tuple[str, ...]
    counterexample: str | None = None
    picture: str | None = None
    pools: tuple[str, ...] = (NO_POOL,)

    def to_dict(self) -> dict[str, Any]:
        return {
            "property": self.property,
            "status": self.status,
            "definition": _definition(self.property),
            "instances": self.instances,
            "violating": self.violating,
            "example": self.example,
            "trace": list(self.trace),
            "counterexample": self.counterexample,
            "picture": self.picture,
            "pools": list(self.pools),
        }


def _definition(pid: str) -> str:
    """What property ``pid`` asks (P0 is SPEC P0, judged per request)."""
    if pid in SYSTEM_PROPERTIES:
        return SYSTEM_PROPERTIES[pid].definition
    return "no reachable step raises or leaves a stage's range (SPEC P0)"


def _rank(group: tuple[Config, ...]) -> tuple[Any, ...]:
    """The order of instances for the smallest example: total T, then each request in SPEC C
    order (T, B, L, M, the rest)."""
    return (
        sum(cfg.tokens for cfg in group),
        tuple(
            (cfg.tokens, cfg.block, cfg.lookahead, cfg.max_sched, cfg.describe()) for cfg in group
        ),
    )


def action_words(
    budget: int,
    eligible: int,
    row: np.ndarray,
    decodes: Sequence[int],
    preempted: Sequence[int] = (),
    resumed: dict[int, str] | None = None,
) -> str:
    """An action of the model as the trace line's arrow: the budget, the eligible count the
    adaptive floor's environment set, the decode advances it chose (by the label at each
    position of the state ``row``), the hit each waiting request at c > 0 resumes at (by
    label, in words: SPEC KV2 rules 5e-5g) and the requests the step preempted (by label)."""
    words = f"--budget {budget}{f', eligible {eligible}' if eligible else ''}"
    for p, advance in enumerate(decodes):
        if advance:
            words += f", #{int(row[1 + FIELDS * p])} decodes {advance}"
    for label, hit in (resumed or {}).items():
        words += f", #{label} resumes at {hit}"
    if preempted:
        words += f", preempts {', '.join(f'#{label}' for label in preempted)}"
    return words + "-->"


def trace_lines(run: Run, witness: Witness) -> tuple[str, ...]:
    """A labelled run of a witness as trace lines: each state with the action taken there (and
    the requests the step preempted), then the last step's target (every request under its own
    label, also where the search reduced equal requests to one); a lasso (S-POOL) marks the
    state its loop starts from and says the last state is that one again."""
    eligible = witness.eligible or (0,) * len(witness.budgets)
    lines = []
    for index, (row, budget, count, decodes) in enumerate(
        zip(
            run.rows[: len(witness.budgets)],
            witness.budgets,
            eligible,
            witness.decodes,
            strict=True,
        )
    ):
        parts = run.steps[index].requests
        out = [label for label, part in enumerate(parts) if part.preempted]
        resumed = {
            label: part.hit_words for label, part in enumerate(parts) if part.hit is not None
        }
        action = action_words(budget, count, row, decodes, out, resumed)
        mark = "(loop) " if index == witness.loop else ""
        lines.append(f"{mark}{describe_state(run.batch, row)}  {action}")
    last = describe_state(run.batch, run.rows[len(witness.budgets)])
    if witness.loop is not None:
        last += f"  (= the state before step {witness.loop}: the loop repeats for ever)"
    lines.append(last)
    return tuple(lines)


def _witness(
    model: SchedulerStepModel, explored: Explored, transition: int, adaptive: bool, pid: str
) -> Witness:
    """The instance of a violating transition, the waiting queue of its path's initial state
    and the actions along the path (budgets, and with the adaptive floor eligible counts),
    that transition's last; for a property of runs that go on for ever (S-POOL), the path to
    the transition's state and then the run around its cycle
    (:func:`~chunkproof.checker.engines.lassos.around`), with the step the loop starts at."""
    batch, steps = explored.batch, explored.steps
    source = int(steps.source[transition])
    path = explored.path(source)
    first = explored.states[path[0][0] if path else source]
    lasso, loop = [transition], None
    if pid in POOL_PROPERTIES:
        lasso, back = around(explored, transition, pid)
        loop = len(path) + back
    taken = [int(a) for a in (*(via for _, via in path), *steps.action[lasso])]
    inst = int(first[0])
    pooled = int(batch.blocks[inst]) > 0
    if pooled:  # a pooled action holds the resume hits where others hold n and decodes
        states = [explored.states[s] for s, _ in path]
        states += [explored.states[int(steps.source[t])] for t in lasso]
        resumes = [_hits(model, batch, row, a) for row, a in zip(states, taken, strict=True)]
        return Witness(
            batch.instances[inst],
            tuple(int(v) for v in first[1::FIELDS]),
            tuple(a % ACTION_STRIDE for a in taken),
            None,
            tuple((0,) * batch.k for _ in taken),
            int(batch.blocks[inst]),
            loop,
            tuple(hits for hits, _ in resumes),
            tuple(flags for _, flags in resumes),
        )
    actions = [split_action(a) for a in taken]
    return Witness(
        batch.instances[inst],
        tuple(int(v) for v in first[1::FIELDS]),
        tuple(budget for budget, _ in actions),
        tuple(eligible for _, eligible in actions) if adaptive else None,
        tuple(decode_advances(a, batch.k) for a in taken),
        int(batch.blocks[inst]),
        loop,
    )


def _hits(
    model: SchedulerStepModel, batch: SchedulerBatch, row: np.ndarray, action: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The resume hits a pooled action sets, per position of the state ``row``: where the
    request there is admitted (SPEC KV2 rules 5e-5g, :meth:`~chunkproof.spec.scheduler_step.
    SchedulerStepModel.admitted_at` of :func:`~chunkproof.spec.scheduler_step.hit_indices`),
    0 for a request not waiting; and 1 where that is a connector's hit, else 0."""
    labels = row[1::FIELDS]
    rows = batch.rows(np.array([row[0]]), labels[None, :])
    phase, c = row[None, 2::FIELDS], row[None, 3::FIELDS]
    index = np.array([hit_indices(action, batch.k)], dtype=np.int64)
    admitted = model.admitted_at(batch, rows, phase, c, index)
    return tuple(int(h) for h in admitted.start[0]), tuple(int(x > 0) for x in admitted.external[0])


def _set_count(policy: Policy, configs: list[Config], k: int) -> int:
    """How many multisets of k accepted configurations share the engine's settings, counted per
    settings without building them: the instances :func:`request_sets` builds, and those it
    leaves out because two or more of their requests carry encoder items under a compute
    budget below the encoder cache."""
    groups = Counter(engine_settings(cfg) for cfg in configs if policy.accepts(cfg) is None)
    return sum(math.comb(size + k - 1, k) for size in groups.values())


def pooled_instances(
    policy: Policy, sets: Sequence[tuple[Config, ...]], pools: Sequence[int | str]
) -> tuple[list[tuple[Config, ...]], list[int], int]:
    """Each request set with each KV block pool of ``pools`` (a size, or ``"min"``: the least
    the release's start-up check accepts for the set's ``max_model_len``,
    :func:`~chunkproof.spec.scheduler_step.least_pool`), once per distinct size: the sets (one
    entry per pool), their pool sizes, and how many (set, size) pairs the start-up check
    refuses (a pool below its least), which vLLM does not run."""
    instances: list[tuple[Config, ...]] = []
    blocks: list[int] = []
    below = 0
    for group in sets:
        least = least_pool(policy, group)
        sizes = {least if size == "min" else int(size) for size in pools}
        for size in sorted(sizes):
            if size < least:
                below += 1
                continue
            instances.append(group)
            blocks.append(size)
    return instances, blocks, below


def describe_instance(group: tuple[Config, ...], blocks: int = 0) -> str:
    """The requests of an instance, each as ``#label: its configuration``, and the KV block
    pool they share (``blocks`` > 0)."""
    pool = f"; a pool of {blocks} KV blocks" if blocks else ""
    return "; ".join(f"#{label}: {cfg.describe()}" for label, cfg in enumerate(group)) + pool


def threshold_words(info: dict[str, Any]) -> str:
    """The threshold rule of a run's ``info`` for its engine line (``"; ..."``), if it has one
    (:func:`~chunkproof.spec.scheduler_step.threshold_rule`)."""
    return f"; {info['threshold']}" if info.get("threshold") else ""


def pool_scopes(pools: Sequence[int | str]) -> tuple[bool, tuple[int | str, ...]]:
    """Which steps ``pools`` asks for: whether the step without a pool (``"none"``, or no pool
    given at all), and the pool sizes of the pooled step (sizes, and ``"min"``)."""
    sizes = tuple(size for size in pools if size != NO_POOL)
    return (not pools or NO_POOL in pools), sizes


def pool_text(pools: Sequence[int | str]) -> str:
    """The pools of a run as a range input: ``none``, ``min`` and the sizes as a range flag
    states them (:meth:`~chunkproof.spec.space.Ints.describe`: ``none,min,2-32``); no pool
    given is ``none``."""
    words = [str(size) for size in pools if not str(size).isdigit()]
    sizes = [int(size) for size in pools if str(size).isdigit()]
    if sizes:
        words.append(Ints.of(sizes).describe())
    return ",".join(words) or NO_POOL


@dataclass
class _Tally:
    """One property over the instances explored so far: how many violate it, and the smallest
    violating one (its rank, its description and its witness)."""

    violating: int = 0
    smallest: tuple[tuple[Any, ...], str, Witness] | None = None


def _explore_step(
    model: SchedulerStepModel, adaptive: bool, tallies: dict[str, _Tally], mixed: bool
) -> int:
    """Every instance of ``model`` explored (SPEC N1; with a pool, S-POOL on each instance's
    whole graph), each violating instance counted in ``tallies`` and the smallest kept (least
    :func:`_rank`, then the pool size, 0 without one; described with "no pool" when the run
    has both steps, ``mixed``); the states explored."""
    states = 0
    for batch in model.batches():
        explored = explore_batch(model, batch)
        states += len(explored.states)
        for pid, found in explored.witness.items():
            tally = tallies.setdefault(pid, _Tally())
            for inst in np.flatnonzero(found != NO_WITNESS):
                tally.violating += 1
                group, size = batch.instances[int(inst)], int(batch.blocks[inst])
                rank = (_rank(group), size)
                if tally.smallest is None or rank < tally.smallest[0]:
                    witness = _witness(model, explored, int(found[inst]), adaptive, pid)
                    described = describe_instance(group, size)
                    if mixed and not size:
                        described += "; no pool"
                    tally.smallest = (rank, described, witness)
    return states


def step_properties(pooled: bool) -> tuple[str, ...]:
    """The properties a step defines (SPEC N1): P0, S-LIVE, HOL and STARVE, and in a pool
    (KV2 rule 5) S-POOL too, whether or not any instance is in scope."""
    return SCHEDULER_PROPERTIES + (POOL_PROPERTIES if pooled else ())


def judged_steps(
    steps: Sequence[tuple[tuple[str, ...], list[str], int]],
) -> dict[str, tuple[list[str], int]]:
    """Per property, the pools its verdict names and the instances it is judged over, from
    each explored step's (properties, pools, instances): the steps that define the property
    and hold an instance; when none holds one, every step that defines it (the verdict is
    EMPTY, over the pools asked). A step with no instance judges nothing, so its pools are not
    named beside a step that has instances."""
    judged: dict[str, tuple[list[str], int]] = {}
    for pid in dict.fromkeys(pid for properties, _, _ in steps for pid in properties):
        defining = [(names, count) for properties, names, count in steps if pid in properties]
        holding = [(names, count) for names, count in defining if count] or defining
        judged[pid] = ([name for names, _ in holding for name in names], sum(c for _, c in holding))
    return judged


def explore_system(
    policy: Policy,
    space: Space,
    requests: int,
    max_seqs: int = MAX_SEQS,
    symmetry: bool = True,
    out: RunFolder | None = None,
    adaptive: bool = False,
    pools: Sequence[int | str] = (),
) -> tuple[list[SystemVerdict], dict[str, Any]]:
    """Every instance of ``requests`` requests drawn from ``space`` (module docstring), with
    the adaptive floor when ``adaptive``, on each pool of ``pools`` (:func:`pool_scopes`:
    ``"none"``, the step without a pool; a size or ``"min"``, the least the release's start-up
    check accepts, :func:`pooled_instances`; empty: no pool); with ``out``, each violated
    property's counterexample file and picture in it. A property is judged over every instance
    of the steps that define it (S-POOL over the pooled ones only), and its verdict names those
    pools (:attr:`SystemVerdict.pools`)."""
    if not 1 <= requests <= MAX_REQUESTS:
        raise ChunkproofError(f"--requests must be 1 to {MAX_REQUESTS}")
    if max_seqs < 1:
        raise ChunkproofError("--max-seqs must be at least 1")
    started = time.monotonic()
    unpooled, sizes = pool_scopes(pools)
    configs = list(space.configs())
    count = _set_count(policy, configs, requests)
    if count > MAX_INSTANCES:
        raise ChunkproofError(
            f"{count} request sets of {requests} requests: chunkproof explores at most "
            f"{MAX_INSTANCES}; narrow the ranges"
        )
    sets = request_sets(policy, configs, requests)
    tallies: dict[str, _Tally] = {}
    steps: list[tuple[list[tuple[Config, ...]], list[int] | None, list[str]]] = []
    if unpooled:
        steps.append((sets, None, [NO_POOL]))
    outside = below = 0
    pooled: list[tuple[Config, ...]] = []
    if sizes:
        rules = pool_rules(policy.kv_release)
        excluded = {cfg for cfg in configs if outside_shared_pool(rules, cfg) is not None}
        inside = [group for group in sets if not excluded.intersection(group)]
        pooled, blocks, below = pooled_instances(policy, inside, sizes)
        outside = len(excluded)
        if len(pooled) > MAX_INSTANCES:
            raise ChunkproofError(
                f"{len(pooled)} (request set, pool) instances: chunkproof explores at most "
                f"{MAX_INSTANCES}; narrow the ranges or the pools"
            )
        steps.append((pooled, blocks, [str(size) for size in sizes]))
    explored: list[tuple[tuple[str, ...], list[str], int]] = []
    states = 0
    for groups, sizes_of, names in steps:
        model = SchedulerStepModel(
            policy, groups, symmetry=symmetry, max_seqs=max_seqs, adaptive=adaptive,
            blocks=sizes_of or (),
        )  # fmt: skip
        states += _explore_step(model, adaptive, tallies, mixed=len(steps) > 1)
        explored.append((step_properties(sizes_of is not None), names, len(groups)))
    verdicts = []
    for pid, (on, instances) in judged_steps(explored).items():
        tally = tallies.get(pid, _Tally())
        status = EMPTY if not instances else VIOLATED if tally.violating else PROVED
        example: str | None = None
        trace: tuple[str, ...] = ()
        files: tuple[str | None, str | None] = (None, None)
        if tally.smallest is not None:
            _, example, witness = tally.smallest
            trace = trace_lines(labelled_run(policy, witness, max_seqs)[1], witness)
            if out is not None:
                details = {"instances": instances, "violating": tally.violating}
                cx = build(policy, witness, pid, max_seqs, details)
                files = save_counterexample(cx, policy, out, f"system-{pid}")
        verdicts.append(
            SystemVerdict(
                pid, status, instances, tally.violating, example, trace, *files, pools=tuple(on)
            )
        )
    info = {
        "requests": requests,
        "max_seqs": max_seqs,
        "loops": step_loop_rules(policy).describe(),
        "threshold": threshold_rule(policy, any(g[0].threshold > 0 for g in sets), adaptive),
        "adaptive": adaptive,
        "symmetry": symmetry,
        "request_configurations": len(configs),
        "instances": len(sets) * unpooled + len(pooled),
        "unpooled_instances": len(sets) * unpooled,
        "pooled_instances": len(pooled),
        "left_out": count - len(sets),
        "pools": [str(size) for size in pools],
        "outside_pool": outside,
        "below_startup": below,
        "states": states,
        "seconds": round(time.monotonic() - started, 3),
    }
    return verdicts, info
