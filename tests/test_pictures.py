"""Pictures of counterexamples (SPEC C): the marks they show for every property P0-P7,
``chunkproof show`` (the trace picture and the ``--graph`` state graph), and the pictures
``check``, ``explore`` and ``prove`` write beside their counterexample files."""

from __future__ import annotations

import dataclasses
import json
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import Cli
from matplotlib.image import imread

from chunkproof.checker.engines.verdicts import PROVED, VIOLATED, Verdict
from chunkproof.checker.reports.figure import RED
from chunkproof.checker.reports.graph_picture import MAX_GRAPH_STATES, graph_marks
from chunkproof.checker.reports.report import combine, render_table
from chunkproof.checker.reports.request_picture import (
    HEAD_ROWS,
    MAX_ROWS,
    Admission,
    Bar,
    Failure,
    Position,
    TraceMarks,
    save_picture,
    trace_marks,
)
from chunkproof.model.budget import Const
from chunkproof.model.builtin import get_builtin
from chunkproof.model.config import Config
from chunkproof.model.counterexample import Counterexample
from chunkproof.model.errors import ChunkproofError
from chunkproof.model.step import Step, step
from chunkproof.model.trace_file import write_file
from chunkproof.source.loading import recorded_policy, resolve_policy
from chunkproof.source.releases import release_root

COUNTEREXAMPLES = Path(__file__).parent.parent / "counterexamples"
SPEC_K = COUNTEREXAMPLES / "vllm-0.33" / "p1-livelock-T49-B16-L3.json"
P7_CONST = COUNTEREXAMPLES / "vllm-0.33" / "p7-const16-never-finishes-T49-B16-L3.json"
P0_EXTERNAL = COUNTEREXAMPLES / "vllm-0.17" / "p0-external-hit-assert.json"
P3_EAGLE = COUNTEREXAMPLES / "vllm-0.17" / "p3-poisoned-slot-eagle.json"
P3_SPARE = COUNTEREXAMPLES / "vllm-0.30" / "p3-spare-speculative-block.json"
P3_SPLIT_GRID = COUNTEREXAMPLES / "vllm-0.33" / "p3-split-grid-half-block.json"
P6_028 = COUNTEREXAMPLES / "vllm-0.28" / "p6-lost-resend-state.json"
WINDOW_ON_WHITE = "#ffe3c2"
"""The window's colour (#ffc078 at alpha 0.45) over the white background."""
NARROW = ["--block", "4", "--lookahead", "2", "--prompt", "1-8", "--max-sched", "1-4"]


def _svg_text(path: Path) -> str:
    """All text of an SVG file (it must parse as XML with an <svg> root)."""
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    return " ".join(t.strip() for t in root.itertext() if t.strip())


