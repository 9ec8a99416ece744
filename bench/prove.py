"""Benchmark: the Z3 prover against the explorer, and the default ``check`` against its targets,
all in one process.

Measured (wall-clock seconds, ``time.perf_counter``), for one built-in policy (default
``vllm-latest``):

(a) ``check``'s two halves on their default spaces, as ``check`` runs them: the explorer on
    ``small_space`` (every further input's grid, the encoder items included) for every
    property, then the prover on ``production_space`` (every cell of the production range) for
    the properties the explorer did not find violated. Target: both together under
    120 s on two cores (a later target: 30 s).
(b) One production cell with every input the prover keeps symbolic (T, M, theta, c0, x, J,
    L_h, u, the budget: B = 16, L = 3, G in B and B/2, H = G/2, checkpoints on): the prover's
    time for P0, P1, P3, P4, P5 and P6. Target: under 5 s.
(c) The range both engines cover, the classic small grid (B 4, 8; L 0-3; D both; T 1-16;
    M 1-8): explorer and prover verdicts for the same properties, which must agree, and the
    ratio prover seconds / explorer seconds (> 1: the prover is slower on a range the explorer
    can enumerate; the prover's point is the ranges the explorer cannot).
(d) The minimal counterexample of vllm-0.33's livelock (P1, L = 3, D off) on the production
    cells B = 16, 528 and 4416: the seconds spent minimising, and the counterexample's T and M
    (the least M is 3 at every B). Target: under 0.5 s each. Beside it, the same
    with the previous explorer, which searched every batch level by level (a 4,417-token
    prefill under budgets 1-4 is 4,415 levels of a few lanes each; now such a batch is
    evaluated whole, ``RequestModel.state_space``): the ratio previous / now.
(e) ``prove lookahead-in-split`` with every property, as the CLI runs it (minimal counterexamples
    included): the seconds, and those spent minimising, on two ranges. First SPEC CLI's default
    production range (B in {16, 64, 528, 800, 1600, 2096, 4416}, L 0-8, D both, P up to 2^20, M up
    to 2^16, theta; with L_h in {0, L}, as the release has it: 14 cells), where the target is
    under 10 s (it measured 27 s when it was filed): 4.5-5.9 s in five runs of this code (cells
    2.6 s, minimising 2.0 s in the run printed with the default's below). Then ``prove``'s own
    default, which adds one grid varying every further input on B 16 and 1600 (110 cells in all); it
    takes minutes, and ``--skip-production`` leaves (e) out. On that default, measured (2 jobs,
    quiet): the cells 180-245 s; minimising 826 s when the cells that reach a smaller T were found
    by bisection on T (every violated cell asked at every bound, then the least-T cells asked one by
    one), 589 s when every cell is asked once per best (``checker.runs._minimal``), the five
    counterexamples identical. By property, before and after: P3 784 / 427 s, P4 150 / 84, P6 28 /
    28, P1 10 / 26, P5 20 / 24 (P1 and P5 now also ask whether a cell ties the best's T with a
    smaller B, L or M). The CLI run end to end: 1005 s before (cells 180 s, minimising 826 s), 557 s
    after (159 s, 397 s). With Spacer's tries cut by Z3 resource units instead of seconds
    (``proofs.chc.SEEDS``), on a slower day of the same machine kind: 750 s (minimising 566 s),
    where the time-cut schedule took 774 s (600 s) in the same session; (d) unchanged (the same
    single Spacer query, 0.05-0.15 s). Since the queries of minimisation (no violation below T =
    17?) are answered over every state c <= T (``proofs.finite``) before Spacer: 449 s (cells 212 s,
    minimising 237 s); P3's cells left undecided went from 13 to 1 (a first bounded search that
    timed out under load). With that search cut at 5 s, the least T then found over every state:
    302 s (cells 151 s, minimising 151 s), no cell left undecided, the five counterexamples the
    same. With the solver portfolio of the pipeline and the older arithmetic engine
    (``proofs.solving``; the finite query with its own, its transition built once and substituted
    per state) and direct induction cut at 0.5 s before Spacer: 152 s (cells 84 s, minimising 68 s),
    where the code before took 390 s (163 s, 227 s) that day, every verdict and claim identical.
    With the properties minimised together (``checker.least_counterexample``: one round of the
    executor serves every property's search, a cell's questions one task): 138 s (cells 84 s,
    minimising 54 s), where one property after the other took 63.7 s to minimise in the same run
    (1.18x), every claim and counterexample identical. Printed beside each run: the cells phase with
    the previous cell procedure (``previous_cells``: the portfolio alternating with Z3's default
    solver, direct induction given the whole timeout), the minimising with the properties one after
    the other (``one_property_at_a_time``) and with Spacer alone answering those queries
    (``spacer_only``), each with its ratio previous / now. One run of the whole bench (2 jobs,
    quiet): the default 124.9 s (cells 74.2 s, minimising 50.7 s); the previous cell procedure
    161.7 s on the cells (2.18x), the properties one after the other 75.8 s minimising (1.49x),
    Spacer alone 592.3 s minimising (11.68x).

    python bench/prove.py [--policy vllm-latest] [--jobs 2] [--timeout 60] [--skip-production]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator

from chunkproof.checker.cli.defaults import production_space, small_space, user_space
from chunkproof.checker.engines import least_counterexample, minimise
from chunkproof.checker.engines.executor import Executor
from chunkproof.checker.engines.verdicts import VIOLATED, Verdict
from chunkproof.checker.runs.requests import PROVER_PROPERTIES, ProofRun, explore_space, prove_space
from chunkproof.model.builtin import get_builtin
from chunkproof.model.counterexample import Counterexample
from chunkproof.model.policy import Policy
from chunkproof.proofs import prover, solving
from chunkproof.spec.properties import DEFAULT_WINDOW, PROPERTIES
from chunkproof.spec.request import RequestModel
from chunkproof.spec.request_symbolic import Cell
from chunkproof.spec.space import Space, grid_from

ONE_CELL = {
    "block": "16",
    "lookahead": "3",
    "drop": "off",
    "split_block": "B,B/2",
    "hash_block": "G/2",
    "checkpoints": "on",
    "checkpoint_alignment": "1",
    "start": "0,block,hash,external",
    "tokens": "P,P+1,P+2",
    "junction": "0,any",
    "threshold": "0-1048576",
    "prompt": "1-1048576",
    "max_sched": "1-65536",
}
"""(b): one (B, L, D) point of the production range, every other input at its widest."""
CLASSIC = {"block": "4,8", "lookahead": "0-3", "drop": "both", "prompt": "1-16", "max_sched": "1-8"}
"""(c): the classic small grid."""
LIVELOCK_BLOCKS = (16, 528, 4416)
"""(d): production block sizes, small to large."""


def timed_prove(
    policy: Policy, space: Space, wanted: tuple[str, ...], run: ProofRun
) -> tuple[list[Verdict], float]:
    started = time.perf_counter()
    verdicts, _ = prove_space(policy, space, wanted, run, None)
    return verdicts, time.perf_counter() - started


def timed_explore(
    policy: Policy, space: Space, wanted: tuple[str, ...], jobs: int
) -> tuple[list[Verdict], float]:
    started = time.perf_counter()
    verdicts, _ = explore_space(policy, space, wanted, DEFAULT_WINDOW, jobs, None)
    return verdicts, time.perf_counter() - started


@contextlib.contextmanager
def spacer_only() -> Iterator[None]:
    """The previous minimiser: Spacer alone answers whether a cell has a violation below a T,
    and the first bounded search has the whole timeout."""
    listed, first = minimise.FINITE_STATES, minimise.FIRST_SEARCH_MS
    minimise.FINITE_STATES, minimise.FIRST_SEARCH_MS = 0, 10**9
    try:
        yield
    finally:
        minimise.FINITE_STATES, minimise.FIRST_SEARCH_MS = listed, first


PREVIOUS_PORTFOLIO = (
    (solving.PIPELINE, 0, 250),
    (solving.DEFAULT, 0, 250),
    (solving.PIPELINE, 7, 1_000),
    (solving.DEFAULT, 7, 1_000),
    (solving.PIPELINE, 13, 0),
)
"""The portfolio before the older arithmetic engine joined it: the pipeline alternating with
Z3's default solver."""


