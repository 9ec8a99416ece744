"""Fidelity of slot soundness across preemption and resume (SPEC P3, KV2 rule 5, S-SLOT).

A request preempted in its prefill has its blocks freed (the cache keeps their keys), waits
at c = 0 and is admitted again at the hit the release's lookup finds. Run through each
release's own ``KVCacheManager`` (:class:`~chunkproof.source.kv_alloc_run.TreeSlots`: the
tree's block tables, copies and keys, the kernel's write rule), two claims hold on drawn
prefills, every release:

- a preempted request leaves exactly the keys, and the states their blocks hold, that an
  identical fresh request admitted after it was freed leaves: preemption in the prefill adds
  nothing a resend does not;
- after the resume, every claim the slot oracle makes for the chunks from the hit (its start
  s_0 the hit) is a key of the tree whose block holds the state the oracle says: a poisoned
  slot across a resume is P3 of a request admitted at that hit, which the model judges on its
  admission starts (``--start block,hash``).

The chunks are the release's own under random budgets, before the preemption from c = 0 and
after it from the hit.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from test_kv_alloc_fidelity import scheduled_chunks, with_checkpoints
from test_kv_lookup_fidelity import RELEASES, draw_config, minor_of

from chunkproof.model.builtin import policy_for_release
from chunkproof.model.config import Config
from chunkproof.source.kv_alloc_run import TreeSlots
from chunkproof.source.releases import release_root
from chunkproof.spec.slots import eagle_drop, kv_rules, oracle

pytestmark = pytest.mark.fidelity

SEED = 20_261_206
CASES = 100


@dataclass(frozen=True)
class Resumed:
    """A request computed ``before`` (chunks from 0), then preempted or resent, admitted at
    ``hit`` (``cfg``: its start the hit, its junction the one the lookup gave) and computing
    ``after`` (chunks from the hit); the Mamba keys the tree holds then, with the state each
    one's block holds."""

    cfg: Config
    before: tuple[int, ...]
    hit: int
    after: tuple[int, ...]
    keyed: dict[int, int]

    def describe(self) -> str:
        return f"{self.cfg.describe()} chunks {self.before}, hit {self.hit}, then {self.after}"


def run_again(
    version: str, cfg: Config, before: list[int], preempt: bool, rng: random.Random
) -> Resumed | None:
    """``cfg``'s prefill of the chunks ``before`` through the release's manager, then the
    request preempted (``preempt``) or freed and resent, admitted again at the tree's hit and
    computing the release's chunks from there (``rng`` draws their budgets; the split reads
    the junction the lookup gave, as the waiting loop sets it, 0.26 on); ``None`` if no
    budget sequence finishes from the hit."""
    slots = TreeSlots(release_root(version), cfg, eagle_drop(cfg), 4 * cfg.prompt + 64)
    for chunk in before:
        slots.compute(chunk)
    if preempt:
        slots.preempt()
    else:
        slots.resend()
    hit = slots.lookup()
    admitted = cfg.replace(start=hit, junction=slots.request.shared_prefix_boundary)
    after = scheduled_chunks(policy_for_release(version), admitted, rng)
    if not after:
        return None
    for chunk in after:
        slots.compute(chunk)
    return Resumed(admitted, tuple(before), hit, tuple(after), slots.keyed())


def drawn_preemptions(version: str, salt: str) -> Iterator[tuple[Config, list[int], int]]:
    """Fresh prefills the release accepts of two chunks or more (the release's own, random
    budgets; from 0.29 half with internal checkpoints), each with the chunks computed before
    its preemption (at least one, not all) and a seed for the budgets after it."""
    rng = random.Random(f"{SEED}-{salt}-{version}")
    policy = policy_for_release(version)
    while True:
        cfg = with_checkpoints(draw_config(rng, version), rng, minor_of(version))
        cfg = cfg.replace(max_sched=rng.randint(1, 24))
        if cfg.start or policy.accepts(cfg) is not None:
            continue
        chunks = scheduled_chunks(policy, cfg, rng)
        if chunks and len(chunks) >= 2:
            yield cfg, chunks[: rng.randint(1, len(chunks) - 1)], rng.randrange(1 << 30)


def resumed_runs(version: str, salt: str) -> Iterator[tuple[Resumed, Config, list[int], int]]:
    """:data:`CASES` preempted runs (:func:`run_again`) with what drew them."""
    found = 0
    for cfg, before, seed in drawn_preemptions(version, salt):
        resumed = run_again(version, cfg, before, True, random.Random(seed))
        if resumed is None:
            continue
        yield resumed, cfg, before, seed
        found += 1
        if found == CASES:
            return


def on_start_grid(cfg: Config, hit: int) -> bool:
    """Whether ``hit`` is an admission start of the kinds ``0,block,hash`` (SPEC S1: 0, a
    multiple of B_s, or with fine hits a multiple of H), which the default grids judge."""
    fine = cfg.hash_block < cfg.block
    return hit % cfg.sched_block == 0 or (fine and hit % cfg.hash_block == 0)


@pytest.mark.parametrize("version", RELEASES)
def test_a_preempted_request_keys_what_an_identical_resend_keys(version: str) -> None:
    """Preempted, or freed with an identical fresh request in its place: the same hit, the
    same chunks from it, the same keys holding the same states. Some runs resume at a hit
    above 0, so the claim is not only about fresh restarts, and every hit is an admission
    start the default grids judge."""
    wrong, above = [], 0
    for preempted, cfg, before, seed in resumed_runs(version, "same"):
        resent = run_again(version, cfg, before, False, random.Random(seed))
        above += preempted.hit > 0
        if resent != preempted or not on_start_grid(cfg, preempted.hit):
            wrong.append(f"{preempted.describe()}: {preempted.keyed}; resent: {resent}")
    assert not wrong, f"{len(wrong)} of {CASES}: " + "; ".join(wrong[:4])
    assert above >= CASES // 4, f"only {above} of {CASES} runs resume at a hit above 0"


@pytest.mark.parametrize("version", RELEASES)
def test_the_claims_after_a_resume_are_the_oracles_from_the_hit(version: str) -> None:
    """Every claim the slot oracle makes for the chunks after the resume, from s_0 = the hit
    under the release's rules, is a key of the tree whose block holds the state the oracle
    says (a sound claim its own state, a poisoned one another)."""
    rules = kv_rules(version)
    wrong = []
    for resumed, _, _, _ in resumed_runs(version, "oracle"):
        ends, total = [], resumed.hit
        for chunk in resumed.after:
            total += chunk
            ends.append(total)
        claims = dict(oracle(resumed.cfg, ends, rules=rules).live)
        missed = {key: held for key, held in claims.items() if resumed.keyed.get(key) != held}
        if missed:
            wrong.append(f"{resumed.describe()}: tree {resumed.keyed}, oracle {claims}")
    assert not wrong, f"{len(wrong)} of {CASES}: " + "; ".join(wrong[:4])
