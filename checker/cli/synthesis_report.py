"""What ``chunkproof synthesize`` prints (SPEC Y): the space and the objective, every round, the
result with the candidate's holes in words, what it keeps and how it stands against the base,
and each conflict with its witnesses, with the configurations where the conflict holds for
every policy, not only for the template's candidates (:func:`inherent_ends`)."""

from __future__ import annotations

from typing import Any

from chunkproof.checker.engines.verdicts import Verdict
from chunkproof.checker.runs.synthesis import FOUND, Round, Standing, Synthesis, round_line
from chunkproof.model.holes import HOLES, actions
from chunkproof.model.policy import Policy
from chunkproof.proofs.refutation import Witness
from chunkproof.spec.properties import ends_breaking
from chunkproof.spec.request import budget_bounds

OBJECTIVE = (
    "least cost among the candidates that pass: fewest configurations of the grid failing each "
    "property no longer asked (P5, P6, P4, P3 in that order), then fewest const(b) runs left "
    "unfinished, then fewest steps on the runs the base and the candidate both finish (P7), "
    "then the least change from the base (holes away from 0, then their sum); candidates are "
    "tried least change first"
)
"""SPEC Y4's objective (:func:`~chunkproof.checker.runs.synthesis.cost`), in words."""


def space_line(base: Policy) -> str:
    """The template's space in one line."""
    holes = ", ".join(f"{h.name} 0-{h.size - 1}" for h in HOLES)
    count = 1
    for hole in HOLES:
        count *= hole.size
    return f"space: {base.name} with holes {holes} ({count} candidates; SPEC Y1)"


def inherent_ends(policy: Policy, witness: Witness, pids: list[str], window: str) -> str | None:
    """When ``witness`` is a P1 witness stuck where it was admitted (a state every policy
    reaches) and every chunk end from there under the largest budget breaks one of ``pids``:
    the ends with what each breaks, in words; else None (SPEC Y3)."""
    cx = witness.cx
    cfg = cx.config
    if cx.property != "P1" or cx.steps[-1].c != cfg.start or cfg.has_items:
        return None
    others = tuple(pid for pid in pids if pid not in ("P0", "P1"))
    largest = budget_bounds(cfg, None)[1]
    ends = ends_breaking(policy, cfg, cfg.start, largest, others, window)
    if not ends or not all(ends.values()):
        return None
    listed = ", ".join(f"{e} breaks {'/'.join(broken)}" for e, broken in ends.items())
    return (
        f"no policy at all keeps P1 with {', '.join(others)} at {cfg.describe()}: from "
        f"c={cfg.start} with budget {largest} every chunk end breaks one ({listed})"
    )


def _witness_line(w: Witness) -> str:
    kind = " (where the base keeps it)" if w.regression else ""
    return f"    {w.cx.property}{kind} at {w.cx.config.describe()}: {w.cx.verdict}"


def _standing_lines(standing: Standing, base: Policy, wanted: list[str]) -> list[str]:
    lines = [f"  on the grid, configurations failing each property ({base.name} -> candidate):"]
    for pid in wanted:
        before, after, new = standing.failing[pid]
        lines.append(f"    {pid}: {before} -> {after} ({new} where {base.name} holds)")
    a, b = standing.steps
    lines.append(
        f"  P7 over the const(b) runs both finish: {a} -> {b} steps (ideal {standing.ideal}); "
        f"runs left unfinished: {standing.unfinished[0]} -> {standing.unfinished[1]}"
    )
    return lines


def _verdict_lines(verdicts: list[Verdict]) -> list[str]:
    return [f"    {v.property} {v.status}: {v.summary}" for v in verdicts]