@contextlib.contextmanager
def previous_cells() -> Iterator[None]:
    """The previous cell procedure: :data:`PREVIOUS_PORTFOLIO`, and direct induction given the
    whole timeout before Spacer is asked."""
    attempts, first = solving.ATTEMPTS, prover.INDUCTION_FIRST_MS
    solving.ATTEMPTS, prover.INDUCTION_FIRST_MS = PREVIOUS_PORTFOLIO, 10**9
    try:
        yield
    finally:
        solving.ATTEMPTS, prover.INDUCTION_FIRST_MS = attempts, first


@contextlib.contextmanager
def one_property_at_a_time() -> Iterator[None]:
    """The previous minimiser's rounds: each property's least counterexample sought alone, one
    after the other (its first cell minimised in this process, its questions one task per
    cell and property; no progress line)."""
    together = least_counterexample.least_counterexamples

    def alone(
        violated: dict[str, list[Cell]],
        make: least_counterexample.MakeModel,
        timeout_ms: int,
        jobs: int | Executor,
        tick: least_counterexample.Tick | None = None,
    ) -> dict[str, tuple[Counterexample | None, str]]:
        return {
            pid: together({pid: cells}, make, timeout_ms, jobs)[pid]
            for pid, cells in violated.items()
            if cells
        }

    least_counterexample.least_counterexamples = alone
    try:
        yield
    finally:
        least_counterexample.least_counterexamples = together


