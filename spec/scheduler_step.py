"""One ``schedule()`` step over several requests, as a model the explorer checks (SPEC N1;
history note sections 6 and 10). The second model behind
:class:`~chunkproof.spec.interface.ExplicitModel`, beside the single-request one
(:mod:`chunkproof.spec.request`).

* Instance: a multiset of k requests, each a :class:`~chunkproof.model.config.Config` (SPEC S1).
  They share the engine's settings: every field but the per-request ones
  (:data:`REQUEST_FIELDS`: prompt, tokens, hits, junction, encoder items) is equal, and M =
  ``max_sched`` is the step's ``max_num_batched_tokens``. ``max_seqs`` is
  ``max_num_seqs``, the most requests the running list holds. The requests share the
  engine's encoder cache C and compute budget b0 (:func:`shared_encoder`): a request's
  encoder call sees C less what the other requests' entries reference
  (:mod:`chunkproof.model.encoder_items`). Two requests with items need b0 >= C (vLLM's own
  b0 = C), where the budget never decides; instances below it are left out (and counted,
  :func:`encoder_exact`).
* State: vLLM's two lists, each in its order, then the finished requests: a row holds, per
  position, (label, phase, c, e), label the request's index in the instance, phase
  :data:`RUNNING`, :data:`DECODING` (both in the running list), :data:`WAITING` or
  :data:`FINISHED`, c its computed tokens and e its encoder items up to the last one encoded
  (the entries it references in the shared cache follow from (c, e)). A request's prefill is
  done when c >= E (SPEC S2). It is then decoding while an encoder entry of its stays
  referenced (``_free_encoder_inputs`` frees an item once its end plus the release's free
  margin, use_eagle in 0.24-0.27 and L in 0.28-0.32, is at most c: an item that ends within
  the margin of E outlives the prefill), holding its running seat and its entries, the tokens
  of its decode steps part of the load the adversarial budget stands for; then it is finished,
  at c = E, and leaves both lists (its later decode steps are that load too).
* Init: every arrival order of the k requests, all waiting at c0 (FCFS: the order is the queue;
  a priority heap, with no arrivals or preemption, is one fixed order of them too).
* Actions: the token budget b the step is offered, any of 1..M (SPEC S4 ``adversarial``: the
  rest of M went to other requests' decodes). Judgement call: with b fixed at M the step is a
  function of the state, and a request behind a zero that a smaller budget causes could never
  be seen; with b free, S-LIVE asks b = M (the best budget), HOL and STARVE any b. With the
  adaptive floor (``adaptive``: vLLM's ``long_prefill_token_threshold_adaptive``, off by
  default) the action also sets n, the eligible requests ``schedule()`` counts: any number
  from the instance's unfinished ones (plus one when b < M) up, the others waiting outside the
  instance (they take no budget) or decoding in the rest of M. The step reads n only through
  theta_eff, so only the least n of each distinct theta_eff is enumerated
  (:func:`eligible_choices`); S-LIVE asks for the instance alone (no other eligible request).
  Each decoding request the running loop reaches advances its c by 1..its margin (1 + the
  drafts its decode step accepted; an advance past the margin frees what the margin does):
  the environment chooses each. An action is one integer (:data:`ACTION_STRIDE`).
* Next (history note 6; the rules written once for this model and its symbolic form:
  :func:`~chunkproof.spec.scheduler_loops.schedule_step`): the running loop visits the running
  requests in order with token_budget = b; each gets n from the policy's own stages
  (:func:`chunkproof.model.step.vectorised_stages`) at (c, token_budget) and token_budget -= n; n =
  0 is ``continue`` (in every release; the loop rules below). The loop stops when token_budget is
  0. Then the waiting loop visits the waiting requests in queue order while token_budget > 0 and
  the running list has fewer than ``max_seqs`` requests (without a KV block pool, below, no
  allocation fails and nothing is preempted). A request the step schedules allocates the
  encoder items its call scheduled at once (e := max(e, the call's count)), so the requests
  visited after it see them; entries are
  freed after the step (``update_from_output``), and all of a request's when it finishes. Each
  request is offered the budget left, capped from C8 (0.31) by the per-step threshold theta_eff
  (history note 6, running loop step 2): theta when more than one request is eligible, else 0
  (off). The eligible requests are the instance's unfinished ones, plus one when b < M (the rest of
  M went to another request's decode); more would change nothing, as theta_eff is theta from two
  on. One unfinished request offered M could also be capped at theta by other eligible requests
  that take no budget (waiting ones): it is then offered what b = theta offers it, a step the model
  has (with the same successor and stage values), so no verdict needs it. With the adaptive floor,
  theta_eff > 0 is raised to M // n where that is larger; without it the floor is off, and the
  reports say so. A request admitted at c0 with n > 0 joins the end of the running list; a zero
  **breaks** the loop (head-of-line blocking) in every release, except that from 0.33 (C9) a zero
  after the split (from the encoder cap or the reservation) is ``skip_request`` + ``continue``: the
  request stays at its place in the queue. These loop rules
  (:class:`~chunkproof.model.policy.LoopRules`) are read from the ``schedule()`` of a policy read
  from source, so a fork's own (a ``break`` in the running loop, a skip after the split) is what
  the step runs (:func:`step_loop_rules`). Skipped requests precede every request the loop did not
  reach, so both lists keep their order in every step (the basis of
  :mod:`chunkproof.spec.system_properties`' cycles-are-self-loops argument).
* Properties: P0 (a stage that runs raises or leaves [0, its input]; such a step does not lead
  on), and the system properties S-LIVE, HOL, STARVE
  (:mod:`chunkproof.spec.system_properties`), judged on every step whose code does not raise,
  P0-violating or not, on the chunks the release schedules after every clamp (SPEC Q3: a split
  below 0 that 0.28-0.33's reservation clamps to 0 is a zero; one no clamp catches, up to 0.27,
  is scheduled as it is and gives its tokens back to the budget:
  :mod:`~chunkproof.spec.scheduler_loops`).
* KV block pool (``blocks``, ``chunkproof system --pool``; SPEC KV2 rule 5): the requests of
  an instance share a pool of N blocks. Each chunk asks for its blocks; a running request the
  pool refuses preempts the last of the running list, or itself, which waits again keeping its
  c; each time the waiting loop reaches it, it resumes at a hit the environment picks (rule
  5e: any on its resume grid up to min(c, T - 1), 0 included; an action carries the choice), as
  a request admitted at that hit (rule 2d), so a cycle of states need not be a self-loop; a
  request whose c0 is a KV connector's at x too, at its first admission x or 0 (rule 5g: at
  x its admission takes rule 2e's miscount, and where only that is short the pool raises:
  P0); the
  waiting loop runs only in a step that preempted nothing and admits behind the release's
  test for the whole sequence
  (:class:`~chunkproof.spec.scheduler_loops.Ledger`). A row then carries each request's stale
  bit (:data:`FIELDS`), and S-POOL, judged on the whole explored graph
  (:attr:`SchedulerStepModel.cycle_properties`), asks that no run offered M at every step goes
  on for ever.

Symmetry reduction (``symmetry=True``): requests with equal configurations are interchangeable,
so a row stores, instead of a request's label, the least label of an equal configuration, and
the finished requests, which no loop visits, are sorted by (that label, c). Rows that differ
only by which of two equal requests is where become one. Without it (``symmetry=False``) the
labels are kept and the finished requests sorted by label; the verdicts are the same.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from chunkproof.model.config import Config, encoder_capacity, encoder_compute_budget
from chunkproof.model.encoder_items import (
    CallRules,
    call_rules,
    encoded_through,
    referenced_embeds,
)
from chunkproof.model.errors import ConfigError
from chunkproof.model.policy import LoopRules, Policy, variant_number
from chunkproof.model.stages import cap_lone_request, cap_static_threshold
from chunkproof.model.step import stage_order, unsafe_lanes, vectorised_stages
from chunkproof.model.subset import parse
from chunkproof.model.vectorised import evaluate
from chunkproof.spec import system_properties as sysprops
from chunkproof.spec.interface import Transitions
from chunkproof.spec.kv_blocks import (
    connector_hit,
    external_miscount,
    held_in_list,
    leaves_stale,
    longest_model_len,
    outside_shared_pool,
    pool_rules,
    resume_grid,
    resume_hit_top,
    shared_asked,
)
from chunkproof.spec.request import Batch, batch_key, make_batch
from chunkproof.spec.scheduler_loops import (
    DECODING,
    FINISHED,
    RUNNING,
    WAITING,
    Got,
    Held,
    Ops,
    Pool,
    Positions,
    Stages,
    alone,
    alone_fit,
    least_eligible,
    schedule_step,
    settle,
    stalled,
    theta_cap,
)

PHASE_NAMES = ("running", "waiting", "finished", "decoding")
"""The phases by code (:data:`~chunkproof.spec.scheduler_loops.RUNNING`, ...)."""

REQUEST_FIELDS = (
    "prompt",
    "tokens",
    "start",
    "external",
    "junction",
    "exact_junction",
    "uncached_prefix",
    "items",
)
"""The fields of a :class:`Config` that belong to one request; the others are the engine's,
shared by every request of an instance."""

SCHEDULER_PROPERTIES = (
    "P0",
    *(pid for pid in sysprops.SYSTEM_PROPERTIES if pid not in sysprops.POOL_PROPERTIES),
)
"""The properties the model judges on every transition; with a KV block pool, also those of
:data:`~chunkproof.spec.system_properties.POOL_PROPERTIES` (:attr:`SchedulerStepModel.
cycle_properties`)."""

MAX_SEQS = 256
"""vLLM's default ``max_num_seqs``."""

