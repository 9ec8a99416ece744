"""Fidelity of where an identical resend lands after a real prefill (SPEC KV1, P3, P6).

``tests/test_kv_lookup_fidelity.py`` gives the release's lookup the entries the model says each
group holds. Here nothing is given: a fresh request computes its prompt in the chunks the
release's own split gives it under random budgets (or one token at a time), through the
release's ``allocate_slots`` over a pool that keeps what the cache code keys
(:func:`chunkproof.source.kv_alloc_run.real_prefill`; release code is trusted in tests), and an
identical request is looked up. The release's hit must be the slot oracle's resend hit for
those chunk ends under the release's R* (which takes in what the attention group caches), and
the lookup's R* (every hash-block end keyed) must miss some. And the Mamba claims the release's
cache keys after a real prefill are the oracle's live claims (SPEC P3: rule 5 under the
release's retention mask).
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from test_kv_alloc_fidelity import scheduled_chunks, with_checkpoints
from test_kv_lookup_fidelity import RELEASES, draw_config, minor_of

from chunkproof.model.builtin import policy_for_release
from chunkproof.model.config import Config
from chunkproof.source.kv_alloc_run import (
    held_after_prefill,
    keyed_after_prefill,
    resend_after_prefill,
)
from chunkproof.source.kv_run import MAMBA_GROUP
from chunkproof.source.releases import release_root
from chunkproof.spec.slots import eagle_drop, kv_rules, oracle

pytestmark = pytest.mark.fidelity

SEED = 20_261_206
CASES = 300


def drawn_ends(version: str, rng: random.Random) -> tuple[Config, list[int]]:
    """A configuration the release accepts (from 0.29, half of those without partial hits with
    internal prefill checkpoints) and the chunk ends of one prefill of it: the release's own
    chunks under random budgets, or (one in four) one token at a time, which leaves a state at
    every position the cache code keys."""
    policy = policy_for_release(version)
    while True:
        cfg = with_checkpoints(draw_config(rng, version), rng, minor_of(version))
        cfg = cfg.replace(max_sched=rng.randint(1, 24))
        if policy.accepts(cfg) is not None:
            continue
        if rng.random() < 0.25:
            return cfg, list(range(1, cfg.prompt + 1))
        chunks = scheduled_chunks(policy, cfg, rng)
        if chunks:
            ends, total = [], 0
            for chunk in chunks:
                total += chunk
                ends.append(total)
            return cfg, ends


def real_and_model(version: str, cfg: Config, ends: list[int]) -> tuple[int, int]:
    """The release's resend hit after the prefill ending at ``ends``, and the oracle's."""
    real = resend_after_prefill(
        release_root(version), cfg, eagle_drop(cfg), ends, 4 * cfg.prompt + 64
    )
    return real, oracle(cfg, ends, rules=kv_rules(version)).resend_hit


@pytest.mark.parametrize("version", RELEASES)
def test_resend_after_a_real_prefill_is_the_oracles(version: str) -> None:
    """The release's hit is the oracle's (under the release's R*, ``KvRules.resend``) on
    every drawn prefill."""
    rng = random.Random(f"{SEED}-inside-{version}")
    wrong = []
    for _ in range(CASES):
        cfg, ends = drawn_ends(version, rng)
        real, model = real_and_model(version, cfg, ends)
        if real != model:
            wrong.append(f"{cfg.describe()} ends={ends}: real {real}, model {model}")
    assert not wrong, f"{len(wrong)} of {CASES}: " + "; ".join(wrong[:6])


LANDING_RELEASES = RELEASES[RELEASES.index("0.26.0") :]
"""The releases where R* after a real prefill is below the lookup's somewhere (under the drop
with fine hits from 0.26, with L >= 2 too from 0.32)."""


@pytest.mark.parametrize("version", LANDING_RELEASES)
def test_the_lookups_r_star_misses_some_real_resend(version: str) -> None:
    """With the lookup's R* (every hash-block end keyed, ``KvRules.lookup``) in place of the
    release's R* after a real prefill, the oracle's hit is above the release's on some drawn
    prefill under the drop: the attention group's entries are what ``KvRules.resend`` takes
    in."""
    rng = random.Random(f"{SEED}-outside-{version}")
    rules = kv_rules(version)
    dense = dataclasses.replace(rules, resend=rules.lookup)
    for _ in range(40 * CASES):
        cfg, ends = drawn_ends(version, rng)
        if not eagle_drop(cfg):
            continue
        real = real_and_model(version, cfg, ends)[0]
        model = oracle(cfg, ends, rules=dense).resend_hit
        if real != model:
            assert real < model, f"{cfg.describe()} ends={ends}: real {real}, model {model}"
            return
    pytest.fail(f"no prefill of {version} lands below the lookup's R*")


@pytest.mark.parametrize("version", RELEASES)
def test_a_real_prefill_keys_the_oracles_live_claims(version: str) -> None:
    """The Mamba claims the release keys after a real prefill are the oracle's live claims,
    and each one's block holds the state the oracle says (SPEC P3, KV1): a sound claim its own
    state, a poisoned one the state of the chunk's start, a spare speculative block none
    (``held_after_prefill``: the tree's block tables and keys, the kernel's write rule). The
    crossing claim is keyed under the release's retention mask (0.24-0.29's under the EAGLE
    drop keeps the column of N - 1, not 0.30's)."""
    rng = random.Random(f"{SEED}-keyed-{version}")
    rules = kv_rules(version)
    wrong = []
    for _ in range(CASES):
        cfg, ends = drawn_ends(version, rng)
        real = held_after_prefill(
            release_root(version), cfg, eagle_drop(cfg), ends, 4 * cfg.prompt + 64
        )
        model = dict(oracle(cfg, ends, rules=rules).live)
        if real != model:
            wrong.append(f"{cfg.describe()} ends={ends}: real {real}, model {model}")
    assert not wrong, f"{len(wrong)} of {CASES}: " + "; ".join(wrong[:6])


@pytest.mark.parametrize(
    ("version", "spare"), [("0.30.0", True), ("0.31.0", True), ("0.32.0", False)]
)
def test_a_checkpoint_keeps_a_spare_speculative_block_keyed_in_0_30_and_0_31(
    version: str, spare: bool
) -> None:
    """T = 13, B = 4, L = 1, internal checkpoints (alignment 1), ends [4, 13]: the chunk [4, 13)
    writes its checkpoint at 12 and, in 0.30-0.31, keeps the speculative block of [0, 4) in
    place at column 1, which the cache keys at 8 though it holds no state (SPEC P3); 0.32 moves
    it past the checkpoint. The release's keys and the oracle's poisoned claims agree."""
    cfg = Config(block=4, prompt=13, max_sched=9, lookahead=1, checkpoints=True)
    cfg = cfg.replace(checkpoint_alignment=1)
    keyed = keyed_after_prefill(release_root(version), cfg, False, [4, 13], 64)
    report = oracle(cfg, [4, 13], rules=kv_rules(version))
    assert (8 in keyed[MAMBA_GROUP]) == spare
    assert [p.text() for p in report.violations] == (["8 holds no state"] if spare else [])
