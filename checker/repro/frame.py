"""What every model's pytest repro is made of (SPEC C; ``chunkproof repro FILE --pytest OUT``).

A repro needs pytest and a vLLM source tree, nothing else: it carries
:mod:`chunkproof.source.extraction` verbatim (standard library only) to read the real
``Scheduler._mamba_block_aligned_split`` and ``_reserve_prefill_lookahead`` from the source text,
runs them on stand-ins holding exactly the counterexample's configuration (:func:`standins`),
and calls them as the call sites do (:data:`CALL_SITE`). The pieces here are every model's: the
prelude and its imports (:data:`PRELUDE`), the ``Step`` record (:data:`STEP_CLASS`), the P0
check and the real methods' loader (:data:`REAL_METHODS`; :data:`ENCODER_STEP` and
:data:`ENCODER_DRIVER` with the tree's own encoder, from :mod:`chunkproof.source.encoder_run`),
chunkproof's own functions copied in (:func:`real_methods`), the docstring
(:func:`file_docstring`) and the literals of configurations and steps. A model's repro
(:mod:`.requests`, :mod:`.system`) adds its test: the trace it replays and what it asserts.
"""

from __future__ import annotations

import ast
import json
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any, TypeGuard

from chunkproof.model.config import Config, encoder_capacity, encoder_compute_budget
from chunkproof.model.errors import ChunkproofError, PolicyError
from chunkproof.model.own_source import own_source
from chunkproof.model.policy import Policy
from chunkproof.model.step import (
    Step,
    computed_tokens,
    external_hit,
    local_hit,
    step_view,
    uncached_at,
)
from chunkproof.model.trace_file import TraceFile
from chunkproof.source import extraction
from chunkproof.source.extraction import SCHEDULER_FILE
from chunkproof.source.methods import standin_attributes
from chunkproof.source.policy import recorded_options

FunctionList = list[Callable[..., Any]]


Values = dict[str, str]
"""A template's values, by name."""


SOURCE_VARIABLE = "CHUNKPROOF_VLLM_SOURCE"
"""Names the root of a vLLM checkout or unpacked wheel for a generated test."""


CALL_SITE = (computed_tokens, local_hit, external_hit, uncached_at)
"""What the call sites pass at state c (:mod:`chunkproof.model.step`): the waiting loop admits
the request at c = c0 with ``num_computed_tokens`` 0 and the hits (and V3's u) as arguments,
the running loop passes c and nothing else."""


_SYMBOLS = {
    "block": "B: the Mamba group's block size (the state grid)",
    "prompt": "P: prompt tokens",
    "max_sched": "M: max scheduled tokens per step",
    "lookahead": "L: MTP prefill lookahead",
    "tokens": "T: num_tokens",
    "threshold": "theta: long-prefill threshold (0 = off)",
    "split_block": "G: cache_config.block_size (the split's grid)",
    "hash_block": "H: hash block size",
    "sched_block": "B_s: scheduler block size",
    "drop": "D: EAGLE block drop",
    "hash_lookahead": "L_h: hash lookahead tokens",
    "start": "c0: where the request is admitted (its prefix hits)",
    "external": "x: the part of c0 a KV connector loaded",
    "junction": "J: shared-prefix junction",
    "exact_junction": "S: shared-prefix checkpoint",
    "partial_hits": "F: Mamba partial cache hits",
    "checkpoints": "K: prefill checkpoint blocks",
    "checkpoint_alignment": "alpha: checkpoint alignment (0 = None)",
    "uncached_prefix": "u: uncached common prefix (0.24-0.25)",
    "retention": "R: prefix_cache_retention_interval (-1 = None)",
    "items": "the multimodal items: (start, length) of their placeholders",
    "encoder_cache": "C: encoder cache size (0 = vLLM's own)",
    "encoder_budget": "b0: encoder compute budget (0 = vLLM's own)",
}
"""Each config field with its history-note symbol, as the generated file comments it."""


