"""The picture of a counterexample (SPEC C): its trace on the token axis.

Two pieces. :func:`trace_marks` computes what the picture shows from a SPEC C counterexample
(a :class:`TraceMarks`: axis, block boundaries, lookahead window, cacheable positions, one bar
per step, the failure); it is pure, and it is what the tests check. :func:`render_trace` draws
those marks with matplotlib, imported only there (no display: a bare ``Figure`` renders
through Agg for PNG and through the SVG backend for SVG), so the CLI starts fast.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chunkproof.checker.reports.figure import (
    ADMITTED,
    BAR,
    HALO,
    POSITION,
    RED,
    WINDOW,
    new_figure,
    picture_style,
    save_figure,
)
from chunkproof.model.arith import fl
from chunkproof.model.budget import Const
from chunkproof.model.builtin import policy_for_release
from chunkproof.model.config import Config
from chunkproof.model.counterexample import Counterexample
from chunkproof.model.errors import ChunkproofError, PolicyError
from chunkproof.model.policy import Policy
from chunkproof.model.splits import CACHE_POSITIONS
from chunkproof.model.step import Step
from chunkproof.spec.properties import PROPERTIES, STUCK_PROPERTIES
from chunkproof.spec.slots import block_end, crosses, resend_position

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MAX_BOUNDARIES = 48
"""Above this many block boundaries on the axis, only those next to a marked point are drawn."""

MAX_ROWS = 24
"""A trace of more steps draws its first :data:`HEAD_ROWS`, a row saying how many steps are
left out, and its last ones, :data:`MAX_ROWS` rows in all."""

HEAD_ROWS = 6

MAX_TICKS = 24
"""Above this many boundaries and chunk ends, matplotlib picks the axis ticks."""

NOTE_WIDTH = 64
"""A failure's note is wrapped at this many characters (a raising line's path is long)."""


@dataclass(frozen=True)
class Position:
    """A cacheable position on the axis and the names it goes by (``lambda``, ``tau``, ``R*``)."""

    at: int
    names: tuple[str, ...]

    @property
    def label(self) -> str:
        return " = ".join((*self.names, str(self.at)))


@dataclass(frozen=True)
class Bar:
    """Step ``step`` of the trace: the chunk [start, end) offered ``budget``, drawn on row
    ``row``. A zero chunk, and a step that breaks SPEC P0 (``unsafe``: the code raised, or a
    stage left [0, its input], so ``end`` may even lie before ``start``), is a marker at
    ``start``."""

    row: int
    step: int
    start: int
    end: int
    budget: int
    unsafe: bool = False
    raised: bool = False

    @property
    def zero(self) -> bool:
        """Drawn as a marker, not a bar."""
        return self.end == self.start or self.unsafe

    @property
    def label(self) -> str:
        return f"b={self.budget}"

    @property
    def outcome(self) -> str:
        """What the marker of a step without a bar says: ``chunk 0``, or what broke P0."""
        if self.raised:
            return "raises"
        chunk = self.end - self.start
        return f"chunk {chunk} (unsafe)" if self.unsafe else f"chunk {chunk}"


def _bar(row: int, index: int, s: Step) -> Bar:
    return Bar(row, index, s.c, s.end, s.budget, s.unsafe is not None, s.crash is not None)


@dataclass(frozen=True)
class Elision:
    """The steps a long trace leaves out: ``count`` of them, from c=``start`` to c=``end``,
    summed up on row ``row``."""

    row: int
    count: int
    start: int
    end: int

    @property
    def label(self) -> str:
        return f"⋮  {self.count} more steps from c={self.start} to c={self.end}"


@dataclass(frozen=True)
class Failure:
    """Where the property fails: ``kind`` is stuck, crossing, spare (a spare speculative block
    keyed, 0.30-0.31), poisoned, off-grid, window-end, skipped or refused; ``row`` is the row
    of the step it happens on (a poisoned slot is drawn under it); ``origin`` is, for a
    poisoned slot, the state its block really holds."""

    kind: str
    at: int
    text: str
    row: int
    origin: int | None = None


@dataclass(frozen=True)
class Admission:
    """The admission start c0 > 0 and its external part x (SPEC S1): tokens [0, c0) come from
    prefix hits, ``external`` of them loaded by a KV connector."""

    start: int
    external: int

    @property
    def label(self) -> str:
        if self.external == self.start:
            return f"c0={self.start}: external hit (KV connector)"
        if self.external:
            return f"c0={self.start}: prefix hit, x={self.external} external"
        return f"c0={self.start}: prefix hit"


@dataclass(frozen=True)
class TraceMarks:
    """Everything the picture of a counterexample shows."""

    title: str
    verdict: str
    axis_ends: tuple[tuple[str, int], ...]
    """The right end of the axis: ``(("T", T),)`` when T = E, else ``(("E", E), ("T", T))``."""
    block: int
    boundaries: tuple[int, ...]
    window: tuple[int, int] | None
    positions: tuple[Position, ...]
    bars: tuple[Bar, ...]
    elided: Elision | None
    failures: tuple[Failure, ...]
    admission: Admission | None
    """Where the request was admitted, when c0 > 0 (its prefix hits)."""
    split_block: int
    """G, the split's grid (``cache_config.block_size``)."""
    split_grid: tuple[int, ...]
    """Where G differs from B: the multiples of G in [0, T] that are not block boundaries (none
    when there are too many to draw)."""

    @property
    def axis_end(self) -> int:
        return self.axis_ends[-1][1]

    @property
    def rows(self) -> int:
        """Rows of steps, the elision row included."""
        return self.bars[-1].row + 1


