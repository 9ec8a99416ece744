"""``chunkproof repro``: standalone pytest files that run the real vLLM methods along a trace.

Each generated file is run in a fresh interpreter whose import path puts packages named
``chunkproof``, ``vllm`` and ``torch`` first that refuse to be imported, so a pass or a failure
can only come from the real methods read out of the source tree as text. A failure names the
property it breaks (``AssertionError: P1: ...``); P0 (the code raises, or a stage leaves [0, its
input]) is checked on every step of every repro.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_helpers import Cli
from repro_helpers import blocking_packages, generate_repro, run_repro
from vllm_copies import copy_release, patched_release

from chunkproof.checker.kinds import kind_of, load_counterexample
from chunkproof.checker.repro.requests import repro_source
from chunkproof.model import step as model_step
from chunkproof.model.counterexample import Counterexample
from chunkproof.source.extraction import SCHEDULER_FILE
from chunkproof.source.releases import release_root

COUNTEREXAMPLES = Path(__file__).resolve().parent.parent / "counterexamples"
SPEC_K = COUNTEREXAMPLES / "vllm-0.33" / "p1-livelock-T49-B16-L3.json"
ENCODER_TWO_ITEMS = COUNTEREXAMPLES / "vllm-0.27" / "p1-encoder-two-items.json"
SYSTEM_ENCODER = COUNTEREXAMPLES / "vllm-0.27" / "system-slive-encoder-two-items.json"
SHARED_CACHE = COUNTEREXAMPLES / "vllm-0.28" / "system-slive-shared-encoder-cache.json"
"""Two requests with two images each, deadlocked on the encoder cache they share (0.28)."""
P7_CONST = COUNTEREXAMPLES / "vllm-0.33" / "p7-const16-never-finishes-T49-B16-L3.json"
P4_OFFGRID = COUNTEREXAMPLES / "vllm-0.33" / "p4-offgrid-reservation.json"
P0_EXTERNAL = COUNTEREXAMPLES / "vllm-0.17" / "p0-external-hit-assert.json"
P3_SPARE = COUNTEREXAMPLES / "vllm-0.30" / "p3-spare-speculative-block.json"
"""0.30's chunk [4, 13) keeps the speculative block of [0, 4) keyed at 8 (the cache code's)."""
P3_EAGLE = COUNTEREXAMPLES / "vllm-0.17" / "p3-poisoned-slot-eagle.json"
"""0.17's chunk [1, 5) crosses 4 under the EAGLE drop (the split's, and the retention mask's)."""
P3_HIT = COUNTEREXAMPLES / "vllm-0.33" / "p3-checkpoints-partial-hit.json"
"""0.33's chunk [2, 9) from a partial hit with internal checkpoints (c0 = 2)."""
CURATED = sorted(COUNTEREXAMPLES.glob("*/*.json"))
"""The committed counterexamples, single- and multi-request (``chunkproof system``)."""
LIVELOCKS = [
    p
    for p in CURATED
    if p.parent.name == "vllm-0.33" and load_counterexample(p).property in ("P1", "P7")
]
"""The curated livelocks of the newest release: the class lookahead-in-split fixes."""


def _fake_tree(root: Path, split: str, reserve: str | None) -> Path:
    """A source tree whose scheduler.py has the given method bodies (indented 8 spaces)."""
    scheduler = root / SCHEDULER_FILE
    scheduler.parent.mkdir(parents=True)
    text = (
        "class Scheduler:\n"
        "    def _mamba_block_aligned_split(self, request, num_new_tokens,\n"
        "                                   num_new_local_computed_tokens,\n"
        "                                   num_external_computed_tokens):\n"
        f"{textwrap.indent(split, ' ' * 8)}\n"
    )
    if reserve is not None:
        text += (
            "\n    def _reserve_prefill_lookahead(self, request, num_computed_tokens,\n"
            "                                   num_new_tokens):\n"
            f"{textwrap.indent(reserve, ' ' * 8)}\n"
        )
    scheduler.write_text(text)
    return root


# -- the acceptance: SPEC K ------------------------------------------------------------------


