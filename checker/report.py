"""Verdicts (SPEC P: PROVED, VIOLATED, UNKNOWN), their JSON document and their text table."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chunkproof.checker.pictures import save_picture
from chunkproof.checker.properties import PROPERTIES
from chunkproof.checker.search import Exploration, minimal_counterexample
from chunkproof.model.counterexample import Counterexample
from chunkproof.model.errors import EXIT_OK, EXIT_UNKNOWN, EXIT_VIOLATED
from chunkproof.model.policy import Policy
from chunkproof.proofs.prover import CellVerdict

PROVED, VIOLATED, UNKNOWN = "PROVED", "VIOLATED", "UNKNOWN"

_FINDINGS = {
    "degenerate": "in the degenerate region (M < L, or a static 0 < theta < L), where the "
    "reservation alone can hold a request at T - L",
    "refused": "outside the configurations this release accepts (SPEC S1b)",
}


@dataclass
class Verdict:
    """One property's verdict over a stated range, with its minimal counterexample and the
    picture drawn beside it."""

    property: str
    status: str
    range: dict[str, Any]
    counterexample: str | None
    summary: str
    method: str
    configs: int
    violating: int
    figure: dict[str, Any] | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)
    picture: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "property": self.property,
            "name": PROPERTIES[self.property].name,
            "status": self.status,
            "range": self.range,
            "counterexample": self.counterexample,
            "picture": self.picture,
            "summary": self.summary,
            "method": self.method,
            "configs": self.configs,
            "violating_configs": self.violating,
            "figure": self.figure,
            "findings": self.findings,
        }


def exploration_verdicts(exploration: Exploration, out_dir: Path | None) -> list[Verdict]:
    """One verdict per property: VIOLATED with a minimal counterexample written under
    ``out_dir`` with its picture, or PROVED by complete enumeration of the grid; findings
    outside the range (degenerate region, refused configurations) are attached separately."""
    tally = exploration.tally
    rng = {**exploration.ranges.describe(), "configurations": tally.configs["main"]}
    if tally.configs["degenerate"] or tally.configs["refused"]:
        rng["excluded"] = {k: v for k, v in tally.configs.items() if k != "main" and v}
    verdicts = []
    for pid in exploration.properties:
        cx_path, picture, summary = _counterexample(exploration, pid, "main", out_dir)
        violating = exploration.failing(pid, "main")
        status = VIOLATED if violating else PROVED
        if status == PROVED:
            summary = _proved_summary(exploration, pid)
        verdict = Verdict(
            pid,
            status,
            rng,
            cx_path,
            summary,
            "exhaustive enumeration (networkx state graphs)",
            tally.configs["main"],
            violating,
            _figure(exploration, pid),
            picture=picture,
        )
        for cat, words in _FINDINGS.items():
            count = exploration.failing(pid, cat)
            if count:
                path, drawn, text = _counterexample(exploration, pid, cat, out_dir)
                verdict.findings.append(
                    {
                        "kind": cat,
                        "description": words,
                        "violating_configs": count,
                        "counterexample": path,
                        "picture": drawn,
                        "summary": text,
                    }
                )
        verdicts.append(verdict)
    return verdicts


def _counterexample(
    exploration: Exploration, pid: str, cat: str, out_dir: Path | None
) -> tuple[str | None, str | None, str]:
    """The minimal counterexample of ``pid`` in ``cat``: its file and picture under
    ``out_dir`` (None without one), and its summary."""
    cx = minimal_counterexample(exploration, pid, cat)
    if cx is None:
        return None, None, ""
    text = f"{cx.config.describe()}: {cx.verdict}"
    if out_dir is None:
        return None, None, text
    suffix = "" if cat == "main" else f"-{cat}"
    path, picture = save_with_picture(
        cx, exploration.policy, out_dir / exploration.policy.file_stem / f"{pid}{suffix}.json"
    )
    return path, picture, text


def save_with_picture(cx: Counterexample, policy: Policy, path: Path) -> tuple[str, str]:
    """Write the counterexample file and its picture beside it (``P1.json``, ``P1.svg``)."""
    cx.save(path)
    return str(path), str(save_picture(cx, policy, path.with_suffix(".svg")))


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
        return f"every const(b) run finishes; worst excess {cost['worst_excess']} steps"
    return f"holds on all {tally.configs['main']} configurations"


def _figure(exploration: Exploration, pid: str) -> dict[str, Any] | None:
    if pid == "P2":
        return dict(exploration.tally.progress_budgets)
    if pid == "P7":
        return dict(exploration.tally.cost)
    return None


def exit_status(verdicts: list[Verdict]) -> int:
    """SPEC CLI: 1 if a property is violated, else 3 if one is unknown, else 0."""
    statuses = {v.status for v in verdicts}
    if VIOLATED in statuses:
        return EXIT_VIOLATED
    if UNKNOWN in statuses:
        return EXIT_UNKNOWN
    return EXIT_OK


def verdicts_document(
    policy: Policy, verdicts: list[Verdict], extra: dict[str, Any]
) -> dict[str, Any]:
    """The ``--json`` document of SPEC CLI."""
    return {"policy": policy.name, "verdicts": [v.to_dict() for v in verdicts], **extra}


def render_table(verdicts: list[Verdict]) -> str:
    """One row per property (with its counterexample below), then the findings outside the
    verdict range."""
    lines = []
    for v in verdicts:
        name = f"{v.property} {PROPERTIES[v.property].name}"
        unit = "cells" if v.method == "z3" else "configs"
        scope = f"{v.violating} of {v.configs} {unit}" if v.status == VIOLATED else ""
        lines.append(f"  {name:<19} {v.status:<9} {scope}")
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


def proof_verdicts(
    cell_verdicts: list[CellVerdict],
    properties: tuple[str, ...],
    rng: dict[str, Any],
    out_dir: Path | None,
    policy: Policy,
) -> list[Verdict]:
    """One verdict per property from the prover's cells: VIOLATED if a cell is (with the
    smallest counterexample: T, then B, L, M, then the trace), else UNKNOWN if a cell is, else
    PROVED; the summary says which method proved how many cells."""
    verdicts = []
    for pid in properties:
        cells = [v for v in cell_verdicts if v.property == pid]
        violated = [v for v in cells if v.status == VIOLATED]
        unknown = [v for v in cells if v.status == UNKNOWN]
        methods: dict[str, int] = {}
        for v in cells:
            if v.status == PROVED:
                methods[v.method] = methods.get(v.method, 0) + 1
        figure = {
            "cells": len(cells),
            "proved_by": methods,
            "violated_cells": [v.cell.describe() for v in violated],
            "unknown_cells": [{**v.cell.describe(), "why": v.detail} for v in unknown],
            "certificates": str(out_dir / policy.file_stem) if out_dir and methods else None,
        }
        status = VIOLATED if violated else UNKNOWN if unknown else PROVED
        path, picture, summary = None, None, ""
        with_cx = [v for v in violated if v.counterexample is not None]
        if with_cx:
            best = min(with_cx, key=_cx_rank)
            cx = best.counterexample
            assert cx is not None
            summary = f"{cx.config.describe()}: {cx.verdict} ({best.detail})"
            if out_dir is not None:
                target = out_dir / policy.file_stem / f"{pid}-prove.json"
                path, picture = save_with_picture(cx, policy, target)
        elif violated:
            why = violated[0].detail
            summary = f"violated in {len(violated)} of {len(cells)} cells ({why})"
        elif unknown:
            summary = f"{len(unknown)} of {len(cells)} cells undecided: {unknown[0].detail}"
        else:
            how = ", ".join(f"{m} {n}" for m, n in sorted(methods.items()))
            summary = f"proved on all {len(cells)} cells ({how}); certificates re-checked"
        verdicts.append(
            Verdict(
                pid,
                status,
                rng,
                path,
                summary,
                "z3",
                len(cells),
                len(violated),
                figure,
                picture=picture,
            )
        )
    return verdicts


def _cx_rank(v: CellVerdict) -> tuple[int, ...]:
    cx = v.counterexample
    assert cx is not None
    cfg = cx.config
    return (cfg.T, cfg.block, cfg.lookahead, cfg.max_sched, len(cx.steps), int(cfg.drop))


def combine(explored: list[Verdict], proved: list[Verdict]) -> list[Verdict]:
    """``check``: one row per property from both engines. The row is VIOLATED if either engine
    found a violation, else UNKNOWN if the prover could not decide, else PROVED; its
    counterexample (and picture) is the explorer's (smallest), else the prover's."""
    by_pid = {v.property: v for v in proved}
    rows = []
    for ex in explored:
        pr = by_pid.get(ex.property)
        if pr is None:
            rows.append(ex)
            continue
        statuses = {ex.status, pr.status}
        status = VIOLATED if VIOLATED in statuses else UNKNOWN if UNKNOWN in statuses else PROVED
        rows.append(
            Verdict(
                ex.property,
                status,
                {"explorer": ex.range, "prover": pr.range},
                ex.counterexample or pr.counterexample,
                f"explorer: {ex.status} ({ex.summary}); prover: {pr.status} ({pr.summary})",
                "exhaustive enumeration + z3",
                ex.configs,
                ex.violating,
                {"explorer": ex.figure, "prover": pr.figure},
                ex.findings,
                ex.picture if ex.counterexample else pr.picture,
            )
        )
    return rows