def split_variant(policy: Policy) -> str:
    """The released split variant (history note 3) whose lambda and tau ``policy`` stops at:
    its own (the fixes: the variant they build on), that of the release its source comes from,
    or the latest (V9) for a policy of neither kind (a user split, an unversioned checkout)."""
    own = policy.split_variant.split("+")[0]
    if own in CACHE_POSITIONS:
        return own
    if policy.releases:
        try:
            return policy_for_release(policy.releases[0]).split_variant
        except PolicyError:
            pass
    return "V9"


def cacheable_positions(cfg: Config, variant: str) -> tuple[Position, ...]:
    """lambda and tau of the split ``variant`` (:data:`~chunkproof.model.splits.CACHE_POSITIONS`;
    tau only with partial hits F) and R* (slot note 5), where they are > 0; coinciding ones
    share a mark."""
    last_cache, tail = CACHE_POSITIONS[variant]
    named = (
        ("λ", last_cache(cfg)),
        ("τ", tail(cfg) if tail is not None and cfg.partial_hits else None),
        ("R*", resend_position(cfg)),
    )
    by_position: dict[int, list[str]] = {}
    for name, at in named:
        if at is not None and at > 0:
            by_position.setdefault(at, []).append(name)
    return tuple(Position(at, tuple(names)) for at, names in sorted(by_position.items()))


def lookahead_window(cfg: Config) -> tuple[int, int] | None:
    """The window (T - L, T) the reservation keeps chunk ends out of (SPEC P5), when L >= 1."""
    if cfg.lookahead < 1:
        return None
    return (cfg.T - cfg.lookahead, cfg.T)


def block_boundaries(cfg: Config, points: tuple[int, ...]) -> tuple[int, ...]:
    """Every multiple of B in [0, T]; when there are more than :data:`MAX_BOUNDARIES`, only
    the ones at or next to ``points`` (chunk ends, positions, failures)."""
    block, end = cfg.block, cfg.T
    if end // block + 1 <= MAX_BOUNDARIES:
        return tuple(range(0, end + 1, block))
    near = {fl(p, block) for p in points} | {fl(p, block) + block for p in points}
    return tuple(sorted(b for b in near if 0 <= b <= end))


def split_grid(cfg: Config) -> tuple[int, ...]:
    """The multiples of the split's grid G in [0, T] that are not multiples of B, when G != B
    and there are at most :data:`MAX_BOUNDARIES` of them (else none: the picture would be a
    wash of lines)."""
    grid, end = cfg.split_block, cfg.T
    if grid == cfg.block or end // grid + 1 > MAX_BOUNDARIES:
        return ()
    return tuple(g for g in range(0, end + 1, grid) if g % cfg.block)


def admission(cfg: Config) -> Admission | None:
    """Where the request was admitted (SPEC S1 c0 and its external part x), when c0 > 0."""
    return Admission(cfg.start, cfg.external) if cfg.start > 0 else None


