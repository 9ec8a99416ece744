"""The repro of a P8 counterexample runs the tree's own block allocation (SPEC KV2): it fails on
the real release trees with the pool the release starts with, and passes with one block more,
so the pool decides the outcome, not the file. Each file runs in a fresh interpreter where
chunkproof, vllm and torch cannot be imported (:func:`repro_helpers.run_repro`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_helpers import Cli
from repro_helpers import blocking_packages, generate_repro, run_repro

from chunkproof.source.releases import release_root

pytestmark = pytest.mark.fidelity

CHECKPOINTS = (
    "--block 4 --drop off --checkpoints on --checkpoint-alignment 1 --prompt 1-13 --max-sched 1-9"
)
"""A range whose least P8 counterexample writes a prefill checkpoint: T = 13, chunk [4, 13)."""

MISSES = [
    pytest.param(
        "vllm-0.33",
        "--block 8 --split-block B/4 --lookahead 1 --drop on --prompt 1-12 --max-sched 1-4",
        ("0.33.0", "0.34.0"),
        (),
        "refuses its KV blocks with 2 of 9 blocks free",
        id="0.33-tail-copy",
    ),
    pytest.param(
        "vllm-0.33",
        "--block 4 --hash-block 2 --lookahead 0 --drop off --start hash --prompt 1-8 "
        "--max-sched 1-4",
        ("0.31.0", "0.32.0", "0.33.0", "0.34.0"),
        (),
        "refuses its KV blocks with 3 of 4 blocks free",
        id="0.33-seeded-partial-hit",
    ),
    pytest.param(
        "vllm-0.28",
        "--block 8 --lookahead 0 --drop off --prompt 1-12 --max-sched 1-2",
        ("0.28.0",),
        (),
        "refuses its KV blocks with 1 of 4 blocks free",
        id="0.28-null-block",
    ),
    pytest.param(
        "vllm-0.30",
        f"{CHECKPOINTS} --lookahead 0",
        ("0.30.0",),
        ("0.32.0", "0.33.0"),
        "refuses its KV blocks with 5 of 8 blocks free",
        id="0.30-checkpoint-uncapped",
    ),
    pytest.param(
        "vllm-0.31",
        f"{CHECKPOINTS} --lookahead 1",
        ("0.30.0", "0.31.0"),
        ("0.32.0",),
        "refuses its KV blocks with 4 of 9 blocks free",
        id="0.31-checkpoint-in-place",
    ),
    pytest.param(
        "vllm-0.28",
        "--block 4 --lookahead 0 --drop off --start external --prompt 1-8 --max-sched 1-2",
        ("0.23.0", "0.28.0"),
        (),
        "then takes more and the pool raises (Cannot get 1 free blocks from the pool)",
        id="0.28-external-hit-miscount",
    ),
]
"""The P8 classes: the tail copy 0.26 on asks beyond the start-up minimum, also at the first
chunk of a resend admitted at the tail's hit (KV2 rule 2d: the repro seeds the hit through the
tree's own lookup, then fails from 0.31, where the seed's own tail copy fits); the minimum of
0.23-0.28 counts the null block among the request's blocks; a chunk that writes a prefill
checkpoint asks every Mamba block it spans (0.30) or keeps its speculative blocks in place and
takes S + 2 (0.30-0.31), beyond the minimum's 2 + S + K Mamba blocks (KV2 rule 2c); at a KV
connector's external hit the Mamba group counts one block fewer than it takes, and the least
pool of 0.23-0.28 has none to spare, so the pool raises (KV2 rule 2e). The checkpoint classes
pass, unchanged, on the releases that fixed them."""


@pytest.mark.parametrize(("policy", "ranges", "trees", "fixed", "words"), MISSES)
def test_a_p8_repro_fails_on_the_release_and_passes_with_one_block_more(
    cli: Cli,
    tmp_path: Path,
    policy: str,
    ranges: str,
    trees: tuple[str, ...],
    fixed: tuple[str, ...],
    words: str,
) -> None:
    """``explore --property P8``, then the repro of its counterexample on each real tree: the
    tree's ``allocate_slots`` refuses the last chunk (or takes more than it counted, and the
    pool raises), and the trees of the releases that
    ``fixed`` it grant it; with POOL_BLOCKS one larger every tree grants every chunk and the
    file passes."""
    out = tmp_path / "explore"
    run = cli("explore", policy, *ranges.split(), "--property", "P8", "--out", str(out))
    assert run.code == 1 and "P8 POOL             VIOLATED" in run.out, run.out
    test_file = generate_repro(cli, out / policy / "P8.json", tmp_path)
    blockers = blocking_packages(tmp_path / "blockers")
    for tree in trees:
        status, output = run_repro(test_file, release_root(tree), blockers)
        assert status == 1 and "AssertionError: P8: " in output and words in output, output
    for tree in fixed:
        status, output = run_repro(test_file, release_root(tree), blockers)
        assert status == 0 and "1 passed" in output, output
    text = test_file.read_text()
    pool = int(re.search(r"^POOL_BLOCKS = (\d+)$", text, re.MULTILINE).group(1))  # type: ignore[union-attr]
    test_file.write_text(text.replace(f"POOL_BLOCKS = {pool}\n", f"POOL_BLOCKS = {pool + 1}\n"))
    for tree in trees:
        status, output = run_repro(test_file, release_root(tree), blockers)
        assert status == 0 and "1 passed" in output, output
