"""P6 repros judge a chunk at the source tree's own R* and retention (SPEC P6, KV1).

A standalone P6 repro carries :mod:`chunkproof.source.kv_run` and asks the tree it runs on for
where an identical resend of the prompt lands and whether the state there is kept; chunkproof's
``misses_resend`` only compares the chunk with those answers. So the repro of a miss of one
release fails on that release's real tree and passes on the release whose lookup the chunk
suits, whatever rule chunkproof's model has for either. Each file runs in a fresh interpreter
that cannot import chunkproof, vllm or torch (:func:`repro_helpers.run_repro`).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest
from cli_helpers import Cli
from repro_helpers import blocking_packages, generate_repro, run_repro
from vllm_copies import copy_release

from chunkproof.checker.kinds import load_counterexample
from chunkproof.checker.repro.requests import repro_source
from chunkproof.model.counterexample import Counterexample
from chunkproof.source import kv_run
from chunkproof.source.releases import release_root
from chunkproof.spec import properties as props

COUNTEREXAMPLES = Path(__file__).resolve().parent.parent / "counterexamples"
CURATED_P6 = COUNTEREXAMPLES / "vllm-0.28" / "p6-lost-resend-state.json"

MISSES = [
    pytest.param(
        "vllm-0.28",
        "--block 1600 --lookahead 1 --drop on --prompt 6400 --max-sched 8192",
        "0.28.0",
        "0.32.0",
        "R*=3200, and the chunk runs over it",
        id="0.28-drop-caps-at-P-1",
    ),
    pytest.param(
        "vllm-0.30",
        "--block 4 --lookahead 1 --drop on --hash-lookahead 0 --prompt 12 --max-sched 12",
        "0.30.0",
        "0.32.0",
        "R*=4, and the chunk runs over it",
        id="0.30-drop-caps-at-P-1",
    ),
    pytest.param(
        "vllm-0.29",
        "--block 1600 --lookahead 1 --drop on --retention 0 --prompt 11910 --max-sched 16384",
        "0.29.0",
        "0.30.0",
        "R*=9600, and the chunk ends there and the tree's retention drops the state",
        id="0.29-retention-drops-R*",
    ),
]
"""The P6 misses of the cache side: the release whose lookup (0.28, 0.30: the EAGLE group capped
at P - 1 before its drop) or retention (0.29: only the boundary P - 1 kept, not the drop's)
loses R*, and the release that fixed it (0.32's uncapped EAGLE lookup, 0.30's replay
boundaries)."""


@pytest.mark.fidelity
@pytest.mark.parametrize("version", ["0.32.0", "0.33.0", "0.34.0"])
def test_multi_module_mtp_still_misses_r_star_after_0_32(
    cli: Cli, tmp_path: Path, version: str
) -> None:
    """0.32's uncapped EAGLE lookup fixed the 0.28 miss for L <= 1 only. With L = 3 the
    coordinator caches N - 2 tokens (``num_reprefillable_tokens``), so the attention group
    keys the full blocks up to 4800, the drop takes one off, and R* is 3200 on 0.32-0.34 too
    (SPEC KV1): the chunk [0, 4800) runs over it, and the repro fails on each real tree."""
    minor = version.rsplit(".", 1)[0]
    cx = p6_counterexample(
        cli,
        tmp_path,
        f"vllm-{minor}",
        "--block 1600 --lookahead 3 --drop on --prompt 6400 --max-sched 8192",
    )
    test_file = generate_repro(cli, cx, tmp_path)
    status, output = run_repro(test_file, release_root(version), blocking_packages(tmp_path / "b"))
    assert status == 1 and "R*=3200, and the chunk runs over it" in output, output


def p6_counterexample(cli: Cli, tmp_path: Path, policy: str, ranges: str) -> Path:
    """``chunkproof check POLICY RANGES --property P6 --out``: the counterexample
    file of a violated P6."""
    out = tmp_path / "check"
    argv = ["check", policy, *ranges.split(), "--property", "P6", "--out", str(out)]
    result = cli(*argv)
    assert result.code == 1 and "P6 COVER            VIOLATED" in result.out, result.out
    found = out / policy / "P6.json"
    assert found.is_file(), result.out
    return found


@pytest.mark.fidelity
@pytest.mark.parametrize(("policy", "ranges", "broken", "fixed", "words"), MISSES)
def test_a_p6_repro_fails_on_the_release_and_passes_on_its_fix(
    cli: Cli,
    tmp_path: Path,
    policy: str,
    ranges: str,
    broken: str,
    fixed: str,
    words: str,
) -> None:
    """The repro of each miss fails with P6 on the real tree it was found on, at R* of that
    tree's lookup, and passes on the real tree of the release that fixed the miss."""
    test_file = generate_repro(cli, p6_counterexample(cli, tmp_path, policy, ranges), tmp_path)
    blockers = blocking_packages(tmp_path / "blockers")
    status, output = run_repro(test_file, release_root(broken), blockers)
    assert status == 1 and "AssertionError: P6: " in output and words in output, output
    status, output = run_repro(test_file, release_root(fixed), blockers)
    assert status == 0 and "1 passed" in output, output


SIBLING = (
    "--block 4 --split-block B/2 --junction 6 --lookahead 0 --drop off --prompt 9 --max-sched 4"
)
"""SPEC S-COVER's smallest case on 0.33: T = 9, B = 4, G = H = 2, J = 6: from [0, 2) the chunk
[2, 6) stops at the G-floored junction 6 and runs over R*_J = 4, where a sibling sharing the
first 6 tokens lands."""


def test_p6_judges_where_a_sibling_sharing_the_junction_lands(cli: Cli) -> None:
    """With a junction, P6 also judges R*_J (SPEC S-COVER), and both engines find the miss the
    release's identical resend does not see: the explorer names R*_J, and the prover's trace
    does too."""
    for engine in ("check", "prove"):
        result = cli(engine, "vllm-0.33", *SIBLING.split(), "--property", "P6")
        assert result.code == 1, result.out
        assert "chunk [2, 6) runs over R*_J=4, where a sibling sharing" in result.out, result.out


@pytest.mark.fidelity
def test_a_sibling_miss_repro_fails_on_the_real_tree(cli: Cli, tmp_path: Path) -> None:
    """The repro of :data:`SIBLING` asks the real 0.33.0 tree where a sibling sharing the
    first J tokens lands (R*_J = 4: the largest position at most J the Mamba group keys, on
    the hit grid) and fails with S-COVER there."""
    test_file = generate_repro(
        cli, p6_counterexample(cli, tmp_path, "vllm-0.33", SIBLING), tmp_path
    )
    status, output = run_repro(
        test_file, release_root("0.33.0"), blocking_packages(tmp_path / "blockers")
    )
    assert status == 1 and "P6 COVER (S-COVER): a sibling sharing the first J=6" in output, output
    assert "R*_J=4 in the tree's KV cache, and the chunk runs over it" in output, output


@pytest.mark.fidelity
def test_the_curated_p6_repro_fails_on_0_28(cli: Cli, tmp_path: Path) -> None:
    """The curated 0.28 miss (T=8, B=4, no drop: the whole prompt in one chunk): its repro
    breaks P6 on the real 0.28.0 tree, at 0.28's own R* = B*floor((P - 1)/B) = 4."""
    test_file = generate_repro(cli, CURATED_P6, tmp_path)
    status, output = run_repro(
        test_file, release_root("0.28.0"), blocking_packages(tmp_path / "blockers")
    )
    assert status == 1 and "AssertionError: P6: " in output, output
    assert "R*=4, and the chunk runs over it" in output, output


@pytest.mark.fidelity
def test_the_lookup_is_the_tree_s_not_the_model_s(cli: Cli, tmp_path: Path) -> None:
    """A 0.28.0 tree whose KV cache files are 0.32.0's (its split and reservation still
    0.28's): the repro of the 0.28 drop miss (T=6400, B=1600, L=3) passes there, at 0.32's
    R*=4800 where its chunk ends, so the verdict comes from the tree's cache code, not from
    the rule chunkproof holds for the release the counterexample was found on."""
    policy, ranges = MISSES[0].values[:2]
    assert isinstance(policy, str) and isinstance(ranges, str)
    cx_file = p6_counterexample(cli, tmp_path, policy, ranges)
    tree = copy_release("0.28.0", tmp_path / "tree", with_manifest=False)
    newer = release_root("0.32.0")
    for rel in kv_run.KV_CACHE_FILES:
        (tree / rel).write_bytes((newer / rel).read_bytes())
    test_file = generate_repro(cli, cx_file, tmp_path)
    status, output = run_repro(test_file, tree, blocking_packages(tmp_path / "blockers"))
    assert status == 0 and "1 passed" in output, output


@pytest.mark.fidelity
def test_a_p6_repro_with_encoder_items_runs_both_drivers(cli: Cli, tmp_path: Path) -> None:
    """A P6 miss of a request with an image (0.28, T=8, B=4, one item at 1+2): its repro
    carries the encoder driver and the KV driver in one file, and fails with P6 at the tree's
    R* on the real 0.28.0 tree."""
    cx_file = p6_counterexample(
        cli,
        tmp_path,
        "vllm-0.28",
        "--block 4 --lookahead 0 --drop off --prompt 8 --max-sched 8 --items 1+2",
    )
    test_file = generate_repro(cli, cx_file, tmp_path)
    text = test_file.read_text()
    assert "class EncoderRun" in text and "def tree_resend(" in text
    status, output = run_repro(
        test_file, release_root("0.28.0"), blocking_packages(tmp_path / "blockers")
    )
    assert status == 1 and "AssertionError: P6: " in output and "R*=4" in output, output


def test_a_p6_repro_carries_the_kv_driver_and_no_copied_rule() -> None:
    """The file carries :mod:`chunkproof.source.kv_run` and judges with ``misses_resend`` at
    the ``resend`` fixture's answers and the checkpoint the release's rule leaves live; none of
    chunkproof's per-release R* rules is in it (retention only inside the checkpoint's rule,
    which the file names as chunkproof's), and every top-level name is defined once (the
    carried modules and the copied functions share one namespace)."""
    cx = load_counterexample(CURATED_P6)
    assert isinstance(cx, Counterexample)
    text = repro_source(cx, "p6.json")
    assert "def tree_resend(" in text and "def kv_coordinator(" in text
    assert "misses_resend(CONFIG, step.c, step.end, position, kept, live)" in text
    assert "kept = resend.kept\n" in text  # 0.28 keys no tail by its own copy on the grid
    assert "keys_own_tail" not in text
    assert "live = live_checkpoint_v29(CONFIG, step.c, step.end)" in text  # 0.28's rule group
    assert "def test_p6_cover(vllm: Extracted, resend: TreeResend)" in text
    for rule in (*props.RELEASE_P6.values(), props.skips_resend):
        assert f"def {rule.__name__}(" not in text, rule.__name__
    for name in ("resend_position", "resend_landing_v28", "keeps"):
        assert f"def {name}(" not in text, name
    # the one rule it copies is the checkpoint's (with 0.29's mask), and the file says so
    words = " ".join(text.split())
    assert "The checkpoint a chunk leaves live is chunkproof's rule for the cache side" in words
    defined: Counter[str] = Counter()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            defined[node.name] += 1
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
    assert [name for name, count in defined.items() if count > 1] == []


def test_other_properties_carry_no_kv_driver() -> None:
    """Only a P6 file runs the tree's cache code: a P1 file is as before."""
    cx = load_counterexample(COUNTEREXAMPLES / "vllm-0.33" / "p1-livelock-smallest.json")
    assert isinstance(cx, Counterexample)
    text = repro_source(cx, "p1.json")
    assert "kv_run" not in text and "resend" not in text
