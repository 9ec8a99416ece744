"""vLLM #40709 and its review (SPEC V): keep a sub-block chunk instead of 0.

#40707: under 0.27's composition (C4: the encoder cap before the split) the cap stops the chunk
before an image the encoder cache cannot take yet, and V5 floors that sub-block chunk to 0 for
ever. #40709 keeps it. Its reviewer objected that every later chunk end would then be off the
block grid; the author answered that the next step realigns by itself. The built-in fixes
(SPEC V; model/splits.py :func:`split_v5_keeping`):

* ``keep-subblock`` (V2+keep, SPEC V): the patch on the split it was written against (0.17-0.23,
  V2 floors the chunk *length*);
* ``keep-subblock-v5``: the patch on 0.27's V5 (drop the ``or B <= m`` disjunct of rule 4);
* ``keep-subblock-realign``: the reviewer's suggestion, keep only from a grid start;
* ``keep-subblock-encoder-only``: keep only an end the encoder cap forced.

The configurations: #40707 at B = 4 (two images, the cache holds one), and the same with a
one-token item between them, which makes the encoder cap stop the chunk twice inside one block.
"""

from __future__ import annotations

import itertools

import pytest
from cli_helpers import Cli

from chunkproof.model.builtin import get_builtin
from chunkproof.model.config import Config, Items
from chunkproof.model.step import step
from chunkproof.model.trajectory import run
from chunkproof.spec.properties import crosses_block_end, misaligned

KEEPS = ("keep-subblock-v5", "keep-subblock-realign", "keep-subblock-encoder-only")

ISSUE = Config(block=4, prompt=16, max_sched=6, items=Items([(1, 4), (6, 4)]))
"""#40707 at B = 4: ``chunkproof trace vllm-0.27 --block 4 --prompt 16 --max-sched 6 --budget 6
--items 1+4,6+4``; at c = 4 the first image is held and the cap stops the chunk at 6."""

TWICE = Config(block=4, prompt=16, max_sched=4, items=Items([(1, 4), (5, 1), (6, 4)]))
"""ISSUE with a one-token item at 5: the cap stops the chunk at 5, then at 6, both in [4, 8)."""


def ends(policy: str, cfg: Config, budgets: list[int]) -> tuple[str, list[int]]:
    """The outcome and chunk ends of ``policy`` on ``cfg`` (the last budget repeats)."""
    trajectory = run(get_builtin(policy), cfg, budgets)
    return trajectory.outcome, trajectory.ends


def test_0_27_is_stuck_on_40707_and_every_keep_finishes() -> None:
    """SPEC P1: 0.27 yields 0 at c = 4 for ever (the encoder cap gives 2, V5 floors 6 to 4);
    each keep variant keeps [4, 6) and finishes on the grid from 8 on (V5's stop beta)."""
    assert ends("vllm-0.27", ISSUE, [6]) == ("stuck", [4])
    for name in KEEPS:
        assert ends(name, ISSUE, [6]) == ("finished", [4, 6, 8, 12, 16]), name


def mid_block_off_grid(name: str) -> list[tuple[str, int, int, int]]:
    """Every (config, c, b, end) of ``name`` on two-item layouts at B = 4 (M = 4, 6: B <= m)
    whose chunk from a mid-block c < E ends off the grid before E, reachable or not (steps
    that break P0 at unreachable states, the encoder's held-items assertion, are skipped)."""
    policy = get_builtin(name)
    found = []
    for m, s1, l1, gap, l2 in itertools.product((4, 6), range(3), range(2, 6), range(4), (2, 5)):
        cfg = Config(block=4, prompt=16, max_sched=m, items=Items([(s1, l1), (s1 + l1 + gap, l2)]))
        for c, b in itertools.product(range(1, cfg.prefill_end), range(1, m + 1)):
            s = step(policy, cfg, c, b)
            if c % 4 and s.unsafe is None and s.chunk > 0 and s.end % 4 and s.end < 16:
                found.append((cfg.describe(), c, b, s.end))
    return found


