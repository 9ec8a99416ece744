"""The slot oracle (spec/slots.py) against the real vLLM 0.33.0 KV cache manager and the slot
note's worked numbers.

* Golden data (``tests/data/slot_golden_0.33.0.jsonl.gz``): 4,000 chunk-end sequences driven
  through the real 0.33.0 ``KVCacheManager`` on CPU by ``tools/slot_golden.py`` (every live
  Mamba entry, the poisonings at registration time, the resend hit); the oracle must give the
  same, case by case.
* Slot note = ``reference/state-slot-semantics.md``: section 7 table, section 4.3 examples, and
  the SPEC K slot answers; then rule-level cases for rules 4, 6, 7 and 9, and property tests
  tying the oracle's column walk to the per-chunk rule :func:`crossing_claim` (SPEC P3).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkproof.model.builtin import policy_for_release
from chunkproof.model.config import Config
from chunkproof.source.kv_run import MAMBA_GROUP, compiled_kv_tree, kv_coordinator, registered
from chunkproof.source.releases import release_root
from chunkproof.spec.properties import edge_properties, skips_resend
from chunkproof.spec.slots import (
    Poison,
    SlotReport,
    SlotSetup,
    crossing_claim,
    dropped_landing,
    hit_unit,
    keeps,
    keeps_some,
    keeps_v29,
    kv_rules,
    landing_v28,
    oracle,
    reachable_column,
    spare_claims,
    tail_position,
)


def _pairs(report: SlotReport) -> list[tuple[int, int]]:
    """The violations as (claim, held) pairs, in order."""
    return [(p.claim, p.held) for p in report.violations]


def _expected_poisons(setup: SlotSetup, ends: Sequence[int]) -> list[Poison]:
    """SPEC P3 applied to every consecutive pair (s, e) of (s_0, e_1, ..., e_m)."""
    chunks = pairwise((setup.start, *ends))
    found = ((step, s, crossing_claim(setup.fields, s, e)) for step, (s, e) in enumerate(chunks))
    return [Poison(claim, s, step) for step, s, claim in found if claim is not None]


# --- slot note section 7 ---------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One row of the slot note's section 7 table."""

    setup: SlotSetup
    ends: tuple[int, ...]
    live: Mapping[int, int]  # claim -> held state; held != claim is a poisoned (x) claim
    resend: int | None  # None: "n/a" in the table
    decode_steps: int = 0

    @property
    def poisoned(self) -> list[tuple[int, int]]:
        """The table's violations column: the (x) claims with the state they hold."""
        return [(claim, held) for claim, held in self.live.items() if claim != held]


def _sound(*claims: int) -> dict[int, int]:
    return {claim: claim for claim in claims}


B16_49 = SlotSetup(prompt=49, block=16)
FINE_EAGLE_2002 = SlotSetup(prompt=2002, block=1600, hash_block=16, drop=True)
FINE_EAGLE_3602 = SlotSetup(prompt=3602, block=1600, hash_block=16, drop=True)
FINE_3602 = SlotSetup(prompt=3602, block=1600, hash_block=16)


def _ckpt(prompt: int, retention: int | None = None, junction: int = 0) -> SlotSetup:
    """B = 1600, fine (h = 16), internal checkpoints with g = 16 (E8a, E8b)."""
    return SlotSetup(
        prompt, 1600, hash_block=16, checkpoint_alignment=16, retention=retention, junction=junction
    )


TABLE = {
    "E1": Row(B16_49, (16, 32, 46, 49), {16: 16, 32: 32, 48: 46}, 48),
    "E2": Row(B16_49, (16, 32, 48, 49), _sound(16, 32, 48), 48),
    "E2-eagle": Row(SlotSetup(49, 16, drop=True), (16, 32, 48, 49), _sound(16, 32, 48), 32),
    "E2q": Row(B16_49, (48, 49), _sound(48), 48),
    "E3": Row(FINE_EAGLE_2002, (364, 2002), {1600: 364}, 1600),
    "E4": Row(FINE_EAGLE_3602, (1600, 2600, 3602), {1600: 1600, 3200: 2600}, 3200),
    "E5a": Row(SlotSetup(32, 16), (32,), _sound(32), 0),
    "E5b": Row(SlotSetup(32, 16), (16, 32), _sound(16, 32), 16),
    "E6a": Row(FINE_3602, (1000, 1600, 2600, 3200, 3602), _sound(1600, 3200), 3200),
    "E6b": Row(FINE_3602, (1000, 2600, 3602), {1600: 1000, 3200: 2600}, 3200),
    "E7a": Row(FINE_3602, (3200, 3600, 3602), _sound(3200, 3600), 3600),
    "E7b": Row(FINE_EAGLE_3602, (1600, 3584, 3602), _sound(1600, 3584), 3584),
    "E8a": Row(_ckpt(3602), (3602,), _sound(3600), 3600),
    "E8b": Row(_ckpt(2002), (2002,), _sound(2000), 2000),
    "E10a": Row(SlotSetup(49, 16, retention=0), (16, 32, 48, 49), _sound(48), 48),
    "E10b": Row(SlotSetup(97, 16, retention=32), (*range(16, 97, 16), 97), _sound(32, 64, 96), 96),
    "E11": Row(SlotSetup(40, 16), (32, 40), _sound(32, 48), None, decode_steps=9),
    "E12": Row(
        SlotSetup(81, 16), (16, 32, 46, 64, 80, 81), {16: 16, 32: 32, 48: 46, 64: 64, 80: 80}, 80
    ),
    "E13": Row(FINE_EAGLE_2002, (2002,), {}, 0),
    "E14": Row(FINE_EAGLE_2002, (1984, 2002), _sound(1984), 1984),
}


