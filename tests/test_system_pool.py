"""Several requests sharing a KV block pool in ``chunkproof system --pool`` (SPEC KV2 rule 5,
S-POOL): the explicit step over NumPy lanes against the same rules on plain integers, runs that
go on for ever found on the whole explored graph (:mod:`chunkproof.checker.engines.lassos`),
their counterexample files, and bad input.

The known answer: in 0.23-0.28 the least pool the start-up check accepts counts the null block
among its blocks (SPEC KV2 rule 4), so a request of P = max_model_len - 1 tokens is refused its
last chunk even alone (SPEC P8's finding on 0.28). In the step, with T = 9, B = 8 and M = 8 in a
pool of 4 blocks, the running loop preempts the request at c = 8 and it starts again at 0, for
ever; 0.29 counts the null block on top, and its least pool serves every request.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import z3
from cli_helpers import Cli
from repro_helpers import blocking_packages, generate_repro, run_repro
from solver_limits import GUARD_MS, RLIMIT
from test_kv_pool_fidelity import ModelPool, connect_some, covered
from test_system_prove import _pinned, _places, _symbolic_state, agree, space_of

from chunkproof.checker.cli.defaults import system_space
from chunkproof.checker.engines.explorer import explore_batch
from chunkproof.checker.engines.lassos import endless
from chunkproof.checker.engines.verdicts import PROVED, VIOLATED
from chunkproof.checker.kinds import load_counterexample
from chunkproof.checker.reports.output import run_folder
from chunkproof.checker.reports.system_picture import system_marks
from chunkproof.checker.runs.system import (
    explore_system,
    pool_text,
    pooled_instances,
)
from chunkproof.checker.runs.system_prove import prove_system
from chunkproof.model.builtin import LATEST, get_builtin
from chunkproof.model.config import Config
from chunkproof.model.step import step
from chunkproof.model.system_counterexample import SystemCounterexample
from chunkproof.source.kv_alloc_run import TreePool
from chunkproof.source.releases import release_root
from chunkproof.spec.kv_blocks import connector_hit, outside_shared_pool, pool_rules
from chunkproof.spec.scheduler_loops import FINISHED, WAITING, Got
from chunkproof.spec.scheduler_step import (
    ACTION_STRIDE,
    FIELDS,
    MAX_SEQS,
    SchedulerStepModel,
    least_pool,
    request_sets,
    step_loop_rules,
)
from chunkproof.spec.scheduler_step_symbolic import SymbolicSchedulerStep, system_cells
from chunkproof.spec.slots import eagle_drop

CURATED = Path(__file__).resolve().parent.parent / "counterexamples" / "vllm-0.28"
CURATED = CURATED / "system-s-pool-least-pool.json"
"""The curated S-POOL counterexample (regenerate.sh)."""
REFUSED = ["--block", "8", "--lookahead", "0", "--drop", "off", "--prompt", "3,9"]
REFUSED += ["--max-sched", "8"]
"""Two requests, T = 3 and T = 9, B = 8, M = 8 (module docstring)."""


def test_endless_keeps_the_states_that_reach_a_cycle() -> None:
    """0 -> 1 -> 2 -> 1 loops for ever from 0, 1 and 2; 3 -> 4 ends; 5 -> 5 is a cycle of
    one; 6 has no edge."""
    source = np.array([0, 1, 2, 3, 5])
    target = np.array([1, 2, 1, 4, 5])
    assert np.flatnonzero(endless(7, source, target)).tolist() == [0, 1, 2, 5]


def test_the_least_pool_of_0_28_preempts_a_request_for_ever(cli: Cli, tmp_path: Path) -> None:
    """S-POOL on 0.28 at the least pool (4 blocks for max_model_len 10): the lasso's loop
    preempts #1 at c = 8, which keeps its c, resumes it at hit 0 (rule 5e: its blocks
    evicted) and comes back to the state before it; the file replays. Resumed at its hit 8,
    the pool refuses #1 at every step: S-LIVE. A pool of 5 holds the request's last chunk: no
    lasso."""
    least = cli("system", "vllm-0.28", *REFUSED, "--pool", "min", "--out", str(tmp_path))
    assert least.code == 1
    assert "S-POOL   VIOLATED  2 of 3 instances" in least.out, least.out
    assert "--budget 8, preempts #1-->" in least.out
    assert "--budget 8, #1 resumes at hit 0-->" in least.out
    assert "(= the state before step 2: the loop repeats for ever)" in least.out
    assert "--budget 8, #1 resumes at hit 8-->" in least.out  # S-LIVE's last step
    path = tmp_path / "vllm-0.28" / "system-S-POOL.json"
    data = json.loads(path.read_text())
    assert data["engine"]["kv_pool_blocks"] == 4 and data["loop"] == 2
    assert [s["budget"] for s in data["trace"]] == [8, 8, 8, 8]
    assert data["trace"][2]["requests"][1]["preempted"] is True
    resumed = data["trace"][3]["requests"][1]
    assert (resumed["computed"], resumed["hit"], resumed["c"]) == (8, 0, 0)
    replayed = cli("replay", str(path))
    assert replayed.code == 0 and "reproduces on vllm-0.28: S-POOL" in replayed.out
    larger = cli("system", "vllm-0.28", *REFUSED, "--pool", "5", "--json", "--out", str(tmp_path))
    verdicts = {v["property"]: v["status"] for v in larger.json()["verdicts"]}
    assert verdicts["S-POOL"] == "PROVED"


def test_a_changed_loop_does_not_replay(cli: Cli, tmp_path: Path) -> None:
    """A lasso whose loop is said to start at step 0 does not come back to that state: replay
    says so and exits 1."""
    cli("system", "vllm-0.28", *REFUSED, "--pool", "min", "--out", str(tmp_path))
    path = tmp_path / "vllm-0.28" / "system-S-POOL.json"
    data = json.loads(path.read_text())
    data["loop"] = 0
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(data))
    replayed = cli("replay", str(moved))
    assert replayed.code == 1
    assert "the state after the last step is not the one before step 0" in replayed.out


def test_from_0_29_the_least_pool_serves_every_instance(cli: Cli, tmp_path: Path) -> None:
    """0.29 counts the null block on top of its least pool: over T 1-12, B 4 and 8, L 0-1 and
    M 4 and 8, no run offered M preempts for ever."""
    ranges = ["--block", "4,8", "--lookahead", "0-1", "--drop", "off", "--prompt", "1-12"]
    ranges += ["--max-sched", "4,8"]
    done = cli("system", "vllm-0.29", *ranges, "--pool", "min", "--json", "--out", str(tmp_path))
    document = done.json()
    verdicts = {v["property"]: v for v in document["verdicts"]}
    assert verdicts["S-POOL"]["status"] == "PROVED"
    assert verdicts["S-POOL"]["instances"] == document["explored"]["instances"] > 0
    assert any("resumes at any hit on its resume grid" in line for line in document["fixed"])


def test_the_pool_leaves_out_what_it_does_not_model(cli: Cli, tmp_path: Path) -> None:
    """Requests the pool rules do not cover (here L >= 1 on 0.23-0.25) are left out and
    counted; a range with none left is EMPTY (exit 2), never PROVED."""
    ranges = ["--block", "4", "--drop", "off", "--prompt", "4-6", "--max-sched", "4"]
    mixed = cli("system", "vllm-0.23", *ranges, "--lookahead", "0-1", "--pool", "min")
    assert mixed.code in (0, 1) and "3 request configuration(s) outside the pool model" in mixed.out
    empty = cli("system", "vllm-0.23", *ranges, "--lookahead", "1", "--pool", "min")
    assert empty.code == 2 and "EMPTY" in empty.out


def test_pools_are_a_range_input() -> None:
    """The pools of a run as its range names them: runs of sizes compressed, ``none`` and
    ``min`` by name; the connector mode of each step."""
    assert pool_text(("none", "min", *range(2, 33))) == "none,min,2-32"
    assert pool_text(("8", "9", "10", "12", "min")) == "min,8-10,12"
    assert pool_text(()) == "none"


def test_a_range_given_fixes_the_pool_at_none(cli: Cli) -> None:
    """The built-in range runs the pools ``none,min,2-32``; range flags fix every input they do
    not name, the pool at ``none`` (no S-POOL verdict), unless ``--pool`` names pools, which
    may mix ``none`` with sizes: each verdict's range names the pools it was judged on."""
    plain = cli("system", "vllm-0.28", *REFUSED, "--json").json()
    assert {v["range"]["pool"] for v in plain["verdicts"]} == {"none"}
    assert "S-POOL" not in {v["property"] for v in plain["verdicts"]}
    both = cli("system", "vllm-0.28", *REFUSED, "--pool", "none,min", "--json").json()
    ranges = {v["property"]: v["range"]["pool"] for v in both["verdicts"]}
    assert ranges == {"P0": "none,min", "S-LIVE": "none,min", "HOL": "none,min",
                      "STARVE": "none,min", "S-POOL": "min"}  # fmt: skip
    explored = both["explored"]
    assert explored["instances"] == explored["unpooled_instances"] + explored["pooled_instances"]
    assert any(line.startswith("in a pool: ") for line in both["fixed"])
    assert any(line.startswith("without a pool: ") for line in both["fixed"])


