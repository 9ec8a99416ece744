"""Synthesis (SPEC Y): the template's space, the refutation of a counterexample over the holes,
the search and its command."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from cli_helpers import Cli
from solver_limits import SOLVER_ARGS

from chunkproof.checker.cli.defaults import small_space
from chunkproof.checker.engines.search import explore, minimal_counterexample
from chunkproof.checker.engines.traces import violates
from chunkproof.model.builtin import get_builtin
from chunkproof.model.config import Config
from chunkproof.model.counterexample import Counterexample
from chunkproof.model.errors import PolicyError
from chunkproof.model.holes import HOLES, candidate_policy, candidate_source, parse_name
from chunkproof.model.policy import Policy
from chunkproof.model.step import step, step_view
from chunkproof.proofs.refutation import HoleSolver
from chunkproof.source.functions import TreeStage, read_function
from chunkproof.spec.properties import ends_breaking
from chunkproof.spec.request import RequestModel, budget_bounds

BASE = get_builtin("vllm-0.33")

EVERY_CANDIDATE = [
    dict(zip([h.name for h in HOLES], values, strict=True))
    for values in itertools.product(*[range(h.size) for h in HOLES])
]

TINY = [
    "--block",
    "4",
    "--lookahead",
    "2",
    "--hash-block",
    "2",
    "--prompt",
    "1-6",
    "--max-sched",
    "1-4",
    "--start",
    "0,external",
]
"""A range that holds 0.33's window livelock (T=3 B=4 H=2 L=2 M=2 c0=1, SPEC K) and a
conflict, small enough that a whole search takes a few seconds."""


def exhibits(policy: Policy, cx: Counterexample, window: str) -> bool:
    """Whether ``policy``'s concrete form follows ``cx``'s trace and breaks its property at
    the last step (what the refutation negates, SPEC Y2)."""
    cfg = cx.config
    *earlier, last = cx.steps
    for s in earlier:
        mine = step(policy, cfg, s.c, s.budget)
        if mine.unsafe is not None or mine.chunk <= 0 or mine.chunk != s.chunk:
            return False
    high = budget_bounds(cfg, None)[1]
    final = step(policy, cfg, last.c, last.budget)
    return violates(cx.property, cfg, final, window, high, policy=policy)


def counterexamples(policy: Policy, window: str) -> list[Counterexample]:
    """The explorer's minimal counterexample of each property ``policy`` breaks on the tiny
    range's default grids."""
    model = RequestModel(policy, small_space(policy), window)
    pids = ("P0", "P1", "P3", "P4", "P5", "P6")
    exploration = explore(model, pids)
    found = [minimal_counterexample(exploration, pid, "main") for pid in pids]
    return [cx for cx in found if cx is not None]


@pytest.mark.parametrize(
    ("candidate", "policy"),
    [
        ("vllm-0.33+finish=0,back=0,spare=0,keep=0", "vllm-0.33"),
        ("vllm-0.33+finish=1,back=1,spare=1,keep=0", "lookahead-in-split"),
    ],
)
def test_the_space_holds_the_release_and_lookahead_in_split(
    candidate: str, policy: str, cli: Cli
) -> None:
    """SPEC Y1: every hole at 0 is V9 with R1, and finish=1 back=1 spare=1 keep=0 is SPEC V's
    lookahead-in-split, both proved equal by Z3."""
    ranges = ["--block", "4,16", "--lookahead", "0-4", "--jobs", "1"]
    run = cli("conform", candidate, "--against", policy, *ranges, *SOLVER_ARGS)
    assert run.code == 0, run.out + run.err
    assert "EQUAL" in run.out


@pytest.mark.slow
@pytest.mark.parametrize("window", ["strict", "relaxed"])
def test_the_refutation_is_exactly_not_exhibiting(window: str) -> None:
    """SPEC Y2: for every candidate of the space and every counterexample of two candidates,
    the refutation over the holes holds at the candidate exactly when its concrete form does
    not exhibit the counterexample."""
    met = [
        cx
        for values in (EVERY_CANDIDATE[0], {"finish": 3, "back": 0, "spare": 0, "keep": 1})
        for cx in counterexamples(candidate_policy(BASE, values), window)
    ]
    assert {cx.property for cx in met} >= {"P1", "P3", "P4", "P5"}
    solver = HoleSolver(BASE, window)
    witnesses = [solver.add(cx) for cx in met]
    for values in EVERY_CANDIDATE:
        policy = candidate_policy(BASE, values)
        for w in witnesses:
            refuted = solver.refutes(values, w)
            assert refuted == (not exhibits(policy, w.cx, window)), (values, w.cx.config)


