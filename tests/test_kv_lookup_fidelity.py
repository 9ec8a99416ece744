"""Fidelity of the cache side (SPEC KV1): where an identical resend lands (R*), which Mamba
states the retention mask keeps and where the prompt's tail is copied, against each release's
own code.

For every cached release from 0.15.0, the release's KV cache files are compiled by CPython and
its coordinator built and queried as :mod:`chunkproof.source.kv_run` does (release code is
trusted in tests, as in tests/test_encoder_fidelity.py; a P6 repro runs the same driver on its
user's tree): the cap on the hit, the EAGLE drop and the reconciliation of the groups are the
release's, and so is the retention mask its ``cache_blocks`` applies.

On seeded random geometries each release's hit and mask are compared with the model's rules
for it (:func:`chunkproof.spec.slots.kv_rules`).
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from chunkproof.model.builtin import policy_for_release
from chunkproof.model.config import Config
from chunkproof.model.errors import ConfigError
from chunkproof.source import kv_run
from chunkproof.source.kv_run import KvTree, compiled_kv_tree, every_hash_end
from chunkproof.source.releases import release_root
from chunkproof.spec.slots import cacheable, eagle_drop, kv_rules, oracle, tail_position

pytestmark = pytest.mark.fidelity


RELEASES = (
    "0.15.0",
    "0.17.0",
    "0.23.0",
    "0.24.0",
    "0.25.0",
    "0.26.0",
    "0.27.0",
    "0.28.0",
    "0.29.0",
    "0.30.0",
    "0.31.0",
    "0.32.0",
    "0.33.0",
    "0.34.0",
)
SEED = 20_261_205
CASES = 300


def minor_of(version: str) -> int:
    return int(version.split(".")[1])


def compiled_release(version: str) -> KvTree:
    """The cache code of the cached release ``version``, compiled."""
    return compiled_kv_tree(release_root(version))


def coordinator(version: str, cfg: Config) -> Any:
    """The release's coordinator for ``cfg`` as the scheduler builds it
    (:func:`~chunkproof.source.kv_run.kv_coordinator`), ``use_eagle`` the effective drop."""
    return kv_run.kv_coordinator(compiled_release(version), cfg, eagle_drop(cfg))


def real_hit(version: str, cfg: Config, attention: set[int], mamba: set[int]) -> int:
    """The hit the release's ``get_computed_blocks`` gives an identical resend of ``cfg``
    when the attention group holds entries at ``attention`` and the Mamba group at ``mamba``;
    the release turns fine hits on exactly where the model's configuration has them."""
    coord = coordinator(version, cfg)
    assert kv_run.fine_hits(coord) == cfg.partial_hits
    return kv_run.resend_hit(compiled_release(version), coord, cfg, attention, mamba)