def test_a_pool_below_every_start_up_check_is_empty_and_not_named(cli: Cli) -> None:
    """A pool below the least the start-up check accepts for every set holds no instance: the
    verdicts of the step without a pool name ``none`` alone, S-POOL is EMPTY over the pool
    asked (never left out, never PROVED), and a violation elsewhere still exits 1; with no
    step holding an instance every property is EMPTY and the exit is 2."""
    ranges = ["--block", "4", "--lookahead", "2", "--prompt", "5,6", "--max-sched", "8"]
    mixed = cli("system", "vllm-0.33", *ranges, "--pool", "none,2", "--json")
    assert mixed.code == 1
    verdicts = {v["property"]: v for v in mixed.json()["verdicts"]}
    assert {pid: v["range"]["pool"] for pid, v in verdicts.items()} == {
        "P0": "none", "S-LIVE": "none", "HOL": "none", "STARVE": "none", "S-POOL": "2"
    }  # fmt: skip
    assert verdicts["S-POOL"]["status"] == "EMPTY" and verdicts["S-LIVE"]["status"] == "VIOLATED"
    assert mixed.json()["explored"]["below_startup"] == 6
    alone = cli("system", "vllm-0.33", *ranges, "--pool", "2", "--json")
    assert alone.code == 2
    assert {v["status"] for v in alone.json()["verdicts"]} == {"EMPTY"}
    assert "S-POOL" in {v["property"] for v in alone.json()["verdicts"]}


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--pool", "1"], "at least 2 blocks"),
        (["--pool", "x"], "cannot read 'x'"),
        (["--pool", "2-100"], "at most 64 pool sizes"),
        (["--pool", "8", "--abstraction"], "compares the step without a pool"),
        (["--pool", "none,8", "--prove"], "two searches"),
        (["--pool", ""], "no pool given"),
        (["--pool", "8", "--adaptive-threshold"], "adaptive floor"),
    ],
)
def test_bad_pool_input_is_one_line_and_exit_2(cli: Cli, argv: list[str], words: str) -> None:
    done = cli("system", "vllm-0.33", *REFUSED, *argv)
    assert done.code == 2 and words in done.err, done.err
    assert len(done.err.strip().splitlines()) == 1 and "Traceback" not in done.err