@pytest.mark.fidelity
def test_spec_k_repro_fails_on_0_33_and_passes_on_the_fix(cli: Cli, tmp_path: Path) -> None:
    """The issue's acceptance: the generated file fails on 0.33.0's source at the SPEC K stuck
    point and passes on a copy whose split implements lookahead-in-split."""
    test_file = generate_repro(cli, SPEC_K, tmp_path)
    blockers = blocking_packages(tmp_path / "blockers")
    status, output = run_repro(test_file, release_root("0.33.0"), blockers)
    assert status == 1, output
    assert "AssertionError: P1: stuck at c=46 < E=49" in output and "1 failed" in output
    status, output = run_repro(test_file, patched_release(tmp_path / "fixed"), blockers)
    assert status == 0 and "1 passed" in output, output


@pytest.mark.fidelity
@pytest.mark.parametrize(
    ("cx_file", "failure"),
    [
        (ENCODER_TWO_ITEMS, "AssertionError: P1: stuck at c=4 < E=16"),
        (SYSTEM_ENCODER, "AssertionError: S-LIVE: step 5 (budget 6)"),
    ],
    ids=["one-request", "two-requests"],
)
def test_the_40707_repros_run_the_tree_s_encoder_and_pass_from_0_28(
    cli: Cli, tmp_path: Path, cx_file: Path, failure: str
) -> None:
    """#40707 (two images the encoder cache holds one at a time), alone and beside another
    request: the repro runs the tree's own encoder code, its cache kept from step to step,
    where the tree's schedule() calls it. On 0.27.0 (the cap before the split) the cap leaves
    the 2 tokens before the second image and the split floors them to 0 (P1; S-LIVE once the
    other request is done); on 0.28.0 (#51603: the cap after the split) every step makes
    progress."""
    test_file = generate_repro(cli, cx_file, tmp_path)
    blockers = blocking_packages(tmp_path / "blockers")
    status, output = run_repro(test_file, release_root("0.27.0"), blockers)
    assert status == 1 and failure in output, output
    assert "n=6, encoder=2, split=0, reservation=0, chunk=0" in output, output
    status, output = run_repro(test_file, release_root("0.28.0"), blockers)
    assert status == 0 and "1 passed" in output, output


@pytest.mark.fidelity
@pytest.mark.parametrize(
    ("cx_file", "fails", "passes"),
    [(P3_SPARE, ("0.30.0", "0.31.0"), ("0.32.0",)), (P3_EAGLE, ("0.17.0", "0.26.0"), ("0.29.0",))],
    ids=["spare-block", "crossing"],
)
def test_a_p3_repro_is_judged_by_the_trees_own_mamba_keys(
    cli: Cli, tmp_path: Path, cx_file: Path, fails: tuple[str, ...], passes: tuple[str, ...]
) -> None:
    """A P3 repro of a fresh prefill runs the chunks through the tree's own allocate_slots and
    fails on a Mamba key whose block holds another state, so it passes on a release that fixed
    the cache code: the spare speculative block 0.30-0.31 key at 8 (fixed in 0.32, whose
    split gives the same chunks), and the crossing claim at 4 that 0.29's retention mask no
    longer keys under the drop."""
    test_file = generate_repro(cli, cx_file, tmp_path)
    blockers = blocking_packages(tmp_path / "blockers")
    for version in fails:
        status, output = run_repro(test_file, release_root(version), blockers)
        assert status == 1 and "AssertionError: P3: " in output, (version, output)
        assert "the tree's cache keys" in output, output
    for version in passes:
        status, output = run_repro(test_file, release_root(version), blockers)
        assert status == 0 and "1 passed" in output, (version, output)


def test_a_p3_repro_of_a_fresh_prefill_runs_the_trees_cache(cli: Cli, tmp_path: Path) -> None:
    """Where the slot oracle is checked against the trees (a fresh prefill), a P3 file carries
    the tree's KV cache driver and says the kernel's write is the one rule it assumes; from a
    hit it judges by chunkproof's predicate, and says that a release that fixed only the cache
    code still fails it."""
    fresh = generate_repro(cli, P3_SPARE, tmp_path / "fresh").read_text()
    assert "def slots() -> TreeSlots:" in fresh and "crosses_block_end" not in fresh
    assert "kernel's write" in fresh and "still fails this file" not in fresh
    hit = generate_repro(cli, P3_HIT, tmp_path / "hit").read_text()
    assert "TreeSlots" not in hit and "still fails this file" in " ".join(hit.split())