def write_repro(text: str, out: Path) -> Path:
    """Write the repro test ``text`` to ``out``."""
    if out.suffix != ".py":
        raise ChunkproofError(f"--pytest {out}: the test file must end in .py")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ChunkproofError(f"--pytest {out}: cannot write: {exc.strerror}") from None
    return out


def encoder_values(cfg: Config) -> Values:
    """What :data:`ENCODER_CONSTANTS` says of the request ``cfg`` with encoder items: the
    items, the cache, the budget and the scheduler's ``use_eagle``."""
    view = step_view(cfg, cfg.start, lambda function, args: function(*args))
    return {
        "items": repr([tuple(item) for item in cfg.items]),
        "encoder_cache": str(encoder_capacity(view)),
        "encoder_budget": str(encoder_compute_budget(view)),
        "use_eagle": repr(bool(view.eagle)),
    }


def standins(cx: TraceFile, cfg: Config, source_name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The attributes of the stand-in scheduler and request for a request of ``cfg`` (a
    request of ``cx``, read from ``source_name``), with the ``--set`` options ``cx`` was
    checked with (:func:`~chunkproof.source.methods.standin_attributes`)."""
    view = step_view(cfg, cfg.start, lambda function, args: function(*args))
    return standin_attributes(view, recorded_options(cx.policy_options)[1])


def real_methods(
    policy: Policy, predicates: FunctionList, more_imports: Sequence[str] = ()
) -> Values:
    """The values of :data:`REAL_METHODS` but ``schedule_step``'s, and the prelude's imports
    (with ``more_imports``): chunkproof's functions (:func:`copied_functions`) and the source
    loader."""
    loader_imports, loader = _loader_source()
    return (
        copied_functions(policy, predicates)
        | user_files(policy)
        | {
            "source_variable": SOURCE_VARIABLE,
            "imports": import_lines([*_OWN_IMPORTS, *loader_imports, *more_imports]),
            "loader": loader,
        }
    )


USER_FOLDER = "chunkproof_user"
"""Where a user's patch module or subclass module is laid over the source tree."""


def user_files(policy: Policy) -> Values:
    """The user's own file the policy runs methods of (SPEC X2), carried verbatim and laid over
    the tree the test reads: a lone ``scheduler.py`` in place of the tree's, a patch module or
    subclass module beside it with the members it replaces. A method the file cannot carry
    (defined inside a function, or in another file) is a one-line error."""
    user = policy.user_source
    if user is None:
        return {"user_files": "{}", "user_methods": "{}"}
    text = Path(user.path).read_text(encoding="utf-8")
    if user.replaces_scheduler:
        return {"user_files": repr({SCHEDULER_FILE: text}), "user_methods": "{}"}
    if user.unsupported:
        raise PolicyError(
            f"repro: {user.unsupported[0]}, which a repro cannot carry: "
            "`chunkproof replay FILE` re-runs the counterexample instead"
        )
    rel = f"{USER_FOLDER}/{Path(user.path).name}"
    methods = {name: (rel, line) for name, line in user.methods}
    return {"user_files": repr({rel: text}), "user_methods": repr(methods)}


def copied_functions(policy: Policy, predicates: FunctionList) -> Values:
    """The budget cap of ``policy`` (the one the counterexample was found on) by name, and the
    source of chunkproof's functions the file calls (the cap, ``predicates``, the call site's
    :data:`CALL_SITE`) with every function they call."""
    cap = _cap_function(policy)
    return {
        "cap": cap.__name__,
        "functions": "\n\n\n".join(_function_sources([cap, *predicates, *CALL_SITE])),
    }


def import_lines(lines: Sequence[str]) -> str:
    """The import ``lines`` as the file's import block: each name bound once, ``import x``
    lines first, each kind alphabetical."""
    return "\n".join(sorted(_bound_once(list(lines)), key=_import_order))


def _bound_once(lines: list[str]) -> list[str]:
    """The import ``lines`` with each name bound once: a line that binds only names an earlier
    line binds goes, and a ``from`` line that binds some of them keeps only the others."""
    bound: set[str] = set()
    kept = []
    for line in lines:
        node = ast.parse(line).body[0]
        assert isinstance(node, ast.Import | ast.ImportFrom)
        fresh = [alias for alias in node.names if (alias.asname or alias.name) not in bound]
        if not fresh:
            continue
        if isinstance(node, ast.ImportFrom) and len(fresh) < len(node.names):
            line = ast.unparse(ast.ImportFrom(node.module, fresh, node.level))
        kept.append(line)
        bound |= {alias.asname or alias.name for alias in fresh}
    return kept


def _cap_function(policy: Policy) -> FunctionType:
    """The budget cap of ``schedule()`` in the composition of ``policy`` (SPEC S3)."""
    stage = policy.stage("cap")
    if stage is None or stage.source is not None or not isinstance(stage.function, FunctionType):
        raise ChunkproofError(f"{policy.name}: its budget cap is not a plain function")
    return stage.function


def _function_sources(roots: FunctionList) -> list[str]:
    """The source of ``roots`` and, transitively, of every chunkproof function they call.

    A name two different functions share is an error (the file has one namespace).
    """
    found: dict[str, Callable[..., Any]] = {}
    stack = list(roots)
    while stack:
        function = stack.pop()
        known = found.setdefault(function.__name__, function)
        if known is not function:
            raise ChunkproofError(f"two chunkproof functions are named {function.__name__}")
        for name in function.__code__.co_names:
            value = function.__globals__.get(name)
            if _ours(value) and value.__name__ not in found:
                stack.append(value)
    return [
        f"# from {f.__module__}\n{own_source(f).text.rstrip()}"
        for f in sorted(found.values(), key=lambda f: (f.__module__, f.__name__))
    ]


def _ours(value: object) -> TypeGuard[FunctionType]:
    """Whether ``value`` is a function of chunkproof's own."""
    return isinstance(value, FunctionType) and value.__module__.startswith("chunkproof.")


def cache_rules_note(cx: TraceFile, cache: str = "") -> str:
    """What of a P3, P4 or P6 file is chunkproof's rule rather than the tree's (SPEC KV1): P3
    (unless the file runs the tree's cache, ``cache`` "P3") and P4 read the cache side of the
    counterexample's release, so a release that fixed the cache code and not the chunks still
    fails the file; P6 asks the tree for R* and its retention, but the checkpoint a chunk
    leaves live is the release's rule."""
    if cache == "P3":
        return ""
    if cx.property == "P6":
        return (
            " The checkpoint a chunk leaves live is chunkproof's rule for the cache side of "
            f"{cx.policy}, not the tree's."
        )
    if cx.property not in ("P3", "P4"):
        return ""
    return (
        f" {cx.property} is judged by chunkproof's rule for the cache side of {cx.policy}: a "
        "release that fixed the cache code but schedules the same chunks still fails this file."
    )


def _loader_source() -> tuple[list[str], str]:
    """:mod:`chunkproof.source.extraction` without its docstring and imports: its import lines
    (for the top of the file) and the rest."""
    return module_source(extraction)


def module_source(module: ModuleType) -> tuple[list[str], str]:
    """``module`` (standard library only, beside chunkproof modules the file carries) without
    its docstring and imports: its standard-library import lines (for the top of the file)
    and the rest."""
    text = Path(str(module.__file__)).read_text(encoding="utf-8")
    lines = text.splitlines()
    imports, last = [], 0
    for node in ast.parse(text).body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            assert node.end_lineno is not None
            module_name = node.module if isinstance(node, ast.ImportFrom) else ""
            if module_name != "__future__" and not (module_name or "").startswith("chunkproof"):
                imports += lines[node.lineno - 1 : node.end_lineno]
            last = node.end_lineno
    return imports, "\n".join(lines[last:]).strip() + "\n"


_OWN_IMPORTS = [
    "import importlib.util",
    "import os",
    "import traceback",
    "from types import SimpleNamespace",
    "from typing import NamedTuple",
]
"""The generated test's own standard-library imports (besides the loader's)."""


def _import_order(line: str) -> tuple[bool, str]:
    """``import x`` lines first, then ``from x import y``, each alphabetical."""
    return line.startswith("from "), line


def file_docstring(
    cx: TraceFile,
    requests: Sequence[Config],
    title: str,
    offered: str,
    source_name: str,
    cache: str = "",
) -> str:
    """The generated file's docstring: ``title`` (what breaks where), ``cx``'s verdict, what
    the test runs on its ``requests`` and ``offered`` (with ``cache`` "P6", the tree's KV cache
    lookup; with "P8", the tree's block allocation; with "P3", the tree's Mamba keys and the
    states their blocks hold; with "S-POOL", several requests on the tree's manager), where
    the source tree comes from, and where the file came from (``source_name``). Backslashes
    and double quotes in them are escaped: a file name, a policy name and a verdict stay
    inside the docstring."""
    source = (
        f"vLLM source with sha256 {cx.source_sha256}"
        if cx.source_sha256
        else f"chunkproof's model {cx.policy}"
    )
    items = any(cfg.items for cfg in requests)
    also = (
        " For the request with encoder items it also compiles the tree's "
        "_try_schedule_encoder_inputs, EncoderCacheManager, Request members and "
        "PlaceholderRange, and runs the encoder cap where the tree's schedule() calls it, "
        "its cache kept from step to step."
        if items
        else ""
    )
    if cache == "P6":
        also += (
            " It asks the tree's own KV cache code (its coordinator, managers and "
            "get_computed_blocks, compiled from the source text) where an identical resend of "
            "the prompt lands (R*) and whether the tree's retention keeps the state there, and "
            "judges every chunk against those."
        )
    if cache == "P3":
        also += (
            " It runs every chunk the request takes through the tree's own "
            "KVCacheManager.allocate_slots (compiled from the source text) and asserts that "
            "every Mamba key the tree's cache then holds names the state its block holds. The "
            "one rule not read from the tree is the kernel's write: a chunk [s, e) writes "
            "state@e into the request's Mamba block at column cdiv(e, B) - 1, and an internal "
            "checkpoint into the block the manager reserved for it."
        )
    if cache == "S-POOL":
        also += (
            " The pool has the counterexample's N blocks. Whether vLLM starts with N is "
            "chunkproof's reading of the release's start-up check, not run from the tree: a "
            "release whose check refuses N (0.29 counts the null block on top of 0.28's "
            "least) never runs this case, and still fails this file."
        )
    if cache == "P8":
        also += (
            " It runs the tree's own KVCacheManager.allocate_slots (compiled from the source "
            "text) for every chunk the request takes, over a pool of the fewest blocks the "
            "release's start-up check accepts for max_model_len = P, and asserts that each "
            "chunk's blocks are granted."
        )
    carried = ", ".join(
        ["chunkproof.source.extraction"]
        + ["chunkproof.source.encoder_run"] * items
        + ["chunkproof.source.kv_run"] * bool(cache)
        + ["chunkproof.source.kv_alloc_run"] * (cache in ("P3", "P8", "S-POOL"))
    )
    carried = " and ".join(carried.rsplit(", ", 1))
    lines = [
        f"Repro: {title}.",
        "",
        *textwrap.wrap(f"What goes wrong: {cx.verdict}.", 96),
        "",
        *textwrap.wrap(
            "The test reads the real Scheduler._mamba_block_aligned_split and "
            "Scheduler._reserve_prefill_lookahead from a vLLM source tree (vLLM is not "
            "imported: no torch, no GPU), runs them on stand-ins holding exactly the values "
            f"below, offers {offered} on every step (P0: the code raises, or a stage "
            f"returns a value outside [0, its input]).{also} It fails while the bug is in "
            f"the code and passes once it is fixed.{cache_rules_note(cx, cache)}",
            92,
        ),
        "",
        f"The source tree: ${SOURCE_VARIABLE} (the root of a vLLM checkout or unpacked wheel),",
        "else the installed vllm (located, not imported).",
        "",
        *textwrap.wrap(
            f"Generated by `chunkproof repro {source_name} --pytest ...` from a counterexample "
            f"of {source}.",
            96,
        ),
        *textwrap.wrap(
            f"Everything below the line `chunkproof's source loader` is {carried} verbatim; "
            "the property and budget-cap functions are chunkproof's own.",
            96,
        ),
    ]
    text = "\n".join(lines).replace("\\", "\\\\").replace('"', '\\"')
    return '"""' + text + '\n"""'


def one_line(text: str) -> str:
    """``text`` with every run of whitespace one space: fit for a comment of the file."""
    return " ".join(text.split())


def config_literal(cfg: Config) -> str:
    """``cfg`` as a ``SimpleNamespace`` call, one field a line with its symbol."""
    lines = ["SimpleNamespace("]
    for name, value in cfg.to_dict().items():
        lines.append(f"    {name}={value!r},  # {_SYMBOLS[name]}")
    return "\n".join(lines) + "\n)"


def dict_literal(values: dict[str, Any]) -> str:
    """``values`` as a dict display, one key a line."""
    body = "".join(f"    {json.dumps(k)}: {v!r},\n" for k, v in values.items())
    return "{\n" + body + "}"


def step_literal(s: Step, items: bool = False) -> str:
    """``s`` as the generated file's ``Step`` (:data:`STEP_CLASS`); with encoder ``items``,
    the encoder's value and place too."""
    crash = "" if s.crash is None else f", crash={s.crash!r}"
    encoder = f", encoder={s.encoder}, encoder_first={s.encoder_first}" if items else ""
    return (
        f"Step(c={s.c}, budget={s.budget}, n={s.n}, split={s.split}, "
        f"reservation={s.reservation}, chunk={s.chunk}{crash}{encoder})"
    )


PRELUDE = """$docstring

from __future__ import annotations

$imports

import pytest

Config = SimpleNamespace  # chunkproof's configuration type, here a plain namespace
"""
"""The head of every generated file (a :class:`~string.Template`): ``docstring`` and
``imports``."""


STEP_CLASS = '''class Step(NamedTuple):
    """One scheduling step: c, the budget offered, n after schedule()'s budget cap, after
    _mamba_block_aligned_split, after _reserve_prefill_lookahead, and the chunk scheduled;
    ``crash`` says where the real code raised (the values from there on are 0). With encoder
    items, ``encoder`` is the chunk _try_schedule_encoder_inputs left (before the split when
    ``encoder_first``, else after it) and ``scheduled`` the inputs it scheduled and those
    another request computes."""

    c: int
    budget: int
    n: int
    split: int
    reservation: int
    chunk: int
    crash: str | None = None
    encoder: int | None = None
    encoder_first: bool = False
    scheduled: tuple[list[int], list[int]] = ([], [])

    @property
    def end(self) -> int:
        return self.c + self.chunk

    def __repr__(self) -> str:
        crash = "" if self.crash is None else f", crash={self.crash!r}"
        stages = [f"split={self.split}"]
        if self.encoder is not None:
            stages.insert(0 if self.encoder_first else 1, f"encoder={self.encoder}")
        return (
            f"Step(c={self.c}, budget={self.budget}, n={self.n}, {', '.join(stages)}, "
            f"reservation={self.reservation}, chunk={self.chunk}{crash})"
        )


'''
"""The generated files' record of one request's step, with the real code's stage values."""


UNSAFE = '''
def unsafe(step: Step) -> str | None:
    """P0 SAFE: the real code raised, or a stage returned a value outside [0, its input]."""
    if step.crash is not None:
        return f"P0: {step.crash} (at c={step.c}, budget {step.budget})"
    for name, value, limit in (
        ("split", step.split, step.n),
        ("reservation", step.reservation, step.split),
    ):
        if not 0 <= value <= limit:
            return f"P0: the {name} returns {value}, outside [0, {limit}] ({step})"
    return None


def schedule_step(vllm: Extracted, scheduler: StandIn, c: int, budget: int$step_parameters) -> Step:
    """One step of schedule() for $step_subject: the budget cap, the real split, then the
    real reservation when the source has one. At c = c0 the waiting loop admits the request
    (num_computed_tokens 0, the hits and u as arguments); after, the running loop calls the
    split with num_computed_tokens = c."""
    n = $cap($step_config, c, budget)
    computed = computed_tokens($step_config, c)
    request = standin_tree(REQUEST_LABEL, {**$step_attributes, "num_computed_tokens": computed})
    uncached = [uncached_at($step_config, c)] if vllm.takes_uncached_prefix else []
    hits = (local_hit($step_config, c), external_hit($step_config, c))
    try:
        split = scheduler._mamba_block_aligned_split(request, n, *hits, *uncached)
    except SourceError:
        raise
    except Exception as exc:  # the real code raised: P0
        return Step(c, budget, n, 0, 0, 0, raised("_mamba_block_aligned_split", exc))
    reservation = split
    if vllm.has_reservation:
        try:
            reservation = scheduler._reserve_prefill_lookahead(request, c, split)
        except SourceError:
            raise
        except Exception as exc:  # the real code raised: P0
            return Step(c, budget, n, split, 0, 0, raised("_reserve_prefill_lookahead", exc))
    return Step(c, budget, n, split, reservation, reservation)
'''


RAISED = '''

def raised(method: str, exc: Exception) -> str:
    """What the real code raised, and the innermost line it raised on."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    message = f": {exc}" if str(exc) else ""
    return f"{method} raises {type(exc).__name__}{where}{message}"
'''
"""How a step names the exception the real code raised (SPEC P0), in every repro."""

REAL_REST = (
    RAISED
    + '''

USER_FILES: dict[str, str] = $user_files
"""The policy's own file (a lone scheduler.py, a patch module, a subclass's module), carried
verbatim and laid over the source tree: release-relative path -> text."""

USER_METHODS: dict[str, tuple[str, int]] = $user_methods
"""The members of Scheduler that file replaces: name -> (its path, the line of its def)."""


@pytest.fixture(scope="module")
def vllm() -> Extracted:
    """The real methods of the vLLM source tree, with the policy's own file laid over it,
    compiled from their text."""
    root = vllm_source_root()
    try:
        return extract(OverlayTree(DirectoryTree(root), USER_FILES), overrides=USER_METHODS)
    except SourceError as exc:
        pytest.fail(f"cannot read the scheduler methods from {root}: {exc}", pytrace=False)


def vllm_source_root() -> Path:
    """$$$source_variable, else the directory holding the installed vllm package."""
    named = os.environ.get("$source_variable")
    if named:
        root = Path(named)
    else:
        spec = importlib.util.find_spec("vllm")  # locates the package; does not import it
        if spec is None or not spec.submodule_search_locations:
            pytest.fail(
                "no vLLM source: install vllm, or set $source_variable to the root of a "
                "vLLM checkout or unpacked wheel",
                pytrace=False,
            )
        root = Path(next(iter(spec.submodule_search_locations))).parent
    if not (root / SCHEDULER_FILE).is_file():
        pytest.fail(f"{root} has no {SCHEDULER_FILE}", pytrace=False)
    return root


# ---------------------------------------------------------------------------------------------
# chunkproof's property and budget-cap functions (SPEC P, S3), copied from its source.
# ---------------------------------------------------------------------------------------------

$functions


# ---------------------------------------------------------------------------------------------
# chunkproof's source loader (chunkproof.source.extraction, verbatim).
# ---------------------------------------------------------------------------------------------

$loader'''
)


REAL_METHODS = UNSAFE + REAL_REST
"""What every generated file runs and carries (a :class:`~string.Template`): P0 on a step, the
real methods as the call sites call them (``schedule_step``, whose parameters beyond the budget
are ``step_parameters`` and whose request is ``step_subject``, configured by ``step_config``
and ``step_attributes``), the source tree, chunkproof's ``functions`` and the ``loader``."""


ENCODER_STEP = '''
def unsafe(step: Step) -> str | None:
    """P0 SAFE: the real code raised, or a stage returned a value outside [0, its input]."""
    if step.crash is not None:
        return f"P0: {step.crash} (at c={step.c}, budget {step.budget})"
    if step.encoder is None:
        chain = [("split", step.split, step.n)]
    elif step.encoder_first:
        chain = [("encoder", step.encoder, step.n), ("split", step.split, step.encoder)]
    else:
        chain = [("split", step.split, step.n), ("encoder", step.encoder, step.split)]
    for name, value, limit in [*chain, ("reservation", step.reservation, chain[-1][1])]:
        if not 0 <= value <= limit:
            return f"P0: the {name} returns {value}, outside [0, {limit}] ({step})"
    return None


def encoder_forced(step: Step) -> bool:
    """SPEC P4's exemption (b): the chunk ends where the encoder cap put it (the cap lowered
    its input and no later stage moved the end)."""
    if step.encoder is None:
        return False
    before = step.n if step.encoder_first else step.split
    return step.encoder < before and step.chunk == step.encoder


def schedule_step(
    vllm: Extracted,
    scheduler: StandIn,
    c: int,
    budget: int,$step_lines
    encoder: EncoderRun | None,
) -> Step:
    """One step of schedule() for $step_subject: the budget cap, then the real split and the
    real encoder cap (``encoder``; None for a request without items) in the order of the
    tree's schedule() (the encoder first up to 0.27), then the real reservation when the
    source has one. At c = c0 the waiting loop admits the request (num_computed_tokens 0,
    the hits and u as arguments); after, the running loop calls the split with
    num_computed_tokens = c. The encoder's cache is left as it is: the test advances it after
    a step the request takes."""
    n = $cap($step_config, c, budget)
    computed = computed_tokens($step_config, c)
    request = standin_tree(REQUEST_LABEL, {**$step_attributes, "num_computed_tokens": computed})
    uncached = [uncached_at($step_config, c)] if vllm.takes_uncached_prefix else []
    hits = (local_hit($step_config, c), external_hit($step_config, c))
    split, encoded = 0, None if encoder is None else 0
    scheduled: tuple[list[int], list[int]] = ([], [])
    value = n
    first = encoder is not None and encoder.before_split
    stages = ["encoder", "split"] if first else ["split", "encoder"]
    for stage in stages if encoder is not None else ["split"]:
        try:
            if stage == "split":
                split = value = scheduler._mamba_block_aligned_split(
                    request, value, *hits, *uncached
                )
            elif encoder is not None:
                inputs, encoded, duplicates = encoder.encode(c, value)
                scheduled, value = (inputs, duplicates), encoded
        except SourceError:
            raise
        except Exception as exc:  # the real code raised: P0
            method = SPLIT_METHOD if stage == "split" else "_try_schedule_encoder_inputs"
            return Step(c, budget, n, split, 0, 0, raised(method, exc), encoded, first)
    reservation = value
    if vllm.has_reservation:
        try:
            reservation = scheduler._reserve_prefill_lookahead(request, c, value)
        except SourceError:
            raise
        except Exception as exc:  # the real code raised: P0
            crash = raised("_reserve_prefill_lookahead", exc)
            return Step(c, budget, n, split, 0, 0, crash, encoded, first)
    return Step(c, budget, n, split, reservation, reservation, None, encoded, first, scheduled)
'''
"""``unsafe``, P4's exemption and ``schedule_step`` of a file with encoder items, the encoder
run for a request that has them (a :class:`~string.Template` piece: ``step_lines`` are the
parameters beyond the budget, one a line, the rest as in :data:`REAL_METHODS`)."""


ENCODER_DRIVER = """


# ---------------------------------------------------------------------------------------------
# chunkproof's encoder driver (chunkproof.source.encoder_run, verbatim).
# ---------------------------------------------------------------------------------------------

$encoder_run"""