@pytest.mark.parametrize("version", ["vllm-0.15", "vllm-0.28", "vllm-0.30", "vllm-0.34"])
def test_the_lanes_step_is_the_plain_one(version: str) -> None:
    """The explicit model's step over NumPy lanes (the pool rules evaluated per request from
    each part's fields, its rows and their stale column) schedules the same chunks, preempts
    the same requests, leaves them in the same places and raises where the loop rules on plain
    integers with the policy's concrete stages do, along random budgets and resume hits (rules
    5e-5g: one of the step's choices, drawn) of random instances, from 0.23 some of whose
    requests are admitted at a connector's hit x = c0."""
    policy = get_builtin(version)
    rules = pool_rules(policy.kv_release)
    loop_rules = policy.rules()
    assert loop_rules is not None
    rng = random.Random(f"lanes-{version}")
    compared = preempting = 0
    while compared < 150:
        block = rng.choice((4, 8))
        lookahead = rng.choice((0, 1)) if rules.speculative else 0
        group = tuple(
            connect_some(
                rng,
                Config(
                    block=block,
                    prompt=rng.randint(1, 3 * block),
                    max_sched=4 * block,
                    lookahead=lookahead,
                ),
            )
            for _ in range(rng.choice((2, 3)))
        )
        if not all(covered(rules, cfg) and policy.accepts(cfg) is None for cfg in group):
            continue
        blocks = least_pool(policy, group) + rng.randint(0, 2)
        plain = ModelPool(group, rules, blocks, max(cfg.prompt for cfg in group) + 1)
        model = SchedulerStepModel(policy, [group], symmetry=False, blocks=[blocks])
        (batch,) = model.batches()
        connected: set[int] = set()  # the step's connector hits (rule 5g), as the lanes chose

        def stages(
            p: int,
            label: int,
            c: int,
            offer: int,
            group: tuple[Config, ...] = group,
            plain: ModelPool = plain,
            connected: set[int] = connected,
        ) -> Got:
            cfg = group[label]
            if plain.phase[label] == WAITING and c > 0:  # admitted at its resume hit
                cfg = cfg.replace(start=c, external=c if label in connected else 0)
            got = step(policy, cfg, c, offer)
            return Got(got.chunk, got.split, got.unsafe is not None, got.crash is not None, 0)

        for _ in range(12):
            if plain.done():
                break
            row = _row(plain)
            budget = rng.randint(1, 4 * block)
            lane, index = model.resume_choices(batch, row[None, :])
            pick = rng.randrange(len(lane))
            moved = model.step(
                batch,
                row[None, :],
                lane[pick : pick + 1],
                np.array([budget]),
                hits=index[pick : pick + 1],
            )
            labels = [int(row[1 + FIELDS * p]) for p in range(len(group))]
            lanes = {label: int(moved.record[f"chunk{p}"][0]) for p, label in enumerate(labels)}
            out = {label for p, label in enumerate(labels) if moved.record[f"preempted{p}"][0]}
            hits = {label: int(moved.record[f"hit{p}"][0]) for p, label in enumerate(labels)}
            connected.clear()
            connected.update(r for p, r in enumerate(labels) if moved.record[f"connector{p}"][0])
            assert all(hits[label] == connector_hit(group[label]) for label in connected)
            raised = [label for p, label in enumerate(labels) if moved.record[f"raised{p}"][0]]
            scheduled, preempted, _, _, raise_at = plain.advance(
                stages, budget, loop_rules, hits, tuple(connected)
            )
            assert raised == ([] if raise_at is None else [raise_at]), (group, blocks)
            if raised:  # the engine core is down: P0, and the step does not lead on
                assert moved.bad["P0"][0] and not moved.follow[0]
                break
            assert {r: n for r, n in lanes.items() if n > 0} == scheduled, (group, blocks)
            assert out == preempted, (group, blocks)
            assert _placed(moved.target[0]) == _placed(_row(plain)), (group, blocks)
            compared += 1
            preempting += bool(preempted)
            if not moved.follow[0]:
                break
    assert preempting > 0


def _row(plain: ModelPool) -> np.ndarray:
    """The plain model's state as the explicit model's row (instance 0, no symmetry)."""
    row = [0]
    for label in plain.order:
        row += [label, plain.phase[label], plain.c[label], 0, plain.stale[label]]
    return np.array(row, dtype=np.int64)


def _placed(row: np.ndarray) -> list[tuple[int, int, int, int]]:
    """A row's positions (label, phase, c, stale), the finished ones sorted."""
    k = (len(row) - 1) // FIELDS
    parts = [tuple(int(v) for v in row[1 + FIELDS * p : 1 + FIELDS * (p + 1)]) for p in range(k)]
    listed = [(p[0], p[1], p[2], p[4]) for p in parts if p[1] != FINISHED]
    done = sorted((p[0], p[1], p[2], p[4]) for p in parts if p[1] == FINISHED)
    return listed + done