def test_a_pick_refutes_every_witness_and_changes_least() -> None:
    """SPEC Y2, Y4: the pick refutes every witness that counts, is not one tried, and no
    consistent candidate changes fewer holes."""
    solver = HoleSolver(BASE, "strict")
    for cx in counterexamples(BASE, "strict"):
        solver.add(cx)
    kept = ["P1"]
    picked = solver.pick(kept, [])
    assert picked is not None and solver.consistent(picked, kept, [])
    consistent = [v for v in EVERY_CANDIDATE if solver.consistent(v, kept, [])]
    changed = sum(1 for v in picked.values() if v)
    assert changed == min(sum(1 for v in c.values() if v) for c in consistent)
    again = solver.pick(kept, [], [picked])
    assert again is not None and again != picked


def test_a_property_every_candidate_breaks_is_a_conflict_of_its_own() -> None:
    """SPEC Y3: 0.33 breaks P3 with L = 0, where no hole acts: its witness alone is
    unrefutable."""
    solver = HoleSolver(BASE, "strict")
    p3 = [cx for cx in counterexamples(BASE, "strict") if cx.property == "P3"]
    assert p3 and p3[0].config.lookahead == 0
    solver.add(p3[0])
    assert solver.pick(["P3"], []) is None
    assert [w.cx for w in solver.conflict(["P3"], [])] == p3[:1]


def test_an_inherent_conflict_is_every_end_breaking_one() -> None:
    """SPEC Y3, K: at 0.33's livelock T=3 B=4 H=2 L=2 M=2 c0=1 (external) every chunk from the
    admission breaks P5 (end 2, inside the window) or P6 (end 3, over R* = 2)."""
    cfg = Config(
        block=4, prompt=3, tokens=3, lookahead=2, max_sched=2, hash_block=2, start=1, external=1
    )
    assert ends_breaking(BASE, cfg, 1, 2, ("P5", "P6"), "relaxed") == {2: ("P5",), 3: ("P6",)}
    assert ends_breaking(BASE, cfg, 1, 2, ("P5",), "relaxed")[3] == ()


def test_a_candidate_name_reads_back() -> None:
    """A candidate's name is a policy (SPEC Y5), and a wrong hole value is one clear error."""
    policy = candidate_policy(BASE, EVERY_CANDIDATE[5])
    named = parse_name(policy.name)
    assert named == ("vllm-0.33", EVERY_CANDIDATE[5])
    assert parse_name("vllm-0.33") is None
    with pytest.raises(PolicyError, match="not a hole value"):
        parse_name("vllm-0.33+finish=9,back=0,spare=0,keep=0")
    with pytest.raises(PolicyError, match="base is one of"):
        candidate_policy(get_builtin("vllm-0.28"), EVERY_CANDIDATE[0])


def test_the_candidate_source_is_the_candidate(tmp_path: Path) -> None:
    """SPEC Y5: the written module's ``split`` and ``reservation``, read as a user's file
    (never imported), compute the candidate's stages on every state and budget of a sample of
    the default grids' configurations."""
    values = {"finish": 2, "back": 1, "spare": 2, "keep": 1}
    path = tmp_path / "candidate.py"
    path.write_text(candidate_source(BASE, values))
    policy = candidate_policy(BASE, values)
    read = {name: TreeStage(read_function(path, name)) for name in ("split", "reservation")}
    batches = RequestModel(BASE, small_space(BASE), "strict").batches()
    sample = [cfg for batch in batches for cfg in batch.configs][::1499]
    assert len(sample) > 100
    for cfg in sample:
        for c in range(cfg.start, cfg.prefill_end):
            view = step_view(cfg, c, lambda f, args: f(*args))
            for n in range(1, cfg.max_sched + 1):
                for name, stage in read.items():
                    mine = policy.stage(name)
                    assert mine is not None
                    assert stage(view, c, n) == mine.function(view, c, n), (name, cfg, c, n)


