"""SPEC S1b: what each release accepts at start-up, known answers read from the releases'
``kv_cache_coordinator.py`` (``_validate_prefix_cache_retention_interval`` and the
coordinator's ``enable_partial_hash_hits``)."""

from __future__ import annotations

from typing import Any

import pytest

from chunkproof.model.builtin import get_builtin
from chunkproof.model.config import Config

FINE: dict[str, Any] = {"block": 8, "hash_block": 4, "prompt": 21, "max_sched": 16}
"""H = 4 < B = 8: a configuration whose coordinator turns partial hash hits on."""

FORCED_HITS = [f"vllm-0.{minor}" for minor in range(26, 34)]
"""The releases whose partial hash hits follow H < B (0.26-0.33)."""


@pytest.mark.parametrize("name", FORCED_HITS)
def test_partial_hits_off_below_the_mamba_block_is_refused(name: str) -> None:
    """H < B with F off is no configuration of 0.26-0.33: the coordinator turns partial hash
    hits on from the configuration alone, with no setting to turn them off."""
    assert get_builtin(name).accepts(Config(**FINE, partial_hits=False)) is not None


@pytest.mark.parametrize("name", FORCED_HITS)
def test_partial_hits_on_below_the_mamba_block_is_accepted(name: str) -> None:
    assert get_builtin(name).accepts(Config(**FINE, partial_hits=True)) is None


@pytest.mark.parametrize("name", FORCED_HITS)
def test_partial_hits_at_the_mamba_block_are_refused(name: str) -> None:
    """H = B: no Mamba group has a block above the hash block, so F is off."""
    cfg = Config(block=8, prompt=21, max_sched=16, partial_hits=True)
    assert get_builtin(name).accepts(cfg) is not None
    assert get_builtin(name).accepts(cfg.replace(partial_hits=False)) is None


@pytest.mark.parametrize("name", ["vllm-0.24", "vllm-0.25"])
def test_releases_before_0_26_refuse_partial_hits(name: str) -> None:
    assert get_builtin(name).accepts(Config(**FINE, partial_hits=True)) is not None
    assert get_builtin(name).accepts(Config(**FINE, partial_hits=False)) is None


RETAINING = [f"vllm-0.{minor}" for minor in range(24, 34)]
"""The releases that accept VLLM_PREFIX_CACHE_RETENTION_INTERVAL (0.24-0.28) or
``prefix_cache_retention_interval`` (0.29+) for a model with a Mamba group."""

GRID: dict[str, Any] = {
    "block": 8,
    "split_block": 16,
    "hash_block": 8,
    "prompt": 40,
    "max_sched": 16,
}
"""B_s = lcm(B, G) = 16 with B = 8 = H (no partial hits in any release)."""


@pytest.mark.parametrize("name", RETAINING)
@pytest.mark.parametrize("retention", [0, 16, 48])
def test_retention_on_the_scheduler_grid_is_accepted(name: str, retention: int) -> None:
    assert get_builtin(name).accepts(Config(**GRID, retention=retention)) is None


@pytest.mark.parametrize("name", RETAINING)
@pytest.mark.parametrize("retention", [8, 24, 5])
def test_retention_off_the_scheduler_grid_is_refused(name: str, retention: int) -> None:
    """R must be a multiple of B_s = 16, not merely of B = 8."""
    assert get_builtin(name).accepts(Config(**GRID, retention=retention)) is not None


def test_vllm_0_28_retention_known_answers() -> None:
    """0.28.0 reads R from the environment: R = 0 and R = B_s start, R = B_s + B/2 does not."""
    policy = get_builtin("vllm-0.28")
    base = Config(block=8, prompt=40, max_sched=16)
    assert policy.accepts(base.replace(retention=0)) is None
    assert policy.accepts(base.replace(retention=base.sched_block)) is None
    assert policy.accepts(base.replace(retention=base.sched_block + 4)) is not None


@pytest.mark.parametrize("name", ["vllm-0.15", "vllm-0.17", "vllm-0.23"])
@pytest.mark.parametrize("retention", [0, 8])
def test_releases_before_0_24_refuse_retention(name: str, retention: int) -> None:
    """0.15 and 0.17 have no retention interval; 0.23's validator accepts one only with a
    sliding-window group, which an attention + Mamba model has not."""
    policy = get_builtin(name)
    assert policy.accepts(Config(block=8, prompt=40, max_sched=16, retention=retention))
    assert policy.accepts(Config(block=8, prompt=40, max_sched=16)) is None
