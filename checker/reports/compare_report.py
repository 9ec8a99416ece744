"""The report of ``chunkproof compare`` (SPEC CLI): one JSON document, a text version for the
terminal, and markdown ready to paste as a pull-request comment. All three show the same data
(:class:`chunkproof.checker.engines.compare.Comparison`)."""

from __future__ import annotations

import argparse
import os
import shlex
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from chunkproof.checker.engines.compare import (
    CHANGED,
    CRASH_GROUPS,
    FIXED,
    GROUPS,
    INTRODUCED,
    KINDS,
    UNCHANGED,
    UNDECIDED,
    Comparison,
    CostTally,
    Example,
    NativeRun,
    Side,
    VerdictRow,
    WhereExample,
    exit_status,
    regressed,
    run_dict,
    same_grid,
)
from chunkproof.checker.engines.traces import describe, verdict_details
from chunkproof.checker.engines.verdicts import EMPTY, VIOLATED, Verdict
from chunkproof.checker.reports.report import fixed_line, judged_fixed, range_lines
from chunkproof.checker.reports.trace_command import trace_arguments
from chunkproof.model.config import Config
from chunkproof.model.counterexample import Counterexample
from chunkproof.model.errors import ChunkproofError
from chunkproof.model.policy import Policy
from chunkproof.model.trajectory import Trajectory
from chunkproof.spec.properties import PROPERTIES
from chunkproof.spec.space import INPUTS

RESULT_OPTIONS = (
    *(f"range_{item.name}" for item in INPUTS),
    "budget",
    "property",
    "window",
    "no_prove",
    "timeout",
    "rlimit",
    "compose",
    "overrides",
    "class_name",
    "base",
    "out",
)
"""The options of ``compare`` (argparse names) that decide its result or where its files go."""

_FLAGS = {
    "overrides": "--set",
    "class_name": "--class",
    **{f"range_{item.name}": item.flag for item in INPUTS},
}


def compare_command(args: argparse.Namespace, defaults: argparse.Namespace) -> str:
    """The ``chunkproof compare`` command that reproduces this comparison: the two policies
    and every option of :data:`RESULT_OPTIONS` whose value differs from ``defaults``."""
    words = ["chunkproof", "compare", args.policy, args.other]
    for name in RESULT_OPTIONS:
        value = getattr(args, name)
        if value == getattr(defaults, name):
            continue
        flag = _FLAGS.get(name, "--" + name.replace("_", "-"))
        if value is True:
            words.append(flag)
        elif isinstance(value, list):
            words += [part for item in value for part in (flag, str(item))]
        else:
            words += [flag, str(value)]
    return shlex.join(words)


# -- pieces shared by the text and the markdown ---------------------------------------------------


def _policy_line(side: Side) -> str:
    policy = side.policy
    sha = f"; source sha256 {policy.source_sha256}" if policy.source_sha256 else ""
    return f"{policy.name} ({policy.summary}{sha})"


def _fixed_lines(comparison: Comparison) -> list[str]:
    """What each side's verdicts fix (:func:`~chunkproof.checker.reports.report.judged_fixed`):
    one line when both sides fix the same, else one per side."""
    fixed = {"A": judged_fixed(comparison.a.policy, comparison.a.verdicts)}
    fixed["B"] = judged_fixed(comparison.b.policy, comparison.b.verdicts)
    if fixed["A"] == fixed["B"]:
        return [fixed_line(fixed["A"], "fixed (A and B)")]
    return [fixed_line(f, f"fixed ({side})") for side, f in fixed.items()]


def _status(row: VerdictRow, side: int) -> str:
    """A verdict of side ``side`` (0: A) in a table cell, with how many configurations of the
    grid break it, or how many cells of the production range when only the prover found the
    violation (:meth:`~chunkproof.checker.engines.compare.VerdictRow.verdict_scope`)."""
    v = (row.a, row.b)[side]
    if v.status != VIOLATED:
        return v.status
    if row.verdict_scope(side) == "production":
        return f"VIOLATED (production range, {v.violating} of {v.configs} cells)"
    return f"VIOLATED ({v.violating} of {v.configs} configs)"


def _property(pid: str) -> str:
    return f"{pid} {PROPERTIES[pid].name}"


def _counterexample(v: Verdict) -> tuple[str, str] | None:
    """The counterexample file and what it shows, in one line."""
    if v.counterexample is None:
        return None
    cx = Counterexample.load(Path(v.counterexample))
    return v.counterexample, f"{cx.config.describe()}: {cx.verdict}"


