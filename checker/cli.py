"""The ``chunkproof`` command line (SPEC CLI): parse, dispatch, print, and exit with the
contract's status (0 holds, 1 violated, 2 bad input, 3 unknown or incomplete)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from chunkproof.checker.compare import Comparison, Side, compare_behaviour, counterexample_dirs
from chunkproof.checker.compare import exit_status as compare_exit_status
from chunkproof.checker.compare_report import (
    compare_command,
    document,
    render_text,
    write_markdown,
)
from chunkproof.checker.conform import DIFFERENT, EQUAL, UNKNOWN, conform
from chunkproof.checker.conform import describe as describe_conformance
from chunkproof.checker.graph_picture import save_graph
from chunkproof.checker.pictures import check_picture_suffix, save_picture
from chunkproof.checker.progress import Progress
from chunkproof.checker.properties import PROPERTIES, parse_property_ids
from chunkproof.checker.ranges import SMALL_GRID, Ranges, compact, parse_drop, parse_int_set
from chunkproof.checker.report import (
    Verdict,
    combine,
    exit_status,
    exploration_verdicts,
    proof_verdicts,
    render_table,
    verdicts_document,
)
from chunkproof.checker.repro import SOURCE_VARIABLE, write_repro
from chunkproof.checker.search import explore
from chunkproof.checker.traces import violates
from chunkproof.model.builtin import ALIASES, builtin_policies
from chunkproof.model.config import Config
from chunkproof.model.counterexample import Counterexample, replay_steps
from chunkproof.model.errors import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_UNKNOWN,
    EXIT_VIOLATED,
    ChunkproofError,
)
from chunkproof.model.loading import recorded_policy, resolve_policy
from chunkproof.model.policy import Policy
from chunkproof.model.source_policy import names_source
from chunkproof.model.trajectory import run
from chunkproof.model.vllm_source import parse_overrides
from chunkproof.proofs.prover import PROVER_PROPERTIES, Settings, prove_range
from chunkproof.proofs.system import Cell, Scope

DEFAULT_OUT = Path("chunkproof-out")
MAX_CELLS = 300_000_000


class _Parser(argparse.ArgumentParser):
    """argparse with the contract's one-line error and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"chunkproof: error: {message} (see `{self.prog} --help`)\n")


def _at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum``."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be at least {minimum}")
        return value

    return convert


_positive = _at_least(1)
_natural = _at_least(0)