@pytest.mark.fidelity
def test_the_lasso_of_0_28_preempts_the_same_way_on_the_real_tree(cli: Cli, tmp_path: Path) -> None:
    """The S-POOL counterexample's chunks through 0.28.0's own KVCacheManager (TreePool, which
    keeps nothing cached: every resume at hit 0, as the lasso's): each step schedules and
    preempts what the file records, and the loop's last step leaves the requests where its
    first found them, #1 at its c; at 0.29.0's least pool for the same prompts nothing is
    preempted."""
    cli("system", "vllm-0.28", *REFUSED, "--pool", "min", "--out", str(tmp_path))
    cx = load_counterexample(tmp_path / "vllm-0.28" / "system-S-POOL.json")
    assert isinstance(cx, SystemCounterexample) and cx.loop is not None
    real = TreePool(release_root("0.28.0"), cx.requests, False, cx.blocks, 10)
    places = []
    for stepped in cx.steps:
        chunks = [part.stages.chunk if part.stages else 1 for part in stepped.requests]
        places.append((list(real.running), list(real.waiting)))
        got = real.step(chunks)
        assert got.scheduled == {
            i: part.chunk for i, part in enumerate(stepped.requests) if part.scheduled
        }
        assert set(got.preempted) == {
            i for i, part in enumerate(stepped.requests) if part.preempted
        }
    assert (list(real.running), list(real.waiting)) == places[cx.loop]
    assert [r.num_computed_tokens for r in real.requests][1] == cx.steps[cx.loop].requests[1].c
    later = TreePool(release_root("0.29.0"), cx.requests, False, 5, 10)
    for stepped in cx.steps:
        chunks = [part.stages.chunk if part.stages else 1 for part in stepped.requests]
        assert not later.step(chunks).preempted


@dataclass
class LookupRun:
    """A run of :func:`run_with_lookups`: each admission tried (label, hit, granted, and
    whether no block was handed out since the request was last preempted, None before its
    first preemption), each step's
    scheduled chunks and preemptions, and the requests that finished."""

    admissions: list[tuple[int, int, bool, bool | None]] = field(default_factory=list)
    steps: list[tuple[dict[int, int], list[int]]] = field(default_factory=list)
    finished: set[int] = field(default_factory=set)


def run_with_lookups(
    name: str, requests: tuple[Config, ...], blocks: int, arrival: Sequence[int], steps: int
) -> LookupRun:
    """``requests`` (waiting in ``arrival`` order) under ``name``'s chunks, offered M at every
    step, through the release's own KVCacheManager over ``blocks`` blocks with its prefix
    lookup at every admission (``TreePool`` with ``caching``): ``schedule()``'s two loops as
    rule 5 has them, a zero doing what the policy's loop rules say, a waiting request's chunk
    from its hit (each admission tried is recorded). The stub's block hashes name
    positions, so requests share their prompts' prefix: a wider environment than rule 5's
    fresh requests of distinct prompts. Stops early once every request finished."""
    policy = get_builtin(name)
    longest = max(cfg.prompt for cfg in requests)
    release = policy.kv_release or get_builtin(LATEST).kv_release
    assert release is not None
    real = TreePool(
        release_root(release), requests, eagle_drop(requests[0]), blocks, longest + 1, True
    )
    real.waiting = list(arrival)
    rules = step_loop_rules(policy)
    pool = real.manager.block_pool
    issued_at: dict[int, int] = {}
    run = LookupRun()
    for _ in range(steps):
        if not real.running and not real.waiting:
            break
        real.begin()
        left, scheduled, preempted = requests[0].max_sched, {}, []
        index = 0
        while index < len(real.running):
            r = real.running[index]
            chunk = step(policy, requests[r], real.requests[r].num_computed_tokens, left).chunk
            index += 1
            if chunk <= 0:
                if rules.running == "break":
                    break
                continue
            while not real.allocate(r, chunk):
                victim = real.running.pop()
                real.preempt(victim)
                preempted.append(victim)
                issued_at[victim] = pool.issued
                if victim == r:
                    break
            if r in preempted:
                break
            scheduled[r], left = chunk, left - chunk
        for r in [] if preempted else list(real.waiting):
            if left == 0 or len(real.running) >= MAX_SEQS:
                break
            hit = real.lookup(r)
            taken = step(policy, requests[r], hit, left)
            if taken.chunk <= 0:
                if (rules.split if taken.split <= 0 else rules.later) == "break":
                    break
                continue
            granted = real.allocate(r, taken.chunk, admission=True)
            since = pool.issued == issued_at[r] if r in issued_at else None
            run.admissions.append((r, hit, granted, since))
            if not granted:
                break
            real.waiting.remove(r)
            real.running.append(r)
            scheduled[r], left = taken.chunk, left - taken.chunk
        for r in real.end(scheduled):
            real.running.remove(r)
        run.steps.append((scheduled, preempted))
    run.finished = set(real.finished)
    return run