@pytest.mark.parametrize("name", TABLE)
def test_section_7_table(name: str) -> None:
    row = TABLE[name]
    report = oracle(row.setup, row.ends, decode_steps=row.decode_steps)
    assert dict(report.live) == dict(row.live)
    assert _pairs(report) == row.poisoned
    assert report.covered == {claim for claim, held in row.live.items() if claim == held}
    if row.resend is not None:
        assert report.resend_hit == row.resend


def test_e12_poison_found_at_registration() -> None:
    """E12: the poison is reported at the chunk ending at 64, which retires the block."""
    report = oracle(TABLE["E12"].setup, TABLE["E12"].ends)
    assert report.violations == (Poison(claim=48, held=46, step=3),)


# --- slot note section 4.3 -------------------------------------------------------------------

EXAMPLES_4_3 = {
    "1-small": (B16_49, (16, 32, 46, 49), [(48, 46)]),
    "2-first-chunk": (FINE_EAGLE_2002, (364, 2002), [(1600, 364)]),
    "3-tail-chunk": (FINE_EAGLE_3602, (1600, 2600, 3602), [(3200, 2600)]),
    "3-fixed": (FINE_EAGLE_3602, (1600, 2600, 3200, 3602), []),
    # h is not given for the production audit; the answer does not depend on it.
    "4-audit": (SlotSetup(4000, 560), (3360, 3662, 4000), [(3920, 3662)]),
    "4-audit-fine": (SlotSetup(4000, 560, hash_block=16), (3360, 3662, 4000), [(3920, 3662)]),
    "6-resume": (SlotSetup(3602, 1600, start=2531), (3602,), [(3200, 2531)]),
    "6-resume-fine": (SlotSetup(3602, 1600, hash_block=16, start=2531), (3602,), [(3200, 2531)]),
    "7-wrong-grid": (
        SlotSetup(6662, 1648, hash_block=16, drop=True),
        (1632, 3264, 4896, 5712, 6662),
        [(1648, 1632), (3296, 3264), (4944, 4896), (6592, 5712)],
    ),
}


@pytest.mark.parametrize("name", EXAMPLES_4_3)
def test_section_4_3_examples(name: str) -> None:
    setup, ends, poisons = EXAMPLES_4_3[name]
    assert _pairs(oracle(setup, ends)) == poisons


def test_example_2_poison_is_reached_by_a_resend() -> None:
    """4.3 example 2: an identical resend hits the poisoned 1600."""
    assert oracle(FINE_EAGLE_2002, [364, 2002]).resend_hit == 1600


def test_example_7_every_full_key_is_poisoned() -> None:
    setup, ends, poisons = EXAMPLES_4_3["7-wrong-grid"]
    report = oracle(setup, ends)
    assert dict(report.live) == dict(poisons)
    assert report.covered == frozenset()


# --- SPEC K --------------------------------------------------------------------------------


def test_spec_k_slot_answers() -> None:
    crossing = oracle(B16_49, [16, 32, 46, 49])
    assert _pairs(crossing) == [(48, 46)]
    assert crossing_claim(B16_49.fields, 46, 49) == 48
    assert oracle(B16_49, [16, 32, 48, 49]).violations == ()
    assert _pairs(oracle(SlotSetup(81, 16), [16, 32, 46, 64, 80, 81])) == [(48, 46)]


# --- crossing_claim and the setup ------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "end", "claim"),
    [
        (46, 49, 48),
        (46, 48, None),  # ends on the block end: same block, in place (W0)
        (46, 47, None),
        (0, 100, None),  # a fresh start is no mid-block state
        (32, 100, None),  # starts on the grid
        (1, 17, 16),
        (1, 16, None),
        (2531, 3602, 3200),
    ],
)
def test_crossing_claim(start: int, end: int, claim: int | None) -> None:
    setup = SlotSetup(4000, 16 if end < 1000 else 1600)
    assert crossing_claim(setup.fields, start, end) == claim