def test_synthesize_finds_the_least_cost_candidate_and_says_what_gives_way(
    tmp_path: Path, cli: Cli
) -> None:
    """SPEC Y: on the tiny range the search ends FOUND, every consistent candidate checked;
    the candidate keeps P1 where 0.33 livelocks, states the conflict that made P5 give way,
    writes its witnesses and its source, and `check` of its name agrees."""
    run = cli(
        "synthesize",
        "vllm-0.33",
        *TINY,
        "--no-prove",
        "--jobs",
        "1",
        "--out",
        str(tmp_path),
        "--json",
    )
    assert run.code == 1, run.err
    found = run.json()
    assert found["status"] == "FOUND" and found["optimal"] and not found["keeps_all"]
    assert "P1" in found["kept"] and "P5" in found["released"]
    assert found["standing"]["failing"]["P1"]["base"] > 0
    assert found["standing"]["failing"]["P1"]["candidate"] == 0
    conflict = {w["property"] for w in found["conflicts"][0]["witnesses"]}
    assert "P5" in conflict and len(conflict) > 1
    assert any(f.endswith("candidate.py") for f in found["files"])
    assert all(Path(w["file"]).is_file() for r in found["rounds"] for w in r["met"])
    check = cli("check", found["candidate"], *TINY, "--property", "P1", "--out", str(tmp_path))
    assert check.code == 0, check.out


def test_synthesize_refuses_what_it_cannot_search(cli: Cli) -> None:
    """Bad input: a base without the template's stages, or a property synthesis does not keep,
    is one line and exit 2."""
    for argv in (["vllm-0.28"], ["vllm-0.33", "--property", "P7"]):
        run = cli("synthesize", *argv, *TINY, "--no-prove")
        assert run.code == 2
        assert run.err.count("\n") == 1 and "error" in run.err


def test_a_round_limit_gives_the_best_found_not_the_least_cost(tmp_path: Path, cli: Cli) -> None:
    """SPEC Y4: stopped by ``--rounds`` before every consistent candidate was checked, the
    result is the best found, and says so (without the drop: with it and L = 2 every candidate
    breaks P6, SPEC KV1)."""
    argv = ["synthesize", "vllm-0.33", *TINY, "--drop", "off", "--no-prove", "--jobs", "1"]
    argv += ["--rounds", "5"]
    run = cli(*argv, "--out", str(tmp_path), "--json")
    found = run.json()
    assert found["status"] == "FOUND" and not found["optimal"]
    assert found["candidates_checked"] == 5


FIXED_LIVELOCKS = [
    ["--block", "16", "--split-block", "8", "--prompt", "9", "--max-sched", "6"],
    ["--block", "16", "--prompt", "33", "--max-sched", "6-32"],
]
"""lookahead-in-split's livelocks where a partial-hit stop lands in the lookahead window
(T=9, B=16, G=8 and T=33, B=G=16; H=4, D on, L=6, every admission start)."""


@pytest.mark.parametrize("grid", FIXED_LIVELOCKS)
def test_the_synthesised_fix_ends_lookahead_in_split_s_livelocks(
    grid: list[str], tmp_path: Path, cli: Cli
) -> None:
    """The candidate `synthesize vllm-0.33` finds on its default ranges keeps P1 where
    lookahead-in-split livelocks (the explorer, every state and budget)."""
    common = [*grid, "--hash-block", "4", "--drop", "on", "--lookahead", "6"]
    common += ["--start", "0,block,hash,external", "--property", "P1", "--out", str(tmp_path)]
    fix = cli("explore", "lookahead-in-split", *common, "--json")
    assert fix.code == 1 and fix.json()["verdicts"][0]["status"] == "VIOLATED"
    found = cli("explore", "vllm-0.33+finish=2,back=1,spare=2,keep=0", *common, "--json")
    assert found.code == 0 and found.json()["verdicts"][0]["status"] == "PROVED"