@pytest.mark.fidelity
@pytest.mark.parametrize(
    ("name", "path", "hit"),
    [
        ("vllm-0.28", "vllm-0.28/system-s-pool-least-pool.json", 8),
        ("vllm-0.33", "vllm-0.33/system-s-pool-stuck-holder.json", 4),
    ],
)
def test_with_the_real_lookup_a_preempted_request_stalls_at_its_hit(
    name: str, path: str, hit: int
) -> None:
    """Each committed S-POOL file's lasso resumes its preempted request at hit 0 (rule 5e: its
    blocks evicted). Its instance alone through the release's own manager, with its prefix
    lookup at every admission, finds the request's blocks still cached (no block was handed
    out after it was preempted, so none was evicted) and refuses its admission at that hit at
    every later step: the run stalls after its one preemption, a request unfinished. The
    model, resuming at the largest hit rule 5e allows (nothing evicted), takes the same run:
    one preemption, then a stall at the same hit, which S-LIVE reports."""
    cx = load_counterexample(Path(__file__).resolve().parent.parent / "counterexamples" / path)
    assert isinstance(cx, SystemCounterexample)
    run = run_with_lookups(name, cx.requests, cx.blocks, cx.arrival, 12)
    preemptions = [victim for _, preempted in run.steps for victim in preempted]
    assert len(preemptions) == 1, run
    resumed = [a for a in run.admissions if a[0] == preemptions[0] and a[3] is not None]
    assert len(resumed) >= 6 and set(resumed) == {(preemptions[0], hit, False, True)}, run
    assert run.steps[-6:] == [({}, [])] * 6, run
    assert run.finished != set(range(len(cx.requests))), run
    model = SchedulerStepModel(get_builtin(name), [cx.requests], symmetry=False, blocks=[cx.blocks])
    (batch,) = model.batches()
    row = next(r for r in model.initial(batch) if tuple(r[1::FIELDS]) == cx.arrival)
    whole, preempted, hits, stalled = cx.requests[0].max_sched, [], set(), False
    for _ in range(12):
        lane, index = model.resume_choices(batch, row[None, :])
        moved = model.step(batch, row[None, :], lane, np.full(len(lane), whole), hits=index)
        labels = row[1::FIELDS]
        preempted += [int(labels[p]) for p in range(batch.k) if moved.record[f"preempted{p}"][0]]
        hits |= {int(moved.record[f"hit{p}"][0]) for p in range(batch.k)} - {0}
        stalled = bool(moved.bad["S-LIVE"][0])
        if stalled:
            break
        row = moved.target[0]
    assert preempted == preemptions and hits == {hit} and stalled, (preempted, hits)


@pytest.mark.fidelity
def test_the_pool_repro_fails_on_the_real_0_28_tree(cli: Cli, tmp_path: Path) -> None:
    """The S-POOL file's repro runs the real split and the tree's own KVCacheManager inside
    schedule()'s loops: on 0.28.0, with the file's 4 blocks, the run comes back to the loop's
    state and the test fails with S-POOL; the same file with a pool of 5 blocks passes (the
    request's last chunk fits)."""
    cli("system", "vllm-0.28", *REFUSED, "--pool", "min", "--out", str(tmp_path))
    test_file = generate_repro(cli, tmp_path / "vllm-0.28" / "system-S-POOL.json", tmp_path)
    blockers = blocking_packages(tmp_path / "blockers")
    status, output = run_repro(test_file, release_root("0.28.0"), blockers)
    assert status == 1 and "AssertionError: S-POOL: " in output, output
    assert "comes back to the same state after 2 step(s)" in output
    source = test_file.read_text()
    assert source.count("POOL_BLOCKS = 4\n") == 1
    larger = tmp_path / "test_larger_pool.py"
    larger.write_text(source.replace("POOL_BLOCKS = 4\n", "POOL_BLOCKS = 5\n"))
    status, output = run_repro(larger, release_root("0.28.0"), blockers)
    assert status == 0 and "1 passed" in output, output


CONNECTOR_RANGE = ["--block", "4", "--lookahead", "0", "--drop", "off", "--start", "0,external"]
CONNECTOR_RANGE += ["--prompt", "1-8", "--max-sched", "4", "--pool", "2-12"]
"""Requests admitted fresh or at a connector's hit x = c0 (SPEC KV2 rule 5g) in pools of up to
12 blocks."""


@pytest.mark.parametrize("version", ["0.34.0", pytest.param("0.29.0", marks=pytest.mark.fidelity)])
def test_a_connector_admission_makes_the_real_pool_raise(
    cli: Cli, tmp_path: Path, version: str
) -> None:
    """SPEC KV2 rule 5g in a shared pool, where 0.29-0.34 never raise for a lone request: beside
    T = 1, T = 5 admitted at the connector's hit x = 4 in a pool of 6 passes the admission test
    and its count and takes one block more. The explorer gives P0, which replays with those
    words; the repro passes x to the tree's own manager and fails with the pool's ValueError
    on the real tree, and passes with one block more."""
    done = cli("system", "vllm-0.34", *CONNECTOR_RANGE, "--json", "--out", str(tmp_path))
    assert done.code == 1
    (p0,) = [v for v in done.json()["verdicts"] if v["property"] == "P0"]
    assert p0["status"] == VIOLATED and p0["range"]["connector"].startswith("synchronous")
    assert (
        p0["example"] == "#0: T=1 B=4 L=0 M=4; #1: T=5 B=4 L=0 M=4 c0=4 x=4; a pool of 6 KV blocks"
    )
    assert "resumes at the connector's hit 4" in p0["trace"][0]
    found = tmp_path / "vllm-0.34" / "system-P0.json"
    replayed = cli("replay", str(found))
    assert replayed.code == 0 and "get_new_blocks raises on the block loaded at x" in replayed.out
    test_file = generate_repro(cli, found, tmp_path)
    blockers = blocking_packages(tmp_path / "blockers")
    status, output = run_repro(test_file, release_root(version), blockers)
    assert status == 1 and "Cannot get 1 free blocks from the pool" in output, output
    source = test_file.read_text()
    larger = tmp_path / "test_larger_pool.py"
    larger.write_text(source.replace("POOL_BLOCKS = 6\n", "POOL_BLOCKS = 7\n"))
    status, output = run_repro(larger, release_root(version), blockers)
    assert status == 0 and "1 passed" in output, output


