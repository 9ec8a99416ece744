"""The least counterexample over the violated cells of every property at once (SPEC C: T, then
B, L, M, the trace), orchestrating :mod:`chunkproof.checker.engines.minimise` over the run's
executor.

For each property, the first cell in (B, L) order that can be minimised gives the first best;
every other violated cell is asked whether it has a violation whose (T, B, L, M) comes
before
the best's (:func:`~chunkproof.checker.engines.minimise.violation_ranked_below`), and only those
that
do (the contenders) are minimised, in cell order; each time one gives a new best, the contenders
left are asked again. So a cell is asked once per best, where a bisection on T asks every cell
at every bound. The claim says when a cell could not be asked (its answer undecided), or was
said to come before the best and its minimisation did not find it so: T is then minimal in its
own cell only.

``--timeout`` bounds the search: each cell's minimisation has :data:`~chunkproof.checker.
minimise.MINIMISING_TIMEOUTS` timeouts of its own (a counterexample it cut short says it is not
proved minimal), and the search across cells as many from its start (a :class:`~chunkproof.
checker.minimise.Deadline`): past them no round starts but each property's first and no
question is asked; a cell left unasked or unminimised counts as undecided.

Each property's sequence of questions is the same as if it were minimised alone; the properties
only share the executor's rounds: one round minimises one cell of every property that needs one,
and one round asks every (cell, property) question that is due, a cell's questions in one task
(its symbolic model built once for all of them). On ``lookahead-in-split``'s production range
(2 jobs, ``bench/prove.py`` (e)) the minimising took 54 s, where the properties minimised one
after the other (the first cell of each in the calling process) took 63.7 s in the same run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from chunkproof.checker.engines import minimise
from chunkproof.checker.engines.executor import Executor, as_executor
from chunkproof.model.config import Config
from chunkproof.model.counterexample import Counterexample
from chunkproof.spec.request_symbolic import Cell, SymbolicRequest

MakeModel = Callable[[Cell], SymbolicRequest]
Tick = Callable[[int, int], None]


@dataclass
class _Search:
    """One property's search: the cells not yet minimised or asked, the best so far, the
    cells said to come before it, and what the claim must say."""

    pid: str
    waiting: list[Cell]
    best: Counterexample | None = None
    how: str = ""
    contenders: list[Cell] = field(default_factory=list)
    asked: int = 0
    """Cells answered once the first best was found: those the claim covers."""
    undecided: int = 0
    engines: set[str] = field(default_factory=set)
    total: int = 0
    """Its violated cells."""

    def settled(self) -> int:
        """Cells minimised or answered, and not said to come before the best: none of them is
        searched again."""
        return self.total - len(self.waiting) - len(self.contenders)

    def claim(self) -> str:
        """The minimality claim across cells (module docstring)."""
        if self.undecided:
            return (
                f"{self.how}; T is minimal in its cell only: {self.undecided} other violated "
                "cell(s) could not be searched for a smaller one, or minimised, within the timeout"
            )
        if self.asked:
            by = " and ".join(sorted(self.engines))
            others = f"none of the {self.asked} other violated cells holds a smaller T"
            return f"{self.how}; {others} ({by})"
        return self.how


def least_counterexamples(
    violated: dict[str, list[Cell]],
    make: MakeModel,
    timeout_ms: int,
    jobs: int | Executor,
    tick: Tick | None = None,
) -> dict[str, tuple[Counterexample | None, str]]:
    """For every property of ``violated`` (its violated cells), its least counterexample over
    them and the claim (module docstring); None and why when no cell could be minimised.
    ``tick(settled, total)``, before the first round and after each: the (cell, property)
    pairs no longer searched, of all (not called when there are none)."""
    executor = as_executor(jobs)
    deadline = minimise.Deadline.after(timeout_ms).at
    searches = [
        _Search(pid, sorted(cells, key=lambda c: (c.values, c.speculative)), total=len(cells))
        for pid, cells in violated.items()
        if cells
    ]
    total = sum(s.total for s in searches)

    def progress() -> None:
        if tick is not None and total:
            tick(sum(s.settled() for s in searches), total)

    progress()
    starting = [s for s in searches if s.waiting]
    rounds = _Rounds(executor, make, timeout_ms, deadline)
    while starting:
        for search, (best, how) in rounds.minimise(starting, "waiting"):
            search.best, search.how = best, how
            search.undecided += best is None
        progress()
        starting = [s for s in searches if s.best is None and s.waiting and rounds.in_time()]
    found = [s for s in searches if s.best is not None]
    for search in found:
        search.asked = len(search.waiting)
    rounds.ask(found, "waiting")
    progress()
    racing = [s for s in found if s.contenders]
    while racing:
        improved = []
        for search, (cx, how) in rounds.minimise(racing, "contenders"):
            assert search.best is not None
            if cx is None or _rank(cx) >= _rank(search.best):
                search.undecided += 1  # it has a violation before the best, minimising missed it
            else:
                search.best, search.how = cx, how
                improved.append(search)
        progress()
        rounds.ask(improved, "contenders")
        progress()
        racing = [s for s in found if s.contenders]
    return {s.pid: (s.best, s.claim() if s.best is not None else s.how) for s in searches}


@dataclass(frozen=True)
class _Rounds:
    """The rounds of the executor, within the search's ``deadline`` (module docstring)."""

    executor: Executor
    make: MakeModel
    timeout_ms: int
    deadline: float

    def in_time(self) -> bool:
        return time.time() < self.deadline

    def minimise(
        self, searches: list[_Search], source: str
    ) -> list[tuple[_Search, tuple[Counterexample | None, str]]]:
        """The first cell of every search's list ``source`` ("waiting" or "contenders") taken
        off it and minimised, the searches' cells in one round of the executor. Past the
        deadline, a contender is not minimised: it and the contenders after it are undecided
        (a property's first minimisation always runs: it is what the verdict reports)."""
        if source == "contenders" and not self.in_time():
            for search in searches:
                search.undecided += len(search.contenders)
                search.contenders = []
            return []
        tasks = [(s.pid, getattr(s, source).pop(0)) for s in searches]
        results = self.executor.map(_minimal_for_cell, (self.make, self.timeout_ms), tasks)
        return list(zip(searches, results, strict=True))

    def ask(self, searches: list[_Search], source: str) -> None:
        """Every cell of every search's list ``source`` asked whether it has a violation before
        the search's best, in one round of the executor (a cell's questions in one task); each
        search's contenders become the cells that do, in order (emptying ``source``), and an
        undecided cell is counted (it leaves the contenders, so it is counted once). A question
        due past the deadline is not asked: its cell is undecided."""
        questions: dict[Cell, list[tuple[str, Config]]] = {}
        for search in searches:
            assert search.best is not None
            for cell in getattr(search, source):
                questions.setdefault(cell, []).append((search.pid, search.best.config))
        tasks = list(questions.items())
        answers: dict[tuple[Cell, str], minimise.Reached] = {}
        shared = (self.make, self.timeout_ms, self.deadline)
        if self.in_time():
            replies = self.executor.map(_violations_before, shared, tasks)
        else:
            replies = map(_unasked, tasks)
        for (cell, asked), told in zip(tasks, replies, strict=True):
            for (pid, _), reply in zip(asked, told, strict=True):
                answers[cell, pid] = reply
        for search in searches:
            said = [(cell, answers[cell, search.pid]) for cell in getattr(search, source)]
            setattr(search, source, [])
            search.contenders = [cell for cell, a in said if a.status == "sat"]
            search.undecided += sum(a.status == "unknown" for _, a in said)
            search.engines |= {a.by for _, a in said if a.status != "unknown"}


