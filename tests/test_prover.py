"""The Z3 prover against the explorer, and what makes its verdicts honest.

* On every range both engines cover, their verdicts agree, property by property (hypothesis over
  policies and small ranges of every input: the same flags mean the same configurations in
  both), and a violated range's minimal counterexample has the explorer's minimal T and M.
* PROVED verdicts come with certificates that re-check in a fresh solver; forged or tampered
  certificates do not pass.
* A deliberately broken copy of ``lookahead-in-split`` is caught by both engines.
* A split returning -1 breaks P0 (it is not "PROVED" for P1, P3, P4); a range with no
  configuration in scope is EMPTY (exit 2), never PROVED; a timeout is UNKNOWN (exit 3).
* SPEC K through ``chunkproof prove``: the known answer, its certificate files, replay.
"""

from __future__ import annotations

import dataclasses
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import z3
from cli_helpers import Cli
from hypothesis import given, settings
from hypothesis import strategies as st
from solver_limits import GUARD_MS, RLIMIT, SOLVER_ARGS

from chunkproof.checker.engines import minimise
from chunkproof.checker.engines.least_counterexample import least_counterexamples
from chunkproof.checker.engines.minimise import minimal_for_cell
from chunkproof.checker.engines.search import explore, minimal_counterexample
from chunkproof.checker.engines.traces import violates
from chunkproof.checker.engines.verdicts import Verdict
from chunkproof.checker.reports.report import exit_status
from chunkproof.model.arith import fl
from chunkproof.model.budget import Adversarial
from chunkproof.model.builtin import builtin_policies, get_builtin
from chunkproof.model.config import Config
from chunkproof.model.counterexample import Counterexample, replay_steps
from chunkproof.model.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNKNOWN, EXIT_VIOLATED
from chunkproof.model.policy import Policy, Stage
from chunkproof.model.splits import split_v9
from chunkproof.proofs import bounded, certificate, chc, prover, solving
from chunkproof.proofs.chc import ChcResult
from chunkproof.proofs.finite import finite_reachable_violation
from chunkproof.proofs.prover import EMPTY, PROVED, UNKNOWN, VIOLATED, prove_cell
from chunkproof.spec.request import RequestModel
from chunkproof.spec.request_symbolic import Cell, SymbolicRequest, cells
from chunkproof.spec.space import Space, grid_from

TIMEOUT_MS = 60_000
"""Generous: at these sizes a query answers in well under that, and an UNKNOWN here is a
failure, not a pass."""

STEP_PROPERTIES = ("P0", "P1", "P3", "P4", "P5", "P6")


def assert_replays(policy: Policy, cx: Counterexample, window: str = "strict") -> None:
    """The counterexample re-runs step by step, and its last step breaks its property."""
    assert replay_steps(policy, cx) is None
    last = cx.steps[-1]
    assert violates(cx.property, cx.config, last, window, cx.largest_budget(), policy=policy)


def prove(policy: Policy, space: Space, pid: str, tmp: Path) -> list[prover.CellVerdict]:
    return [
        prove_cell(SymbolicRequest(policy, cell, space.budget), cell, pid, TIMEOUT_MS, tmp / f"{i}")
        for i, cell in enumerate(cells(space))
    ]


def combined(verdicts: list[prover.CellVerdict]) -> str:
    statuses = {v.status for v in verdicts}
    for status in (VIOLATED, UNKNOWN, PROVED):
        if status in statuses:
            return status
    return EMPTY


# -- 1. agreement ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    policy: Policy
    texts: dict[str, str]
    budget: tuple[int, int] | None
    pid: str


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """A small range over every input, written as the flags a user would give."""
    block = draw(st.integers(2, 8))
    texts = {
        "block": str(block),
        "split_block": draw(st.sampled_from(["B", "B", "B/2" if block % 2 == 0 else "B"])),
        "lookahead": draw(st.sampled_from(["0", "1", "2", "3", "0-3"])),
        "drop": draw(st.sampled_from(["off", "on", "both"])),
        "prompt": f"1-{draw(st.integers(3, 14))}",
        "max_sched": f"1-{draw(st.integers(2, 8))}",
        "threshold": draw(st.sampled_from(["0", "0", "0,3"])),
        "tokens": draw(st.sampled_from(["P", "P", "P+0-1"])),
        "start": draw(st.sampled_from(["0", "0", "0,block", "0,external"])),
        "hash_lookahead": draw(st.sampled_from(["0", "0", "0,L"])),
    }
    budget = draw(st.sampled_from([None, None, (2, 6)]))
    return Case(
        draw(st.sampled_from(builtin_policies())),
        texts,
        budget,
        draw(st.sampled_from(STEP_PROPERTIES)),
    )


