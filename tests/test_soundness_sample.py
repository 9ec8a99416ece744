"""A soundness sample over source policies: both engines against the real methods run by CPython.

For real release code and for edited copies of it that a pull request could make (a guard
whose ``or`` yields an operand, a split that goes negative at one state), every
configuration of a small range (SPEC S1: B, L, T, M) is judged three independent ways for P0
SAFE and P1 LIVE:

(a) ``chunkproof explore`` over the range (the vectorised form of the source, many
    configurations in one array), its count of violating configurations;
(b) ``chunkproof prove`` over the range (the Z3 form, every input of a cell symbolic), its
    verdict;
(c) a plain enumeration written here: every state reachable from c = 0 under every budget
    1..M, each step computed by the release's methods compiled by CPython
    (:func:`test_fidelity.compiled_step`, release code being trusted), P0 and P1 checked by
    their definitions (SPEC P0: a stage raises or leaves [0, its input]; P1 with Q3: the chunk
    after every clamp at b = M is <= 0 at a reachable c < E on a step that does not raise).

No disagreement is allowed, over the configurations the release accepts at start-up (SPEC
S1b); each edit makes some configuration livelock, and the sample must hold one.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import Cli
from solver_limits import SOLVER_ARGS
from test_fidelity import Release, compiled_step
from vllm_copies import copy_release

from chunkproof.model.builtin import policy_for_release
from chunkproof.model.config import Config
from chunkproof.source.extraction import SCHEDULER_FILE, DirectoryTree, extract
from chunkproof.source.loading import resolve_policy

pytestmark = pytest.mark.fidelity

EDITS = {
    "release": None,
    "or-guard": "if ((request.num_tokens - 9) or 7) == 7:\n            return 0",
    "negative-at-one-state": "if request.num_computed_tokens == 8:\n            return -1",
}
"""Statements put first in 0.33.0's split (None: the release as it is)."""


def _tree(edit: str | None, into: Path) -> Path:
    root = copy_release("0.33.0", into, with_manifest=True)
    if edit is None:
        return root
    scheduler = root / SCHEDULER_FILE
    lines = scheduler.read_text().splitlines(keepends=True)
    split = next(
        node
        for node in ast.walk(ast.parse("".join(lines)))
        if isinstance(node, ast.FunctionDef) and node.name == "_mamba_block_aligned_split"
    )
    lines.insert(split.body[1].lineno - 1, f"        {edit}\n")
    scheduler.write_text("".join(lines))
    return root


RANGE = {"block": [4, 8], "lookahead": range(4), "prompt": range(1, 21), "max_sched": range(3, 9)}
"""The sample's range (D off; M >= L, outside the degenerate region of SPEC CLI): every
configuration in it is judged, in one explore (the forms' lanes hold many configurations at
once) and one prove."""


def _configs() -> list[Config]:
    return [
        Config(block=b, prompt=p, max_sched=m, lookahead=la)
        for b in RANGE["block"]
        for la in RANGE["lookahead"]
        for p in RANGE["prompt"]
        for m in RANGE["max_sched"]
    ]


def _enumerated(release: Release, cfg: Config) -> dict[str, bool]:
    """P0 and P1 (held or not) by a plain breadth-first enumeration with the compiled
    methods (module docstring, (c))."""
    end = max(cfg.prompt, cfg.tokens - 1)
    seen, frontier = {0}, [0]
    safe, live = True, True
    order = [stage.name for stage in release.interpreted.stages]
    while frontier:
        c = frontier.pop()
        if c >= end:
            continue
        for budget in range(1, cfg.max_sched + 1):
            step = compiled_step(release, cfg, c, budget)
            below = budget
            for name in order:
                value = getattr(step, "n" if name == "cap" else name)
                if not 0 <= value <= below:
                    safe = False
                below = value
            if step.crash is not None:
                safe = False
                continue
            if budget == cfg.max_sched and step.chunk <= 0:
                live = False
            if step.chunk > 0 and c + step.chunk not in seen:
                seen.add(c + step.chunk)
                frontier.append(c + step.chunk)
    return {"P0": safe, "P1": live}


def _flags() -> list[str]:
    return [
        "--block", "4,8", "--lookahead", "0-3", "--prompt", "1-20", "--max-sched", "3-8",
        "--drop", "off", "--property", "P0,P1",
    ]  # fmt: skip


def _verdicts(cli: Cli, command: str, root: Path, out: Path) -> dict[str, dict[str, Any]]:
    extra = SOLVER_ARGS if command == "prove" else []
    run = cli(command, str(root), *_flags(), *extra, "--json", "--out", str(out))
    assert run.code in (0, 1), run.err
    return {v["property"]: v for v in run.json()["verdicts"]}


@pytest.mark.parametrize("edit", list(EDITS))
def test_both_engines_agree_with_the_compiled_methods(edit: str, cli: Cli, tmp_path: Path) -> None:
    root = _tree(EDITS[edit], tmp_path / "tree")
    release = Release(
        "0.33.0",
        33,
        policy_for_release("0.33.0"),
        resolve_policy(str(root)),
        extract(DirectoryTree(root)),
    )
    accepted = [cfg for cfg in _configs() if release.interpreted.accepts(cfg) is None]
    violating = {"P0": 0, "P1": 0}
    for cfg in accepted:
        for pid, holds in _enumerated(release, cfg).items():
            violating[pid] += not holds
    assert violating["P1"], "the sample has no livelock to find"
    explored = _verdicts(cli, "explore", root, tmp_path / "out")
    proved = _verdicts(cli, "prove", root, tmp_path / "out")
    for pid, count in violating.items():
        want = "VIOLATED" if count else "PROVED"
        assert explored[pid]["configs"] == len(accepted), explored[pid]
        assert (explored[pid]["status"], explored[pid]["violating_configs"]) == (want, count), (
            edit, pid, explored[pid]["summary"], count
        )  # fmt: skip
        assert proved[pid]["status"] == want, (edit, pid, proved[pid]["summary"], count)
