"""The single-request abstraction, checked against the scheduler step (SPEC N4).

chunkproof's per-request verdicts assume SPEC S4: at every step a request may be offered any
budget 1..M. In one ``schedule()`` step over several requests
(:class:`~chunkproof.spec.scheduler_step.SchedulerStepModel`) a request is offered what the
requests before it left of the step's budget, and only while the loop reaches it. This module
compares the two on every configuration of a space:

* **realized**: the (state c, budget b) pairs at which some request of that configuration is
  offered b in a reachable global state of some instance (with the other requests drawn from
  the same space), against the pairs of the single-request model (every reachable c, every b
  in 1..M);
* **verdicts**: for each property judged on one step (P0, P1, P3-P6, P8), whether the
  single-request model finds it violated for the configuration
  (:func:`~chunkproof.checker.engines.compare.native_failures`), and whether a realized step
  violates it (:func:`~chunkproof.checker.engines.traces.violates`, each step recomputed
  natively, with the
  encoder cache the other requests referenced then: S4 is about the budget only, so a request
  whose encoder call finds the cache held by another is a step the single-request model does
  not have). A violation only the scheduler realizes would make S4 unsound; one only the
  single-request model finds is an over-approximation (a per-request verdict the scheduler
  would not reach with these partners).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunkproof.checker.engines.compare import native_failures
from chunkproof.checker.engines.explorer import explore_batch
from chunkproof.checker.engines.traces import violates
from chunkproof.model.config import Config
from chunkproof.model.policy import Policy
from chunkproof.model.step import Step, step
from chunkproof.spec.properties import DEFAULT_WINDOW
from chunkproof.spec.request import budget_bounds
from chunkproof.spec.scheduler_loops import FINISHED
from chunkproof.spec.scheduler_step import FIELDS, MAX_SEQS, SchedulerStepModel, engine_encoder

STEP_PROPERTIES = ("P0", "P1", "P3", "P4", "P5", "P6", "P8")
"""The per-request properties judged on one step."""


@dataclass
class Abstraction:
    """The comparison over every request configuration (module docstring)."""

    configurations: int = 0
    single_pairs: int = 0
    realized_pairs: int = 0
    beyond_pairs: int = 0
    """Realized pairs the single-request model does not have (S4 unsound if > 0)."""
    only_single: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    only_scheduler: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    both: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def to_dict(self) -> dict[str, Any]:
        return {
            "configurations": self.configurations,
            "single_request_pairs": self.single_pairs,
            "realized_pairs": self.realized_pairs,
            "realized_beyond_the_single_request_model": self.beyond_pairs,
            "violated_in_both": dict(self.both),
            "violated_only_in_the_single_request_model": dict(self.only_single),
            "violated_only_in_the_scheduler_step": dict(self.only_scheduler),
        }


Realized = tuple[int, int, int, int, int]
"""A realized step of a request: (c, the budget offered, the encoder cache embeddings the
other requests referenced, and the engine's encoder cache C and compute budget b0)."""


def realized_pairs(model: SchedulerStepModel) -> dict[Config, set[Realized]]:
    """Every :data:`Realized` step of a request of each configuration in a reachable global
    state (every transition the explorer takes from one)."""
    realized: dict[Config, set[Realized]] = defaultdict(set)
    for batch in model.batches():
        explored = explore_batch(model, batch)
        steps = explored.steps
        rows = explored.states[steps.source]
        for p in range(batch.k):
            offered, shared = steps.record[f"offered{p}"], steps.record[f"shared{p}"]
            label, phase, c = (rows[:, 1 + FIELDS * p + j] for j in range(3))
            hit = np.flatnonzero((offered > 0) & (phase != FINISHED))
            for i in hit:
                group = batch.instances[int(rows[i, 0])]
                cfg = group[_member(group, int(label[i]), model.symmetry)]
                capacity, budget = (int(v) for v in batch.encoder[int(rows[i, 0])])
                realized[cfg].add((int(c[i]), int(offered[i]), int(shared[i]), capacity, budget))
    return realized


def _member(group: tuple[Config, ...], label: int, symmetry: bool) -> int:
    """The request a row's label stands for (under symmetry, the least equal one: the same
    configuration)."""
    return label if not symmetry else group.index(group[label])


def check_abstraction(
    policy: Policy,
    sets: list[tuple[Config, ...]],
    max_seqs: int = MAX_SEQS,
    adaptive: bool = False,
    window: str = DEFAULT_WINDOW,
) -> Abstraction:
    """The comparison of the module docstring over the instances ``sets`` (``max_seqs``: the
    scheduler's max_num_seqs; ``adaptive``: its adaptive threshold floor)."""
    model = SchedulerStepModel(policy, sets, max_seqs=max_seqs, adaptive=adaptive)
    realized = realized_pairs(model)
    result = Abstraction()
    for cfg in sorted({cfg for group in sets for cfg in group}, key=_order):
        result.configurations += 1
        low, high = budget_bounds(cfg, None)
        single = native_failures(policy, cfg, window, None)
        offered = {(c, b) for c in _reachable(policy, cfg, low, high) for b in range(low, high + 1)}
        result.single_pairs += len(offered)
        # A budget above T - c0 acts as T - c0 (budget_bounds), as in the single model.
        steps = realized.get(cfg, set())
        pairs = {(c, min(b, high)) for c, b, *_ in steps}
        result.realized_pairs += len(pairs & offered)
        result.beyond_pairs += len(pairs - offered)
        seen = {
            pid
            for taken in steps
            for pid in STEP_PROPERTIES
            if violates(
                pid, cfg, _realized_step(policy, cfg, taken, high), window, high, policy=policy
            )
        }
        for pid in STEP_PROPERTIES:
            mine, theirs = pid in single.fails, pid in seen
            if mine and theirs:
                result.both[pid] += 1
            elif mine:
                result.only_single[pid].append(cfg.describe())
            elif theirs:
                result.only_scheduler[pid].append(cfg.describe())
    return result


def _realized_step(policy: Policy, cfg: Config, taken: Realized, high: int) -> Step:
    """The request's step as the scheduler step took it (:data:`Realized`); a budget above
    T - c0 acts as T - c0, as in the single-request model."""
    c, budget, shared, capacity, compute = taken
    engine = engine_encoder(cfg, (capacity, compute))
    return step(policy, engine, c, min(budget, high), shared)


def _reachable(policy: Policy, cfg: Config, low: int, high: int) -> set[int]:
    """The states the single-request model reaches under every budget (SPEC S4)."""
    seen, stack = {cfg.start}, [cfg.start]
    while stack:
        c = stack.pop()
        for b in range(low, high + 1):
            s = step(policy, cfg, c, b)
            if s.unsafe is None and s.chunk > 0 and s.end < cfg.prefill_end and s.end not in seen:
                seen.add(s.end)
                stack.append(s.end)
    return seen


def _order(cfg: Config) -> tuple[Any, ...]:
    return (cfg.tokens, cfg.block, cfg.lookahead, cfg.max_sched, cfg.describe())
