"""Fidelity of where an identical resend lands after a real prefill (SPEC KV1, P6's scope).

``tests/test_kv_lookup_fidelity.py`` gives the release's lookup the entries the model says each
group holds. Here nothing is given: a fresh request computes its prompt in the chunks the
release's own split gives it under random budgets (or one token at a time), through the
release's ``allocate_slots`` over a pool that keeps what the cache code keys
(:func:`chunkproof.source.kv_alloc_run.resend_after_prefill`; release code is trusted in
tests), and an identical request is looked up. Inside P6's scope (``KvRules.verified``) the
release's hit must be the slot oracle's resend hit for those chunk ends; outside it, some
prompt of the sample must show why the scope is cut. And on every release, the Mamba claims the
release's cache keys after a real prefill are the oracle's live claims (SPEC P3: rule 5 under
the release's retention mask).
"""

from __future__ import annotations

import random

import pytest
from test_kv_alloc_fidelity import scheduled_chunks
from test_kv_lookup_fidelity import RELEASES, draw_config

from chunkproof.model.builtin import policy_for_release
from chunkproof.model.config import Config
from chunkproof.source.kv_alloc_run import keyed_after_prefill, resend_after_prefill
from chunkproof.source.kv_run import MAMBA_GROUP
from chunkproof.source.releases import release_root
from chunkproof.spec.slots import eagle_drop, kv_rules, oracle

pytestmark = pytest.mark.fidelity

SEED = 20_261_206
CASES = 300


def drawn_ends(version: str, rng: random.Random) -> tuple[Config, list[int]]:
    """A configuration the release accepts and the chunk ends of one prefill of it: the
    release's own chunks under random budgets, or (one in four) one token at a time, which
    leaves a state at every position the cache code keys."""
    policy = policy_for_release(version)
    while True:
        cfg = draw_config(rng, version).replace(max_sched=rng.randint(1, 24))
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
def test_resend_after_a_real_prefill_inside_p6_scope(version: str) -> None:
    """Inside the scope, the release's hit is the oracle's on every drawn prefill (at least a
    third of the sample is inside it)."""
    rng = random.Random(f"{SEED}-inside-{version}")
    rules = kv_rules(version)
    wrong, inside = [], 0
    for _ in range(CASES):
        cfg, ends = drawn_ends(version, rng)
        if not rules.in_scope(cfg):
            continue
        inside += 1
        real, model = real_and_model(version, cfg, ends)
        if real != model:
            wrong.append(f"{cfg.describe()} ends={ends}: real {real}, model {model}")
    assert inside >= CASES // 3, inside
    assert not wrong, f"{len(wrong)} of {inside}: " + "; ".join(wrong[:6])


OUTSIDE_RELEASES = RELEASES[RELEASES.index("0.32.0") :]
"""The releases with configurations outside P6's scope (the drop with L >= 2 from 0.32; up to
0.31 the scope is every configuration)."""


@pytest.mark.parametrize("version", OUTSIDE_RELEASES)
def test_the_resend_leaves_r_star_outside_p6_scope(version: str) -> None:
    """Outside the scope the model's resend hit is not the release's on some drawn prefill:
    the reason P6 does not judge there (its R* is not where the resend lands)."""
    rng = random.Random(f"{SEED}-outside-{version}")
    rules = kv_rules(version)
    for _ in range(40 * CASES):
        cfg, ends = drawn_ends(version, rng)
        if rules.in_scope(cfg):
            continue
        real, model = real_and_model(version, cfg, ends)
        if real != model:
            assert real < model, f"{cfg.describe()} ends={ends}: real {real}, model {model}"
            return
    pytest.fail(f"no prefill outside P6's scope of {version} lands away from the model's hit")


@pytest.mark.parametrize("version", RELEASES)
def test_a_real_prefill_keys_the_oracles_live_claims(version: str) -> None:
    """The Mamba claims the release keys after a real prefill are the oracle's live claims,
    poisoned ones included (SPEC P3, KV1): the crossing claim is keyed under the release's
    retention mask (0.24-0.29's under the EAGLE drop keeps the column of N - 1, not 0.30's)."""
    rng = random.Random(f"{SEED}-keyed-{version}")
    rules = kv_rules(version)
    wrong = []
    for _ in range(CASES):
        cfg, ends = drawn_ends(version, rng)
        keyed = keyed_after_prefill(
            release_root(version), cfg, eagle_drop(cfg), ends, 4 * cfg.prompt + 64
        )
        real = sorted(keyed.get(MAMBA_GROUP, ()))
        model = sorted(oracle(cfg, ends, rules=rules).live)
        if real != model:
            wrong.append(f"{cfg.describe()} ends={ends}: real {real}, model {model}")
    assert not wrong, f"{len(wrong)} of {CASES}: " + "; ".join(wrong[:6])