@pytest.mark.fidelity
def test_a_repro_of_two_image_requests_shares_one_real_cache(cli: Cli, tmp_path: Path) -> None:
    """Two requests with encoder items run on one real ``EncoderCacheManager`` in their repro:
    the deadlock of the curated 0.28 file (docs/guide.md, "Two requests, one encoder
    cache") fails on 0.28.0, which frees an image once c reaches its end + L, and passes on
    0.33.0, which frees it at its end."""
    test_file = generate_repro(cli, SHARED_CACHE, tmp_path)
    source = test_file.read_text()
    assert "shared=next(iter(runs.values()), None)" in source
    blockers = blocking_packages(tmp_path / "blockers")
    status, output = run_repro(test_file, release_root("0.28.0"), blockers)
    assert status == 1 and "AssertionError: S-LIVE: step 2 (budget 8)" in output, output
    assert "#0 (T=12, c=5), #1 (T=12, c=5) have work left" in output, output
    status, output = run_repro(test_file, release_root("0.33.0"), blockers)
    assert status == 0 and "1 passed" in output, output


@pytest.mark.fidelity
@pytest.mark.parametrize("cx_file", LIVELOCKS, ids=lambda p: p.stem)
def test_the_curated_livelocks_of_0_33_pass_on_the_fix(
    cli: Cli, tmp_path: Path, cx_file: Path
) -> None:
    """Every curated P1/P7 livelock of 0.33 (SPEC K, the smallest, an external admission
    start, const(16)) finishes on the lookahead-in-split tree."""
    test_file = generate_repro(cli, cx_file, tmp_path)
    fixed = patched_release(tmp_path / "fixed")
    status, output = run_repro(test_file, fixed, blocking_packages(tmp_path / "blockers"))
    assert status == 0 and "1 passed" in output, output


@pytest.mark.fidelity
def test_p0_repro_names_the_line_that_raises(cli: Cli, tmp_path: Path) -> None:
    """vllm-0.17 asserts that no external hit reaches the split: the repro reports the
    assert's line as P0, and passes on 0.33.0, whose split takes the hit."""
    test_file = generate_repro(cli, P0_EXTERNAL, tmp_path)
    blockers = blocking_packages(tmp_path / "blockers")
    root = release_root("0.17.0")
    status, output = run_repro(test_file, root, blockers)
    assert status == 1, output
    raised = f"AssertionError: P0: _mamba_block_aligned_split raises AssertionError at {root}"
    assert raised in output and SCHEDULER_FILE in output, output
    status, output = run_repro(test_file, release_root("0.33.0"), blockers)
    assert status == 0 and "1 passed" in output, output


@pytest.mark.fidelity
def test_p7_repro_offers_the_const_budget(cli: Cli, tmp_path: Path) -> None:
    """const(16) on 0.33.0: 16, 32, 46, then 0: P7, not a stuck largest budget."""
    test_file = generate_repro(cli, P7_CONST, tmp_path)
    status, output = run_repro(test_file, release_root("0.33.0"), blocking_packages(tmp_path / "b"))
    assert status == 1, output
    assert "AssertionError: P7: const(16) never finishes: at c=46 < E=49" in output


@pytest.mark.fidelity
def test_repro_finds_an_installed_vllm_without_importing_it(cli: Cli, tmp_path: Path) -> None:
    """Without the variable, the repro locates the ``vllm`` package on the import path."""
    test_file = generate_repro(cli, SPEC_K, tmp_path)
    site = copy_release("0.33.0", tmp_path / "site", with_manifest=False)
    status, output = run_repro(test_file, None, site)
    assert status == 1 and "stuck at c=46" in output, output


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is not None, reason="a vllm package is installed here"
)
def test_repro_without_a_vllm_source_is_an_error_not_a_pass(cli: Cli, tmp_path: Path) -> None:
    """No source tree: the test errors with a one-line reason (never a pass or a skip)."""
    test_file = generate_repro(cli, SPEC_K, tmp_path)
    status, output = run_repro(test_file, None, tmp_path / "nothing")
    assert status == 1 and "no vLLM source" in output and "1 error" in output, output
    status, output = run_repro(test_file, tmp_path, tmp_path / "nothing")
    assert status == 1 and "has no vllm/v1/core/sched/scheduler.py" in output, output