def _counterexamples(comparison: Comparison) -> Iterator[tuple[str, str, str, str]]:
    """(property, "A" or "B", file, what it shows) for every counterexample file."""
    for row in comparison.rows:
        for label, verdict in (("A", row.a), ("B", row.b)):
            found = _counterexample(verdict)
            if found is not None:
                yield row.pid, label, *found


def _findings(comparison: Comparison) -> Iterator[str]:
    """One line per property and kind of violation outside the verdicts' range (the degenerate
    region, configurations a release refuses): how many configs fail under A and under B, with
    their counterexample files."""
    for row in comparison.rows:
        kinds: dict[str, list[str]] = {}
        for label, verdict in (("A", row.a), ("B", row.b)):
            for f in verdict.findings:
                where = f" ({f['counterexample']})" if f["counterexample"] else ""
                words = f"{label} fails in {f['violating_configs']} configs{where}"
                kinds.setdefault(f["description"], []).append(words)
        for description, sides in kinds.items():
            yield f"{row.pid} {description}: {'; '.join(sides)}"


SAME_CHUNKS = "The two policies take the same chunks on every run."


def headline(comparison: Comparison) -> str:
    """One sentence: what B fixes, introduces, where it fails that A does not, and what
    changes, stays or is undecided."""
    rows = comparison.rows
    if rows and all(row.a.status == row.b.status == EMPTY for row in rows):
        return "Nothing to compare: no configuration of the range is in either verdict's scope."
    by_change: dict[str, list[str]] = {}
    for row in rows:
        by_change.setdefault(row.change, []).append(row.pid)

    def listed(change: str) -> str:
        return ", ".join(by_change.get(change, [])) or "nothing"

    text = f"B fixes {listed(FIXED)} and introduces {listed(INTRODUCED)}"
    elsewhere = [row.pid for row in rows if regressed(row) and row.change != INTRODUCED]
    if elsewhere:
        text += f"; B fails configurations of the grid that A passes for {', '.join(elsewhere)}"
    if any(regressed(row) for row in rows):
        text += " (a regression)"
    for group, crashed in CRASH_GROUPS.items():
        pids = [row.pid for row in rows if row.where is not None and row.where.counts[group]]
        if pids:
            crasher, other = "AB"[crashed], "BA"[crashed]
            text += (
                f"; where {crasher} breaks P0 (its crash, not a pass), {other} fails "
                f"{', '.join(pids)}"
            )
    if CHANGED in by_change:
        text += "; changed (failing in other configurations, or in scope on one side only): "
        text += listed(CHANGED)
    if UNCHANGED in by_change:
        text += f"; unchanged: {listed(UNCHANGED)}"
    if UNDECIDED in by_change:
        text += f"; undecided (a verdict is UNKNOWN): {listed(UNDECIDED)}"
    return text + "."


def progression_words(values: list[int]) -> str:
    """``1, 2, 3, 4, 5, 7`` -> ``1, 2, ..., 5, 7``: every run of at least five values with one
    common difference is written as its first two, ``...`` and its last (exact, not lossy)."""
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i + 1
        while j + 1 < len(values) and values[j + 1] - values[j] == values[i + 1] - values[i]:
            j += 1
        if j - i + 1 >= 5:
            parts += [str(values[i]), str(values[i + 1]), "...", str(values[j])]
            i = j + 1
        else:
            parts.append(str(values[i]))
            i += 1
    return ", ".join(parts)


def _run_words(trajectory: Trajectory) -> str:
    ends = progression_words(trajectory.ends) or "none"
    if trajectory.finished:
        steps = len(trajectory.chunks)
        return f"ends {ends}, finished in {steps} step{'s' if steps != 1 else ''}"
    if trajectory.outcome == "unsafe":
        return f"ends {ends}, breaks P0 at c={trajectory.stuck_at}"
    return f"ends {ends}, stuck at c={trajectory.stuck_at}"


def _example_words(example: Example) -> str:
    return f"{example.run.describe()}: A {_run_words(example.a)}; B {_run_words(example.b)}"