def _add_ranges(p: argparse.ArgumentParser, properties: bool = True) -> None:
    g = p.add_argument_group("ranges (default: the small exhaustive grid)")
    g.add_argument("--block", help="block sizes B, e.g. 4,8,16 or 16-64")
    g.add_argument("--lookahead", help="lookaheads L, e.g. 0-8")
    g.add_argument("--prompt", help="prompt lengths T = P, e.g. 1-48")
    g.add_argument("--max-sched", help="max scheduled tokens M, e.g. 1-32")
    g.add_argument("--budget", help="narrow the per-step budgets to lo-hi within 1..M")
    g.add_argument("--drop", help="EAGLE block drop: off, on or both")
    g.add_argument("--threshold", help="long-prefill thresholds theta, e.g. 0,16")
    g.add_argument("--hash-block", help="hash block sizes H (each must divide B)")
    if not properties:
        return
    g.add_argument(
        "--property",
        help=f"properties to check, e.g. P1,P3 (default all of {','.join(PROPERTIES)})",
    )
    g.add_argument(
        "--window",
        choices=("relaxed", "strict"),
        default="relaxed",
        help="form of P5 (default relaxed)",
    )


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"folder for counterexample files (default {DEFAULT_OUT})",
    )
    p.add_argument(
        "--jobs",
        type=_positive,
        default=os.cpu_count() or 1,
        help="worker processes (default: the number of CPUs)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="chunkproof",
        description="Formal model and exhaustive checker of "
        "vLLM's prefill chunk split (Mamba align) and MTP lookahead reservation.",
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )

    p = sub.add_parser("policies", help="list the built-in policies")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("trace", help="the chunks one request gets under given budgets")
    p.add_argument("policy", metavar="POLICY")
    p.add_argument("--block", type=_positive, required=True)
    p.add_argument("--lookahead", type=_natural, default=0)
    p.add_argument("--prompt", type=_positive, required=True)
    p.add_argument("--tokens", type=_positive, help="num_tokens T (default: the prompt)")
    budgets = p.add_mutually_exclusive_group()
    budgets.add_argument("--budget", type=_positive, help="const(b)")
    budgets.add_argument("--budgets", help="b1,b2,...: one per step, the last repeats")
    p.add_argument("--drop", action="store_true", help="EAGLE block drop on")
    p.add_argument("--max-sched", type=_positive, help="M (default: the largest budget)")
    p.add_argument("--threshold", type=_natural, default=0)
    p.add_argument("--hash-block", type=_positive)
    p.add_argument("--hash-lookahead", type=_natural, default=0, help="L_h (0.33)")
    p.add_argument("--start", type=_natural, default=0, help="admission start c0")
    p.add_argument("--json", action="store_true")

    for name, text in (
        ("explore", "exhaustively explore a grid of small configurations"),
        ("check", "check a policy (default vllm-latest); one row per property"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument(
            "policy",
            metavar="POLICY",
            nargs="?" if name == "check" else None,
            default="vllm-latest" if name == "check" else None,
        )
        _add_ranges(p)
        _add_run_options(p)
        if name == "check":
            p.add_argument("--timeout", type=_positive, default=20, help="seconds per query")

    p = sub.add_parser("replay", help="re-run a counterexample file")
    p.add_argument("file", type=Path, metavar="FILE")
    p.add_argument("--policy", help="replay on this policy instead of the recorded one")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("prove", help="prove properties with Z3 over a range, or refute them")
    p.add_argument("policy", metavar="POLICY")
    _add_ranges(p)
    _add_run_options(p)
    p.add_argument("--unbounded", action="store_true", help="no upper bound on T and M")
    p.add_argument("--timeout", type=_positive, default=20, help="seconds per solver query")

    _add_conform_parser(sub)

    _add_compare_parser(sub)
    _add_repro_parser(sub)
    _add_show_parser(sub)
    for name in ("trace", "explore", "check", "prove", "replay", "conform", "compare"):
        sub.choices[name].add_argument(
            "--compose",
            metavar="Cn",
            help="for real vLLM source: the schedule() composition (C1-C9) its methods run in "
            "(default: that of its release)",
        )
        sub.choices[name].add_argument(
            "--set",
            dest="overrides",
            action="append",
            default=[],
            metavar="self.NAME=VALUE",
            help="for real vLLM source: a value for an input the model does not have (repeatable)",
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = _HANDLERS[args.command]
    try:
        return handler(args)
    except ChunkproofError as exc:
        print(f"chunkproof: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("chunkproof: interrupted", file=sys.stderr)
        return EXIT_UNKNOWN
    except BrokenPipeError:
        # The reader of our output went away (`| head`): not an error of ours.
        sys.stderr.close()
        return EXIT_OK


def _emit(document: dict[str, Any]) -> None:
    print(json.dumps(document, indent=2))


def _source(policy: Policy) -> dict[str, str | None]:
    """The sha256 of the policy's vLLM source, recorded in every result (``None``: built-in)."""
    return {"source_sha256": policy.source_sha256}


# -- policies -----------------------------------------------------------------------------------


def _cmd_policies(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = [
        {
            "name": p.name,
            "split": p.split_variant,
            "reservation": p.reservation_variant,
            "composition": p.composition,
            "releases": list(p.releases),
            "summary": p.summary,
        }
        for p in builtin_policies()
    ]
    if args.json:
        _emit({"policies": rows, "aliases": ALIASES})
        return EXIT_OK
    for row in rows:
        releases = ", ".join(row["releases"]) or "(proposed)"
        print(
            f"{row['name']:<20} {row['split']:<10} {row['reservation'] or '-':<13} "
            f"{row['composition']:<4} {releases}"
        )
    for alias, target in ALIASES.items():
        print(f"{alias:<20} alias of {target}")
    return EXIT_OK


def _policy(text: str, args: argparse.Namespace) -> Policy:
    """POLICY with ``--compose`` and ``--set`` (an error unless it is real vLLM source)."""
    return resolve_policy(text, args.compose, parse_overrides(args.overrides))


def _policy_pair(first: str, second: str, args: argparse.Namespace) -> tuple[Policy, Policy]:
    """conform's and compare's two policies: ``--compose`` and ``--set`` apply to whichever of
    them is real vLLM source, and are an error when neither is."""
    compose, overrides = args.compose, parse_overrides(args.overrides)
    sources = [names_source(text) for text in (first, second)]
    if (compose or overrides) and not any(sources):
        option = "--compose" if compose else "--set"
        raise ChunkproofError(
            f"{option} applies to real vLLM source, and neither {first!r} nor {second!r} is"
        )

    def resolve(text: str, source: bool) -> Policy:
        return resolve_policy(text, compose, overrides) if source else resolve_policy(text)

    return resolve(first, sources[0]), resolve(second, sources[1])


# -- trace --------------------------------------------------------------------------------------


def _cmd_trace(args: argparse.Namespace) -> int:
    policy = _policy(args.policy, args)
    if args.budgets is not None:
        budgets = list(_budget_list(args.budgets))
    elif args.budget is not None:
        budgets = [args.budget]
    elif args.max_sched is not None:
        budgets = [args.max_sched]
    else:
        raise ChunkproofError("trace needs --budget, --budgets or --max-sched")
    cfg = Config(
        block=args.block,
        prompt=args.prompt,
        tokens=args.tokens or 0,
        max_sched=args.max_sched or max(budgets),
        lookahead=args.lookahead,
        threshold=args.threshold,
        hash_block=args.hash_block or 0,
        drop=args.drop,
        hash_lookahead=args.hash_lookahead,
        start=args.start,
    )
    if max(budgets) > cfg.max_sched:
        raise ChunkproofError(f"a budget of {max(budgets)} exceeds --max-sched {cfg.max_sched}")
    trajectory = run(policy, cfg, budgets)
    refused = policy.accepts(cfg)
    if args.json:
        _emit(
            {
                "policy": policy.name,
                "config": cfg.to_dict(),
                "chunks": trajectory.chunks,
                "ends": trajectory.ends,
                "outcome": trajectory.outcome,
                "stuck_at": trajectory.stuck_at,
                "steps": [s.to_dict() for s in trajectory.steps],
                "source_sha256": policy.source_sha256,
                "accepted": refused is None,
                "refused_because": refused,
            }
        )
        return EXIT_OK
    print(
        f"{policy.name}: B={cfg.block} L={cfg.lookahead} P={cfg.prompt} T={cfg.T} "
        f"E={cfg.prefill_end} M={cfg.max_sched} theta={cfg.threshold} "
        f"D={'on' if cfg.drop else 'off'} c0={cfg.start}"
    )
    if refused:
        print(f"note: this release refuses the configuration ({refused})")
    print(f"{'c':>6} {'budget':>6} {'n':>6} {'split':>6} {'reserve':>7} {'chunk':>6} {'end':>6}")
    for s in trajectory.steps:
        print(
            f"{s.c:>6} {s.budget:>6} {s.n:>6} {s.split:>6} {s.reservation:>7} {s.chunk:>6} "
            f"{s.end if s.chunk else '-':>6}"
        )
    print(f"ends: {', '.join(map(str, trajectory.ends)) or '(none)'}")
    if trajectory.finished:
        print(f"finished in {len(trajectory.steps)} steps")
    else:
        print(f"stuck at c={trajectory.stuck_at}: every step yields 0")
    return EXIT_OK


def _budget_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ChunkproofError(f"--budgets: cannot read {text!r} (use 16,16,8)") from None
    if not values or min(values) < 1:
        raise ChunkproofError("--budgets must list positive integers")
    return values


# -- explore / check ----------------------------------------------------------------------------


def _ranges(args: argparse.Namespace) -> Ranges:
    changes: dict[str, Any] = {}
    for name in ("block", "lookahead", "prompt", "max_sched", "threshold", "hash_block"):
        text = getattr(args, name)
        if text is not None:
            changes[name] = parse_int_set(text, "--" + name.replace("_", "-"))
    if args.drop is not None:
        changes["drop"] = parse_drop(args.drop)
    if args.budget is not None:
        values = parse_int_set(args.budget, "--budget")
        changes["budget"] = (values[0], values[-1])
    ranges = SMALL_GRID.narrowed(**changes)
    cells = ranges.cells()
    if cells == 0:
        raise ChunkproofError(
            "the ranges contain no valid configuration (is L > T everywhere, or every --budget "
            "above M and T?)"
        )
    if cells > MAX_CELLS:
        raise ChunkproofError(
            f"the grid has about {cells:.2g} (state, budget) cells; the "
            f"explorer enumerates at most {MAX_CELLS:.0e}: narrow the ranges"
        )
    return ranges


def _properties(args: argparse.Namespace) -> tuple[str, ...]:
    if args.property is None:
        return tuple(PROPERTIES)
    try:
        return parse_property_ids(args.property)
    except ValueError as exc:
        raise ChunkproofError(f"--property: {exc}") from None


def _run_explorer(
    args: argparse.Namespace, policy: Policy, out: Path | None = None
) -> tuple[Ranges, list[Verdict], dict[str, Any]]:
    """The explorer on the RANGES of ``args``: its ranges, verdicts and what it explored;
    counterexamples under ``out`` (default ``--out``)."""
    ranges, wanted = _ranges(args), _properties(args)
    progress = Progress(f"exploring {policy.name}")
    exploration = explore(policy, ranges, wanted, args.window, args.jobs, progress.tick)
    progress.close()
    tally = exploration.tally
    explored = {
        "configs": tally.configs,
        "states": tally.states,
        "transitions": tally.transitions,
        "seconds": round(progress.elapsed, 3),
    }
    return ranges, exploration_verdicts(exploration, args.out if out is None else out), explored


def _cmd_explore(args: argparse.Namespace) -> int:
    policy = _policy(args.policy, args)
    ranges, verdicts, explored = _run_explorer(args, policy)
    if args.json:
        _emit(verdicts_document(policy, verdicts, {"explored": explored, **_source(policy)}))
    else:
        print(_header(args.command, policy, ranges, explored))
        print(render_table(verdicts))
    return exit_status(verdicts)


def _header(command: str, policy: Policy, ranges: Ranges, explored: dict[str, Any]) -> str:
    rng = ", ".join(f"{k}={v}" for k, v in ranges.describe().items())
    return (
        f"chunkproof {command} {policy.name} ({policy.summary})\n"
        f"range: {rng}\n"
        f"explored {explored['configs']['main']} configurations, {explored['states']} reachable "
        f"states, {explored['transitions']} transitions in {explored['seconds']:.1f} s\n"
    )


# -- replay -------------------------------------------------------------------------------------


def _counterexample_file(path: Path) -> Counterexample:
    """A SPEC C file, read and checked: its property must be one of P1-P7."""
    cx = Counterexample.load(path)
    if cx.property not in PROPERTIES:
        raise ChunkproofError(f"{path}: unknown property {cx.property!r} (not one of P1-P7)")
    return cx


def _cmd_replay(args: argparse.Namespace) -> int:
    cx = _counterexample_file(args.file)
    if args.policy is None and not (args.compose or args.overrides):
        policy = recorded_policy(cx)
    else:
        policy = _policy(args.policy or cx.policy, args)
    changed = cx.source_sha256 is not None and cx.source_sha256 != policy.source_sha256
    difference = replay_steps(policy, cx)
    if difference is None and not violates(
        cx.property, cx.config, cx.steps[-1], cx.window(), cx.largest_budget()
    ):
        difference = f"the last step no longer breaks {cx.property}"
    reproduces = difference is None
    if args.json:
        _emit(
            {
                "file": str(args.file),
                "policy": policy.name,
                "property": cx.property,
                "reproduces": reproduces,
                "verdict": cx.verdict,
                "difference": difference,
                "source_sha256": {"recorded": cx.source_sha256, "now": policy.source_sha256},
            }
        )
        return EXIT_OK if reproduces else EXIT_VIOLATED
    if changed:
        print(f"note: the source differs from the recorded one (sha256 {cx.source_sha256})")
    if reproduces:
        print(f"reproduces on {policy.name}: {cx.property} {cx.verdict}")
    else:
        print(f"does not reproduce on {policy.name}: {difference}")
    return EXIT_OK if reproduces else EXIT_VIOLATED


# -- prove / check -------------------------------------------------------------------------------

PRODUCTION_BLOCKS = (16, 64, 528, 800, 1600, 2096, 4416)
"""SPEC CLI: the default production range of block sizes."""


def _proof_plan(args: argparse.Namespace, defaults: bool) -> tuple[list[Cell], Scope]:
    """Cells (B, L, D) and the symbolic scope; ``defaults`` ignores the numeric RANGES (check)."""

    def pick(name: str, fallback: tuple[int, ...]) -> tuple[int, ...]:
        text = None if defaults else getattr(args, name)
        return fallback if text is None else parse_int_set(text, "--" + name.replace("_", "-"))

    blocks = pick("block", PRODUCTION_BLOCKS)
    if min(blocks) < 1:
        raise ChunkproofError("--block must be positive")
    lookaheads = pick("lookahead", tuple(range(9)))
    drops = parse_drop(args.drop) if args.drop and not defaults else (False, True)
    prompts = pick("prompt", (1, 1 << 20))
    scheds = pick("max_sched", (1, 1 << 16))
    thresholds = pick("threshold", (0, 1))
    unbounded = getattr(args, "unbounded", False)
    scope = Scope(
        prompt_max=None if unbounded else prompts[-1],
        max_sched_max=None if unbounded else scheds[-1],
        threshold=thresholds != (0,),
        prompt_min=prompts[0],
        max_sched_min=scheds[0],
    )
    cells = [Cell(b, la, d) for b in blocks for la in lookaheads for d in drops]
    return cells, scope


def _prove(
    args: argparse.Namespace,
    policy: Policy,
    wanted: tuple[str, ...],
    defaults: bool,
    out: Path | None = None,
) -> tuple[list[Verdict], dict[str, Any]]:
    """The prover on the ranges of ``args`` (``defaults``: the production range);
    certificates and counterexamples under ``out`` (default ``--out``)."""
    out = args.out if out is None else out
    cells, scope = _proof_plan(args, defaults)
    pids = tuple(p for p in wanted if p in PROVER_PROPERTIES)
    settings = Settings(policy, scope, args.window, args.timeout * 1000, out, not defaults)
    progress = Progress(f"proving {policy.name}")
    results = prove_range(settings, cells, pids, args.jobs, progress.tick)
    progress.close()
    verdicts = proof_verdicts(results, pids, _proof_range(cells, scope), out, policy)
    return verdicts, {"cells": len(cells), "seconds": round(progress.elapsed, 3)}


def _proof_range(cells: list[Cell], scope: Scope) -> dict[str, Any]:
    """The range of the prover's cells and symbolic scope, as stated in a verdict."""
    return {
        "block": compact(tuple(sorted({c.block for c in cells}))),
        "lookahead": compact(tuple(sorted({c.lookahead for c in cells}))),
        "drop": "both" if len({c.drop for c in cells}) == 2 else str(cells[0].drop).lower(),
        **scope.describe(Cell(1, 0, False)),
        "threshold": "0 or >= max(L, 1)" if scope.threshold else "0",
        "prompt": f"{scope.prompt_min}-{scope.prompt_max or 'inf'} (and >= max(L, 1))",
        "max_sched": f"{scope.max_sched_min}-{scope.max_sched_max or 'inf'} (and >= max(L, 1))",
    }


def _cmd_prove(args: argparse.Namespace) -> int:
    policy = _policy(args.policy, args)
    wanted = _properties(args)
    if not set(wanted) & set(PROVER_PROPERTIES):
        raise ChunkproofError(
            f"the prover decides {', '.join(PROVER_PROPERTIES)}; P2 and P7 are figures of "
            "`chunkproof explore`"
        )
    verdicts, run = _prove(args, policy, wanted, defaults=False)
    if args.json:
        _emit(verdicts_document(policy, verdicts, {"proved": run, **_source(policy)}))
    else:
        print(f"chunkproof prove {policy.name} ({policy.summary})")
        rng = verdicts[0].range if verdicts else {}
        print("range: " + ", ".join(f"{k}={v}" for k, v in rng.items()))
        print(f"{run['cells']} cells (B, L, D) in {run['seconds']:.1f} s\n")
        print(render_table(verdicts))
    return exit_status(verdicts)


def _check_run(
    args: argparse.Namespace, policy: Policy, prove: bool, out: Path
) -> tuple[Ranges, list[Verdict], dict[str, Any]]:
    """SPEC CLI ``check``: the explorer on the RANGES and, with ``prove``, the prover on the
    default production range, one verdict per property (:func:`combine`); files under ``out``.
    Returns the explorer's ranges, the verdicts and what each engine did."""
    ranges, verdicts, explored = _run_explorer(args, policy, out)
    if not prove:
        return ranges, verdicts, {"explored": explored}
    proved, run = _prove(args, policy, _properties(args), defaults=True, out=out)
    return ranges, combine(verdicts, proved), {"explored": explored, "proved": run}


def _cmd_check(args: argparse.Namespace) -> int:
    """The explorer on the small grid plus the prover on the default production range."""
    policy = _policy(args.policy, args)
    ranges, verdicts, engines = _check_run(args, policy, prove=True, out=args.out)
    explored, run = engines["explored"], engines["proved"]
    if args.json:
        _emit(verdicts_document(policy, verdicts, {**engines, **_source(policy)}))
    else:
        print(f"chunkproof check {policy.name} ({policy.summary})")
        print(
            f"explorer: {explored['configs']['main']} configurations of the small grid "
            f"({', '.join(f'{k}={v}' for k, v in ranges.describe().items())})"
        )
        print(
            f"prover: {run['cells']} cells of the production range (B in "
            f"{','.join(map(str, PRODUCTION_BLOCKS))}, L 0-8, D both, T <= 2^20, "
            f"M <= 2^16, theta 0 or >= L) in {run['seconds']:.1f} s\n"
        )
        print(render_table(verdicts))
    return exit_status(verdicts)


# -- conform ------------------------------------------------------------------------------------


def _add_conform_parser(sub: Any) -> None:
    p = sub.add_parser("conform", help="prove two policies give the same chunk everywhere")
    p.add_argument("policy", metavar="POLICY")
    p.add_argument("--against", required=True, metavar="POLICY", help="the other policy")
    _add_ranges(p, properties=False)
    p.add_argument("--timeout", type=_positive, default=20, help="seconds per solver query")
    p.add_argument("--json", action="store_true", help="print one JSON document")


def _cmd_conform(args: argparse.Namespace) -> int:
    """SPEC CLI ``conform``: Z3 per cell of the range, plus the exhaustive small grid."""
    a, b = _policy_pair(args.policy, args.against, args)
    cells, scope = _proof_plan(args, defaults=False)
    grid = _ranges(args)
    progress = Progress(f"conform {a.name} against {b.name}")
    result = conform(a, b, cells, scope, grid, args.timeout * 1000, progress.tick)
    progress.close()
    over = {
        "z3": {"cells": len(cells), **_proof_range(cells, scope)},
        "grid": {"configs": result.grid_configs, **grid.describe()},
    }
    if args.json:
        _emit(
            {
                "policy": a.name,
                "against": b.name,
                "source_sha256": {a.name: a.source_sha256, b.name: b.source_sha256},
                "status": result.status,
                "range": over,
                "difference": result.difference and result.difference.to_dict(),
            }
        )
    else:
        print(f"{a.name}: {a.summary}\n{b.name}: {b.summary}")
        print(describe_conformance(result, a, b, _conform_ranges(over)))
    return _CONFORM_EXIT[result.status]


def _conform_ranges(over: dict[str, dict[str, Any]]) -> list[str]:
    """The two ranges of a conform verdict, in words."""
    z3_range = ", ".join(f"{k}={v}" for k, v in over["z3"].items() if k != "cells")
    grid = ", ".join(f"{k}={v}" for k, v in over["grid"].items() if k != "configs")
    return [
        f"Z3: {over['z3']['cells']} cells ({z3_range})",
        f"grid: {over['grid']['configs']} configurations ({grid})",
    ]


_CONFORM_EXIT = {EQUAL: EXIT_OK, DIFFERENT: EXIT_VIOLATED, UNKNOWN: EXIT_UNKNOWN}


# -- compare ------------------------------------------------------------------------------------


def _add_compare_parser(sub: Any) -> None:
    p = sub.add_parser(
        "compare", help="compare two policies: verdicts, behaviour differences and cost"
    )
    p.add_argument("policy", metavar="POLICY_A")
    p.add_argument("other", metavar="POLICY_B")
    _add_ranges(p)
    _add_run_options(p)
    p.add_argument("--timeout", type=_positive, default=20, help="seconds per solver query")
    p.add_argument(
        "--no-prove",
        action="store_true",
        help="compare on the explorer's grid only (skip the prover's production range)",
    )
    p.add_argument("--markdown", type=Path, metavar="FILE", help="write a PR-ready report")


def _cmd_compare(args: argparse.Namespace) -> int:
    """SPEC CLI ``compare``: both policies checked as by ``check`` (or by the explorer alone
    with ``--no-prove``), their behaviour compared on the grid, one report; exit 1 when B
    introduces a violation, else 3 when a verdict is undecided, else 0."""
    a, b = _policy_pair(args.policy, args.other, args)
    if args.markdown is not None:
        _check_writable(args.markdown, "--markdown")
    sides = []
    for policy, out in zip((a, b), counterexample_dirs(args.out, a, b), strict=True):
        ranges, verdicts, engines = _check_run(args, policy, not args.no_prove, out)
        sides.append(Side(policy, tuple(verdicts), engines))
    progress = Progress(f"comparing {a.name} with {b.name}")
    behaviour = compare_behaviour(a, b, ranges, args.jobs, progress.tick)
    progress.close()
    prover_range = None if args.no_prove else _proof_range(*_proof_plan(args, defaults=True))
    command = compare_command(args, build_parser().parse_args(["compare", args.policy, args.other]))
    comparison = Comparison(sides[0], sides[1], ranges, prover_range, behaviour, command)
    if args.json:
        _emit(document(comparison))
    else:
        print(render_text(comparison))
    if args.markdown is not None:
        write_markdown(comparison, args.markdown)
        if not args.json:
            print(f"markdown report written to {args.markdown}")
    return compare_exit_status(comparison)


def _check_writable(path: Path, flag: str) -> None:
    """Refuse a report path that cannot be written before any work is done."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise ChunkproofError(f"{flag} {path}: no such directory")
    if path.is_dir() or not os.access(path if path.exists() else folder, os.W_OK):
        raise ChunkproofError(f"{flag} {path}: cannot write there")


# -- repro --------------------------------------------------------------------------------------


def _add_repro_parser(sub: Any) -> None:
    p = sub.add_parser("repro", help="write a standalone pytest file from a counterexample")
    p.add_argument("file", type=Path, metavar="FILE")
    p.add_argument("--pytest", type=Path, required=True, metavar="OUT.py")


def _cmd_repro(args: argparse.Namespace) -> int:
    """SPEC CLI ``repro``: a standalone pytest file that runs the real methods along the trace."""
    cx = _counterexample_file(args.file)
    out = write_repro(cx, str(args.file), args.pytest)
    print(f"wrote {out}: {cx.property} on {cx.policy}, {len(cx.steps)} recorded steps")
    print(
        f"run it with the vLLM source tree to test: {SOURCE_VARIABLE}=path/to/vllm-root "
        f"pytest {out} (or with vllm installed)"
    )
    return EXIT_OK


# -- show ---------------------------------------------------------------------------------------


def _add_show_parser(sub: Any) -> None:
    p = sub.add_parser("show", help="draw a counterexample (and its explorer state graph)")
    p.add_argument("file", type=Path, metavar="FILE")
    p.add_argument("--out", type=Path, metavar="PICTURE", help="the trace picture (.svg or .png)")
    p.add_argument(
        "--graph",
        type=Path,
        metavar="OUT.svg",
        help="the explorer's state graph of its configuration (.svg or .png; small ones only)",
    )


def _cmd_show(args: argparse.Namespace) -> int:
    """SPEC CLI ``show``: the counterexample's trace picture (``--out``) and the explorer's
    state graph of its configuration (``--graph``), on the recorded policy and options."""
    if args.out is None and args.graph is None:
        raise ChunkproofError("show needs --out PICTURE.svg|.png, --graph OUT.svg, or both")
    for flag, path in (("--out", args.out), ("--graph", args.graph)):
        if path is not None:
            check_picture_suffix(path, flag)
    cx = _counterexample_file(args.file)
    policy = recorded_policy(cx)
    if args.out is not None:
        print(f"picture: {save_picture(cx, policy, args.out)}")
    if args.graph is not None:
        print(f"state graph: {save_graph(policy, cx, args.graph)}")
    return EXIT_OK


_HANDLERS = {
    "policies": _cmd_policies,
    "trace": _cmd_trace,
    "explore": _cmd_explore,
    "check": _cmd_check,
    "prove": _cmd_prove,
    "replay": _cmd_replay,
    "conform": _cmd_conform,
    "compare": _cmd_compare,
    "repro": _cmd_repro,
    "show": _cmd_show,
}
