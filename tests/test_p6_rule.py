"""P6's chunk rule (SPEC P6, S-COVER) against the slot oracle, and the two errors that check found.

The explorer and the prover judge P6 chunk by chunk (``misses_resend`` in each release's
predicate); the slot oracle (slot note 6) says which positions a complete prefill leaves
covered, and the fidelity tests hold the oracle to the real managers. On a complete prefill the
two must agree: some chunk breaks P6 exactly when R* or R*_J is left uncovered past the start.
"""

from __future__ import annotations

import random
from itertools import pairwise

import pytest
from test_kv_alloc_fidelity import with_checkpoints
from test_kv_lookup_fidelity import RELEASES, draw_config, draw_ends, minor_of

from chunkproof.checker.engines.search import explore
from chunkproof.model.builtin import get_builtin, policy_for_release
from chunkproof.model.config import Config
from chunkproof.model.errors import ConfigError
from chunkproof.source.kv_alloc_run import TreeSlots, resend_after_prefill
from chunkproof.source.releases import release_root
from chunkproof.spec.properties import edge_properties
from chunkproof.spec.request import RequestModel
from chunkproof.spec.slots import eagle_drop, kv_rules, oracle
from chunkproof.spec.space import Space, grid_from

SEED = 20_261_207
PREFILLS = 600

FINE_HITS_0_28 = Config(
    block=8,
    hash_block=4,
    partial_hits=True,
    prompt=41,
    max_sched=2,
    lookahead=2,
    drop=True,
    retention=24,
)
"""0.28 with fine hits: R* = 32 is a block end the retention mask drops."""

TAIL_AT_R_STAR = Config(block=4, prompt=9, max_sched=4, lookahead=2, hash_lookahead=2, retention=0)
"""0.32 on: R* = 4 is the prompt's tail, keyed by its own copy whatever the mask."""


def drawn_prefill(rng: random.Random, version: str) -> tuple[Config, list[int]] | None:
    """A configuration the release accepts (internal checkpoints from 0.29; a junction on a
    quarter of them, an admission start, a local hit on the block grid or an external one,
    on another quarter) and the chunk ends of one complete prefill from its start: a few
    random ends, or one token at a time. None for a draw the release refuses."""
    cfg = with_checkpoints(draw_config(rng, version), rng, minor_of(version))
    draw = rng.random()
    try:
        if draw < 0.25 and cfg.prompt > 2:
            exact = rng.random() < 0.5
            cfg = cfg.replace(junction=rng.randint(1, cfg.prompt - 1), exact_junction=exact)
        elif draw < 0.5 and cfg.prompt > cfg.block:
            local = rng.randrange(cfg.block, cfg.prompt, cfg.block)
            external = rng.randint(1, cfg.prompt - 1)
            start = rng.choice(((local, 0), (external, external)))
            cfg = cfg.replace(start=start[0], external=start[1])
    except ConfigError:
        return None
    if policy_for_release(version).accepts(cfg) is not None:
        return None
    if rng.random() < 0.3:
        return cfg, list(range(cfg.start + 1, cfg.prompt + 1))
    inside = range(cfg.start + 1, cfg.prompt)
    return cfg, [*sorted(rng.sample(inside, min(len(inside), rng.randint(0, 4)))), cfg.prompt]


@pytest.mark.parametrize("version", RELEASES)
def test_some_chunk_breaks_p6_exactly_when_the_oracle_leaves_a_landing_uncovered(
    version: str,
) -> None:
    """On random complete prefills, the release's P6 predicate flags some chunk exactly when
    the slot oracle (the release's rules) leaves R* or R*_J uncovered where it lies past the
    start c0 (one below c0 is the earlier prefill's to cover, not this request's)."""
    rng = random.Random(f"{SEED}-{version}")
    rules = kv_rules(version)
    p6 = edge_properties(policy_for_release(version))["P6"]
    wrong, checked = [], 0
    while checked < PREFILLS:
        drawn = drawn_prefill(rng, version)
        if drawn is None:
            continue
        cfg, ends = drawn
        checked += 1
        flagged = [(c, e) for c, e in pairwise([cfg.start, *ends]) if p6(cfg, c, e)]
        covered = oracle(cfg, ends, rules=rules).covered
        landings = [p for p in (rules.resend(cfg), rules.junction(cfg)) if p > cfg.start]
        uncovered = [p for p in landings if p not in covered]
        if bool(flagged) != bool(uncovered):
            wrong.append(f"{cfg.describe()} ends={ends}: flagged {flagged}, uncovered {uncovered}")
    assert not wrong, f"{len(wrong)} of {PREFILLS}: " + "; ".join(wrong[:4])


def p6_verdict(policy: str, ranges: dict[str, str]) -> tuple[int, int]:
    """(configurations, those that break P6) of the explorer on one grid."""
    space = Space((grid_from(ranges, "range"),), None)
    tally = explore(RequestModel(get_builtin(policy), space), ("P6",)).tally
    return tally.configs["main"], tally.failing.get(("P6", "main"), 0)


