"""Fidelity of coverage across requests that share a prefix (SPEC S-COVER, 0.26 on).

Three requests of one length run through each release's own ``KVCacheManager``
(:class:`~chunkproof.source.kv_alloc_run.TreeSlots`): A computes its prompt; B shares A's
first S tokens (its own past them) and is admitted at the hit the tree's lookup gives it, with
the junction J the lookup gives with it (the waiting loop's ``shared_prefix_boundary``: the
attention group's longer hit, the EAGLE drop taken); C shares the same S tokens and is looked
up after B's prefill. Every chunk is the release's own under random budgets, B's from its hit
with its junction. On drawn cases where B's junction is above 0, every release:

- C's hit is the largest claim A's or B's prefill leaves live (the slot oracle's, the
  release's rules) at most J on the hit grid: J is where a sibling's lookup lands;
- with R*_J (:func:`~chunkproof.spec.slots.junction_landing`: the largest position at most J
  a chunk end can leave live), C's hit is at most R*_J; it is R*_J when no chunk of B breaks
  S-COVER (P6's rule at R*_J in place of R*, :func:`~chunkproof.spec.properties.misses_resend`),
  and a B that breaks it leaves no live state at R*_J, so C lands below it unless A's prefill
  left one there. Such a B occurs on every release, and only where the split's junction stop
  is not J's block floor: with the split grid G finer than the Mamba block B (the junction is
  the attention group's hit, on G, and the split floors it on G), or from a chunk start off
  the block grid (the stop floors J - c, not J).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from test_kv_alloc_fidelity import scheduled_chunks
from test_kv_lookup_fidelity import RELEASES, draw_config, minor_of

from chunkproof.model.builtin import policy_for_release
from chunkproof.model.config import Config
from chunkproof.source.kv_alloc_run import TreeSlots
from chunkproof.source.releases import release_root
from chunkproof.spec.properties import misses_resend
from chunkproof.spec.slots import (
    eagle_drop,
    hit_unit,
    junction_landing,
    keys_own_tail,
    kv_rules,
    oracle,
)

pytestmark = pytest.mark.fidelity

SEED = 20_261_207
CASES = 120
JUNCTION_RELEASES = RELEASES[RELEASES.index("0.26.0") :]
"""The releases whose lookup gives a shared-prefix boundary."""


@dataclass(frozen=True)
class Siblings:
    """A's chunk ends (from 0), B's admitted configuration (start its hit, junction its J)
    and chunk ends, and the hit C's lookup gives."""

    first: Config
    first_ends: tuple[int, ...]
    second: Config
    second_ends: tuple[int, ...]
    third_hit: int

    def describe(self) -> str:
        return (
            f"{self.first.describe()} A {list(self.first_ends)}; "
            f"B {self.second.describe()} {list(self.second_ends)}; C hit {self.third_hit}"
        )


def ends_from(start: int, chunks: list[int]) -> tuple[int, ...]:
    """The chunk ends of ``chunks`` computed from ``start``."""
    ends, total = [], start
    for chunk in chunks:
        total += chunk
        ends.append(total)
    return tuple(ends)


def drawn_siblings(version: str) -> Iterator[Siblings]:
    """:data:`CASES` runs of A, B and C whose B has a junction above 0 (a test failure if
    fewer than one in ten draws gives one). From 0.30, half the configurations that allow it
    turn the exact shared-prefix checkpoint S on."""
    rng = random.Random(f"{SEED}-{version}")
    policy = policy_for_release(version)
    found = 0
    for _ in range(10 * CASES):
        if found == CASES:
            return
        cfg = draw_config(rng, version).replace(max_sched=rng.randint(1, 24))
        exact = cfg.partial_hits and cfg.lookahead == 1 and eagle_drop(cfg)
        if exact and minor_of(version) >= 30 and rng.random() < 0.5:
            cfg = cfg.replace(exact_junction=True)
        chunks = scheduled_chunks(policy, cfg, rng) if cfg.prompt >= 2 else None
        if policy.accepts(cfg) is not None or not chunks:
            continue
        slots = TreeSlots(release_root(version), cfg, eagle_drop(cfg), 4 * cfg.prompt + 64)
        for chunk in chunks:
            slots.compute(chunk)
        shared = rng.randint(1, cfg.prompt - 1)
        slots.sibling(shared)
        hit = slots.lookup()
        second = cfg.replace(start=hit, junction=slots.request.shared_prefix_boundary)
        after = scheduled_chunks(policy, second, rng)
        if second.junction == 0 or not after:
            continue
        for chunk in after:
            slots.compute(chunk)
        slots.sibling(shared)
        yield Siblings(cfg, ends_from(0, chunks), second, ends_from(hit, after), slots.lookup())
        found += 1
    pytest.fail(f"only {found} of {10 * CASES} drawn siblings of {version} have a junction")