@contextlib.contextmanager
def searched_level_by_level() -> Iterator[None]:
    """The previous explorer: no batch's states listed, every batch searched level by level."""
    listing = RequestModel.state_space
    RequestModel.state_space = lambda self, batch: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        RequestModel.state_space = listing  # type: ignore[method-assign]


def statuses(verdicts: list[Verdict]) -> dict[str, str]:
    return {v.property: v.status for v in verdicts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="vllm-latest", help="a built-in policy")
    parser.add_argument("--jobs", type=int, default=2, help="processes for each engine")
    parser.add_argument("--timeout", type=int, default=60, help="seconds per solver query")
    parser.add_argument("--skip-production", action="store_true", help="leave (e) out")
    args = parser.parse_args()
    policy = get_builtin(args.policy)
    run = ProofRun(DEFAULT_WINDOW, args.timeout * 1000, args.jobs, minimise=False)
    every = tuple(PROPERTIES)
    proved = tuple(p for p in every if p in PROVER_PROPERTIES)
    print(f"policy {policy.name}; jobs {args.jobs}; solver timeout {args.timeout} s")

    found, explorer_s = timed_explore(policy, small_space(policy), every, args.jobs)
    undecided = tuple(p for p in proved if statuses(found).get(p) != VIOLATED)
    _, prover_s = timed_prove(policy, production_space(policy), undecided, run)
    total = explorer_s + prover_s
    print(f"(a) check: explorer {explorer_s:.1f} s + prover {prover_s:.1f} s = {total:.1f} s")
    print(f"    ratio to the 120 s target: {total / 120:.2f}; to the 30 s target: {total / 30:.2f}")
    print(f"    the prover ran on {', '.join(undecided) or 'no property'}")

    cell = Space((grid_from(ONE_CELL, "one cell"),))
    verdicts, cell_s = timed_prove(policy, cell, proved, run)
    shown = ", ".join(f"{pid} {status}" for pid, status in statuses(verdicts).items())
    print(f"(b) one production cell, every input: {cell_s:.2f} s ({shown})")
    print(f"    ratio to the 5 s target: {cell_s / 5:.2f}")

    classic = Space((grid_from(CLASSIC, "classic"),))
    mine, explore_s = timed_explore(policy, classic, proved, args.jobs)
    theirs, prove_s = timed_prove(policy, classic, proved, run)
    agree = statuses(mine) == statuses(theirs)
    print(f"(c) classic grid: explorer {explore_s:.2f} s, prover {prove_s:.2f} s")
    print(f"    ratio prover / explorer: {prove_s / explore_s:.2f}; verdicts agree: {agree}")
    if not agree:
        print(f"    explorer {statuses(mine)}\n    prover   {statuses(theirs)}")

    livelock = get_builtin("vllm-0.33")
    minimising = ProofRun(DEFAULT_WINDOW, args.timeout * 1000, 1, minimise=True)
    print("(d) minimal counterexample, vllm-0.33 P1, L=3, D off, the production range:")
    for block in LIVELOCK_BLOCKS:
        texts = {"block": str(block), "lookahead": "3", "drop": "off"}
        cell = user_space(texts, None, production=True)
        (verdict,), info = prove_space(livelock, cell, ("P1",), minimising, None)
        seconds = info["seconds_minimising"]
        with searched_level_by_level():
            (previous,), old = prove_space(livelock, cell, ("P1",), minimising, None)
        assert previous.summary == verdict.summary, "the two explorers disagree"
        print(f"    B={block}: {seconds:.2f} s ({verdict.summary.split(':')[0]})")
        print(f"    ratio to the 0.5 s target: {seconds / 0.5:.2f}")
        print(
            f"    previous explorer {old['seconds_minimising']:.2f} s, "
            f"ratio previous / now: {old['seconds_minimising'] / seconds:.1f}x"
        )
    if args.skip_production:
        return
    fix = get_builtin("lookahead-in-split")
    default = production_space(fix)
    spec_range = Space(default.grids[:1])
    print("(e) prove lookahead-in-split with every property, minimal counterexamples included:")
    production_proof(fix, spec_range, "SPEC's production range", args, proved)
    production_proof(fix, default, "the default range (and every further input)", args, proved)


