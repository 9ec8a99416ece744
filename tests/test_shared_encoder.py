"""Fidelity of the shared encoder cache (SPEC N1): two requests with encoder items in
one scheduler, against the real code of every release whose encoder logic differs.

The requests share the release's real ``EncoderCacheManager`` (compiled from the cached
source, :class:`~chunkproof.source.encoder_run.EncoderRun` with ``shared``), driven as
``schedule()`` drives it: the running loop, then the waiting loop, each request's stages with
the real ``_try_schedule_encoder_inputs`` in the encoder's place, what a scheduled request's
call scheduled allocated at once, ``_free_encoder_inputs`` after the step and the whole
request freed when it finishes. The scheduler-step model (whose requests' state is (c, e),
:mod:`chunkproof.model.encoder_items`) must give every request the same c at every step, on
seeded random instances and budget sequences. The loops themselves are the model's reading
of each release's ``schedule()`` (tests/test_loop_rules.py checks that reading); what is
checked here is what one request's encoder call sees of the others.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from test_encoder_fidelity import ENCODER_RELEASES, draw_config
from test_fidelity import Release, load_release

from chunkproof.model.config import Config, Items
from chunkproof.model.errors import ConfigError, PolicyCrash
from chunkproof.model.step import step_view
from chunkproof.model.system_counterexample import SystemStep
from chunkproof.source.encoder_run import EncoderRun
from chunkproof.source.releases import release_root
from chunkproof.spec.scheduler_step import MAX_SEQS, shared_encoder, step_loop_rules
from chunkproof.spec.scheduler_trace import run_instance

pytestmark = pytest.mark.fidelity

SEED = 20_261_202
INSTANCES = 25


@pytest.fixture(scope="module", params=ENCODER_RELEASES)
def release(request: pytest.FixtureRequest) -> Release:
    """One release of the encoder variants (fetched once per machine)."""
    return load_release(request.param)


def _native(function: Callable[..., Any], args: list[Any]) -> Any:
    return function(*args)


def draw_instance(rng: random.Random, release: Release) -> tuple[Config, Config]:
    """Two requests of one engine, both with encoder items, at vLLM's compute budget (b0 =
    C): the first as the single-request fidelity test draws it, the second with the items,
    prompt and admission start of another draw, accepted by the release; half of them with
    the cache at the largest item (vLLM's least), so that the requests contend for it."""
    while True:
        first = replace(draw_config(rng, release.minor), encoder_budget=0, threshold=0)
        other = draw_config(rng, release.minor)
        start = other.start if other.start % first.block == 0 else 0
        largest = max(length for _, length in (*first.items, *other.items))
        cache = largest if rng.random() < 0.5 else first.encoder_cache
        try:
            first = replace(first, encoder_cache=cache)
            second = replace(first, items=other.items, prompt=other.prompt, start=start)
        except ConfigError:
            continue
        accepts = release.builtin.accepts
        if accepts(first) is None and accepts(second) is None:
            return first, second


class RealScheduler:
    """The requests of ``instance`` under the release's loops and real, shared encoder cache
    (module docstring)."""

    def __init__(self, release: Release, instance: tuple[Config, ...]) -> None:
        self.policy = release.interpreted
        self.rules = step_loop_rules(self.policy)
        self.instance = instance
        capacity, budget = shared_encoder(instance)
        runs: list[EncoderRun] = []
        for label, cfg in enumerate(instance):
            view = step_view(cfg, cfg.start, _native)
            runs.append(
                EncoderRun(
                    release_root(release.version),
                    list(cfg.items),
                    capacity,
                    budget,
                    view.eagle,
                    cfg.lookahead,
                    shared=runs[0] if runs else None,
                    request_id=f"request-{label}",
                )
            )
        self.runs = runs
        self.c = [cfg.start for cfg in instance]
        self.contended = False
        """Whether an encoder call cut a chunk while another request's entries were
        referenced."""
        self.decoded = False
        """Whether a request decoded past its prefill end, an entry of it still
        referenced."""

    def chunk(self, label: int, budget: int) -> tuple[int, int]:
        """The request's stages at its c offered ``budget``, the real encoder call in the
        encoder's place; (chunk, the split's value). A chunk > 0 allocates what the call
        scheduled."""
        cfg, c = self.instance[label], self.c[label]
        view = step_view(cfg, c, _native)
        n, split = budget, budget
        inputs: list[int] = []
        duplicates: list[int] = []
        for stage in self.policy.stages:
            if stage.name == "encoder":
                wanted = n
                inputs, n, duplicates = self.runs[label].encode(c, n)
                held, _, _ = self.runs[label].referenced()
                others = any(not h.startswith(f"request-{label}/") for h in held)
                self.contended |= n < wanted and others
            else:
                n = stage.function(view, c, n)
            if stage.name == "split":
                split = n
        if n > 0:
            self.runs[label].allocate(inputs, duplicates)
        return n, split

    def run(self, arrival: tuple[int, ...], budgets: list[int]) -> list[tuple[int, ...]]:
        """c of every request before each step, offered ``budgets`` in order, until every
        request has finished or a step schedules nothing. A request past its prefill end
        whose entries the real ``_free_encoder_inputs`` has not freed every item of stays in
        the running list, decoding: the running loop runs its decode step (1 token, outside
        the budget) while budget is left; once they are freed it finishes (at c = E, as the
        model writes it)."""
        running: list[int] = []
        waiting = list(arrival)
        seen = []
        for budget in budgets:
            seen.append(tuple(self.c))
            left, scheduled, decoded = budget, {}, []
            for label in list(running):
                if left <= 0:
                    break
                if self.c[label] >= self.instance[label].prefill_end:
                    decoded.append(label)
                    continue
                n, _ = self.chunk(label, left)
                if n == 0:
                    if self.rules.running == "break":
                        break
                    continue
                scheduled[label] = n
                left -= n
            for label in list(waiting):
                if left <= 0 or len(running) >= MAX_SEQS:
                    break
                n, split = self.chunk(label, left)
                if n == 0:
                    if (self.rules.split if split <= 0 else self.rules.later) == "break":
                        break
                    continue
                waiting.remove(label)
                running.append(label)
                scheduled[label] = n
                left -= n
            self.decoded |= bool(decoded)
            for label, n in [*scheduled.items(), *((label, 1) for label in decoded)]:
                self.c[label] += n
                self.runs[label].computed(self.c[label])
                end = self.instance[label].prefill_end
                if self.c[label] >= end and not self.runs[label].holds():
                    running.remove(label)
                    self.runs[label].finished()
                    self.c[label] = end
            if not (scheduled or decoded) or not running + waiting:
                break
        return seen


@pytest.mark.parametrize("release", ENCODER_RELEASES, indirect=True)
def test_two_requests_share_the_real_encoder_cache(release: Release) -> None:
    """Every step, the model's c of each request is the real scheduler's (module docstring);
    the sample has steps where a request's call is refused while the other's entries fill the
    cache."""
    rng = random.Random(f"{SEED}-{release.version}")
    tally: Counter[str] = Counter()
    for _ in range(INSTANCES):
        instance = draw_instance(rng, release)
        whole = instance[0].max_sched
        for budgets in ([whole] * 400, [rng.randint(1, whole) for _ in range(30)] + [whole] * 400):
            arrival = tuple(rng.sample(range(2), 2))
            real = RealScheduler(release, instance)
            try:
                seen = real.run(arrival, budgets)
            except (AssertionError, PolicyCrash):
                tally["crash"] += 1
                continue
            steps = run_instance(release.builtin, instance, arrival, budgets, MAX_SEQS).steps
            ours = [tuple(r.c for r in s.requests) for s in steps]
            assert ours == seen[: len(ours)] and len(ours) == len(seen), (
                f"{[cfg.describe() for cfg in instance]} arrival={arrival} "
                f"budgets={budgets[:40]}: model {ours}, real {seen}"
            )
            assert consistent(steps)
            tally["runs"] += 1
            stuck = real.c[0] < instance[0].prefill_end or real.c[1] < instance[1].prefill_end
            tally["stuck" if stuck else "finished"] += 1
            tally["contended"] += real.contended
            tally["decoded"] += real.decoded
    assert tally["runs"] >= INSTANCES, tally
    # an item that ends within the free margin of E outlives the prefill in 0.24-0.32 only
    assert (tally["decoded"] > 0) == (24 <= release.minor <= 32), tally
    assert tally["finished"] >= INSTANCES // 2, tally
    assert tally["contended"] >= INSTANCES // 5, tally


IMAGE_AT_END = Config(
    block=4,
    prompt=12,
    max_sched=8,
    lookahead=2,
    drop=True,
    encoder_cache=4,
    items=Items(((8, 4),)),
)
"""A request whose image [8, 12) ends its prompt, with L = 2 and a cache of that one image."""


@pytest.mark.parametrize(
    ("release", "expected"),
    [
        ("0.28.0", [(0, 0, 0), (8, 0, 0), (12, 0, 0), (13, 0, 0), (12, 0, 0)]),
        ("0.33.0", [(0, 0, 0), (8, 0, 0), (12, 0, 0), (12, 4, 0), (12, 8, 0)]),
    ],
    indirect=["release"],
)
def test_an_image_at_the_prompt_end_is_held_through_decode_steps(
    release: Release, expected: list[tuple[int, ...]]
) -> None:
    """Known answer, model and real code alike: the image request finishes its prefill in
    step 1 (budgets 8, 4); 0.28 frees its image only at c >= 12 + L = 14, so through its
    first two decode steps it holds the whole cache: the request behind it with an image at
    0 gets nothing, its zero breaks the waiting loop and the text request behind that is
    blocked (HOL in step 2) until the image is freed after step 3. 0.33 frees it at c = 12,
    so the second request is admitted in step 2."""
    instance = (
        IMAGE_AT_END,
        replace(IMAGE_AT_END, items=Items(((0, 4),))),
        replace(IMAGE_AT_END, items=Items(())),
    )
    budgets = [8, 4, 4, 4, 4]
    real = RealScheduler(release, instance)
    assert real.run((0, 1, 2), budgets) == expected
    assert real.decoded == (release.minor == 28)
    steps = run_instance(release.builtin, instance, (0, 1, 2), budgets, MAX_SEQS).steps
    assert [tuple(r.c for r in s.requests) for s in steps] == expected
    assert steps[2].requests[0].queue == ("decoding" if release.minor == 28 else "finished")
    assert ("HOL" in steps[2].breaks) == (release.minor == 28)


def consistent(steps: tuple[SystemStep, ...]) -> bool:
    """Every request a loop reached in the trace has the stage values (from the concrete
    step, with the cache the others referenced) that give the chunk the model took."""
    return all(
        r.stages is None or (r.stages.chunk > 0) == r.scheduled for s in steps for r in s.requests
    )


HOLDER = Config(block=4, prompt=6, max_sched=8, items=Items(((2, 4),)))
"""A request whose image [2, 6) ends its prompt: it holds the image's entry until it finishes."""
BEHIND = Config(block=4, prompt=12, max_sched=8, items=Items(((2, 4),)))
"""A request with the same image position and a longer prompt."""


@pytest.mark.parametrize(
    ("release", "contended"),
    [("0.24.0", [(0, 0), (4, 0), (6, 0), (6, 8)]), ("0.28.0", [(0, 0), (4, 0), (6, 2), (6, 4)])],
    indirect=["release"],
)
def test_a_held_image_leaves_no_room_for_the_next(
    release: Release, contended: list[tuple[int, int]]
) -> None:
    """Known answer, model and real code alike: budgets 4, 8, 8, 8; the first request encodes
    its image in step 1 and holds it through step 2, where it finishes. With a cache of 4
    embeddings (the largest item: vLLM's least) the second request's image has no room in
    step 2: the encoder cuts its chunk to the 2 tokens before the image, which the split then
    floors to 0 where it runs first (0.24-0.27) and keeps where it runs after (0.28), and the
    image waits for step 3. With a cache of 8 both images fit: the second request takes 4
    tokens in step 2."""
    budgets = [4, 8, 8, 8]
    for cache, expected in ((4, contended), (8, [(0, 0), (4, 0), (6, 4)])):
        instance = (replace(HOLDER, encoder_cache=cache), replace(BEHIND, encoder_cache=cache))
        steps = run_instance(release.builtin, instance, (0, 1), budgets, MAX_SEQS).steps
        assert [tuple(r.c for r in s.requests) for s in steps][: len(expected)] == expected
        assert consistent(steps)
        second = steps[1].requests[1].stages  # the encoder cuts to the image only when full
        assert second is not None and (second.encoder == 2) == (cache == 4)
        assert RealScheduler(release, instance).run((0, 1), budgets)[: len(expected)] == expected


TWO_IMAGES = Config(
    block=1,
    prompt=12,
    max_sched=8,
    lookahead=1,
    drop=True,
    threshold=4,
    items=Items(((2, 4), (6, 4))),
    encoder_cache=8,
)
"""Two adjacent images of 4 embeddings, a cache that holds both (8), a static threshold of 4
tokens a step and L = 1: alone, the request never livelocks."""


@pytest.mark.parametrize("release", ["0.28.0"], indirect=True)
def test_two_requests_deadlock_on_the_cache_in_the_real_code(release: Release) -> None:
    """The deadlock `chunkproof system` finds on 0.28 (docs/guide.md, "Two requests, one encoder
    cache"), on the real code: budgets 6 and 4 leave both requests at c = 5, each holding its
    first image (0.28 frees an image only once c >= its end + L = 7) while its second has no
    room; every budget after that schedules nothing. The model's trace is the same."""
    budgets = [6, 4, 8, 8, 8]
    real = RealScheduler(release, (TWO_IMAGES, TWO_IMAGES))
    seen = real.run((0, 1), budgets)  # it stops at the first step that schedules nothing
    assert seen == [(0, 0), (4, 2), (5, 5)] and real.c == [5, 5]
    assert real.contended
    steps = run_instance(release.builtin, (TWO_IMAGES, TWO_IMAGES), (0, 1), budgets, MAX_SEQS).steps
    assert [tuple(r.c for r in s.requests) for s in steps] == seen
    assert "S-LIVE" in steps[-1].breaks
