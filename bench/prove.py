"""Benchmark: the Z3 prover against the explorer, side by side in one process.

Measured (wall-clock seconds, ``time.perf_counter``):

(a) The first minimal counterexample of ``vllm-latest`` P1 on the cell B=16, L=3, D off.
    Prover: ``prove_cell`` over the production scope (T <= 2^20, M <= 2^16, theta 0 or >= L)
    and then ``counterexample_below`` (bounded search, Spacer certification of the least T,
    the explorer at that T). Explorer: the same cell on a grid it can enumerate (T 1-48,
    M 1-32, theta 0) and ``minimal_counterexample``. Both must report T = 17 (SPEC K).
(b) Proving ``lookahead-in-split`` P1 and P3 over the default production range (B in 16, 64,
    528, 800, 1600, 2096, 4416; L 0-8; D both; ``Scope()``) with ``prove_range``, 2 jobs.
    The explorer cannot cover this range (T up to 2^20), so there is no ratio.
(c) The range both engines cover: ``vllm-latest`` P1 and P3 on B in 4, 8, 16; L 0-4; D both;
    T 1-48; M 1-32; theta 0. Explorer: ``explore`` with 2 jobs (its verdict covers the
    configurations of the main category: M >= max(L, 1)). Prover: ``prove_range`` with 2 jobs
    on the cells B x L x D with ``Scope(prompt_max=48, max_sched_max=32, threshold=False)``,
    once for verdicts only and once with minimal counterexamples. The verdicts must agree.

Ratio: prover seconds / explorer seconds for the same question (> 1: the prover is slower).
Runs in about a minute on two cores:

    python bench/prove.py
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

from chunkproof.checker.ranges import Ranges
from chunkproof.checker.search import explore, minimal_counterexample
from chunkproof.model.builtin import get_builtin
from chunkproof.model.counterexample import Counterexample
from chunkproof.proofs.prover import (
    VIOLATED,
    CellVerdict,
    Settings,
    counterexample_below,
    prove_cell,
    prove_range,
)
from chunkproof.proofs.system import Cell, Scope

WINDOW = "relaxed"
TIMEOUT_MS = 60_000
JOBS = 2
PRODUCTION_BLOCKS = (16, 64, 528, 800, 1600, 2096, 4416)
SMALL = Ranges(
    block=(4, 8, 16),
    lookahead=tuple(range(5)),
    prompt=tuple(range(1, 49)),
    max_sched=tuple(range(1, 33)),
    drop=(False, True),
    threshold=(0,),
)
SMALL_SCOPE = Scope(prompt_max=48, max_sched_max=32, threshold=False)

A = ParamSpec("A")
R = TypeVar("R")


def timed(work: Callable[A, R], *args: A.args, **kwargs: A.kwargs) -> tuple[R, float]:
    """``work(*args, **kwargs)`` and its wall-clock seconds."""
    started = time.perf_counter()
    result = work(*args, **kwargs)
    return result, time.perf_counter() - started


def cells_of(blocks: tuple[int, ...], lookaheads: tuple[int, ...]) -> list[Cell]:
    return [Cell(b, la, d) for b in blocks for la in lookaheads for d in (False, True)]


def first_counterexample(
    out: Path,
) -> tuple[Counterexample | None, Counterexample | None, float, float]:
    """(a): the prover's and the explorer's minimal P1 counterexample for B=16, L=3, D off."""
    policy, cell = get_builtin("vllm-latest"), Cell(16, 3, False)

    def by_prover() -> Counterexample | None:
        verdict = prove_cell(policy, cell, Scope(), "P1", WINDOW, TIMEOUT_MS, out)
        if verdict.status != VIOLATED:
            return None
        return counterexample_below(policy, cell, Scope(), "P1", WINDOW, TIMEOUT_MS, None)[0]

    def by_explorer() -> Counterexample | None:
        grid = SMALL.narrowed(block=(16,), lookahead=(3,), drop=(False,))
        return minimal_counterexample(explore(policy, grid, ["P1"], WINDOW), "P1", "main")

    prover_cx, prover_s = timed(by_prover)
    explorer_cx, explorer_s = timed(by_explorer)
    return prover_cx, explorer_cx, prover_s, explorer_s


def verdicts(results: list[CellVerdict], pids: tuple[str, ...]) -> dict[str, str]:
    """One status per property over all cells: VIOLATED, else UNKNOWN, else PROVED."""
    out: dict[str, str] = {}
    for pid in pids:
        statuses = {v.status for v in results if v.property == pid}
        out[pid] = next(s for s in ("VIOLATED", "UNKNOWN", "PROVED") if s in statuses)
    return out


def rank(cx: Counterexample) -> tuple[int, ...]:
    """The minimisation order of SPEC C: T, then B, L, M, then the trace length."""
    cfg = cx.config
    return (cfg.T, cfg.block, cfg.lookahead, cfg.max_sched, len(cx.steps))


def describe(cx: Counterexample | None) -> str:
    if cx is None:
        return "none"
    return f"{cx.config.describe()}, {len(cx.steps)} steps"


def main() -> None:
    rows: list[tuple[str, str, float, float | None]] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)

        prover_cx, explorer_cx, prover_s, explorer_s = first_counterexample(out / "a")
        rows.append(("explorer", "(a) min cx vllm-latest P1 B=16 L=3", explorer_s, None))
        rows.append(("prover", "(a) min cx vllm-latest P1 B=16 L=3", prover_s, explorer_s))
        notes.append(
            f"(a) prover: {describe(prover_cx)}; explorer (T <= 48, M <= 32): "
            f"{describe(explorer_cx)}"
        )

        pids = ("P1", "P3")
        production = cells_of(PRODUCTION_BLOCKS, tuple(range(9)))
        settings = Settings(
            get_builtin("lookahead-in-split"), Scope(), WINDOW, TIMEOUT_MS, out / "b", True
        )
        results, seconds = timed(prove_range, settings, production, pids, JOBS)
        what = f"(b) lookahead-in-split P1,P3, {len(production)} production cells"
        rows.append(("prover", what, seconds, None))
        methods: dict[str, int] = {}
        for v in results:
            methods[v.method] = methods.get(v.method, 0) + 1
        notes.append(f"(b) verdicts {verdicts(results, pids)}; methods {methods}")

        policy = get_builtin("vllm-latest")
        exploration, explorer_s = timed(explore, policy, SMALL, pids, WINDOW, JOBS)
        explored = {
            pid: "VIOLATED" if exploration.failing(pid, "main") else "PROVED" for pid in pids
        }
        ours, cx_s = timed(
            lambda: {pid: minimal_counterexample(exploration, pid, "main") for pid in pids}
        )
        small = cells_of(SMALL.block, SMALL.lookahead)
        what = f"(c) vllm-latest P1,P3 on the small grid ({len(small)} cells)"
        rows.append(("explorer", what, explorer_s, None))
        rows.append(("explorer+cx", what, explorer_s + cx_s, None))
        for minimise in (False, True):
            settings = Settings(policy, SMALL_SCOPE, WINDOW, TIMEOUT_MS, out / "c", minimise)
            results, seconds = timed(prove_range, settings, small, pids, JOBS)
            label = "prover+cx" if minimise else "prover"
            base = explorer_s + cx_s if minimise else explorer_s
            rows.append((label, what, seconds, base))
            proved = verdicts(results, pids)
            agree = "agree" if proved == explored else "DISAGREE"
            notes.append(f"(c) {label}: {proved}; explorer: {explored} ({agree})")
        for pid in pids:
            found = [v.counterexample for v in results if v.property == pid and v.counterexample]
            best = min(found, key=rank, default=None)
            notes.append(
                f"(c) minimal {pid} counterexample: prover {describe(best)}; "
                f"explorer {describe(ours[pid])}"
            )
        notes.append(
            f"(c) explorer: {exploration.tally.configs['main']} configurations in range, "
            f"{exploration.tally.transitions:,} transitions"
        )

    print(f"{'engine':<11} {'what':<58} {'seconds':>9} {'ratio':>8}")
    for engine, what, seconds, reference in rows:
        ratio = f"{seconds / reference:.1f}x" if reference else "-"
        print(f"{engine:<11} {what:<58} {seconds:>9.2f} {ratio:>8}")
    print("ratio: prover seconds / explorer seconds on the same question")
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
