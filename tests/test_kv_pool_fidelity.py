"""Fidelity of several requests sharing one KV block pool (SPEC KV2 rule 5), against each
release's own ``KVCacheManager``.

Two or three fresh requests of different prompts share the release's manager, compiled from
its source text over a counting block pool (:class:`chunkproof.source.kv_alloc_run.TreePool`;
release code is trusted in tests), in a pool from the least the start-up check accepts to a
few blocks more. Each step gives every request a random chunk; the tree runs ``schedule()``'s
FCFS loops as far as the pool goes (preemption in the running loop, the admission test in the
waiting loop). The model's step (:func:`chunkproof.spec.scheduler_loops.schedule_step` with a
:class:`~chunkproof.spec.scheduler_loops.Pool` of the release's rule-5 functions, on plain
integers, then :func:`~chunkproof.spec.scheduler_loops.settle`) must schedule and preempt the
same requests and leave each holding the same blocks, step after step.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import pytest
from test_kv_lookup_fidelity import RELEASES, minor_of
from test_loop_rules import PLAIN, nothing_held

from chunkproof.model.config import Config
from chunkproof.model.errors import ConfigError
from chunkproof.model.policy import LoopRules
from chunkproof.source.kv_alloc_run import TreePool
from chunkproof.source.releases import release_root
from chunkproof.spec.kv_blocks import (
    PoolRules,
    admitted_external,
    connector_hit,
    external_miscount,
    held_in_list,
    leaves_stale,
    outside_shared_pool,
    pool_modelled,
    pool_rules,
    resume_grid,
    shared_asked,
)
from chunkproof.spec.scheduler_loops import (
    FINISHED,
    RUNNING,
    WAITING,
    Got,
    Pool,
    Positions,
    schedule_step,
    settle,
)
from chunkproof.spec.slots import eagle_drop

pytestmark = pytest.mark.fidelity

SEED = 20_261_206
CASES = 60
STEPS = 40


def draw_instance(
    rng: random.Random, version: str, seeded: bool = False, connected: bool = False
) -> tuple[Config, ...]:
    """Two or three fresh requests of different prompts on one engine the pool rules cover
    (:func:`~chunkproof.spec.kv_blocks.pool_modelled`): B in 4, 8; G in B/2, B, 2B; H in G,
    G/2, G/4 where it divides B (fine hits from 0.26 where H < B); a lookahead L (0 where the
    release does not cover S >= 1) and the EAGLE drop, each the engine's (one for every
    request); no chunk start that asks a tail copy (rule 2b) and no internal checkpoints.
    ``seeded``: about half the requests are admitted at a local hit c0 > 0 inside rule 5's
    scope (the hit an identical request's prefill leaves, rule 2d), where the release has one;
    ``connected``: about half at a connector's hit x = c0 (rules 2e and 5g, from 0.23)."""
    rules = pool_rules(version)
    while True:
        block = rng.choice((4, 8))
        split = rng.choice((block, block // 2, 2 * block))
        hashed = rng.choice((split, split // 2, split // 4))
        lookahead = rng.choice((0, 1, 2)) if rules.speculative else 0
        if hashed == 0 or block % hashed:
            continue  # every group's block a multiple of the hash block (the coordinator's check)
        prompts = [rng.randint(1, 5 * max(block, split)) for _ in range(rng.choice((2, 3)))]
        drop = lookahead >= 1 and rng.random() < 0.5  # an engine setting: one for every request
        try:
            group = tuple(
                Config(
                    block=block,
                    split_block=split,
                    hash_block=hashed,
                    partial_hits=hashed < block and minor_of(version) >= 26,
                    prompt=prompt,
                    max_sched=64,
                    lookahead=lookahead,
                    drop=drop,
                )
                for prompt in prompts
            )
        except ConfigError:
            continue
        if seeded:
            group = tuple(seed_some(rng, rules, cfg) for cfg in group)
        if connected:
            group = tuple(connect_some(rng, cfg) for cfg in group)
        if all(covered(rules, cfg) for cfg in group):
            return group


def seed_some(rng: random.Random, rules: PoolRules, cfg: Config) -> Config:
    """``cfg`` admitted, one time in two, at a hit c0 > 0 on its resume grid inside rule 5's
    scope (:func:`~chunkproof.spec.kv_blocks.outside_shared_pool`), where it has one."""
    grid = resume_grid(cfg)
    starts = [
        start
        for start in range(grid, cfg.prompt, grid)
        if outside_shared_pool(rules, cfg.replace(start=start)) is None
    ]
    if not starts or rng.random() < 0.5:
        return cfg
    return cfg.replace(start=rng.choice(starts))


def connect_some(rng: random.Random, cfg: Config) -> Config:
    """``cfg`` admitted, one time in two, at a connector's hit x = c0 in [1, P - 1] (KV2 rule
    2e's request, :func:`~chunkproof.spec.kv_blocks.admitted_external`)."""
    if cfg.prompt < 2 or rng.random() < 0.5:
        return cfg
    x = rng.randint(1, cfg.prompt - 1)
    connected = cfg.replace(start=x, external=x)
    assert admitted_external(connected)
    return connected


def covered(rules: PoolRules, cfg: Config) -> bool:
    """Rule 5's scope: the pool rules model the request, no chunk start asks a tail copy and
    :func:`~chunkproof.spec.kv_blocks.outside_shared_pool` leaves nothing out."""
    copies = any(rules.tail_copy(cfg, start) for start in range(cfg.prompt))
    return pool_modelled(rules, cfg) and not copies and outside_shared_pool(rules, cfg) is None


class Seen(NamedTuple):
    """What one step did, on either side: the tokens it scheduled per request, the requests it
    preempted, the blocks each holds after it and the free blocks; or only the request whose
    admission made the pool raise (SPEC KV2 rule 5g: the engine core is down)."""

    scheduled: dict[int, int]
    preempted: set[int]
    held: list[int]
    free: int
    raised: int | None = None

    @classmethod
    def of(cls, got: Any) -> Seen:
        """The tree's step (:class:`~chunkproof.source.kv_alloc_run.PoolStepResult`)."""
        if got.raised is not None:
            return cls({}, set(), [], 0, got.raised)
        return cls(got.scheduled, set(got.preempted), got.held, got.free)


class ModelPool:
    """The model's side: the requests' (phase, c, stale) in list order, stepped by
    ``schedule_step`` with a :class:`Pool` and placed again by ``settle``."""

    def __init__(self, group: Sequence[Config], rules: PoolRules, blocks: int, mml: int):
        self.group, self.rules, self.blocks, self.mml = group, rules, blocks, mml
        self.order = list(range(len(group)))
        self.phase = [WAITING] * len(group)
        self.c = [cfg.start for cfg in group]
        self.stale = [0] * len(group)

    def step(
        self,
        chunks: Sequence[int],
        hits: dict[int, int] | None = None,
        connected: Sequence[int] = (),
    ) -> Seen:
        """One step giving request r ``chunks[r]`` (at most its prompt less its c), a waiting
        one resuming at its entry of ``hits`` (0 where none), the connector's for those in
        ``connected``: (scheduled, preempted, held, free, the request whose admission
        raised)."""

        def takes(p: int, label: int, c: int, offer: int) -> Got:
            n = min(chunks[label], self.group[label].prompt - c)
            return Got(n, n, False, False, 0)

        return self.advance(takes, 1 << 20, LoopRules(), hits, connected)

    def advance(
        self,
        stages: Callable[[int, int, Any, Any], Got],
        budget: int,
        rules: LoopRules,
        hits: dict[int, int] | None = None,
        connected: Sequence[int] = (),
    ) -> Seen:
        """One step at ``budget`` under the loop ``rules``, the request ``label`` at position p
        taking ``stages(p, label, c, offer)``, a waiting request resuming at its entry of
        ``hits`` (SPEC KV2 rule 5e; 0 where none), as at a hit (rule 2d), or for those in
        ``connected`` at the connector's x (rule 5g): (scheduled, preempted, held, free, the
        request whose admission raised)."""
        order, group, mml = self.order, self.group, self.mml
        hits = hits or {}
        resumed = [hits.get(r, 0) if self.phase[r] == WAITING else self.c[r] for r in self.order]
        cfgs = []
        for p, r in enumerate(order):
            waiting = self.phase[r] == WAITING
            start = resumed[p] if waiting else 0
            external = start if waiting and r in connected else 0
            cfgs.append(group[r].replace(start=start, external=external))
        pool = Pool(
            self.blocks,
            [self.stale[r] for r in order],
            lambda p, c, stale: held_in_list(cfgs[p], c, stale, mml),
            lambda p, c, e: shared_asked(cfgs[p], c, e, mml),
            lambda p, c, e: leaves_stale(cfgs[p], c, e),
            lambda p: self.rules.admission(cfgs[p], mml),
            lambda p, c, e: external_miscount(cfgs[p], c, e),
        )
        at = Positions(
            [self.phase[r] for r in order],
            resumed,
            [0] * len(order),
            lambda p, c, offer, where, shared: stages(p, order[p], c, offer),
            nothing_held,
            pool,
        )
        done = schedule_step(PLAIN, at, budget, lambda left: left, 256, rules)
        ledger = done.ledger
        assert ledger is not None
        raised = [r for p, r in enumerate(order) if ledger.raised[p]]
        if raised:  # the engine core is down: nothing after the raise is compared
            return Seen({}, set(), [], 0, raised[0])
        places: list[tuple[Any, int, int]] = []
        for p, r in enumerate(order):
            place = settle(
                PLAIN,
                at.phase[p],
                self.c[r],
                done.chunk[p],
                done.admitted[p],
                group[r].prompt,
                lambda after: 0,
                ledger.out[p],
                resumed[p],
            )
            self.phase[r], self.c[r] = place.phase, place.c
            self.stale[r] = 0 if place.phase != RUNNING else ledger.stale[p]
            places.append((place.group, p, r))
        self.order = [r for _, _, r in sorted(places)]
        scheduled = {r: done.chunk[p] for p, r in enumerate(order) if done.chunk[p] > 0}
        preempted = {r for p, r in enumerate(order) if ledger.out[p]}
        held = [
            held_in_list(group[r], self.c[r], self.stale[r], mml) if self.phase[r] == RUNNING else 0
            for r in range(len(group))
        ]
        return Seen(scheduled, preempted, held, self.blocks - 1 - sum(held))

    def done(self) -> bool:
        return all(phase == FINISHED for phase in self.phase)


@pytest.mark.parametrize("caching", [False, True], ids=["evicted", "lookup"])
@pytest.mark.parametrize("version", RELEASES)
def test_several_requests_share_the_pool_as_the_release_does(version: str, caching: bool) -> None:
    """Step after step the model schedules, preempts and leaves holding what the release's
    own manager does, and some instances of every release preempt. ``lookup``: the prompts
    are distinct and the manager keeps what it caches (:class:`~chunkproof.source.
    kv_alloc_run.CachingPool`), so a preempted request is admitted again at the hit the
    release's lookup finds; that hit is one of rule 5e's choices (on its resume grid, at most
    min(c, T - 1)), the model resumes there, and some runs resume at a hit > 0. About half
    its requests are admitted at the hit an identical request left (rule 2d, seeded by the
    tree), which the lookup finds, or less where the blocks handed out since evicted it; from
    0.23, some are admitted at such a hit. ``evicted``: nothing stays cached, every resume is
    at 0."""
    rng = random.Random(f"{SEED}-pool-{version}-{caching}")
    counts = run_against_the_tree(rng, version, caching, caching, False)
    assert counts["preempted"] > 0
    assert counts["resumed"] > 0 or not caching
    assert counts["seeded"] > 0 or not caching or minor_of(version) < 23


@pytest.mark.parametrize("version", RELEASES)
def test_a_tight_pool_admits_at_a_hit_as_the_release_does(version: str) -> None:
    """The lookup half in pools at most 2 blocks above the least, where the admission test
    decides: twice as many instances, the model agreeing step for step. From 0.26 a local hit
    that ends inside a block of G (a fine hit) makes the test count the copy of that partial
    block (rule 5b); without it the model admits what 0.29, 0.31 and 0.33 refuse here."""
    rng = random.Random(f"{SEED}-tight-{version}")
    counts = run_against_the_tree(rng, version, True, True, False, spare=2, cases=2 * CASES)
    assert counts["preempted"] > 0 and counts["resumed"] > 0


@pytest.mark.parametrize("version", [v for v in RELEASES if minor_of(v) >= 23])
def test_connector_hits_share_the_pool_as_the_release_does(version: str) -> None:
    """SPEC KV2 rule 5g: about half the requests are admitted at a connector's hit x = c0,
    which the tree passes to its manager with the first chunk (``num_external_computed_tokens``);
    step after step the model schedules, preempts, leaves holding and raises where the
    release's own manager does. The tree's connector keeps what it loaded: a waiting request
    whose local lookup finds nothing gets x again after a preemption. Some of those admissions
    are granted, some after a preemption, and on every release some make the pool raise (rule
    2e's miscount beside other requests)."""
    rng = random.Random(f"{SEED}-connector-{version}")
    counts = run_against_the_tree(rng, version, True, False, True, spare=2, cases=2 * CASES)
    assert counts["connected"] > 0 and counts["raised"] > 0 and counts["preempted"] > 0
    assert counts["reconnected"] > 0


def run_against_the_tree(
    rng: random.Random,
    version: str,
    caching: bool,
    seeded: bool,
    connected: bool,
    spare: int = 6,
    cases: int = CASES,
) -> dict[str, int]:
    """``cases`` drawn instances (:func:`draw_instance`) in pools from the least the
    start-up check accepts to ``spare`` blocks more, each run for up to
    :data:`STEPS` steps of random chunks on the tree's :class:`TreePool` and on
    :class:`ModelPool`, which must agree at every step; the preemptions, resumes at a hit >
    0, first admissions at a seeded hit, admissions granted at a connector's hit and pool
    raises seen."""
    rules = pool_rules(version)
    wrong: list[str] = []
    names = ("preempted", "resumed", "seeded", "connected", "reconnected", "raised")
    counts = dict.fromkeys(names, 0)
    for _ in range(cases):
        group = draw_instance(rng, version, seeded, connected)
        mml = max(cfg.prompt for cfg in group) + 1
        least = rules.startup_pool(group[0].replace(prompt=mml - 1, start=0, external=0))
        blocks = rng.randint(max(least, 2), max(least, 2) + spare)
        real = TreePool(
            release_root(version), group, eagle_drop(group[0]), blocks, mml, caching, caching
        )
        model = ModelPool(group, rules, blocks, mml)
        for index in range(STEPS):
            if model.done():
                break
            left = [cfg.prompt - c for cfg, c in zip(group, model.c, strict=True)]
            chunks = [rng.randint(1, max(n, 1)) for n in left]
            before = list(model.c)
            got = real.step(chunks)
            for r, hit in got.hits.items():
                cfg = group[r]
                if r in got.connected:
                    assert hit == connector_hit(cfg) > 0, (group, blocks, r, hit)
                    counts["connected"] += r in got.scheduled
                    counts["reconnected"] += r in got.scheduled and before[r] != cfg.start
                    continue
                top = min(before[r], cfg.prompt - 1)
                assert hit % resume_grid(cfg) == 0 and hit <= top, (group, blocks, r, hit, before)
                counts["resumed"] += hit > 0
                counts["seeded"] += hit > 0 and hit == cfg.start and index == 0
            want = model.step(chunks, got.hits, got.connected)
            seen = Seen.of(got)
            counts["preempted"] += bool(got.preempted)
            counts["raised"] += got.raised is not None
            if seen != want:
                prompts = [cfg.prompt for cfg in group]
                wrong.append(
                    f"{group[0].describe()} prompts={prompts} N={blocks} step {index} "
                    f"chunks={chunks} hits={got.hits}: real {seen}, model {want}"
                )
                break
            if got.raised is not None:
                break
    assert not wrong, f"{len(wrong)} of {cases}: " + "; ".join(wrong[:4])
    return counts


@pytest.mark.parametrize("version", [v for v in RELEASES if minor_of(v) >= 26])
def test_a_fine_hit_resumes_off_the_scheduler_grid(version: str) -> None:
    """With fine hits and a split grid G coarser than the Mamba block B (B = 4, G = 8, h = 2),
    a request preempted at c = 4 resumes at hit 4: on B, off B_s = lcm(B, G) = 8. Rule 5e's
    grid is B there (:func:`~chunkproof.spec.kv_blocks.resume_grid`), and the model resumed at
    that hit runs as the release's manager does."""
    group = tuple(
        Config(block=4, split_block=8, hash_block=2, prompt=5, max_sched=64) for _ in "ab"
    )
    assert group[0].partial_hits and group[0].sched_block == 8 and resume_grid(group[0]) == 4
    real = TreePool(release_root(version), group, eagle_drop(group[0]), 6, 6, True, True)
    model = ModelPool(group, pool_rules(version), 6, 6)
    hits = {}
    for chunks in ([3, 4], [2, 1], [1, 5]):
        before = list(model.c)
        got = real.step(chunks)
        assert model.step(chunks, got.hits) == Seen.of(got)
        hits.update({r: (hit, before[r]) for r, hit in got.hits.items() if hit > 0})
    assert hits == {1: (4, 4)}