def _population(comparison: Comparison) -> str:
    t = comparison.behaviour.tally
    excluded = ", ".join(f"{n} {why}" for why, n in sorted(t.excluded.items()))
    budget = comparison.space.budget
    budgets = "1..M" if budget is None else f"{budget[0]}..{budget[1]} within 1..M"
    return (
        f"const(b) from c0 for each of the {t.configs} configurations of the grid that both "
        f"verdicts cover{f' (excluded: {excluded})' if excluded else ''}, and every budget b in "
        f"{budgets} up to T - c0 (a larger budget runs as T - c0): {t.runs} runs per policy"
    )


def _differ_line(comparison: Comparison) -> str:
    t = comparison.behaviour.tally
    return (
        f"{t.differing_runs} of {t.runs} runs take other chunks, in {t.differing_configs} of "
        f"{t.configs} configurations; {t.differing_steps} of {t.reachable_steps} (state, budget) "
        f"steps reachable under either policy give another chunk"
    )


def _cost_rows(comparison: Comparison) -> list[tuple[str, str, str]]:
    """(what, A, B) rows of the SPEC P7 table."""
    t = comparison.behaviour.tally
    a, b = t.cost
    both_a, both_b = t.both_finished

    def mean(cost: CostTally) -> str:
        value = cost.mean_excess
        return "-" if value is None else f"{value:.3f}"

    def worst(cost: CostTally) -> str:
        return "-" if cost.worst is None else str(cost.worst[0])

    def worst_at(cost: CostTally) -> str:
        return "-" if cost.worst is None else cost.worst[1].describe()

    return [
        ("runs", str(a.runs), str(b.runs)),
        ("finish", str(a.finished), str(b.finished)),
        ("do not finish", str(a.stuck), str(b.stuck)),
        ("... of which with b < B (starved below one block)", str(a.starved), str(b.starved)),
        ("steps of the runs that finish (ideal)", _steps(a), _steps(b)),
        ("mean extra steps over the ideal, runs that finish", mean(a), mean(b)),
        ("worst extra steps", worst(a), worst(b)),
        (WORST_AT, worst_at(a), worst_at(b)),
        (f"mean extra steps, the {both_a.runs} runs both finish", mean(both_a), mean(both_b)),
    ]


WORST_AT = "smallest run with the worst extra steps"


def _steps(cost: CostTally) -> str:
    return f"{cost.steps} ({cost.ideal})"


def _times(comparison: Comparison) -> str:
    parts = []
    for engine in ("explored", "proved"):
        seconds = [s.engines.get(engine, {}).get("seconds") for s in (comparison.a, comparison.b)]
        if None not in seconds:
            name = "explorer" if engine == "explored" else "prover"
            parts.append(f"{name} {seconds[0]:.1f} s (A) + {seconds[1]:.1f} s (B)")
    parts.append(f"behaviour {comparison.behaviour.seconds:.1f} s")
    return ", ".join(parts)


def _ranges_lines(comparison: Comparison) -> list[str]:
    """The explorer's grid and the prover's range (each input of each grid, SPEC CLI
    ``range``), as text lines; range lines are indented under their engine."""
    main = [side.engines["explored"]["configs"]["main"] for side in (comparison.a, comparison.b)]
    lines = [
        f"explorer (exhaustive): {main[0]} configurations in A's verdict range, {main[1]} in "
        "B's, over:",
        *range_lines(comparison.space.describe()),
    ]
    for label, side in (("A", comparison.a), ("B", comparison.b)):
        if side.verdicts and not same_grid(side.verdicts[0], comparison.space):
            lines.append(
                f"note: {label}'s explorer verdicts cover another grid (its release's default "
                "grid); where each fails and the behaviour are over the grid above"
            )
    if comparison.prover_range is None:
        lines.append("prover: not run (--no-prove): the verdicts cover the explorer's grid only")
    else:
        cells = [side.engines["proved"]["cells"] for side in (comparison.a, comparison.b)]
        lines.append(
            f"prover (Z3): {cells[0]} cells (A) and {cells[1]} (B) of the production range, "
            "each fixing B, G, H, L, alpha and R, every other input symbolic, over:"
        )
        lines += range_lines(comparison.prover_range)
    return lines


