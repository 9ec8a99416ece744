"""The ``chunkproof`` command line (SPEC CLI): parse, dispatch, print, and exit with the
contract's status (0 holds, 1 violated, 2 bad input or no configuration in range, 3 unknown or
incomplete). The engines run in :mod:`chunkproof.checker.runs.requests`; this module only reads
arguments and prints."""

from __future__ import annotations

import argparse
import codecs
import io
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from functools import cache, partial
from importlib import metadata
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from chunkproof.checker.cli.defaults import (
    SYSTEM_POOLS,
    production_space,
    small_space,
    system_space,
    union,
    user_space,
)
from chunkproof.checker.cli.ranges import (
    add_range_flags,
    ascii_int,
    budget_range,
    range_texts,
    trace_items,
)
from chunkproof.checker.cli.synthesis_report import synthesis_document, synthesis_lines
from chunkproof.checker.engines.abstraction import check_abstraction
from chunkproof.checker.engines.compare import Comparison, Side, compare_behaviour
from chunkproof.checker.engines.compare import exit_status as compare_exit_status
from chunkproof.checker.engines.conform import DIFFERENT, EQUAL, UNKNOWN, conform
from chunkproof.checker.engines.conform import describe as describe_conformance
from chunkproof.checker.engines.executor import LOCAL, Executor, check_executor, open_executor
from chunkproof.checker.engines.verdicts import EMPTY, PROVED, VIOLATED, Verdict
from chunkproof.checker.kinds import (
    REPRO_STYLES,
    kind_of,
    load_counterexample,
    save_counterexample,
)
from chunkproof.checker.reports.compare_report import (
    compare_command,
    document,
    render_text,
    write_markdown,
)
from chunkproof.checker.reports.figure import check_picture_suffix
from chunkproof.checker.reports.output import RunFolder, run_folder
from chunkproof.checker.reports.progress import Progress
from chunkproof.checker.reports.report import (
    branch_lines,
    branches_document,
    combine,
    exit_status,
    fixed_line,
    judged_fixed,
    range_lines,
    render_table,
    verdicts_document,
)
from chunkproof.checker.repro.frame import SOURCE_VARIABLE, write_repro
from chunkproof.checker.runs.requests import (
    PROVER_PROPERTIES,
    ProofRun,
    check_cell_count,
    check_explorer_size,
    explore_space,
    prove_space,
)
from chunkproof.checker.runs.synthesis import (
    FOUND,
    SYNTHESIS_PROPERTIES,
    UNSAT,
    Checks,
    Round,
    Synthesis,
    round_line,
    synthesize,
)
from chunkproof.checker.runs.system import (
    NO_POOL,
    SystemVerdict,
    explore_system,
    pool_scopes,
    pool_text,
    threshold_words,
)
from chunkproof.checker.runs.system_prove import (
    DEFAULT_DEPTH,
    TIMEOUT_MS,
    SystemProof,
    prove_system,
    report_lines,
)
from chunkproof.model.builtin import ALIASES, builtin_policies
from chunkproof.model.config import Config
from chunkproof.model.errors import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_UNKNOWN,
    EXIT_VIOLATED,
    ChunkproofError,
    ConfigError,
)
from chunkproof.model.files import printable
from chunkproof.model.holes import BASES, candidate_policy, candidate_source, check_base
from chunkproof.model.policy import Policy
from chunkproof.model.step import Step, stage_order
from chunkproof.model.trajectory import Trajectory, run
from chunkproof.source.candidate_patch import scheduler_diff
from chunkproof.source.loading import recorded_policy, resolve_policy, source_flags_given
from chunkproof.source.methods import parse_overrides
from chunkproof.source.policy import names_class, names_source, names_tree
from chunkproof.source.releases import release_root
from chunkproof.spec.kv_blocks import in_scope_possible, pool_rules
from chunkproof.spec.properties import CONNECTOR, DEFAULT_WINDOW, PROPERTIES, parse_property_ids
from chunkproof.spec.request_symbolic import cells as proof_cells
from chunkproof.spec.scheduler_step import (
    MAX_SEQS,
    fixed_inputs,
    request_sets,
)
from chunkproof.spec.space import Space, parse_ints
from chunkproof.spec.system_properties import SYSTEM_PROPERTIES

DEFAULT_OUT = Path("chunkproof-out")


class _Parser(argparse.ArgumentParser):
    """argparse with the contract's one-line error and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"chunkproof: error: {message} (see `{self.prog} --help`)\n")


def _at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum``."""

    def convert(text: str) -> int:
        try:
            value = ascii_int(text, "the value")
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix("the value: ")) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be at least {minimum}")
        return value

    return convert


_positive = _at_least(1)
_natural = _at_least(0)

MAX_POOL_SIZES = 64
"""Most KV pool sizes one ``system --pool`` explores per request set."""


def _pool_sizes(text: str) -> tuple[int | str, ...]:
    """An argparse type: ``--pool``, KV block pool sizes (``8,12``, ``8-16``), ``min``, the
    least the release's start-up check accepts for each instance, and ``none``, the step
    without a pool."""
    words = [part.strip() for part in text.split(",")]
    sizes: list[int | str] = [word for word in (NO_POOL, "min") if word in words]
    numbers = ",".join(word for word in words if word not in (NO_POOL, "min"))
    if numbers:
        try:
            ints = parse_ints(numbers, "--pool")
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix("--pool: ")) from None
        if sum(high - low + 1 for low, high in ints.intervals) > MAX_POOL_SIZES:
            raise argparse.ArgumentTypeError(f"at most {MAX_POOL_SIZES} pool sizes")
        values = [n for low, high in ints.intervals for n in range(low, high + 1)]
        if min(values) < 2:
            raise argparse.ArgumentTypeError(
                "a pool needs at least 2 blocks (the null block and one to hand out)"
            )
        sizes += values
    if not sizes:
        raise argparse.ArgumentTypeError("no pool given (sizes, min or none)")
    return tuple(sizes)


RLIMIT_MAX = 2**32 - 1
"""The largest ``--rlimit``: Z3 reads a resource limit as a 32-bit count (a larger one wraps
around, 2**32 to no limit at all)."""


def _rlimit(text: str) -> int:
    """An argparse type: ``--rlimit``, Z3 resource units per solver query, 1 to
    :data:`RLIMIT_MAX`."""
    value = _positive(text)
    if value > RLIMIT_MAX:
        raise argparse.ArgumentTypeError(f"must be at most {RLIMIT_MAX} (Z3 counts in 32 bits)")
    return value


def _add_rlimit(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rlimit",
        type=_rlimit,
        help="Z3 resource units per solver query (default none: --timeout alone); past it a "
        "query is unknown, whatever the machine's load",
    )