def step_bars(cx: Counterexample) -> tuple[tuple[Bar, ...], Elision | None]:
    """One bar per recorded step (SPEC C trace), in order; more than :data:`MAX_ROWS` steps
    keep the first :data:`HEAD_ROWS` and the last ones around one elision row."""
    steps = cx.steps
    if len(steps) <= MAX_ROWS:
        return tuple(_bar(i, i, s) for i, s in enumerate(steps)), None
    first_tail = len(steps) - (MAX_ROWS - HEAD_ROWS - 1)
    head = [_bar(i, i, s) for i, s in enumerate(steps[:HEAD_ROWS])]
    tail = [_bar(HEAD_ROWS + 1 + j, first_tail + j, s) for j, s in enumerate(steps[first_tail:])]
    hidden = steps[HEAD_ROWS:first_tail]
    return (*head, *tail), Elision(HEAD_ROWS, len(hidden), hidden[0].c, hidden[-1].end)


def failure_marks(cx: Counterexample, row: int) -> tuple[Failure, ...]:
    """The failure of the last step, according to the property (SPEC P).

    P0 (and a P7 run that ends in a P0 step): the step that raises or leaves [0, its input];
    P1/P2: the stuck point, where even the largest budget gives 0; P7: the stuck point of the
    ``const(b)`` run; P3: the block end the chunk runs past, and every poisoned slot the slot
    oracle found (``details["poisoned"]``); P4: the off-grid end; P5: the end inside the
    window; P6: the skipped resend position R*. ``row`` is the last step's row.
    """
    cfg, pid = cx.config, cx.property
    last = cx.steps[-1]
    c, e, b = last.c, last.end, last.budget
    if last.unsafe is not None:
        return (Failure("unsafe", c, f"P0 at c={c}, b={b}: {last.unsafe}", row),)
    if pid == "P0":
        raise ChunkproofError(f"the last step at c={c} breaks no stage range: not a P0 trace")
    if pid == "P7":
        text = f"const({b}) stuck at c={c}: b={b} gives 0 every step"
        return (Failure("stuck", c, text, row),)
    if pid in STUCK_PROPERTIES:
        return (Failure("stuck", c, f"stuck at c={c}: even b={b} gives 0", row),)
    if pid == "P3" and "spare_claim" in cx.details:  # 0.30-0.31: a spare speculative block
        claim = int(cx.details["spare_claim"])
        spare = Failure("spare", claim, f"[{c}, {e}) keys {claim} onto a spare block", row)
        others = (m for m in poisoned_slots(cx, row) if (m.kind, m.at) != ("spare", claim))
        return (spare, *others)
    if pid == "P3":
        if not crosses(cfg, c, e):  # the release's retention mask kept the claim (P3)
            raise ChunkproofError(f"the last chunk [{c}, {e}) crosses no block end: not a P3 trace")
        claim = block_end(cfg, c)
        crossing = Failure("crossing", claim, f"[{c}, {e}) runs past {claim} from mid-block", row)
        return (crossing, *poisoned_slots(cx, row))
    if pid == "P4":
        return (Failure("off-grid", e, f"ends at {e}, off the B={cfg.block} grid", row),)
    if pid == "P5":
        window = f"({cfg.T - cfg.lookahead}, {cfg.T})"
        return (Failure("window-end", e, f"ends at {e}, inside the window {window}", row),)
    if pid == "P6":
        r = cx.details.get("resend_position", resend_position(cfg))  # SPEC KV1: the release's
        name = "R*"
        if "junction_position" in cx.details:  # SPEC S-COVER: a sibling's landing
            r, name = cx.details["junction_position"], "R*_J"
        if e == r:
            return (Failure("skipped", r, f"[{c}, {e}) ends at {name}={r}: not retained", row),)
        return (Failure("skipped", r, f"[{c}, {e}) runs over {name}={r}: never cached", row),)
    if pid == "P8":
        asked, free = cx.details["asked"], cx.details["free"]
        return (Failure("refused", e, f"[{c}, {e}) asks {asked} blocks, {free} free", row),)
    raise ChunkproofError(f"no picture for property {pid!r}")


def poisoned_slots(cx: Counterexample, row: int) -> tuple[Failure, ...]:
    """The slot oracle's violations recorded with a P3 counterexample ("48 holds state@46":
    the cache key ``claim`` sits on a block that holds state@``held``, slot note 4.2; "8 holds
    no state": on a spare speculative block, 0.30-0.31)."""
    marks = []
    for entry in cx.details.get("poisoned", ()):
        claim, _, held = str(entry).partition(" holds state@")
        if claim.isdigit() and held.isdigit():
            text = f"poisoned slot: key {claim} holds state@{held}, not state@{claim}"
            marks.append(Failure("poisoned", int(claim), text, row, int(held)))
            continue
        claim, _, rest = str(entry).partition(" holds no state")
        if not (claim.isdigit() and rest == ""):
            raise ChunkproofError(f"malformed poisoned slot {entry!r} in the counterexample")
        text = f"poisoned slot: key {claim} is a spare speculative block, no state@{claim}"
        marks.append(Failure("spare", int(claim), text, row))
    return tuple(marks)