def reproduce(comparison: Comparison) -> list[str]:
    """The commands that reproduce the report: the comparison, a replay of every
    counterexample and the standalone pytest repro that runs it on real vLLM source, a trace
    of each smallest configuration where a property fails (on the side that fails it), and a
    trace under both policies of the smallest example of each kind of difference."""
    commands = [comparison.command]
    for pid, label, path, _ in _counterexamples(comparison):
        commands.append(shlex.join(["chunkproof", "replay", path]))
        test_file = f"test_{pid.lower()}_{label.lower()}.py"
        commands.append(shlex.join(["chunkproof", "repro", path, "--pytest", test_file]))
    for row in comparison.rows:
        for example in comparison.behaviour.where.get(row.pid, {}).values():
            for policy, native in _sides(comparison, example):
                command = _witness_command(policy, example.cfg, native, row.pid)
                if command is not None:
                    commands.append(command)
    for kind in KINDS:
        examples = comparison.behaviour.examples[kind]
        if examples:
            for policy in (comparison.a.policy, comparison.b.policy):
                commands.append(
                    _trace_command(policy, examples[0].run.cfg, [examples[0].run.budget])
                )
    return list(dict.fromkeys(commands))


def _sides(comparison: Comparison, example: WhereExample) -> list[tuple[Policy, NativeRun]]:
    return [(comparison.a.policy, example.a), (comparison.b.policy, example.b)]


def _trace_command(policy: Policy, cfg: Config, budgets: list[int]) -> str:
    """``chunkproof trace`` of ``cfg`` under ``budgets`` (the last repeats)."""
    words = ["chunkproof", "trace", policy.name, *policy.options, *trace_arguments(cfg)]
    if len(budgets) == 1:
        words += ["--budget", str(budgets[0])]
    else:
        words += ["--budgets", ",".join(map(str, budgets))]
    return shlex.join(words)


def _witness_command(policy: Policy, cfg: Config, native: NativeRun, pid: str) -> str | None:
    """The trace of the witness of ``pid`` (None when the policy does not fail it)."""
    steps = native.witness.get(pid)
    if steps is None:
        return None
    budgets = [steps[-1].budget] if pid == "P7" else [s.budget for s in steps]
    return _trace_command(policy, cfg, budgets)


# -- where each fails -----------------------------------------------------------------------------


def _failure_words(label: str, side: Side, native: NativeRun, cfg: Config, pid: str) -> str:
    """What one side does at an example configuration: its failure in words (under its own
    release's cache rules), or that it holds on every state the native search reached."""
    steps = native.witness.get(pid)
    crash = native.witness.get("P0")
    if steps is None and crash is not None:
        words = describe("P0", cfg, crash[-1], {})
        return f"{label} breaks P0 there (its crash, not a pass of {pid}): {words}"
    if steps is None:
        states = f"{native.states} reachable state{'s' if native.states != 1 else ''}"
        return f"{label} holds ({states} searched natively)"
    details = verdict_details(side.policy, pid, cfg, steps[-1])
    return f"{label} {describe(pid, cfg, steps[-1], details)}"


def _shown_groups(comparison: Comparison) -> list[str]:
    """The groups a report shows: the three of every comparison, and a group where a side
    breaks P0 when some property has configurations in it."""
    return [
        group
        for group in GROUPS
        if group not in CRASH_GROUPS
        or any(row.where is not None and row.where.counts[group] for row in comparison.rows)
    ]


def _where_line(comparison: Comparison, row: VerdictRow) -> str | None:
    """The counts of one row, or None when neither side fails on the grid."""
    where = row.where
    if where is None or not where.failing:
        return None
    counts = ", ".join(f"{GROUPS[g]} {where.counts[g]}" for g in _shown_groups(comparison))
    configs = comparison.behaviour.tally.configs
    return f"on the {configs} configurations of the grid both verdicts cover: {counts}"


def _where_examples(comparison: Comparison, pid: str) -> list[str]:
    """The smallest configuration of each group of a property, with both sides' words."""
    lines = []
    for group, example in comparison.behaviour.where.get(pid, {}).items():
        cfg = example.cfg
        a = _failure_words("A", comparison.a, example.a, cfg, pid)
        b = _failure_words("B", comparison.b, example.b, cfg, pid)
        lines.append(f"{GROUPS[group]}, smallest: {cfg.describe()}: {a}; {b}")
    return lines


# -- JSON -----------------------------------------------------------------------------------------