def test_a_witness_at_a_connector_hit_off_the_grid_replays(cli: Cli, tmp_path: Path) -> None:
    """SPEC KV2 rule 5g's choice is x, not an index on the resume grid: the explorer's witness
    admits a request at the connector's hit x = 1 (off B = 4), its trace says so and its file
    replays."""
    ranges = [*CONNECTOR_RANGE[:6], "--start", "external", "--prompt", "3,4", "--max-sched", "4"]
    done = cli("system", "vllm-0.34", *ranges, "--pool", "4", "--json", "--out", str(tmp_path))
    assert done.code == 1
    (hol,) = [v for v in done.json()["verdicts"] if v["property"] == "HOL"]
    assert hol["example"].startswith("#0: T=3 B=4 L=0 M=4 c0=1 x=1;")
    assert "resumes at the connector's hit 1" in hol["trace"][0]
    assert cli("replay", hol["counterexample"]).code == 0


@pytest.mark.fidelity
def test_the_stall_at_a_resume_hit_fails_on_the_real_0_28_tree(cli: Cli, tmp_path: Path) -> None:
    """S-LIVE in the same pool: preempted at c = 8, T = 9 resumes at hit 8 (rule 5e, nothing
    evicted) and the pool refuses it at every step. The repro looks the request up with the
    tree's own prefix lookup, which finds that hit, and fails with S-LIVE on 0.28.0; with a
    pool of 5 blocks it passes. A recorded hit the lookup does not find fails the test as a
    trace the tree does not follow, not as the property."""
    cli("system", "vllm-0.28", *REFUSED, "--pool", "min", "--out", str(tmp_path))
    cx_path = tmp_path / "vllm-0.28" / "system-S-LIVE.json"
    cx = load_counterexample(cx_path)
    assert isinstance(cx, SystemCounterexample) and cx.blocks == 4
    assert [part.hit for part in cx.steps[-1].requests] == [None, 8]
    test_file = generate_repro(cli, cx_path, tmp_path)
    blockers = blocking_packages(tmp_path / "blockers")
    status, output = run_repro(test_file, release_root("0.28.0"), blockers)
    assert status == 1 and "AssertionError: S-LIVE: " in output, output
    source = test_file.read_text()
    assert source.count("hits={1: 8}") == 1 and source.count("POOL_BLOCKS = 4\n") == 1
    larger = tmp_path / "test_larger_pool.py"
    larger.write_text(source.replace("POOL_BLOCKS = 4\n", "POOL_BLOCKS = 5\n"))
    status, output = run_repro(larger, release_root("0.28.0"), blockers)
    assert status == 0 and "1 passed" in output, output
    elsewhere = tmp_path / "test_other_hit.py"
    elsewhere.write_text(source.replace("hits={1: 8}", "hits={1: 16}"))
    status, output = run_repro(elsewhere, release_root("0.28.0"), blockers)
    assert status == 1 and "does not follow the trace" in output, output
    assert "AssertionError: S-LIVE" not in output


@pytest.mark.fidelity
def test_a_proved_s_pool_holds_with_the_real_lookup(cli: Cli, tmp_path: Path) -> None:
    """lookahead-in-split keeps S-POOL on ``system``'s built-in range (every pool 2-32 the
    start-up check accepts), where the model resumes a preempted request at any hit up to its
    c (rule 5e). Through the newest release's own manager with its prefix lookup at every
    admission, every pooled instance of that range, from each arrival order and offered M at
    every step, finishes within 40 steps; some runs preempt and resume at a hit, so the check
    is not vacuous. (A partial check of the PROVED verdict: one budget sequence per arrival
    order.)"""
    document = cli("system", "lookahead-in-split", "--json", "--out", str(tmp_path)).json()
    verdicts = {v["property"]: v["status"] for v in document["verdicts"]}
    assert verdicts["S-POOL"] == PROVED
    policy = get_builtin("lookahead-in-split")
    rules = pool_rules(policy.kv_release)
    inside = [cfg for cfg in system_space().configs() if outside_shared_pool(rules, cfg) is None]
    sets = request_sets(policy, inside, 2)
    instances, sizes, _ = pooled_instances(policy, sets, ["min", *range(2, 33)])
    preempting = resumed = 0
    for group, blocks in zip(instances, sizes, strict=True):
        for arrival in itertools.permutations(range(len(group))):
            run = run_with_lookups("lookahead-in-split", group, blocks, arrival, 40)
            assert run.finished == set(range(len(group))), (group, blocks, arrival, run)
            preempting += any(preempted for _, preempted in run.steps)
            resumed += any(a[3] is not None and a[1] > 0 for a in run.admissions)
    assert preempting > 0 and resumed > 0


@pytest.mark.fidelity
def test_a_pooled_step_property_has_a_repro_on_the_tree_manager(cli: Cli, tmp_path: Path) -> None:
    """A pooled HOL, STARVE or S-LIVE file's repro runs its steps through the tree's own
    KVCacheManager and judges each as the file without a pool does: on 0.28.0 the split zero's
    HOL and STARVE in a pool of 4 blocks fail with their property; 0.22.0 starts with a pool
    of 2 blocks, where no request of a hybrid model is ever admitted, and the S-LIVE file fails
    there and passes with 3 blocks (one attention and one Mamba block to hand out)."""
    ranges = ["--block", "4", "--lookahead", "0", "--drop", "off", "--max-sched", "8"]
    cli("system", "vllm-0.28", *ranges, "--prompt", "3-4", "--pool", "min", "--out", str(tmp_path))
    blockers = blocking_packages(tmp_path / "blockers")
    for pid in ("HOL", "STARVE"):
        test_file = generate_repro(cli, tmp_path / "vllm-0.28" / f"system-{pid}.json", tmp_path)
        status, output = run_repro(test_file, release_root("0.28.0"), blockers)
        assert status == 1 and f"AssertionError: {pid}: step 0 (budget 3)" in output, output
    old = tmp_path / "old"
    cli("system", "vllm==0.22.0", *ranges, "--prompt", "3", "--pool", "min", "--out", str(old))
    test_file = generate_repro(cli, old / "vllm==0.22.0" / "system-S-LIVE.json", tmp_path)
    status, output = run_repro(test_file, release_root("0.22.0"), blockers)
    assert status == 1 and "AssertionError: S-LIVE: step 0 (budget 8)" in output, output
    source = test_file.read_text()
    assert source.count("POOL_BLOCKS = 2\n") == 1
    larger = tmp_path / "test_larger_pool.py"
    larger.write_text(source.replace("POOL_BLOCKS = 2\n", "POOL_BLOCKS = 3\n"))
    status, output = run_repro(larger, release_root("0.22.0"), blockers)
    assert status == 0 and "1 passed" in output, output


