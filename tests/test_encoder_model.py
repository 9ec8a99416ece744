"""Encoder items in the single-request model (SPEC X5): the inputs, the stage at each
release's position, the known answers of vLLM #40707, and the commands over item ranges.

The known answers are the scenarios of the encoder-and-loops research note (section 5.3), run
by the built-in policies and, for the real code, by ``vllm==X.Y.Z`` (both must agree with the
note's real-code driver): S1 (B=16, M=C=32, items [4,24) and [26,46), T=60: stuck at c=16 up
to 0.27, four chunks from 0.28), S2 (stuck at admission up to 0.27), S3/S4 (#40707-sized, with
3-module MTP stuck at 11858 in 0.28-0.32).
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
from cli_helpers import Cli

from chunkproof.checker.cli.defaults import small_space
from chunkproof.checker.engines.search import explore
from chunkproof.model.builtin import builtin_policies, get_builtin
from chunkproof.model.config import Config, Items
from chunkproof.model.errors import ConfigError
from chunkproof.model.policy import Policy
from chunkproof.model.step import step
from chunkproof.model.trajectory import run
from chunkproof.source.loading import resolve_policy
from chunkproof.spec.properties import misaligned
from chunkproof.spec.request import RequestModel
from chunkproof.spec.space import Space, grid_from, parse_layouts

EARLY = ("vllm-0.15", "vllm-0.17", "vllm-0.23", "vllm-0.24", "vllm-0.25", "vllm-0.26", "vllm-0.27")
LATE = ("vllm-0.28", "vllm-0.29", "vllm-0.30", "vllm-0.31", "vllm-0.32", "vllm-0.33")

S1 = Config(block=16, prompt=60, max_sched=32, items=Items([(4, 20), (26, 20)]))
S2 = Config(block=8, prompt=40, max_sched=8, items=Items([(0, 5), (6, 5)]))
S4 = Config(
    block=1056,
    prompt=23800,
    max_sched=8192,
    encoder_cache=16384,
    lookahead=3,
    drop=True,
    items=Items([(15, 11844), (11861, 11844)]),
)


# --- the inputs ------------------------------------------------------------------------------


def test_without_items_the_encoder_stage_changes_nothing() -> None:
    """Every built-in policy's steps equal those of the same composition without its encoder
    stage on configurations without items (the stage is the identity there), and such a
    configuration reads and writes exactly as before the encoder fields existed."""
    rng = random.Random(11)
    for policy in builtin_policies():
        assert policy.stage("encoder") is not None, policy.name
        bare = Policy(
            policy.name,
            policy.summary,
            tuple(s for s in policy.stages if s.name != "encoder"),
            policy.split_variant,
            policy.reservation_variant,
            policy.composition,
            policy.releases,
            policy.acceptance,
        )
        for _ in range(300):
            block = rng.choice((4, 8, 16))
            cfg = Config(
                block=block,
                prompt=rng.randint(1, 60),
                max_sched=rng.randint(1, 40),
                lookahead=rng.randint(0, 3),
                drop=rng.random() < 0.5,
            )
            c = rng.randint(0, cfg.prefill_end - 1)
            budget = rng.randint(1, cfg.max_sched)
            with_stage, without = step(policy, cfg, c, budget), step(bare, cfg, c, budget)
            assert (with_stage.chunk, with_stage.unsafe is None) == (
                without.chunk,
                without.unsafe is None,
            )
    plain = Config(block=16, prompt=49, max_sched=16, lookahead=3)
    assert not {"items", "encoder_cache", "encoder_budget"} & set(plain.to_dict())
    assert plain.describe() == "T=49 B=16 L=3 M=16"


def test_items_round_trip_and_describe() -> None:
    cfg = Config.from_dict({**S1.to_dict(), "items": [[4, 20], [26, 20]]})
    assert cfg == S1 and isinstance(cfg.items, Items)
    assert S1.to_dict()["items"] == ((4, 20), (26, 20))
    assert S1.describe() == "T=60 B=16 L=0 M=32 items=4+20,26+20"
    assert Config(**{**S1.to_dict(), "encoder_cache": 40}).describe().endswith("C_enc=40")
    assert int(Items([(0, 1)])) < int(Items([(0, 1), (1, 1)])) < int(Items([(0, 2), (2, 2)]))


@pytest.mark.parametrize(
    ("items", "extra", "message"),
    [
        ([(4, 0)], {}, "length >= 1"),
        ([(4, 20), (10, 5)], {}, "without overlap"),
        ([(50, 20)], {}, "within the prompt"),
        ([(0, 40)], {"encoder_cache": 30}, "larger than the encoder cache"),
        ([(0, 20), (20, 20)], {"encoder_budget": 30}, "encoded ahead"),
    ],
)
def test_configurations_that_are_not_ones(
    items: list[tuple[int, int]], extra: dict[str, Any], message: str
) -> None:
    """SPEC S1: items in order inside the prompt, each fitting C and b0; and b0 >= min(C, the
    items' total), the region where the state is c alone."""
    with pytest.raises(ConfigError, match=message):
        Config(block=16, prompt=60, max_sched=32, items=Items(items), **extra)


def test_a_range_holds_only_the_m_that_make_configurations() -> None:
    """The rule b0 >= min(C, the items' total) reads M (C = max(M, the largest item) without
    --encoder-cache): a range over M holds the Ms that keep it and no other, in the explorer
    as in the prover's scope, and M cannot be changed to one that breaks it."""
    texts = {"block": "4", "prompt": "12", "max_sched": "1-8", "encoder_budget": "5"}
    space = Space((grid_from({**texts, "layout": "0+4,6+4"}),))
    assert sorted({cfg.max_sched for cfg in space.configs()}) == [1, 2, 3, 4, 5]
    model = RequestModel(get_builtin("vllm-0.28"), space)
    assert sorted({cfg.max_sched for b in model.batches() for cfg in b.configs}) == [1, 2, 3, 4, 5]
    cfg = next(space.configs())
    with pytest.raises(ConfigError, match="encoded ahead"):
        cfg.replace(max_sched=6)


def test_layout_ranges() -> None:
    """``--items``: absolute and gap-relative starts, alternatives; layouts outside the prompt
    are skipped."""
    layouts = list(parse_layouts("0-1+2-3,^0-1+2").values({"prompt": 8}))
    assert Items([(0, 2), (2, 2)]) in layouts and Items([(1, 3), (5, 2)]) in layouts
    assert len(layouts) == 2 * 2 * 2
    assert all(b[0] >= a[0] + a[1] for layout in layouts for a, b in itertools.pairwise(layout))
    assert list(parse_layouts("none;3+4").values({"prompt": 6})) == [Items()]
    assert parse_layouts("none;0-3+1-8,^0-4+1-8").describe() == "none;0-3+1-8,^0-4+1-8"
    with pytest.raises(ConfigError, match="START\\+LENGTH"):
        parse_layouts("4:20")


def test_every_policy_explores_an_encoder_grid() -> None:
    for policy in builtin_policies():
        labels = [grid.label for grid in small_space(policy).grids]
        assert "encoder items" in labels, policy.name


# --- the stage and its position ----------------------------------------------------------------


def test_encoder_cap_sits_where_each_release_applies_it() -> None:
    """History note 6: before the split up to 0.27, between the split and the reservation from
    0.28 (#51603); the trace records the order (``encoder_first``)."""
    for name in EARLY:
        assert [s.name for s in get_builtin(name).stages] == ["cap", "encoder", "split"], name
    for name in LATE:
        names = [s.name for s in get_builtin(name).stages]
        assert names == ["cap", "split", "encoder", "reservation"], name
    first = step(get_builtin("vllm-0.17"), S1, 0, 32)
    assert (first.n, first.encoder, first.split, first.chunk, first.encoder_first) == (
        32,
        26,
        16,
        16,
        True,
    )
    late = step(get_builtin("vllm-0.28"), S1, 0, 32)
    assert (late.n, late.split, late.encoder, late.chunk) == (32, 32, 26, 26)
    assert late.unsafe is None and first.unsafe is None


@pytest.mark.parametrize("name", EARLY)
def test_s1_livelocks_up_to_027(name: str) -> None:
    """#40707 (note 5.3 S1): the cap ends the chunk at 26, the split floors it to 16; at 16
    the first image is held, the second does not fit, the cap gives 10, the split 0: for
    ever."""
    trajectory = run(get_builtin(name), S1, [32])
    assert (trajectory.outcome, trajectory.ends, trajectory.stuck_at) == ("stuck", [16], 16)
    assert run(get_builtin(name), S2, [8]).stuck_at == 0  # S2: at admission (HOL)


@pytest.mark.parametrize("name", LATE)
def test_s1_finishes_from_028(name: str) -> None:
    """#51603: the split keeps 32, the cap cuts to 26, the first image is freed; then 32, 48,
    60 (note 5.3 S1)."""
    assert run(get_builtin(name), S1, [32]).ends == [26, 32, 48, 60]
    assert run(get_builtin(name), S2, [8]).ends[:2] == [6, 8]


def test_s4_mtp_livelock_is_0_28_to_0_32() -> None:
    """Note 5.3 S4 (#40707-sized, 3-module MTP): stuck at 11616 up to 0.27, at 11858 = s2 - L
    in 0.28-0.32 (the first image is freed only at e1 + L <= c), done in 0.33."""
    assert run(get_builtin("vllm-0.27"), S4, [8192]).stuck_at == 11616
    for name in LATE[:-1]:
        assert run(get_builtin(name), S4, [8192]).stuck_at == 11858, name
    assert run(get_builtin("vllm-0.33"), S4, [8192]).outcome == "finished"


@pytest.mark.fidelity
@pytest.mark.parametrize(
    ("version", "ends", "stuck"),
    [("0.17.0", [16], 16), ("0.27.0", [16], 16), ("0.28.0", [26, 32, 48, 60], None)],
)
def test_s1_on_the_real_code(version: str, ends: list[int], stuck: int | None) -> None:
    """The same with the release's own ``_try_schedule_encoder_inputs`` and split."""
    trajectory = run(resolve_policy(f"vllm=={version}"), S1, [32])
    assert (trajectory.ends, trajectory.stuck_at) == (ends, stuck)


def test_encoder_forced_end_is_exempt_from_p4() -> None:
    """SPEC P4 (b): 0.28's first chunk of S1 ends at 26, off the grid, where the encoder cap
    put it; it is not an ALIGN violation (it is one by the grid rule alone)."""
    assert misaligned(S1, 0, 26)
    texts = {"block": "16", "prompt": "60", "max_sched": "32", "lookahead": "0"}
    grid = grid_from({**texts, "layout": "4+20,26+20"})
    model = RequestModel(get_builtin("vllm-0.28"), Space((grid,), (32, 32)))
    found = explore(model, ("P4", "P1"))
    assert found.failing("P4", "main") == 0 and found.failing("P1", "main") == 0


# --- the commands --------------------------------------------------------------------------------

ENCODER_RANGE = (
    "--block",
    "4",
    "--lookahead",
    "0",
    "--prompt",
    "16",
    "--max-sched",
    "4-8",
    "--items",
    "0-2+2-5,^0-3+2-5",
)


def test_explore_finds_the_livelock_up_to_027_only(cli: Cli) -> None:
    """Without a drafter, the #40707 livelock on the encoder grid in 0.27, none in 0.28."""
    early = cli("explore", "vllm-0.27", *ENCODER_RANGE, "--property", "P1", "--json")
    assert early.code == 1
    verdict = early.json()["verdicts"][0]
    assert verdict["status"] == "VIOLATED" and verdict["range"]["layout"] == "0-2+2-5,^0-3+2-5"
    late = cli("explore", "vllm-0.28", *ENCODER_RANGE, "--property", "P1", "--json")
    assert late.code == 0 and late.json()["verdicts"][0]["status"] == "PROVED"


def test_explore_finds_the_mtp_form_in_028(cli: Cli) -> None:
    """With L = 1-2, 0.28 livelocks where the gap between the images is below 2L (note 5.2)."""
    args = [a if a != "0" else "1-2" for a in ENCODER_RANGE]
    result = cli("explore", "vllm-0.28", *args, "--drop", "on", "--property", "P1", "--json")
    assert result.code == 1
    latest = cli("explore", "vllm-0.33", *args, "--drop", "on", "--property", "P1", "--json")
    assert latest.json()["verdicts"][0]["status"] == "PROVED"


def test_trace_takes_items(cli: Cli) -> None:
    result = cli(
        "trace", "vllm-0.17", "--block", "16", "--prompt", "60", "--budget", "32",
        "--items", "4+20,^2+20", "--json",
    )  # fmt: skip
    document = result.json()
    assert (document["outcome"], document["stuck_at"], document["ends"]) == ("stuck", 16, [16])
    assert document["steps"][0]["encoder"] == 26 and document["config"]["items"] == [
        [4, 20],
        [26, 20],
    ]
    bad = cli("trace", "vllm-0.17", "--block", "16", "--prompt", "20", "--budget", "8",
              "--items", "4+20")  # fmt: skip
    assert bad.code == 2 and "within the prompt" in bad.err


def test_prove_keeps_item_positions_symbolic(cli: Cli) -> None:
    """The prover keeps the positions and lengths symbolic per number of items; it finds the
    #40707 livelock of 0.17 and proves 0.28 without a drafter."""
    ranges = (
        "--block", "16", "--lookahead", "0", "--drop", "off", "--prompt", "1-4096",
        "--max-sched", "16-512", "--items", "0-64+1-600,^0-64+1-600", "--property", "P1",
    )  # fmt: skip
    early = cli("prove", "vllm-0.17", *ranges, "--json")
    assert early.code == 1, early.out + early.err
    late = cli("prove", "vllm-0.28", *ranges, "--json")
    assert late.code == 0, late.out + late.err
    assert late.json()["verdicts"][0]["range"]["layout"] == "0-64+1-600,^0-64+1-600"