def trace_marks(cx: Counterexample, policy: Policy) -> TraceMarks:
    """What the picture of ``cx``, found on ``policy``, shows (SPEC C)."""
    cfg = cx.config
    (bars, elided), positions = step_bars(cx), cacheable_positions(cfg, split_variant(policy))
    failures, window = failure_marks(cx, bars[-1].row), lookahead_window(cfg)
    points = (
        *(b.start for b in bars),
        *(b.end for b in bars if not b.unsafe),
        *(p.at for p in positions),
        *(f.at for f in failures),
        *(window or ()),
        cfg.start,
    )
    ends = (("T", cfg.T),) if cfg.prefill_end == cfg.T else (("E", cfg.prefill_end), ("T", cfg.T))
    model = cx.budget_model
    under = f" under const({model.budget})" if isinstance(model, Const) else ""
    return TraceMarks(
        title=(
            f"{cx.policy}: {cx.property} {PROPERTIES[cx.property].name} violated{under}"
            f"   ({cfg.describe()})"
        ),
        verdict=cx.verdict,
        axis_ends=ends,
        block=cfg.block,
        boundaries=block_boundaries(cfg, points),
        window=window,
        positions=positions,
        bars=bars,
        elided=elided,
        failures=failures,
        admission=admission(cfg),
        split_block=cfg.split_block,
        split_grid=split_grid(cfg),
    )


# -- rendering ----------------------------------------------------------------------------------


def render_trace(marks: TraceMarks, path: Path) -> Path:
    """Draw ``marks``: steps top to bottom, the token axis left to right."""
    rows = marks.rows
    with picture_style():
        fig = new_figure(10, 2.6 + 0.55 * rows)
        ax = fig.add_subplot()
        _draw_axis(ax, marks)
        _draw_bars(ax, marks)
        _draw_failures(ax, marks)
        _draw_legend(fig, marks)
        fig.suptitle(marks.title, fontsize=10, fontweight="bold")
        ax.set_title("\n".join(textwrap.wrap(marks.verdict, 120)), fontsize=9, color=RED)
        save_figure(fig, path)
    return path


def _draw_axis(ax: Axes, marks: TraceMarks) -> None:
    """Boundaries, window, cacheable positions, the axis ends and the step rows."""
    end, rows = marks.axis_end, marks.rows
    pad = max(end * 0.02, 0.5)
    ax.set_xlim(-pad, end + pad)
    ax.set_ylim(rows + (0.5 if _has_poison(marks) else -0.2), -1.1)
    for b in marks.boundaries:
        ax.axvline(b, color="#adb5bd", linewidth=0.8, zorder=0)
    for g in marks.split_grid:
        ax.axvline(g, color="#adb5bd", linewidth=0.6, linestyle=":", zorder=0)
    if marks.admission is not None:
        ax.axvspan(0, marks.admission.start, color=ADMITTED, alpha=0.6, zorder=0, linewidth=0)
        _note(ax, 0, rows - 0.3, marks.admission.label, (2, 0), ha="left", va="bottom")
    if marks.window is not None:
        ax.axvspan(*marks.window, color=WINDOW, alpha=0.45, zorder=0, linewidth=0)
    for name, at in marks.axis_ends:
        ax.axvline(at, color="black", linewidth=1.2, zorder=1)
        _note(ax, at, -1.05, f"{name}={at}", (3, 0), ha="left", va="top")
    for position in marks.positions:
        ax.axvline(position.at, color=POSITION, linestyle="--", linewidth=1.1, zorder=1)
        _note(ax, position.at, -0.75, position.label, (-3, 0), ha="right", va="top", color=POSITION)
    ends = (b.end for b in marks.bars if not b.unsafe)
    starts = (marks.admission.start,) if marks.admission is not None else ()
    ticks = sorted({*marks.boundaries, *ends, *starts, *dict(marks.axis_ends).values()})
    if len(ticks) <= MAX_TICKS:
        ax.set_xticks(ticks, [str(t) for t in ticks])
    grid = f"; dotted: the split's grid, every G={marks.split_block}" if marks.split_grid else ""
    ax.set_xlabel(f"tokens (grey lines: block boundaries, every B={marks.block}{grid})")
    ax.set_yticks([bar.row for bar in marks.bars], [f"step {bar.step + 1}" for bar in marks.bars])
    if marks.elided is not None:
        ax.text(0, marks.elided.row, marks.elided.label, va="center", fontsize=8, color="#495057")
    ax.tick_params(axis="y", length=0)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)