# derandomize: a fixed, reproducible set of examples keeps the run time predictable.
@settings(max_examples=80, deadline=None, derandomize=True)
@given(case=cases())
def test_prover_agrees_with_explorer(case: Case, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Same flags, same configurations: the prover's verdict is the explorer's main-category
    verdict, and a violation's minimal counterexample has the explorer's T and M."""
    space = Space((grid_from(case.texts),), case.budget)
    tmp = tmp_path_factory.mktemp("agree")
    verdicts = prove(case.policy, space, case.pid, tmp)
    status = combined(verdicts)
    assert status != UNKNOWN, [v.detail for v in verdicts]
    exploration = explore(RequestModel(case.policy, space), (case.pid,))
    main = exploration.tally.configs["main"]
    violated = exploration.failing(case.pid, "main") > 0
    expected = VIOLATED if violated else PROVED if main else EMPTY
    assert status == expected, (exploration.tally.configs, exploration.tally.failing)
    if not violated:
        return
    ours = minimal_counterexample(exploration, case.pid, "main")
    assert ours is not None
    found = [
        minimal_for_cell(SymbolicRequest(case.policy, v.cell, space.budget), case.pid, TIMEOUT_MS)
        for v in verdicts
        if v.status == VIOLATED
    ]
    best = min(
        (cx for cx, _ in found if cx is not None),
        key=lambda cx: (cx.config.T, cx.config.block, cx.config.lookahead, cx.config.max_sched),
    )
    assert_replays(case.policy, best)
    assert best.config.T == ours.config.T, [how for _, how in found]
    # Minimisation's finite-state query (is there a violation with T <= t?) says what the
    # explorer found: no violated cell has one below the least T, some cell has one at it.
    least = ours.config.T
    cells_violated = [v.cell for v in verdicts if v.status == VIOLATED]
    below = [_violation_by(case, space, cell, least - 1) for cell in cells_violated]
    at = [_violation_by(case, space, cell, least) for cell in cells_violated]
    assert set(below) == {"unsat"} and "sat" in at and "unknown" not in at, (below, at)


def _violation_by(case: Case, space: Space, cell: Cell, tokens: int) -> str:
    """The finite-state query over every state c <= ``tokens``: a violation of the case's
    property with T <= ``tokens`` in ``cell``."""
    model = SymbolicRequest(case.policy, cell, space.budget)
    extra = model.view.tokens <= tokens
    states = model.states_below(tokens)
    return finite_reachable_violation(model, case.pid, extra, states, TIMEOUT_MS)


# -- 2. certificates ---------------------------------------------------------------------------


def _model(name: str, texts: dict[str, str]) -> SymbolicRequest:
    (cell,) = cells(Space((grid_from(texts),)))
    return SymbolicRequest(get_builtin(name), cell, None)


INDUCTION = ("lookahead-in-split", {"block": "16", "lookahead": "3", "drop": "off"}, "P1")
SPACER = (
    "vllm-0.17",
    {"block": "4", "lookahead": "0", "drop": "off", "prompt": "1-16", "max_sched": "1-8"},
    "P3",
)
LIVELOCK = (
    "vllm-0.33",
    {"block": "4", "lookahead": "2", "drop": "off", "prompt": "1-16", "max_sched": "1-8"},
)
"""A cell where P1 is violated a step from admission."""


@pytest.fixture(params=["induction", "spacer"])
def proved(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """The certificate of a PROVED cell (by direct induction, or by Spacer's invariant)."""
    method: str = request.param
    name, texts, pid = INDUCTION if method == "induction" else SPACER
    model = _model(name, texts)
    path = tmp_path / "cert.smt2"
    verdict = prove_cell(model, "cell", pid, TIMEOUT_MS, path)
    assert verdict.status == PROVED, verdict.detail
    assert verdict.certificate is not None
    return Path(verdict.certificate)


def test_a_task_returns_its_certificates_and_the_caller_writes_them(tmp_path: Path) -> None:
    """A prover task (on a worker, maybe of another machine) proves in a scratch folder of its
    own and returns each certificate's text: it writes nothing where the run keeps them;
    prove_range writes the text there, and the file re-checks."""
    name, texts, pid = SPACER
    (cell,) = cells(Space((grid_from(texts),)))
    folder = tmp_path / "certificates"
    settings = prover.Settings(
        lambda c: SymbolicRequest(get_builtin(name), c, None),
        lambda c, p: f"{p}.smt2",
        TIMEOUT_MS,
        folder,
    )
    (returned,) = prover.prove_task(settings, (cell, (pid,)))
    assert returned.status == PROVED and not folder.exists()
    assert returned.certificate == str(folder / f"{pid}.smt2")
    assert returned.certificate_text and returned.certificate_text.startswith("; chunkproof")
    folder.mkdir()
    (written,) = prover.prove_range(settings, [cell], (pid,), lambda f, shared, tasks: (
        f(*shared, task) for task in tasks
    ))  # fmt: skip
    assert written.certificate_text is None and written.certificate is not None
    assert certificate.holds(certificate.recheck(Path(written.certificate), TIMEOUT_MS))


def test_certificate_rechecks(proved: Path) -> None:
    assert proved.is_file()
    results = certificate.recheck(proved, TIMEOUT_MS)
    assert results == dict.fromkeys(certificate.OBLIGATIONS, "unsat")
    assert certificate.holds(results)


def _sections(text: str) -> tuple[str, dict[str, str]]:
    head, *parts = text.split(certificate.SECTION)
    return head, {part.split(" ", 1)[0]: part for part in parts}


def _join(head: str, sections: dict[str, str]) -> str:
    return head + "".join(certificate.SECTION + part for part in sections.values())


def _drop_safety(text: str) -> str:
    head, sections = _sections(text)
    del sections["safety"]
    return _join(head, sections)


def _trivial_safety(text: str) -> str:
    head, sections = _sections(text)
    sections["safety"] = "safety (expected: unsat)\n(declare-fun c () Int)\n(assert (>= c 0))\n"
    return _join(head, sections)


def _rename_section(text: str) -> str:
    return text.replace(f"{certificate.SECTION}consecution", f"{certificate.SECTION}consecutio")


def _sat_initiation(text: str) -> str:
    """Keep the initiation query's declarations but assert nothing of them."""
    head, sections = _sections(text)
    part = sections["initiation"]
    declarations = "\n".join(line for line in part.splitlines() if line.startswith("(declare"))
    sections["initiation"] = f"initiation (expected: unsat)\n{declarations}\n(assert true)\n"
    return _join(head, sections)


TAMPERS: dict[str, Callable[[str], str]] = {
    "safety-deleted": _drop_safety,
    "safety-replaced": _trivial_safety,
    "section-renamed": _rename_section,
    "initiation-weakened": _sat_initiation,
    "emptied": lambda text: "",
}


@pytest.mark.parametrize("tamper", TAMPERS)
def test_tampered_certificate_fails(proved: Path, tamper: str) -> None:
    proved.write_text(TAMPERS[tamper](proved.read_text()))
    assert not certificate.holds(certificate.recheck(proved, TIMEOUT_MS))


def test_confirm_keeps_a_holding_certificate_and_removes_a_tampered_one(proved: Path) -> None:
    """What both provers call on a certificate: it stays only if it holds."""
    assert certificate.confirm(proved, TIMEOUT_MS)[0] and proved.is_file()
    proved.write_text(_drop_safety(proved.read_text()))
    confirmed, results = certificate.confirm(proved, TIMEOUT_MS)
    assert not confirmed and "safety" not in results
    assert not proved.exists()


@pytest.mark.parametrize(
    ("invariant", "broken"),
    [
        (lambda s: s[0] > 0, "initiation"),  # the initial state c = c0 = 0 is outside
        (lambda s: s[0] == 0, "consecution"),  # the first chunk leaves it
    ],
    ids=["not-initial", "not-inductive"],
)
def test_forged_invariant_fails(
    invariant: Callable[[Any], Any], broken: str, tmp_path: Path
) -> None:
    name, texts, pid = INDUCTION
    model = _model(name, texts)
    path = certificate.write(tmp_path / "forged.smt2", model, pid, invariant, "forged").path
    results = certificate.recheck(path, TIMEOUT_MS)
    assert results[broken] == "sat"
    assert not certificate.holds(results)


@pytest.mark.parametrize(
    ("name", "texts", "pid"),
    [SPACER, ("vllm-0.33", {"block": "16", "lookahead": "3", "drop": "off"}, "P1")],
    ids=["spacer-cell", "violated-cell"],
)
def test_trivial_invariant_is_not_safe(
    name: str, texts: dict[str, str], pid: str, tmp_path: Path
) -> None:
    """Swapping in "true" as the invariant of a cell that needs more makes safety sat."""
    model = _model(name, texts)
    path = tmp_path / "trivial.smt2"
    certificate.write(path, model, pid, lambda s: z3.BoolVal(True), "trivial")
    results = certificate.recheck(path, TIMEOUT_MS)
    assert results["safety"] == "sat"
    assert not certificate.holds(results)


# -- 3. a broken policy is caught by both engines -----------------------------------------------


def split_finish_across_block(cfg: Config, c: int, n: int) -> int:
    """lookahead-in-split with rule (1)'s guard dropped: it finishes the prefill from a
    mid-block start even when the chunk crosses a block boundary (a deliberate bug)."""
    k = split_v9(cfg, c, n)
    e = c + k
    t = cfg.tokens
    if cfg.lookahead >= 2 and t - cfg.lookahead < e < t:
        if c + n >= t:
            return t - c
        a = fl(t - cfg.lookahead, cfg.split_block)
        if a > c:
            return a - c
    return k


ORIGINAL = get_builtin("lookahead-in-split")
BROKEN = dataclasses.replace(
    ORIGINAL,
    name="lookahead-in-split-broken",
    stages=tuple(
        Stage("split", split_finish_across_block) if s.name == "split" else s
        for s in ORIGINAL.stages
    ),
)
BROKEN_GRID = {"block": "4,8,16", "lookahead": "0-3", "prompt": "1-40", "max_sched": "1-12"}


def test_broken_policy_caught_by_explorer() -> None:
    space = Space((grid_from(BROKEN_GRID),))
    kept = explore(RequestModel(ORIGINAL, space), ("P1", "P3"))
    caught = explore(RequestModel(BROKEN, space), ("P1", "P3"))
    assert kept.failing("P3", "main") == 0
    assert caught.failing("P3", "main") > 0
    cx = minimal_counterexample(caught, "P3", "main")
    assert cx is not None
    assert_replays(BROKEN, cx)
    last = cx.steps[-1]
    assert last.c % cx.config.block != 0 and last.end == cx.config.T
    assert replay_steps(ORIGINAL, cx) is not None  # the original does not take that step


@pytest.mark.parametrize(
    "texts",
    [
        {"block": "4", "lookahead": "2", "drop": "off", "prompt": "1-24", "max_sched": "1-12"},
        {"block": "16", "lookahead": "3", "drop": "on", "prompt": "1-1048576",
         "max_sched": "1-65536", "threshold": "0-1048576"},
    ],
    ids=["small", "production"],
)  # fmt: skip
def test_broken_policy_caught_by_prover(texts: dict[str, str], tmp_path: Path) -> None:
    space = Space((grid_from(texts),))
    (cell,) = cells(space)
    kept = prove_cell(SymbolicRequest(ORIGINAL, cell, None), cell, "P3", TIMEOUT_MS, tmp_path / "a")
    caught = prove_cell(SymbolicRequest(BROKEN, cell, None), cell, "P3", TIMEOUT_MS, tmp_path / "b")
    assert kept.status == PROVED, kept.detail
    assert caught.status == VIOLATED, caught.detail
    cx, how = minimal_for_cell(SymbolicRequest(BROKEN, cell, None), "P3", TIMEOUT_MS)
    assert cx is not None, how
    assert_replays(BROKEN, cx)


# -- 4. honest verdicts through the CLI --------------------------------------------------------


def _user_split(tmp_path: Path, body: str) -> str:
    path = tmp_path / "user_split.py"
    path.write_text(textwrap.dedent(body))
    return f"{path}:split"


@pytest.mark.parametrize(
    ("body", "words"), [("return -1", "returns -1"), ("raise ValueError(c)", "raise in split")]
)
def test_a_split_that_breaks_p0_everywhere_breaks_it_in_both_engines(
    cli: Cli, tmp_path: Path, body: str, words: str
) -> None:
    """A split returning -1 never schedules a token, and one that raises on every input (its
    crash condition folds to a plain True) neither: P0 is VIOLATED in both engines (the
    explorer does not crash, the prover does not stop on the stage after the split),
    whatever the other properties say of the steps it does take."""
    policy = _user_split(tmp_path, f"def split(cfg, c, n):\n    {body}\n")
    for command in ("prove", "explore"):
        run = cli(
            command, policy, "--block", "16", "--lookahead", "3", "--prompt", "1-64",
            "--max-sched", "1-16", "--property", "P0,P1", "--json",
            "--out", str(tmp_path / command),
        )  # fmt: skip
        assert run.code == EXIT_VIOLATED, run.err
        verdicts = {v["property"]: v for v in run.json()["verdicts"]}
        assert verdicts["P0"]["status"] == VIOLATED
        assert words in verdicts["P0"]["summary"]


def test_no_configuration_in_range_is_never_proved(cli: Cli, tmp_path: Path) -> None:
    """M < L with the reservation: every configuration is in the degenerate region. Both
    engines say EMPTY and exit 2; the explorer reports the degenerate finding."""
    for command in ("prove", "explore"):
        run = cli(
            command, "vllm-0.33", "--block", "16", "--lookahead", "3", "--max-sched", "2",
            "--prompt", "17", "--property", "P1", "--json", "--out", str(tmp_path / command),
        )  # fmt: skip
        assert run.code == EXIT_BAD_INPUT, run.out + run.err
        (verdict,) = run.json()["verdicts"]
        assert verdict["status"] == EMPTY
        assert "no configuration in range" in verdict["summary"]
        if command == "explore":
            assert verdict["findings"] and verdict["findings"][0]["kind"] == "degenerate"


def test_prove_honours_every_range_flag(cli: Cli, tmp_path: Path) -> None:
    """A single value is that value: --max-sched 16 is M = 16 (the counterexample has M = 16,
    not a smaller M the flag excluded), and --budget and --hash-block are honoured."""
    run = cli(
        "prove", "vllm-0.33", "--block", "16", "--lookahead", "3", "--max-sched", "16",
        "--drop", "off", "--property", "P1", "--json", "--out", str(tmp_path),
    )  # fmt: skip
    assert run.code == EXIT_VIOLATED, run.err
    (verdict,) = run.json()["verdicts"]
    cx = Counterexample.load(Path(verdict["counterexample"]))
    assert cx.config.max_sched == 16
    assert verdict["range"]["max_sched"] == "16"
    narrow = cli(
        "prove", "vllm-0.33", "--block", "16", "--lookahead", "3", "--drop", "off",
        "--budget", "16", "--hash-block", "8", "--property", "P1", "--json",
        "--out", str(tmp_path / "b"),
    )  # fmt: skip
    (verdict,) = narrow.json()["verdicts"]
    assert verdict["range"]["hash_block"] == "8"
    assert verdict["range"]["budget"] == "16-16 within 1-M"
    if verdict["counterexample"]:
        cx = Counterexample.load(Path(verdict["counterexample"]))
        assert cx.config.hash_block == 8
        assert all(s.budget == 16 for s in cx.steps)


def test_cli_vllm_033_minimal_livelock(cli: Cli, tmp_path: Path) -> None:
    """SPEC K: the smallest P1 counterexample of vllm-0.33 for B=16, L=3 has T=17."""
    run = cli(
        "prove", "vllm-0.33", "--block", "16", "--lookahead", "3", "--property", "P1",
        "--json", "--out", str(tmp_path), "--jobs", "1",
    )  # fmt: skip
    assert run.code == EXIT_VIOLATED, run.err
    (verdict,) = run.json()["verdicts"]
    assert (verdict["property"], verdict["status"]) == ("P1", VIOLATED)
    path = Path(verdict["counterexample"])
    assert path.is_file() and str(path) in run.json()["files"]
    cx = Counterexample.load(path)
    assert cx.config.tokens == cx.config.prompt == 17
    assert (cx.config.block, cx.config.lookahead) == (16, 3)
    assert cx.steps[-1].c == 14 and cx.steps[-1].chunk == 0
    replay = cli("replay", str(path), "--json")
    assert replay.code == EXIT_OK, replay.out + replay.err
    assert replay.json()["reproduces"] is True


def test_the_counterexample_takes_the_least_lookahead_at_the_least_prompt(
    cli: Cli, tmp_path: Path
) -> None:
    """SPEC C orders T, B, L, M: over L in 2-40, vllm-0.33's P4 counterexample of T=5 has
    L=2 (a bounded search minimising T, M and theta only returned L=4, whichever its model
    held), and its summary says how far the minimum of L is searched."""
    run = cli(
        "prove", "vllm-0.33", "--block", "4", "--prompt", "1-40", "--lookahead", "2-40",
        "--max-sched", "1-64", "--property", "P4", "--json", "--out", str(tmp_path),
    )  # fmt: skip
    (verdict,) = run.json()["verdicts"]
    cx = Counterexample.load(Path(verdict["counterexample"]))
    assert (cx.config.tokens, cx.config.lookahead, cx.config.max_sched) == (5, 2, 4)
    assert "L and the inputs after M are the least at that T" in verdict["summary"]


def test_the_least_m_is_found_where_the_ms_up_to_the_solvers_are_too_many(
    cli: Cli, tmp_path: Path
) -> None:
    """At B=528 the bounded search's M is 526 (a one-step trace), and exploring every M up to
    it at once is over the explorer's cap; explored in groups of ascending M, the least M is 3
    (a 176-step trace), and the summary claims M minimal from the explorer (the claim had been
    "in 1 step only", with M=526)."""
    run = cli(
        "prove", "vllm-0.33", "--block", "528", "--lookahead", "3", "--drop", "off",
        "--property", "P1", "--json", "--out", str(tmp_path), "--jobs", "1",
    )  # fmt: skip
    (verdict,) = run.json()["verdicts"]
    cx = Counterexample.load(Path(verdict["counterexample"]))
    assert (cx.config.tokens, cx.config.max_sched, cx.steps[-1].c) == (529, 3, 526)
    assert (
        "M and the trace length are minimal at that T (explorer, exhaustive)"
        in (verdict["summary"])
    )
    assert_replays(get_builtin("vllm-0.33"), cx)


@pytest.mark.parametrize("command", ["prove", "explore"])
def test_a_per_step_threshold_below_l_is_not_degenerate(
    cli: Cli, tmp_path: Path, command: str
) -> None:
    """SPEC CLI's degenerate region holds 0 < theta < L only for a static threshold: from
    0.31 the per-step threshold never holds a request, so both engines judge vllm-0.33 at
    theta 1-2 < L = 3 and find the livelock there (the prover read every cap as static under
    a mutant of its degenerate rule and said EMPTY)."""
    run = cli(
        command, "vllm-0.33", "--block", "4", "--lookahead", "3", "--threshold", "1-2",
        "--max-sched", "3-8", "--prompt", "1-12", "--drop", "off", "--property", "P1",
        "--json", "--jobs", "1", "--out", str(tmp_path),
    )  # fmt: skip
    (verdict,) = run.json()["verdicts"]
    assert verdict["status"] == VIOLATED
    cx = Counterexample.load(Path(verdict["counterexample"]))
    assert (cx.config.lookahead, cx.config.threshold) == (3, 1)


def test_minimality_across_cells_is_claimed_only_when_searched(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two violated cells (B = 16 and 64): when the second cannot be searched for a smaller T
    (its query undecided), the counterexample says T is minimal in its cell only; when it
    can, the claim covers both cells."""
    argv = ["prove", "vllm-0.33", "--block", "16,64", "--lookahead", "3", "--drop", "off"]
    argv += ["--property", "P1", "--json", "--jobs", "1"]
    searched = cli(*argv, "--out", str(tmp_path / "a"))
    (verdict,) = searched.json()["verdicts"]
    assert verdict["figure"]["violated_cells"] and "cell only" not in verdict["summary"]
    assert len(verdict["figure"]["violated_cells"]) == 2
    said = f"none of the 1 other violated cells holds a smaller T ({minimise.EVERY_STATE})"
    assert said in verdict["summary"]

    gave_up = minimise.Reached("unknown", minimise.SPACER)
    monkeypatch.setattr(minimise, "violation_ranked_below", lambda *args: gave_up)
    undecided = cli(*argv, "--out", str(tmp_path / "b"))
    (verdict,) = undecided.json()["verdicts"]
    assert verdict["status"] == VIOLATED
    assert "T is minimal in its cell only: 1 other violated cell(s)" in verdict["summary"]


def test_a_violated_verdict_names_its_undecided_and_empty_cells(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.34's P8 at B = 16 over hash blocks 16 and 8, checkpoints off and on: the partial hit
    c0 = 8 breaks it (T = 9), the cell with partial hits and checkpoints is outside P8's scope,
    and the solver is made to leave the cell of whole hits with checkpoints undecided. The
    verdict is VIOLATED and its summary says both, so a reader does not take the other cells
    for proved."""
    real = prover.prove_cell

    def undecided(model: Any, cell: Any, pid: str, *args: Any) -> prover.CellVerdict:
        values = dict(cell.values)
        if (values["hash_block"], values["checkpoint_alignment"]) == (16, 16):
            return prover.CellVerdict(cell, pid, prover.UNKNOWN, "spacer", 0.0, "gave up")
        return real(model, cell, pid, *args)

    monkeypatch.setattr(prover, "prove_cell", undecided)
    run = cli(
        "prove", "vllm-latest", "--block", "16", "--hash-block", "G,G/2", "--checkpoints",
        "both", "--checkpoint-alignment", "H", "--lookahead", "0", "--start", "0,hash",
        "--prompt", "1-64", "--max-sched", "1-64", "--property", "P8", "--json", "--jobs", "1",
        *SOLVER_ARGS, "--out", str(tmp_path),
    )  # fmt: skip
    (verdict,) = run.json()["verdicts"]
    others = "; 1 cell(s) undecided (gave up); 1 cell(s) hold no configuration in its scope ("
    assert verdict["status"] == VIOLATED and others in verdict["summary"]


def test_a_cell_that_cannot_rank_before_the_best_is_not_minimised(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vllm-0.33's livelock at L = 3 is least at T = 17, B = 16, M = 3 (docs/guide.md). A cell is
    asked whether a violation comes before a best in (T, B, L, M) order: before T = 17, M = 4
    yes; before T = 17, M = 3 (itself) or T = 16 no. prove minimises another violated cell
    only when it can come before the best: B = 64 cannot, so B = 16 alone is minimised."""
    model = _model("vllm-0.33", {"block": "16", "lookahead": "3", "drop": "off"})
    least = Config(block=16, prompt=17, lookahead=3, max_sched=3)
    asked = [
        minimise.violation_ranked_below(model, "P1", cfg, TIMEOUT_MS).status
        for cfg in (least.replace(max_sched=4), least, Config(block=16, prompt=16, max_sched=64))
    ]
    assert asked == ["sat", "unsat", "unsat"]

    minimised: list[str] = []
    real = minimise.minimal_for_cell

    def counted(model: SymbolicRequest, pid: str, timeout_ms: int) -> Any:
        minimised.append(str(model.cell.describe()["block"]))
        return real(model, pid, timeout_ms)

    monkeypatch.setattr(minimise, "minimal_for_cell", counted)
    run = cli(
        "prove", "vllm-0.33", "--block", "16,64", "--lookahead", "3", "--drop", "off",
        "--property", "P1", "--json", "--jobs", "1", "--out", str(tmp_path),
    )  # fmt: skip
    (verdict,) = run.json()["verdicts"]
    cx = Counterexample.load(Path(verdict["counterexample"]))
    assert minimised == ["16"]
    assert (cx.config.T, cx.config.block, cx.config.max_sched) == (17, 16, 3)


def test_the_finite_state_query_answers_as_spacer_and_never_past_its_list() -> None:
    """vllm-0.33's livelock at L = 3 is least at T = 17 (stuck at c = 14): over every state
    c < T (proofs.finite) a violation with T <= 17 is reachable and none with T <= 16, as
    Spacer says for traces of any length. A list that misses a state some run reaches (it stops
    at c = 10, or leaves out the initial c = 0) gives unknown, never unsat."""
    model = _model("vllm-0.33", {"block": "16", "lookahead": "3", "drop": "off"})
    for tokens, expected in ((17, "sat"), (16, "unsat")):
        extra = model.view.tokens <= tokens
        assert chc.reachable_violation(model, "P1", extra, TIMEOUT_MS).status == expected
        listed = model.states_below(tokens)
        assert finite_reachable_violation(model, "P1", extra, listed, TIMEOUT_MS) == expected
    extra = model.view.tokens <= 17
    for short in (model.states_below(10), model.states_below(17)[1:]):
        assert finite_reachable_violation(model, "P1", extra, short, TIMEOUT_MS) == "unknown"


@pytest.mark.parametrize("finite_tokens", [32, 4])
def test_a_bounded_search_that_runs_long_leaves_the_least_t_to_the_states(
    monkeypatch: pytest.MonkeyPatch, finite_tokens: int
) -> None:
    """When the first bounded search runs past its time (here 1 ms), the least T is sought
    over every state (T <= 1, 2, 4, ... then bisection) and the other inputs at that T: the
    same minimal counterexample as the bounded search's (vllm-0.33's livelock, T = 17, M = 3),
    its T certified. When the states give no answer (no violation up to T = 4), the bounded
    search runs again with the whole timeout."""
    model = _model("vllm-0.33", {"block": "16", "lookahead": "3", "drop": "off"})
    usual, _ = minimal_for_cell(model, "P1", TIMEOUT_MS)
    searched: list[tuple[int, bool]] = []
    real = bounded.bounded_search

    def recorded(model: Any, pid: str, depth: int, goals: Any, ms: int, extra: Any = True) -> Any:
        searched.append((ms, extra is True))
        return real(model, pid, depth, goals, ms, extra)

    monkeypatch.setattr(minimise, "bounded_search", recorded)
    monkeypatch.setattr(minimise, "FIRST_SEARCH_MS", 1)
    monkeypatch.setattr(minimise, "FINITE_TOKENS", finite_tokens)
    cx, how = minimal_for_cell(model, "P1", TIMEOUT_MS)
    assert usual is not None and cx is not None
    assert cx.config == usual.config and cx.steps == usual.steps
    assert (cx.config.T, cx.config.max_sched) == (17, 3)
    assert "T is the minimum over traces of any length" in how
    searched_again = (TIMEOUT_MS, True) in searched
    assert searched_again == (finite_tokens == 4), searched


def test_a_cell_is_asked_once_per_best(monkeypatch: pytest.MonkeyPatch) -> None:
    """Five violated cells: the first in cell order (B = 16, H = 4; least T 12) is minimised
    first; the four others, each with a violation at T = 5 (two at B = 16, one at B = 64, one
    at B = 528), are asked whether they come before it in (T, B, L, M) order (all do); the
    first of them (B = 16, H = 8) is minimised and is the new best, the three left are asked
    again (none comes before it), and nothing else is minimised: seven questions in all, where
    a bisection on T asked every cell at every bound. A cell said to come before the best
    whose minimisation finds nothing better makes the claim its cell's only. A second property
    searched in the same run (its least T at B = 528) gets what it gets alone, and a cell asked
    about both properties in one round builds its model once."""
    grid = Space((grid_from({"block": "16,64,528", "lookahead": "3", "drop": "off"}),)).grids[0]

    def cell(block: int, hash_block: int) -> Any:
        values = (("block", block), ("split_block", block), ("hash_block", hash_block))
        return Cell(values, True, grid)

    first, twin, third = cell(16, 4), cell(16, 8), cell(16, 16)
    wide, wider = cell(64, 64), cell(528, 528)
    least = {
        "P1": {first: 12, twin: 5, third: 5, wide: 5, wider: 5},
        "P3": {first: 9, twin: 9, third: 9, wide: 9, wider: 2},
    }
    asked: list[tuple[str, Any]] = []
    minimised: list[tuple[str, Any]] = []
    built: list[Any] = []

    def before(model: Any, pid: str, best: Config, timeout_ms: int) -> minimise.Reached:
        asked.append((pid, model))
        ahead = (least[pid][model], model.value("block")) < (best.T, best.block)
        return minimise.Reached("sat" if ahead else "unsat", minimise.SPACER)

    def minimal_at(model: Any, pid: str, tokens: int) -> tuple[Counterexample, str]:
        minimised.append((pid, model))
        cfg = Config(block=model.value("block"), prompt=tokens, lookahead=3, max_sched=3)
        return Counterexample("p", cfg, Adversarial(1, 3), pid, (), "stuck"), "minimal"

    def minimal(model: Any, pid: str, timeout_ms: int) -> tuple[Counterexample, str]:
        return minimal_at(model, pid, least[pid][model])

    def make(cell: Any) -> Any:  # the fakes take the cell for its model
        built.append(cell)
        return cell

    monkeypatch.setattr(minimise, "violation_ranked_below", before)
    monkeypatch.setattr(minimise, "minimal_for_cell", minimal)
    cells = [wider, wide, third, twin, first]
    alone = {pid: least_counterexamples({pid: cells}, make, TIMEOUT_MS, 1)[pid] for pid in least}
    cx, how = alone["P1"]
    assert cx is not None and (cx.config.T, cx.config.block) == (5, 16)
    assert minimised[:2] == [("P1", first), ("P1", twin)]
    assert asked[:7] == [("P1", c) for c in (twin, third, wide, wider, third, wide, wider)]
    assert how.endswith("none of the 4 other violated cells holds a smaller T (Spacer)")

    minimised.clear()
    built.clear()
    ticks: list[tuple[int, int]] = []
    together = least_counterexamples(
        {pid: cells for pid in least}, make, TIMEOUT_MS, 1, lambda *t: ticks.append(t)
    )
    # the progress: every (cell, property) pair settled at the end, never one unsettled again
    assert ticks[0] == (0, 10) and ticks[-1] == (10, 10)
    assert [done for done, _ in ticks] == sorted(done for done, _ in ticks)
    least_counterexamples({"P1": []}, make, TIMEOUT_MS, 1, lambda *t: ticks.append((-1, -1)))
    assert (-1, -1) not in ticks  # nothing to search: no progress line
    for pid in least:
        cx, how = together[pid]
        single, claim = alone[pid]
        assert cx is not None and single is not None
        assert (cx.config, how) == (single.config, claim)
        assert cx.config.block == (528 if pid == "P3" else 16)
    assert sorted(minimised, key=str) == sorted(
        [("P1", first), ("P1", twin), ("P3", first), ("P3", wider)], key=str
    )
    # third, minimised by neither: asked of both properties in one task, then of P1 again
    # (alone, each property's questions built it: three times)
    assert built.count(third) == 2

    # Said to come before the best, yet minimised to no better: the claim is the cell's only.
    monkeypatch.setattr(
        minimise, "violation_ranked_below", lambda *args: minimise.Reached("sat", "Z3")
    )
    monkeypatch.setattr(
        minimise, "minimal_for_cell", lambda model, pid, _: minimal_at(model, pid, 12)
    )
    cx, how = least_counterexamples({"P1": cells}, make, TIMEOUT_MS, 1)["P1"]
    assert "T is minimal in its cell only: 4 other violated cell(s)" in how


def test_cli_lookahead_in_split_proves_p1(cli: Cli, tmp_path: Path) -> None:
    run = cli(
        "prove", "lookahead-in-split", "--block", "16,64", "--lookahead", "0-8",
        "--drop", "both", "--property", "P1", "--json", "--out", str(tmp_path),
    )  # fmt: skip
    assert run.code == EXIT_OK, run.err
    (verdict,) = run.json()["verdicts"]
    assert (verdict["property"], verdict["status"]) == ("P1", PROVED)
    cells_proved = 2 * 2  # B in {16, 64} x the lookahead classes L = 0, L >= 1
    assert verdict["figure"]["cells"] == cells_proved
    assert verdict["counterexample"] is None
    files = sorted((tmp_path / "lookahead-in-split" / "certificates").glob("*.smt2"))
    assert len(files) == cells_proved
    assert {str(p) for p in files} <= set(run.json()["files"])
    for path in files:
        assert certificate.holds(certificate.recheck(path, TIMEOUT_MS)), path


def test_cli_spacer_timeout_is_unknown(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cell that needs Spacer, with Spacer giving up: UNKNOWN, exit 3, never PROVED."""

    def gave_up(*args: Any, **kwargs: Any) -> ChcResult:
        return ChcResult("unknown", None, 0.0, (0,))

    monkeypatch.setattr(prover, "reachable_violation", gave_up)
    run = cli(
        "prove", "vllm-0.17", "--block", "4", "--lookahead", "0", "--drop", "off",
        "--prompt", "1-16", "--max-sched", "1-8", "--property", "P3",
        "--json", "--out", str(tmp_path), "--jobs", "1",
    )  # fmt: skip
    assert run.code == EXIT_UNKNOWN, run.err
    (verdict,) = run.json()["verdicts"]
    assert verdict["status"] == UNKNOWN
    assert not list(tmp_path.rglob("*.smt2"))  # no certificate left for an unproved cell


def test_spacer_tries_are_cut_by_resource_units_not_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each seed's try ends at its resource limit (deterministic), long before the timeout:
    with a tiny limit every seed gives up at once, the result names the seeds tried, and with
    no limit the last seed answers."""
    name, texts, pid = SPACER
    model = _model(name, texts)
    monkeypatch.setattr(chc, "SEEDS", ((5, 1_000), (6, 1_000)))
    started = time.monotonic()
    result = chc.reachable_violation(model, pid, True, TIMEOUT_MS)
    assert (result.status, result.seeds) == ("unknown", (5, 6))
    assert time.monotonic() - started < TIMEOUT_MS / 1000 / 4
    assert result.attempts() == "Spacer (seeds 5, 6)"
    monkeypatch.setattr(chc, "SEEDS", ((5, 1_000), (6, 0)))
    result = chc.reachable_violation(model, pid, True, TIMEOUT_MS)
    assert (result.status, result.seeds) == ("unsat", (5, 6))
    assert result.attempts() == "Spacer (seeds 5, 6)"


def test_undecided_spacer_falls_back_to_shallow_bounded_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spacer goes first; when it gives up, the 1- and 2-step unrollings still find a shallow
    violation (VIOLATED, method bmc, no certificate) and find none in a cell that holds (so
    it stays UNKNOWN there, not PROVED)."""

    def gave_up(*args: Any, **kwargs: Any) -> ChcResult:
        return ChcResult("unknown", None, 0.0, (0,))

    monkeypatch.setattr(prover, "reachable_violation", gave_up)
    livelock = _model(*LIVELOCK)
    verdict = prove_cell(livelock, "cell", "P1", TIMEOUT_MS, tmp_path / "a.smt2")
    assert (verdict.status, verdict.method) == (VIOLATED, "bmc")
    assert verdict.certificate is None and not (tmp_path / "a.smt2").exists()
    name, texts, pid = SPACER
    verdict = prove_cell(_model(name, texts), "cell", pid, TIMEOUT_MS, tmp_path / "b.smt2")
    assert verdict.status == UNKNOWN


@pytest.mark.parametrize("spacer", ["true", "undecided"])
@pytest.mark.parametrize("second", ["unknown", "unsat"])
def test_induction_cut_short_is_rechecked_once_with_the_whole_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spacer: str, second: str
) -> None:
    """Induction's certificate (invariant true) is undecided within INDUCTION_FIRST_MS; when
    Spacer then says unsat with the invariant true (the same certificate) or gives up, that
    certificate is re-checked once more with the whole timeout: PROVED by induction if it
    holds, else UNKNOWN with no certificate left (Spacer's true is never taken on its word)."""
    confirmed: list[int] = []

    def answers(path: Path, timeout_ms: int, rlimit: int | None) -> tuple[bool, dict[str, str]]:
        confirmed.append(timeout_ms)
        safety = second if len(confirmed) == 2 else "unknown"
        if safety != "unsat":
            path.unlink()
        return safety == "unsat", {"initiation": "unsat", "consecution": "unsat", "safety": safety}

    def spacer_answer(*args: Any, **kwargs: Any) -> ChcResult:
        if spacer == "true":
            return ChcResult("unsat", lambda s: z3.BoolVal(True), 0.0, (0,))
        return ChcResult("unknown", None, 0.0, (0,))

    monkeypatch.setattr(certificate, "confirm", answers)
    monkeypatch.setattr(prover, "reachable_violation", spacer_answer)
    name, texts, pid = SPACER
    verdict = prove_cell(_model(name, texts), "cell", pid, TIMEOUT_MS, tmp_path / "a.smt2")
    assert confirmed == [prover.INDUCTION_FIRST_MS, TIMEOUT_MS]
    if second == "unsat":
        assert (verdict.status, verdict.method) == (PROVED, "induction")
        assert (tmp_path / "a.smt2").exists()
        return
    assert verdict.status == UNKNOWN and not (tmp_path / "a.smt2").exists()
    if spacer == "true":
        assert "Spacer (seed 0): the invariant is true" in verdict.detail
        assert "'safety': 'unknown'" in verdict.detail


def test_a_failed_induction_is_not_rechecked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Induction's certificate fails (a state violates the property) and Spacer is undecided:
    the certificate is not re-checked again, and the shallow search decides."""
    confirmed: list[int] = []

    def failed(path: Path, timeout_ms: int, rlimit: int | None) -> tuple[bool, dict[str, str]]:
        confirmed.append(timeout_ms)
        path.unlink()
        return False, {"initiation": "unsat", "consecution": "unsat", "safety": "sat"}

    def gave_up(*args: Any, **kwargs: Any) -> ChcResult:
        return ChcResult("unknown", None, 0.0, (0,))

    monkeypatch.setattr(certificate, "confirm", failed)
    monkeypatch.setattr(prover, "reachable_violation", gave_up)
    livelock = _model(*LIVELOCK)
    verdict = prove_cell(livelock, "cell", "P1", TIMEOUT_MS, tmp_path / "a.smt2")
    assert (verdict.status, verdict.method) == (VIOLATED, "bmc")
    assert confirmed == [prover.INDUCTION_FIRST_MS]


class _Scripted:
    """A stand-in solver that gives the next scripted answer."""

    def __init__(self, answers: list[str], log: list[tuple[str, int, int]], kind: str, seed: int):
        self.answers, self.log, self.kind, self.seed = answers, log, kind, seed

    def set(self, name: str, value: int) -> None:
        if name == "timeout":
            self.log.append((self.kind, self.seed, value))

    def add(self, formula: Any) -> None:
        pass

    def check(self) -> str:
        return self.answers.pop(0)

    def model(self) -> str:
        return f"model of {self.kind} seed {self.seed}"


@pytest.mark.parametrize("answers", [["unknown", "unknown", "sat"], ["unknown"] * 4])
def test_the_portfolio_tries_its_solvers_in_order_until_one_answers(
    monkeypatch: pytest.MonkeyPatch, answers: list[str]
) -> None:
    """The attempts run in order, each with its own timeout (the last with the time left); an
    attempt's unknown goes on to the next, the first sat or unsat is the answer, with the model
    of the solver that gave it; when every attempt is undecided the answer is unknown."""
    log: list[tuple[str, int, int]] = []
    script = list(answers)
    attempts = ((solving.PIPELINE, 0, 100), (solving.OLD_ARITH, 3, 200), (solving.DEFAULT, 5, 0))
    monkeypatch.setattr(
        solving, "_solver", lambda kind, seed, ctx: _Scripted(script, log, kind, seed)
    )
    answer, model = solving.solve_formula(z3.BoolVal(True), 10_000, attempts)
    assert [entry[:2] for entry in log] == [(kind, seed) for kind, seed, _ in attempts]
    assert [entry[2] for entry in log[:2]] == [100, 200] and 9_000 < log[2][2] <= 10_000
    if answers[2] == "sat":
        assert (answer, model) == ("sat", f"model of {solving.DEFAULT} seed 5")
    else:
        assert (answer, model) == ("unknown", None)


def test_every_solver_of_the_portfolio_decides() -> None:
    """Each solver kind answers a small query both ways (sat, unsat)."""
    x = z3.Int("x")
    for kind in (solving.PIPELINE, solving.OLD_ARITH, solving.DEFAULT):
        only = ((kind, 0, 0),)
        assert solving.solve_formula(z3.And(x > 3, x % 5 == 1), 10_000, only)[0] == "sat"
        assert solving.solve_formula(z3.And(x > 3, x < 4), 10_000, only)[0] == "unsat"


def test_tiny_timeout_is_unknown_not_violated(tmp_path: Path) -> None:
    """A 1 ms budget cannot prove the Spacer cell; it must say UNKNOWN, not guess."""
    name, texts, pid = SPACER
    model = _model(name, texts)
    verdict = prove_cell(model, "cell", pid, 1, tmp_path / "c.smt2")
    assert verdict.status in (PROVED, UNKNOWN)
    if verdict.status == PROVED:  # only with a certificate that re-checks
        assert verdict.certificate is not None
        assert certificate.holds(certificate.recheck(Path(verdict.certificate), TIMEOUT_MS))


TINY_RLIMIT = 1
"""Z3 resource units no query of the prover decides within."""


@pytest.mark.parametrize(
    ("name", "texts", "pid"),
    [(*INDUCTION,), (*SPACER,), (*LIVELOCK, "P1")],
    ids=["induction", "spacer", "violated"],
)
def test_a_tiny_rlimit_is_unknown_never_proved(
    cli: Cli, tmp_path: Path, name: str, texts: dict[str, str], pid: str
) -> None:
    """``--rlimit`` bounds every query of the prover by Z3's resource count, whatever the
    clock (the timeout here is ten minutes): with a tiny one the cell PROVED by induction, the
    one Spacer proves and the violated one are UNKNOWN, exit 3, with no certificate left; with
    the tests' limit the same runs decide."""
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in texts.items()]
    argv = ["prove", name, *flags, "--property", pid, "--json", "--jobs", "1"]
    guard = ["--timeout", str(GUARD_MS // 1000)]
    tiny = cli(*argv, "--rlimit", str(TINY_RLIMIT), *guard, "--out", str(tmp_path / "tiny"))
    assert tiny.code == EXIT_UNKNOWN, tiny.err
    (verdict,) = tiny.json()["verdicts"]
    assert verdict["status"] == UNKNOWN
    assert not list((tmp_path / "tiny").rglob("*.smt2"))
    enough = cli(*argv, *SOLVER_ARGS, "--out", str(tmp_path / "enough"))
    (verdict,) = enough.json()["verdicts"]
    assert verdict["status"] == (VIOLATED if name == LIVELOCK[0] else PROVED), enough.err


def test_a_tiny_rlimit_leaves_conform_unknown(cli: Cli) -> None:
    """conform's queries under a tiny ``--rlimit``: UNKNOWN (exit 3), never EQUAL; the same
    run with the tests' limit is EQUAL."""
    argv = ["conform", "vllm-0.33", "--against", "vllm-0.33", "--block", "4", "--prompt", "1-9"]
    argv += ["--max-sched", "1-4", "--json"]
    guard = ["--timeout", str(GUARD_MS // 1000)]
    tiny = cli(*argv, "--rlimit", str(TINY_RLIMIT), *guard)
    assert (tiny.code, tiny.json()["status"]) == (EXIT_UNKNOWN, "UNKNOWN"), tiny.err
    enough = cli(*argv, *SOLVER_ARGS)
    assert (enough.code, enough.json()["status"]) == (EXIT_OK, "EQUAL"), enough.err


def test_the_rlimit_bounds_every_spacer_try_and_the_last_gets_all_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under ``rlimit`` each seed's units are at most it, and the seed SEEDS leaves unlimited
    gets the whole of it: a tiny limit leaves Spacer undecided at once however long the
    timeout, and a sufficient one decides."""
    name, texts, pid = SPACER
    model = _model(name, texts)
    units: list[int] = []
    real = chc._attempt

    def recorded(*args: Any) -> Any:
        units.append(args[4])
        return real(*args)

    monkeypatch.setattr(chc, "_attempt", recorded)
    monkeypatch.setattr(chc, "SEEDS", ((5, 1_000), (6, 0)))
    result = chc.reachable_violation(model, pid, True, GUARD_MS, TINY_RLIMIT)
    assert (result.status, result.seeds, units) == ("unknown", (5, 6), [1, 1])
    units.clear()
    result = chc.reachable_violation(model, pid, True, GUARD_MS, RLIMIT)
    assert (result.status, units) == ("unsat", [1_000, RLIMIT])


def test_a_portfolio_try_is_cut_by_units_under_an_rlimit() -> None:
    """Without ``rlimit`` a try's milliseconds cut it (at most the timeout); with one, its
    share of units does (at most the rlimit) and the timeout is the guard; a query no try
    decides within a tiny limit is unknown, whatever the timeout."""
    assert solving.try_limits(10_000, None, 500) == (500, None)
    assert solving.try_limits(300, None, 500) == (300, None)
    assert solving.try_limits(10_000, 10**9, 500) == (10_000, 500 * solving.UNITS_PER_MS)
    assert solving.try_limits(10_000, 7, 500) == (10_000, 7)
    x, y = z3.Ints("x y")
    hard = z3.And(x * x * x + y * y * y == 1_729_007, x > 0, y > 0)
    assert solving.check_formula(hard, GUARD_MS, TINY_RLIMIT) == "unknown"
    assert solving.check_formula(z3.And(x > 3, x < 5), GUARD_MS, RLIMIT) == "sat"


def _verdict(status: str) -> Verdict:
    return Verdict("P1", status, {}, None, "", "z3", 1, int(status == VIOLATED))


@pytest.mark.parametrize(
    ("statuses", "code"),
    [
        ((PROVED,), EXIT_OK),
        ((PROVED, EMPTY), EXIT_OK),
        ((EMPTY,), EXIT_BAD_INPUT),
        ((EMPTY, EMPTY), EXIT_BAD_INPUT),
        ((UNKNOWN,), EXIT_UNKNOWN),
        ((PROVED, UNKNOWN), EXIT_UNKNOWN),
        ((EMPTY, UNKNOWN), EXIT_UNKNOWN),
        ((VIOLATED,), EXIT_VIOLATED),
        ((UNKNOWN, VIOLATED), EXIT_VIOLATED),
        ((PROVED, UNKNOWN, VIOLATED), EXIT_VIOLATED),
    ],
)
def test_exit_status(statuses: tuple[str, ...], code: int) -> None:
    """SPEC CLI: 1 if a property is violated, else 3 if one is unknown, else 2 if no verdict
    covers a configuration, else 0."""
    assert exit_status([_verdict(s) for s in statuses]) == code


def test_conform_spreads_its_cells_and_keeps_their_order(cli: Cli, tmp_path: Path) -> None:
    """conform's Z3 cells on two workers: the same verdict as on one, and a difference only
    the production range holds (T = 4097, past the grid) is found in either case."""
    module = tmp_path / "splits.py"
    module.write_text(
        "def whole(cfg, c, n):\n    return n\n\n\n"
        "def odd(cfg, c, n):\n    if cfg.tokens == 4097 and n > 1:\n        return n - 1\n"
        "    return n\n"
    )
    argv = ["conform", f"{module}:whole", "--against", f"{module}:odd"]
    argv += ["--block", "16,64", "--lookahead", "0-1", "--json", *SOLVER_ARGS]
    found = [cli(*argv, "--jobs", jobs) for jobs in ("1", "2")]
    for run in found:
        document = run.json()
        assert (run.code, document["status"]) == (1, "DIFFERENT"), run.err
        assert document["difference"]["config"]["tokens"] == 4097
    assert found[0].json()["range"] == found[1].json()["range"]