def test_the_picture_marks_the_preemption_and_the_loop() -> None:
    """The curated S-POOL file's picture: #1's cell in the step that preempts it says so and
    keeps its c (no red X: it was not given 0 tokens); the next step's cell names the hit it
    resumed at and runs from there; every step of the loop is shaded."""
    cx = load_counterexample(CURATED)
    assert isinstance(cx, SystemCounterexample)
    marks = system_marks(cx)
    assert marks.failing == (2, 3)
    out, back = [cell for cell in marks.cells if cell.step in (2, 3) and cell.lane == 1]
    assert (out.label, out.progress, out.zero) == ("running: preempted", "c 8→8 / T=9", False)
    assert (back.label, back.progress, back.zero) == (
        "waiting: +8 of 8",
        "hit 0, c 0→8 / T=9",
        False,
    )


# -- the symbolic form (system --prove --pool) -------------------------------------------------

LEAST_0_28 = ("vllm-0.28", {"block": "8", "lookahead": "0", "drop": "off", "prompt": "3,9"})


def slow_pool(name: str, texts: dict[str, str], pools: tuple[int | str, ...]) -> Any:
    """A pooled sample case that runs with the slow tests."""
    return pytest.param(name, texts, pools, marks=pytest.mark.slow)


SEEDED = (
    "vllm-0.23",
    {"block": "4", "lookahead": "0", "drop": "off", "prompt": "3,8", "start": "0,block"},
)
"""0.23 with T = 8 admitted at c0 = 0 or at the hit c0 = 4 an identical request left (SPEC KV2
rule 2d, inside rule 5's scope), beside T = 3."""

CONNECTED = (
    "vllm-0.34",
    {"block": "4", "lookahead": "0", "drop": "off", "prompt": "1,5", "start": "0,external"},
)
"""0.34 with T = 5 admitted at c0 = 0 or at a connector's hit x = c0 in 1-4 (SPEC KV2 rules 2e
and 5g), beside T = 1: in a pool of 6 the admission at x = 4 after T = 1's makes the pool
raise."""

POOL_SAMPLE = [
    (*LEAST_0_28, ("min", 5)),
    slow_pool("vllm-0.33", {"block": "4", "lookahead": "1", "drop": "off", "prompt": "2,7"}, (9,)),
    slow_pool(
        "vllm-0.23", {"block": "4", "lookahead": "0", "drop": "off", "prompt": "5,8"}, ("min",)
    ),
    slow_pool("vllm-0.29", {"block": "4", "lookahead": "0", "drop": "off", "prompt": "6,8"}, (6,)),
]
"""Pooled ranges of several releases (M = 8), each with the pool sizes the sample takes; every
one preempts on some transition. 0.29's STARVE is the bounded search's heavy tail: Optimize is
undecided within the tests' resource limit, and the plain question asked again decides it
(:func:`~chunkproof.checker.runs.system_prove._search`)."""


def test_a_pool_with_every_cell_outside_its_model_is_empty(cli: Cli) -> None:
    """``--prove --pool`` on a range whose every request carries encoder items: no cell is
    judged, every property (S-POOL too) is EMPTY and the exit is 2, never a silent pass."""
    items = ["--items", "0+2", "--encoder-cache", "4", "--pool", "min", "--prove", "--json"]
    done = cli("system", "vllm-0.33", *REFUSED[:6], "--prompt", "3", "--max-sched", "8", *items)
    assert done.code == 2
    document = done.json()
    assert {v["property"]: v["status"] for v in document["verdicts"]} == dict.fromkeys(
        ("P0", "S-LIVE", "HOL", "STARVE", "S-POOL"), "EMPTY"
    )
    assert document["searched"]["cells_left_out"] == 1


