"""Soundness: the explorer's verdicts equal a plain enumeration with the concrete policy, on
random configurations over every input of SPEC S1, encoder items included (hypothesis).

The enumeration follows every offered budget from every reachable state with the concrete step
(:func:`chunkproof.model.step.step`: no vectorised form, no batching, no breadth-first levels)
and checks each property by its definition (SPEC P0-P7). The same is done for real release
code (``vllm==0.33.0``, read from its source), so the explorer is also checked against an
independent run of the real methods.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from chunkproof.checker.cli.defaults import small_space
from chunkproof.checker.engines.explorer import NO_WITNESS, VisitedKeys, explore_batch
from chunkproof.checker.engines.traces import stage_values
from chunkproof.model.builtin import builtin_policies, get_builtin
from chunkproof.model.config import Config, Items
from chunkproof.model.errors import ConfigError
from chunkproof.model.policy import Policy
from chunkproof.model.step import step
from chunkproof.model.trajectory import run
from chunkproof.source.loading import resolve_policy
from chunkproof.spec import properties as props
from chunkproof.spec.request import (
    Batch,
    RequestModel,
    batch_key,
    budget_bounds,
    encoder_forced,
    make_batch,
)
from chunkproof.spec.space import Space

STEP = ("P0", "P1", "P3", "P4", "P5", "P6")


@dataclass
class Truth:
    violated: dict[str, bool]
    progress_budget: int | None
    stuck_budgets: tuple[int, ...]


def brute_force(policy: Policy, cfg: Config, window: str) -> Truth:
    """Every reachable state and offered budget, one concrete step at a time."""
    low, high = budget_bounds(cfg, None)
    big_e = cfg.prefill_end
    reach, stack = set(), [cfg.start]
    violated = dict.fromkeys(STEP, False)
    zero: list[int] = []
    while stack:
        c = stack.pop()
        if c in reach or c >= big_e:
            continue
        reach.add(c)
        for b in range(low, high + 1):
            s = step(policy, cfg, c, b)
            if s.unsafe is not None:
                violated["P0"] = True
                continue
            if s.chunk == 0:
                zero.append(b)
                violated["P1"] |= b == high
                continue
            stack.append(s.end)
            edge = props.edge_properties(policy)
            violated["P3"] |= edge["P3"](cfg, c, s.end)
            forced = encoder_forced(s.order, stage_values(s))  # SPEC P4 exemption (b)
            violated["P4"] |= edge["P4"](cfg, c, s.end) and not forced
            violated["P5"] |= props.WINDOW_PROPERTIES[window](cfg, c, s.n, s.end)
            violated["P6"] |= edge["P6"](cfg, c, s.end)
    stuck = tuple(b for b in range(low, high + 1) if not run(policy, cfg, [b]).finished)
    progress = None if violated["P1"] else max(max(zero, default=0) + 1, low)
    return Truth(violated, progress, stuck)


@st.composite
def configs(draw: st.DrawFn) -> Config | None:
    """Small configurations over every input (some are not configurations: None)."""
    block = draw(st.sampled_from([2, 3, 4, 6, 8]))
    split = draw(st.sampled_from([block, block, max(block // 2, 1), 2 * block]))
    divisors = [h for h in range(1, split + 1) if split % h == 0 and block % h == 0]
    prompt = draw(st.integers(1, 14))
    tokens = prompt + draw(st.sampled_from([0, 0, 1, 2]))
    lookahead = draw(st.integers(0, 3))
    start = draw(st.integers(0, max(prompt, tokens - 1) - 1))
    checkpoints = draw(st.booleans())
    first = draw(st.integers(0, prompt))
    second = first + draw(st.integers(1, 5)) + draw(st.integers(0, 3))
    items = draw(st.sampled_from([(), (), ((first, 1 + prompt // 3),), ((first, 2), (second, 3))]))
    try:
        return Config(
            block=block,
            prompt=prompt,
            tokens=tokens,
            max_sched=draw(st.integers(1, 9)),
            lookahead=lookahead,
            threshold=draw(st.sampled_from([0, 0, 2, 5])),
            split_block=split,
            hash_block=draw(st.sampled_from(divisors)),
            drop=draw(st.booleans()),
            hash_lookahead=draw(st.sampled_from([0, 0, lookahead])),
            start=start,
            external=draw(st.sampled_from([0, 0, start])),
            junction=draw(st.sampled_from([0, 0, min(start + 2, tokens)])),
            exact_junction=draw(st.booleans()),
            checkpoints=checkpoints,
            checkpoint_alignment=draw(st.sampled_from([1, 2])) if checkpoints else 0,
            uncached_prefix=draw(st.sampled_from([0, 0, 4])),
            retention=draw(st.sampled_from([-1, -1, 0, 2 * block])),
            items=Items(items),
        )
    except ConfigError:
        return None


def _check(policy: Policy, cfg: Config, window: str) -> None:
    model = RequestModel(policy, Space(()), window)
    batch = make_batch([cfg], None)
    explored = explore_batch(model, batch)
    figures = model.figures(batch, explored.states, explored.steps)
    truth = brute_force(policy, cfg, window)
    for pid in STEP:
        found = bool(explored.witness[pid][0] != NO_WITNESS)
        assert found == truth.violated[pid], (pid, cfg)
    if not truth.violated["P1"]:
        assert int(figures.progress_budget[0]) == truth.progress_budget, cfg
    stuck = int(figures.stuck_runs[0])
    assert stuck == len(truth.stuck_budgets), cfg
    if truth.stuck_budgets:
        assert int(figures.first_stuck_budget[0]) == truth.stuck_budgets[0], cfg


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    cfg=configs(),
    policy=st.sampled_from(builtin_policies()),
    window=st.sampled_from(["relaxed", "strict"]),
)
def test_explorer_equals_brute_force(cfg: Config | None, policy: Policy, window: str) -> None:
    assume(cfg is not None)
    assert cfg is not None
    _check(policy, cfg, window)


@pytest.mark.fidelity
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(cfg=configs())
def test_explorer_equals_brute_force_on_real_0_33_0_code(cfg: Config | None) -> None:
    """The real methods of the newest release, read from its source and interpreted, against
    the same plain enumeration (fetches the release once into the cache)."""
    assume(cfg is not None)
    assert cfg is not None
    _check(resolve_policy("vllm==0.33.0"), cfg, "strict")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.integers(0, 1 << 27) | st.integers(0, 300), min_size=0, max_size=20),
        min_size=1,
        max_size=6,
    )
)
def test_the_visited_set_equals_a_python_set(levels: list[list[int]]) -> None:
    """The explorer's visited keys (a bitmap below DENSE_KEYS, a sorted array once a key is
    beyond it) answer membership as a plain set does, level by level."""
    first = np.unique(np.array(levels[0], dtype=np.int64))
    visited, seen = VisitedKeys(first), set(first.tolist())
    for level in levels[1:]:
        keys = np.unique(np.array(level, dtype=np.int64))
        assert visited.contains(keys).tolist() == [k in seen for k in keys.tolist()]
        fresh = keys[~visited.contains(keys)]
        visited.add(fresh)
        seen |= set(fresh.tolist())
    probe = np.arange(0, 400, dtype=np.int64)
    assert visited.contains(probe).tolist() == [k in seen for k in probe.tolist()]


@pytest.mark.parametrize("budget", [None, (2, 5)])
def test_batches_hold_their_configurations(budget: tuple[int, int] | None) -> None:
    """The explorer's batches (built once per family of configurations that differ in M
    only) hold, lane by lane, what their configurations say: every field, the encoder items,
    the budget bounds, c0 and E; and together every offered configuration of the space once
    (the default grids: encoder items and every further input included)."""
    policy = get_builtin("vllm-latest")
    space = Space(small_space(policy).grids, budget)
    model = RequestModel(policy, space)

    def lanes(value: object, size: int) -> list[int]:
        values: list[int] = np.broadcast_to(np.asarray(value), (size,)).tolist()
        return values

    def own(cfg: Config, name: str) -> int:
        if name == "speculative":
            return int(cfg.lookahead >= 1)
        return int(getattr(cfg, name))

    seen = []
    for batch in model.batches():
        configs = list(batch.configs)
        size = len(configs)
        for name, value in batch.fields.items():
            assert lanes(value, size) == [own(cfg, name) for cfg in configs], name
        for i, pair in enumerate(batch.items):
            for part, value in enumerate(pair):
                assert lanes(value, size) == [cfg.items[i][part] for cfg in configs]
        bounds = [budget_bounds(cfg, budget) for cfg in configs]
        assert batch.low.tolist() == [low for low, _ in bounds]
        assert batch.high.tolist() == [high for _, high in bounds]
        assert batch.start.tolist() == [cfg.start for cfg in configs]
        assert batch.end.tolist() == [cfg.prefill_end for cfg in configs]
        seen += configs
    every = list(space.configs())
    offered = [c for c in every if budget_bounds(c, budget)[0] <= budget_bounds(c, budget)[1]]
    assert sorted(map(repr, seen)) == sorted(map(repr, offered))
    assert model.unoffered == len(every) - len(offered)
    assert budget is None or model.unoffered > 0


class Searched(RequestModel):
    """The model with no listed states: the explorer searches level by level."""

    def state_space(self, batch: Batch) -> None:
        return None


class Listed(RequestModel):
    """The model with every state listed, whatever the batch's size."""

    def state_space(self, batch: Batch) -> np.ndarray:
        span = batch.end - batch.start
        inst = np.repeat(np.arange(len(batch)), span)
        c = np.concatenate([np.arange(s, e) for s, e in zip(batch.start, batch.end, strict=True)])
        return np.stack([inst, c], axis=1)[::-1]  # in no particular order


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    found=st.lists(configs(), min_size=1, max_size=6),
    policy=st.sampled_from(builtin_policies()),
    budget=st.sampled_from([None, None, (2, 5)]),
)
def test_listing_every_state_gives_the_search_s_result(
    found: list[Config | None], policy: Policy, budget: tuple[int, int] | None
) -> None:
    """Next evaluated once on every listed state yields the level-by-level search's result,
    field for field: the reachable states in the same order, their parents, actions and
    depths, every transition in order with its record, every witness and count."""
    cfgs = [cfg for cfg in found if cfg is not None]
    assume(cfgs)
    same = [cfg for cfg in cfgs if batch_key(cfg) == batch_key(cfgs[0])]
    assume(all(budget_bounds(cfg, budget)[0] <= budget_bounds(cfg, budget)[1] for cfg in same))
    batch = make_batch(same, budget)
    space = Space((), budget)
    searched = explore_batch(Searched(policy, space, "strict", STEP), batch)
    listed = explore_batch(Listed(policy, space, "strict", STEP), batch)
    for name in ("states", "parent", "via", "depth"):
        assert getattr(listed, name).tolist() == getattr(searched, name).tolist(), name
    for name in ("source", "action", "follow", "weight"):
        assert getattr(listed.steps, name).tolist() == getattr(searched.steps, name).tolist()
    assert {k: v.tolist() for k, v in listed.steps.bad.items()} == {
        k: v.tolist() for k, v in searched.steps.bad.items()
    }
    safe = ~searched.steps.bad["P0"]  # a step that breaks P0 leaves its values undefined
    assert listed.steps.target[safe].tolist() == searched.steps.target[safe].tolist()
    for name, values in searched.steps.record.items():
        assert listed.steps.record[name][safe].tolist() == values[safe].tolist(), name
    for pid in STEP:
        assert listed.witness[pid].tolist() == searched.witness[pid].tolist(), pid
        assert listed.violating[pid].tolist() == searched.violating[pid].tolist(), pid


def test_a_long_prefill_under_small_budgets_lists_its_states() -> None:
    """The model lists a batch's states when its table is small beside the levels a search
    would take (a 4,417-token prefill under budgets 1-3), not when the table is large."""
    policy = get_builtin("vllm-0.33")
    long = Config(block=4416, prompt=4417, tokens=4417, max_sched=3, lookahead=3)
    model = RequestModel(policy, Space(()))
    listed = model.state_space(make_batch([long], None))
    assert listed is not None and listed[:, 1].tolist() == list(range(4417))
    wide = long.replace(max_sched=4416)
    assert model.state_space(make_batch([wide], None)) is None