def _pixels_of(path: Path, hex_colour: str) -> np.ndarray:
    """(y, x) of the PNG's pixels of ``hex_colour`` (within rounding), as fractions of its
    height and width, one row per pixel."""
    pixels = imread(path)[..., :3]
    rgb = np.array([int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    ys, xs = np.nonzero(np.abs(pixels - rgb).max(axis=-1) < 0.02)
    return np.column_stack([ys / pixels.shape[0], xs / pixels.shape[1]])


def _one_line_error(err: str) -> None:
    assert err.startswith("chunkproof: error:")
    assert err.count("\n") == 1, err
    assert "Traceback" not in err


# -- the marks ---------------------------------------------------------------------------------


def _marks(cx: Counterexample) -> TraceMarks:
    """The marks of ``cx`` on the policy it records."""
    return trace_marks(cx, recorded_policy(cx))


def test_spec_k_marks_show_the_stuck_point_and_the_window() -> None:
    """SPEC K: vllm-0.33, B=16 L=3 T=49 M=16: chunks 16, 32, 46, then stuck at 46."""
    marks = _marks(Counterexample.load(SPEC_K))
    assert marks.axis_ends == (("T", 49),)
    assert marks.boundaries == (0, 16, 32, 48)
    assert marks.window == (46, 49)
    assert marks.bars == (
        Bar(0, 0, 0, 16, 16),
        Bar(1, 1, 16, 32, 16),
        Bar(2, 2, 32, 46, 16),
        Bar(3, 3, 46, 46, 16),
    )
    assert [b.label for b in marks.bars] == ["b=16"] * 4
    assert [b.zero for b in marks.bars] == [False, False, False, True]
    assert marks.positions == (Position(48, ("λ", "R*")),)
    (failure,) = marks.failures
    assert (failure.kind, failure.at, failure.row) == ("stuck", 46, 3)
    assert failure.text.startswith("stuck at c=46")
    assert "vllm-0.33" in marks.title and "P1 LIVE" in marks.title
    assert "T=49 B=16 L=3 M=16" in marks.title
    assert marks.verdict.startswith("stuck at c=46 < E=49")


def test_p3_marks_the_crossing_and_the_poisoned_slot() -> None:
    """vllm-0.17 with the EAGLE drop (and L=1, which 0.17 requires with it), B=4 T=5: [1, 5)
    runs past 4, keying 4 onto state@1."""
    marks = _marks(Counterexample.load(P3_EAGLE))
    crossing, poisoned = marks.failures
    assert (crossing.kind, crossing.at, crossing.row) == ("crossing", 4, 1)
    assert "[1, 5) runs past 4" in crossing.text
    assert poisoned == Failure(
        "poisoned", 4, "poisoned slot: key 4 holds state@1, not state@4", 1, 1
    )
    assert marks.window == (4, 5)  # L = 1
    assert "D=on" in marks.title
    assert marks.admission is None and marks.split_grid == ()


def test_p3_marks_the_spare_speculative_block_once() -> None:
    """vllm-0.30, T=13 B=4 L=1 with a checkpoint: [4, 13) keys 8 onto the speculative block
    of [0, 4), which holds no state; the oracle's "8 holds no state" is that same mark."""
    marks = _marks(Counterexample.load(P3_SPARE))
    (spare,) = marks.failures
    assert (spare.kind, spare.at, spare.row) == ("spare", 8, 1)
    assert "[4, 13) keys 8 onto a spare block" in spare.text


def test_p0_marks_the_raising_step_and_the_external_admission() -> None:
    """vllm-0.17 (V2) admitted at c0 = x = 1 by a KV connector: the split asserts x == 0, so
    the first step raises; it is a marker (no chunk), and [0, c0) is drawn as the hit."""
    marks = _marks(Counterexample.load(P0_EXTERNAL))
    assert "P0 SAFE violated" in marks.title and "c0=1 x=1" in marks.title
    (bar,) = marks.bars
    assert bar == Bar(0, 0, 1, 1, 1, unsafe=True, raised=True)
    assert bar.zero and bar.outcome == "raises"
    (failure,) = marks.failures
    assert (failure.kind, failure.at, failure.row) == ("unsafe", 1, 0)
    assert failure.text.startswith("P0 at c=1, b=1: the policy raises")
    assert marks.admission == Admission(1, 1)
    assert marks.admission.label == "c0=1: external hit (KV connector)"


def test_p0_marks_a_stage_that_leaves_its_range() -> None:
    """A step whose reservation returns -1 (outside [0, its input]) breaks P0 without raising:
    no bar running backwards, a marker that says the chunk, and the stage in the failure."""
    cx = Counterexample.load(SPEC_K)
    bad = Step(c=46, budget=16, n=3, split=2, encoder=2, reservation=-1, chunk=-1)
    marks = _marks(dataclasses.replace(cx, property="P0", steps=(*cx.steps[:3], bad)))
    assert marks.bars[-1] == Bar(3, 3, 46, 45, 16, unsafe=True, raised=False)
    assert marks.bars[-1].zero and marks.bars[-1].outcome == "chunk -1 (unsafe)"
    (failure,) = marks.failures
    assert failure.kind == "unsafe" and "the reservation returns -1, outside [0, 2]" in failure.text
    safe = dataclasses.replace(cx, property="P0")
    with pytest.raises(ChunkproofError, match="not a P0 trace"):
        _marks(safe)


def test_p7_marks_the_const_run_that_stops() -> None:
    """SPEC K as P7: under const(16) the run stops at 46 for good."""
    cx = Counterexample.load(P7_CONST)
    assert cx.budget_model == Const(16)
    marks = _marks(cx)
    assert "P7 COST violated under const(16)" in marks.title
    assert [(b.start, b.end, b.budget) for b in marks.bars] == [
        (0, 16, 16),
        (16, 32, 16),
        (32, 46, 16),
        (46, 46, 16),
    ]
    (failure,) = marks.failures
    assert (failure.kind, failure.at, failure.row) == ("stuck", 46, 3)
    assert failure.text == "const(16) stuck at c=46: b=16 gives 0 every step"
    assert marks.window == (46, 49)


def test_a_split_grid_finer_than_the_block_is_drawn() -> None:
    """vllm-0.33 with G = B/2 = 2, B = 4, T = 5: the split's grid adds 2 (4 is a block end)."""
    marks = _marks(Counterexample.load(P3_SPLIT_GRID))
    assert (marks.block, marks.split_block) == (4, 2)
    assert marks.boundaries == (0, 4)
    assert marks.split_grid == (2,)
    assert [f.kind for f in marks.failures] == ["crossing", "poisoned"]


def test_positions_follow_the_release_split() -> None:
    """vllm-0.28 (V5) stops at lambda = fl(T, B) = 8, not at 0.33's ckpos(T) = 4; R* = 4 is the
    resend position the chunk [0, 8) runs over (P6)."""
    marks = _marks(Counterexample.load(P6_028))
    assert marks.positions == (Position(4, ("R*",)), Position(8, ("λ",)))
    (failure,) = marks.failures
    assert (failure.kind, failure.at) == ("skipped", 4)


@pytest.mark.fidelity
def test_positions_of_a_source_policy_follow_its_release() -> None:
    """The same counterexample drawn for 0.28.0's real source stops at 0.28's lambda (8)."""
    cx = Counterexample.load(P6_028)
    source = resolve_policy(str(release_root("0.28.0")))
    assert trace_marks(cx, source).positions == _marks(cx).positions


def test_partial_hits_add_tau() -> None:
    """With H = 4 < B = 16 (partial hits) and P = 54: lambda = ck33(54, 16) = 48, tau =
    ck33(54, 4) = 52, and R* on the H grid is 52 too."""
    cx = Counterexample.load(SPEC_K)
    fine = dataclasses.replace(cx, config=cx.config.replace(prompt=54, tokens=54, hash_block=4))
    names = {p.at: p.names for p in _marks(fine).positions}
    assert names == {48: ("λ",), 52: ("τ", "R*")}


def test_a_long_trace_elides_its_middle() -> None:
    policy, cfg = get_builtin("vllm-0.33"), Config(block=4, prompt=250, max_sched=4, lookahead=3)
    steps: list[Step] = []
    c = 0
    while not steps or steps[-1].chunk:
        steps.append(step(policy, cfg, c, 4))
        c = steps[-1].end
    cx = dataclasses.replace(Counterexample.load(SPEC_K), config=cfg, steps=tuple(steps))
    marks = _marks(cx)
    assert len(steps) > MAX_ROWS
    assert marks.rows == MAX_ROWS
    assert marks.elided is not None
    assert marks.elided.row == HEAD_ROWS
    assert marks.elided.count == len(steps) - (MAX_ROWS - 1)
    assert marks.bars[-1].step == len(steps) - 1
    assert marks.failures[0].row == MAX_ROWS - 1
    assert marks.failures[0].at == steps[-1].c


# -- chunkproof show ---------------------------------------------------------------------------


def test_show_writes_an_svg_with_the_marks(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "k.svg"
    run = cli("show", str(SPEC_K), "--out", str(out))
    assert run.code == 0, run.err
    assert run.out == f"picture: {out}\n"
    text = _svg_text(out)
    for expected in (
        "stuck at c=46: even b=16 gives 0",
        "lookahead window (46, 49)",
        "λ = R* = 48",
        "b=16 → 32",
        "b=16: chunk 0",
        "T=49",
        "step 4",
    ):
        assert expected in text, expected


def test_show_writes_a_png_with_the_marks(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "k.png"
    run = cli("show", str(SPEC_K), "--out", str(out))
    assert run.code == 0, run.err
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    red = _pixels_of(out, RED)  # the verdict on top, the stuck point at the right bottom
    assert ((red[:, 0] > 0.5) & (red[:, 1] > 0.8)).any()
    window = _pixels_of(out, WINDOW_ON_WHITE)  # the shaded window (46, 49), at the right
    assert len(window) > 10_000
    assert np.median(window[:, 1]) > 0.85
    assert len(_pixels_of(out, "#4c6ef5")) > 10_000  # the chunk bars


def test_show_draws_the_p3_crossing(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "p3.svg"
    assert cli("show", str(P3_EAGLE), "--out", str(out)).code == 0
    text = _svg_text(out)
    assert "[1, 5) runs past 4 from mid-block" in text
    assert "poisoned slot: key 4 holds state@1" in text


def test_show_draws_the_p0_crash(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "p0.svg"
    run = cli("show", str(P0_EXTERNAL), "--out", str(out))
    assert run.code == 0, run.err
    text = _svg_text(out)
    for expected in (
        "P0 SAFE violated",
        "b=1: raises",
        "P0 at c=1, b=1: the policy raises",
        "c0=1: external hit (KV connector)",
        "admitted: prefix hits [0, c0)",
    ):
        assert expected in text, expected


def test_a_long_failure_note_is_wrapped(tmp_path: Path) -> None:
    """A crash in real source names a long file path; its note is wrapped, so the layout holds
    (matplotlib warns, and draws the axes collapsed, when a note is wider than the figure)."""
    data = json.loads(P0_EXTERNAL.read_text())
    where = "/root/.cache/chunkproof/vllm-0.17.0/vllm/v1/core/sched/scheduler.py:279"
    data["trace"][0]["crash"] = f"{where}: assertion failed in _mamba_block_aligned_split"
    cx = Counterexample.from_dict(data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        save_picture(cx, recorded_policy(cx), tmp_path / "p0.png")
        save_picture(cx, recorded_policy(cx), tmp_path / "p0.svg")
    text = _svg_text(tmp_path / "p0.svg")
    assert "P0 at c=1, b=1: the policy raises at /root/" in text
    assert "in _mamba_block_aligned_split" in text


def test_show_draws_the_p7_const_run(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "p7.svg"
    run = cli("show", str(P7_CONST), "--out", str(out))
    assert run.code == 0, run.err
    text = _svg_text(out)
    for expected in (
        "P7 COST violated under const(16)",
        "const(16) stuck at c=46: b=16 gives 0 every step",
        "b=16 → 46",
        "b=16: chunk 0",
    ):
        assert expected in text, expected


def test_show_draws_the_split_grid(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "grid.svg"
    assert cli("show", str(P3_SPLIT_GRID), "--out", str(out)).code == 0
    assert "dotted: the split's grid, every G=2" in _svg_text(out)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--out", "k.pdf"], ".svg or .png"),
        (["--graph", "k.txt"], ".svg or .png"),
        (["--out", "k"], ".svg or .png"),
        ([], "show needs --out"),
    ],
)
def test_show_bad_input_is_one_line(cli: Cli, tmp_path: Path, argv: list[str], words: str) -> None:
    argv = [str(tmp_path / a) if a.startswith("k") else a for a in argv]
    run = cli("show", str(SPEC_K), *argv)
    assert run.code == 2
    _one_line_error(run.err)
    assert words in run.err
    assert not list(tmp_path.iterdir())


def test_show_a_missing_file_is_one_line(cli: Cli, tmp_path: Path) -> None:
    run = cli("show", str(tmp_path / "none.json"), "--out", str(tmp_path / "x.svg"))
    assert run.code == 2
    _one_line_error(run.err)
    assert "no such file" in run.err


# -- the state graph ---------------------------------------------------------------------------


def test_graph_marks_of_spec_k() -> None:
    """Under budgets 1..16 from c=0 only b=16 moves (the split floors to the grid): the chain
    0 -> 16 -> 32 -> 46, where the reservation trims 48 to 46 (off the grid: P4) and every
    budget then gives 0 (P1)."""
    marks = graph_marks(get_builtin("vllm-0.33"), Counterexample.load(SPEC_K))
    assert [(n.c, n.broken, n.stays, n.on_path) for n in marks.nodes] == [
        (0, (), "1-15", True),
        (16, (), "1-15", True),
        (32, ("P4",), "1-15", True),
        (46, ("P1",), "1-16", True),
    ]
    assert [(e.source, e.target, e.budgets, e.broken, e.on_path) for e in marks.edges] == [
        (0, 16, "16", (), True),
        (16, 32, "16", (), True),
        (32, 46, "16", ("P4",), True),
    ]
    assert marks.last_step == (46, 46)
    assert marks.nodes[-1].colour_key(marks.property) == "P1"


def test_graph_marks_of_the_p3_counterexample() -> None:
    marks = graph_marks(get_builtin("vllm-0.17"), Counterexample.load(P3_EAGLE))
    assert [n.c for n in marks.nodes] == [0, 1, 2, 3, 4, 5]
    assert marks.nodes[-1].finished
    crossing = next(e for e in marks.edges if (e.source, e.target) == (1, 5))
    assert (crossing.budgets, crossing.on_path) == ("4", True)
    assert "P3" in crossing.broken
    assert marks.nodes[1].colour_key("P3") == "P3"
    on_path = {(e.source, e.target) for e in marks.edges if e.on_path}
    assert on_path == {(0, 1), (1, 5)}
    # budgets 2-4 from 3 all finish the prefill: one edge, one compact label
    assert next(e.budgets for e in marks.edges if (e.source, e.target) == (3, 5)) == "2-4"


def test_graph_marks_of_the_p0_counterexample() -> None:
    """Admitted at c0 = 1 with an external hit, vllm-0.17's split asserts for every budget:
    one state, no transition, every budget (those above T - c0 = 1 act as 1) raising."""
    marks = graph_marks(get_builtin("vllm-0.17"), Counterexample.load(P0_EXTERNAL))
    assert marks.property == "P0"
    (node,) = marks.nodes
    assert (node.c, node.broken, node.stays, node.raises, node.on_path) == (
        1,
        ("P0",),
        "",
        "raises for b=1-4",
        True,
    )
    assert node.colour_key(marks.property) == "P0"
    assert marks.edges == ()
    assert marks.last_step == (1, 1)


def test_graph_marks_of_the_p7_counterexample() -> None:
    """SPEC K under budgets 1..16: const(b) for b < 16 stops at c0 = 0 (the split floors to
    the grid), const(16) at 46; the other states are left by b=16 only."""
    marks = graph_marks(get_builtin("vllm-0.33"), Counterexample.load(P7_CONST))
    assert marks.property == "P7"
    assert [(n.c, n.broken, n.const_stops) for n in marks.nodes] == [
        (0, ("P7",), "1-15"),
        (16, (), ""),
        (32, ("P4",), ""),
        (46, ("P1", "P7"), "16"),
    ]
    assert [n.colour_key("P7") for n in marks.nodes] == ["P7", "ok", "P4", "P7"]
    assert all(e.on_path for e in marks.edges)
    assert marks.last_step == (46, 46)


def test_const_runs_are_marked_for_p7_only() -> None:
    """The same configuration drawn for the P1 counterexample colours no const(b) stop."""
    marks = graph_marks(get_builtin("vllm-0.33"), Counterexample.load(SPEC_K))
    assert all(n.const_stops == "" and "P7" not in n.broken for n in marks.nodes)


def test_show_graph_writes_an_svg(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "graph.svg"
    run = cli("show", str(P3_EAGLE), "--graph", str(out))
    assert run.code == 0, run.err
    assert run.out == f"state graph: {out}\n"
    text = _svg_text(out)
    assert "state graph of T=5 B=4 L=1 M=4 D=on" in text
    assert "P3 a chunk crosses a block end" in text
    assert "b=2-4" in text
    assert "counterexample path" in text


def test_show_graph_of_p0_and_p7(cli: Cli, tmp_path: Path) -> None:
    for cx_file, expected in (
        (P0_EXTERNAL, ("P0 the code raises", "raises for b=1-4", "P0 SAFE counterexample")),
        (P7_CONST, ("P7 a const(b) run stops here", "const(b) stops for b=16", "P1,P7")),
    ):
        out = tmp_path / f"{cx_file.stem}.svg"
        run = cli("show", str(cx_file), "--out", str(tmp_path / "t.png"), "--graph", str(out))
        assert run.code == 0, run.err
        assert run.out.splitlines()[1] == f"state graph: {out}"
        text = _svg_text(out)
        for words in expected:
            assert words in text, (cx_file.name, words)


def test_show_graph_refuses_a_large_config(cli: Cli, tmp_path: Path) -> None:
    cx = Counterexample.load(SPEC_K)
    big = dataclasses.replace(cx, config=Config(block=4, prompt=1000, max_sched=8, lookahead=2))
    write_file(tmp_path / "big.json", big.to_dict())
    run = cli("show", str(tmp_path / "big.json"), "--graph", str(tmp_path / "g.svg"))
    assert run.code == 2
    _one_line_error(run.err)
    assert f"at most {MAX_GRAPH_STATES} states" in run.err
    huge = dataclasses.replace(cx, config=Config(block=16, prompt=1 << 20, max_sched=1 << 16))
    write_file(tmp_path / "huge.json", huge.to_dict())
    run = cli("show", str(tmp_path / "huge.json"), "--graph", str(tmp_path / "g.svg"))
    assert run.code == 2
    _one_line_error(run.err)
    assert "small configurations only" in run.err
    assert not (tmp_path / "g.svg").exists()


def test_show_graph_of_a_trace_that_does_not_replay(cli: Cli, tmp_path: Path) -> None:
    data = json.loads(SPEC_K.read_text())
    data["trace"][2]["chunk"] = 16  # 32 -> 48 is no transition of vllm-0.33 here
    (tmp_path / "tampered.json").write_text(json.dumps(data))
    run = cli("show", str(tmp_path / "tampered.json"), "--graph", str(tmp_path / "g.svg"))
    assert run.code == 2
    _one_line_error(run.err)
    assert "does not replay" in run.err


def test_show_graph_of_a_p0_trace_that_does_not_raise(cli: Cli, tmp_path: Path) -> None:
    """A P0 file whose step is recorded as raising where the policy does not is refused."""
    data = json.loads(P0_EXTERNAL.read_text())
    data["policy"]["name"] = "vllm-0.33"  # V9 takes external hits: chunk 1, no assert
    (tmp_path / "p0.json").write_text(json.dumps(data))
    run = cli("show", str(tmp_path / "p0.json"), "--graph", str(tmp_path / "g.svg"))
    assert run.code == 2
    _one_line_error(run.err)
    assert "does not replay" in run.err


# -- pictures beside the counterexamples of explore, check and prove ---------------------------


def test_explore_writes_each_picture_beside_its_counterexample(cli: Cli, tmp_path: Path) -> None:
    run = cli("explore", "vllm-0.33", *NARROW, "--out", str(tmp_path), "--json", "--jobs", "1")
    assert run.code == 1
    verdicts = {v["property"]: v for v in run.json()["verdicts"]}
    p1 = verdicts["P1"]
    assert p1["counterexample"] == str(tmp_path / "vllm-0.33" / "P1.json")
    assert p1["picture"] == str(tmp_path / "vllm-0.33" / "P1.svg")
    assert "stuck at c=3" in _svg_text(Path(p1["picture"]))
    for verdict in verdicts.values():
        if verdict["counterexample"] is None:
            assert verdict["picture"] is None
        else:
            assert verdict["picture"] == str(Path(verdict["counterexample"]).with_suffix(".svg"))
            assert Path(verdict["picture"]).is_file()
        for finding in verdict["findings"]:
            assert Path(finding["picture"]).with_suffix(".json") == Path(finding["counterexample"])
    assert verdicts["P3"]["status"] == "PROVED"
    assert verdicts["P4"]["picture"] is not None
    assert "ends at 3, off the B=4 grid" in _svg_text(Path(verdicts["P4"]["picture"]))
    assert "const(1) stuck at c=0" in _svg_text(Path(verdicts["P7"]["picture"]))


def test_explore_draws_the_p0_counterexample(cli: Cli, tmp_path: Path) -> None:
    """vllm-0.17 admitted with an external hit: P0 is violated and drawn beside its file."""
    ranges = ["--block", "4", "--lookahead", "0", "--prompt", "1-4", "--max-sched", "1-4"]
    ranges += ["--drop", "off", "--start", "external"]
    argv = ["--property", "P0", "--out", str(tmp_path), "--json", "--jobs", "1"]
    run = cli("explore", "vllm-0.17", *ranges, *argv)
    assert run.code == 1, run.err
    (verdict,) = run.json()["verdicts"]
    assert verdict["status"] == "VIOLATED"
    assert verdict["picture"] == str(tmp_path / "vllm-0.17" / "P0.svg")
    assert "P0 at c=1, b=1: the policy raises" in _svg_text(Path(verdict["picture"]))


def test_explore_prints_where_the_pictures_are(cli: Cli, tmp_path: Path) -> None:
    run = cli("explore", "vllm-0.33", *NARROW, "--property", "P1", "--out", str(tmp_path))
    assert run.code == 1
    lines = run.out.splitlines()
    cx_line = lines.index(f"      counterexample: {tmp_path / 'vllm-0.33' / 'P1.json'}")
    assert lines[cx_line + 1] == f"      picture: {tmp_path / 'vllm-0.33' / 'P1.svg'}"
    assert f"      picture: {tmp_path / 'vllm-0.33' / 'P1-degenerate.svg'}" in lines


def test_check_writes_the_picture_beside_the_counterexample(cli: Cli, tmp_path: Path) -> None:
    """``check`` on the narrow grid (the explorer finds P1 violated, so no prover runs)."""
    argv = ["check", "vllm-0.33", *NARROW, "--property", "P1", "--out", str(tmp_path)]
    run = cli(*argv, "--json", "--jobs", "1")
    assert run.code == 1
    (verdict,) = run.json()["verdicts"]
    assert verdict["counterexample"] == str(tmp_path / "vllm-0.33" / "P1.json")
    assert verdict["picture"] == str(tmp_path / "vllm-0.33" / "P1.svg")
    assert "stuck at c=3" in _svg_text(Path(verdict["picture"]))


def test_prove_writes_the_picture_beside_its_counterexample(cli: Cli, tmp_path: Path) -> None:
    argv = ["prove", "vllm-0.33", "--block", "16", "--lookahead", "3", "--drop", "off"]
    run = cli(*argv, "--property", "P1", "--out", str(tmp_path), "--json", "--jobs", "1")
    assert run.code == 1
    (verdict,) = run.json()["verdicts"]
    assert verdict["picture"] == str(tmp_path / "vllm-0.33" / "P1-prove.svg")
    assert "stuck at c=14" in _svg_text(Path(verdict["picture"]))  # SPEC K: T=17, one chunk


def test_verdict_picture_in_json_table_and_combine() -> None:
    explored = Verdict("P1", VIOLATED, {}, "x/P1.json", "s", "enum", 1, 1, picture="x/P1.svg")
    proved = Verdict("P1", VIOLATED, {}, "x/P1-prove.json", "s", "z3", 1, 1, picture="x/p.svg")
    assert explored.to_dict()["picture"] == "x/P1.svg"
    assert "      picture: x/P1.svg" in render_table([explored]).splitlines()
    assert combine([explored], [proved])[0].picture == "x/P1.svg"
    nothing = Verdict("P1", PROVED, {}, None, "s", "enum", 1, 0)
    assert nothing.to_dict()["picture"] is None
    assert "picture" not in render_table([nothing])
    assert combine([nothing], [proved])[0].picture == "x/p.svg"


def test_a_violation_only_the_prover_found_is_counted_in_cells() -> None:
    """The row's counts are those of the engine that found the violation."""
    explored = Verdict("P3", PROVED, {}, None, "s", "enum", 1896, 0)
    proved = Verdict("P3", VIOLATED, {}, "x/P3-prove.json", "s", "z3", 110, 64)
    (row,) = combine([explored], [proved])
    assert (row.status, row.configs, row.violating) == (VIOLATED, 110, 64)
    assert "64 of 110 cells" in render_table([row])
