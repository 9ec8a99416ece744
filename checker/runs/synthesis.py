"""``chunkproof synthesize``: counterexample-guided synthesis of a split and reservation in the
template's space (SPEC Y).

Each round Z3 picks, among the candidates not yet tried that refute every counterexample met so
far, the one that changes the base least (:class:`~chunkproof.proofs.refutation.HoleSolver`),
and the grid checks it like any policy; a check that fails adds its counterexample:

1. the explorer on the grid, for every property the search keeps;
2. where the base itself breaks a property on the grid (the property is *guarded*), the
   candidate may not break it on a configuration where the base keeps it
   (:func:`~chunkproof.checker.engines.compare.compare_behaviour`'s "only B" group, with its
   native witness); the same comparison gives how the candidate stands against the base.

When no untried candidate is left (or the rounds run out), the passing candidate of least cost
(:func:`cost`, SPEC Y4) goes to step 3, the prover on the production range for the kept
properties; a counterexample it finds rules out every passing candidate that exhibits it, and
the search goes on. The candidate the prover passes is the result: the least-cost one of the
space when every consistent candidate was checked, else the best found.

When no candidate refutes the counterexamples of one property, every candidate breaks it (the
base included): the search guards it instead of keeping it. When no candidate refutes those of
several together, they conflict (SPEC Y3): strict P5 takes its relaxed form, then the property
first in :data:`GIVING_WAY` is no longer asked (its failures become a cost); a conflict of P0
and P1 alone ends the search UNSAT with its minimal set of witnesses.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from chunkproof.checker.engines.compare import Behaviour, BehaviourTally, compare_behaviour
from chunkproof.checker.engines.executor import Executor
from chunkproof.checker.engines.traces import build_counterexample
from chunkproof.checker.engines.verdicts import UNKNOWN, VIOLATED, Verdict
from chunkproof.checker.reports.report import combine
from chunkproof.checker.runs.requests import ProofRun, explore_space, prove_space
from chunkproof.model.counterexample import Counterexample
from chunkproof.model.holes import candidate_policy, describe
from chunkproof.model.policy import Policy
from chunkproof.proofs.refutation import HoleSolver, Witness
from chunkproof.spec.space import Space

FOUND, UNSAT, UNDECIDED, OUT_OF_ROUNDS = "FOUND", "UNSAT", "UNKNOWN", "OUT OF ROUNDS OR TIME"
"""How a search ends: a candidate passed every check; no candidate can (a conflict of P0 and
P1); the prover left the best candidate undecided (or found a violation without a
counterexample); the round or time limit came before any candidate passed."""

SYNTHESIS_PROPERTIES = ("P0", "P1", "P3", "P4", "P5", "P6")
"""The properties a synthesised policy is asked to keep by default (SPEC Y)."""

GIVING_WAY = ("P5", "P6", "P4", "P3", "P1", "P0")
"""The order in which properties give way on a conflict (SPEC Y3): draft quality first (strict
P5 takes its relaxed form, then is no longer asked), then cache coverage, alignment and slot
soundness; P1 and P0 never give way (a conflict they are in ends the search)."""


@dataclass(frozen=True)
class Met:
    """A counterexample a round met, and which check found it."""

    source: str
    witness: Witness


@dataclass(frozen=True)
class Conflict:
    """Counterexamples no candidate refutes together (SPEC Y3), and what gave way on them."""

    outcome: str
    witnesses: list[Witness]

    @property
    def properties(self) -> list[str]:
        return sorted({w.cx.property for w in self.witnesses})


@dataclass
class Round:
    """One candidate and the counterexamples its checks met (none: it passed)."""

    number: int
    candidate: dict[str, int]
    met: list[Met] = field(default_factory=list)
    seconds: float = 0.0
    standing: Standing | None = None
    proof: bool = False
    """The round that proves the best candidate (step 3), not one that checks a new one."""
    window: str = "strict"
    """The form of P5 the round judged."""


@dataclass
class Synthesis:
    """The search's outcome (module docstring): the status, the candidate (None when UNSAT),
    the properties kept and guarded, the P5 form, every round, the witness that made each
    guarded property guarded, the properties no longer asked and the conflicts that released
    them, and the verdicts of the last candidate's checks."""

    base: Policy
    status: str
    candidate: dict[str, int] | None
    kept: list[str]
    guarded: list[str]
    window: str
    rounds: list[Round]
    broken_by_all: dict[str, Witness] = field(default_factory=dict)
    released: list[str] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)
    """Every conflict met, in order; an UNSAT search ends with the one nothing gave way on."""
    verdicts: list[Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    optimal: bool = False
    """Whether every candidate consistent with the witnesses was checked, so the candidate is
    the least-cost one of the space on the grid (SPEC Y4), rather than the best found."""
    tried: int = 0
    """How many candidates the grid checked."""

    wanted: tuple[str, ...] = ()
    """The properties asked for."""

    @property
    def policy(self) -> Policy | None:
        return None if self.candidate is None else candidate_policy(self.base, self.candidate)

    @property
    def keeps_all(self) -> bool:
        """Whether the candidate keeps every property asked (none guarded or given up)."""
        return self.status == FOUND and set(self.kept) == set(self.wanted)


@dataclass(frozen=True)
class Checks:
    """Where candidates are checked: the explorer's grid, the prover's production range
    (None: not proved), how the prover runs, and the executor of both."""

    grid: Space
    production: Space | None
    run: ProofRun
    jobs: int | Executor


Tick = Callable[[Round], None]


class _Search:
    """One search's state (module docstring)."""

    def __init__(self, base: Policy, wanted: tuple[str, ...], window: str, checks: Checks) -> None:
        self.base, self.checks = base, checks
        self.solver = HoleSolver(base, window)
        self.kept = [pid for pid in SYNTHESIS_PROPERTIES if pid in wanted]
        self.guarded: list[str] = []
        self.broken_by_all: dict[str, Witness] = {}
        self.released: list[str] = []
        self.conflicts: list[Conflict] = []
        self.notes: list[str] = []
        self.optimal = False

    @property
    def window(self) -> str:
        return self.solver.window

    def resolve_conflict(self) -> str | None:
        """After a failed pick: guard every kept property no candidate keeps alone; else give
        way on the conflict (:data:`GIVING_WAY`). None when the search goes on, else how it
        ends: UNSAT (a conflict of P0 and P1 alone, the last of :attr:`conflicts`), or
        UNDECIDED (the solver found no candidate and no conflict: it gave up)."""
        alone = {pid: self.solver.conflict([pid], []) for pid in self.kept}
        unkeepable = [pid for pid, core in alone.items() if core]
        for pid in unkeepable:
            self.kept.remove(pid)
            self.guarded.append(pid)
            self.broken_by_all[pid] = alone[pid][0]
        if unkeepable:
            return None
        core = self.solver.conflict(self.kept, self.guarded)
        if not core:
            self.notes.append("the solver found neither a candidate nor a conflict")
            return UNDECIDED
        pids = sorted({w.cx.property for w in core}, key=GIVING_WAY.index)
        if "P5" in pids and self.window == "strict":
            self.solver.rewindow("relaxed")
            self.conflicts.append(Conflict("the search keeps P5's relaxed form", core))
            return None
        released = pids[0]
        if released in ("P0", "P1"):
            self.conflicts.append(Conflict("nothing gives way: the search ends", core))
            return UNSAT
        for group in (self.kept, self.guarded):
            if released in group:
                group.remove(released)
        self.released.append(released)
        self.conflicts.append(Conflict(f"the search no longer asks {released}", core))
        return None

    def grid_check(
        self, candidate: dict[str, int]
    ) -> tuple[list[Met], Standing | None, list[Verdict]]:
        """Steps 1 and 2 of the module docstring, up to the first that meets a
        counterexample; how the candidate stands against the base once the explorer passes
        it, and the explorer's verdicts."""
        policy = candidate_policy(self.base, candidate)
        checks = self.checks
        verdicts, _ = explore_space(
            policy, checks.grid, tuple(self.kept), self.window, checks.jobs, None
        )
        met = [self._met("explorer", v.witness) for v in verdicts if v.witness is not None]
        if met:
            return met, None, verdicts
        behaviour = compare_behaviour(
            self.base, policy, checks.grid, checks.jobs, window=self.window
        )
        return self._regressions(policy, behaviour), Standing.of(behaviour.tally), verdicts

    def prove(self, passed: Passed) -> tuple[list[Met], list[Verdict]]:
        """Step 3 of the module docstring: the prover's verdicts of the kept properties beside
        the explorer's from the grid check, and the prover's counterexamples."""
        policy = candidate_policy(self.base, passed.candidate)
        checks = self.checks
        explored = [v for v in passed.explored if v.property in self.kept]
        if checks.production is None:
            return [], explored
        run = ProofRun(self.window, checks.run.timeout_ms, checks.jobs, True, checks.run.rlimit)
        proved, _ = prove_space(policy, checks.production, tuple(self.kept), run, None)
        met = [self._met("prover", v.witness) for v in proved if v.witness is not None]
        return met, combine(explored, proved)

    def _met(self, source: str, cx: Counterexample, regression: bool = False) -> Met:
        return Met(source, self.solver.add(cx, regression))

    def _regressions(self, policy: Policy, behaviour: Behaviour) -> list[Met]:
        """Step 2 of the module docstring: the smallest configuration of each guarded property
        where the candidate fails it and the base keeps it, with the candidate's witness."""
        met = []
        for pid in self.guarded:
            example = behaviour.where.get(pid, {}).get("only_b")
            if example is None:
                continue
            grid = self.checks.grid
            steps = list(example.b.witness[pid])
            cx = build_counterexample(
                policy, example.cfg, pid, steps, self.window, grid.budget, grid.describe()
            )
            met.append(self._met("behaviour", cx, regression=True))
        return met


@dataclass(frozen=True)
class Standing:
    """A candidate against the base on the grid (SPEC Y4): per property the configurations
    where the base fails, where the candidate fails and where only the candidate does; and
    SPEC P7 over the const(b) runs both finish (steps of each, the ideal), with the runs each
    leaves unfinished."""

    failing: dict[str, tuple[int, int, int]]
    steps: tuple[int, int]
    ideal: int
    unfinished: tuple[int, int]

    @classmethod
    def of(cls, tally: BehaviourTally) -> Standing:
        failing = {}
        for pid, where in tally.where.items():
            c = where.counts
            base = c["only_a"] + c["both"] + c["a_where_b_crashes"]
            candidate = c["only_b"] + c["both"] + c["b_where_a_crashes"]
            failing[pid] = (base, candidate, c["only_b"])
        a, b = tally.both_finished
        return cls(failing, (a.steps, b.steps), a.ideal, (tally.cost[0].stuck, tally.cost[1].stuck))


@dataclass
class Passed:
    """A candidate that passed the grid's checks, and how it stands against the base."""

    candidate: dict[str, int]
    standing: Standing
    explored: list[Verdict] = field(default_factory=list)
    """The explorer's verdicts of the properties kept when it passed (still those kept, or
    more: the search only gives properties up while no candidate has passed)."""


def cost(passed: Passed, released: list[str]) -> tuple[int, ...]:
    """SPEC Y4's objective, least first: the configurations of the grid failing each property
    no longer asked (in :data:`GIVING_WAY` order), the const(b) runs left unfinished, the
    steps of the runs both the base and the candidate finish, then the change from the base
    (holes away from 0, their sum)."""
    standing, values = passed.standing, list(passed.candidate.values())
    order = sorted(released, key=GIVING_WAY.index)
    return (
        *[standing.failing[pid][1] for pid in order],
        standing.unfinished[1],
        standing.steps[1],
        sum(1 for v in values if v),
        sum(values),
    )


def synthesize(
    base: Policy,
    wanted: tuple[str, ...],
    window: str,
    checks: Checks,
    max_rounds: int,
    tick: Tick | None = None,
    seconds: float | None = None,
) -> Synthesis:
    """Search the template's space of ``base`` for the least-cost policy keeping ``wanted``
    (module docstring): at most ``max_rounds`` rounds check a new candidate, and none starts
    after ``seconds`` (then the best candidate so far goes to the prover, and the result says
    it is the best found)."""
    started = time.monotonic()
    deadline = None if seconds is None else started + seconds

    def in_time() -> bool:
        return deadline is None or time.monotonic() < deadline

    search = _Search(base, wanted, window, checks)
    rounds: list[Round] = []
    passed: list[Passed] = []
    tried = 0
    status, best = OUT_OF_ROUNDS, None
    verdicts: list[Verdict] = []

    def record(current: Round) -> None:
        rounds.append(current)
        if tick is not None:
            tick(current)

    while True:
        measured = [p.candidate for p in passed]
        picked = search.solver.pick(search.kept, search.guarded, measured)
        if picked is not None and len(rounds) < max_rounds and in_time():
            began = time.monotonic()
            tried += 1
            met, standing, explored = search.grid_check(picked)
            seconds = time.monotonic() - began
            record(Round(len(rounds) + 1, picked, met, seconds, standing, window=search.window))
            if not met and standing is not None:
                passed.append(Passed(picked, standing, explored))
            continue
        if picked is None and not passed:
            ended = search.resolve_conflict()
            if ended is not None:
                status = ended
                break
            continue
        if not passed:  # the rounds or the time ran out before a candidate passed
            break
        best = min(passed, key=lambda p: cost(p, search.released))
        began = time.monotonic()
        met, verdicts = search.prove(best)
        seconds = time.monotonic() - began
        number = len(rounds) + 1
        record(Round(number, best.candidate, met, seconds, best.standing, True, search.window))
        if met:
            consistent = search.solver.consistent
            passed = [p for p in passed if consistent(p.candidate, search.kept, search.guarded)]
            best = None
            continue
        undecided = [v for v in verdicts if v.status in (UNKNOWN, VIOLATED)]
        status = UNDECIDED if undecided else FOUND
        search.optimal = picked is None
        break
    return Synthesis(
        base=base,
        status=status,
        candidate=None if best is None else best.candidate,
        kept=search.kept,
        guarded=search.guarded,
        window=search.window,
        rounds=rounds,
        broken_by_all=search.broken_by_all,
        released=search.released,
        conflicts=search.conflicts,
        verdicts=verdicts,
        notes=search.notes,
        seconds=time.monotonic() - started,
        optimal=search.optimal,
        tried=tried,
        wanted=tuple(pid for pid in SYNTHESIS_PROPERTIES if pid in wanted),
    )


def round_line(r: Round) -> str:
    """One round in words, for progress and the report."""
    what = "the best so far, proved" if r.proof else "checked"
    form = ", P5 relaxed" if r.window == "relaxed" else ""
    head = f"round {r.number}: {describe(r.candidate)} {what} ({r.seconds:.1f} s{form})"
    if not r.met:
        return f"{head}: {'holds' if r.proof else 'passes the grid'}"
    found = "; ".join(
        f"{m.source}: {m.witness.cx.property}"
        + (" where the base keeps it" if m.witness.regression else "")
        + f" at {m.witness.cx.config.describe()}"
        for m in r.met
    )
    return f"{head}: {found}"