def _executor(text: str) -> str:
    """An argparse type: ``--executor``
    (:func:`~chunkproof.checker.engines.executor.check_executor`)."""
    try:
        return check_executor(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _retention(text: str) -> int:
    """``--retention none`` or an integer >= 0 (-1 stands for none)."""
    return -1 if text == "none" else _natural(text)


def _add_properties(
    p: argparse.ArgumentParser,
    ids: Sequence[str] = tuple(PROPERTIES),
    what: str = "properties to check, e.g. P1,P3",
    window: str = "form of P5 (default strict: no chunk ends in (T - L, T))",
) -> None:
    p.add_argument("--property", help=f"{what} (default all of {','.join(ids)})")
    p.add_argument(
        "--window",
        choices=("strict", "relaxed"),
        default=DEFAULT_WINDOW,
        help=window,
    )


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"folder for counterexample files and certificates (default {DEFAULT_OUT})",
    )
    p.add_argument(
        "--jobs",
        type=_positive,
        default=os.cpu_count() or 1,
        help="worker processes (default and cap: the CPUs this process may use)",
    )
    p.add_argument(
        "--executor",
        type=_executor,
        default=LOCAL,
        metavar="local|dask|dask://HOST:PORT",
        help="where the work runs: a local pool of --jobs processes (default), a Dask "
        "LocalCluster of --jobs workers, or the Dask scheduler at HOST:PORT (needs "
        "chunkproof[dask])",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="chunkproof",
        description="Formal model and exhaustive checker of "
        "vLLM's prefill chunk split (Mamba align) and MTP lookahead reservation.",
    )
    parser.add_argument(
        "--version", action="version", version=f"chunkproof {metadata.version('chunkproof')}"
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )

    p = sub.add_parser("policies", help="list the built-in policies")
    p.add_argument("--json", action="store_true")

    _add_trace_parser(sub)

    for name, text in (
        ("explore", "exhaustively explore every configuration of a range"),
        ("check", "check a policy (default vllm-latest) with both engines; one row per property"),
        ("prove", "prove properties with Z3 over a range, or refute them"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument(
            "policy",
            metavar="POLICY",
            nargs="?" if name == "check" else None,
            default="vllm-latest" if name == "check" else None,
        )
        add_range_flags(p)
        _add_properties(p)
        _add_run_options(p)
        if name != "explore":
            p.add_argument("--timeout", type=_positive, default=20, help="seconds per query")
            _add_rlimit(p)

    p = sub.add_parser("replay", help="re-run a counterexample file")
    p.add_argument("file", type=Path, metavar="FILE")
    p.add_argument("--policy", help="replay on this policy instead of the recorded one")
    p.add_argument("--json", action="store_true")

    _add_system_parser(sub)
    _add_conform_parser(sub)
    _add_compare_parser(sub)
    _add_repro_parser(sub)
    _add_show_parser(sub)
    _add_synthesize_parser(sub)
    for name in ("trace", "explore", "check", "prove", "replay", "conform", "compare", "system"):
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
            help="for real vLLM source: a value for an input the model does not have: an "
            "attribute (self.x.y=3, request.z=True) or a call (self.x.f()=256); repeatable",
        )
        sub.choices[name].add_argument(
            "--class",
            dest="class_name",
            metavar="NAME",
            help="for real vLLM source: the scheduler class (in the policy file, or Name or "
            "module.Name in the tree; default: vLLM's Scheduler, or the one the file patches "
            "or defines)",
        )
        sub.choices[name].add_argument(
            "--base",
            metavar="TREE",
            help="for a policy file (a subclass, a patch module, a scheduler.py): the tree it "
            "sits on, vllm==X.Y.Z or a checkout",
        )
    return parser


class Terminated(BaseException):
    """SIGTERM reached the run: it unwinds like an interrupt (the run folder drops its staging
    folder, the worker pool is stopped) and ends with one line."""


def _terminate(signum: int, frame: FrameType | None) -> NoReturn:
    raise Terminated


def _escape_unencodable(error: UnicodeError) -> tuple[str | bytes, int]:
    """Output that the terminal's encoding cannot hold (a non-ASCII path under ``LANG=C``):
    a byte of a file name that was not valid text goes out as that byte (surrogateescape),
    any other character as its escape sequence (backslashreplace)."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start : error.end]
    if all("\udc80" <= char <= "\udcff" for char in text):
        return codecs.lookup_error("surrogateescape")(error)
    return codecs.backslashreplace_errors(error)


codecs.register_error("chunkproof-escape", _escape_unencodable)


def _guard_streams() -> None:
    """Standard output and error never fail on a character their encoding lacks."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="chunkproof-escape")


def main(argv: Sequence[str] | None = None) -> int:
    _guard_streams()
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = _HANDLERS[args.command]
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        return handler(args)
    except ChunkproofError as exc:
        print(f"chunkproof: error: {printable(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("chunkproof: interrupted", file=sys.stderr)
        return EXIT_UNKNOWN
    except Terminated:
        print("chunkproof: terminated", file=sys.stderr)
        return EXIT_UNKNOWN
    except BrokenPipeError:
        # The reader of our output went away (`| head`): not an error of ours.
        sys.stderr.close()
        return EXIT_OK
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _emit(kind: str, document: dict[str, Any]) -> None:
    """Print one JSON document of ``kind`` (SPEC CLI ``--json``), its first key the schema
    that names the kind and its version (``chunkproof.verdicts/1``)."""
    print(json.dumps({"schema": f"chunkproof.{kind}/{SCHEMA_VERSION}", **document}, indent=2))


SCHEMA_VERSION = 1
"""The version of every ``--json`` document's layout; a key removed or renamed raises it."""


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
        _emit("policies", {"policies": rows, "aliases": ALIASES})
        return EXIT_OK
    table = [
        [
            row["name"],
            row["split"],
            row["reservation"] or "-",
            row["composition"],
            ", ".join(row["releases"]) or "(proposed)",
        ]
        for row in rows
    ]
    widths = [max(len(cells[i]) for cells in table) for i in range(4)]
    for cells in table:
        print(" ".join(f"{cell:<{w}}" for cell, w in zip(cells, widths, strict=False)), cells[4])
    for alias, target in ALIASES.items():
        print(f"{alias:<{widths[0]}} alias of {target}")
    return EXIT_OK


def _policy(text: str, args: argparse.Namespace) -> Policy:
    """POLICY with ``--compose``, ``--set``, ``--class`` and ``--base`` (an error unless it is
    real vLLM source)."""
    overrides = parse_overrides(args.overrides)
    return resolve_policy(text, args.compose, overrides, args.class_name, args.base)


def _policy_pair(first: str, second: str, args: argparse.Namespace) -> tuple[Policy, Policy]:
    """conform's and compare's two policies: ``--compose``, ``--set`` and ``--class`` apply
    to whichever of them is real vLLM source, ``--base`` to whichever is a policy file (a
    release or a checkout is its own tree), and each is an error when neither is."""
    compose, overrides = args.compose, parse_overrides(args.overrides)
    class_name, base = args.class_name, args.base
    sources = [names_source(text) or names_class(text) for text in (first, second)]
    given = source_flags_given(compose, overrides, class_name, base)
    if given and not any(sources):
        raise ChunkproofError(
            f"{given[0]} applies to real vLLM source, and neither {first!r} nor {second!r} is"
        )
    texts = (first, second)
    files = [source and not names_tree(text) for text, source in zip(texts, sources, strict=True)]
    if base is not None and not any(files):
        raise ChunkproofError(
            f"--base applies to a policy file, and neither {first!r} nor {second!r} is one"
        )

    def resolve(text: str, source: bool, file: bool) -> Policy:
        if not source:
            return resolve_policy(text)
        return resolve_policy(text, compose, overrides, class_name, base if file else None)

    return resolve(first, sources[0], files[0]), resolve(second, sources[1], files[1])


# -- trace --------------------------------------------------------------------------------------

MAX_TRACE_STEPS = 1_000_000
"""A trace longer than this is refused (a budget far below the prompt)."""


def _add_trace_parser(sub: Any) -> None:
    p = sub.add_parser("trace", help="the chunks one request gets under given budgets")
    p.add_argument("policy", metavar="POLICY")
    p.add_argument("--block", type=_positive, required=True, help="Mamba block B")
    p.add_argument("--lookahead", type=_natural, default=0)
    p.add_argument("--prompt", type=_positive, required=True)
    p.add_argument("--tokens", type=_positive, help="num_tokens T (default: the prompt)")
    budgets = p.add_mutually_exclusive_group()
    budgets.add_argument("--budget", type=_positive, help="const(b)")
    budgets.add_argument("--budgets", help="b1,b2,...: one per step, the last repeats")
    p.add_argument("--drop", action="store_true", help="EAGLE block drop on")
    p.add_argument("--max-sched", type=_positive, help="M (default: the largest budget)")
    p.add_argument("--threshold", type=_natural, default=0)
    p.add_argument("--split-block", type=_positive, help="G (default B)")
    p.add_argument("--hash-block", type=_positive, help="H (default G)")
    p.add_argument("--hash-lookahead", type=_natural, default=0, help="L_h (0.33)")
    p.add_argument("--start", type=_natural, default=0, help="admission start c0")
    p.add_argument("--external", type=_natural, default=0, help="the external part x of c0")
    p.add_argument("--junction", type=_natural, default=0, help="shared-prefix junction J")
    p.add_argument("--exact-junction", action="store_true", help="exact junction S on")
    p.add_argument("--checkpoints", action="store_true", help="internal checkpoints K on")
    p.add_argument("--checkpoint-alignment", type=_natural, default=1, help="alpha (with K)")
    p.add_argument("--uncached-prefix", type=_natural, default=0, help="u (0.24-0.25)")
    p.add_argument("--retention", type=_retention, default=-1, help="R: none or >= 0")
    p.add_argument("--items", help="encoder items START+LENGTH,... (e.g. 4+20,26+20)")
    p.add_argument("--encoder-cache", type=_natural, default=0, help="C (0: max(M, largest))")
    p.add_argument("--encoder-budget", type=_natural, default=0, help="b0 (0: vLLM's, = C)")
    p.add_argument("--json", action="store_true")


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
        split_block=args.split_block or 0,
        hash_block=args.hash_block or 0,
        drop=args.drop,
        hash_lookahead=args.hash_lookahead,
        start=args.start,
        external=args.external,
        junction=args.junction,
        exact_junction=args.exact_junction,
        checkpoints=args.checkpoints,
        checkpoint_alignment=args.checkpoint_alignment if args.checkpoints else 0,
        uncached_prefix=args.uncached_prefix,
        retention=args.retention,
        items=trace_items(args.items),
        encoder_cache=args.encoder_cache,
        encoder_budget=args.encoder_budget,
    )
    if max(budgets) > cfg.max_sched:
        raise ChunkproofError(f"a budget of {max(budgets)} exceeds --max-sched {cfg.max_sched}")
    steps_needed = -(-(cfg.prefill_end - cfg.start) // max(min(budgets[-1], cfg.T), 1))
    if steps_needed + len(budgets) > MAX_TRACE_STEPS:
        raise ChunkproofError(
            f"the trace would take about {steps_needed} steps; chunkproof traces at most "
            f"{MAX_TRACE_STEPS}: give a larger budget"
        )
    trajectory = run(policy, cfg, budgets)
    refused = policy.accepts(cfg)
    if args.json:
        _emit(
            "trace",
            {
                "policy": policy.name,
                "config": cfg.to_dict(),
                "chunks": trajectory.chunks,
                "ends": trajectory.ends,
                "outcome": trajectory.outcome,
                "stuck_at": trajectory.stuck_at,
                "unsafe": trajectory.steps[-1].unsafe if trajectory.steps else None,
                "steps": [s.to_dict() for s in trajectory.steps],
                "source_sha256": policy.source_sha256,
                "fixed": list(policy.fixed),
                "accepted": refused is None,
                "refused_because": refused,
            },
        )
        return _trace_status(trajectory)
    print(f"{policy.name}: {cfg.describe()} E={cfg.prefill_end}")
    if refused:
        print(f"note: this release refuses the configuration ({refused})")
    for line in _trace_table(policy, cfg, trajectory.steps):
        print(line)
    print(f"ends: {', '.join(map(str, trajectory.ends)) or '(none)'}")
    if trajectory.finished:
        print(f"finished in {len(trajectory.steps)} steps")
    elif trajectory.outcome == "unsafe":
        print(f"breaks P0 at c={trajectory.stuck_at}: {trajectory.steps[-1].unsafe}")
    else:
        print(f"stuck at c={trajectory.stuck_at}: every step yields 0")
    return _trace_status(trajectory)


def _trace_status(trajectory: Trajectory) -> int:
    """SPEC CLI's exit status for a trace: 0 when the prefill finishes, 1 when it breaks P0 or
    gets stuck (the budgets given hold it for ever: P1, or P7 under a constant budget)."""
    return EXIT_OK if trajectory.finished else EXIT_VIOLATED


_COLUMNS = {"split": "split", "encoder": "encoder", "reservation": "reserve"}
"""The trace table's column of each stage after the budget cap."""


def _trace_table(policy: Policy, cfg: Config, steps: Sequence[Step]) -> list[str]:
    """The trace's rows: c, the budget, n, the value after each stage the policy has, in the
    order it applies them (the encoder cap only when the request has encoder items: without
    them it passes n through), the chunk and its end."""
    stages = [
        name
        for name in stage_order(policy)
        if name in _COLUMNS
        and policy.stage(name) is not None
        and (name != "encoder" or cfg.has_items)
    ]
    heads = ["c", "budget", "n", *(_COLUMNS[name] for name in stages), "chunk", "end"]
    widths = [max(6, len(head)) for head in heads]
    rows = [" ".join(f"{head:>{w}}" for head, w in zip(heads, widths, strict=True))]
    for s in steps:
        values = [s.c, s.budget, s.n, *(getattr(s, name) for name in stages), s.chunk]
        cells = [*values, s.end if s.chunk > 0 else "-"]
        rows.append(" ".join(f"{v:>{w}}" for v, w in zip(cells, widths, strict=True)))
    return rows


def _budget_list(text: str) -> tuple[int, ...]:
    """``--budgets b1,b2,...``: positive integers."""
    try:
        values = tuple(ascii_int(part, "--budgets") for part in text.split(","))
    except ConfigError:
        raise ChunkproofError(f"--budgets: cannot read {text[:40]!r} (use 16,16,8)") from None
    if not values or min(values) < 1:
        raise ChunkproofError("--budgets must list positive integers")
    return values


# -- explore / prove / check ----------------------------------------------------------------------


def _properties(args: argparse.Namespace) -> tuple[str, ...]:
    if args.property is None:
        return tuple(PROPERTIES)
    try:
        return parse_property_ids(args.property)
    except ValueError as exc:
        raise ChunkproofError(f"--property: {exc}") from None


def _judged(
    args: argparse.Namespace, space: Space, *policies: Policy
) -> tuple[tuple[str, ...], list[str]]:
    """The properties judged and what is not, with why. P8 (SPEC P8, KV2) is not judged where
    no grid of the range may hold a configuration in its scope, nor where the pool rules of a
    policy's release do not cover the range (0.17-0.25 with L >= 1). Asked for with
    ``--property``, that is one line; by default it is left out and named."""
    wanted = _properties(args)
    if "P8" not in wanted:
        return wanted, []
    uncovered = [r for r in (pool_rules(p.kv_release) for p in policies) if not r.speculative]
    speculative = any(getattr(g.sets["lookahead"], "high", 1) >= 1 for g in space.grids)
    why = ""
    if not any(in_scope_possible(g) for g in space.grids):
        why = (
            "P8 POOL: no configuration of the range is in its scope (c0 = 0, a local hit or "
            "an external one, T = P, no junction; SPEC P8)"
        )
    elif uncovered and speculative:
        why = (
            f"P8 POOL: the KV pool rules of {uncovered[0].releases} with L >= 1 are not "
            "modelled (SPEC KV2); --lookahead 0 judges P8 there"
        )
    if not why:
        return wanted, []
    if args.property is not None:
        raise ChunkproofError(why)
    return tuple(pid for pid in wanted if pid != "P8"), [why]


def _explorer_space(args: argparse.Namespace, *policies: Policy) -> Space:
    """The explorer's space: the range flags given, else the default grids of every policy
    (one space, so that two policies compared are judged on the same configurations)."""
    texts, budget = range_texts(args), budget_range(args)
    if texts:
        space = user_space(texts, budget, production=False)
    else:
        space = union([small_space(policy, budget) for policy in policies])
    check_explorer_size(space)
    return space


def _prover_space(args: argparse.Namespace, *policies: Policy, defaults: bool) -> Space:
    """The prover's space: the range flags given (unless ``defaults``), else the default
    production range of every policy."""
    texts, budget = range_texts(args), budget_range(args)
    if texts and not defaults:
        space = user_space(texts, budget, production=True)
    else:
        space = union([production_space(policy, budget) for policy in policies])
    check_cell_count(space)
    return space


_NOT_RESULTS = frozenset({"out", "jobs", "executor", "json", "markdown"})
"""Options that decide where and how a run works, not what it finds."""


def _run_identity(args: argparse.Namespace) -> str:
    """What names a run in its ``--out`` folder (:func:`~chunkproof.checker.reports.output.
    run_folder`): the command and every option that decides its results, so that a repeated
    run replaces its own earlier files and keeps every other run's."""
    options = {k: v for k, v in vars(args).items() if k not in _NOT_RESULTS}
    return json.dumps(options, sort_keys=True, default=str)


def _proof_run(args: argparse.Namespace, executor: Executor, minimise: bool) -> ProofRun:
    return ProofRun(args.window, args.timeout * 1000, executor, minimise, args.rlimit)


def _cmd_explore(args: argparse.Namespace) -> int:
    policy = _policy(args.policy, args)
    space = _explorer_space(args, policy)
    wanted, not_judged = _judged(args, space, policy)
    with (
        open_executor(args.executor, args.jobs) as executor,
        run_folder(args.out, _run_identity(args)) as out,
    ):
        progress = Progress(f"exploring {policy.name}", enabled=not args.json)
        verdicts, explored = explore_space(
            policy, space, wanted, args.window, executor, out, progress.tick
        )
        progress.close()
    engines = {"explored": explored, "not_judged": not_judged}
    return _report(args, policy, verdicts, engines, out, space, None)


def _cmd_prove(args: argparse.Namespace) -> int:
    policy = _policy(args.policy, args)
    wanted = _properties(args)
    if not set(wanted) & set(PROVER_PROPERTIES):
        raise ChunkproofError(
            f"the prover decides {', '.join(PROVER_PROPERTIES)}; P2 and P7 are figures of "
            "`chunkproof explore`"
        )
    space = _prover_space(args, policy, defaults=False)
    wanted, not_judged = _judged(args, space, policy)
    with (
        open_executor(args.executor, args.jobs) as executor,
        run_folder(args.out, _run_identity(args)) as out,
    ):
        progress = Progress(f"proving {policy.name}", enabled=not args.json)
        minimising = progress.stage(f"least counterexamples of {policy.name}")
        run = _proof_run(args, executor, minimise=True)
        verdicts, proved = prove_space(policy, space, wanted, run, out, progress.tick, minimising)
        progress.close()
    engines = {"proved": proved, "not_judged": not_judged}
    return _report(args, policy, verdicts, engines, out, None, space)


def _check_run(
    args: argparse.Namespace,
    policy: Policy,
    prove: bool,
    out: RunFolder,
    executor: Executor,
    defaults: tuple[Policy, ...] = (),
) -> tuple[list[Verdict], dict[str, Any], Space, Space | None, list[Verdict]]:
    """SPEC CLI ``check``: the explorer and, with ``prove``, the prover for the properties the
    explorer did not find violated (a violation needs no proof attempt), both on ``executor``;
    one verdict per property (:func:`~chunkproof.checker.reports.report.combine`). With range flags
    both engines judge the same configurations, those flags'; without, the explorer enumerates
    the default grids and the prover the default production range of ``defaults`` (``policy``
    itself when not given), and each verdict names both ranges. Last, the explorer's own
    verdicts on its grid (what ``compare`` tallies configuration by configuration)."""
    defaults = defaults or (policy,)
    space = _explorer_space(args, *defaults)
    wanted, not_judged = _judged(args, space, *defaults)
    progress = Progress(f"exploring {policy.name}", enabled=not args.json)
    verdicts, explored = explore_space(
        policy, space, wanted, args.window, executor, out, progress.tick
    )
    progress.close()
    if not prove:
        engines = {"explored": explored, "not_judged": not_judged}
        return verdicts, engines, space, None, list(verdicts)
    ranged = bool(range_texts(args))
    production = space if ranged else _prover_space(args, *defaults, defaults=True)
    undecided = tuple(v.property for v in verdicts if v.status != VIOLATED)
    progress = Progress(f"proving {policy.name}", enabled=not args.json)
    proved, run_info = prove_space(
        policy, production, undecided, _proof_run(args, executor, False), out, progress.tick
    )
    progress.close()
    grid = list(verdicts)
    combined = combine(verdicts, proved)
    engines = {"explored": explored, "proved": run_info, "not_judged": not_judged}
    return combined, engines, space, production, grid


def _cmd_check(args: argparse.Namespace) -> int:
    """The explorer on its default grids plus the prover on the default production range."""
    policy = _policy(args.policy, args)
    with (
        open_executor(args.executor, args.jobs) as executor,
        run_folder(args.out, _run_identity(args)) as out,
    ):
        verdicts, engines, space, production, _ = _check_run(args, policy, True, out, executor)
    return _report(args, policy, verdicts, engines, out, space, production)


def _report(
    args: argparse.Namespace,
    policy: Policy,
    verdicts: list[Verdict],
    engines: dict[str, Any],
    out: RunFolder,
    explored: Space | None,
    proved: Space | None,
) -> int:
    """Print the verdicts (text or ``--json``); the exit status of SPEC CLI."""
    written = [str(p) for p in out.written]
    if args.json:
        document = verdicts_document(policy, verdicts, {**engines, **_source(policy)})
        _emit("verdicts", {**document, "files": written})
        return exit_status(verdicts)
    print(f"chunkproof {args.command} {policy.name} ({policy.summary})")
    print(fixed_line(judged_fixed(policy, verdicts)))
    for why in engines.get("not_judged", ()):
        print(f"not judged: {why}")
    for line in branch_lines(policy):
        print(line)
    if explored is not None:
        info = engines["explored"]
        configs = info["configs"]
        excluded = ", ".join(f"{v} {k}" for k, v in configs.items() if k != "main" and v)
        print(
            f"explorer: {configs['main']} configurations"
            + (f" (excluded: {excluded})" if excluded else "")
            + f", {info['states']} reachable states, {info['transitions']} transitions "
            f"in {info['seconds']:.1f} s, over:"
        )
        print("\n".join(range_lines(explored.describe())))
    if proved is not None:
        info = engines["proved"]
        print(
            f"prover: {info['cells']} cells in {info['seconds']:.1f} s "
            f"({info['empty_cells']} without a configuration); each cell fixes B, G, H, L, "
            "alpha and R, every other input is symbolic, over:"
        )
        print("\n".join(range_lines(proved.describe())))
    print()
    print(render_table(verdicts))
    if written:
        print(f"\nfiles written under {args.out}: {len(written)}")
    return exit_status(verdicts)


# -- replay -------------------------------------------------------------------------------------


def _cmd_replay(args: argparse.Namespace) -> int:
    cx = load_counterexample(args.file)
    kind = kind_of(cx)
    if args.policy is None and not (args.compose or args.overrides or args.class_name or args.base):
        policy = recorded_policy(cx)
    else:
        policy = _policy(args.policy or cx.policy, args)
    changed = cx.source_sha256 is not None and cx.source_sha256 != policy.source_sha256
    difference = kind.replay(policy, cx)
    reproduces = difference is None
    if args.json:
        _emit(
            "replay",
            {
                "file": str(args.file),
                "policy": policy.name,
                "property": cx.property,
                "reproduces": reproduces,
                "verdict": cx.verdict,
                "difference": difference,
                "source_sha256": {"recorded": cx.source_sha256, "now": policy.source_sha256},
            },
        )
        return EXIT_OK if reproduces else EXIT_VIOLATED
    if changed:
        print(f"note: the source differs from the recorded one (sha256 {cx.source_sha256})")
    if reproduces:
        print(f"reproduces on {policy.name}: {cx.property} {kind.replayed_words(cx)}")
    else:
        print(f"does not reproduce on {policy.name}: {printable(str(difference))}")
    return EXIT_OK if reproduces else EXIT_VIOLATED


# -- conform ------------------------------------------------------------------------------------


def _add_conform_parser(sub: Any) -> None:
    p = sub.add_parser("conform", help="prove two policies give the same chunk everywhere")
    p.add_argument("policy", metavar="POLICY")
    p.add_argument("--against", required=True, metavar="POLICY", help="the other policy")
    add_range_flags(p)
    p.add_argument(
        "--timeout",
        type=_positive,
        default=20,
        help="seconds per solver query (each case of a cell's query: every value of the Boolean "
        "inputs, at admission and in the running loop)",
    )
    _add_rlimit(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument(
        "--jobs",
        type=_positive,
        default=os.cpu_count() or 1,
        help="worker processes for the Z3 cells (default and cap: the CPUs this process may use)",
    )


def _cmd_conform(args: argparse.Namespace) -> int:
    """SPEC CLI ``conform``: Z3 per cell of the range, plus the exhaustive small grid."""
    a, b = _policy_pair(args.policy, args.against, args)
    production = _prover_space(args, a, b, defaults=False)
    grid = _explorer_space(args, a, b)
    progress = Progress(f"conform {a.name} against {b.name}", enabled=not args.json)
    result = conform(
        a, b, production, grid, args.timeout * 1000, progress.tick, args.rlimit, args.jobs
    )
    progress.close()
    over = {
        "z3": {"cells": result.cells, **production.describe()},
        "grid": {"configs": result.grid_configs, **grid.describe()},
    }
    if args.json:
        _emit(
            "conform",
            {
                "policy": a.name,
                "against": b.name,
                "source_sha256": {a.name: a.source_sha256, b.name: b.source_sha256},
                "fixed": {a.name: list(a.fixed), b.name: list(b.fixed)},
                "status": result.status,
                "range": over,
                "difference": result.difference and result.difference.to_dict(),
            },
        )
    else:
        print(f"{a.name}: {a.summary}\n{b.name}: {b.summary}")
        print(fixed_line(a.fixed, f"fixed ({a.name})"))
        print(fixed_line(b.fixed, f"fixed ({b.name})"))
        lines = [
            f"Z3: {result.cells} cells over:",
            *range_lines(production.describe()),
            f"grid: {result.grid_configs} configurations over:",
            *range_lines(grid.describe()),
        ]
        print(describe_conformance(result, a, b, lines))
    return _CONFORM_EXIT[result.status]


_CONFORM_EXIT = {EQUAL: EXIT_OK, DIFFERENT: EXIT_VIOLATED, UNKNOWN: EXIT_UNKNOWN}


# -- compare ------------------------------------------------------------------------------------


def _add_compare_parser(sub: Any) -> None:
    p = sub.add_parser(
        "compare", help="compare two policies: verdicts, behaviour differences and cost"
    )
    p.add_argument("policy", metavar="POLICY_A")
    p.add_argument("other", metavar="POLICY_B")
    add_range_flags(p)
    _add_properties(p)
    _add_run_options(p)
    p.add_argument("--timeout", type=_positive, default=20, help="seconds per solver query")
    _add_rlimit(p)
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
    with open_executor(args.executor, args.jobs) as executor:
        sides, space, production, written = _compare_sides(args, a, b, executor)
        progress = Progress(f"comparing {a.name} with {b.name}", enabled=not args.json)
        behaviour = compare_behaviour(a, b, space, executor, progress.tick, window=args.window)
        progress.close()
    prover = None if production is None else production.describe()
    command = compare_command(args, build_parser().parse_args(["compare", args.policy, args.other]))
    comparison = Comparison(sides[0], sides[1], space, prover, behaviour, command)
    if args.json:
        _emit("compare", {**document(comparison), "files": written})
    else:
        print(render_text(comparison))
    if args.markdown is not None:
        write_markdown(comparison, args.markdown)
        if not args.json:
            print(f"markdown report written to {args.markdown}")
    return compare_exit_status(comparison)


def _compare_sides(
    args: argparse.Namespace, a: Policy, b: Policy, executor: Executor
) -> tuple[list[Side], Space, Space | None, list[str]]:
    """Both policies checked as by ``check`` on ``executor``, in one run folder: their sides,
    the grid, the prover's range (``None`` with ``--no-prove``) and the files written."""
    sides = []
    # One space for both sides: the default grids of both releases (configurations one of them
    # refuses are reported as excluded from its verdicts).
    with run_folder(args.out, _run_identity(args)) as out:
        same = a.file_stem == b.file_stem
        for policy, side in ((a, "A"), (b, "B")):
            folder = out.within(side) if same else out
            verdicts, engines, space, production, grid = _check_run(
                args, policy, not args.no_prove, folder, executor, (a, b)
            )
            sides.append(Side(policy, tuple(verdicts), engines, tuple(grid)))
    return sides, space, production, [str(p) for p in out.written]


def _check_writable(path: Path, flag: str) -> None:
    """Refuse a report path that cannot be written before any work is done."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise ChunkproofError(f"{flag} {path}: no such directory")
    if path.is_dir() or not os.access(path if path.exists() else folder, os.W_OK):
        raise ChunkproofError(f"{flag} {path}: cannot write there")


# -- repro --------------------------------------------------------------------------------------


def _add_repro_parser(sub: Any) -> None:
    p = sub.add_parser("repro", help="write a pytest file from a counterexample")
    p.add_argument("file", type=Path, metavar="FILE")
    p.add_argument("--pytest", type=Path, required=True, metavar="OUT.py")
    p.add_argument(
        "--style",
        choices=REPRO_STYLES,
        default="standalone",
        help="standalone: reads the methods from a vLLM source tree, imports nothing (default); "
        "vllm: the short test a vLLM PR would add, calling the installed vLLM's Scheduler "
        "methods on a stub self",
    )


def _cmd_repro(args: argparse.Namespace) -> int:
    """SPEC CLI ``repro``: a pytest file that runs the real methods along the trace, in the
    style asked (:data:`~chunkproof.checker.kinds.REPRO_STYLES`)."""
    cx = load_counterexample(args.file)
    text = kind_of(cx).repro_source(cx, str(args.file), args.style)
    out = write_repro(text, args.pytest)
    print(f"wrote {out}: {cx.property} on {cx.policy}, {len(cx.steps)} recorded steps")
    if args.style == "vllm":
        print(f"run it where vLLM is installed (beside vLLM's own tests): pytest {out}")
    else:
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
    cx = load_counterexample(args.file)
    kind = kind_of(cx)
    policy = cache(partial(recorded_policy, cx))
    if args.graph is not None:
        graph = kind.graph(cx, policy, args.graph)
    if args.out is not None:
        print(f"picture: {kind.draw(cx, policy, args.out)}")
    if args.graph is not None:
        print(f"state graph: {graph}")
    return EXIT_OK


# -- system ---------------------------------------------------------------------------------------


def _add_system_parser(sub: Any) -> None:
    p = sub.add_parser(
        "system",
        help="the scheduler step over several requests: S-LIVE, HOL, STARVE and P0, explored",
    )
    p.add_argument("policy", metavar="POLICY")
    p.add_argument("--requests", type=_positive, default=2, help="requests per instance (2)")
    p.add_argument(
        "--max-seqs", type=_positive, default=MAX_SEQS, help=f"max_num_seqs ({MAX_SEQS})"
    )
    p.add_argument(
        "--adaptive-threshold",
        action="store_true",
        help="long_prefill_token_threshold_adaptive on (0.31+): theta_eff at least M // "
        "eligible, the eligible count chosen by the environment (default off)",
    )
    p.add_argument(
        "--no-symmetry",
        action="store_true",
        help="keep requests with equal configurations apart (same verdicts, more states)",
    )
    p.add_argument(
        "--abstraction",
        action="store_true",
        help="also compare each request's budgets and verdicts with the single-request model "
        "(SPEC S4)",
    )
    p.add_argument(
        "--pool",
        type=_pool_sizes,
        metavar="SIZES",
        help="the requests share a KV block pool of each size (8,12 or 8-16; min: the least "
        "the release's start-up check accepts; none: the step without a pool, no allocation "
        "fails): allocation, FCFS preemption and S-POOL (default: none,min,2-32 on the "
        "built-in range; none with range flags or --prove)",
    )
    p.add_argument(
        "--prove",
        action="store_true",
        help="search with Z3 instead, per proof cell (2 or 3 requests): bounded to --depth, "
        "a violation replayed on the explicit model",
    )
    p.add_argument(
        "--depth",
        type=_positive,
        default=DEFAULT_DEPTH,
        help=f"--prove: steps of the bounded search ({DEFAULT_DEPTH})",
    )
    p.add_argument(
        "--unbounded",
        action="store_true",
        help="--prove: then Spacer on each cell the bounded search leaves open, in a child "
        "process killed at --timeout: PROVED with a re-checked certificate",
    )
    p.add_argument(
        "--timeout",
        type=_positive,
        help=f"--prove: seconds per solver query ({TIMEOUT_MS // 1000})",
    )
    _add_rlimit(p)
    add_range_flags(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"folder for the counterexample files and pictures (default {DEFAULT_OUT})",
    )


def _system_document(
    policy: Policy,
    space: Space,
    searched: tuple[str, dict[str, Any]],
    verdicts: Sequence[SystemVerdict] | Sequence[SystemProof],
    extra: dict[str, Any],
    out: RunFolder,
) -> dict[str, Any]:
    """``system``'s JSON document: what was searched (under its key), the verdicts (each with
    the keys every verdict has: property, name, status, range, counterexample), the fixed
    inputs, ``extra``, the policy's source and the files written."""
    key, info = searched
    pools = info["pools"]
    rng = space.describe() | {"pool": pool_text(pools), "connector": CONNECTOR}

    def judged(v: SystemVerdict | SystemProof) -> dict[str, Any]:
        return rng | {"pool": pool_text(v.pools), "connector": CONNECTOR}

    return {
        "policy": policy.name,
        "range": rng,
        key: info,
        "verdicts": [
            v.to_dict()
            | {"name": {**PROPERTIES, **SYSTEM_PROPERTIES}[v.property].name, "range": judged(v)}
            for v in verdicts
        ],
        "fixed": _system_fixed(policy, pools),
        **branches_document(policy),
        **extra,
        **_source(policy),
        "files": [str(p) for p in out.written],
    }


def _system_fixed(policy: Policy, pools: Sequence[str]) -> list[str]:
    """What a ``system`` run on ``pools`` fixes: the inputs of the step without a pool, of the
    pooled step, or of both (:func:`~chunkproof.spec.scheduler_step.fixed_inputs`)."""
    unpooled, sizes = pool_scopes(pools)
    return fixed_inputs(policy, unpooled, bool(sizes))


def _system_header(policy: Policy, mode: str, space: Space, info: dict[str, Any]) -> None:
    """The first lines of ``system``'s report: the policy, the range, the fixed inputs, the
    branches of ``schedule()`` (for a policy read from source) and the loop rules."""
    print(f"chunkproof system {policy.name}{mode} ({policy.summary})")
    pools = info["pools"]
    print(
        f"range (each configuration one request): {_range_words(space.describe())}; "
        f"pool={pool_text(pools)}; connector={CONNECTOR}"
    )
    print(fixed_line(_system_fixed(policy, pools)))
    for line in branch_lines(policy):
        print(line)
    print(f"loops: {info['loops']}")


def _cmd_system_prove(
    args: argparse.Namespace, policy: Policy, space: Space, pools: tuple[int | str, ...]
) -> int:
    """``chunkproof system --prove``: :func:`~chunkproof.checker.runs.system_prove.prove_system`;
    exit 1 if a property is violated, 2 if no cell holds requests, 0 if every property is
    PROVED (``--unbounded``), else 3: a bounded search that finds nothing is not a proof (SPEC
    CLI: unknown or incomplete)."""
    if args.abstraction:
        raise ChunkproofError("--abstraction: not with --prove")
    timeout = TIMEOUT_MS // 1000 if args.timeout is None else args.timeout
    with run_folder(args.out, _run_identity(args)) as out:
        proofs, info = prove_system(
            policy,
            space,
            args.requests,
            args.depth,
            args.max_seqs,
            timeout * 1000,
            out=out,
            unbounded=args.unbounded,
            adaptive=args.adaptive_threshold,
            pools=pools,
            rlimit=args.rlimit,
        )
    statuses = {p.status for p in proofs}
    code = (
        EXIT_VIOLATED
        if VIOLATED in statuses
        else EXIT_BAD_INPUT
        if EMPTY in statuses
        else EXIT_OK
        if statuses == {PROVED}
        else EXIT_UNKNOWN
    )
    if args.json:
        _emit("system", _system_document(policy, space, ("searched", info), proofs, {}, out))
        return code
    _system_header(policy, " --prove", space, info)
    for line in report_lines(proofs, info):
        print(line)
    if out.written:
        print(f"\nfiles written under {args.out}: {len(out.written)}")
    return code


def _system_pools(args: argparse.Namespace, ranged: bool) -> tuple[int | str, ...]:
    """The pools ``system`` runs: those given with ``--pool``; else, on the built-in default
    range (no range flags: not ``ranged``), :data:`~chunkproof.checker.cli.defaults.
    SYSTEM_POOLS`; else the step without a pool: a range given fixes every input it does not
    name, the pool too, and the Z3 search of a pool (``--prove``) and the adaptive floor are
    asked with ``--pool`` (the pooled step does not model the floor)."""
    if args.pool is not None:
        return tuple(args.pool)
    plain = ranged or args.prove or args.adaptive_threshold
    return (NO_POOL,) if plain else SYSTEM_POOLS


def _cmd_system(args: argparse.Namespace) -> int:
    """``chunkproof system``: :func:`~chunkproof.checker.runs.system.explore_system` on the range
    flags (each configuration one request), else :func:`~chunkproof.checker.cli.defaults.
    system_space`; exit 1 if a property is violated, else 2 if a property has no instance in
    scope (EMPTY: a range, or every pool asked below the start-up check), else 0."""
    policy = _policy(args.policy, args)
    if budget_range(args) is not None:
        raise ChunkproofError("--budget: the scheduler step is offered every budget 1..M")
    texts = range_texts(args)
    space = user_space(texts, None, production=False) if texts else system_space()
    pools = _system_pools(args, bool(texts))
    unpooled, sizes = pool_scopes(pools)
    if args.abstraction and not unpooled:
        raise ChunkproofError("--abstraction: compares the step without a pool (--pool none)")
    if args.prove:
        if unpooled and sizes:
            raise ChunkproofError(
                "--prove: the step without a pool and the pooled step are two searches; give "
                "--pool none or pool sizes"
            )
        return _cmd_system_prove(args, policy, space, sizes)
    if args.unbounded or args.timeout is not None or args.rlimit is not None:
        raise ChunkproofError("--unbounded, --timeout and --rlimit: only with --prove")
    check_explorer_size(space)
    with run_folder(args.out, _run_identity(args)) as out:
        verdicts, info = explore_system(
            policy,
            space,
            args.requests,
            args.max_seqs,
            not args.no_symmetry,
            out,
            args.adaptive_threshold,
            pools,
        )
    statuses = {v.status for v in verdicts}
    code = EXIT_VIOLATED if VIOLATED in statuses else EXIT_BAD_INPUT if EMPTY in statuses else 0
    abstraction = None
    if args.abstraction and EMPTY not in statuses:
        sets = request_sets(policy, list(space.configs()), args.requests)
        abstraction = check_abstraction(
            policy, sets, args.max_seqs, args.adaptive_threshold
        ).to_dict()
    if args.json:
        extra = {"abstraction": abstraction} if abstraction is not None else {}
        _emit("system", _system_document(policy, space, ("explored", info), verdicts, extra, out))
        return code
    _system_header(policy, "", space, info)
    unpooled, sizes = pool_scopes(info["pools"])
    where = (
        f" ({info['unpooled_instances']} without a pool, {info['pooled_instances']} in a pool)"
        if unpooled and sizes
        else ""
    )
    print(
        f"{info['instances']} instances{where} of {info['requests']} requests (max_num_seqs "
        f"{info['max_seqs']}, every budget 1..M per step{threshold_words(info)}), "
        f"{info['states']} global states"
        f"{'' if info['symmetry'] else ' (no symmetry reduction)'} in {info['seconds']} s"
    )
    if sizes:
        least = (
            " (min: the least the release's start-up check accepts, num_gpu_blocks_override)"
            if "min" in sizes
            else ""
        )
        print(
            f"KV block pool: {pool_text(sizes)} blocks per instance{least}; "
            f"{info['outside_pool']} request configuration(s) outside the pool model left "
            f"out of it, {info['below_startup']} (set, pool) pair(s) below the start-up "
            "check (vLLM refuses to start)"
        )
    if info["left_out"]:
        print(
            f"left out: {info['left_out']} set(s) of {info['requests']} requests in "
            "which two or more requests carry encoder items under an encoder compute budget "
            "below the cache (the budget they share then decides; the model has b0 >= C, "
            "vLLM's own b0 = C)"
        )
    print()
    for v in verdicts:
        count = f"  {v.violating} of {v.instances} instances" if v.status == VIOLATED else ""
        on = f"  (pool {pool_text(v.pools)})" if unpooled and sizes else ""
        print(f"  {v.property:<8} {v.status}{count}{on}")
        if v.example is not None:
            print(f"      smallest: {v.example}")
            for line in v.trace:
                print(f"        {line}")
        if v.counterexample is not None:
            print(f"      counterexample: {v.counterexample}\n      picture: {v.picture}")
    if abstraction is not None:
        print()
        for line in _abstraction_words(abstraction):
            print(line)
    if out.written:
        print(f"\nfiles written under {args.out}: {len(out.written)}")
    return code


def _abstraction_words(found: dict[str, Any]) -> list[str]:
    """The single-request abstraction check as text (SPEC S4, N4)."""
    lines = [
        "single-request abstraction (SPEC S4: any budget 1..M at every step), per request "
        f"configuration ({found['configurations']}):",
        f"  (state, budget) pairs the scheduler step offers: {found['realized_pairs']} of the "
        f"{found['single_request_pairs']} the single-request model explores; beyond them: "
        f"{found['realized_beyond_the_single_request_model']}",
    ]
    both = found["violated_in_both"]
    lines.append(
        "  violated in both: "
        + (", ".join(f"{pid} ({n} configs)" for pid, n in sorted(both.items())) or "none")
    )
    for key, words in (
        ("violated_only_in_the_single_request_model", "only the single-request model"),
        ("violated_only_in_the_scheduler_step", "only the scheduler step (S4 unsound)"),
    ):
        for pid, configs in sorted(found[key].items()):
            lines.append(f"  {pid} violated in {words}: {len(configs)} configs, e.g. {configs[0]}")
        if not found[key]:
            lines.append(f"  violated in {words}: none")
    return lines


def _range_words(described: dict[str, Any]) -> str:
    """A space's ``describe()`` as ``name=value, ...``, grid by grid; the budget is 1..M."""
    grids = described.get("union", [described])
    return "; ".join(
        ", ".join(f"{k}={v}" for k, v in grid.items() if k not in ("grid", "budget"))
        for grid in grids
    )


# -- synthesize ----------------------------------------------------------------------------


def _add_synthesize_parser(sub: Any) -> None:
    p = sub.add_parser(
        "synthesize",
        help="search holes in a release's split and reservation for a policy that keeps the "
        "properties (SPEC Y)",
    )
    p.add_argument(
        "base",
        metavar="BASE",
        nargs="?",
        default="vllm-latest",
        help=f"the release whose split and reservation get holes: {', '.join(BASES)} "
        "(default vllm-latest)",
    )
    add_range_flags(p)
    _add_properties(
        p,
        SYNTHESIS_PROPERTIES,
        "properties the policy must keep",
        "form of P5 to start from (default strict; a conflict relaxes it, and says so)",
    )
    _add_run_options(p)
    p.add_argument("--timeout", type=_positive, default=20, help="seconds per prover query")
    _add_rlimit(p)
    p.add_argument(
        "--rounds", type=_positive, default=40, help="most candidates checked (default 40)"
    )
    p.add_argument(
        "--diff",
        action="store_true",
        help="also write the candidate into the base release's scheduler.py as a unified "
        "diff (scheduler.patch; fetches the release once, as vllm==X.Y.Z does)",
    )
    p.add_argument(
        "--time-limit",
        type=_positive,
        metavar="SECONDS",
        help="start no new candidate after this many seconds: the best one so far is proved "
        "and reported as the best found (default: none)",
    )
    p.add_argument(
        "--no-prove",
        action="store_true",
        help="check candidates on the grid only (the result is then not PROVED on the "
        "production range)",
    )


def _synthesis_properties(args: argparse.Namespace) -> tuple[str, ...]:
    """``--property`` for synthesize: a subset of :data:`SYNTHESIS_PROPERTIES`."""
    wanted = _properties(args) if args.property is not None else SYNTHESIS_PROPERTIES
    other = [pid for pid in wanted if pid not in SYNTHESIS_PROPERTIES]
    if other:
        raise ChunkproofError(
            f"--property: synthesis keeps {', '.join(SYNTHESIS_PROPERTIES)}, not {', '.join(other)}"
        )
    return wanted


def _cmd_synthesize(args: argparse.Namespace) -> int:
    base = resolve_policy(args.base)
    check_base(base)
    wanted = _synthesis_properties(args)
    grid = _explorer_space(args, base)
    production = None if args.no_prove else _prover_space(args, base, defaults=False)
    checked = ["grid (the explorer, and the comparison with the base):"]
    checked += range_lines(grid.describe())
    if production is None:
        checked.append("prover: not run (--no-prove)")
    else:
        count = len(proof_cells(production))
        checked.append(f"prover: {count} cell{'s' * (count != 1)} over:")
        checked += range_lines(production.describe())

    def tick(r: Round) -> None:
        if not args.json:
            print(round_line(r), file=sys.stderr, flush=True)

    with (
        open_executor(args.executor, args.jobs) as executor,
        run_folder(args.out, _run_identity(args)) as out,
    ):
        run = _proof_run(args, executor, minimise=True)
        checks = Checks(grid, production, run, executor)
        result = synthesize(base, wanted, args.window, checks, args.rounds, tick, args.time_limit)
        files = _write_synthesis(result, out, args.diff)
    if args.json:
        _emit(
            "synthesis",
            {**synthesis_document(result, files), "files": [str(p) for p in out.written]},
        )
    else:
        print("\n".join(synthesis_lines(result, list(wanted), checked)))
        if out.written:
            print(f"\nfiles written under {args.out}: {len(out.written)}")
    if result.status == FOUND:
        return EXIT_OK if result.keeps_all else EXIT_VIOLATED
    return EXIT_VIOLATED if result.status == UNSAT else EXIT_UNKNOWN


def _write_synthesis(result: Synthesis, out: RunFolder, diff: bool) -> dict[int, str]:
    """Every witness as a counterexample file of the candidate it refuted, the found
    candidate's source and, with ``diff``, its unified diff against the base release's
    ``scheduler.py`` (SPEC Y5); the witnesses' files by their index in the search."""
    files: dict[int, str] = {}
    index = 0
    for r in result.rounds:
        policy = candidate_policy(result.base, r.candidate)
        for m in r.met:
            files[index], _ = save_counterexample(
                m.witness.cx, policy, out, f"round{r.number}-{m.witness.cx.property}"
            )
            index += 1
    if result.status == FOUND and result.candidate is not None:
        folder = f"synthesis-{result.base.file_stem}"
        written = {"candidate.py": candidate_source(result.base, result.candidate)}
        if diff:
            root = release_root(result.base.releases[0])
            written["scheduler.patch"] = scheduler_diff(root, result.candidate)
        for name, text in written.items():
            staged = out.path(folder, name)
            staged.write_text(text)
            out.record(staged)
    return files


_HANDLERS = {
    "synthesize": _cmd_synthesize,
    "system": _cmd_system,
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
