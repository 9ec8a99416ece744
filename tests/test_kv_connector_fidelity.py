"""Asynchronous KV connector loads on every release's own ``schedule()`` and split (SPEC KV3).

A KV connector loads a request's external hit x either before its first chunk (synchronous:
the waiting loop passes the local hit l and x to the split, with ``request.num_computed_tokens``
0) or in the background (``load_kv_async``). An asynchronous load first parks the request:

* 0.23-0.34: the waiting loop's first pass schedules no chunk (the split sits behind ``and
  not load_kv_async`` in 0.23-0.27, in the ``else`` of ``if load_kv_async:`` from 0.28);
  once the load is done the request is admitted again through the
  other branch of ``if request.num_computed_tokens == 0:``, with ``num_computed_tokens`` =
  c0 = l + x and neither hit passed (both 0). The chunk there is the synchronous admission's,
  for every budget: every stage reads only c0 (checked here on each release's own statements
  and methods, interpreted from the cached tree).
* 0.15-0.22: the split runs on the first pass whatever ``load_kv_async`` is, with x, and its
  ``assert num_external_computed_tokens == 0`` fails as a synchronous load's does: the same P0
  breach at the same admission.

So the one-request model's synchronous external start judges an asynchronous load's chunks
too. The tests read cached release trees, so they carry the ``fidelity`` marker.
"""

from __future__ import annotations

import ast
import random
from typing import Any

import pytest

from chunkproof.model.config import Config
from chunkproof.model.errors import ConfigError
from chunkproof.model.policy import Policy
from chunkproof.model.step import CRASHES, passed_on, step_view
from chunkproof.source.loading import resolve_policy
from chunkproof.source.policy import source_composition

pytestmark = pytest.mark.fidelity

PARKING = [f"0.{minor}.0" for minor in range(23, 35)]
"""Releases whose waiting loop skips the split while an asynchronous load runs."""

SPLIT_ON_LOAD = [f"0.{minor}.0" for minor in range(15, 23)]
"""Releases whose split runs on the load's first pass and asserts x = 0."""

CASES = 60


def admission_chunk(policy: Policy, view: Any, c: int, budget: int) -> Any:
    """The chunk the policy's stages give at ``view`` (the waiting loop at c = c0), or
    ``"crash"`` where one raises (SPEC P0)."""
    n = budget
    for stage in policy.stages:
        try:
            n = passed_on(stage.function(view, c, n))
        except CRASHES:
            return "crash"
    return n


def admission_view(cfg: Config) -> Any:
    """The view of ``cfg``'s synchronous admission (the waiting loop at c = c0 passes its
    local hit and x), its fields computed natively."""
    return step_view(cfg, cfg.start, lambda function, args: function(*args))


def loaded_view(cfg: Config) -> Any:
    """The view of the admission after an asynchronous load of ``cfg``'s hit: the request
    has computed c0 tokens and the waiting loop passes no hit."""
    view = admission_view(cfg)
    view.computed, view.local, view.external = cfg.start, 0, 0
    return view


def drawn_configs(seed: int) -> list[Config]:
    """Requests admitted at an external hit (all of c0, or part of it beside a local hit),
    over the flags the one-request model ranges over."""
    rng = random.Random(seed)
    configs: list[Config] = []
    while len(configs) < CASES:
        block = rng.choice([2, 4, 8, 16])
        prompt = rng.randint(2, 5 * block)
        start = rng.randint(1, prompt - 1)
        external = start if rng.random() < 0.5 else rng.randint(1, start)
        try:
            configs.append(
                Config(
                    block=block,
                    lookahead=rng.randint(0, 3),
                    drop=rng.random() < 0.5,
                    prompt=prompt,
                    tokens=prompt,
                    start=start,
                    external=external,
                    max_sched=rng.randint(1, prompt + 2),
                )
            )
        except ConfigError:
            continue
    return configs


def split_skipped_while_loading(version: str) -> bool:
    """Whether the guards of the waiting loop's split in the release's ``schedule()`` keep it
    from running while ``load_kv_async`` holds: the ``else`` of ``if load_kv_async:``, or an
    ``if ... and not load_kv_async:``."""
    composition = source_composition(f"vllm=={version}")
    assert composition is not None
    (split,) = [e for e in composition.waiting.events if e.kind == "split"]
    for test, holds in split.guards:
        if not holds and _is_loading(test):
            return True
        terms = (
            test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        )
        if holds and any(
            isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not) and _is_loading(t.operand)
            for t in terms
        ):
            return True
    return False


def _is_loading(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "load_kv_async"


@pytest.mark.parametrize("version", PARKING)
def test_the_admission_after_an_asynchronous_load_gets_the_synchronous_chunk(
    version: str,
) -> None:
    policy = resolve_policy(f"vllm=={version}")
    assert split_skipped_while_loading(version)
    compared = moved = 0
    for cfg in drawn_configs(seed=int(version.split(".")[1])):
        synchronous = admission_view(cfg)
        loaded = loaded_view(cfg)
        forgotten = loaded_view(cfg)
        forgotten.computed = 0  # the control: an admission that lost the hit
        for budget in range(1, cfg.max_sched + 1):
            chunk = admission_chunk(policy, synchronous, cfg.start, budget)
            assert admission_chunk(policy, loaded, cfg.start, budget) == chunk, (
                f"{version}: {cfg} at budget {budget}"
            )
            moved += admission_chunk(policy, forgotten, cfg.start, budget) != chunk
            compared += 1
    assert moved > compared // 4, "the comparison cannot tell c0 = 0 from the hit"


@pytest.mark.parametrize("version", SPLIT_ON_LOAD)
def test_before_0_23_a_load_of_either_kind_crashes_the_split(version: str) -> None:
    policy = resolve_policy(f"vllm=={version}")
    assert not split_skipped_while_loading(version)
    for cfg in drawn_configs(seed=int(version.split(".")[1]))[:20]:
        synchronous = admission_view(cfg)
        assert admission_chunk(policy, synchronous, cfg.start, cfg.max_sched) == "crash"