def draw_config(rng: random.Random, version: str) -> Config:
    """A configuration the release accepts: B in 4, 8, 16, G in B, B/2, h dividing G, fine hits
    exactly when h < B from 0.26 (SPEC S1b: the coordinator turns them on from the
    configuration alone), an EAGLE method or not, hash lookahead (0.33), retention (0.24+;
    None, 0 or a multiple of B_s, the values the release's validator accepts)."""
    minor = minor_of(version)
    policy = policy_for_release(version)
    while True:
        block = rng.choice((4, 8, 16))
        split = rng.choice((block, block // 2))
        hash_block = rng.choice((split, split // 2))
        lookahead = rng.choice((0, 1, 1, 2))
        drop = lookahead >= 1 and (minor <= 29 or rng.random() < 0.7)
        hash_lookahead = lookahead if minor >= 33 and rng.random() < 0.3 else 0
        sched = math.lcm(block, split)
        retention = rng.choice((-1, 0, sched, 2 * sched, 3 * sched)) if minor >= 24 else -1
        try:
            cfg = Config(
                block=block,
                split_block=split,
                hash_block=hash_block,
                partial_hits=hash_block < block and minor >= 26,
                prompt=rng.randint(1, 7 * block),
                max_sched=64,
                lookahead=lookahead,
                drop=drop and hash_lookahead == 0,
                hash_lookahead=hash_lookahead,
                retention=retention,
            )
        except ConfigError:
            continue
        if policy.accepts(cfg) is None:
            return cfg


def draw_ends(rng: random.Random, prompt: int) -> list[int]:
    """A random chunk-end sequence 0 < e_1 < ... < e_m = N."""
    inside = sorted(rng.sample(range(1, prompt), min(prompt - 1, rng.randint(0, 4))))
    return [*inside, prompt]


@pytest.mark.parametrize("version", RELEASES)
def test_resend_lands_at_the_release_r_star(version: str) -> None:
    """With every block of the prompt cached in both groups, the release's lookup gives an
    identical resend the release's lookup R* (``kv_rules(version).lookup``)."""
    rng = random.Random(f"{SEED}-dense-{version}")
    rules = kv_rules(version)
    wrong = []
    for _ in range(CASES):
        cfg = draw_config(rng, version)
        dense = every_hash_end(cfg)
        real = real_hit(version, cfg, dense, dense)
        if real != rules.lookup(cfg):
            wrong.append(f"{cfg.describe()}: real {real}, model {rules.lookup(cfg)}")
    assert not wrong, f"{len(wrong)} of {CASES}: " + "; ".join(wrong[:8])


@pytest.mark.parametrize("version", RELEASES)
def test_resend_hit_on_the_oracle_live_states(version: str) -> None:
    """With the Mamba group holding exactly the claims the slot oracle says a chunk-end
    sequence left live (under the release's rules) and full attention what a prefill of the
    prompt keys (:func:`~chunkproof.source.kv_run.attention_entries`), the release's lookup
    gives the oracle's resend hit."""
    rng = random.Random(f"{SEED}-live-{version}")
    rules = kv_rules(version)
    wrong = []
    for _ in range(CASES):
        cfg = draw_config(rng, version)
        ends = draw_ends(rng, cfg.prompt)
        report = oracle(cfg, ends, rules=rules)
        attention = kv_run.attention_entries(compiled_release(version), cfg, eagle_drop(cfg))
        real = real_hit(version, cfg, attention, set(report.live))
        if real != report.resend_hit:
            wrong.append(f"{cfg.describe()} ends={ends}: real {real}, model {report.resend_hit}")
    assert not wrong, f"{len(wrong)} of {CASES}: " + "; ".join(wrong[:8])


def registered(version: str, cfg: Config, computed: int) -> dict[int, set[int]]:
    """The block-grid claims the release's retention mask lets each group key when a fresh
    request of ``cfg``'s prompt caches its first ``computed`` tokens in one ``cache_blocks``
    call (:func:`~chunkproof.source.kv_run.registered`)."""
    return kv_run.registered(coordinator(version, cfg), cfg, computed)


RETENTION_RELEASES = RELEASES[RELEASES.index("0.24.0") :]
"""The releases that accept a retention interval for an attention + Mamba model (SPEC S1b):
0.24-0.28 read it from the environment variable VLLM_PREFIX_CACHE_RETENTION_INTERVAL, which
:func:`coordinator` sets, 0.29+ from ``prefix_cache_retention_interval``; 0.23's validator
refuses it without a sliding-window group, and 0.15 and 0.17 have none."""


@pytest.mark.parametrize("version", RETENTION_RELEASES)
def test_retention_keeps_the_release_mask(version: str) -> None:
    """A prompt cached whole in one call: the release's mask (its replay boundaries, segment
    grid and ``reachable_block_mask``) lets the Mamba group key exactly the columns
    ``kv_rules(version).keeps`` keeps below the cacheable count."""
    rng = random.Random(f"{SEED}-retention-{version}")
    rules = kv_rules(version)
    wrong = []
    for _ in range(CASES):
        cfg = draw_config(rng, version)
        keyed = registered(version, cfg, cfg.prompt).get(1, set())
        columns = range(cacheable(cfg, cfg.prompt) // cfg.block)
        model = {(j + 1) * cfg.block for j in columns if rules.keeps(cfg, j)}
        if keyed != model:
            wrong.append(f"{cfg.describe()}: real {sorted(keyed)}, model {sorted(model)}")
    assert not wrong, f"{len(wrong)} of {CASES}: " + "; ".join(wrong[:8])


@pytest.mark.parametrize("version", RELEASES)
def test_the_cache_files_compile_whole(version: str) -> None:
    """Every top-level statement of the manager, coordinator and utility files runs (only
    ``kv_cache_interface.py``'s torch-backed spec tables are skipped), so the lookup above is
    the release's code, not a part of it."""
    skipped = set(compiled_release(version).skipped)
    assert skipped <= {"vllm/v1/kv_cache_interface.py"}, skipped


VALIDATING_RELEASES = RELEASES[RELEASES.index("0.23.0") :]
"""The releases whose coordinator reads and validates a retention interval."""


def starts_with_retention(version: str, cfg: Config) -> bool:
    """Whether the release's coordinator starts for ``cfg`` (its retention validator raises
    ``ValueError`` on an interval it refuses)."""
    try:
        coordinator(version, cfg)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("version", VALIDATING_RELEASES)
def test_retention_acceptance_is_the_release_validator(version: str) -> None:
    """SPEC S1b: the model accepts a retention interval R exactly when the release's
    ``_validate_prefix_cache_retention_interval`` lets its coordinator start (0.23 never for
    an attention + Mamba model; 0.24+ R >= 0 on the B_s grid), over R on and off that grid."""
    rng = random.Random(f"{SEED}-validator-{version}")
    policy = policy_for_release(version)
    wrong = []
    accepted = refused = 0
    for _ in range(CASES // 10):
        base = draw_config(rng, version).replace(retention=-1)
        sched = base.sched_block
        for retention in (0, base.block, sched, 2 * sched, sched + base.hash_block, 3):
            cfg = base.replace(retention=retention)
            real = starts_with_retention(version, cfg)
            model = policy.accepts(cfg) is None
            accepted += real
            refused += not real
            if real != model:
                wrong.append(f"{cfg.describe()}: release starts {real}, model accepts {model}")
    assert not wrong, f"{len(wrong)}: " + "; ".join(wrong[:8])
    assert refused > 0
    assert (accepted > 0) == (version != "0.23.0")


@pytest.mark.parametrize("version", RELEASES)
def test_tree_resend_is_the_release_rules(version: str) -> None:
    """What a P6 repro asks of a tree (:func:`~chunkproof.source.kv_run.tree_resend`): R*
    is ``kv_rules(version).resend``, its Mamba block is kept exactly when
    ``kv_rules(version).keeps`` keeps R*'s column, and the coordinator's fine hits are the
    configuration's."""
    rng = random.Random(f"{SEED}-tree-resend-{version}")
    rules = kv_rules(version)
    root = release_root(version)
    wrong = []
    for _ in range(CASES // 3):
        cfg = draw_config(rng, version)
        real = kv_run.tree_resend(root, cfg, eagle_drop(cfg))
        r = rules.resend(cfg)
        kept = r > 0 and r % cfg.block == 0 and rules.keeps(cfg, r // cfg.block - 1)
        model = kv_run.TreeResend(r, kept, cfg.partial_hits)
        if real != model:
            wrong.append(f"{cfg.describe()}: real {real}, model {model}")
    assert not wrong, f"{len(wrong)} of {CASES // 3}: " + "; ".join(wrong[:8])


@pytest.mark.parametrize("version", RELEASES)
def test_the_partial_tail_is_keyed_where_the_release_keys_it(version: str) -> None:
    """Rule 7: a prompt cached up to ``computed`` in one call keys a partial tail off the block
    grid on the Mamba group (``cache_partial_block``) exactly at the release's T
    (``kv_rules(version).tail``: h*floor(N/h) in 0.26-0.30, less h under the drop in 0.31,
    ck33(N, h, drop, L_h) from 0.32) when ``computed`` is T with fine hits, and nowhere else
    off the grid. On the grid, up to 0.31 none (T is then a block, under the mask); from 0.32
    (``grid_tail``) only T itself, by its own copy (what triggers that copy is not checked)."""
    rng = random.Random(f"{SEED}-tail-{version}")
    rules = kv_rules(version)
    wrong = []
    for _ in range(CASES):
        cfg = draw_config(rng, version)
        tail = rules.tail(cfg)
        for computed in sorted({tail, tail_position(cfg), cfg.prompt, cfg.prompt - 1} - {0}):
            coord = coordinator(version, cfg)
            kv_run.registered(coord, cfg, computed)
            partial = coord.block_pool.tails.get(kv_run.MAMBA_GROUP, set())
            off_grid = {claim for claim in partial if claim % cfg.block}
            on_grid = partial - off_grid
            at_tail = cfg.partial_hits and tail % cfg.block != 0 and computed == tail
            expected = {tail} if at_tail else set()
            if off_grid != expected or not on_grid <= ({tail} if rules.grid_tail else set()):
                wrong.append(f"{cfg.describe()} to {computed}: T={tail}, keyed {sorted(partial)}")
    assert not wrong, f"{len(wrong)} cases: " + "; ".join(wrong[:8])