STEP_FIXED = (
    "no preemption or KV allocation failure",
    "every request arrives at the first step; its decode steps are modelled while its encoder "
    "entries stay referenced (their tokens outside b), then it leaves",
    "no encoder item of one request is another's (every item its own encoder cache entry)",
)
"""What the scheduler step fixes beyond each request's step (the policy's ``fixed``); a report
names both (:func:`fixed_inputs`)."""

BATCH_INSTANCES = 512
"""At most this many instances per batch."""

ACTION_STRIDE = 1 << 24
"""An action of the explicit model is ``budget + ACTION_STRIDE * eligible + DECODE_STRIDE *
code`` (:func:`action_of`): the budget b (below 2^24), with the adaptive floor the
environment's count of eligible requests (0: the model's own count,
:func:`~chunkproof.spec.scheduler_loops.least_eligible`; below 2^20), and the decode advances
(:func:`decode_code`)."""

DECODE_STRIDE = 1 << 44
"""Where an action's decode advances start (:data:`ACTION_STRIDE`)."""

DECODE_DIGIT = 4
"""Bits per position of an action's decode advances: one advance is at most the free margin,
below 2^4 (:func:`make_scheduler_batch` refuses more)."""

MAX_DECODE_POSITIONS = 4
"""The most positions whose decode advances an action holds (the bits left in an int64)."""

HIT_DIGIT = 9
"""Bits per position of a pooled action's resume hits (:func:`hit_code`): the hit's index on
its request's resume grid, below 2^9. A pooled action has no eligible count or decode advances,
so its hits take their place: ``budget + ACTION_STRIDE * code``."""

MAX_HIT_POSITIONS = 4
"""The most positions whose resume hits a pooled action holds (the bits left in an int64)."""


def action_of(budget: Any, eligible: Any) -> Any:
    """The explicit model's action for (b, eligible) without decode advances
    (:data:`ACTION_STRIDE`), of integers or of lanes."""
    return budget + ACTION_STRIDE * eligible


def split_action(action: int) -> tuple[int, int]:
    """(b, eligible) of an explicit model's action (:data:`ACTION_STRIDE`)."""
    eligible, budget = divmod(int(action) % DECODE_STRIDE, ACTION_STRIDE)
    return budget, eligible


def decode_code(advance: np.ndarray) -> np.ndarray:
    """The decode advances of lanes (per lane and position) as one integer per lane, a digit
    of :data:`DECODE_DIGIT` bits per position."""
    shifts = DECODE_DIGIT * np.arange(advance.shape[1], dtype=np.int64)
    code: np.ndarray = (advance << shifts).sum(axis=1)
    return code


def hit_code(index: np.ndarray) -> np.ndarray:
    """The resume hits of lanes (per lane and position, each the hit's index on its grid) as
    one integer per lane, a digit of :data:`HIT_DIGIT` bits per position."""
    shifts = HIT_DIGIT * np.arange(index.shape[1], dtype=np.int64)
    code: np.ndarray = (index << shifts).sum(axis=1)
    return code


def hit_indices(action: int, k: int) -> tuple[int, ...]:
    """Per position, the resume hit's index on its grid of a pooled action
    (:func:`hit_code`)."""
    code = int(action) // ACTION_STRIDE
    mask = (1 << HIT_DIGIT) - 1
    return tuple((code >> (HIT_DIGIT * p)) & mask for p in range(k))


def decode_advances(action: int, k: int) -> tuple[int, ...]:
    """Per position, the decode advance of an explicit model's action (:func:`decode_code`)."""
    code = int(action) // DECODE_STRIDE
    mask = (1 << DECODE_DIGIT) - 1
    return tuple((code >> (DECODE_DIGIT * p)) & mask for p in range(k))


