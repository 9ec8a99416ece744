"""The block pool of a lone prefill (SPEC KV2) on hand-computed cases; the fidelity tests
(tests/test_kv_alloc_fidelity.py) compare the same rules with each release's code."""

from __future__ import annotations

import pytest

from chunkproof.model.config import Config
from chunkproof.spec.kv_blocks import lone_allocations, pool_rules

LATEST = pool_rules("0.33.0")

CFG = Config(block=8, split_block=4, hash_block=4, prompt=32, max_sched=64, lookahead=1)
"""B = 8, G = 4, k = L = 1 (S = 1): the attention group reserves one lookahead slot."""


def test_a_prefill_in_mamba_blocks_holds_two_state_blocks_at_most() -> None:
    """Ends 8, 16, 32 with k = 1 draft token: attention holds cdiv(e + 1, 4) blocks (rule 1); Mamba
    S + 1 = 2 after the first chunk and one more state block at each later chunk that enters
    a new Mamba block, the one of two chunks back freed first (rule 2)."""
    calls = lone_allocations(CFG, [8, 8, 16], 64, 1 << 20, LATEST)
    assert [c.held for c in calls] == [(3, 2), (5, 3), (9, 3)]
    assert [c.asked for c in calls] == [5, 3, 5]
    assert all(c.granted for c in calls)
    assert calls[-1].free == 64 - 1 - 9 - 3


def test_the_pool_refuses_a_chunk_beyond_its_free_blocks() -> None:
    """Rule 3: with 9 blocks (8 free beside the null block) the second chunk asks 3 of the 3
    left after the first chunk's 5 and is granted; the third asks 5 of the 1 left (after the
    old state block is freed) and is refused, the request holding what it held."""
    calls = lone_allocations(CFG, [8, 8, 16], 9, 1 << 20, LATEST)
    assert [c.granted for c in calls] == [True, True, False]
    assert calls[-1].held == (5, 2) and calls[-1].free == 1


def test_max_model_len_caps_the_lookahead_slots() -> None:
    """Rule 1: the slot past the prompt is not reserved when the prompt is max_model_len."""
    calls = lone_allocations(CFG, [32], 64, 32, LATEST)
    assert calls[0].held == (8, 2)


@pytest.mark.parametrize(
    ("minor", "minimum"),
    [(15, 1), (17, 1), (23, 11), (28, 11), (29, 12), (34, 12)],
)
def test_the_startup_minimum_by_release(minor: int, minimum: int) -> None:
    """Rule 4 for max_model_len 32: 8 attention blocks + 2 + S Mamba blocks; 0.29 on add the
    null block, 0.23-0.28 do not, 0.15-0.22 accept any pool."""
    assert pool_rules(f"0.{minor}.0").startup_pool(CFG) == minimum


def test_at_the_0_28_minimum_a_longest_request_is_refused_its_last_chunk() -> None:
    """The finding rule 4 states: 0.28's minimum (11 blocks, 10 free) serves ends 8, 16, 24
    but not 32, which needs 8 attention + 3 Mamba blocks; 0.29's (12) serves it."""
    chunks = [8, 8, 8, 8]
    v28, v29 = pool_rules("0.28.0"), pool_rules("0.29.0")
    at_028 = lone_allocations(CFG, chunks, v28.startup_pool(CFG), 32, v28)
    at_029 = lone_allocations(CFG, chunks, v29.startup_pool(CFG), 32, v29)
    assert [c.granted for c in at_028] == [True, True, True, False]
    assert all(c.granted for c in at_029) and len(at_029) == 4
