"""Fidelity: every built-in release variant against the real code of its release (SPEC V).

For the first release of every built-in variant (0.15.0 ... 0.33.0) the real
``Scheduler._mamba_block_aligned_split`` and ``_reserve_prefill_lookahead`` are read from the
release's own source (fetched once into the user cache by ``release_root``; vLLM is never
imported) and run two independent ways:

(a) chunkproof's interpreter over the source: the policy ``vllm==X.Y.Z``
    (:func:`~chunkproof.source.loading.resolve_policy`) stepped by
    :func:`~chunkproof.model.step.step`;
(b) CPython itself: the methods compiled by :func:`~chunkproof.source.extraction.extract` (the
    exec-based loader of the generated repros; acceptable here, release code is trusted) and
    called on stand-ins holding the same attributes, with the call site's arguments computed
    here from the history note (the waiting loop admits at c = c0 with
    ``num_computed_tokens`` 0 and passes the local hit c0 - x, the external hit x and, in
    0.24-0.25, u; the running loop passes ``num_computed_tokens`` = c and no hits).

Whole steps are compared on seeded random inputs covering every input of
:class:`~chunkproof.model.config.Config` (G != B, H, B_s, L, L_h, D, F, S, J, K and alpha, u,
T > P, R, c0 with local and external parts, M and theta), P0 crashes included (V1 and V2 assert
x = 0): the built-in variant equals (a) on every configuration the release accepts (SPEC S1b),
and (a) equals (b) everywhere, crash lines included, which ties the interpreter's semantics to
Python's. Outcome tallies per release are checked against floors, so a generator that stops
reaching a branch fails. ``conform vllm-0.NN --against vllm==0.NN.0`` must be EQUAL on small
ranges of every input the release has (the symbolic and the vectorised forms of the source).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import traceback
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from boundary_steps import BOUNDARY_STEPS
from cli_helpers import Cli
from solver_limits import SOLVER_ARGS

from chunkproof.model.arith import ck30, ck32, ck33, valid
from chunkproof.model.builtin import builtin_policies, get_builtin, policy_for_release
from chunkproof.model.config import Config
from chunkproof.model.errors import ConfigError, PolicyError
from chunkproof.model.policy import Policy
from chunkproof.model.splits import max_chunk
from chunkproof.model.step import Step, step, step_view
from chunkproof.model.subset import StandInError
from chunkproof.source.extraction import (
    REQUEST_LABEL,
    SCHEDULER_FILE,
    SCHEDULER_LABEL,
    DirectoryTree,
    Extracted,
    extract,
    standin_tree,
)
from chunkproof.source.loading import resolve_policy
from chunkproof.source.methods import Hits, load_scheduler, standin_attributes
from chunkproof.source.releases import MANIFEST, release_root

pytestmark = pytest.mark.fidelity

RELEASES = tuple(p.releases[0] for p in builtin_policies() if p.releases)
"""The first release of every built-in variant."""
CASES = 3_000
SEED = 20_261_201
WILD = 0.15
"""Share of inputs drawn without regard to what the release accepts (compared (a) to (b))."""
LARGE_BLOCKS = (528, 800, 1600, 2096)
QUICK = SOLVER_ARGS
"""Generous per-query solver time for conform: a loaded machine must not turn EQUAL into
UNKNOWN."""


@dataclass(frozen=True)
class Release:
    """One release: its built-in variant, its source as a policy (a) and compiled (b)."""

    version: str
    minor: int
    builtin: Policy
    interpreted: Policy
    compiled: Extracted


@pytest.fixture(scope="module", params=RELEASES)
def release(request: pytest.FixtureRequest) -> Release:
    """Fetch (once per machine) and read one release (once per test module)."""
    return load_release(request.param)


def load_release(version: str) -> Release:
    """One release, its wheel fetched once per machine."""
    root = release_root(version)
    return Release(
        version,
        int(version.split(".")[1]),
        policy_for_release(version),
        resolve_policy(f"vllm=={version}"),
        extract(DirectoryTree(root)),
    )


# --- random inputs ---------------------------------------------------------------------------


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _near(rng: random.Random, grid: int, top: int) -> int:
    """A position in [0, top] at or next to a multiple of ``grid``, or anywhere in it."""
    top = max(top, 0)
    base = rng.randint(0, top // grid) * grid
    offset = rng.choice((0, 0, 0, 1, -1, grid - 1, rng.randint(0, grid - 1)))
    return min(max(base + offset, 0), top)


def _block(rng: random.Random) -> int:
    """B: mostly small (where every branch is cheap to reach), some production sizes."""
    r = rng.random()
    if r < 0.6:
        return rng.randint(1, 64)
    if r < 0.85:
        return rng.choice((16, 32, 64, 128))
    return rng.choice(LARGE_BLOCKS)


def _grids(rng: random.Random, minor: int, wild: bool) -> dict[str, Any]:
    """B, G, H, B_s and F. G is B or a divisor of B (0.26+: the least prefix-cacheable block,
    vLLM #54076), H a divisor of both; ``wild`` also draws G and H anywhere."""
    b = _block(rng)
    r = rng.random()
    if r < 0.55:
        g = b
    elif r < 0.85 or not wild:
        g = rng.choice(_divisors(b))
    else:
        g = rng.choice((b * rng.randint(2, 3), rng.randint(1, 2 * b)))
    common = math.gcd(b, g)
    h = rng.choice(_divisors(common)) if rng.random() < 0.6 else 0
    if wild and rng.random() < 0.2:
        h = rng.randint(1, b)
    fields: dict[str, Any] = {"block": b, "split_block": g, "hash_block": h}
    if rng.random() < 0.25:
        fields["sched_block"] = math.lcm(b, g) * rng.randint(2, 3)
    resolved_h = h or g
    if minor < 26 and not wild:
        fields["partial_hits"] = False
    elif rng.random() < 0.3:
        fields["partial_hits"] = resolved_h < b if not wild else rng.random() < 0.5
    return fields


def _lookaheads(rng: random.Random, minor: int, wild: bool) -> dict[str, Any]:
    """L, D and L_h as the release sets them (D is use_eagle up to 0.29; L_h = 0 or L in
    0.33, and D is then off)."""
    lookahead = rng.choice((0, 0, 1, 1, rng.randint(2, 8)))
    if wild:
        return {
            "lookahead": lookahead,
            "drop": rng.random() < 0.5,
            "hash_lookahead": rng.choice((0, lookahead, rng.randint(0, 8))),
        }
    drop = lookahead >= 1 if minor <= 29 else lookahead >= 1 and rng.random() < 0.6
    hash_lookahead = lookahead if minor >= 33 and lookahead >= 1 and rng.random() < 0.4 else 0
    return {
        "lookahead": lookahead,
        "drop": drop and not hash_lookahead,
        "hash_lookahead": hash_lookahead,
    }


def _lengths(rng: random.Random, fields: dict[str, Any]) -> dict[str, int]:
    """P and T (T > P: a resumed request replaying output tokens)."""
    b, g = fields["block"], fields["split_block"]
    grid = rng.choice((b, g, fields["hash_block"] or g))
    prompt = max(1, _near(rng, grid, 6 * max(b, g) + b // 2))
    extra = rng.choice((0, 0, 0, 1, rng.randint(1, 8), rng.randint(1, 2 * b + 8)))
    return {"prompt": prompt, "tokens": prompt + extra}


def _admission(rng: random.Random, fields: dict[str, Any], minor: int) -> dict[str, int]:
    """c0 and its external part x: on or next to a grid, near E, or anywhere below E."""
    big_e = max(fields["prompt"], fields["tokens"] - 1)
    r = rng.random()
    if r < 0.3:
        return {"start": 0}
    if r < 0.65:
        h = fields["hash_block"] or fields["split_block"]
        grid = rng.choice((fields["block"], fields["split_block"], h))
        start = _near(rng, grid, big_e - 1)
    else:
        start = max(big_e - rng.randint(1, 2 * fields["block"] + 8), 0)
    external = 0
    no_connector = minor >= 33 and fields["hash_lookahead"] > 0
    if rng.random() < 0.5 and not no_connector:
        external = rng.choice((start, rng.randint(0, start), start % fields["block"]))
    return {"start": start, "external": external}


def _features(rng: random.Random, fields: dict[str, Any], minor: int, wild: bool) -> None:
    """J, S, K, alpha, u, R, M and theta, where the release has them (all of them when
    ``wild``); ``fields`` is completed in place."""
    b, g, t = fields["block"], fields["split_block"], fields["tokens"]
    h = fields["hash_block"] or g
    on = wild or minor >= 26
    if on and rng.random() < 0.5:
        grid = rng.choice((b, g, h))
        fields["junction"] = rng.choice((rng.randint(0, t), _near(rng, grid, t)))
    if (wild or minor >= 29) and rng.random() < 0.45:
        fields["checkpoints"] = not (minor == 29 and fields["drop"] and not wild)
    if fields.get("checkpoints") or rng.random() < 0.2:
        fields["checkpoint_alignment"] = rng.choice((1, 1, 8, 16, 64, h, b, 0))
    partial = fields.get("partial_hits", h < b)
    drop_setting = fields["drop"] or fields["hash_lookahead"] > 0
    s_possible = partial and fields["lookahead"] == 1 and drop_setting
    if (wild or (minor >= 30 and s_possible)) and rng.random() < 0.5:
        fields["exact_junction"] = True
    if (wild or minor in (24, 25)) and rng.random() < 0.6:
        fields["uncached_prefix"] = rng.choice((_near(rng, b, t), rng.randint(0, t)))
    sched_block = fields.get("sched_block", math.lcm(b, g))
    if (
        (fields["drop"] or fields["hash_lookahead"])
        and sched_block < fields["lookahead"]
        and not wild
    ):
        fields["sched_block"] = sched_block * fields["lookahead"]
        sched_block = fields["sched_block"]
    if (wild or minor >= 29) and rng.random() < 0.3:
        retention = sched_block * rng.randint(0, 3)
        fields["retention"] = (
            retention if not wild else rng.choice((retention, rng.randint(0, 3 * b)))
        )
    old = minor <= 26 and not wild
    fields["max_sched"] = rng.choice(
        (rng.randint(1, 2 * b), g, rng.randint(g, 8 * max(g, 1)), 16384)
    )
    if minor >= 17 and old:
        fields["max_sched"] = max(fields["max_sched"], g)
    if rng.random() < 0.45:
        theta = rng.choice((rng.randint(1, 2 * b), b, g))
        fields["threshold"] = max(theta, g) if old else theta


def draw_config(rng: random.Random, minor: int, wild: bool) -> Config:
    """A well-formed configuration; unless ``wild`` one that release 0.``minor`` accepts at
    least most of the time (the caller draws again when it does not)."""
    while True:
        fields = _grids(rng, minor, wild)
        fields |= _lookaheads(rng, minor, wild)
        fields |= _lengths(rng, fields)
        fields |= _admission(rng, fields, minor)
        _features(rng, fields, minor, wild)
        try:
            return Config(**fields)
        except ConfigError:
            continue


def draw_state(rng: random.Random, cfg: Config) -> int:
    """c: the admission start c0 (the waiting loop) or a later state (the running loop),
    on or next to a grid, near E, at or past E."""
    if rng.random() < 0.4:
        return cfg.start
    big_e = cfg.prefill_end
    if cfg.checkpoints and rng.random() < 0.5:  # internal checkpoints: H-aligned, 2 blocks back
        last = max((big_e - 2 * cfg.split_block) // cfg.hash_block, 0)
        return max(cfg.hash_block * rng.randint(0, last), cfg.start + 1)
    grid = rng.choice((cfg.block, cfg.split_block, cfg.hash_block))
    r = rng.random()
    if r < 0.5:
        c = _near(rng, grid, big_e)
    elif r < 0.85:
        c = big_e - rng.randint(0, 2 * cfg.block + 8)
    else:
        c = rng.randint(0, cfg.tokens)
    return max(c, cfg.start + 1)


def draw_budget(rng: random.Random, cfg: Config, c: int) -> int:
    """b in [1, M], mostly aimed at an end on a grid, at E, in the window (T - L, T), at the
    checkpoint limit, at J, or past T."""
    t, g = cfg.tokens, cfg.split_block
    wiggle = rng.choice((-1, 0, 0, 1))
    r = rng.random()
    if cfg.checkpoints and rng.random() < 0.4:  # a final chunk: internal checkpoints
        end = cfg.prefill_end + rng.randint(0, 3)
    elif r < 0.3:
        end = (c // g + rng.randint(1, 3)) * g + wiggle
    elif r < 0.5:
        end = rng.choice((cfg.prefill_end, t - rng.randint(0, cfg.lookahead + 1))) + wiggle
    elif r < 0.6:
        end = (t - rng.choice((0, 1, cfg.hash_lookahead))) // g * g + wiggle
    elif r < 0.65:
        end = cfg.junction + wiggle
    elif r < 0.75:
        end = t + rng.randint(0, 2 * g)
    else:
        end = c + rng.randint(1, 3 * max(g, cfg.block))
    if rng.random() < 0.15:
        return rng.randint(1, cfg.max_sched)
    return min(max(end - c, 1), cfg.max_sched)


@dataclass(frozen=True)
class Case:
    """One step to compare: configuration, state, offered budget."""

    cfg: Config
    c: int
    budget: int
    wild: bool

    def __str__(self) -> str:
        return f"{self.cfg.describe()} c={self.c} b={self.budget}"


def cases(release: Release) -> Iterator[Case]:
    """CASES inputs seeded by the release; the non-wild ones the release accepts."""
    rng = random.Random(f"{SEED}-{release.version}")
    for _ in range(CASES):
        wild = rng.random() < WILD
        cfg = draw_config(rng, release.minor, wild)
        while not wild and release.builtin.accepts(cfg) is not None:
            cfg = draw_config(rng, release.minor, wild)
        c = draw_state(rng, cfg)
        yield Case(cfg, c, draw_budget(rng, cfg, c), wild)


# --- (b): the real methods compiled by CPython -----------------------------------------------

CRASHES = (AssertionError, ArithmeticError)


def _where(exc: BaseException) -> str:
    """``file:line`` of the innermost frame of a crash."""
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{frame.filename}:{frame.lineno}"


def compiled_step(release: Release, cfg: Config, c: int, budget: int) -> Step:
    """One step with the real methods run by CPython, the stages in the order the source
    policy composes them. The budget cap is chunkproof's (the source policy runs the same
    function); the encoder cap passes its input through (these configurations have no
    encoder items); the call site's arguments follow the history note (module docstring),
    computed here, not taken from the step view."""
    view = step_view(cfg, c, lambda function, args: function(*args))
    admission = c == cfg.start
    computed = 0 if admission else c
    local, external = (cfg.start - cfg.external, cfg.external) if admission else (0, 0)
    uncached = [cfg.uncached_prefix if admission else 0]
    attributes, request_attributes = standin_attributes(view)
    me: Any = standin_tree(SCHEDULER_LABEL, attributes, release.compiled.scheduler_type)
    request = standin_tree(REQUEST_LABEL, {**request_attributes, "num_computed_tokens": computed})
    extra = uncached if release.compiled.takes_uncached_prefix else []
    names = [stage.name for stage in release.interpreted.stages]
    values: dict[str, int] = {}
    crash = None
    n = budget
    for stage in release.interpreted.stages:
        try:
            if stage.name == "split":
                n = me._mamba_block_aligned_split(request, n, local, external, *extra)
            elif stage.name == "reservation":
                n = me._reserve_prefill_lookahead(request, c, n)
            elif stage.name == "cap":
                n = stage.function(view, c, n)
            else:
                assert stage.name == "encoder" and not getattr(cfg, "has_items", False)
        except CRASHES as exc:
            crash = _where(exc)
            for later in names[names.index(stage.name) :]:
                values[later] = 0
            n = 0
            break
        values[stage.name] = n
    return _step(c, budget, values, n, crash, names)


def _step(
    c: int, budget: int, values: dict[str, int], chunk: int, crash: str | None, names: list[str]
) -> Step:
    """A :class:`Step` from the stage values (a stage the policy lacks passes its input
    through, in the order the policy applies its stages)."""
    first = (
        "encoder" in names and "split" in names and names.index("encoder") < names.index("split")
    )
    order = ("cap", "encoder", "split", "reservation") if first else STAGES
    filled: dict[str, int] = {}
    current = budget
    for name in order:
        current = values.get(name, current)
        filled[name] = current
    extra = {"encoder_first": first} if "encoder_first" in STEP_FIELDS else {}
    return Step(
        c,
        budget,
        filled["cap"],
        filled["split"],
        filled["encoder"],
        filled["reservation"],
        chunk,
        crash,
        **extra,
    )


STAGES = ("cap", "split", "encoder", "reservation")
STEP_FIELDS = {f.name for f in dataclasses.fields(Step)}


def same_step(a: Step, b: Step) -> bool:
    """Equal stage values, and both crash or neither does."""
    values = dataclasses.replace(a, crash=None) == dataclasses.replace(b, crash=None)
    return values and (a.crash is None) == (b.crash is None)


# --- outcome tallies -------------------------------------------------------------------------


def internal_checkpoint(minor: int, cfg: Config, c: int, e: int) -> bool:
    """I of history note section 3 (V6-V9) at (c, e), for tallying only."""
    big_e = cfg.prefill_end
    g = cfg.split_block
    if minor == 29:
        return cfg.checkpoints and c % g == 0 and c < big_e
    if minor < 29 or not cfg.checkpoints or e < big_e:
        return False
    grid = cfg.hash_block if cfg.partial_hits else cfg.sched_block
    if minor <= 31:
        p = ck30(big_e, cfg.hash_block, cfg.drop)
    elif minor == 32:
        p = ck32(big_e, grid, cfg.drop)
    else:
        p = ck33(big_e, grid, cfg.drop, cfg.hash_lookahead)
    return valid(c, e, p, cfg.hash_block, g, cfg.checkpoint_alignment)


def outcomes(release: Release, case: Case, real: Step) -> list[str]:
    """The branch-level facts one case exercised (floors below)."""
    cfg, c, n = case.cfg, case.c, real.n
    tags = ["wild" if case.wild else "accepted"]
    g = cfg.split_block
    if c == cfg.start:
        tags.append("admission")
        if cfg.external:
            tags.append("admission with an external hit")
        if cfg.start - cfg.external:
            tags.append("admission with a local hit")
    else:
        tags.append("running loop")
        if cfg.external:
            tags.append("running after an external hit")
    if real.crash is not None:
        tags.append("crash")
        return tags
    for name, holds in (
        ("G != B", g != cfg.block),
        ("H < G", cfg.hash_block < g),
        ("B_s > lcm(B, G)", cfg.sched_block > math.lcm(cfg.block, g)),
        ("T > P", cfg.tokens > cfg.prompt),
        ("L_h > 0", cfg.hash_lookahead > 0),
        ("retention", cfg.retention >= 0),
        ("exact junction", cfg.exact_junction),
        ("u >= G at admission", c == cfg.start and cfg.uncached_prefix >= g),
    ):
        if holds:
            tags.append(name)
    if c >= cfg.prefill_end:
        return [*tags, "c >= E"]
    split, end = real.split, c + real.split
    if c % g:
        tags.append("mid-block start")
    if 0 < split < n:
        tags.append("cut on grid" if end % g == 0 else "cut off grid")
    if n > 0 and split == 0:
        tags.append("cut to 0")
    if split == n and c + n >= cfg.prefill_end and (c + n) % g:
        tags.append("final chunk off grid")
    if (
        release.minor >= 27
        and g > max_chunk(cfg)
        and 0 < split
        and end % g
        and end < cfg.prefill_end
    ):
        tags.append("sub-block advance")
    if c < cfg.junction < c + n:
        tags.append("J inside")
    if internal_checkpoint(release.minor, cfg, c, c + n):
        tags.append("internal checkpoint")
    if real.reservation < real.split:
        tags.append("reservation trims" if real.reservation else "reservation to 0")
    return tags


FLOORS = {
    "accepted": 0.75,
    "wild": 0.1,
    "admission": 0.3,
    "admission with an external hit": 0.05,
    "admission with a local hit": 0.1,
    "running loop": 0.4,
    "running after an external hit": 0.1,
    "G != B": 0.15,
    "H < G": 0.1,
    "B_s > lcm(B, G)": 0.05,
    "T > P": 0.2,
    "c >= E": 0.03,
    "mid-block start": 0.1,
    "cut on grid": 0.05,
    "cut off grid": 0.005,
    "cut to 0": 0.01,
    "final chunk off grid": 0.03,
}
"""Least fraction of cases per outcome, for every release."""
LATER_FLOORS: dict[tuple[int, int], dict[str, float]] = {
    (15, 22): {"crash": 0.05},
    (24, 25): {"u >= G at admission": 0.05},
    (26, 33): {"J inside": 0.05},
    (27, 33): {"sub-block advance": 0.005},
    (28, 33): {"reservation trims": 0.005, "reservation to 0": 0.003},
    (29, 33): {"internal checkpoint": 0.008, "retention": 0.1},
    (30, 33): {"exact junction": 0.01},
    (33, 33): {"L_h > 0": 0.05},
}
"""Floors for outcomes that exist in some releases only (first and last minor version)."""


def floors(minor: int) -> dict[str, float]:
    merged = dict(FLOORS)
    for (first, last), extra in LATER_FLOORS.items():
        if first <= minor <= last:
            merged.update(extra)
    return merged


# --- the comparisons -------------------------------------------------------------------------


def test_release_steps_match_builtin_interpreter_and_cpython(release: Release) -> None:
    """Whole steps, crashes included: built-in == (a) == (b) everywhere, configurations the
    release refuses included (the same code runs on them: 0 mismatches), with the same crash
    line."""
    tally: Counter[str] = Counter()
    builtin_mismatch: list[str] = []
    python_mismatch: list[str] = []
    for case in cases(release):
        interpreted = step(release.interpreted, case.cfg, case.c, case.budget)
        compiled = compiled_step(release, case.cfg, case.c, case.budget)
        builtin = step(release.builtin, case.cfg, case.c, case.budget)
        tally.update(outcomes(release, case, interpreted))
        crash_line_differs = compiled.crash is not None and not str(interpreted.crash).startswith(
            f"{compiled.crash}:"
        )
        if not same_step(interpreted, compiled) or crash_line_differs:
            python_mismatch.append(f"{case}: interpreted {interpreted}, CPython {compiled}")
        if not same_step(builtin, interpreted):
            builtin_mismatch.append(f"{case}: real {interpreted}, built-in {builtin}")
    name = f"{release.version} ({release.builtin.name})"
    assert not python_mismatch, (
        f"{name}: interpreter and CPython differ on {len(python_mismatch)} of {CASES}; "
        f"first: {python_mismatch[0]}"
    )
    assert not builtin_mismatch, (
        f"{name}: the built-in variant differs from the real code on {len(builtin_mismatch)} "
        f"inputs of {CASES}; first: {builtin_mismatch[0]}"
    )
    low = {k: tally[k] for k, f in floors(release.minor).items() if tally[k] < f * CASES}
    assert not low, f"{name}: outcomes below their floor: {low} (all: {dict(tally)})"


def test_call_site_arguments_are_those_of_the_loops(release: Release) -> None:
    """The step view passes what the two loops of ``schedule()`` pass: the hits (and u) at
    admission only, ``num_computed_tokens`` 0 there and c after (history note section 2)."""
    cfg = Config(block=16, prompt=80, max_sched=64, start=40, external=8, uncached_prefix=32)
    at = step_view(cfg, 40, lambda function, args: function(*args))
    after = step_view(cfg, 48, lambda function, args: function(*args))
    assert (at.computed, at.local, at.external, at.uncached_prefix) == (0, 32, 8, 32)
    assert (after.computed, after.local, after.external, after.uncached_prefix) == (48, 0, 0, 0)
    stage = release.interpreted.stage("split")
    assert stage is not None and stage.source is not None
    arguments = stage.arguments(at, 40, 24)
    uncached = [32] if release.compiled.takes_uncached_prefix else []
    assert arguments[2:] == [24, 32, 8, *uncached]
    assert release.compiled.takes_uncached_prefix == (release.minor in (24, 25))


def test_external_hit_asserts_at_admission_only(release: Release) -> None:
    """V1 and V2 assert x = 0 (the waiting loop passes x); the built-in asserts too (P0),
    and after admission the running loop passes no hit, so nothing asserts."""
    cfg = Config(block=16, prompt=80, max_sched=64, start=32, external=16, lookahead=1, drop=True)
    for c in (32, 48):
        real = step(release.interpreted, cfg, c, 16)
        compiled = compiled_step(release, cfg, c, 16)
        builtin = step(release.builtin, cfg, c, 16)
        crashes = c == 32 and release.minor <= 22
        assert (real.crash is not None, compiled.crash is not None) == (crashes, crashes)
        assert (builtin.crash is not None, builtin.unsafe is not None) == (crashes, crashes)
        assert same_step(real, builtin) and same_step(real, compiled)


# --- conform, through the CLI ----------------------------------------------------------------


CLASSIC_RANGES = (
    "--block 4,8 --split-block B,B/2 --lookahead 0-3 --drop both --prompt 1-10 --tokens P,P+1 "
    "--start 0,external --max-sched 1-6"
)
"""The classic inputs with G != B, resumed requests and external admission hits."""


def feature_ranges(minor: int) -> str | None:
    """Small ranges of the optional inputs release 0.``minor`` has (None: it has none beyond
    the classic ones)."""
    if minor in (24, 25):
        return "--block 4,8 --lookahead 0-2 --prompt 1-12 --max-sched 4-8 --uncached-prefix 4,8"
    if minor < 26:
        return None
    flags = (
        "--block 8 --split-block B/2 --hash-block G/2 --lookahead 0-2 --prompt 1-12 "
        "--max-sched 1-6 --junction any --start 0,hash"
    )
    if minor >= 29:
        flags += " --checkpoints on --retention 0"
    if minor >= 30:
        flags += " --checkpoint-alignment 1,H --exact-junction both"
    if minor >= 33:
        flags += " --hash-lookahead 0,L"
    return flags


CONFORM_CASES = [
    pytest.param(version, ranges, id=f"{version}-{kind}")
    for version in RELEASES
    for kind, ranges in (
        ("classic", CLASSIC_RANGES),
        ("features", feature_ranges(int(version.split(".")[1]))),
    )
    if ranges is not None
]


@pytest.mark.parametrize(("version", "ranges"), CONFORM_CASES)
def test_conform_builtin_against_release_is_equal(version: str, ranges: str, cli: Cli) -> None:
    """``conform vllm-0.NN --against vllm==0.NN.0``: EQUAL over Z3 and the grid (exit 0)."""
    builtin = policy_for_release(version).name
    run = cli(
        "conform", builtin, "--against", f"vllm=={version}", *ranges.split(), *QUICK, "--json"
    )
    document = run.json()
    assert (run.code, document["status"], document["difference"]) == (0, "EQUAL", None), run.out
    assert document["range"]["z3"]["cells"] > 0
    assert document["range"]["grid"]["configs"] > 0
    assert len(document["source_sha256"][f"vllm=={version}"]) == 64


def test_conform_finds_a_difference_between_releases(cli: Cli) -> None:
    """Different releases: exit 1 with one input where the chunks differ, which a step of
    each policy at that input confirms."""
    argv = ["conform", "vllm-0.26", "--against", "vllm==0.33.0", "--block", "16"]
    run = cli(*argv, "--lookahead", "3", "--prompt", "1-64", "--max-sched", "1-16", "--json")
    difference = run.json()["difference"]
    assert run.code == 1 and difference["chunk_a"] != difference["chunk_b"]
    cfg = Config.from_dict(difference["config"])
    for name, key in (("vllm-0.26", "chunk_a"), ("vllm==0.33.0", "chunk_b")):
        taken = step(resolve_policy(name), cfg, difference["c"], difference["budget"])
        assert (taken.chunk if taken.unsafe is None else -1) == difference[key]


def test_release_cache_holds_only_the_needed_files(release: Release) -> None:
    """The cache entry: a manifest naming the wheel, a few small files, no wheel left behind."""
    root = release_root(release.version)
    manifest = json.loads((root / MANIFEST).read_text())
    assert manifest["wheel"].startswith(f"vllm-{release.version}")
    assert manifest["files"][SCHEDULER_FILE] == release.interpreted.source_sha256
    files = [p for p in root.rglob("*") if p.is_file()]
    assert sorted(str(p.relative_to(root)) for p in files) == sorted([*manifest["files"], MANIFEST])
    assert sum(p.stat().st_size for p in files) < 1_000_000
    assert not list(root.parent.glob("**/*.whl"))


# --- reading errors and strictness -----------------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    """A fake release root holding ``files``; the path of its scheduler.py."""
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path / SCHEDULER_FILE


def _one_line_error(scheduler_py: Path) -> str:
    """The PolicyError message of loading ``scheduler_py``, checked to be one line."""
    with pytest.raises(PolicyError) as info:
        load_scheduler(scheduler_py)
    message = str(info.value)
    assert "\n" not in message
    return message


SPLIT_DEF = "    def _mamba_block_aligned_split(self, request, n, local=0, external=0):\n"


def test_missing_split_method_is_one_line_error(tmp_path: Path) -> None:
    path = _tree(
        tmp_path, {SCHEDULER_FILE: "class Scheduler:\n    def schedule(self):\n        return 0\n"}
    )
    assert _one_line_error(path) == (
        f"{path}: class Scheduler has no method _mamba_block_aligned_split"
    )


def test_syntax_error_is_one_line_error_with_file_and_line(tmp_path: Path) -> None:
    path = _tree(
        tmp_path,
        {
            SCHEDULER_FILE: "class Scheduler:\n\n"
            "    def _mamba_block_aligned_split(self, r, n:\n"
            "        return n\n"
        },
    )
    assert _one_line_error(path).startswith(f"{path}:3: syntax error")


def test_unresolvable_helper_is_one_line_error(tmp_path: Path) -> None:
    path = _tree(
        tmp_path,
        {
            SCHEDULER_FILE: "from vllm.nowhere import helper\n\nclass Scheduler:\n"
            + SPLIT_DEF
            + "        return helper(n)\n"
        },
    )
    assert _one_line_error(path).startswith(f"{path}:1: cannot resolve 'helper'")


def test_helper_outside_the_subset_is_rejected_on_loading(tmp_path: Path) -> None:
    """A helper the methods reach is checked against the policy subset when the source is
    loaded, not at its first use."""
    path = _tree(
        tmp_path,
        {
            SCHEDULER_FILE: "from vllm.helpers import snap\n\nclass Scheduler:\n"
            + SPLIT_DEF
            + "        return snap(n)\n",
            "vllm/helpers.py": (
                "def snap(n):\n    for _ in range(2):\n        n = n - 1\n    return n\n"
            ),
        },
    )
    message = _one_line_error(path)
    assert "helpers.py:2: For is outside the policy subset" in message


FAKE_SCHEDULER = """\
from vllm.utils.grid import floor_to
from vllm.v1.kv_cache_interface import snap as snap_end


class Scheduler:
    def _mamba_block_aligned_split(
        self, request: "Request", num_new_tokens: int, local: int = 0, external: int = 0
    ) -> int:
        start: int = request.num_computed_tokens + local + external
        return snap_end(start + num_new_tokens, self._grid) - start

    @property
    def _grid(self) -> int:
        return self._scale() * self.cache_config.block_size

    def _scale(self) -> int:
        return 1

    @staticmethod
    def _unused() -> int:
        return floor_to(1, 1)

    def _reserve_prefill_lookahead(self, request, num_computed_tokens, num_new_tokens):
        return min(num_new_tokens, self.not_modelled)
"""
FAKE_HELPERS = {
    "vllm/v1/kv_cache_interface.py": "from vllm.utils import floor_to\n\n\n"
    "def snap(x: int, b: int) -> int:\n"
    "    return max(floor_to(x, b), 0)\n",
    "vllm/utils/__init__.py": "from vllm.utils.grid import floor_to\n",
    "vllm/utils/grid.py": "import torch\n\n\ndef floor_to(x, b):\n    return x // b * b\n",
}


def test_members_helpers_and_reexports_resolve_without_importing(tmp_path: Path) -> None:
    """self-members (a property and a method), helpers via a re-export; an unused import of
    a library (torch) is never resolved. The source runs as a policy: a step at admission
    (hits 2 + 1 passed as arguments) and one in the running loop."""
    path = _tree(tmp_path, {SCHEDULER_FILE: FAKE_SCHEDULER, **FAKE_HELPERS})
    methods = load_scheduler(path)
    assert not methods.takes_uncached_prefix and methods.has_reservation
    policy = resolve_policy(str(path), compose="C4")
    cfg = Config(block=16, prompt=49, max_sched=64, start=3, external=1)
    assert step(policy, cfg, 3, 40).split == 29  # ends at 32
    assert step(policy, cfg, 5, 30).split == 27  # ends at 32


def test_standins_refuse_unmodelled_attributes(tmp_path: Path) -> None:
    """Reading an attribute the stand-ins lack is an error naming it and its --set."""
    policy = resolve_policy(str(_tree(tmp_path, {SCHEDULER_FILE: FAKE_SCHEDULER, **FAKE_HELPERS})))
    assert policy.stage("reservation") is not None
    with pytest.raises(StandInError, match=r"reads self\.not_modelled.*--set self\.not_modelled="):
        step(policy, Config(block=16, prompt=49, max_sched=16), 0, 16)


def test_scheduler_methods_take_a_config(tmp_path: Path) -> None:
    """``SchedulerMethods.split(cfg, Hits, n)`` and ``.reserve(cfg, c, n)``, as documented."""
    methods = load_scheduler(_tree(tmp_path, {SCHEDULER_FILE: FAKE_SCHEDULER, **FAKE_HELPERS}))
    cfg = Config(block=16, prompt=49, max_sched=16)
    assert methods.split(cfg, Hits(3, 2), 40) == 27


@pytest.mark.parametrize("version", ["0.33", "0.33.0\n", "0.33.0rc1", "../0.33.0"])
def test_bad_version_is_refused(version: str) -> None:
    """Only X.Y.Z reaches pip or the cache path."""
    with pytest.raises(PolicyError, match=r"expected X\.Y\.Z"):
        release_root(version)


def test_failing_download_is_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release pip cannot find: a one-line PolicyError, and nothing left in the cache but
    the release's lock file (concurrent runs serialise their fetch of a release on it)."""
    monkeypatch.setenv("CHUNKPROOF_CACHE", str(tmp_path))
    with pytest.raises(PolicyError) as info:
        release_root("0.0.1")
    assert str(info.value).startswith("cannot download vllm==0.0.1: ")
    assert "\n" not in str(info.value)
    assert [p.name for p in tmp_path.iterdir()] in ([], [".vllm-0.0.1.lock"])


@pytest.mark.parametrize(("name", "fields", "c", "budget", "chunk"), BOUNDARY_STEPS)
def test_boundary_steps_are_the_releases(
    name: str, fields: dict[str, Any], c: int, budget: int, chunk: int
) -> None:
    """The known answers at the edges of a rule (tests/boundary_steps.py) are those of the
    release's own methods, interpreted from its source."""
    builtin = get_builtin(name)
    real = resolve_policy(f"vllm=={builtin.releases[0]}")
    assert step(real, Config(**fields), c, budget).chunk == chunk