def test_fine_hits_do_not_spare_a_block_end_r_star_the_mask_drops() -> None:
    """0.28, T=41, B=8, H=4 (fine hits), L=2, drop, R=24: R* = 32 is a block end the mask
    drops, so a chunk ending there breaks P6; the rule used to skip that clause with fine hits
    and proved P6 on this grid."""
    ranges = {"block": "8", "hash_block": "4", "lookahead": "2", "drop": "on"}
    ranges |= {"retention": "24", "prompt": "41-51", "max_sched": "1-8"}
    configs, failing = p6_verdict("vllm-0.28", ranges)
    assert (configs, failing) == (77, 56)
    cfg = FINE_HITS_0_28
    assert kv_rules("0.28.0").resend(cfg) == 32
    assert edge_properties(get_builtin("vllm-0.28"))["P6"](cfg, 30, 32)


def test_from_0_32_the_tails_own_copy_keeps_r_star_the_mask_drops() -> None:
    """0.34, T=9, B=4, L=L_h=2, R=0: R* = 4 is the prompt's tail, keyed by its own copy
    whatever the mask, so a chunk ending there keeps P6 (the rule used to flag it)."""
    ranges = {"block": "4", "lookahead": "2", "hash_lookahead": "2", "drop": "off"}
    ranges |= {"retention": "0", "prompt": "9", "max_sched": "4"}
    assert p6_verdict("vllm-0.34", ranges) == (1, 0)
    cfg = TAIL_AT_R_STAR
    assert not edge_properties(get_builtin("vllm-0.34"))["P6"](cfg, 0, 4)


@pytest.mark.fidelity
@pytest.mark.parametrize(
    ("version", "cfg", "ends", "hit"),
    [
        (
            "0.28.0",
            FINE_HITS_0_28,
            [*range(2, 41, 2), 41],
            24,
        ),
        *(
            (
                version,
                TAIL_AT_R_STAR,
                [4, 8, 9],
                4,
            )
            for version in ("0.33.0", "0.34.0")
        ),
    ],
)
def test_the_real_trees_agree(version: str, cfg: Config, ends: list[int], hit: int) -> None:
    """The two cases on the real managers: after the 0.28 prefill ending at 32 on the way, an
    identical resend lands at 24, below R* = 32; after the 0.33/0.34 prefill [4, 8, 9] with
    R = 0, it lands at R* = 4."""
    real = resend_after_prefill(
        release_root(version), cfg, eagle_drop(cfg), ends, 4 * cfg.prompt + 64
    )
    assert real == hit == oracle(cfg, ends, rules=kv_rules(version)).resend_hit


JUNCTION_RELEASES = RELEASES[RELEASES.index("0.26.0") :]
"""The releases whose waiting loop gives a request a shared-prefix boundary J."""


@pytest.mark.fidelity
@pytest.mark.parametrize("version", JUNCTION_RELEASES)
def test_a_real_prefill_with_a_junction_keys_the_oracles_live_claims(version: str) -> None:
    """A request with a junction J (a hash-block end below T, as the attention group's hit
    gives it; the exact shared-prefix checkpoint S on where the release accepts it) computes
    random chunk ends through the release's own manager, J set on it as the waiting loop
    sets it; half of them end a chunk at J, as the split does under S. The Mamba keys it
    leaves and the states their blocks hold are the oracle's live claims (rule 7 keys J only
    where the request's hashes reach it). S is drawn wherever the release accepts it: with
    the drop, or under hash lookahead, where 0.33+'s manager keeps it on because the
    drafter's group stays flagged (``eagle_group_ids``)."""
    rng = random.Random(f"{SEED}-junction-{version}")
    policy, rules, root = policy_for_release(version), kv_rules(version), release_root(version)
    wrong, checked = [], 0
    while checked < 150:
        cfg = draw_config(rng, version)
        ends_at = range(cfg.hash_block, cfg.prompt, cfg.hash_block)
        if not ends_at:
            continue
        try:
            exact = rng.random() < 0.5
            cfg = cfg.replace(junction=rng.choice(ends_at), exact_junction=exact)
        except ConfigError:
            continue
        if policy.accepts(cfg) is not None:
            cfg = cfg.replace(exact_junction=False)
        if policy.accepts(cfg) is not None:
            continue
        checked += 1
        ends = draw_ends(rng, cfg.prompt)
        if rng.random() < 0.5:
            ends = sorted({*ends, cfg.junction})
        slots = TreeSlots(root, cfg, eagle_drop(cfg), 4 * cfg.prompt + 64)
        slots.request.shared_prefix_boundary = cfg.junction
        for start, end in pairwise([0, *ends]):
            slots.compute(end - start)
        model = dict(oracle(cfg, ends, rules=rules).live)
        if slots.keyed() != model:
            wrong.append(f"{cfg.describe()} ends={ends}: real {slots.keyed()}, model {model}")
    assert not wrong, f"{len(wrong)} of 150: " + "; ".join(wrong[:4])