def document(comparison: Comparison) -> dict[str, Any]:
    """The ``--json`` document: the same data as the text and markdown reports."""
    t = comparison.behaviour.tally
    return {
        "a": _side_dict(comparison.a),
        "b": _side_dict(comparison.b),
        "ranges": {"explorer": comparison.space.describe(), "prover": comparison.prover_range},
        "prover": comparison.prover_range is not None,
        "summary": headline(comparison),
        "verdicts": [_row_dict(comparison, row) for row in comparison.rows],
        "behaviour": {
            "configs": t.configs,
            "excluded": t.excluded,
            "differing_configs": t.differing_configs,
            "runs": t.runs,
            "differing_runs": t.differing_runs,
            "kinds": [
                {
                    "kind": kind,
                    "description": description,
                    "runs": t.kinds[kind],
                    "examples": [_example_dict(e) for e in comparison.behaviour.examples[kind]],
                }
                for kind, description in KINDS.items()
            ],
            "reachable_states": {"a": t.states[0], "b": t.states[1]},
            "reachable_steps": t.reachable_steps,
            "differing_steps": t.differing_steps,
            "seconds": round(comparison.behaviour.seconds, 3),
        },
        "cost": {
            "a": t.cost[0].to_dict(),
            "b": t.cost[1].to_dict(),
            "both_finished": {"a": t.both_finished[0].to_dict(), "b": t.both_finished[1].to_dict()},
        },
        "reproduce": reproduce(comparison),
        "exit_status": exit_status(comparison),
    }


def _side_dict(side: Side) -> dict[str, Any]:
    policy = side.policy
    return {
        "policy": policy.name,
        "summary": policy.summary,
        "source_sha256": policy.source_sha256,
        "options": list(policy.options),
        "fixed": judged_fixed(policy, side.verdicts),
        **side.engines,
    }


def _row_dict(comparison: Comparison, row: VerdictRow) -> dict[str, Any]:
    return {
        "property": row.pid,
        "name": PROPERTIES[row.pid].name,
        "change": row.change,
        "regression": regressed(row),
        "decided_on": {"a": row.verdict_scope(0), "b": row.verdict_scope(1)},
        "a": _verdict_dict(row.a),
        "b": _verdict_dict(row.b),
        "where": _where_dict(comparison, row),
    }


def _where_dict(comparison: Comparison, row: VerdictRow) -> dict[str, Any] | None:
    """Where each side fails the property on the grid (SPEC CLI ``compare``)."""
    if row.where is None:
        return None
    examples = comparison.behaviour.where.get(row.pid, {})
    groups = {
        group: {
            "description": GROUPS[group],
            "configs": row.where.counts[group],
            "smallest": _where_example_dict(comparison, examples[group], row.pid)
            if group in examples
            else None,
        }
        for group in GROUPS
    }
    return {
        "configs": comparison.behaviour.tally.configs,
        "window": comparison.behaviour.window,
        "failing": {"a": row.where.own[0], "b": row.where.own[1]},
        **groups,
    }


def _where_example_dict(comparison: Comparison, example: WhereExample, pid: str) -> dict[str, Any]:
    sides = _sides(comparison, example)
    return {
        "config": example.cfg.to_dict(),
        "describe": example.cfg.describe(),
        **{
            label: _native_dict(policy, native, example.cfg, pid)
            for label, (policy, native) in zip(("a", "b"), sides, strict=True)
        },
    }


def _native_dict(policy: Policy, native: NativeRun, cfg: Config, pid: str) -> dict[str, Any]:
    steps = native.witness.get(pid)
    return {
        "fails": steps is not None,
        "fails_properties": list(native.witness),
        "reachable_states": native.states,
        "verdict": (
            None
            if steps is None
            else describe(pid, cfg, steps[-1], verdict_details(policy, pid, cfg, steps[-1]))
        ),
        "trace": None if steps is None else [s.to_dict() for s in steps],
        "command": _witness_command(policy, cfg, native, pid),
    }


def _verdict_dict(verdict: Verdict) -> dict[str, Any]:
    found = _counterexample(verdict)
    return {**verdict.to_dict(), "counterexample_shows": found and found[1]}


def _example_dict(example: Example) -> dict[str, Any]:
    return {
        **run_dict(example.run),
        "a": _trajectory_dict(example.a),
        "b": _trajectory_dict(example.b),
    }


def _trajectory_dict(trajectory: Trajectory) -> dict[str, Any]:
    return {
        "chunks": trajectory.chunks,
        "ends": trajectory.ends,
        "outcome": trajectory.outcome,
        "stuck_at": trajectory.stuck_at,
        "steps": len(trajectory.chunks),
    }