def _minimal_for_cell(
    make: MakeModel, timeout_ms: int, task: tuple[str, Cell]
) -> tuple[Counterexample | None, str]:
    """A task: the cell's minimal counterexample of the property
    (:func:`~chunkproof.checker.engines.minimise.minimal_for_cell`)."""
    pid, cell = task
    return minimise.minimal_for_cell(make(cell), pid, timeout_ms)


def _violations_before(
    make: MakeModel, timeout_ms: int, deadline: float, task: tuple[Cell, list[tuple[str, Config]]]
) -> list[minimise.Reached]:
    """A task: for each (property, best) asked of the cell, whether it has a violation of the
    property whose (T, B, L, M) comes before the best's
    (:func:`~chunkproof.checker.engines.minimise.violation_ranked_below`); unknown, unasked, for the
    questions due past ``deadline``."""
    cell, asked = task
    model = make(cell)
    until = minimise.Deadline(deadline)
    return [
        minimise.violation_ranked_below(model, pid, best, timeout_ms)
        if until.allows()
        else minimise.Reached("unknown", minimise.UNASKED)
        for pid, best in asked
    ]


def _unasked(task: tuple[Cell, list[tuple[str, Config]]]) -> list[minimise.Reached]:
    """The answers to a task's questions when none is asked (the deadline has passed)."""
    return [minimise.Reached("unknown", minimise.UNASKED) for _ in task[1]]


def _rank(cx: Counterexample) -> tuple[int, ...]:
    cfg = cx.config
    return (cfg.T, cfg.block, cfg.lookahead, cfg.max_sched, len(cx.steps))
