"""Fidelity: the built-in split and reservation of each release against the real vLLM code.

For every release that starts or continues a variant (0.15.0 ... 0.33.0), the real
``Scheduler._mamba_block_aligned_split`` and ``_reserve_prefill_lookahead`` are read from the
release's own source (fetched once into the user cache by ``release_root``; vLLM is never
imported) and compared with the stages "split" and "reservation" of
``policy_for_release(version)`` (SPEC V; history note sections 3 and 4) on seeded random inputs.
The inputs vary everything the real methods read (history note section 2: B, H, B_s, P, T, the
split of c into c_r, l and x, n, D, F, S, J, K, alpha, M, theta, L_h, u, L) and aim at the
branch points: c and ends at and next to block multiples, ends at and next to E, lambda, T - L
and J, and starts from which an internal checkpoint is valid. Outcome counts per release are
checked against floors, so a generator that stops reaching a branch fails the test.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from chunkproof.model.arith import ck30, ck32, ck33, valid
from chunkproof.model.builtin import builtin_policies, policy_for_release
from chunkproof.model.config import Config
from chunkproof.model.errors import PolicyError, SubsetError
from chunkproof.model.extraction import SCHEDULER_FILE
from chunkproof.model.policy import Policy
from chunkproof.model.releases import MANIFEST, release_root
from chunkproof.model.splits import max_chunk
from chunkproof.model.vllm_source import (
    Hits,
    SchedulerMethods,
    StandInError,
    load_scheduler,
)

pytestmark = pytest.mark.fidelity

RELEASES = tuple(p.releases[0] for p in builtin_policies() if p.releases)
"""The first release of every built-in variant."""
CASES = 10_000
SEED = 20_260_615
ASSERTS_NO_EXTERNAL = ("0.15.0", "0.17.0")
"""V1 and V2 assert x = 0 (history note section 3, V1/V2 rule 1)."""
LARGE_BLOCKS = (528, 800, 1600, 2096, 4416)


@dataclass(frozen=True)
class Release:
    """One release: its real methods (read from source) and its built-in policy."""

    version: str
    real: SchedulerMethods
    policy: Policy


@pytest.fixture(scope="module", params=RELEASES)
def release(request: pytest.FixtureRequest) -> Release:
    """Fetch (once per machine) and extract one release (once per test module)."""
    version: str = request.param
    root = release_root(version)
    return Release(
        version, load_scheduler(root / SCHEDULER_FILE, root), policy_for_release(version)
    )


# --- random inputs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One input of the split (or, with ``hits.computed`` as c, of the reservation)."""

    cfg: Config
    hits: Hits
    n: int

    def __str__(self) -> str:
        fields = {k: v for k, v in self.cfg.to_dict().items() if v not in (0, False, None)}
        return f"Config({fields}), {self.hits}, n={self.n}"


def _block(rng: random.Random) -> int:
    """B: mostly small (1..64, where every branch is cheap to reach), some production sizes."""
    r = rng.random()
    if r < 0.6:
        return rng.randint(1, 64)
    if r < 0.8:
        return rng.choice((16, 32, 64, 128))
    return rng.choice(LARGE_BLOCKS)


def _divisor(rng: random.Random, b: int) -> int:
    """H: B itself 40% of the time, else any divisor of B."""
    if rng.random() < 0.4:
        return b
    return rng.choice([d for d in range(1, b + 1) if b % d == 0])


