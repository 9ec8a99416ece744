"""The picture of a multi-request counterexample (SPEC N1): one lane per request,
steps left to right.

As in :mod:`chunkproof.checker.reports.request_picture`, :func:`system_marks` computes the
content (pure, tested) and :func:`render_system` draws it with the figure helpers of
:mod:`chunkproof.checker.reports.figure`. A cell of a lane shows what the step did to the
request: the chunk it got (a bar over its progress c/T, the new tokens darker), a red X where a
loop reached it and it got none, no new tokens where no loop reached it, "preempted" where the
KV block pool refused its chunk (it keeps its c, and the cell of a later admission names the
hit it resumed at, SPEC KV2 rule 5e); the step that breaks the property
is shaded red (for a run that goes on for ever, every step of its loop), and the verdict is the
title.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from chunkproof.checker.reports.figure import (
    ADMITTED,
    BAR,
    RED,
    new_figure,
    picture_style,
    save_figure,
)
from chunkproof.model.system_counterexample import SystemCounterexample
from chunkproof.spec.properties import PROPERTIES
from chunkproof.spec.system_properties import SYSTEM_PROPERTIES

if TYPE_CHECKING:
    from matplotlib.axes import Axes

DONE = "#a5b4fc"
"""The part of a request's prefill computed before the step."""

CHARACTERS_PER_INCH = 13
"""How many characters of the verdict fit in an inch of the figure's width."""

LANE_NAMES = 2.6
"""Inches the lane names take left of the steps (the verdict is wrapped to the rest)."""


@dataclass(frozen=True)
class Cell:
    """Request ``lane`` in step ``step``: its list, c before and after out of T (after a
    decoding request's decode advance too; before is the hit a resumed request was admitted
    at), whether a loop reached it (``offered`` tokens; 0: not reached), whether the step
    preempted it, the hit a waiting request at c > 0 resumed at in words (SPEC KV2 rules
    5e-5g) and whether its admission made the pool raise (rule 5g)."""

    lane: int
    step: int
    queue: str
    before: int
    after: int
    total: int
    offered: int
    preempted: bool = False
    hit: str | None = None
    raised: bool = False

    @property
    def zero(self) -> bool:
        """A loop reached the request and the step scheduled it nothing (a preempted one is
        marked so instead)."""
        return self.offered > 0 and self.after == self.before and not self.preempted

    @property
    def label(self) -> str:
        if self.queue == "decoding":
            return (
                f"decoding: +{self.after - self.before}"
                if self.after > self.before
                else "decoding: not reached"
            )
        if self.preempted:
            return f"{self.queue}: preempted"
        if self.raised:
            return f"{self.queue}: the pool raises"
        if self.zero:
            return f"{self.queue}: 0 of {self.offered}"
        if self.after > self.before:
            return f"{self.queue}: +{self.after - self.before} of {self.offered}"
        return self.queue if self.queue == "finished" else f"{self.queue}: not reached"

    @property
    def progress(self) -> str:
        resumes = f"{self.hit}, " if self.hit is not None else ""
        return f"{resumes}c {self.before}→{self.after} / T={self.total}"


@dataclass(frozen=True)
class SystemMarks:
    """Everything the picture shows: the title, the verdict, a name per lane, the budget per
    step (with the adaptive floor, the eligible count too), the cells, and the step that breaks
    the property (``failing``: the first and last, more than one for a loop)."""

    title: str
    verdict: str
    lanes: tuple[str, ...]
    budgets: tuple[str, ...]
    cells: tuple[Cell, ...]
    failing: tuple[int, int]


def system_marks(cx: SystemCounterexample) -> SystemMarks:
    """What the picture of ``cx`` shows (module docstring)."""
    named = SYSTEM_PROPERTIES.get(cx.property) or PROPERTIES[cx.property]
    cells = tuple(
        Cell(
            lane,
            index,
            part.queue,
            part.resumed if part.scheduled else part.c,
            (part.resumed + part.chunk if part.scheduled else part.c) + part.decoded,
            cx.requests[lane].T,
            0 if part.stages is None else part.stages.budget,
            part.preempted,
            None if part.hit is None else part.hit_words,
            part.pool_raised,
        )
        for index, s in enumerate(cx.steps)
        for lane, part in enumerate(s.requests)
    )
    return SystemMarks(
        title=f"{cx.policy}: {cx.property} {named.name} violated",
        verdict=cx.verdict,
        lanes=tuple(f"#{i}: {cfg.describe()}" for i, cfg in enumerate(cx.requests)),
        budgets=tuple(
            f"budget {s.budget}" + (f"\neligible {s.eligible}" if s.eligible is not None else "")
            for s in cx.steps
        ),
        cells=cells,
        failing=(len(cx.steps) - 1 if cx.loop is None else cx.loop, len(cx.steps) - 1),
    )


def render_system(marks: SystemMarks, path: Path) -> Path:
    """Draw ``marks``: lanes top to bottom, steps left to right."""
    steps, lanes = len(marks.budgets), len(marks.lanes)
    with picture_style():
        width = LANE_NAMES + 1 + 2.2 * steps
        fig = new_figure(width, 1.6 + 0.9 * lanes)
        ax = fig.add_subplot()
        ax.set_xlim(-0.5, steps - 0.5)
        ax.set_ylim(lanes - 0.5, -0.5)
        first, last = marks.failing
        ax.axvspan(first - 0.5, last + 0.5, color=RED, alpha=0.08, linewidth=0)
        for cell in marks.cells:
            _draw_cell(ax, cell)
        ax.set_xticks(range(steps), [f"step {i + 1}\n{b}" for i, b in enumerate(marks.budgets)])
        ax.set_yticks(range(lanes), marks.lanes)
        ax.tick_params(length=0)
        for side in ("top", "right", "left", "bottom"):
            ax.spines[side].set_visible(False)
        fig.suptitle(marks.title, fontsize=10, fontweight="bold")
        ax.set_title(
            "\n".join(
                textwrap.wrap(marks.verdict, int(CHARACTERS_PER_INCH * (width - LANE_NAMES)))
            ),
            fontsize=9,
            color=RED,
        )
        save_figure(fig, path)
    return path


def _draw_cell(ax: Axes, cell: Cell) -> None:
    """The request's progress bar in the step (c/T before, the chunk darker; a decoding
    request's bar runs to its c after the step, past T), its list and what it got above, c
    before and after below; a zero is a red X."""
    left, width, y = cell.step - 0.4, 0.8, cell.lane
    scale = max(cell.total, cell.after)
    ax.barh(y, width, left=left, height=0.22, color=ADMITTED, zorder=1)
    done = width * cell.before / scale
    ax.barh(y, done, left=left, height=0.22, color=DONE, zorder=2)
    grown = max(cell.after - cell.before, 0)
    ax.barh(y, width * grown / scale, left=left + done, height=0.22, color=BAR, zorder=3)
    colour = RED if cell.zero or cell.preempted else "black"
    ax.text(cell.step, y - 0.17, cell.label, ha="center", va="bottom", fontsize=8, color=colour)
    ax.text(cell.step, y + 0.17, cell.progress, ha="center", va="top", fontsize=7)
    if cell.zero:
        ax.plot(left + done, y, marker="X", markersize=9, color=RED, zorder=4)


def save_system_picture(cx: SystemCounterexample, path: Path) -> Path:
    """The picture of ``cx`` written to ``path`` (.svg or .png)."""
    return render_system(system_marks(cx), path)