# -- P0 on any source: small trees written here -----------------------------------------------


@pytest.mark.parametrize(
    ("split", "reserve", "words"),
    [
        (
            "return num_new_tokens",
            "return num_new_tokens + 1",
            "AssertionError: P0: the reservation returns 5, outside [0, 4]",
        ),
        (
            "return -1",
            None,
            "AssertionError: P0: the split returns -1, outside [0, 4]",
        ),
        (
            "return num_new_tokens // (num_new_tokens - num_new_tokens)",
            None,
            "AssertionError: P0: _mamba_block_aligned_split raises ZeroDivisionError at ",
        ),
        (
            "return num_new_tokens",
            "raise ValueError('no lookahead')",
            "P0: _reserve_prefill_lookahead raises ValueError at ",
        ),
    ],
    ids=["reservation-above-its-input", "negative-split", "division-by-zero", "raise"],
)
def test_every_repro_checks_p0_on_every_step(
    cli: Cli, tmp_path: Path, split: str, reserve: str | None, words: str
) -> None:
    """A repro run on code that crashes, or whose stage leaves [0, its input], fails on P0 at
    the first step (the raising line is named), whatever its own property: here P4, whose own
    check would let a chunk to T pass."""
    test_file = generate_repro(cli, P4_OFFGRID, tmp_path)
    tree = _fake_tree(tmp_path / "tree", split, reserve)
    status, output = run_repro(test_file, tree, blocking_packages(tmp_path / "blockers"))
    assert status == 1, output
    assert words in output, output
    assert "steps: [Step(c=0, budget=4" in output


def test_a_sound_split_passes(cli: Cli, tmp_path: Path) -> None:
    """On a tree whose split takes the whole budget and has no reservation, the SPEC K P1 and
    P7 repros finish (16, 32, 48, 49) and pass: the file can pass."""
    tree = _fake_tree(tmp_path / "tree", "return num_new_tokens", None)
    blockers = blocking_packages(tmp_path / "blockers")
    for cx_file in (SPEC_K, P7_CONST):
        status, output = run_repro(generate_repro(cli, cx_file, tmp_path), tree, blockers)
        assert status == 0 and "1 passed" in output, output


def test_a_stand_in_read_is_an_error_not_p0(cli: Cli, tmp_path: Path) -> None:
    """The real code reading an attribute the stand-ins lack is the repro's error (it names
    the attribute), never reported as the policy crashing."""
    tree = _fake_tree(tmp_path / "tree", "return self.some_new_flag", None)
    test_file = generate_repro(cli, SPEC_K, tmp_path)
    status, output = run_repro(test_file, tree, blocking_packages(tmp_path / "blockers"))
    assert status == 1, output
    assert "StandInError" in output and "self.some_new_flag" in output
    assert "P0:" not in output


# -- the generated text ---------------------------------------------------------------------


def test_the_call_site_functions_are_chunkproofs_own() -> None:
    """The admission hits (local, external), u and num_computed_tokens at c are computed in
    the file by model/step.py's own functions, copied verbatim."""
    text = repro_source(Counterexample.load(P0_EXTERNAL), "p0.json")
    for function in (
        model_step.computed_tokens,
        model_step.local_hit,
        model_step.external_hit,
        model_step.uncached_at,
    ):
        assert inspect.getsource(function).rstrip() in text, function.__name__
    assert "start=1,  # c0" in text and "external=1,  # x" in text
    assert "crash='AssertionError'" in text  # the recorded step


def test_a_p7_repro_offers_const_b_and_the_others_the_recorded_budgets() -> None:
    p7 = repro_source(Counterexample.load(P7_CONST), "p7.json")
    assert "budgets = [16] * (PREFILL_END + 1)" in p7
    assert "budget model, const(16), at every step" in p7.split('"""')[1].replace("\n", " ")
    p1 = repro_source(Counterexample.load(SPEC_K), "k.json")
    assert "budgets = [s.budget for s in RECORDED] + [LARGEST_BUDGET]" in p1