@functools.lru_cache(maxsize=4096)
def eligible_choices(whole: int, theta: int, least: int) -> tuple[int, ...]:
    """The environment's eligible counts under the adaptive floor (module docstring, Actions):
    from ``least`` (at least 1: a state the model expands has an unfinished request) up, the
    least count of each distinct theta_eff (0 below two eligible requests, else max(theta,
    M // eligible); only one when theta is 0)."""
    count = least
    if theta <= 0:
        return (count,)
    choices: list[int] = []
    last = -1
    while True:
        value = 0 if count < 2 else max(theta, whole // count)
        if value != last:
            choices.append(count)
            last = value
        if count >= 2 and whole // count <= theta:
            return tuple(choices)
        count += 1


FIELDS = 5
"""Columns per position: label, phase, c, e (the request's encoder items up to the last one
encoded: :mod:`chunkproof.model.encoder_items`; 0 without items and once finished) and stale
(with a KV block pool, 1 while a running request still holds the state block of its chunk
before the last: :class:`~chunkproof.spec.scheduler_loops.Pool`; else 0)."""


def engine_settings(cfg: Config) -> tuple[object, ...]:
    """The fields of ``cfg`` every request of an instance shares (not :data:`REQUEST_FIELDS`),
    as given (the encoder sizes too: 0 is vLLM's own size, whether or not ``cfg`` carries
    items)."""
    return tuple(
        getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in REQUEST_FIELDS
    )


def shared_encoder(group: Sequence[Config]) -> tuple[int, int]:
    """(C, b0): the encoder cache capacity and compute budget of the engine that runs
    ``group``. Each is the requests' shared setting, or (0) vLLM's own max(M, the model's
    largest item), the largest item being the largest any request of ``group`` carries (the
    model's per-item maximum is a fixed input, as for one request:
    :func:`~chunkproof.model.config.encoder_capacity`)."""
    return (
        max(encoder_capacity(cfg) for cfg in group),
        max(encoder_compute_budget(cfg) for cfg in group),
    )


def engine_encoder(cfg: Config, encoder: tuple[int, int]) -> Config:
    """``cfg`` as its engine runs it: with encoder items, the engine's (C, b0) of
    :func:`shared_encoder` in place of its own."""
    if not cfg.items:
        return cfg
    return dataclasses.replace(cfg, encoder_cache=encoder[0], encoder_budget=encoder[1])


def encoder_exact(group: Sequence[Config]) -> bool:
    """Whether the model's step is vLLM's for ``group`` as far as the encoder goes: at most one
    request carries encoder items, or the compute budget is at least the cache (b0 >= C, vLLM's
    own b0 = C), where it never decides (:mod:`chunkproof.model.encoder_items`)."""
    if sum(1 for cfg in group if cfg.items) <= 1:
        return True
    capacity, budget = shared_encoder(group)
    return budget >= capacity


def request_sets(policy: Policy, configs: Sequence[Config], k: int) -> list[tuple[Config, ...]]:
    """Every multiset of ``k`` of ``configs`` that one engine can run and the model covers: the
    requests share the engine's settings, ``policy`` accepts each of them (SPEC S1b) and at
    most one carries encoder items or the compute budget is at least the cache
    (:func:`encoder_exact`)."""
    accepted = [cfg for cfg in configs if policy.accepts(cfg) is None]
    return [
        group
        for group in itertools.combinations_with_replacement(accepted, k)
        if len({engine_settings(cfg) for cfg in group}) == 1 and encoder_exact(group)
    ]


class Admitted(NamedTuple):
    """What a pooled step's views of the requests see in place of their inputs c0 and x (SPEC
    KV2 rules 5e-5g), per lane (and position): a waiting request's resume hit and, where that
    is a connector's hit, x = the hit; a request past its admission 0 and 0 (neither the
    split nor the manager reads a running request's)."""

    start: np.ndarray
    external: np.ndarray

    def at(self, p: int) -> Admitted:
        """Position ``p``'s entries."""
        return Admitted(self.start[:, p], self.external[:, p])

    def lanes(self, sel: np.ndarray) -> Admitted:
        """The entries of the lanes ``sel``."""
        return Admitted(self.start[sel], self.external[sel])

    def put(self, view: Any) -> None:
        """Set ``view``'s c0 and x (a view of the same lanes)."""
        view.start, view.external = self.start, self.external


@dataclass
class RequestRows:
    """The requests of a batch's instances, row ``instance * k + label``, in parts that each
    agree on :func:`batch_key` (a request with encoder items and one without cannot share a
    :class:`Batch`: its items are a tuple of one length): row r is entry ``local[r]`` of
    ``parts[part[r]]``; ``start`` and ``end`` are c0 and E per row, ``grid`` the grid a
    resume hit lies on (SPEC KV2 rule 5e, :func:`~chunkproof.spec.kv_blocks.resume_grid`) and
    ``connector`` the hit a KV connector offers (rule 5g,
    :func:`~chunkproof.spec.kv_blocks.connector_hit`; 0: none)."""

    parts: list[Batch]
    part: np.ndarray
    local: np.ndarray
    start: np.ndarray
    end: np.ndarray
    grid: np.ndarray
    connector: np.ndarray

    @classmethod
    def of(cls, configs: Sequence[Config]) -> RequestRows:
        keys = [batch_key(cfg) for cfg in configs]
        order = list(dict.fromkeys(keys))
        part = np.array([order.index(key) for key in keys], dtype=np.int64)
        local = np.zeros(len(configs), dtype=np.int64)
        start, end = np.zeros_like(local), np.zeros_like(local)
        parts = []
        for index in range(len(order)):
            rows = np.flatnonzero(part == index)
            batch = make_batch([configs[int(r)] for r in rows], None)
            local[rows] = np.arange(len(rows))
            start[rows], end[rows] = batch.start, batch.end
            parts.append(batch)
        grid = np.array([resume_grid(cfg) for cfg in configs], dtype=np.int64)
        connector = np.array([connector_hit(cfg) for cfg in configs], dtype=np.int64)
        return cls(parts, part, local, start, end, grid, connector)


@dataclass
class SchedulerBatch:
    """Instances evaluated together. ``requests`` holds their configurations flattened, row
    ``instance * k + label``; ``klass`` maps such a row to the least label of an equal
    configuration of the instance; ``whole`` is M and ``theta`` the static threshold per
    instance, ``radix`` bounds every c and ``items`` every e; ``encoder`` is (C, b0) per
    instance (:func:`shared_encoder`), one column each; ``margin`` is each request's free
    margin (how far past an item's end c must be for ``_free_encoder_inputs`` to free it; 0
    without items: :data:`~chunkproof.spec.scheduler_loops.DECODING`)."""

    instances: list[tuple[Config, ...]]
    k: int
    requests: RequestRows
    klass: np.ndarray
    whole: np.ndarray
    theta: np.ndarray
    radix: int
    items: int
    encoder: np.ndarray
    margin: np.ndarray
    blocks: np.ndarray
    """Per instance, the KV block pool's N (0: no pool, no allocation fails)."""
    model_len: np.ndarray
    """Per instance, ``max_model_len``: its longest prompt + 1 (as SPEC P8 takes it)."""

    def __len__(self) -> int:
        return len(self.instances)

    def rows(self, inst: np.ndarray, label: np.ndarray) -> np.ndarray:
        """The ``requests`` rows of the requests ``label`` of the instances ``inst``."""
        rows: np.ndarray = inst[:, None] * self.k + label
        return rows


def make_scheduler_batch(
    instances: list[tuple[Config, ...]],
    call: CallRules | None = None,
    blocks: Sequence[int] | None = None,
) -> SchedulerBatch:
    """A batch of ``instances`` (of one size k, sharing the engine's settings), under the
    policy's encoder ``call`` rules (the free margin: ``None``, none), each with the KV block
    pool of its entry of ``blocks`` (``None`` or 0: no pool)."""
    k = len(instances[0])
    flat = [cfg for group in instances for cfg in group]
    klass = np.array([group.index(cfg) for group in instances for cfg in group], dtype=np.int64)
    whole = np.array([group[0].max_sched for group in instances], dtype=np.int64)
    theta = np.array([group[0].threshold for group in instances], dtype=np.int64)
    requests = RequestRows.of(flat)
    margin = free_margins(requests, call)
    if int(whole.max()) >= 1 << 20 or int(margin.max()) >= 1 << DECODE_DIGIT:
        raise ConfigError(
            "scheduler step: the explicit model takes M below 2^20 and an encoder free margin "
            f"(L) below {1 << DECODE_DIGIT}"
        )
    if int(margin.max()) > 0 and k > MAX_DECODE_POSITIONS:
        raise ConfigError(
            f"scheduler step: at most {MAX_DECODE_POSITIONS} requests with decode steps "
            "(encoder items and a free margin > 0)"
        )
    radix = max(cfg.tokens for cfg in flat) + 1 + int(margin.max())
    items = max(len(cfg.items) for cfg in flat) + 1
    if len(instances) * (k * len(PHASE_NAMES) * radix * items * 2) ** k >= 1 << 62:
        raise ConfigError("scheduler step: too many instances or tokens for an int64 key")
    encoder = np.array([shared_encoder(group) for group in instances], dtype=np.int64)
    pool = np.array(blocks if blocks is not None else [0] * len(instances), dtype=np.int64)
    if int(pool.max()) > 0:
        local = np.array([resume_hit_top(cfg, cfg.tokens) for cfg in flat]) // requests.grid
        if k > MAX_HIT_POSITIONS or int(local.max()) + 1 >= 1 << HIT_DIGIT:  # + the connector's
            raise ConfigError(
                f"--pool: the explicit model takes at most {MAX_HIT_POSITIONS} requests with a "
                f"pool, each with fewer than {1 << HIT_DIGIT} points of its resume grid (SPEC KV2 "
                "rule 5e) in its prompt"
            )
    model_len = np.array([pool_model_len(group) for group in instances], dtype=np.int64)
    return SchedulerBatch(
        instances, k, requests, klass, whole, theta, radix, items, encoder, margin, pool, model_len
    )


def pool_model_len(group: Sequence[Config]) -> int:
    """``max_model_len`` of the engine that runs ``group`` with a KV block pool: the largest of
    its requests' own (SPEC P8's :func:`~chunkproof.spec.kv_blocks.longest_model_len`, the
    prompt + 1, the least that lets each request generate), so its longest prompt + 1."""
    return max(longest_model_len(cfg) for cfg in group)


def free_margins(requests: RequestRows, call: CallRules | None) -> np.ndarray:
    """Each request's free margin under the encoder ``call`` rules (0 without items or
    rules): the release's own (:data:`~chunkproof.model.stages.ENCODER_CALL_SITES`), over
    each part's lanes."""
    margin = np.zeros(len(requests.part), dtype=np.int64)
    if call is None:
        return margin
    for index, part in enumerate(requests.parts):
        rows = np.flatnonzero(requests.part == index)
        if part.items:
            view = part.view(requests.local[rows])
            margin[rows] = _subset(call.margin, [view])
    return margin


@dataclass
class SchedulerStepModel:
    """The scheduler-step model over ``instances`` (module docstring); the explicit form the
    explorer enumerates."""

    policy: Policy
    instances: Sequence[tuple[Config, ...]]
    symmetry: bool = True
    max_seqs: int = MAX_SEQS
    properties: tuple[str, ...] = SCHEDULER_PROPERTIES
    adaptive: bool = False
    """``long_prefill_token_threshold_adaptive`` (module docstring, Actions)."""
    blocks: Sequence[int] = ()
    """Per instance, the N of the KV block pool its requests share (SPEC KV2 rule 5); empty:
    no pool (no allocation fails)."""
    rules: LoopRules = dataclasses.field(init=False)
    """What a zero does in each loop (:func:`step_loop_rules`), read once; the step refuses
    the policy here, before any search, when it cannot run them."""

    encoder_call: CallRules | None = dataclasses.field(init=False)
    """How the policy's encoder stage calls the encoder (:func:`~chunkproof.model.
    encoder_items.call_rules`), which the shared cache needs."""

    def __post_init__(self) -> None:
        self.rules = step_loop_rules(self.policy)
        self.encoder_call = call_rules(self.policy.stage("encoder"))
        if self.adaptive:
            check_adaptive(self.policy)
        if self.pooled:
            check_pool(self.policy, self.instances, self.blocks, self.adaptive)
            self.properties = (*self.properties, *self.cycle_properties)
        for group in self.instances:
            _check_instance(self.policy, group)
            check_encoder_call(self.policy, sum(1 for cfg in group if cfg.items))

    @property
    def pooled(self) -> bool:
        """Whether the instances' requests share a KV block pool (:attr:`blocks`)."""
        return bool(self.blocks)

    @property
    def cycle_properties(self) -> tuple[str, ...]:
        """The properties of runs that go on for ever (:mod:`chunkproof.checker.engines.
        lassos`): S-POOL where the requests share a pool."""
        return sysprops.POOL_PROPERTIES if self.pooled else ()

    def cycle_edges(self, batch: SchedulerBatch, steps: Transitions, pid: str) -> np.ndarray:
        """The steps S-POOL holds a run to: each offered the whole budget M (the instance
        alone; a pooled run has no decode steps and no adaptive floor, so that is one step per
        state)."""
        budget = steps.action % ACTION_STRIDE
        edges: np.ndarray = budget == batch.whole[steps.target[:, 0]]
        return edges

    def batches(self) -> Iterator[SchedulerBatch]:
        """The instances, grouped by size and their requests' :func:`batch_key` values, at
        most :data:`BATCH_INSTANCES` per batch."""
        groups: dict[tuple[object, ...], list[int]] = {}
        for index, group in enumerate(self.instances):
            keys = tuple(sorted({batch_key(cfg) for cfg in group}))
            groups.setdefault((len(group), keys), []).append(index)
        for same in groups.values():
            for first in range(0, len(same), BATCH_INSTANCES):
                chosen = same[first : first + BATCH_INSTANCES]
                blocks = [self.blocks[i] for i in chosen] if self.pooled else None
                yield self.batch([self.instances[i] for i in chosen], blocks)

    def batch(
        self, instances: list[tuple[Config, ...]], blocks: Sequence[int] | None = None
    ) -> SchedulerBatch:
        """A batch of ``instances`` under the policy's encoder call rules, each with the pool of
        its entry of ``blocks`` (``None``: no pool)."""
        return make_scheduler_batch(instances, self.encoder_call, blocks)

    def initial(self, batch: SchedulerBatch) -> np.ndarray:
        """Init: every arrival order of every instance, all requests waiting at c0 (one row
        per distinct canonical state)."""
        orders = np.array(list(itertools.permutations(range(batch.k))), dtype=np.int64)
        inst = np.repeat(np.arange(len(batch), dtype=np.int64), len(orders))
        label = np.tile(orders, (len(batch), 1))
        phase = np.full(label.shape, WAITING, dtype=np.int64)
        c = batch.requests.start[batch.rows(inst, label)]
        zero = np.zeros_like(c)
        states = self.arrange(batch, inst, label, phase, c, zero, phase, zero)
        first = np.unique(self.key(batch, states), return_index=True)[1]
        return states[np.sort(first)]

    def key(self, batch: SchedulerBatch, states: np.ndarray) -> np.ndarray:
        """Mixed radix over (instance, then per position label, phase, c, e, stale)."""
        digit = len(PHASE_NAMES) * batch.radix * batch.items * 2
        keys = states[:, 0].copy()
        for p in range(batch.k):
            label, phase, c, e, stale = (states[:, 1 + FIELDS * p + j] for j in range(FIELDS))
            place = ((label * len(PHASE_NAMES) + phase) * batch.radix + c) * batch.items + e
            keys = keys * (batch.k * digit) + place * 2 + stale
        return keys

    def state_space(self, batch: SchedulerBatch) -> None:
        """The global states are too many to list up front: the explorer searches them."""
        return None

    def arrange(
        self,
        batch: SchedulerBatch,
        inst: np.ndarray,
        label: np.ndarray,
        phase: np.ndarray,
        c: np.ndarray,
        encoded: np.ndarray,
        group: np.ndarray,
        stale: np.ndarray,
    ) -> np.ndarray:
        """Canonical rows: positions sorted by ``group`` (the list a request is in, in list
        order), the finished requests by (label, c) with e 0 (their entries are freed); labels
        replaced by their class under symmetry reduction (module docstring). ``stale`` is 0
        outside the running list (a request there holds no blocks)."""
        if self.symmetry:
            label = batch.klass[batch.rows(inst, label)]
        position = np.broadcast_to(np.arange(batch.k), label.shape)
        tie = np.where(phase == FINISHED, label * batch.radix + c, position)
        order = np.argsort(group * (batch.k * batch.radix) + tie, axis=1, kind="stable")
        encoded = np.where(phase == FINISHED, 0, encoded)
        stale = np.where(phase == RUNNING, stale, 0)
        columns = [np.take_along_axis(a, order, axis=1) for a in (label, phase, c, encoded, stale)]
        return np.concatenate([inst[:, None], np.stack(columns, axis=2).reshape(len(inst), -1)], 1)

    def successors(self, batch: SchedulerBatch, states: np.ndarray) -> Transitions:
        """Every budget 1..M at every state, with the adaptive floor each with every eligible
        count of :func:`eligible_choices`, with a pool each with every choice of resume hits
        (:meth:`resume_choices`) (module docstring)."""
        counts = batch.whole[states[:, 0]]
        source = np.repeat(np.arange(len(states)), counts)
        budget = 1 + _offsets(counts)
        if self.pooled:
            lane, index = hit_lanes(self.hit_counts(batch, states)[source])
            return self.step(batch, states, source[lane], budget[lane], hits=index)
        if not self.adaptive:
            return self.step(batch, states, source, budget)
        inst = states[source, 0]
        phases = list(states[source, 2::FIELDS].T)
        least = least_eligible(numpy_ops(len(source)), phases, budget, batch.whole[inst])
        keys = np.stack([batch.whole[inst], batch.theta[inst], least], axis=1)
        unique, which = np.unique(keys, axis=0, return_inverse=True)
        tables = [eligible_choices(*(int(v) for v in key)) for key in unique]
        sizes = np.array([len(t) for t in tables], dtype=np.int64)
        flat = np.array([n for t in tables for n in t], dtype=np.int64)
        which = which.reshape(-1)
        lane = np.repeat(np.arange(len(source)), sizes[which])
        eligible = flat[(np.cumsum(sizes) - sizes)[which[lane]] + _offsets(sizes[which])]
        return self.step(batch, states, source[lane], budget[lane], eligible)

    def resume_choices(
        self, batch: SchedulerBatch, rows: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """SPEC KV2 rule 5e, the environment's choice of resume hits at each state of ``rows``
        (:meth:`hit_counts`, :func:`hit_lanes`): the lanes each choice belongs to, and per lane
        and position the hit's index on its request's grid (0: no hit), the largest hit
        first."""
        return hit_lanes(self.hit_counts(batch, rows))

    def hit_counts(self, batch: SchedulerBatch, rows: np.ndarray) -> np.ndarray:
        """SPEC KV2 rules 5e-5g: per state of ``rows`` and position, how many hits its request
        can resume at: a waiting request at c > 0 (preempted, or not yet admitted at its c0,
        rule 5f) at any point of its resume grid (B, or B_s without fine hits) from 0 (its
        blocks evicted) to :func:`~chunkproof.spec.kv_blocks.resume_hit_top` (indices 0 to
        the top's), and a connector's request at the connector's hit x too (rule 5g: the
        index after those); every other request only at its c (1)."""
        label, phase, c = (rows[:, 1 + j :: FIELDS] for j in range(3))
        request_rows = batch.rows(rows[:, 0], label)
        local = self._local_hits(batch, request_rows, c)
        connector = batch.requests.connector[request_rows] > 0
        counts: np.ndarray = np.where((phase == WAITING) & (c > 0), local + connector, 1)
        return counts

    def _local_hits(self, batch: SchedulerBatch, rows: np.ndarray, c: np.ndarray) -> np.ndarray:
        """How many local hits (rule 5e) the requests ``rows`` at c resume at: their resume
        grid's points from 0 to :func:`~chunkproof.spec.kv_blocks.resume_hit_top`."""
        top = np.stack(
            [self._per_part(batch, rows[:, p], resume_hit_top, c[:, p]) for p in range(batch.k)],
            axis=1,
        )
        local: np.ndarray = top // batch.requests.grid[rows] + 1
        return local

    def admitted_at(
        self,
        batch: SchedulerBatch,
        rows: np.ndarray,
        phase: np.ndarray,
        c: np.ndarray,
        hits: np.ndarray,
    ) -> Admitted:
        """SPEC KV2 rules 5e-5g: where the requests ``rows`` (lanes by positions) at (phase, c)
        are admitted under the hit indices ``hits`` (:meth:`hit_counts`): a waiting request at
        its index times its resume grid, or at the index after its local hits at the
        connector's hit x, with x external; every other request at c0 = x = 0 (past its
        admission)."""
        waiting = phase == WAITING
        x = batch.requests.connector[rows]
        connected = waiting & (x > 0)
        if connected.any():  # the connector's index follows the local hits'
            connected &= hits == self._local_hits(batch, rows, c)
        start = np.where(waiting, np.where(connected, x, hits * batch.requests.grid[rows]), 0)
        return Admitted(start, np.where(connected, x, 0))

    def stages(
        self,
        batch: SchedulerBatch,
        rows: np.ndarray,
        c: np.ndarray,
        budget: np.ndarray,
        shared: np.ndarray,
        admitted: Admitted | None = None,
    ) -> Got:
        """The policy's stages for the requests ``rows`` at (c, budget) (SPEC S3), ``budget``
        the budget left capped by theta_eff (the cap stage is then min(T - c, theta_eff,
        left), history note 6). A request with encoder items sees the engine's (C, b0)
        (:func:`shared_encoder`) less the ``shared`` embeddings the other requests' entries
        reference, and gives the items its call encodes through
        (:mod:`chunkproof.model.encoder_items`). ``admitted`` (per lane) replaces the
        requests' c0 and x: a pooled request resumed at a hit is admitted there (rules
        5e-5g)."""
        requests = batch.requests
        kinds = (np.int64, np.int64, bool, bool, np.int64)
        got = Got(*(np.zeros(len(rows), dtype=t) for t in kinds))
        order = stage_order(self.policy)
        for index, part in enumerate(requests.parts):
            mine = np.flatnonzero(requests.part[rows] == index)
            if not len(mine):
                continue
            view = part.view(requests.local[rows[mine]])
            if admitted is not None:
                admitted.lanes(mine).put(view)
            if part.items:
                view.encoder_cache, view.encoder_budget = batch.encoder[rows[mine] // batch.k].T
                view.encoder_shared = shared[mine]
            values = vectorised_stages(self.policy, view, c[mine], budget[mine])
            got.chunk[mine], got.split[mine] = values["chunk"], values["split"]
            got.unsafe[mine] = unsafe_lanes(values, budget[mine], order)
            got.crashed[mine] = values["crashed"]
            if part.items and self.encoder_call is not None:
                through = values.get("encoded")
                if through is None:
                    through = self._through(view, c[mine], values, budget[mine])
                got.encoded[mine] = through
        return got

    def _through(
        self, view: Any, c: np.ndarray, values: dict[str, Any], budget: np.ndarray
    ) -> np.ndarray:
        """:func:`~chunkproof.model.encoder_items.encoded_through` of a built-in encoder
        stage, at the value the stage before it handed it."""
        rules = self.encoder_call
        assert rules is not None and rules.scheduled_shift is not None
        order = stage_order(self.policy)
        at = order.index("encoder")
        n = values[order[at - 1]] if at else budget
        shift = _subset(rules.shift, [view])
        margin = _subset(rules.margin, [view])
        scheduled = shift if rules.scheduled_shift else 0
        return np.asarray(_subset(encoded_through, [view, c, n, shift, margin, scheduled]))

    def step(
        self,
        batch: SchedulerBatch,
        states: np.ndarray,
        source: np.ndarray,
        budget: np.ndarray,
        eligible: np.ndarray | None = None,
        hits: np.ndarray | None = None,
    ) -> Transitions:
        """The transitions (states[source], budget, eligible, hits): Next (:func:`~chunkproof.
        spec.scheduler_loops.schedule_step` over lanes) and every property; ``eligible`` is the
        environment's count under the adaptive floor, ``None`` without it; ``hits`` (with a
        pool) each waiting request's resume hit as its index on its grid, or on {0, x} at a
        connector's hit x (rules 5e-5g, :meth:`resume_choices`): the loops see it at that c,
        admitted at that hit (:class:`Admitted`), and a running request past its admission (c0
        = x = 0: it may have been admitted at a hit other than its own c0, and neither the
        split nor the manager reads a running request's). Each decoding
        request the running loop reached advances its c by any of 1..its free margin (the
        accepted tokens its decode step computed, the environment's choice; more is what the
        margin gives, all its items freed), one the loop did not reach by 0: one transition per
        choice."""
        rows = states[source]
        inst = rows[:, 0]
        label, phase, c, e, stale = (rows[:, 1 + j :: FIELDS] for j in range(FIELDS))
        request_rows = batch.rows(inst, label)
        ops = numpy_ops(len(rows))
        phases = list(phase.T)
        held = self._held(batch, request_rows)
        begin, resumed = None, c
        if hits is not None:
            begin = self.admitted_at(batch, request_rows, phase, c, hits)
            resumed = np.where(phase == WAITING, begin.start, c)
        pool = self._pool(batch, request_rows, inst, stale, begin) if self.pooled else None
        stages = self._at(batch, request_rows, begin)
        at = Positions(phases, list(resumed.T), list(e.T), stages, held, pool)
        cap = self._cap(ops, batch, inst, phases, budget, eligible)
        done = schedule_step(ops, at, budget, cap, self.max_seqs, self.rules)
        chunk, admitted = np.stack(done.chunk, axis=1), np.stack(done.admitted, axis=1)
        decoded = np.stack(done.decoded, axis=1)
        still = stalled(ops, done)
        safe = ~done.unsafe
        unfinished = (phase != FINISHED).any(axis=1)
        fit = alone_fit(ops, at, cap(budget), still)
        bad = {
            "P0": done.unsafe,
            "S-LIVE": sysprops.system_live(
                still,
                unfinished,
                budget,
                batch.whole[inst],
                alone(ops, phases, budget, batch.whole[inst], eligible),
            ),
            "HOL": ~done.crashed & sysprops.head_of_line(done.broke, done.behind_fit),
            "STARVE": sysprops.starvation(still, fit),
        }
        bad |= {pid: np.zeros(len(rows), dtype=bool) for pid in self.cycle_properties}
        record = {f"chunk{p}": chunk[:, p] for p in range(batch.k)}
        record |= {f"offered{p}": np.asarray(done.offered[p]) for p in range(batch.k)}
        record |= {f"shared{p}": np.asarray(done.shared[p]) for p in range(batch.k)}
        out = [np.zeros(len(rows), dtype=bool)] * batch.k
        stale_after = [np.zeros(len(rows), dtype=np.int64)] * batch.k
        if done.ledger is not None:
            out = [np.asarray(o, dtype=bool) for o in done.ledger.out]
            stale_after = [np.asarray(v, dtype=np.int64) for v in done.ledger.stale]
            record |= {f"preempted{p}": out[p] for p in range(batch.k)}
            record |= {
                f"raised{p}": np.asarray(done.ledger.raised[p], dtype=bool) for p in range(batch.k)
            }
        if begin is not None:
            record |= {
                f"hit{p}": np.where(phase[:, p] == WAITING, resumed[:, p], 0)
                for p in range(batch.k)
            }
            record |= {f"connector{p}": begin.external[:, p] > 0 for p in range(batch.k)}
        record["left"] = np.asarray(done.left)
        lane, advance = self._advances(batch, request_rows, c, decoded)
        encoded = np.stack(done.encoded, axis=1)[lane]
        taken = chunk[lane] + advance
        held_after = self._held(batch, request_rows[lane])
        lanes = numpy_ops(len(lane))
        places = []
        for p in range(batch.k):

            def held_at(at_c: np.ndarray, p: int = p) -> Any:
                return held_after(p, at_c, encoded[:, p])

            end = batch.requests.end[request_rows[lane, p]]
            places.append(
                settle(
                    lanes,
                    phase[lane, p],
                    c[lane, p],
                    taken[:, p],
                    admitted[lane, p],
                    end,
                    held_at,
                    out[p][lane],
                    resumed[lane, p],
                )
            )
        new_phase, after, group = (np.stack(column, axis=1) for column in zip(*places, strict=True))
        kept = np.stack(stale_after, axis=1)[lane]
        target = self.arrange(
            batch, inst[lane], label[lane], new_phase, after, encoded, group, kept
        )
        record = {name: values[lane] for name, values in record.items()}
        record |= {f"decoded{p}": advance[:, p] for p in range(batch.k)}
        action = budget if eligible is None else action_of(budget, eligible)
        if hits is not None:
            action = budget + ACTION_STRIDE * hit_code(hits)
        return Transitions(
            source=source[lane],
            action=action[lane] + DECODE_STRIDE * decode_code(advance),
            target=target,
            follow=(safe & ~still)[lane] & (new_phase != FINISHED).any(axis=1),
            bad={pid: bad[pid][lane] for pid in self.properties},
            weight=np.ones(len(lane), dtype=np.int64),
            record=record,
        )

    def _advances(
        self, batch: SchedulerBatch, rows: np.ndarray, c: np.ndarray, decoded: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every choice of decode advances (:meth:`step`): per lane, each decoding request the
        loop reached any of 1..m, m its free margin less how far past E it is (a larger
        advance frees what m does), the others 0. The lanes they belong to, and the advances
        (per lane and position)."""
        span = batch.requests.end[rows] + batch.margin[rows] - c
        choices = np.where(decoded, np.maximum(span, 1), 1)
        count = choices.prod(axis=1)
        lane = np.repeat(np.arange(len(rows)), count)
        digits = _offsets(count)
        advance = np.zeros((len(lane), batch.k), dtype=np.int64)
        for p in range(batch.k):
            digits, advance[:, p] = np.divmod(digits, choices[lane, p])
        advance = np.where(decoded[lane], advance + 1, 0)
        return lane, advance

    def _at(self, batch: SchedulerBatch, rows: np.ndarray, begin: Admitted | None) -> Stages:
        """The policy's step of the request at a position, over the lanes ``where`` marks
        (zeros elsewhere), each request admitted at its entry of ``begin`` (per lane and
        position; ``None``: its c0): :data:`~chunkproof.spec.scheduler_loops.Stages` over
        NumPy."""

        def at(p: int, c: np.ndarray, offer: np.ndarray, where: np.ndarray, shared: Any) -> Got:
            sel = np.flatnonzero(where)
            others = np.broadcast_to(np.asarray(shared, dtype=np.int64), where.shape)[sel]
            admitted = None if begin is None else begin.at(p).lanes(sel)
            got = self.stages(batch, rows[sel, p], c[sel], offer[sel], others, admitted)
            full = [np.zeros(len(where), dtype=a.dtype) for a in got]
            for whole, part in zip(full, got, strict=True):
                whole[sel] = part
            return Got(*full)

        return at

    def _held(self, batch: SchedulerBatch, rows: np.ndarray) -> Held:
        """The embeddings the encoder entries of the request at a position reference
        (:func:`~chunkproof.model.encoder_items.referenced_embeds`):
        :data:`~chunkproof.spec.scheduler_loops.Held` over NumPy."""
        requests, rules = batch.requests, self.encoder_call

        def held(p: int, c: np.ndarray, e: np.ndarray) -> np.ndarray:
            out = np.zeros(len(rows), dtype=np.int64)
            if rules is None:
                return out
            for index, part in enumerate(requests.parts):
                mine = np.flatnonzero(requests.part[rows[:, p]] == index)
                if not part.items or not len(mine):
                    continue
                view = part.view(requests.local[rows[mine, p]])
                margin = _subset(rules.margin, [view])
                out[mine] = _subset(referenced_embeds, [view, c[mine], e[mine], margin])
            return out

        return held

    def _pool(
        self,
        batch: SchedulerBatch,
        rows: np.ndarray,
        inst: np.ndarray,
        stale: np.ndarray,
        begin: Admitted | None,
    ) -> Pool:
        """The KV block pool of the lanes' instances (SPEC KV2 rule 5), the release's rules
        (:func:`~chunkproof.spec.kv_blocks.pool_rules`) evaluated per position over the lanes'
        requests, each admitted at its entry of ``begin`` (a resume hit, rule 5e, where the
        rules ask it as rule 2d's hit; ``None``: its c0): :class:`~chunkproof.spec.
        scheduler_loops.Pool` over NumPy."""
        rules = pool_rules(self.policy.kv_release)
        model_len = batch.model_len[inst]

        def per(function: Callable[..., Any], p: int, *args: np.ndarray) -> np.ndarray:
            admitted = None if begin is None else begin.at(p)
            return self._per_part(batch, rows[:, p], function, *args, admitted=admitted)

        return Pool(
            batch.blocks[inst],
            list(stale.T),
            lambda p, c, kept: per(held_in_list, p, c, kept, model_len),
            lambda p, c, end: per(shared_asked, p, c, end, model_len),
            lambda p, c, end: per(leaves_stale, p, c, end),
            lambda p: per(rules.admission, p, model_len),
            lambda p, c, end: per(external_miscount, p, c, end),
        )

    def _per_part(
        self,
        batch: SchedulerBatch,
        rows: np.ndarray,
        function: Callable[..., Any],
        *args: np.ndarray,
        admitted: Admitted | None = None,
    ) -> np.ndarray:
        """One of chunkproof's own subset functions of a request's configuration (and
        ``args``, per lane) over the requests ``rows``, each part's view evaluated once; the
        views' c0 and x replaced by ``admitted`` where given (a resume hit, rules 5e-5g)."""
        requests = batch.requests
        out = np.zeros(len(rows), dtype=np.int64)
        for index, part in enumerate(requests.parts):
            mine = np.flatnonzero(requests.part[rows] == index)
            if len(mine):
                view = part.view(requests.local[rows[mine]])
                if admitted is not None:
                    admitted.lanes(mine).put(view)
                lanes = [np.broadcast_to(a, out.shape)[mine] for a in args]
                out[mine] = _subset(function, [view, *lanes])
        return out

    def _cap(
        self,
        ops: Ops,
        batch: SchedulerBatch,
        inst: np.ndarray,
        phases: list[np.ndarray],
        budget: np.ndarray,
        eligible: np.ndarray | None,
    ) -> Callable[[np.ndarray], np.ndarray]:
        """What a position is offered from the budget left: capped by theta_eff where the
        policy's cap is C8-C9's per-step threshold (:func:`~chunkproof.spec.scheduler_loops.
        theta_cap`), else the budget left."""
        theta = batch.theta[inst] if per_step_theta(self.policy) else None
        return theta_cap(ops, phases, budget, batch.whole[inst], theta, eligible)


def _subset(function: Callable[..., Any], args: list[Any]) -> Any:
    """One of chunkproof's own policy-subset functions over lanes (they never raise)."""
    return evaluate(parse(function), args).value


def _offsets(sizes: np.ndarray) -> np.ndarray:
    """0, 1, ..., size - 1 for each of ``sizes``, concatenated."""
    total = np.arange(int(sizes.sum()), dtype=np.int64)
    offsets: np.ndarray = total - np.repeat(np.cumsum(sizes) - sizes, sizes)
    return offsets


def hit_lanes(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every combination of resume hits of rows whose positions have ``counts`` choices each
    (:meth:`SchedulerStepModel.hit_counts`): the row of each combination, and per combination
    and position the hit's index on its request's grid, the largest hit first, so that a
    witness resumes where the lookup finds a request's blocks when none was evicted."""
    sizes = counts.prod(axis=1)
    lane = np.repeat(np.arange(len(counts)), sizes)
    digits = _offsets(sizes)
    index = np.zeros((len(lane), counts.shape[1]), dtype=np.int64)
    for p in range(counts.shape[1]):
        digits, digit = np.divmod(digits, counts[lane, p])
        index[:, p] = counts[lane, p] - 1 - digit
    return lane, index


def numpy_ops(lanes: int) -> Ops:
    """:class:`~chunkproof.spec.scheduler_loops.Ops` over ``lanes`` NumPy lanes."""
    return Ops(
        all_=lambda *terms: functools.reduce(np.logical_and, terms),
        any_=lambda *terms: functools.reduce(np.logical_or, terms),
        not_=np.logical_not,
        where=np.where,
        div=np.floor_divide,
        false=np.zeros(lanes, dtype=bool),
    )


POOL_FIXED = (
    "the KV block pool: every request fresh (c0 = 0), admitted at the local hit c0 an "
    "identical request's prefill left in the least pool or at a KV connector's hit x = c0 "
    "(SPEC P8's scope, KV2 rules 2d and 2e), no junction or encoder items, no internal "
    "checkpoints, no tail copies; max_model_len the instance's longest prompt + 1; watermark "
    "0; FCFS",
    "a KV connector offers its hit x, whole, at every admission (loaded synchronously with the "
    "first chunk; never a hit partly local and partly external, no asynchronous load); a "
    "request waiting at c = x is taken as not yet admitted (one preempted at exactly x after "
    "the connector found nothing is offered x or 0, not its local hits) (SPEC KV2 rule 5g)",
    "a preempted request keeps its c; each time the waiting loop reaches it, it resumes at "
    "any hit on its resume grid (B with fine hits, else B_s) up to min(c, T - 1), or at 0 "
    "(its blocks evicted), whether or not the release's lookup would find that one (SPEC KV2 "
    "rule 5e)",
    "every request arrives at the first step and leaves at its prefill's end (max_tokens 1)",
)
"""What the scheduler step fixes beyond each request's step when its requests share a KV block
pool (``--pool``), in place of :data:`STEP_FIXED`."""


def fixed_inputs(policy: Policy, unpooled: bool = True, pooled: bool = False) -> list[str]:
    """Every input the scheduler step over ``policy`` fixes, for its reports: the step without
    a pool (``unpooled``), the step whose requests share a KV block pool (``pooled``), or both,
    each step's own named as its."""
    if unpooled and pooled:
        return [
            *policy.fixed,
            *(f"without a pool: {item}" for item in STEP_FIXED),
            *(f"in a pool: {item}" for item in POOL_FIXED),
        ]
    return [*policy.fixed, *(POOL_FIXED if pooled else STEP_FIXED)]


def per_step_theta(policy: Policy) -> bool:
    """Whether ``policy``'s cap is the per-step threshold of C8-C9
    (:func:`~chunkproof.model.stages.cap_lone_request`: the one-request form, theta_eff 0)."""
    cap = policy.stage("cap")
    return cap is not None and cap.source is None and cap.function is cap_lone_request


def threshold_rule(policy: Policy, positive: bool, adaptive: bool = False) -> str | None:
    """How the step caps a request by the threshold, when it is C8-C9's per-step theta_eff and
    some instance has a threshold > 0 (``positive``): the reports name it, with the adaptive
    floor on or fixed off; that the floor has nothing to floor when it is on and no instance
    has a threshold > 0; ``None`` otherwise."""
    if adaptive and not positive:
        return "adaptive floor on, but no threshold > 0 in the range: nothing to floor"
    if not (positive and per_step_theta(policy)):
        return None
    rule = "threshold per step: theta from 2 eligible requests, else off; adaptive floor "
    if adaptive:
        return rule + "on (at least M // eligible, every eligible count the environment can set)"
    return rule + "off"


def check_pool(
    policy: Policy,
    instances: Sequence[tuple[Config, ...]],
    blocks: Sequence[int],
    adaptive: bool,
) -> None:
    """Instances the pool model covers (SPEC KV2 rule 5): one pool size per instance, no
    adaptive floor, every request inside rule 5's scope
    (:func:`~chunkproof.spec.kv_blocks.outside_shared_pool`) and a pool the release's start-up
    check accepts for the instance's ``max_model_len`` (:func:`least_pool`)."""
    if len(blocks) != len(instances):
        raise ConfigError("scheduler step: one KV pool size per instance")
    if adaptive:
        raise ConfigError("--pool: the adaptive floor with a KV block pool is not modelled")
    rules = pool_rules(policy.kv_release)
    for group, size in zip(instances, blocks, strict=True):
        for cfg in group:
            reason = outside_shared_pool(rules, cfg)
            if reason is not None:
                raise ConfigError(f"--pool: the shared pool model does not cover {reason}")
        if size < least_pool(policy, group):
            raise ConfigError(
                f"--pool: {size} blocks is below the {least_pool(policy, group)} that "
                f"{rules.releases}'s start-up check accepts for max_model_len "
                f"{pool_model_len(group)}"
            )


def least_pool(policy: Policy, group: Sequence[Config]) -> int:
    """The fewest KV blocks the release's start-up check accepts for the engine that runs
    ``group`` (SPEC KV2 rule 4 at its ``max_model_len``, :func:`pool_model_len`), and at
    least 2: the null block and one block to hand out."""
    longest = max(group, key=lambda cfg: cfg.prompt)
    return max(pool_rules(policy.kv_release).startup_pool(longest), 2)


def check_adaptive(policy: Policy) -> None:
    """The adaptive floor (``long_prefill_token_threshold_adaptive``, 0.31+) needs the per-step
    threshold it floors (:func:`per_step_theta`)."""
    if not per_step_theta(policy):
        raise ConfigError(
            "--adaptive-threshold: the adaptive floor is on the per-step threshold of 0.31 on; "
            f"{policy.name} has none"
        )


def _check_instance(policy: Policy, group: tuple[Config, ...]) -> None:
    """An instance the model covers: its requests share the engine's settings, and two with
    encoder items a compute budget of at least the cache (:func:`encoder_exact`); under C8-C9
    a threshold needs the release's per-step cap (a cap the model does not know could read the
    eligible requests in any way)."""
    if len({engine_settings(cfg) for cfg in group}) != 1:
        raise ConfigError("scheduler step: the requests of an instance must share the engine")
    if not encoder_exact(group):
        raise ConfigError(
            "scheduler step: two requests with encoder items need an encoder compute budget "
            "of at least the encoder cache (vLLM's own: b0 = C); below it the budget the "
            "requests share decides, which the model does not have"
        )
    if group[0].threshold > 0:
        check_threshold_cap(policy)


def check_encoder_call(policy: Policy, with_items: int) -> None:
    """Refuse requests that share the encoder cache (two or more with items, ``with_items``)
    under an encoder stage whose call is none of the releases' (:func:`~chunkproof.model.
    encoder_items.call_rules` None): which items its call encodes, which the others' calls
    see, is unknown."""
    if with_items > 1 and call_rules(policy.stage("encoder")) is None:
        raise ConfigError(
            f"scheduler step: {policy.name}'s encoder stage is none of the releases', so "
            "which items its call encodes, which requests that share the encoder cache need, "
            "is unknown"
        )


def step_loop_rules(policy: Policy) -> LoopRules:
    """The loop rules the step runs for ``policy`` (:meth:`~chunkproof.model.policy.Policy.
    rules`: read from its ``schedule()``, or its C-variant's). Refused: rules that are unknown,
    and a zero answered by ``stay`` (``continue`` with the request neither taken out of the
    queue nor passed by the loop's counter), where the loop finds the same request again and
    ``schedule()`` never returns."""
    rules = policy.rules()
    if rules is None:
        raise ConfigError(
            f"scheduler step: {policy.name} has no loop rules (its composition "
            f"{policy.composition} is none of the releases' C1-C9)"
        )
    if rules.unknown:
        raise ConfigError(f"scheduler step: the schedule() of {policy.name}: {rules.unknown}")
    stays = [
        role
        for role, action in (
            ("running", rules.running),
            ("waiting", rules.split),
            ("waiting", rules.later),
        )
        if action == "stay"
    ]
    if stays:
        raise ConfigError(
            f"scheduler step: the {stays[0]} loop of {policy.name}'s schedule() answers a zero "
            "with a continue that neither takes the request out of its queue nor moves past "
            "it: the loop finds the same request again and schedule() never returns"
        )
    return rules


def check_threshold_cap(policy: Policy) -> None:
    """Under C8-C9, or a ``schedule()`` of no C-variant, a threshold > 0 needs the release's
    threshold cap (static or per step): a cap of the policy's own code could read the
    eligible requests in any way."""
    cap = policy.stage("cap")
    known = cap is not None and cap.function in (cap_lone_request, cap_static_threshold)
    variant = variant_number(policy.composition)
    if not known and (variant is None or variant >= 8):
        raise ConfigError(
            "scheduler step: a threshold under C8-C9 (or a schedule() of no C-variant) needs "
            "the release's threshold cap; this policy's cap is its own code"
        )


def describe_state(batch: SchedulerBatch, row: np.ndarray) -> str:
    """A row as the two lists and the finished requests, each request as T and c, and e when
    it carries encoder items and has not finished; a decoding request in the running list,
    marked so."""
    lists: dict[int, list[str]] = {phase: [] for phase in (RUNNING, WAITING, FINISHED)}
    group = batch.instances[int(row[0])]
    for p in range(batch.k):
        label, phase, c, e, _ = (int(v) for v in row[1 + FIELDS * p : 1 + FIELDS * (p + 1)])
        encoded = f", e={e}" if group[label].items and phase != FINISHED else ""
        decoding = ", decoding" if phase == DECODING else ""
        where = RUNNING if phase == DECODING else phase
        lists[where].append(f"#{label}(T={group[label].tokens}, c={c}{encoded}{decoding})")
    return "; ".join(f"{PHASE_NAMES[ph]} [{', '.join(v)}]" for ph, v in lists.items())