def synthesis_lines(result: Synthesis, wanted: list[str], checked: list[str]) -> list[str]:
    """The report (module docstring); ``checked`` names where candidates were checked."""
    base = result.base
    lines = [
        f"chunkproof synthesize {base.name} ({base.summary})",
        space_line(base),
        f"objective: {OBJECTIVE}",
        *checked,
        "",
        *[round_line(r) for r in result.rounds],
        "",
    ]
    policy = result.policy
    if result.status == FOUND and policy is not None and result.candidate is not None:
        lines.append(f"FOUND {policy.name} in {len(result.rounds)} rounds ({result.seconds:.0f} s)")
        if not result.keeps_all:
            lines.append(
                f"  it keeps {', '.join(result.kept)} of the {len(result.wanted)} properties "
                "asked: no candidate of the space keeps them all (UNSAT: the conflicts below)"
            )
        lines.append(
            "  the least-cost candidate of the space: every candidate consistent with the "
            f"witnesses was checked ({result.tried})"
            if result.optimal
            else f"  the best of the {result.tried} candidates checked: the round or time limit "
            "came first, so cheaper candidates may remain"
        )
        lines += [f"  {line}" for line in actions(result.candidate)]
        lines.append(f"  kept: {', '.join(result.kept) or 'none'}")
        lines += _verdict_lines(result.verdicts)
    else:
        lines.append(f"{result.status} after {len(result.rounds)} rounds ({result.seconds:.0f} s)")
        if result.candidate is not None:
            lines.append(f"  last candidate: {' '.join(actions(result.candidate))}")
            lines += _verdict_lines(result.verdicts)
    if result.guarded:
        lines.append(
            f"  guarded: {', '.join(result.guarded)}: no configuration of the grid where "
            f"{base.name} keeps it and the candidate breaks it (the prover does not judge these)"
        )
    for pid, w in result.broken_by_all.items():
        lines.append(f"  {pid} is broken by every candidate, {base.name} included:")
        lines.append(_witness_line(w))
    if result.released:
        lines.append(f"  no longer asked: {', '.join(result.released)}")
    shown: list[Witness] = []
    for conflict in result.conflicts:
        head = f"{', '.join(conflict.properties)} conflict: {conflict.outcome}"
        if [id(w) for w in conflict.witnesses] == [id(w) for w in shown]:
            lines.append(f"  then: {head}")
            continue
        lines.append(f"  {head}; no candidate refutes together:")
        lines += [_witness_line(w) for w in conflict.witnesses]
        shown = conflict.witnesses
    lines += [f"  {note}" for note in result.notes]
    inherent = {
        found
        for conflict in result.conflicts
        for w in conflict.witnesses
        if (found := inherent_ends(base, w, conflict.properties, "relaxed"))
    }
    lines += [f"  {line}" for line in sorted(inherent)]
    standing = _last_standing(result.rounds)
    if standing is not None:
        lines += _standing_lines(standing, base, wanted)
    if policy is not None:
        lines.append(f"check it: chunkproof check {policy.name}")
    return lines


def _last_standing(rounds: list[Round]) -> Standing | None:
    return rounds[-1].standing if rounds else None


def _witness_dict(w: Witness, path: str | None) -> dict[str, Any]:
    return {
        "property": w.cx.property,
        "config": w.cx.config.to_dict(),
        "verdict": w.cx.verdict,
        "regression": w.regression,
        "file": path,
    }


def synthesis_document(result: Synthesis, files: dict[int, str]) -> dict[str, Any]:
    """The ``--json`` document; ``files`` maps a witness's index to its counterexample file."""
    index = {id(w): i for i, w in enumerate(_witnesses(result))}

    def witness(w: Witness) -> dict[str, Any]:
        return _witness_dict(w, files.get(index[id(w)]))

    standing = _last_standing(result.rounds)
    policy = result.policy
    return {
        "base": result.base.name,
        "status": result.status,
        "candidate": None if policy is None else policy.name,
        "holes": result.candidate,
        "objective": OBJECTIVE,
        "optimal": result.optimal,
        "keeps_all": result.keeps_all,
        "candidates_checked": result.tried,
        "kept": result.kept,
        "guarded": result.guarded,
        "released": result.released,
        "window": result.window,
        "notes": result.notes,
        "rounds": [
            {
                "round": r.number,
                "holes": r.candidate,
                "seconds": round(r.seconds, 3),
                "met": [{"source": m.source, **witness(m.witness)} for m in r.met],
            }
            for r in result.rounds
        ],
        "broken_by_every_candidate": {p: witness(w) for p, w in result.broken_by_all.items()},
        "conflicts": [
            {"outcome": c.outcome, "witnesses": [witness(w) for w in c.witnesses]}
            for c in result.conflicts
        ],
        "verdicts": [v.to_dict() for v in result.verdicts],
        "standing": None
        if standing is None
        else {
            "failing": {
                p: dict(zip(("base", "candidate", "new"), v, strict=True))
                for p, v in standing.failing.items()
            },
            "steps_both_finish": list(standing.steps),
            "ideal_steps": standing.ideal,
            "unfinished_runs": list(standing.unfinished),
        },
        "seconds": round(result.seconds, 3),
    }


def _witnesses(result: Synthesis) -> list[Witness]:
    """Every witness the search met, in the order it met them."""
    return [m.witness for r in result.rounds for m in r.met]