def _note(
    ax: Axes, x: float, y: float, text: str, offset: tuple[float, float], **style: Any
) -> None:
    """``text`` at data point (x, y), shifted by ``offset`` points."""
    ax.annotate(text, (x, y), xytext=offset, textcoords="offset points", **{"fontsize": 8, **style})


def _draw_bars(ax: Axes, marks: TraceMarks) -> None:
    """A bar [c, c + chunk) per step, labelled with its budget; a zero chunk, or a step that
    breaks P0, is a marker."""
    for bar in marks.bars:
        if bar.zero:
            ax.plot(bar.start, bar.row, marker="X", markersize=10, color=RED, zorder=3)
            _note(
                ax,
                bar.start,
                bar.row,
                f"{bar.label}: {bar.outcome}",
                (-8, 6),
                ha="right",
                va="bottom",
                color=RED,
            )
            continue
        ax.barh(bar.row, bar.end - bar.start, left=bar.start, height=0.45, color=BAR, zorder=2)
        _note(
            ax, bar.end, bar.row - 0.25, f"{bar.label} → {bar.end}", (0, 2), ha="right", va="bottom"
        )


def _draw_failures(ax: Axes, marks: TraceMarks) -> None:
    """The failure in red: a marker on its step, and its text below the step's bar."""
    for failure in marks.failures:
        if failure.kind == "poisoned":
            _draw_poison(ax, failure)
            continue
        row = failure.row
        ax.plot(
            [failure.at, failure.at], [row - 0.4, row + 0.4], color=RED, linewidth=2.5, zorder=4
        )
        if failure.kind != "stuck":
            ax.plot(failure.at, row, marker="o", markersize=6, color=RED, zorder=5)
        left = failure.at > 0.55 * marks.axis_end
        _note(
            ax,
            failure.at,
            row + 0.25,
            textwrap.fill(failure.text, NOTE_WIDTH),
            (-6 if left else 6, 0),
            ha="right" if left else "left",
            va="top",
            color=RED,
            fontsize=9,
            fontweight="bold",
            bbox=HALO,
        )


def _draw_poison(ax: Axes, failure: Failure) -> None:
    """A poisoned slot, under its step: an arrow from the state its block holds to the key it
    was given."""
    assert failure.origin is not None
    y = failure.row + 1.05
    ax.annotate(
        "",
        xy=(failure.at, y),
        xytext=(failure.origin, y),
        arrowprops={"arrowstyle": "->", "color": RED, "linewidth": 1.5},
    )
    ax.plot(failure.at, y, marker="s", markersize=7, color=RED, zorder=5)
    left = failure.at > 0.55 * ax.get_xlim()[1]
    _note(
        ax,
        failure.at,
        y,
        textwrap.fill(failure.text, NOTE_WIDTH),
        (-8 if left else 8, -4),
        ha="right" if left else "left",
        va="top",
        color=RED,
        fontsize=9,
        bbox=HALO,
    )


def _draw_legend(fig: Figure, marks: TraceMarks) -> None:
    """Below the axis: what the window shading and the dashed lines are."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Artist] = [Patch(color=BAR, label="chunk [c, c + chunk), budget b")]
    if marks.admission is not None:
        handles.append(Patch(color=ADMITTED, alpha=0.6, label="admitted: prefix hits [0, c0)"))
    if marks.window is not None:
        low, high = marks.window
        handles.append(Patch(color=WINDOW, alpha=0.45, label=f"lookahead window ({low}, {high})"))
    if marks.positions:
        handles.append(
            Line2D([], [], color=POSITION, linestyle="--", label="cacheable positions (λ, τ, R*)")
        )
    fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False, fontsize=8)


def _has_poison(marks: TraceMarks) -> bool:
    return any(f.kind == "poisoned" for f in marks.failures)


def save_picture(cx: Counterexample, policy: Policy, path: Path) -> Path:
    """The picture of ``cx``, found on ``policy``, written to ``path`` (.svg or .png)."""
    return render_trace(trace_marks(cx, policy), path)