def test_setup_properties() -> None:
    assert (B16_49.fine, B16_49.hit_unit, B16_49.tail, B16_49.resend_position) == (
        False,
        16,
        None,
        48,
    )
    fine = FINE_EAGLE_2002
    assert (fine.fine, fine.hit_unit, fine.tail, fine.resend_position) == (True, 16, 1984, 1984)
    # Hash lookahead forces the drop off (slot note 1): ckpos(49, 16) = fl(49 - 3, 16).
    assert SlotSetup(49, 16, drop=True, hash_lookahead=3).resend_position == 32
    assert SlotSetup(49, 16, sched_block=32).hit_unit == 32


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompt": 0, "block": 16}, "prompt"),
        ({"prompt": 49, "block": 0}, "block"),
        ({"prompt": 49, "block": 16, "hash_block": 5}, "hash_block"),
        ({"prompt": 49, "block": 16, "sched_block": 24}, "sched_block"),
        ({"prompt": 49, "block": 16, "sched_block": 0}, "sched_block"),
        ({"prompt": 49, "block": 16, "checkpoint_alignment": 0}, "checkpoint_alignment"),
        ({"prompt": 49, "block": 16, "retention": -1}, "retention"),
        ({"prompt": 49, "block": 16, "start": -1}, "start"),
    ],
)
def test_setup_rejects_bad_input(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SlotSetup(**kwargs)


def test_setup_accepts_the_least_values() -> None:
    """The edges of slot note 6's "Input": a 1-token prompt, retention 0 (every segment
    kept); a request starts at 0 unless told."""
    assert oracle(SlotSetup(prompt=1, block=1), [1]).live == {1: 1}
    assert SlotSetup(prompt=49, block=16, retention=0).retention == 0
    assert SlotSetup(prompt=49, block=16).start == 0


@pytest.mark.parametrize(
    ("ends", "message"),
    [
        ((), "empty"),
        ((16, 16, 49), "strictly increasing"),
        ((32, 16, 49), "strictly increasing"),
        ((16, 32), "prompt"),
        ((16, 32, 50), "prompt"),
    ],
)
def test_oracle_rejects_bad_ends(ends: tuple[int, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        oracle(B16_49, ends)


def test_oracle_rejects_ends_at_or_below_start() -> None:
    with pytest.raises(ValueError, match="above start"):
        oracle(SlotSetup(49, 16, start=20), [20, 49])


def test_oracle_rejects_negative_decode() -> None:
    with pytest.raises(ValueError, match="decode_steps"):
        oracle(B16_49, [49], decode_steps=-1)


# --- rules 4, 6, 7, 9, 11 (derived from the rules, not from the note's table) -------------------

_K29 = Config(block=4, prompt=19, max_sched=14, checkpoints=True, retention=12)
_K0 = Config(block=4, prompt=5, max_sched=5, checkpoints=True, checkpoint_alignment=1, retention=0)
_K12 = Config(
    block=4, prompt=22, max_sched=12, checkpoints=True, checkpoint_alignment=1, retention=12
)
_KD = Config(
    block=4,
    prompt=19,
    max_sched=19,
    lookahead=2,
    drop=True,
    checkpoints=True,
    checkpoint_alignment=8,
)


@pytest.mark.parametrize(
    ("retention", "live"),
    [(None, _sound(32, 48)), (0, _sound(48)), (32, _sound(32, 48)), (48, _sound(48))],
)
def test_rule_6_grid_checkpoint_follows_the_segment_mask(
    retention: int | None, live: dict[int, int]
) -> None:
    """Chunk [0, 34) checkpoints cp = 32 (on the grid): kept iff the segment mask keeps block 1.

    Under R = 0 rule 4 reserves no checkpoint before N at all.
    """
    setup = SlotSetup(50, 16, hash_block=4, checkpoint_alignment=4, retention=retention)
    assert dict(oracle(setup, [34, 48, 50]).live) == live


@pytest.mark.parametrize(("retention", "live"), [(None, _sound(3600)), (0, {})])
def test_rule_4_no_checkpoint_before_n_under_retention_0(
    retention: int | None, live: dict[int, int]
) -> None:
    """Chunk [0, 3601) would checkpoint the prompt's own 3600; with R = 0 it reserves nothing."""
    assert dict(oracle(_ckpt(3602, retention=retention), [3601, 3602]).live) == live


@pytest.mark.parametrize(
    ("version", "cfg", "ends", "live"),
    [
        # 0.29 writes the state at the chunk's last block boundary (16) into its checkpoint
        # block, keyed when 0.29's mask keeps the column (here the boundary N - 1's)
        ("0.29.0", _K29, [1, 4, 12, 19], {12: 12, 16: 16}),
        # and writes none from a chunk that ends on the grid ([4, 12) here)
        ("0.29.0", _K29.replace(retention=-1), [4, 12, 19], {4: 4, 12: 12, 16: 16}),
        # R = 0: 0.30 evicts every checkpoint, the prompt's own too; 0.31 keeps the prompt's
        ("0.30.0", _K0, [5], {}),
        ("0.31.0", _K0, [5], {4: 4}),
        ("0.33.0", _K0, [5], {4: 4}),
        # R > 0: 0.30-0.31 re-key every checkpoint; 0.32 on only one the segments keep
        ("0.31.0", _K12, [8, 16, 22], {4: 4, 12: 12, 20: 20}),
        ("0.32.0", _K12, [8, 16, 22], {12: 12, 20: 20}),
        # 0.30-0.31 place it at ck30(e, H, drop) = fl(e - 1, H) - H, 0.32 on at fl(e, A) - A
        ("0.30.0", _KD, [12, 19], {12: 12}),
        ("0.33.0", _KD, [12, 19], {8: 8, 12: 12}),
    ],
)
def test_rules_4_and_6_are_each_releases(
    version: str, cfg: Config, ends: list[int], live: dict[int, int]
) -> None:
    """Where a chunk's checkpoint goes and whether the cache keeps it are each release's
    (measured on the real trees' ``allocate_slots`` after these prefills;
    ``tests/test_kv_resend_fidelity.py`` draws such prefills at random)."""
    assert dict(oracle(cfg, ends, rules=kv_rules(version)).live) == live


@pytest.mark.parametrize(
    ("junction", "live"), [(0, {3200: 2002}), (2000, {2000: 2000, 3200: 2002})]
)
def test_rule_6_junction_checkpoint(junction: int, live: dict[int, int]) -> None:
    """A checkpoint at J > 0 is kept although it is neither ckpos(N, A) nor on the grid."""
    assert dict(oracle(_ckpt(3602, junction=junction), [2002, 3602]).live) == live


@pytest.mark.parametrize(
    ("hash_block", "exact", "live"),
    [
        (16, True, {2000: 2000, 3200: 2000}),
        (16, False, {3200: 2000}),  # without the shared-prefix checkpoint S, J is not keyed
        (1600, True, {3200: 2000}),
    ],
)
def test_rule_7_junction_variant_needs_fine_hits_and_the_exact_junction(
    hash_block: int, exact: bool, live: dict[int, int]
) -> None:
    setup = SlotSetup(3602, 1600, hash_block=hash_block, junction=2000, exact_junction=exact)
    assert dict(oracle(setup, [2000, 3602]).live) == live


def test_rule_9_retention_within_one_block_is_dense() -> None:
    setup = SlotSetup(49, 16, retention=16)
    assert dict(oracle(setup, [16, 32, 48, 49]).live) == _sound(16, 32, 48)


def test_rule_9_positive_retention_also_keeps_the_replay_boundary() -> None:
    """R = 32, N = 60: the replay boundary's block (claim 48) is off the R grid but kept.

    This follows R4 ("additionally keep blocks j with (j+1)*B = 0 mod R"), which the vLLM
    mask code matches; rule 9's R > 0 line, read alone, would drop 48 and give a resend of 32.
    """
    report = oracle(SlotSetup(60, 16, retention=32), [16, 32, 48, 60])
    assert dict(report.live) == _sound(32, 48)
    assert report.resend_hit == 48


@pytest.mark.parametrize(
    ("lookahead", "live", "resend"),
    [
        (0, _sound(32), 32),  # EAGLE boundaries max(48 - 16, 0) = 32
        (1, _sound(48), 48),  # hash lookahead forces the drop off: boundary N - 1 = 48
    ],
)
def test_rule_9_retention_0_eagle_boundaries(
    lookahead: int, live: dict[int, int], resend: int
) -> None:
    setup = SlotSetup(49, 16, drop=True, hash_lookahead=lookahead, retention=0)
    report = oracle(setup, [16, 32, 48, 49])
    assert dict(report.live) == live
    assert report.resend_hit == resend


def test_rule_11_decode_covers_each_boundary_it_reaches() -> None:
    """One chunk [0, 40) leaves column 1 null (W3, no 32); decode to 100 keys 48 to 96."""
    report = oracle(SlotSetup(40, 16), [40], decode_steps=60)
    assert report.violations == ()
    assert dict(report.live) == _sound(48, 64, 80, 96)


# --- property tests: the oracle's violations are SPEC P3's crossings ----------------------------


@st.composite
def traces(draw: st.DrawFn, *, fine: bool) -> tuple[SlotSetup, list[int]]:
    """A random setup and chunk-end sequence: any scheduler block S (a multiple of B), hash
    lookahead, retention, junction and start; with ``fine``, any h | B and checkpoints."""
    block = draw(st.integers(1, 48))
    prompt = draw(st.integers(1, 6 * block + 20))
    start = draw(st.integers(0, prompt - 1))
    inner = draw(st.sets(st.integers(start + 1, prompt), max_size=8))
    divisors = [h for h in range(1, block + 1) if block % h == 0]
    sched = block * draw(st.sampled_from([1, 1, 2, 3]))
    setup = SlotSetup(
        prompt=prompt,
        block=block,
        hash_block=draw(st.sampled_from(divisors)) if fine else None,
        sched_block=sched,
        drop=draw(st.booleans()),
        hash_lookahead=draw(st.integers(0, 3)),
        checkpoint_alignment=draw(st.sampled_from([None, 1, 4, 16])) if fine else None,
        retention=draw(st.sampled_from([None, None, 0, sched, 2 * sched])),
        junction=draw(st.integers(0, prompt)),
        start=start,
        exact_junction=draw(st.booleans()),
    )
    return setup, sorted(inner | {prompt})


@settings(max_examples=400)
@given(traces(fine=False))
def test_violations_are_exactly_the_crossings(trace: tuple[SlotSetup, list[int]]) -> None:
    """h = B, no checkpoints: V = [crossing_claim(s, e) for each chunk], whatever S, L_h and
    the retention are (the walk over registered columns equals the per-chunk rule)."""
    setup, ends = trace
    assert list(oracle(setup, ends).violations) == _expected_poisons(setup, ends)


@settings(max_examples=400)
@given(traces(fine=True))
def test_violations_are_the_crossings_with_any_hash_block_and_checkpoints(
    trace: tuple[SlotSetup, list[int]],
) -> None:
    """Still so with any h | B and checkpoints on: neither prevents R1(a) (slot note 4.2)."""
    setup, ends = trace
    assert list(oracle(setup, ends).violations) == _expected_poisons(setup, ends)


# --- the real 0.33.0 manager -------------------------------------------------------------------

GOLDEN = Path(__file__).parent / "data" / "slot_golden_0.33.0.jsonl.gz"


def _golden() -> list[dict[str, Any]]:
    with gzip.open(GOLDEN, "rt") as stream:
        return [json.loads(line) for line in stream]


def _outside_the_model(case: dict[str, Any]) -> bool:
    """The one layout the oracle does not model: no group holds draft layers, so 0.33.0 flags
    every group as EAGLE (the Mamba group included), which adds J - B to its retention mask
    and widens its cacheable count with S > B. Real drafters have layers of their own."""
    return bool(
        case["eagle_groups"] == "all"
        and case["drop"]
        and (case["junction"] > 0 or case["sched_block"] > case["block"])
    )


def test_oracle_equals_the_real_manager_on_every_golden_case() -> None:
    """Every case agrees, but for (at most) the three of the one layout outside the model."""
    cases = _golden()
    assert len(cases) == 4000
    mismatched: list[str] = []
    for case in cases:
        setup = SlotSetup(
            prompt=case["prompt"],
            block=case["block"],
            hash_block=case["hash_block"],
            sched_block=case["sched_block"],
            drop=case["drop"],
            hash_lookahead=case["hash_lookahead"],
            checkpoint_alignment=case["checkpoint_alignment"],
            retention=case["retention"],
            junction=case["junction"],
            start=case["start"],
            exact_junction=case["exact_junction"],
            tokens=case["tokens"],
        )
        report = oracle(setup, case["ends"])
        live = [[claim, [held]] for claim, held in sorted(report.live.items())]
        poisons = sorted([p.claim, p.held] for p in report.violations)
        resend = setup.resend_position
        candidates = [p for p in [*report.live, *case["inherited"]] if p <= resend]
        hit = max((p for p in candidates if p % hit_unit(setup.fields) == 0), default=0)
        if (live, poisons, hit) != (case["live"], case["poisonings"], case["resend_hit"]):
            assert _outside_the_model(case), f"oracle {live} {poisons} {hit}, real {case}"
            mismatched.append(str(case["id"]))
    assert len(mismatched) <= 3, mismatched


def test_a_configuration_reaches_the_oracle_with_its_checkpoint_alignment() -> None:
    """Slot note 6 rule 4 (W6) through the Config path (:meth:`SlotSetup.of`): a one-chunk
    prefill of T = 5 on B = 4 with internal checkpoints at alignment 1 writes the checkpoint
    at 4, so an identical resend hits 4; without checkpoints nothing is covered and it hits 0."""
    with_checkpoints = Config(
        block=4, prompt=5, max_sched=5, checkpoints=True, checkpoint_alignment=1
    )
    report = oracle(with_checkpoints, [5])
    assert (sorted(report.covered), report.resend_hit) == ([4], 4)
    assert SlotSetup.of(with_checkpoints).checkpoint_alignment == 1
    report = oracle(Config(block=4, prompt=5, max_sched=5), [5])
    assert (sorted(report.covered), report.resend_hit) == ([], 0)


def test_no_column_is_reachable_under_drop_below_one_scheduling_block() -> None:
    """Rule 9 with drop at N = S = B = 1: both replay boundaries, max(S*fl((N-1)/S) - S, 0)
    and max(S*fl(N/S) - S, 0), are 0, which floors to no column (-1): column 0 is not
    reachable."""
    cfg = Config(block=1, prompt=1, lookahead=1, drop=True, max_sched=8)
    assert reachable_column(cfg, -1)
    assert not reachable_column(cfg, 0)


def test_rule_7_keys_an_exact_junction_at_the_prompt_end() -> None:
    """Rule 7 with fine hits and the exact shared-prefix checkpoint: a chunk ending on the
    junction J keys it for start < J <= N, so J = N = 40 (off the 16-token grid) is keyed."""
    setup = SlotSetup(prompt=40, block=16, hash_block=8, junction=40, exact_junction=True)
    assert oracle(setup, [16, 40]).live == {16: 16, 40: 40}


# -- SPEC KV1: the release's resend position and retention ------------------------------------


@pytest.mark.parametrize(
    ("version", "prompt", "block", "resend"),
    [
        ("0.28.0", 6400, 1600, 3200),  # capped at P - 1 before the EAGLE drop
        ("0.30.0", 12, 4, 4),
        ("0.31.0", 12, 4, 4),
        ("0.32.0", 12, 4, 8),  # capped at the hashed length
        ("0.33.0", 12, 4, 8),
        ("0.32.0", 6400, 1600, 4800),
    ],
)
def test_release_resend_position_under_drop(
    version: str, prompt: int, block: int, resend: int
) -> None:
    cfg = Config(block=block, prompt=prompt, max_sched=prompt, lookahead=1, drop=True)
    assert kv_rules(version).resend(cfg) == resend


@pytest.mark.parametrize(
    ("version", "args", "violated"),
    [
        ("0.28.0", {"block": 1600, "lookahead": 1, "prompt": 6400}, (0, 4800)),
        ("0.30.0", {"block": 4, "lookahead": 1, "prompt": 12}, (0, 8)),
        ("0.29.0", {"block": 1600, "lookahead": 1, "prompt": 11910, "retention": 0}, (0, 9600)),
    ],
)
def test_p6_known_answers_per_release(
    version: str, args: dict[str, int], violated: tuple[int, int]
) -> None:
    """The reported cases: P6 is violated under the release's own rules, not under 0.33's."""
    cfg = Config.from_dict({"max_sched": 16384, "drop": True, **args})
    policy = policy_for_release(version)
    assert edge_properties(policy)["P6"](cfg, *violated)
    assert not skips_resend(cfg, *violated)


@pytest.mark.parametrize(
    ("version", "args", "landing", "resend"),
    [
        # 0.28, no drop: the lookup caps at N - 1 = 7, so 6; no chunk end keys 6 (B = 4, the
        # tail is 8), so R* is the block end 4
        ("0.28.0", {"prompt": 8, "lookahead": 0, "drop": False}, 6, 4),
        # 0.33, the drop with L = 2: attention up to 4 (N - 1 = 5 cached), less h = 2; no chunk
        # end keys 2, so R* is 0 and P6 has nothing to ask
        ("0.33.0", {"prompt": 6, "lookahead": 2, "drop": True}, 2, 0),
        # 0.33 without the drop: the tail T = 6 = ck33(7, 2), keyed by its own copy
        ("0.33.0", {"prompt": 7, "lookahead": 1, "drop": False}, 6, 6),
    ],
)
def test_r_star_is_the_last_position_a_chunk_end_can_key(
    version: str, args: dict[str, Any], landing: int, resend: int
) -> None:
    """SPEC KV1, P6: R* is the largest position at most where the lookup can land that a chunk
    end can leave live (a block end, the tail keyed by its own copy), not a hash-block end no
    chunk end keys (B = 4, h = 2, fine hits)."""
    fields = {"block": 4, "hash_block": 2, "partial_hits": True, "max_sched": 8}
    cfg = Config.from_dict({**fields, **args})
    rules = kv_rules(version)
    lands = landing_v28(cfg) if version == "0.28.0" else dropped_landing(cfg, rules.lookup(cfg))
    assert (lands, rules.resend(cfg)) == (landing, resend)
    reached = oracle(cfg, list(range(1, cfg.prompt + 1)), rules=rules)
    assert reached.resend_hit == resend  # every chunk end: the best a split can leave


@pytest.mark.parametrize("version", ["0.28.0", "0.32.0", "0.33.0"])
def test_multi_module_mtp_keeps_r_star_below_the_last_chunk(version: str) -> None:
    """SPEC KV1: with L = 3 under the drop, the coordinator caches P - 2 tokens, so the
    attention group keys the full blocks up to 4800, the drop takes one off, and R* after the
    prefill is 3200 in every release (0.32's uncapped lookup repairs L <= 1 only): the chunk
    [0, 4800) runs over it (checked on the real trees, ``tests/test_p6_repro.py``)."""
    cfg = Config(block=1600, prompt=6400, max_sched=8192, lookahead=3, drop=True)
    rules = kv_rules(version)
    assert (rules.resend(cfg), rules.lookup(cfg)) == (3200, 3200 if version == "0.28.0" else 4800)
    assert edge_properties(policy_for_release(version))["P6"](cfg, 0, 4800)


def test_retention_v29_keeps_only_the_unshifted_boundary() -> None:
    """0.29's mask keeps the column of P - 1 (11200 for 11910/1600), not R* = 9600."""
    cfg = Config(block=1600, prompt=11910, max_sched=16384, lookahead=1, drop=True, retention=0)
    assert [keeps_v29(cfg, j) for j in range(7)] == [False] * 6 + [True]
    assert keeps(cfg, 5)


JUNCTION_MASK = Config(block=4, prompt=20, max_sched=20, retention=0, junction=10)
"""T = 20, B = 4, R = 0, J = 10: 0.29's reachable boundaries are P - 1 = 19 and J."""


def test_retention_v29_keeps_the_junctions_column() -> None:
    """0.29's mask keeps the columns of P - 1 and of the junction J, floored to the block grid
    (8 and 16 for :data:`JUNCTION_MASK`), and no other."""
    assert [keeps_v29(JUNCTION_MASK, j) for j in range(5)] == [False, True, False, True, False]


@pytest.mark.fidelity
def test_the_real_0_29_mask_keeps_the_junctions_column() -> None:
    """The real 0.29.0 coordinator, caching :data:`JUNCTION_MASK`'s prompt for a request whose
    junction is 10, keys the Mamba blocks ending at 8 and 16, as ``keeps_v29`` says."""
    tree = compiled_kv_tree(release_root("0.29.0"))
    coordinator = kv_coordinator(tree, JUNCTION_MASK, False)
    keyed = registered(coordinator, JUNCTION_MASK, JUNCTION_MASK.prompt)
    assert keyed.get(MAMBA_GROUP) == {8, 16}


@pytest.mark.parametrize(("version", "poisoned"), [("0.26.0", True), ("0.30.0", False)])
def test_p3_keys_the_crossing_claim_under_the_releases_mask(version: str, poisoned: bool) -> None:
    """SPEC P3 under the release's retention mask (KV1): T = 5, B = 4, the drop, R = 0, ends
    1 and 5. 0.24-0.29 keep the column of N - 1 = 4 (column 0), so the chunk [1, 5) keys 4
    onto the block holding state@1; 0.30's mask keeps the drop's boundaries (column -1) and
    keys nothing (both checked against the real caches by tests/test_kv_resend_fidelity.py)."""
    cfg = Config(block=4, prompt=5, max_sched=4, lookahead=1, drop=True, retention=0)
    rules = kv_rules(version)
    report = oracle(cfg, [1, 5], rules=rules)
    assert (report.violations == (Poison(claim=4, held=1, step=1),)) is poisoned
    assert edge_properties(policy_for_release(version))["P3"](cfg, 1, 5) is poisoned
    assert (crossing_claim(cfg, 1, 5, rules) == 4) is poisoned


@pytest.mark.parametrize(
    ("version", "prompt", "resend"),
    [
        ("0.28.0", 37, 32),  # G*floor(36/G) - G = 32, rounded to S = 8: 32, not 36//8*8 - 8 = 24
        ("0.31.0", 13, 8),
        ("0.32.0", 40, 32),  # the hashed length 40: 40 - 4 = 36, rounded to 8
        ("0.33.0", 37, 32),
    ],
)
def test_dropped_hit_rounds_the_attention_block_down_to_s(
    version: str, prompt: int, resend: int
) -> None:
    """SPEC KV1: without fine hits under the drop, the attention group (block G = 4 < S = 8)
    drops one of its own blocks and the coordinator rounds down to S. The rule as each release
    states it: from 0.26 these releases derive fine hits from H < B (SPEC S1b), so they refuse
    this configuration, and the release rule is compared with the real coordinators on
    accepted ones by tests/test_kv_lookup_fidelity.py."""
    cfg = Config(
        block=8,
        split_block=4,
        hash_block=4,
        partial_hits=False,
        prompt=prompt,
        max_sched=64,
        lookahead=1,
        drop=True,
    )
    assert kv_rules(version).resend(cfg) == resend
    assert policy_for_release(version).accepts(cfg) is not None


def test_slot_setup_attention_block_defaults_to_s() -> None:
    """G defaults to S, so a setup that gives only S keeps S*floor(L/S) - S under the drop."""
    setup = SlotSetup(prompt=185, block=48, sched_block=96, drop=True)
    assert setup.resend_position == 0
    assert (
        SlotSetup(prompt=185, block=48, sched_block=96, split_block=32, drop=True).resend_position
        == 96
    )


def test_the_tail_at_its_least_position_is_keyed() -> None:
    """Slot note 6 rule 7 at T = 1 (h = 1, P = 2, fine hits): the chunk ending at the tail keys
    it, so state@1 is live there and an identical resend hits it."""
    cfg = Config(block=2, prompt=2, max_sched=2, hash_block=1, partial_hits=True)
    assert tail_position(cfg) == 1
    report = oracle(cfg, [1, 2])
    assert (report.live, report.resend_hit) == ({1: 1, 2: 2}, 1)


def test_a_release_before_0_32_keys_its_tail_off_the_grid() -> None:
    """Rule 7 under 0.28's rules (T = h*floor(N/h), no own copy on the grid; SPEC KV1, checked
    against the real managers by the fidelity tests): a tail one past a block boundary (T = 5
    and T = 9, B = 4) is keyed by the chunk ending there (rule 5 keys block ends only)."""
    rules = kv_rules("0.28.0")
    off_grid = Config(block=4, prompt=5, max_sched=8, hash_block=1, partial_hits=True)
    assert rules.tail(off_grid) == 5 and not rules.grid_tail
    assert oracle(off_grid, [4, 5], rules=rules).live.get(5) == 5
    later = Config(block=4, prompt=9, max_sched=8, hash_block=1, partial_hits=True)
    assert rules.tail(later) == 9
    assert oracle(later, [8, 9], rules=rules).live.get(9) == 9


SEEDED_RELEASES = ("0.15.0", "0.24.0", "0.26.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0")
"""One release of each cache-rule group (SPEC KV1), the retention mask of 0.24 on included."""


@pytest.mark.parametrize("version", SEEDED_RELEASES)
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_seeded_hit_is_the_oracle_resend_hit(version: str, data: st.DataObject) -> None:
    """``KvRules.seeded`` (KV2 rule 2d's hit, in the policy subset for the engines) holds
    exactly when the slot oracle says an identical resend lands at c0 after a prefill ending at
    c0 and P (under the release's R* after a real prefill, SPEC KV1)."""
    rules = kv_rules(version)
    minor = int(version.split(".")[1])
    block = data.draw(st.sampled_from((4, 8)))
    split = data.draw(st.sampled_from((block, block // 2)))
    hash_block = data.draw(st.sampled_from((split, split // 2)))
    cfg = Config(
        block=block,
        split_block=split,
        hash_block=hash_block,
        partial_hits=hash_block < block and minor >= 26,
        prompt=data.draw(st.integers(2, 6 * block)),
        max_sched=8,
        lookahead=data.draw(st.integers(0, 2)),
        drop=data.draw(st.booleans()),
        retention=data.draw(st.sampled_from((-1, 0, block, 2 * block))) if minor >= 24 else -1,
    )
    start = data.draw(st.integers(1, cfg.prompt - 1))
    landed = oracle(cfg, [start, cfg.prompt], rules=rules).resend_hit == start
    seeded = cfg.replace(start=start)
    assert rules.seeded(seeded) == landed, seeded.describe()


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from((4, 8)),
    st.integers(1, 40),
    st.sampled_from((-1, 0, 1, 2, 3)),
    st.booleans(),
    st.integers(0, 12),
    st.integers(-1, 12),
    st.integers(0, 3),
)
def test_keeps_some_is_keeps_over_a_range(
    block: int, prompt: int, segments: int, drop: bool, low: int, high: int, junction: int
) -> None:
    """``keeps_some`` (the closed form P3 uses for 0.30-0.31's spare blocks) is some column of
    [low, high] under :func:`keeps`, for R = None, 0 and multiples of B."""
    retention = segments * block if segments >= 0 else -1
    cfg = Config(
        block=block,
        prompt=prompt,
        max_sched=64,
        lookahead=1,
        drop=drop,
        retention=retention,
        junction=min(junction * block // 2, prompt),
    )
    expected = any(keeps(cfg, j) for j in range(low, high + 1))
    assert keeps_some(cfg, low, high) == expected


@pytest.mark.parametrize(("version", "claims"), [("0.30.0", [8]), ("0.31.0", [8]), ("0.32.0", [])])
def test_spare_claims_are_the_spare_blocks_block_ends(version: str, claims: list[int]) -> None:
    """T = 13, B = 4, L = 1, alignment 1: the chunk [4, 13) writes its checkpoint at 12 and, in
    0.30-0.31, keeps the speculative block of [0, 4) in place at column 1, keyed at 8 (what a
    P3 verdict names; ``tests/test_kv_resend_fidelity.py`` sees the real trees key it). The
    oracle's live map says its block holds no position at all (a negative held)."""
    cfg = Config(block=4, prompt=13, max_sched=9, lookahead=1, checkpoints=True)
    cfg = cfg.replace(checkpoint_alignment=1)
    assert spare_claims(cfg, 4, 13, kv_rules(version)) == claims
    live = dict(oracle(cfg, [4, 13], rules=kv_rules(version)).live)
    assert [claim for claim, held in live.items() if held < 0] == claims  # no position held
