"""The picture of the explorer's state graph for a counterexample's configuration (issue 5).

Nodes are the states c reachable from c0 under ``adversarial(1..M)`` (SPEC S4), edges the
transitions c -> c + chunk, labelled with the budgets that take them; each node is coloured by
the property a step from it breaks (SPEC P), and the counterexample's path is drawn bold. As in
:mod:`chunkproof.checker.pictures`, :func:`graph_marks` computes the content (pure, tested) and
:func:`render_graph` draws it, importing matplotlib only there.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import networkx as nx
import numpy as np

from chunkproof.checker.explorer import Explored, explore_batch
from chunkproof.checker.pictures import new_figure, picture_style, save_figure
from chunkproof.model.counterexample import Counterexample
from chunkproof.model.errors import ChunkproofError
from chunkproof.model.policy import Policy
from chunkproof.spec.properties import PROPERTIES
from chunkproof.spec.request import RequestModel, budget_bounds, make_batch
from chunkproof.spec.space import Ints, Space

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MAX_GRAPH_STATES = 200
"""``--graph`` draws state graphs of at most this many states (small configurations only)."""

MAX_GRAPH_CELLS = 4_000_000
"""... and evaluates at most this many (state, budget) cells to find them."""

STEP_PROPERTIES = ("P3", "P4", "P5", "P6")
"""Properties of one step (c, b): a transition breaks them with some of its budgets."""

GRAPH_PROPERTIES = ("P1", *STEP_PROPERTIES)
"""The properties a node can be coloured by, in order of precedence."""

AS_DRAWN = {"P2": "P1", "P7": "P1", "P0": "P1"}
"""P2 fails exactly where P1 does (a state the largest budget cannot move), P7 where a budget
cannot move it, and a P0 step ends the run there: their counterexamples draw as P1."""

COLOURS = {
    "P1": "#e03131",
    "P3": "#9c36b5",
    "P4": "#f08c00",
    "P5": "#fcc419",
    "P6": "#1c7ed6",
    "ok": "#b2f2bb",
    "finished": "#dee2e6",
}

LEGEND = {
    "P1": "P1 stuck: b=M gives 0",
    "P3": "P3 a chunk crosses a block end",
    "P4": "P4 a chunk ends off the grid",
    "P5": "P5 a chunk ends in the window",
    "P6": "P6 a chunk skips R*",
    "ok": "no property broken",
    "finished": "prefill finished (c >= E)",
}


@dataclass(frozen=True)
class GraphNode:
    """A reachable state c: the properties a step from it breaks, whether it is past E, the
    budgets that leave it where it is (chunk 0), and whether the counterexample visits it."""

    c: int
    broken: tuple[str, ...]
    finished: bool
    stays: str
    on_path: bool

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
    """A transition c -> c + chunk (chunk > 0), the budgets that take it, what it breaks."""

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
    """The counterexample's violating step (c, c + chunk)."""


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
    model = RequestModel(policy, Space(()), cx.window())
    explored = explore_batch(model, make_batch([cfg], None))
    states = len(explored.states)
    if states > MAX_GRAPH_STATES:
        raise ChunkproofError(
            f"--graph draws at most {MAX_GRAPH_STATES} states: {cfg.describe()} reaches {states}"
        )
    return explored


def graph_marks(policy: Policy, cx: Counterexample) -> GraphMarks:
    """What the state-graph picture of ``cx`` shows: the explorer's reachable states under
    ``adversarial(1..M)`` (SPEC S4) and the properties each step breaks (SPEC P)."""
    cfg = cx.config
    explored = explored_graph(policy, cx)
    steps = explored.steps
    source_c = explored.states[steps.source, 1]
    graph: nx.DiGraph[int] = nx.DiGraph()
    graph.add_nodes_from(int(c) for c in explored.states[:, 1])
    chunk = steps.record["chunk"]
    for c, k in zip(source_c.tolist(), chunk.tolist(), strict=True):
        graph.add_edge(int(c), int(c) + int(k))
    path_nodes, path_edges = _path(cx, graph)
    top = budget_bounds(cfg, None)[1]
    nodes, edges = [], []
    for c in sorted(graph.nodes):
        if c >= cfg.prefill_end:
            nodes.append(GraphNode(c, (), True, "", c in path_nodes))
            continue
        mine = np.flatnonzero(source_c == c)
        groups: dict[int, list[int]] = {}
        for i in mine:
            groups.setdefault(int(chunk[i]), []).append(int(steps.action[i]))
        for members in groups.values():
            if members[-1] == top:
                members.extend(range(top + 1, cfg.max_sched + 1))
        stays = groups.pop(0, [])
        out = []
        for k, budgets in sorted(groups.items()):
            rows = mine[chunk[mine] == k]
            broken = tuple(p for p in STEP_PROPERTIES if steps.bad[p][rows].any())
            edge = GraphEdge(c, c + k, _compact(budgets), broken, (c, c + k) in path_edges)
            out.append(edge)
        broken_here = {p for e in out for p in e.broken}
        if steps.bad["P1"][mine].any():
            broken_here.add("P1")
        order = tuple(p for p in GRAPH_PROPERTIES if p in broken_here)
        nodes.append(GraphNode(c, order, False, _compact(stays) if stays else "", c in path_nodes))
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
        last_step=(last.c, last.end),
    )


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


def _path(cx: Counterexample, graph: nx.DiGraph[int]) -> tuple[set[int], set[tuple[int, int]]]:
    """The states and transitions of the counterexample's trace; each must be in the graph."""
    nodes, edges = {cx.config.start}, set()
    for index, s in enumerate(cx.steps):
        if s.unsafe is None and not graph.has_edge(s.c, s.end):
            raise ChunkproofError(
                f"step {index} ({s.c} -> {s.end} with budget {s.budget}) is not a transition "
                "of the policy's state graph: the counterexample does not replay on it"
            )
        nodes.add(s.end if s.unsafe is None else s.c)
        if s.chunk > 0 and s.unsafe is None:
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
    the violating state ringed thick; under each, the budgets that leave it in place."""
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
        stuck = "stuck: " if "P1" in node.broken else ""
        below = [f"{stuck}chunk 0\nfor b={node.stays}"] if node.stays else []
        if len(node.broken) > 1:
            below.append(",".join(node.broken))
        if below:
            ax.text(x, y - 0.3, "\n".join(below), ha="center", va="top", fontsize=7)


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