def _near(rng: random.Random, grid: int, top: int) -> int:
    """A position in [0, top] at or next to a multiple of ``grid``, or anywhere in it."""
    base = rng.randint(0, max(top, 0) // grid) * grid
    offset = rng.choice((0, 0, 0, 1, -1, grid - 1, rng.randint(0, grid - 1)))
    return min(max(base + offset, 0), max(top, 0))


def _either(rng: random.Random, p: float, then: Callable[[], int], other: int) -> int:
    """``then()`` with probability p, else ``other``."""
    return then() if rng.random() < p else other


def _sched_block(rng: random.Random, b: int, h: int) -> int:
    """B_s: usually B; also H, a multiple of B (lcm of groups) or anything."""
    return rng.choice((b, b, b, h, b * rng.randint(2, 4), rng.randint(1, 2 * b)))


def _budget(rng: random.Random, b: int) -> int:
    """M: below, at and above one block, and a production default."""
    return rng.choice((rng.randint(1, 2 * b), b, rng.randint(b, 8 * b), 16384))


def _sizes(rng: random.Random) -> dict[str, Any]:
    """B, H, B_s, P, T, L and L_h."""
    b = _block(rng)
    h = _divisor(rng, b)
    prompt = max(1, _near(rng, rng.choice((b, h)), 6 * b + b // 2))
    extra = rng.choice((0, 0, 0, 1, rng.randint(1, 8), rng.randint(1, 2 * b + 8)))
    tokens = prompt + extra
    lookahead = min(tokens, rng.choice((0, 0, 1, rng.randint(2, 8))))
    hash_lookahead = rng.choice((0, 0, lookahead, rng.randint(0, 8)))
    return {
        "block": b,
        "hash_block": h,
        "sched_block": _sched_block(rng, b, h),
        "prompt": prompt,
        "tokens": tokens,
        "lookahead": lookahead,
        "hash_lookahead": hash_lookahead,
    }


def _flags(rng: random.Random, b: int, h: int) -> dict[str, Any]:
    """D, F, S, K, alpha, M, theta."""
    return {
        "drop": rng.random() < 0.5,
        "partial_hits": rng.random() < 0.5,
        "exact_junction": rng.random() < 0.5,
        "checkpoints": rng.random() < 0.5,
        "checkpoint_alignment": rng.choice((0, 1, 8, 16, 64, h, b)),
        "max_sched": _budget(rng, b),
        "threshold": _either(rng, 0.5, lambda: rng.randint(1, 2 * b), 0),
    }


def _start(rng: random.Random, sizes: dict[str, int]) -> int:
    """c: 0, on or next to the B or H grid, near E, past E, or anywhere up to T."""
    b, t = sizes["block"], sizes["tokens"]
    big_e = max(sizes["prompt"], t - 1)
    r = rng.random()
    if r < 0.12:
        return 0
    if r < 0.45:
        return _near(rng, b, t)
    if r < 0.6:
        return _near(rng, sizes["hash_block"], t)
    if r < 0.78:
        return max(big_e - rng.randint(0, 2 * b + 8), 0)
    if r < 0.86:
        return rng.randint(min(big_e, t), t)
    return rng.randint(0, t)


def _end(rng: random.Random, sizes: dict[str, int], c: int, junction: int) -> int:
    """The proposed end c + n: block multiples, E, T - L, lambda, J, past tau, past T, anything."""
    b, t = sizes["block"], sizes["tokens"]
    big_e = max(sizes["prompt"], t - 1)
    wiggle = rng.choice((-1, 0, 0, 1))
    r = rng.random()
    if r < 0.06:
        return c
    if r < 0.3:
        return (c // b + rng.randint(1, 3)) * b + wiggle
    if r < 0.48:
        return rng.choice((big_e, t - rng.randint(0, sizes["lookahead"] + 1))) + wiggle
    if r < 0.58:
        limit = t - rng.choice((0, 1, sizes["hash_lookahead"]))
        return limit // b * b - rng.choice((0, b)) + wiggle
    if r < 0.62:
        return junction + wiggle
    if r < 0.68:
        return sizes["prompt"] // sizes["hash_block"] * sizes["hash_block"] + rng.randint(0, b)
    if r < 0.76:
        return t + rng.randint(0, 2 * b)
    return c + rng.randint(0, 3 * b)


def _hits(rng: random.Random, c: int, external: bool) -> Hits:
    """c split into c_r, l and x: all computed half the time (the running loop)."""
    if rng.random() < 0.5:
        return Hits(c)
    computed = rng.randint(0, c)
    local = rng.randint(0, c - computed) if external else c - computed
    return Hits(computed, local, c - computed - local)


def _checkpoint_case(
    rng: random.Random, sizes: dict[str, int], flags: dict[str, Any]
) -> tuple[int, int]:
    """K on, a start on the H (or B) grid and a final chunk: internal checkpoints (c, end)."""
    b, h = sizes["block"], sizes["hash_block"]
    big_e = max(sizes["prompt"], sizes["tokens"] - 1)
    flags["checkpoints"] = True
    flags["checkpoint_alignment"] = rng.choice((1, 1, h, 8))
    c = min(rng.choice((h, b)) * rng.randint(0, 3), big_e - 1)
    return c, big_e + rng.randint(0, 3)


def split_case(rng: random.Random, version: str) -> Case:
    """A random split input for ``version`` (module docstring)."""
    sizes = _sizes(rng)
    flags = _flags(rng, sizes["block"], sizes["hash_block"])
    if rng.random() < 0.2:
        c, end = _checkpoint_case(rng, sizes, flags)
    else:
        c, end = _start(rng, sizes), -1
    t = sizes["tokens"]
    junction = _either(rng, 0.6, lambda: min(c + rng.randint(0, 2 * sizes["block"]), t), 0)
    if end < 0:
        end = _end(rng, sizes, c, junction)
    cfg = Config(
        **sizes,
        **flags,
        junction=rng.choice((junction, junction, _near(rng, sizes["block"], t))),
        uncached_prefix=_either(rng, 0.4, lambda: _near(rng, sizes["block"], t), 0),
    )
    return Case(cfg, _hits(rng, c, version not in ASSERTS_NO_EXTERNAL), max(end - c, 0))


def reservation_case(rng: random.Random, version: str) -> Case:
    """A random reservation input: L mostly >= 2, c near T - L, r = T - c - n around (0, L)."""
    base = split_case(rng, version)
    t = base.cfg.T
    lookahead = min(t, rng.choice((base.cfg.lookahead, rng.randint(2, 8))))
    c = rng.choice((base.hits.start, max(t - lookahead - rng.randint(0, 3), 0), rng.randint(0, t)))
    r = rng.choice((rng.randint(-2, lookahead + 2), rng.randint(-t, t)))
    cfg = dataclasses.replace(base.cfg, lookahead=lookahead)
    return Case(cfg, Hits(c), max(t - c - r, 0))


def cases(make: Callable[[random.Random, str], Case], version: str) -> Iterator[Case]:
    """CASES inputs from a generator seeded by the release."""
    rng = random.Random(f"{SEED}-{version}-{make.__name__}")
    return (make(rng, version) for _ in range(CASES))


# --- outcome tallies -------------------------------------------------------------------------


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def internal_checkpoint(version: str, cfg: Config, c: int, e: int) -> bool:
    """I of history note section 3 (V6-V9), for tallying only."""
    big_e = cfg.prefill_end
    if version == "0.29.0":
        return cfg.checkpoints and c % cfg.block == 0
    if _key(version) < (0, 30, 0) or not cfg.checkpoints or e < big_e:
        return False
    grid = cfg.H if cfg.partial_hits else cfg.sched_block
    p = {
        "0.30.0": ck30(big_e, cfg.H, cfg.drop),
        "0.31.0": ck30(big_e, cfg.H, cfg.drop),
        "0.32.0": ck32(big_e, grid, cfg.drop),
    }.get(version)
    if p is None:
        p = ck33(big_e, grid, cfg.drop, cfg.hash_lookahead)
    return valid(c, e, p, cfg.H, cfg.block, cfg.checkpoint_alignment)


def split_outcomes(version: str, case: Case, result: int) -> list[str]:
    """The branch-level facts a case exercised (module docstring)."""
    cfg, c, n = case.cfg, case.hits.start, case.n
    block, end = cfg.block, c + result
    if c >= cfg.prefill_end:
        return ["c >= E (identity)"]
    tags = ["c < E"]
    if c % block:
        tags.append("mid-block start")
    if 0 < result < n:
        tags.append("cut on grid" if end % block == 0 else "cut off grid")
    if n > 0 and result == 0:
        tags.append("cut to 0")
    if result == n and c + n >= cfg.prefill_end and (c + n) % block:
        tags.append("final chunk off grid")
    if (
        _key(version) >= (0, 27, 0)
        and block > max_chunk(cfg)
        and result > 0
        and end % block
        and end < cfg.prefill_end
    ):
        tags.append("sub-block advance")
    if c < cfg.junction < c + n:
        tags.append("J inside")
    if internal_checkpoint(version, cfg, c, c + n):
        tags.append("internal checkpoint")
    if cfg.tokens != cfg.prompt:
        tags.append("resumed (T > P)")
    if case.hits.external:
        tags.append("external hit")
    return tags


def reservation_outcomes(case: Case, result: int) -> list[str]:
    """Which reservation branch a case took (history note section 4)."""
    remaining = case.cfg.T - case.hits.start - case.n
    if not 0 < remaining < case.cfg.lookahead:
        return ["untouched"]
    return ["trimmed to T - L" if result else "trimmed to 0"]


SPLIT_FLOORS = {
    "c >= E (identity)": 0.05,
    "c < E": 0.5,
    "mid-block start": 0.2,
    "cut on grid": 0.1,
    "cut off grid": 0.005,
    "cut to 0": 0.01,
    "final chunk off grid": 0.05,
    "J inside": 0.1,
    "resumed (T > P)": 0.2,
}
"""Least fraction of cases per outcome, for every release."""
LATER_FLOORS = {
    "0.23.0": {"external hit": 0.1},
    "0.27.0": {"sub-block advance": 0.01},
    "0.29.0": {"internal checkpoint": 0.05},
    "0.30.0": {"cut off grid": 0.03},
}
"""Floors for outcomes that exist from a release on."""
RESERVATION_FLOORS = {"untouched": 0.2, "trimmed to T - L": 0.03, "trimmed to 0": 0.01}


def floors(version: str) -> dict[str, float]:
    """The split outcome floors that apply to ``version``."""
    merged = dict(SPLIT_FLOORS)
    for first, extra in LATER_FLOORS.items():
        if _key(version) >= _key(first):
            merged.update(extra)
    return merged


def check_floors(tally: Counter[str], required: dict[str, float], version: str) -> None:
    """Every required outcome occurs in at least its fraction of the cases."""
    low = {k: tally[k] for k, f in required.items() if tally[k] < f * CASES}
    assert not low, f"{version}: outcomes below their floor: {low} (all: {dict(tally)})"


# --- the comparisons -------------------------------------------------------------------------


def compare(
    real: Callable[[Case], int],
    model: Callable[[Case], int],
    inputs: Iterator[Case],
    outcomes: Callable[[Case, int], list[str]],
) -> tuple[int, list[str], Counter[str]]:
    """Run both on every input: (count, mismatch descriptions, outcome tally)."""
    mismatches: list[str] = []
    tally: Counter[str] = Counter()
    count = 0
    for case in inputs:
        expected, got = real(case), model(case)
        count += 1
        tally.update(outcomes(case, expected))
        if expected != got:
            mismatches.append(f"{case}: real vLLM {expected}, built-in {got}")
    return count, mismatches, tally


def test_split_matches_release(release: Release) -> None:
    """The built-in split stage equals the real _mamba_block_aligned_split (0 mismatches)."""
    stage = release.policy.stage("split")
    assert stage is not None
    count, mismatches, tally = compare(
        lambda case: release.real.split(case.cfg, case.hits, case.n),
        lambda case: stage.function(case.cfg, case.hits.start, case.n),
        cases(split_case, release.version),
        lambda case, result: split_outcomes(release.version, case, result),
    )
    assert count == CASES
    assert not mismatches, (
        f"{release.version} {release.policy.name}: {len(mismatches)} of "
        f"{count} differ; first: {mismatches[0]}"
    )
    check_floors(tally, floors(release.version), release.version)


def test_reservation_matches_release(release: Release) -> None:
    """The reservation stage equals the real _reserve_prefill_lookahead (0.28+), else absent."""
    stage = release.policy.stage("reservation")
    assert release.real.has_reservation == (stage is not None)
    if stage is None:
        return
    count, mismatches, tally = compare(
        lambda case: release.real.reserve(case.cfg, case.hits.start, case.n),
        lambda case: stage.function(case.cfg, case.hits.start, case.n),
        cases(reservation_case, release.version),
        reservation_outcomes,
    )
    assert count == CASES
    assert not mismatches, (
        f"{release.version}: {len(mismatches)} of {count} differ; first: {mismatches[0]}"
    )
    check_floors(tally, RESERVATION_FLOORS, release.version)


def test_release_cache_holds_only_the_needed_files(release: Release) -> None:
    """The cache entry: a manifest naming the wheel, a few small files, no wheel left behind."""
    root = release_root(release.version)
    manifest = json.loads((root / MANIFEST).read_text())
    assert manifest["wheel"].startswith(f"vllm-{release.version}")
    assert manifest["files"][SCHEDULER_FILE] == release.real.sha256
    files = [p for p in root.rglob("*") if p.is_file()]
    assert sorted(str(p.relative_to(root)) for p in files) == sorted([*manifest["files"], MANIFEST])
    assert sum(p.stat().st_size for p in files) < 1_000_000
    assert not list(root.parent.glob("**/*.whl"))


# --- extraction errors and strictness --------------------------------------------------------


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


def test_missing_split_method_is_one_line_error(tmp_path: Path) -> None:
    """A scheduler.py whose class Scheduler lacks the split: PolicyError naming file and method."""
    path = _tree(
        tmp_path, {SCHEDULER_FILE: "class Scheduler:\n    def schedule(self):\n        return 0\n"}
    )
    assert _one_line_error(path) == (
        f"{path}: class Scheduler has no method _mamba_block_aligned_split"
    )


def test_syntax_error_is_one_line_error_with_file_and_line(tmp_path: Path) -> None:
    """A syntax error: PolicyError naming file and line."""
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
    """A helper imported from a module the tree lacks: PolicyError naming the import line."""
    path = _tree(
        tmp_path,
        {
            SCHEDULER_FILE: (
                "from vllm.nowhere import helper\n\nclass Scheduler:\n"
                "    def _mamba_block_aligned_split(self, request, n, l=0, x=0):\n"
                "        return helper(n)\n"
            )
        },
    )
    assert _one_line_error(path).startswith(f"{path}:1: cannot resolve 'helper'")


def test_helper_outside_the_subset_is_rejected_on_loading(tmp_path: Path) -> None:
    """A helper the methods reach is checked against the policy subset when the source is
    loaded, not at its first vectorised or symbolic use."""
    path = _tree(
        tmp_path,
        {
            SCHEDULER_FILE: (
                "from vllm.helpers import snap\n\nclass Scheduler:\n"
                "    def _mamba_block_aligned_split(self, request, n, l=0, x=0):\n"
                "        return snap(n)\n"
            ),
            "vllm/helpers.py": (
                "def snap(n):\n    for _ in range(2):\n        n = n - 1\n    return n\n"
            ),
        },
    )
    with pytest.raises(SubsetError, match=r"helpers\.py:2: For is outside the policy subset"):
        load_scheduler(path)


FAKE_SCHEDULER = """\
from typing import cast
from vllm.utils.grid import floor_to
from vllm.v1.kv_cache_interface import snap as snap_end


class Scheduler:
    def _mamba_block_aligned_split(
        self, request: "Request", num_new_tokens: int, local: int = 0, external: int = 0
    ) -> int:
        start: int = request.num_computed_tokens + local + external
        return cast(int, snap_end(start + num_new_tokens, self._grid) - start)

    @property
    def _grid(self) -> int:
        return self._scale() * self.cache_config.block_size

    def _scale(self) -> int:
        return 1

    def _reserve_prefill_lookahead(self, request, num_computed_tokens, num_new_tokens):
        return getattr(self, "not_modelled", num_new_tokens)
"""
FAKE_HELPERS = {
    "vllm/v1/kv_cache_interface.py": "from vllm.utils import floor_to\n\n\n"
    "def snap(x: int, b: int) -> int:\n"
    "    return max(floor_to(x, b), 0)\n",
    "vllm/utils/__init__.py": "from vllm.utils.grid import floor_to\n",
    "vllm/utils/grid.py": "import torch\n\n\ndef floor_to(x, b):\n    return x // b * b\n",
}


def test_members_helpers_and_reexports_resolve_without_importing(tmp_path: Path) -> None:
    """self-members (a property and a method), helpers via a re-export, a stdlib import."""
    path = _tree(tmp_path, {SCHEDULER_FILE: FAKE_SCHEDULER, **FAKE_HELPERS})
    methods = load_scheduler(path)
    cfg = Config(block=16, prompt=49, max_sched=16)
    assert methods.split(cfg, Hits(3, 2), 40) == 27
    assert not methods.takes_uncached_prefix


def test_standins_refuse_unmodelled_attributes(tmp_path: Path) -> None:
    """Reading an attribute the stand-ins lack fails, even through getattr with a default."""
    methods = load_scheduler(_tree(tmp_path, {SCHEDULER_FILE: FAKE_SCHEDULER, **FAKE_HELPERS}))
    with pytest.raises(StandInError, match=r"reads self\.not_modelled.*--set self\.not_modelled="):
        methods.reserve(Config(block=16, prompt=49, max_sched=16), 0, 16)


@pytest.mark.parametrize("version", ["0.33", "0.33.0\n", "0.33.0rc1", "../0.33.0"])
def test_bad_version_is_refused(version: str) -> None:
    """Only X.Y.Z reaches pip or the cache path."""
    with pytest.raises(PolicyError, match=r"expected X\.Y\.Z"):
        release_root(version)


def test_failing_download_is_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release pip cannot find: a one-line PolicyError, and nothing left in the cache."""
    monkeypatch.setenv("CHUNKPROOF_CACHE", str(tmp_path))
    with pytest.raises(PolicyError) as info:
        release_root("0.0.1")
    assert str(info.value).startswith("cannot download vllm==0.0.1: ")
    assert "\n" not in str(info.value)
    assert not list(tmp_path.iterdir())