# -- text -----------------------------------------------------------------------------------------


def render_text(comparison: Comparison) -> str:
    """The report on the terminal."""
    a, b = comparison.a.policy, comparison.b.policy
    lines = [
        f"chunkproof compare {a.name} -> {b.name}",
        f"A: {_policy_line(comparison.a)}",
        f"B: {_policy_line(comparison.b)}",
        *_fixed_lines(comparison),
        *_ranges_lines(comparison),
        "",
        *_wrapped(headline(comparison)),
        "",
        *_text_verdicts(comparison),
        "",
        *_text_behaviour(comparison),
        "",
        *_text_cost(comparison),
        "",
        f"time: {_times(comparison)}",
    ]
    return "\n".join(lines)


def _text_verdicts(comparison: Comparison) -> list[str]:
    lines = [f"  {'property':<20} {'A':<34} {'B':<34} change"]
    for row in comparison.rows:
        lines.append(
            f"  {_property(row.pid):<20} {_status(row, 0):<34} {_status(row, 1):<34} {row.change}"
        )
        for label, verdict in (("A", row.a), ("B", row.b)):
            found = _counterexample(verdict)
            if found:
                lines.append(f"      {label}: {found[0]}: {found[1]}")
        counts = _where_line(comparison, row)
        if counts is not None:
            lines.append(f"      {counts}")
            lines += [f"        {line}" for line in _where_examples(comparison, row.pid)]
    findings = list(_findings(comparison))
    if findings:
        lines += ["", "findings outside the verdicts' range:"]
        lines += [f"  {line}" for line in findings]
    return lines


def _text_behaviour(comparison: Comparison) -> list[str]:
    t = comparison.behaviour.tally
    lines = _wrapped("behaviour on the grid: " + _population(comparison))
    lines += _wrapped(_differ_line(comparison), "  ")
    if not t.differing_runs:
        lines.append(f"  {SAME_CHUNKS}")
    for kind, description in KINDS.items():
        if t.kinds[kind]:
            lines.append(f"  {description:<52} {t.kinds[kind]:>8} runs")
            lines += [f"      {_example_words(e)}" for e in comparison.behaviour.examples[kind]]
    return lines


def _text_cost(comparison: Comparison) -> list[str]:
    lines = ["cost (SPEC P7): steps to finish under const(b) against ceil((E - c0) / b)"]
    rows = [("", "A", "B"), *_cost_rows(comparison)]
    table = [row for row in rows if row[0] != WORST_AT]
    width = max(len(value) for row in table for value in row[1:])
    lines += [f"  {what:<50} {a_:>{width}}  {b_:>{width}}" for what, a_, b_ in table]
    lines += [f"  {what}: A {a_}; B {b_}" for what, a_, b_ in rows if what == WORST_AT]
    return lines


def _wrapped(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, 100, initial_indent=indent, subsequent_indent=indent + "  ")


# -- markdown -------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    """Text in a markdown table cell."""
    return text.replace("|", "\\|")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


_CHANGE_MARK = {FIXED: "**fixed**", INTRODUCED: "**introduced**", CHANGED: "**changed**"}


def _markdown_ranges(comparison: Comparison) -> list[str]:
    """The range lines as a nested list (an indented line belongs to the line above)."""
    return [
        f"  - {line.strip()}" if line.startswith("  ") else f"- {line}"
        for line in _ranges_lines(comparison)
    ]


def portable_paths(text: str, report_folder: Path, run_folder: Path) -> str:
    """``text`` with its absolute paths made readable elsewhere: a path under the folder the
    run was made from becomes relative to the report's folder (so the commands run from
    there), one under the home folder starts with ``~``. The commands' relative paths are
    relative to the run's folder, which the report then names when it is not its own."""
    home = str(Path.home())
    run = os.path.relpath(run_folder, report_folder)
    prefix = "" if run == "." else f"{run}/"
    text = text.replace(f"{run_folder}/", prefix)
    if home not in ("", "/"):
        text = text.replace(f"{home}/", "~/")
    if prefix:
        text = text.replace(
            "### Reproduce\n", f"### Reproduce\n\nFrom the folder `{run}` (next to this report):\n"
        )
    return text