@pytest.mark.parametrize("version", JUNCTION_RELEASES)
def test_a_sibling_lands_at_the_largest_live_claim_up_to_the_junction(version: str) -> None:
    """C's hit is the largest claim A's or B's prefill leaves live (the oracle, the release's
    rules) at most B's junction J, on the hit grid."""
    rules = kv_rules(version)
    wrong = []
    for run in drawn_siblings(version):
        live = set(oracle(run.first, run.first_ends, rules=rules).live)
        live |= set(oracle(run.second, run.second_ends, rules=rules).live)
        unit = hit_unit(run.first)
        model = max((p for p in live if p <= run.second.junction and p % unit == 0), default=0)
        if model != run.third_hit:
            wrong.append(f"{run.describe()}: oracle {model}")
    assert not wrong, f"{len(wrong)} of {CASES}: " + "; ".join(wrong[:4])


@pytest.mark.parametrize("version", JUNCTION_RELEASES)
def test_a_sibling_lands_at_r_star_j_unless_a_chunk_breaks_s_cover(version: str) -> None:
    """C's hit is at most R*_J, and R*_J when no chunk of B breaks S-COVER; a B that breaks
    it leaves no live state at R*_J, and on some drawn case C lands below R*_J."""
    rules = kv_rules(version)
    wrong, below = [], 0
    for run in drawn_siblings(version):
        cfg = run.second
        landing = junction_landing(cfg, rules.tail(cfg), rules.grid_tail)
        kept = rules.keeps(cfg, landing // cfg.block - 1)
        broken = [
            (start, end)
            for start, end in zip((cfg.start, *run.second_ends), run.second_ends, strict=False)
            if misses_resend(
                cfg,
                start,
                end,
                landing,
                kept or (rules.grid_tail and keys_own_tail(cfg, start, end)),
                rules.live_checkpoint(cfg, start, end),
            )
        ]
        live = oracle(cfg, run.second_ends, rules=rules).live
        if run.third_hit > landing or (not broken and run.third_hit != landing):
            wrong.append(f"{run.describe()}: R*_J {landing}, broken by {broken}")
        if broken and live.get(landing) == landing:
            wrong.append(f"{run.describe()}: broken by {broken}, yet R*_J {landing} is live")
        on_grid = all(start % cfg.block == 0 for start, _ in broken)
        if broken and cfg.split_block == cfg.block and on_grid:
            wrong.append(f"{run.describe()}: broken by {broken} from the block grid, G = B")
        below += bool(broken) and run.third_hit < landing
    assert not wrong, f"{len(wrong)} of {CASES}: " + "; ".join(wrong[:4])
    assert below, f"no drawn B of {version} breaks S-COVER with C landing below R*_J"


def test_a_junction_off_the_mamba_grid_costs_the_sibling_a_block_on_0_33() -> None:
    """SPEC S-COVER's example on the real 0.33.0 manager: T = 20, B = 4, G = H = 2 (fine
    hits), R = 8. A
    computes [0, 2, 12, 16, 18, 20]; B shares its first 14 tokens, is admitted at 0 with the
    junction 14, and its split stops at 14 (G-floored), so its chunk [8, 14) runs over
    R*_J = 12 and breaks S-COVER; C, sharing the same 14 tokens, resumes at 8, not 12."""
    version = "0.33.0"
    rules = kv_rules(version)
    cfg = Config(block=4, split_block=2, hash_block=2, partial_hits=True, prompt=20, max_sched=11)
    cfg = cfg.replace(retention=8)
    slots = TreeSlots(release_root(version), cfg, False, 4 * cfg.prompt + 64)
    for chunk in (2, 10, 4, 2, 2):
        slots.compute(chunk)
    slots.sibling(14)
    assert (slots.lookup(), slots.request.shared_prefix_boundary) == (0, 14)
    second = cfg.replace(junction=14)
    for chunk in (4, 2, 2, 6, 4, 2):
        slots.compute(chunk)
    slots.sibling(14)
    landing = junction_landing(second, rules.tail(second), rules.grid_tail)
    checkpoint = rules.live_checkpoint(second, 8, 14)
    assert landing == 12
    assert misses_resend(second, 8, 14, landing, rules.keeps(second, 2), checkpoint)
    assert slots.lookup() == 8