def test_realign_ends_the_chunk_after_a_sub_block_one_on_the_grid() -> None:
    """The reviewer's rule, exactly: with B <= m, no partial hits and no junction, every chunk
    of keep-subblock-realign from a mid-block c < E is 0 or ends on the grid or at E or later,
    for every budget; keep-subblock-v5 breaks this (it keeps a second sub-block chunk)."""
    assert mid_block_off_grid("keep-subblock-realign") == []
    assert mid_block_off_grid("keep-subblock-v5")


def test_reviewer_right_for_the_v2_split_the_patch_was_written_against() -> None:
    """On V2 (0.17-0.23), which floors the chunk length, the kept chunk [4, 6) shifts every
    later end off the grid until E (10), and [6, 10) runs past the block end 8 from mid-block 6:
    SPEC P3. On V5 the stop beta = 8 ends the next chunk on the grid and nothing crosses."""
    assert ends("vllm-0.17", ISSUE, [6]) == ("stuck", [4])
    outcome, v2 = ends("keep-subblock", ISSUE, [6])
    assert (outcome, v2) == ("finished", [4, 6, 10, 16])
    assert all(e % 4 for e in v2[1:-1])
    assert crosses_block_end(ISSUE, 6, 10)
    _, v5 = ends("keep-subblock-v5", ISSUE, [6])
    assert not any(crosses_block_end(ISSUE, c, e) for c, e in zip([0, *v5], v5, strict=False))


def test_author_wrong_when_the_encoder_caps_twice_in_one_block() -> None:
    """The next step does not always realign: on TWICE keep-subblock-v5 keeps [4, 5) and then
    [5, 6) (ends 5 and 6 both off the grid, 8 only a step later), as 0.28's reordering (#51603)
    does; the realigning variant refuses [5, 6) and is stuck at 5 for ever (SPEC P1)."""
    assert ends("vllm-0.27", TWICE, [4]) == ("stuck", [4])
    assert ends("keep-subblock-v5", TWICE, [4]) == ("finished", [4, 5, 6, 8, 12, 16])
    assert ends("vllm-0.28", TWICE, [4]) == ("finished", [4, 5, 6, 8, 12, 16])
    assert ends("keep-subblock-realign", TWICE, [4]) == ("stuck", [4, 5])


def test_keep_also_keeps_chunks_the_budget_made_sub_block() -> None:
    """keep-subblock-v5 keeps a chunk a small budget cut (b = 1: [0, 1), off the grid and not
    forced by the encoder: SPEC P4), after which the realigning variant is stuck at 1 (the cap
    gives [1, 2)); encoder-only waits for a budget and then keeps only the encoder's [0, 2)."""
    cfg = Config(block=4, prompt=16, max_sched=4, items=Items([(0, 2), (2, 3)]))
    first = step(get_builtin("keep-subblock-v5"), cfg, 0, 1)
    assert (first.chunk, misaligned(cfg, first.c, first.end)) == (1, True)
    assert ends("keep-subblock-v5", cfg, [1, 4]) == ("finished", [1, 2, 4, 8, 12, 16])
    assert ends("keep-subblock-realign", cfg, [1, 4]) == ("stuck", [1])
    assert ends("keep-subblock-encoder-only", cfg, [1, 4]) == ("finished", [2, 4, 8, 12, 16])
    assert step(get_builtin("keep-subblock-encoder-only"), cfg, 0, 1).chunk == 0


@pytest.mark.parametrize("name", KEEPS)
def test_the_fixes_are_built_in(cli: Cli, name: str) -> None:
    """``chunkproof policies`` lists each fix with 0.27's composition and no release, it
    accepts what 0.27 accepts (SPEC S1b), and ``chunkproof trace`` runs it on #40707."""
    assert get_builtin(name).acceptance == get_builtin("vllm-0.27").acceptance
    listed = {p["name"]: p for p in cli("policies", "--json").json()["policies"]}
    assert listed[name]["composition"] == "C4" and listed[name]["releases"] == []
    argv = ("--block", "4", "--prompt", "16", "--max-sched", "6", "--budget", "6")
    result = cli("trace", name, *argv, "--items", "1+4,6+4", "--json")
    assert result.code == 0 and result.json()["ends"] == [4, 6, 8, 12, 16]