# -- the curated set ---------------------------------------------------------------------------


def _source_of(cx_file: Path, tmp_path: Path) -> Path:
    """The source tree a curated counterexample was found on: its release, or the fix."""
    policy = load_counterexample(cx_file).policy
    if policy == "lookahead-in-split":
        return patched_release(tmp_path / "fixed")
    return release_root(policy.removeprefix("vllm-") + ".0")


@pytest.mark.fidelity
@pytest.mark.parametrize("cx_file", CURATED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_curated_repro_fails_on_the_code_it_was_found_on(
    cli: Cli, tmp_path: Path, cx_file: Path
) -> None:
    """Each committed counterexample's repro breaks its property on the real code of its
    policy (its first release, or the SPEC V fix written into 0.33.0)."""
    cx = load_counterexample(cx_file)
    test_file = generate_repro(cli, cx_file, tmp_path)
    source = _source_of(cx_file, tmp_path)
    status, output = run_repro(test_file, source, blocking_packages(tmp_path / "blockers"))
    assert status == 1 and f"AssertionError: {cx.property}: " in output, output


def test_the_curated_set_covers_p0_to_p8() -> None:
    """Every property with a curated counterexample has its repro committed; P0 and P7 are
    among them."""
    properties = {json.loads(p.read_text())["property"] for p in CURATED}
    assert {"P0", "P1", "P3", "P4", "P5", "P6", "P7", "P8"} <= properties
    committed = {p.name for p in (COUNTEREXAMPLES / "pytest").glob("test_*.py")}
    assert committed == {repro_file_name(p) for p in CURATED}


@pytest.mark.parametrize("cx_file", CURATED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_committed_repros_are_current(cx_file: Path) -> None:
    """counterexamples/pytest holds the repro of every curated counterexample, as
    regenerate.sh writes it (from inside counterexamples/)."""
    name = f"{cx_file.parent.name}/{cx_file.name}"
    committed = COUNTEREXAMPLES / "pytest" / repro_file_name(cx_file)
    assert committed.read_text() == _repro_text(cx_file, name)


def test_committed_repros_have_no_undefined_names() -> None:
    """pyflakes (ruff's F rules) over the generated files: every name a repro uses is defined
    in it, so no path of the test can fail for a reason other than the property."""
    ruff = [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F,E9"]
    done = subprocess.run(
        [*ruff, str(COUNTEREXAMPLES / "pytest")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout


def _repro_text(cx_file: Path, name: str) -> str:
    """The repro regenerate.sh writes for the file, read from ``name``: the short form where
    it serves (one request without encoder items, not P3, P6 or P8), else the standalone one."""
    cx = load_counterexample(cx_file)
    cache = ("P3", "P6", "P8")
    short = isinstance(cx, Counterexample) and not cx.config.items and cx.property not in cache
    return kind_of(cx).repro_source(cx, name, "vllm" if short else "standalone")


def repro_file_name(cx_file: Path) -> str:
    """``vllm-0.33/p1-x.json`` -> ``test_vllm_0_33_p1_x.py`` (as regenerate.sh names it)."""
    stem = f"{cx_file.parent.name}_{cx_file.stem}"
    return "test_" + "".join(ch if ch.isalnum() else "_" for ch in stem) + ".py"


def test_repro_bad_input(cli: Cli, tmp_path: Path) -> None:
    """A wrong suffix, a missing file, and a file that is no counterexample: one line, exit 2."""
    for argv, words in (
        (["repro", str(SPEC_K), "--pytest", str(tmp_path / "t.txt")], "must end in .py"),
        (["repro", str(tmp_path / "no.json"), "--pytest", str(tmp_path / "t.py")], "no such"),
        (["repro", __file__, "--pytest", str(tmp_path / "t.py")], "is not JSON"),
    ):
        result = cli(*argv)
        assert result.code == 2 and words in result.err, result.err
        assert len(result.err.strip().splitlines()) == 1
    assert not (tmp_path / "t.py").exists()