def render_markdown(comparison: Comparison) -> str:
    """The report as a pull-request comment."""
    a, b = comparison.a.policy, comparison.b.policy
    lines = [
        f"## chunkproof: `{a.name}` → `{b.name}`",
        "",
        f"- **A**: `{a.name}`: {_policy_sentence(a)}",
        f"- **B**: `{b.name}`: {_policy_sentence(b)}",
        *(f"- {line}" for line in _fixed_lines(comparison)),
        "",
        f"**{headline(comparison)}**",
        "",
        "### Ranges",
        "",
        *_markdown_ranges(comparison),
        "",
        *_markdown_verdicts(comparison),
        *_markdown_where(comparison),
        *_markdown_behaviour(comparison),
        "### Cost (SPEC P7)",
        "",
        "Steps to finish under const(b) against ceil((E - c0) / b).",
        "",
        *_table(["", "A", "B"], [list(row) for row in _cost_rows(comparison)]),
        "",
        "### Reproduce",
        "",
        "```",
        *reproduce(comparison),
        "```",
        "",
        f"<sub>chunkproof; {_times(comparison)}</sub>",
        "",
    ]
    return "\n".join(lines)


def _markdown_verdicts(comparison: Comparison) -> list[str]:
    a, b = comparison.a.policy, comparison.b.policy
    rows = [
        [
            _property(row.pid),
            _status(row, 0),
            _status(row, 1),
            _CHANGE_MARK.get(row.change, row.change),
        ]
        for row in comparison.rows
    ]
    lines = [
        "### Verdicts",
        "",
        *_table(["property", f"A `{a.name}`", f"B `{b.name}`", "change"], rows),
        "",
    ]
    counterexamples = list(_counterexamples(comparison))
    if counterexamples:
        lines += ["Minimal counterexamples (`chunkproof replay FILE` re-runs one):", ""]
        lines += [
            f"- {pid}, {label}: `{path}`: {shows}" for pid, label, path, shows in counterexamples
        ]
        lines.append("")
    findings = list(_findings(comparison))
    if findings:
        lines += ["Outside the verdicts' range:", ""]
        lines += [f"- {line}" for line in findings]
        lines.append("")
    return lines


def _markdown_where(comparison: Comparison) -> list[str]:
    """Where each side fails, per property that fails on either side on the grid."""
    rows = [row for row in comparison.rows if row.where is not None and row.where.failing]
    if not rows:
        return []
    configs = comparison.behaviour.tally.configs
    shown = _shown_groups(comparison)
    table = [
        [
            _property(row.pid),
            *(str(row.where.counts[g]) for g in shown if row.where is not None),
            _CHANGE_MARK.get(row.change, row.change),
        ]
        for row in rows
    ]
    lines = [
        "### Where each fails on the grid",
        "",
        f"Configurations of the {configs} on the grid both verdicts cover (P5 "
        f"{comparison.behaviour.window}):",
        "",
        *_table(["property", *(GROUPS[g] for g in shown), "change"], table),
        "",
        "Smallest configuration of each (re-checked natively on both policies):",
        "",
    ]
    for row in rows:
        lines += [f"- {row.pid}, {line}" for line in _where_examples(comparison, row.pid)]
    return [*lines, ""]


def _policy_sentence(policy: Policy) -> str:
    sha = f" (source sha256 `{policy.source_sha256}`)" if policy.source_sha256 else ""
    return f"{policy.summary}{sha}"


def _markdown_behaviour(comparison: Comparison) -> list[str]:
    t = comparison.behaviour.tally
    lines = ["### Behaviour on the grid", "", _population(comparison) + ".", ""]
    lines += [_differ_line(comparison) + ".", ""]
    if not t.differing_runs:
        return [*lines, SAME_CHUNKS, ""]
    rows = [
        [description, str(t.kinds[kind])] for kind, description in KINDS.items() if t.kinds[kind]
    ]
    lines += [*_table(["difference", "runs"], rows), "", "Smallest examples (both chunk ends):", ""]
    for kind, description in KINDS.items():
        for example in comparison.behaviour.examples[kind]:
            lines.append(f"- {description}: {_example_words(example)}")
    return [*lines, ""]


def write_markdown(comparison: Comparison, path: Path) -> None:
    """Write the markdown report with its paths relative to itself (:func:`portable_paths`);
    an unwritable path is bad input."""
    text = portable_paths(render_markdown(comparison), path.resolve().parent, Path.cwd())
    try:
        path.write_text(text)
    except OSError as exc:
        raise ChunkproofError(f"--markdown {path}: cannot write ({exc.strerror})") from None