@pytest.mark.parametrize(
    ("name", "texts", "pools"), [*POOL_SAMPLE, (*SEEDED, ("min", 6)), (*CONNECTED, (6,))]
)
def test_the_symbolic_pool_step_is_the_explicit_one(
    name: str, texts: dict[str, str], pools: tuple[int | str, ...]
) -> None:
    """Every transition the explorer takes in a pool, asked of the Z3 step at the same state,
    budget, resume hits, requests and N (the guard admits the explorer's hits): the same next
    state (each request's list, place, c and stale flag: preemptions included) and the same
    transition properties broken."""
    policy = get_builtin(name)
    space = space_of({**texts, "max_sched": "8"})
    sets = request_sets(policy, list(space.configs()), 2)
    instances, blocks, _ = pooled_instances(policy, sets, pools)
    (cell,) = system_cells(space, 2)
    symbolic = SymbolicSchedulerStep(policy, cell, pools=pools)
    pool = next(p for p in symbolic.parameters if str(p) == "pool_blocks")
    checked = preempting = resuming = raising = 0
    for instance, size in zip(instances, blocks, strict=True):
        explicit = SchedulerStepModel(policy, [instance], symmetry=False, blocks=[size])
        (batch,) = explicit.batches()
        explored = explore_batch(explicit, batch)
        pinned = z3.And(_pinned(symbolic, list(instance)), pool == size)
        steps = explored.steps
        for t in range(len(steps.source)):
            s_, a = symbolic.state("s"), symbolic.action("a")
            state = _symbolic_state(explored.states[steps.source[t]], [0, 1], pooled=True)
            rank = state[2::5]
            hits = [int(steps.record[f"hit{rank[i]}"][t]) for i in range(2)]
            flags = [int(steps.record[f"connector{rank[i]}"][t]) for i in range(2)]
            solver = z3.Solver()
            solver.add(pinned, a[0] == int(steps.action[t]) % ACTION_STRIDE)
            solver.add(*[a[1 + i] == hit for i, hit in enumerate(hits)], symbolic.guard(s_, a))
            solver.add(*[a[3 + i] == flag for i, flag in enumerate(flags)])
            solver.add(*[v == x for v, x in zip(s_, state, strict=True)])
            assert solver.check() == z3.sat, (instance, size)
            found = solver.model()
            after = [found.eval(v).as_long() for v in symbolic.next(s_, a)]
            target = _symbolic_state(steps.target[t], [0, 1], pooled=True)
            assert _places(after, True) == _places(target, True), (instance, size, t)
            for pid in set(symbolic.properties) - set(symbolic.cycle_properties):
                broken = z3.is_true(found.eval(symbolic.violation(pid, s_, a)))
                assert broken == bool(steps.bad[pid][t]), (instance, t, pid)
            checked += 1
            preempting += any(steps.record[f"preempted{p}"][t] for p in range(2))
            resuming += any(hits)
            raising += any(steps.record[f"raised{p}"][t] for p in range(2))
    assert checked > 0 and resuming > 0
    assert preempting > 0 or name == CONNECTED[0]
    assert raising > 0 or name != CONNECTED[0]


@pytest.mark.parametrize(
    ("name", "texts", "pools"),
    [*POOL_SAMPLE, slow_pool(*SEEDED, ("min", 6)), (*CONNECTED, (6,))],
)
def test_the_engines_agree_on_a_pool(
    name: str, texts: dict[str, str], pools: tuple[int | str, ...]
) -> None:
    """Per property, S-POOL included: explorer VIOLATED iff the bounded search finds a
    violation that replays (for S-POOL a lasso, asked as a reachable state:
    :class:`~chunkproof.proofs.lasso.LassoModel`); explorer PROVED iff it finds none
    (``agree``). The depth, 4, is at least the explorer's deepest BFS level and holds the
    sample's lassos (a path and a loop)."""
    policy = get_builtin(name)
    space = space_of({**texts, "max_sched": "8"})
    explored, _ = explore_system(policy, space, 2, pools=pools)
    sets = request_sets(policy, list(space.configs()), 2)
    instances, blocks, _ = pooled_instances(policy, sets, pools)
    model = SchedulerStepModel(policy, instances, blocks=blocks)
    assert max(int(explore_batch(model, batch).depth.max()) for batch in model.batches()) <= 4
    proofs, _ = prove_system(
        policy, space, 2, depth=4, timeout_ms=GUARD_MS, rlimit=RLIMIT, pools=pools
    )
    assert agree(proofs, explored), ({p.property: p.status for p in proofs}, explored)


def test_the_solver_finds_the_0_28_lasso_and_its_file_replays(tmp_path: Path) -> None:
    """The known answer through the solver: a lasso whose loop preempts T = 9 at c = 8 and
    comes back to the state it started at, in the least pool (4 blocks); the file it writes
    loads and its steps come back too."""
    policy = get_builtin(LEAST_0_28[0])
    space = space_of({**LEAST_0_28[1], "max_sched": "8"})
    with run_folder(tmp_path, "test") as out:
        proofs, info = prove_system(
            policy, space, 2, depth=4, timeout_ms=GUARD_MS, rlimit=RLIMIT, out=out, pools=["min"]
        )
    found = next(p for p in proofs if p.property == "S-POOL")
    example = found.example()
    assert found.status == VIOLATED and example is not None and example.witness is not None
    assert example.witness.blocks == 4 and example.witness.loop is not None
    assert any("preempts" in line for line in example.trace)
    assert "= the state before step" in example.trace[-1]
    assert info["pools"] == ["min"]
    cx = load_counterexample(Path(str(found.counterexample)))
    assert isinstance(cx, SystemCounterexample) and cx.loop == example.witness.loop


@pytest.mark.slow
def test_a_complete_search_proves_s_pool_on_the_least_pool_of_0_29() -> None:
    """0.29's least pool serves the longest prompt (the explorer: S-POOL PROVED): with
    ``unbounded``, no run of 5 steps passes only new states, of the step and of the lasso
    question alike, so the search to 4 is complete and S-POOL is PROVED without Spacer."""
    policy = get_builtin("vllm-0.29")
    space = space_of({**LEAST_0_28[1], "max_sched": "8"})
    proofs, _ = prove_system(
        policy, space, 2, 4, timeout_ms=GUARD_MS, rlimit=RLIMIT, unbounded=True, pools=["min"]
    )
    found = {p.property: p for p in proofs}
    assert found["S-POOL"].status == PROVED, found["S-POOL"].cells
    assert found["S-POOL"].cells[0].detail.endswith("passes only new states: complete")
