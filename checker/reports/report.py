"""Verdicts shown (SPEC P; :mod:`~chunkproof.checker.engines.verdicts`): an exploration turned
into one verdict per property with its counterexample file and picture, their JSON document
and their text table.

A verdict states its range: every input of SPEC S1 with its set or fixed value
(:meth:`chunkproof.spec.space.Space.describe`), how many configurations it covered and which it
excluded (refused by the release, in the degenerate region), so no PROVED reads wider than it
is. A range with no configuration in scope is never PROVED (EMPTY, exit status 2).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from chunkproof.checker.engines.search import Exploration, minimal_counterexample
from chunkproof.checker.engines.verdicts import EMPTY, PROVED, UNKNOWN, VIOLATED, Verdict
from chunkproof.model.counterexample import Counterexample
from chunkproof.model.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNKNOWN, EXIT_VIOLATED
from chunkproof.model.policy import Policy
from chunkproof.spec.properties import PROPERTIES, property_scope

Save = Callable[[Counterexample, str], tuple[str, str]]
"""Writes a counterexample under a name (``P1``) with its picture; their final paths."""

FINDINGS = {
    "degenerate": "in the degenerate region (M < L, or a static 0 < theta < L), where the "
    "reservation alone can hold a request at T - L",
    "refused": "outside the configurations this release accepts (SPEC S1b)",
}


def exploration_verdicts(
    exploration: Exploration, rng: dict[str, Any], save: Save | None
) -> list[Verdict]:
    """One verdict per property: VIOLATED with a minimal counterexample written by ``save``
    with its picture (``None``: a run that keeps no files), PROVED by complete enumeration of
    the range's configurations, or EMPTY when the range holds none inside the verdict's scope;
    findings outside it (degenerate region, refused configurations) are attached separately."""
    tally = exploration.tally
    verdicts = []
    for pid in exploration.properties:
        cx, path, picture, summary = _counterexample(exploration, pid, "main", save)
        violating = exploration.failing(pid, "main")
        scope = property_scope(exploration.policy, pid)
        main = tally.configs["main"] if scope is None else tally.scoped.get((pid, "main"), 0)
        if violating:
            status = VIOLATED
        elif main:
            status, summary = PROVED, _proved_summary(exploration, pid)
        elif scope is not None and tally.configs["main"]:
            status = EMPTY
            summary = f"no configuration of the range is in its scope ({scope.words})"
        else:
            held = _held(tally.configs, exploration.model.unoffered)
            status, summary = EMPTY, f"no configuration in range ({held})"
        verdict = Verdict(
            pid,
            status,
            rng,
            path,
            _with_figure(exploration, pid, summary) if violating else summary,
            "exhaustive enumeration (breadth-first, every reachable state)",
            main,
            violating,
            _figure(exploration, pid),
            picture=picture,
            witness=cx,
        )
        for cat, words in FINDINGS.items():
            count = exploration.failing(pid, cat)
            if count:
                _, found, drawn, text = _counterexample(exploration, pid, cat, save)
                verdict.findings.append(
                    {
                        "kind": cat,
                        "description": words,
                        "violating_configs": count,
                        "counterexample": found,
                        "picture": drawn,
                        "summary": text,
                    }
                )
        verdicts.append(verdict)
    return verdicts


def _held(configs: dict[str, int], unoffered: int) -> str:
    """What a range held when none of it is in scope."""
    return (
        f"{configs['refused']} configurations the release refuses, "
        f"{configs['degenerate']} in the degenerate region, "
        f"{unoffered} offered no budget of the --budget range"
    )


def _counterexample(
    exploration: Exploration, pid: str, cat: str, save: Save | None
) -> tuple[Counterexample | None, str | None, str | None, str]:
    """The minimal counterexample of ``pid`` in ``cat``, its file and picture as ``save`` wrote
    them (None without one), and its summary."""
    cx = minimal_counterexample(exploration, pid, cat)
    if cx is None:
        return None, None, None, ""
    text = f"{cx.config.describe()}: {cx.verdict}"
    if save is None:
        return cx, None, None, text
    suffix = "" if cat == "main" else f"-{cat}"
    path, picture = save(cx, f"{pid}{suffix}")
    return cx, path, picture, text


def _proved_summary(exploration: Exploration, pid: str) -> str:
    tally = exploration.tally
    if pid == "P2":
        b = tally.progress_budgets
        return (
            f"b* <= {b['max']} everywhere: b* = B in {b['at_block']} configs, below B in "
            f"{b['below_block']}, above B in {b['above_block']}"
        )
    if pid == "P7":
        cost = tally.cost
        return f"all {cost['runs']} const(b) runs finish; worst excess {cost['worst_excess']} steps"
    scope = property_scope(exploration.policy, pid)
    if scope is None:
        return f"holds on all {tally.configs['main']} configurations"
    inside = tally.scoped.get((pid, "main"), 0)
    outside = tally.configs["main"] - inside
    return (
        f"holds on all {inside} configurations in its scope ({scope.words}); "
        f"the other {outside} of the range are not judged"
    )


def _with_figure(exploration: Exploration, pid: str, summary: str) -> str:
    """A violated P2 or P7 row also states its figure."""
    cost = exploration.tally.cost
    if pid == "P7":
        return (
            f"{cost['stuck_runs']} of {cost['runs']} const(b) runs never finish "
            f"({cost['stuck_runs_below_block']} with b < B); e.g. {summary}"
        )
    return summary


def _figure(exploration: Exploration, pid: str) -> dict[str, Any] | None:
    if pid == "P2":
        return dict(exploration.tally.progress_budgets)
    if pid == "P7":
        return dict(exploration.tally.cost)
    return None


def exit_status(verdicts: list[Verdict]) -> int:
    """SPEC CLI: 1 if a property is violated, else 3 if one is unknown, else 2 if no verdict
    covers any configuration, else 0."""
    statuses = {v.status for v in verdicts}
    if VIOLATED in statuses:
        return EXIT_VIOLATED
    if UNKNOWN in statuses:
        return EXIT_UNKNOWN
    if statuses == {EMPTY}:
        return EXIT_BAD_INPUT
    return EXIT_OK


def verdicts_document(
    policy: Policy, verdicts: list[Verdict], extra: dict[str, Any]
) -> dict[str, Any]:
    """The ``--json`` document of SPEC CLI, with what the model fixes (:attr:`~chunkproof.
    model.policy.Policy.fixed`)."""
    return {
        "policy": policy.name,
        "verdicts": [v.to_dict() for v in verdicts],
        "fixed": judged_fixed(policy, verdicts),
        **branches_document(policy),
        **extra,
    }


def judged_fixed(policy: Policy, verdicts: Sequence[Verdict]) -> list[str]:
    """What the verdicts fix: the policy's fixed inputs, then the environment of each property
    judged that has one (:attr:`~chunkproof.spec.properties.Property.environment`)."""
    judged = {v.property for v in verdicts}
    environments = [p.environment for pid, p in PROPERTIES.items() if pid in judged]
    return [*policy.fixed, *(e for e in environments if e)]


def fixed_line(fixed: Sequence[str], label: str = "fixed") -> str:
    """The report line naming every input the model fixes."""
    return f"{label}: {'; '.join(fixed) if fixed else 'nothing beyond the range'}"


def branch_lines(policy: Policy) -> list[str]:
    """For a policy read from source, its ``schedule()``'s branches that set a chunk, move
    requests or end a loop (SPEC X3): how many the model runs, holds fixed or leaves out,
    then each one changed since the release compared with and each one not modelled."""
    if not policy.branches:
        return []
    counts = Counter(b.status for b in policy.branches)
    tally = ", ".join(f"{counts[s]} {s}" for s in ("modelled", "held fixed", "not modelled"))
    lines = [
        f"schedule(): {len(policy.branches)} branches set a chunk, move requests or end a "
        f"loop: {tally}"
    ]
    changed = [b for b in policy.branches if b.changed]
    if policy.branches_since is not None:
        lines.append(f"  new or changed since vLLM {policy.branches_since}: {len(changed)}")
        lines += [f"    {b.describe()}" for b in changed]
    missing = [b for b in policy.branches if b.status == "not modelled" and not b.changed]
    if missing:
        lines.append(f"  not modelled: {len(missing)}")
        lines += [f"    {b.describe()}" for b in missing]
    return lines


def branches_document(policy: Policy) -> dict[str, Any]:
    """:func:`branch_lines` for ``--json``: the release compared with and every branch."""
    if not policy.branches:
        return {}
    rows = [
        {
            "line": b.line,
            "test": b.test,
            "effects": list(b.effects),
            "status": b.status,
            "why": b.why,
            "changed": b.changed,
        }
        for b in policy.branches
    ]
    return {"schedule_branches": {"since": policy.branches_since, "branches": rows}}


def render_table(verdicts: list[Verdict]) -> str:
    """One row per property (with its counterexample below), then the findings outside the
    verdict range."""
    lines = []
    for v in verdicts:
        name = f"{v.property} {PROPERTIES[v.property].name}"
        unit = "cells" if v.method == "z3" else "configs"
        scope = f"{v.violating} of {v.configs} {unit}" if v.status == VIOLATED else ""
        lines.append(f"  {name:<19} {v.status:<9} {scope}".rstrip())
        lines.append(f"      {v.summary}")
        if v.counterexample:
            lines.append(f"      counterexample: {v.counterexample}")
        if v.picture:
            lines.append(f"      picture: {v.picture}")
    findings = [(v.property, f) for v in verdicts for f in v.findings]
    if findings:
        lines += ["", "findings outside the verdict range:"]
        for pid, f in findings:
            lines.append(
                f"  {pid} {PROPERTIES[pid].name} fails in {f['violating_configs']} "
                f"configs {f['description']}"
            )
            lines.append(f"      e.g. {f['summary']}")
            if f["counterexample"]:
                lines.append(f"      counterexample: {f['counterexample']}")
            if f["picture"]:
                lines.append(f"      picture: {f['picture']}")
    return "\n".join(lines)


def range_lines(rng: dict[str, Any]) -> list[str]:
    """A range as text lines: every input with its set or fixed value (a union shows one line
    per grid)."""
    budget = rng.get("budget", "1-M")
    if "union" in rng:
        lines = []
        for grid in rng["union"]:
            label = grid.get("grid") or "grid"
            rest = ", ".join(f"{k}={v}" for k, v in grid.items() if k != "grid")
            lines.append(f"  {label}: {rest}, budget={budget}")
        return lines
    return ["  " + ", ".join(f"{k}={v}" for k, v in rng.items())]


def combine(explored: list[Verdict], proved: list[Verdict]) -> list[Verdict]:
    """``check``: one row per property from both engines. The row is VIOLATED if either engine
    found a violation, else UNKNOWN if one could not decide, else PROVED if either covered a
    configuration, else EMPTY; its counterexample (and picture) is the explorer's (smallest),
    else the prover's, and so are its counts (cells, when only the prover found one)."""
    by_pid = {v.property: v for v in proved}
    rows = []
    for ex in explored:
        pr = by_pid.get(ex.property)
        if pr is None:
            if ex.status == VIOLATED:
                ex.summary = f"explorer: {ex.summary}; prover: not run (violated on the grid)"
            rows.append(ex)
            continue
        statuses = {ex.status, pr.status}
        status = (
            VIOLATED
            if VIOLATED in statuses
            else UNKNOWN
            if UNKNOWN in statuses
            else PROVED
            if PROVED in statuses
            else EMPTY
        )
        counted = pr if status == VIOLATED and ex.status != VIOLATED else ex
        rows.append(
            Verdict(
                ex.property,
                status,
                {"explorer": ex.range, "prover": pr.range},
                ex.counterexample or pr.counterexample,
                f"explorer: {ex.status} ({ex.summary}); prover: {pr.status} ({pr.summary})",
                pr.method if counted is pr else "exhaustive enumeration + z3",
                counted.configs,
                counted.violating,
                {"explorer": ex.figure, "prover": pr.figure},
                ex.findings,
                ex.picture if ex.counterexample else pr.picture,
            )
        )
    return rows