def production_proof(
    fix: Policy, space: Space, label: str, args: argparse.Namespace, proved: tuple[str, ...]
) -> None:
    """(e) on one range: the CLI's run, then each previous procedure on the same range, each
    with its ratio previous / now."""
    as_cli = ProofRun(DEFAULT_WINDOW, args.timeout * 1000, args.jobs, minimise=True)
    started = time.perf_counter()
    verdicts, info = prove_space(fix, space, proved, as_cli, None)
    seconds = time.perf_counter() - started
    shown = ", ".join(f"{pid} {status}" for pid, status in statuses(verdicts).items())
    print(f"    {label}, {info['cells']} cells: {seconds:.1f} s ({shown})")
    cells_s, minimising_s = info["seconds_proving_cells"], info["seconds_minimising"]
    print(f"      cells {cells_s:.1f} s, minimising {minimising_s:.1f} s")
    print(f"      ratio to the 10 s target: {seconds / 10:.2f}")
    with previous_cells():
        before, old = prove_space(fix, space, proved, as_cli, None)
    assert statuses(before) == statuses(verdicts), "the cell procedures disagree"
    print(
        f"      previous cell procedure: cells {old['seconds_proving_cells']:.1f} s, ratio "
        f"previous / now: {old['seconds_proving_cells'] / cells_s:.2f}x"
    )
    with one_property_at_a_time():
        sequential, apart = prove_space(fix, space, proved, as_cli, None)
    assert [v.summary for v in sequential] == [v.summary for v in verdicts], "the rounds differ"
    print(
        f"      properties minimised one after the other: {apart['seconds_minimising']:.1f} s,"
        f" ratio previous / now: {apart['seconds_minimising'] / minimising_s:.2f}x"
    )
    with spacer_only():
        _, alone = prove_space(fix, space, proved, as_cli, None)
    print(
        f"      Spacer alone below T: minimising {alone['seconds_minimising']:.1f} s, ratio "
        f"previous / now: {alone['seconds_minimising'] / minimising_s:.2f}x"
    )


if __name__ == "__main__":
    main()
