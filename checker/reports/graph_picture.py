"""The picture of the explorer's state graph for a counterexample's configuration (SPEC C).

Nodes are the states c reachable from c0 under ``adversarial(1..M)`` (SPEC S4), edges the
transitions c -> c + chunk, labelled with the budgets that take them; each node is coloured by
the property a step from it breaks (SPEC P), and the counterexample's path is drawn bold. As in
:mod:`chunkproof.checker.reports.request_picture`, :func:`graph_marks` computes the content
(pure, tested) and :func:`render_graph` draws it, importing matplotlib only there.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import networkx as nx

from chunkproof.checker.engines.explorer import Explored, explore_batch
from chunkproof.checker.reports.figure import new_figure, picture_style, save_figure
from chunkproof.model.config import Config
from chunkproof.model.counterexample import Counterexample
from chunkproof.model.errors import ChunkproofError
from chunkproof.model.policy import Policy
from chunkproof.spec.properties import DEFAULT_WINDOW, PROPERTIES
from chunkproof.spec.request import RequestModel, budget_bounds, make_batch
from chunkproof.spec.space import Ints, Space

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MAX_GRAPH_STATES = 200
"""``--graph`` draws state graphs of at most this many states (small configurations only)."""

MAX_GRAPH_CELLS = 4_000_000
"""... and evaluates at most this many (state, budget) cells to find them."""

STEP_PROPERTIES = ("P3", "P4", "P5", "P6", "P8")
"""Properties of one step (c, b): a transition breaks them with some of its budgets."""

GRAPH_PROPERTIES = ("P0", "P1", *STEP_PROPERTIES, "P7")
"""The properties a node can be coloured by, in order of precedence."""

AS_DRAWN = {"P2": "P1"}
"""P2 fails exactly where P1 does (a state the largest budget cannot move), so its
counterexamples draw as P1."""

COLOURS = {
    "P0": "#f06595",
    "P1": "#e03131",
    "P3": "#9c36b5",
    "P4": "#f08c00",
    "P5": "#fcc419",
    "P6": "#1c7ed6",
    "P7": "#ffa8a8",
    "P8": "#0ca678",
    "ok": "#b2f2bb",
    "finished": "#dee2e6",
}

LEGEND = {
    "P0": "P0 the code raises (or a stage leaves [0, its input])",
    "P1": "P1 stuck: b=M gives 0",
    "P3": "P3 a chunk crosses a block end",
    "P4": "P4 a chunk ends off the grid",
    "P5": "P5 a chunk ends in the window",
    "P6": "P6 a chunk skips R*",
    "P7": "P7 a const(b) run stops here",
    "P8": "P8 the pool refuses a chunk's blocks",
    "ok": "no property broken",
    "finished": "prefill finished (c >= E)",
}


@dataclass(frozen=True)
class GraphNode:
    """A reachable state c: the properties a step from it breaks, whether it is past E, the
    budgets that leave it where it is (chunk 0), whether the counterexample visits it, the
    budgets whose step breaks P0 there, and (for a P7 counterexample) the budgets b whose
    ``const(b)`` run from c0 stops there for good."""

    c: int
    broken: tuple[str, ...]
    finished: bool
    stays: str
    on_path: bool
    raises: str
    const_stops: str

    def colour_key(self, prefer: str) -> str:
        """The legend entry the node is drawn in: ``prefer`` (the counterexample's property)
        if it breaks it, else the first property it breaks, else ok or finished."""
        if self.finished:
            return "finished"
        if prefer in self.broken:
            return prefer
        return self.broken[0] if self.broken else "ok"


@dataclass(frozen=True)
class GraphEdge:
    """A transition c -> c + chunk (chunk > 0; a step that breaks P0 leads nowhere), the budgets
    that take it, what it breaks."""

    source: int
    target: int
    budgets: str
    broken: tuple[str, ...]
    on_path: bool


@dataclass(frozen=True)
class GraphMarks:
    """Everything the state-graph picture shows."""

    title: str
    property: str
    nodes: tuple[GraphNode, ...]
    edges: tuple[GraphEdge, ...]
    last_step: tuple[int, int]
    """The counterexample's violating step (c, c + chunk); (c, c) when it breaks P0."""


def graph_window(cx: Counterexample) -> str:
    """The form of P5 the graph colours by: the one a P5 counterexample was checked under, else
    the one recorded, else the default (strict)."""
    if cx.property == "P5":
        return cx.window()
    return str(cx.details.get("window", DEFAULT_WINDOW))


def explored_graph(policy: Policy, cx: Counterexample) -> Explored:
    """The explorer's exhaustive run of ``cx``'s configuration under its offered budgets; a
    configuration too large to draw is a one-line error."""
    cfg = cx.config
    low, high = budget_bounds(cfg, None)
    cells = (cfg.prefill_end - cfg.start) * max(high - low + 1, 1)
    if cells > MAX_GRAPH_CELLS:
        raise ChunkproofError(
            f"--graph draws small configurations only: {cfg.describe()} has "
            f"{cells:,} (state, budget) cells, more than {MAX_GRAPH_CELLS:,}"
        )
    model = RequestModel(policy, Space(()), graph_window(cx))
    explored = explore_batch(model, make_batch([cfg], None))
    states = len(explored.states)
    if states > MAX_GRAPH_STATES:
        raise ChunkproofError(
            f"--graph draws at most {MAX_GRAPH_STATES} states: {cfg.describe()} reaches {states}"
        )
    return explored


@dataclass(frozen=True)
class _Move:
    """What budget b does at state c: the chunk, whether the step breaks P0 (and raised), and
    the step properties it breaks."""

    chunk: int
    unsafe: bool
    raised: bool
    broken: tuple[str, ...]


def _moves(explored: Explored) -> dict[int, dict[int, _Move]]:
    """c -> b -> :class:`_Move` for every reachable state c < E and offered budget b."""
    steps = explored.steps
    source_c = explored.states[steps.source, 1].tolist()
    chunk = steps.record["chunk"].tolist()
    unsafe = steps.bad["P0"].tolist()
    raised = steps.record["crashed"].tolist()
    bad = {p: steps.bad[p].tolist() for p in STEP_PROPERTIES if p in steps.bad}
    moves: dict[int, dict[int, _Move]] = {}
    for i, (c, b) in enumerate(zip(source_c, steps.action.tolist(), strict=True)):
        broken = tuple(p for p in STEP_PROPERTIES if p in bad and bad[p][i])
        moves.setdefault(int(c), {})[int(b)] = _Move(
            int(chunk[i]), bool(unsafe[i]), bool(raised[i]), broken
        )
    return moves


def _const_stops(
    cfg: Config, moves: dict[int, dict[int, _Move]], low: int, top: int
) -> dict[int, list[int]]:
    """c -> the budgets b in [low, top] whose ``const(b)`` run from c0 stops for good at c
    (a step that yields 0 or breaks P0 before E: SPEC P7)."""
    stops: dict[int, list[int]] = {}
    for b in range(low, top + 1):
        c = cfg.start
        while c < cfg.prefill_end:
            move = moves[c][b]
            if move.unsafe or move.chunk <= 0:
                stops.setdefault(c, []).append(b)
                break
            c += move.chunk
    return stops


def graph_marks(policy: Policy, cx: Counterexample) -> GraphMarks:
    """What the state-graph picture of ``cx`` shows: the explorer's reachable states under
    ``adversarial(1..M)`` (SPEC S4) and the properties each step breaks (SPEC P): P0, P1, the
    step properties P3-P6 and P8 and, for a P7 counterexample, where each ``const(b)`` run stops."""
    cfg = cx.config
    explored = explored_graph(policy, cx)
    moves = _moves(explored)
    low, top = budget_bounds(cfg, None)
    graph: nx.DiGraph[int] = nx.DiGraph()
    graph.add_nodes_from(int(c) for c in explored.states[:, 1])
    for c, by_budget in moves.items():
        for move in by_budget.values():
            if not move.unsafe and move.chunk > 0:
                graph.add_edge(c, c + move.chunk)
    path_nodes, path_edges = _path(cx, moves, top)
    stops = _const_stops(cfg, moves, low, top) if cx.property == "P7" else {}
    p1 = explored.steps.bad["P1"]
    stuck = {int(c) for c in explored.states[explored.steps.source[p1], 1]}
    nodes, edges = [], []
    for c in sorted(graph.nodes):
        if c >= cfg.prefill_end:
            nodes.append(GraphNode(c, (), True, "", c in path_nodes, "", ""))
            continue
        mine = moves.get(c, {})
        groups: dict[int, list[int]] = {}
        for b, move in sorted(mine.items()):
            if not move.unsafe:
                groups.setdefault(move.chunk, []).append(b)
        raising = [b for b, m in sorted(mine.items()) if m.unsafe]
        stays = _widen(groups.pop(0, []), top, cfg.max_sched)
        out = []
        for k, budgets in sorted(groups.items()):
            broken = tuple(p for p in STEP_PROPERTIES if any(p in mine[b].broken for b in budgets))
            wide = _widen(budgets, top, cfg.max_sched)
            out.append(GraphEdge(c, c + k, _compact(wide), broken, (c, c + k) in path_edges))
        broken_here = {p for e in out for p in e.broken}
        broken_here |= {"P0"} if raising else set()
        broken_here |= {"P1"} if c in stuck else set()
        broken_here |= {"P7"} if c in stops else set()
        nodes.append(
            GraphNode(
                c,
                tuple(p for p in GRAPH_PROPERTIES if p in broken_here),
                False,
                _compact(stays) if stays else "",
                c in path_nodes,
                _raises_label(raising, mine, top, cfg.max_sched),
                _compact(_widen(stops.get(c, []), top, cfg.max_sched)) if c in stops else "",
            )
        )
        edges += out
    last = cx.steps[-1]
    return GraphMarks(
        title=(
            f"{cx.policy}: state graph of {cfg.describe()} under budgets 1..{cfg.max_sched}"
            f"   ({cx.property} {PROPERTIES[cx.property].name} counterexample in bold)"
        ),
        property=AS_DRAWN.get(cx.property, cx.property),
        nodes=tuple(nodes),
        edges=tuple(edges),
        last_step=(last.c, last.c if last.unsafe is not None else last.end),
    )


def _widen(budgets: list[int], top: int, most: int) -> list[int]:
    """Budgets above ``top`` = min(M, T - c0) act as ``top`` (``budget_bounds``): a group
    holding ``top`` holds them too, up to M."""
    if budgets and budgets[-1] == top:
        return [*budgets, *range(top + 1, most + 1)]
    return budgets


def _raises_label(budgets: list[int], moves: dict[int, _Move], top: int, most: int) -> str:
    """The budgets whose step breaks P0 at a state, and how: ``raises for b=1-3``."""
    if not budgets:
        return ""
    how = "raises" if all(moves[b].raised for b in budgets) else "P0"
    return f"{how} for b={_compact(_widen(budgets, top, most))}"


def _compact(values: Sequence[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``"1-3,7"``."""
    pairs = [(v, v) for v in sorted(set(values))]
    return Ints(_merged(pairs)).describe()


def _merged(pairs: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    merged: list[tuple[int, int]] = []
    for low, high in pairs:
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(high, merged[-1][1]))
        else:
            merged.append((low, high))
    return tuple(merged)


def _path(
    cx: Counterexample, moves: dict[int, dict[int, _Move]], top: int
) -> tuple[set[int], set[tuple[int, int]]]:
    """The states and transitions of the counterexample's trace: each step must be what the
    policy does at that state with that budget (a budget above ``top`` acts as ``top``)."""
    nodes, edges = {cx.config.start}, set()
    for index, s in enumerate(cx.steps):
        move = moves.get(s.c, {}).get(min(s.budget, top))
        unsafe = s.unsafe is not None
        if move is None or move.unsafe != unsafe or not (unsafe or move.chunk == s.chunk):
            raise ChunkproofError(
                f"step {index} ({s.c} -> {s.end} with budget {s.budget}) is not a transition "
                "of the policy's state graph: the counterexample does not replay on it"
            )
        nodes.add(s.c)
        if s.unsafe is None and s.chunk > 0:
            nodes.add(s.end)
            edges.add((s.c, s.end))
    return nodes, edges


# -- rendering ----------------------------------------------------------------------------------

ARC = 0.5
"""Arc bend (matplotlib ``arc3`` rad): an arc over k states peaks ARC * k / 2 above the line."""


def render_graph(marks: GraphMarks, path: Path) -> Path:
    """Draw ``marks``: states left to right by c on one line, transitions as arcs above it
    (longer jumps arc higher), the budgets that give chunk 0 written under each state.

    The axes have equal aspect, so the ``arc3`` arcs (bent in display space) peak where their
    labels are put (data space); the figure is sized to the arcs.
    """
    count = len(marks.nodes)
    pos = _layout(marks)
    top = ARC * max((pos[e.target][0] - pos[e.source][0] for e in marks.edges), default=1.0) / 2
    unit = min(0.8, 56.0 / count)  # inches per state
    with picture_style():
        width = max(8.0, (count + 1) * unit)
        fig = new_figure(width, (top + 2.2) * unit + 1.3)
        ax = fig.add_subplot()
        _draw_edges(ax, marks, pos)
        _draw_nodes(ax, marks, pos)
        _draw_legend(fig, marks)
        ax.set_xlim(-0.7, count - 0.3)
        ax.set_ylim(-1.3, top + 0.5)
        ax.set_aspect("equal", adjustable="box")
        ax.set_axis_off()
        fig.suptitle(
            "\n".join(textwrap.wrap(marks.title, int(width * 11))), fontsize=10, fontweight="bold"
        )
        save_figure(fig, path)
    return path


def _layout(marks: GraphMarks) -> dict[int, tuple[float, float]]:
    """States left to right in the order of c, evenly spaced at x = 0, 1, 2, ... on one line."""
    return {n.c: (float(x), 0.0) for x, n in enumerate(marks.nodes)}


def _draw_edges(ax: Axes, marks: GraphMarks, pos: dict[int, tuple[float, float]]) -> None:
    """Arcs above the line; the counterexample's path bold and black, a violating transition
    in its property's colour, the others grey; each labelled with its budgets."""
    from matplotlib.patches import FancyArrowPatch

    for edge in marks.edges:
        (x0, _), (x1, _) = pos[edge.source], pos[edge.target]
        colour = COLOURS[edge.broken[0]] if edge.broken else "#868e96"
        arrow = FancyArrowPatch(
            (x0, 0.0),
            (x1, 0.0),
            connectionstyle=f"arc3,rad=-{ARC}",
            arrowstyle="-|>",
            mutation_scale=10,
            color="black" if edge.on_path else colour,
            linewidth=2.6 if edge.on_path else 1.0,
            alpha=1.0 if edge.on_path or edge.broken else 0.7,
            shrinkA=9,
            shrinkB=9,
            zorder=3 if edge.on_path else 2,
        )
        ax.add_patch(arrow)
        ax.text(
            (x0 + x1) / 2,
            ARC * (x1 - x0) / 2,
            f"b={edge.budgets}",
            ha="center",
            va="center",
            fontsize=7,
            fontweight="bold" if edge.on_path else "normal",
            bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"},
            zorder=4,
        )


def _draw_nodes(ax: Axes, marks: GraphMarks, pos: dict[int, tuple[float, float]]) -> None:
    """A circle per state, coloured by its legend entry; the path's states ringed in black,
    the violating state ringed thick; under each, the budgets that leave it in place, those
    whose step breaks P0, and (P7) those whose const run stops there."""
    failing = marks.last_step[0]
    for node in marks.nodes:
        x, y = pos[node.c]
        ring = 3.0 if node.c == failing else 1.8 if node.on_path else 0.6
        ax.scatter(
            [x],
            [y],
            s=480,
            c=COLOURS[node.colour_key(marks.property)],
            edgecolors="black",
            linewidths=ring,
            zorder=5,
        )
        ax.text(x, y, str(node.c), ha="center", va="center", fontsize=8, zorder=6)
        ax.text(x, y - 0.3, "\n".join(_below(node)), ha="center", va="top", fontsize=7)


def _below(node: GraphNode) -> list[str]:
    """The lines written under a node."""
    stuck = "stuck: " if "P1" in node.broken else ""
    below = [f"{stuck}chunk 0\nfor b={node.stays}"] if node.stays else []
    if node.raises:
        below.append(node.raises.replace(" for ", "\nfor "))
    if node.const_stops:
        below.append(f"const(b) stops\nfor b={node.const_stops}")
    if len(node.broken) > 1:
        below.append(",".join(node.broken))
    return below


def _draw_legend(fig: Figure, marks: GraphMarks) -> None:
    """Below the graph: the colours that occur, and what the bold path is."""
    from matplotlib.lines import Line2D

    shown = dict.fromkeys(n.colour_key(marks.property) for n in marks.nodes)
    handles = [
        Line2D(
            [],
            [],
            marker="o",
            linestyle="",
            markersize=9,
            markerfacecolor=COLOURS[key],
            markeredgecolor="black",
            label=LEGEND[key],
        )
        for key in COLOURS
        if key in shown
    ]
    handles.append(Line2D([], [], color="black", linewidth=2.6, label="counterexample path"))
    fig.legend(
        handles=handles,
        loc="outside lower center",
        ncols=min(len(handles), 4),
        frameon=False,
        fontsize=8,
    )


def save_graph(policy: Policy, cx: Counterexample, path: Path) -> Path:
    """The state-graph picture of ``cx`` on ``policy`` written to ``path`` (.svg or .png)."""
    return render_graph(graph_marks(policy, cx), path)
