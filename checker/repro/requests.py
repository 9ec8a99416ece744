"""Standalone pytest repros of a counterexample (SPEC C; ``chunkproof repro FILE --pytest OUT``).

The generated file needs pytest and a vLLM source tree, nothing else: it carries
:mod:`chunkproof.source.extraction` verbatim (standard library only) to read the real
``Scheduler._mamba_block_aligned_split`` and ``_reserve_prefill_lookahead`` from the source text,
runs them on stand-ins holding exactly the counterexample's configuration, and calls them as the
call sites do (:data:`CALL_SITE`: at c = c0 the waiting loop passes the admission hits, local
and external, and V3's u; after, the running loop passes c). It offers the recorded budgets step
by step, then the largest budget until the prefill ends (a P7 counterexample: its ``const(b)``
at every step), and checks every step with chunkproof's own predicates (their source is copied
in too, with the budget cap of the counterexample's composition): first SPEC P0 (the real code
raised, or a stage left [0, its input]), then the counterexample's property. Each failure names
the property it breaks (``AssertionError: P1: stuck at c=46 ...``). So the file fails on code
with the bug and passes on a fix, and it cannot drift from the model: every function in it is
the one chunkproof runs. A request with encoder items also runs its encoder under the tree's
own code (:data:`ENCODER_STEP`): the file carries :mod:`chunkproof.source.encoder_run`, which
compiles ``_try_schedule_encoder_inputs`` and the ``EncoderCacheManager`` from the source text,
reads where ``schedule()`` calls the encoder, and keeps the cache from step to step.
:mod:`chunkproof.checker.repro.system` builds a multi-request file's repro from the same
pieces (:data:`PRELUDE`, :data:`STEP_CLASS`, :data:`REAL_METHODS`, :data:`ENCODER_STEP`).
"""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from string import Template
from types import FunctionType, ModuleType
from typing import Any, TypeGuard

from chunkproof.model.budget import Const
from chunkproof.model.config import Config, encoder_capacity, encoder_compute_budget
from chunkproof.model.counterexample import Counterexample
from chunkproof.model.errors import ChunkproofError
from chunkproof.model.policy import Policy
from chunkproof.model.step import (
    Step,
    computed_tokens,
    external_hit,
    local_hit,
    step_view,
    uncached_at,
)
from chunkproof.model.system_counterexample import SystemCounterexample
from chunkproof.source import encoder_run, extraction
from chunkproof.source.loading import recorded_policy
from chunkproof.source.methods import standin_attributes
from chunkproof.source.policy import recorded_options
from chunkproof.spec import properties as props

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


def repro_source(cx: Counterexample, source_name: str) -> str:
    """The text of the standalone pytest file for ``cx`` (module docstring). With encoder
    items the file also runs the request's encoder under the tree's real code
    (:data:`_ENCODER`)."""
    cfg = cx.config
    scheduler, request = standins(cx, cfg, source_name)
    name = props.PROPERTIES[cx.property].name.lower().replace("-", "_")
    head = f"{cx.property} {props.PROPERTIES[cx.property].name} breaks on {cx.policy}"
    values = {
        "docstring": file_docstring(cx, f"{head} ({cfg.describe()})", _offered(cx), source_name),
        "config": config_literal(cfg),
        "scheduler": dict_literal(scheduler),
        "request": dict_literal(request),
        "prefill_end": str(cfg.prefill_end),
        "largest": str(cx.largest_budget()),
        "policy": one_line(cx.policy),
        "recorded": _recorded_literal(cx),
        "property": cx.property,
        "test_name": f"test_{cx.property.lower()}_{name}",
        "definition": props.PROPERTIES[cx.property].definition,
        "check_body": _check(cx),
        "checked": "P0" if cx.property == "P0" else f"{cx.property} (or P0)",
        "budgets": _budgets(cx),
    }
    policy = recorded_policy(cx)
    if not cfg.items:
        methods = real_methods(policy, _predicates(cx))
        return _TEMPLATE.substitute(values | _ONE_REQUEST | _NO_ENCODER | methods)
    imports, driver = module_source(encoder_run)
    methods = real_methods(policy, _predicates(cx), imports)
    encoder = encoder_values(cfg) | _ENCODER_CALLS | {"encoder_run": driver}
    return _ENCODER_TEMPLATE.substitute(values | _ONE_REQUEST | encoder | methods)


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


def standins(
    cx: Counterexample | SystemCounterexample, cfg: Config, source_name: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The attributes of the stand-in scheduler and request for a request of ``cfg`` (a
    request of ``cx``, read from ``source_name``), with the ``--set`` options ``cx`` was
    checked with (:func:`~chunkproof.source.methods.standin_attributes`)."""
    view = step_view(cfg, cfg.start, lambda function, args: function(*args))
    return standin_attributes(view, recorded_options(cx.policy_options)[1])


def real_methods(
    policy: Policy, predicates: FunctionList, more_imports: Sequence[str] = ()
) -> Values:
    """The values of :data:`REAL_METHODS` but ``schedule_step``'s, and the prelude's imports
    (with ``more_imports``): the budget cap of ``policy`` (the one the counterexample was
    found on), and chunkproof's functions the file calls (the cap, ``predicates``, the call
    site's :data:`CALL_SITE`) with every function they call."""
    cap = _cap_function(policy)
    loader_imports, loader = _loader_source()
    imports = _bound_once([*_OWN_IMPORTS, *loader_imports, *more_imports])
    return {
        "cap": cap.__name__,
        "functions": "\n\n\n".join(_function_sources([cap, *predicates, *CALL_SITE])),
        "source_variable": SOURCE_VARIABLE,
        "imports": "\n".join(sorted(imports, key=_import_order)),
        "loader": loader,
    }


def _bound_once(lines: list[str]) -> list[str]:
    """The import ``lines`` without those that bind only names an earlier line binds."""
    bound: set[str] = set()
    kept = []
    for line in lines:
        node = ast.parse(line).body[0]
        assert isinstance(node, ast.Import | ast.ImportFrom)
        names = {alias.asname or alias.name for alias in node.names}
        if not names <= bound:
            kept.append(line)
            bound |= names
    return kept


def _cap_function(policy: Policy) -> FunctionType:
    """The budget cap of ``schedule()`` in the composition of ``policy`` (SPEC S3)."""
    stage = policy.stage("cap")
    if stage is None or stage.source is not None or not isinstance(stage.function, FunctionType):
        raise ChunkproofError(f"{policy.name}: its budget cap is not a plain function")
    return stage.function


def _budgets(cx: Counterexample) -> str:
    """The budgets the test offers (SPEC S4): a P7 counterexample's ``const(b)`` at every step,
    else the recorded budgets, then the largest budget until the prefill ends."""
    if cx.property == "P7":
        return f"[{_const_budget(cx)}] * (PREFILL_END + 1)"
    return "[s.budget for s in RECORDED] + [LARGEST_BUDGET] * (PREFILL_END + 1)"


def _const_budget(cx: Counterexample) -> int:
    """b of a P7 counterexample's ``const(b)`` (the last step's budget in a file without it)."""
    model = cx.budget_model
    return model.budget if isinstance(model, Const) else cx.steps[-1].budget


def _predicates(cx: Counterexample) -> FunctionList:
    """chunkproof's predicate of the property (SPEC P), as the trace check calls it (P0 needs
    none: the stages' ranges and the crash are checked on every step)."""
    pid = cx.property
    if pid == "P0":
        return []
    if pid in props.STUCK_PROPERTIES:
        return [props.stuck]
    if pid in props.EDGE_PROPERTIES:
        return [props.EDGE_PROPERTIES[pid]]
    if pid == "P5":
        return [props.WINDOW_PROPERTIES[cx.window()]]
    raise ChunkproofError(f"no repro for property {pid}")


def _check(cx: Counterexample) -> str:
    """The body of the generated ``violation(vllm, scheduler, step)``: SPEC P per property.

    Every step is checked for P0 first (:data:`_SAFETY`: the real code raised, or a stage left
    [0, its input]), whatever the property; each problem names the property it breaks. P1/P2:
    the largest budget yields 0 at c; P7: the ``const(b)`` step yields 0 at c < E (the state
    never changes, so the run never finishes); P3-P6: chunkproof's predicate of the chunk.
    """
    pid = cx.property
    extra = ", encoder" if cx.config.items else ""
    if pid == "P0":
        return "    return unsafe(step)\n"
    if pid == "P7":
        return _SAFETY + (
            "    if stuck(CONFIG, step.c, step.chunk):\n"
            "        return (\n"
            '            f"P7: const({step.budget}) never finishes: at c={step.c} < "\n'
            '            f"E={PREFILL_END} the step yields 0 ({step}); c, T and the flags "\n'
            '            "never change"\n'
            "        )\n"
            "    return None\n"
        )
    if pid in props.STUCK_PROPERTIES:
        return _SAFETY + (
            "    largest = schedule_step(vllm, scheduler, step.c, LARGEST_BUDGET"
            f"{extra})\n"
            "    problem = unsafe(largest)\n"
            "    if problem is not None:\n"
            "        return problem\n"
            "    if stuck(CONFIG, step.c, largest.chunk):\n"
            "        return (\n"
            f'            f"{pid}: stuck at c={{step.c}} < E={{PREFILL_END}}: even the largest "\n'
            '            f"budget, {LARGEST_BUDGET}, yields 0 ({largest}); c, T and the flags "\n'
            '            "never change"\n'
            "        )\n"
            "    return None\n"
        )
    predicate = _predicates(cx)[0].__name__
    args = "CONFIG, step.c, step.n, step.end" if pid == "P5" else "CONFIG, step.c, step.end"
    rule = props.PROPERTIES[pid]
    exempt = " and not encoder_forced(step)" if pid == "P4" and cx.config.items else ""
    return _SAFETY + (
        f"    if step.chunk > 0 and {predicate}({args}){exempt}:\n"
        "        return (\n"
        f'            f"{pid}: chunk [{{step.c}}, {{step.end}}) breaks {pid} {rule.name} "\n'
        f'            f"({rule.definition}): {{step}}"\n'
        "        )\n"
        "    return None\n"
    )


_SAFETY = """\
    problem = unsafe(step)
    if problem is not None:
        return problem
"""
"""P0 on the step itself, first in every property's check."""


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
        f"# from {f.__module__}\n{inspect.getsource(f).rstrip()}"
        for f in sorted(found.values(), key=lambda f: (f.__module__, f.__name__))
    ]


def _ours(value: object) -> TypeGuard[FunctionType]:
    """Whether ``value`` is a function of chunkproof's own."""
    return isinstance(value, FunctionType) and value.__module__.startswith("chunkproof.")


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
    cx: Counterexample | SystemCounterexample, title: str, offered: str, source_name: str
) -> str:
    """The generated file's docstring: ``title`` (what breaks where), ``cx``'s verdict, what
    the test runs and ``offered``, where the source tree comes from, and where the file
    came from (``source_name``). Backslashes and double quotes in them are escaped: a
    file name, a policy name and a verdict stay inside the docstring."""
    source = (
        f"vLLM source with sha256 {cx.source_sha256}"
        if cx.source_sha256
        else f"chunkproof's model {cx.policy}"
    )
    requests = cx.requests if isinstance(cx, SystemCounterexample) else (cx.config,)
    items = any(cfg.items for cfg in requests)
    encoder = (
        " For the request with encoder items it also compiles the tree's "
        "_try_schedule_encoder_inputs, EncoderCacheManager, Request members and "
        "PlaceholderRange, and runs the encoder cap where the tree's schedule() calls it, "
        "its cache kept from step to step."
        if items
        else ""
    )
    carried = "chunkproof.source.extraction" + (
        " and chunkproof.source.encoder_run" if items else ""
    )
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
            f"returns a value outside [0, its input]).{encoder} It fails while the bug is in "
            "the code and passes once it is fixed.",
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


def _offered(cx: Counterexample) -> str:
    """The docstring's words on the budgets offered and what is asserted."""
    checked = "P0" if cx.property == "P0" else f"P0 and {cx.property}"
    if cx.property == "P7":
        return (
            f"the counterexample's budget model, const({_const_budget(cx)}), at every step, and "
            f"asserts {checked}"
        )
    return (
        "the counterexample's budgets step by step, then the largest budget until the prefill "
        f"ends, and asserts {checked}"
    )


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


def _recorded_literal(cx: Counterexample) -> str:
    items = bool(cx.config.items)
    rows = [f"    {step_literal(s, items)}," for s in cx.steps]
    note = textwrap.wrap(f"{cx.property}: {cx.verdict}", 92)
    rows[-1:-1] = ["    # " + line for line in note]
    return "[\n" + "\n".join(rows) + "\n]"


PRELUDE = """$docstring

from __future__ import annotations

$imports

import pytest

Config = SimpleNamespace  # chunkproof's configuration type, here a plain namespace
"""
"""The head of every generated file (a :class:`~string.Template`): ``docstring`` and
``imports``."""

_CONFIGURATION = """
# The configuration (chunkproof's model, SPEC S1).
CONFIG = $config

# What the real methods read: the stand-in scheduler (``self``) and request, by attribute path.
# ``request.num_computed_tokens`` is the state c of each step. Reading any other attribute is an
# error naming it, so no input of the real code is silently defaulted.
SCHEDULER_ATTRIBUTES = $scheduler
REQUEST_ATTRIBUTES = $request

PREFILL_END = $prefill_end  # E = max(P, T - 1): the prefill is done when c reaches E
LARGEST_BUDGET = $largest  # the most tokens one step can offer


"""

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

_TEST = '''# The counterexample: what $policy does, step by step.
RECORDED = $recorded


def $test_name(vllm: Extracted$test_fixtures) -> None:
    """$property: $definition."""
    scheduler = standin_tree(SCHEDULER_LABEL, SCHEDULER_ATTRIBUTES, vllm.scheduler_type)
    budgets = $budgets
    c, path = CONFIG.start, []
    for budget in budgets:
        if c >= PREFILL_END:
            return
        step = schedule_step(vllm, scheduler, c, budget$step_extra)
        path.append(step)
        problem = violation(vllm, scheduler, step$step_extra)
        assert problem is None, f"{problem}; steps: {path}"
$advance        c = step.end
    pytest.fail(f"the prefill does not finish: c={c} < E={PREFILL_END}; steps: {path}")


def violation(vllm: Extracted, scheduler: StandIn, step: Step$test_fixtures) -> str | None:
    """What breaks $checked at this step, if anything: "Pn: why"."""
$check_body
'''

_UNSAFE = '''
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

REAL_REST = '''

def raised(method: str, exc: Exception) -> str:
    """What the real code raised, and the innermost line it raised on."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    message = f": {exc}" if str(exc) else ""
    return f"{method} raises {type(exc).__name__}{where}{message}"


@pytest.fixture(scope="module")
def vllm() -> Extracted:
    """The real methods of the vLLM source tree, compiled from its text."""
    root = vllm_source_root()
    try:
        return extract(DirectoryTree(root))
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

REAL_METHODS = _UNSAFE + REAL_REST
"""What every generated file runs and carries (a :class:`~string.Template`): P0 on a step, the
real methods as the call sites call them (``schedule_step``, whose parameters beyond the budget
are ``step_parameters`` and whose request is ``step_subject``, configured by ``step_config``
and ``step_attributes``), the source tree, chunkproof's ``functions`` and the ``loader``."""

_TEMPLATE = Template(PRELUDE + _CONFIGURATION + STEP_CLASS + _TEST + REAL_METHODS)

ENCODER_CONSTANTS = """# The request's encoder: the tree's EncoderCacheManager, Request members,
# PlaceholderRange and the scheduler's encoder methods, compiled from the source text (at the
# end of the file: chunkproof.source.encoder_run), driven as schedule() and update_from_output
# drive them.
ITEMS = $items  # (start, length) of each item's placeholders
ENCODER_CACHE = $encoder_cache  # C: the encoder cache in embeddings
ENCODER_BUDGET = $encoder_budget  # b0: the encoder compute budget of a step
USE_EAGLE = $use_eagle  # the scheduler's use_eagle
# Where schedule() calls the encoder (before the split up to 0.27, after it from 0.28) and the
# shift_computed_tokens it passes are read from the tree's schedule().
"""
"""What a file says of the request with encoder items (a :class:`~string.Template` piece)."""

_ENCODER = (
    ENCODER_CONSTANTS
    + '''

@pytest.fixture
def encoder() -> EncoderRun:
    """The request's encoder at admission: an empty cache."""
    root = vllm_source_root()
    try:
        return EncoderRun(root, ITEMS, ENCODER_CACHE, ENCODER_BUDGET, USE_EAGLE, CONFIG.lookahead)
    except SourceError as exc:
        pytest.fail(f"cannot read the encoder code from {root}: {exc}", pytrace=False)


'''
)
"""The encoder of a file whose request has encoder items (a :class:`~string.Template`)."""

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

_ADVANCE = """\
        if step.chunk > 0:
            encoder.advance(*step.scheduled, step.end)
"""
"""What the test does after a step the request took: the encoder allocates what it scheduled
and frees what the request no longer needs."""

ENCODER_DRIVER = """


# ---------------------------------------------------------------------------------------------
# chunkproof's encoder driver (chunkproof.source.encoder_run, verbatim).
# ---------------------------------------------------------------------------------------------

$encoder_run"""

_ENCODER_TEMPLATE = Template(
    PRELUDE
    + _CONFIGURATION
    + _ENCODER
    + STEP_CLASS
    + _TEST
    + ENCODER_STEP
    + REAL_REST
    + ENCODER_DRIVER
)

_NO_ENCODER = {"step_extra": "", "test_fixtures": "", "advance": ""}
"""The encoder's template values in a file whose request has no encoder items."""

_ENCODER_CALLS = {
    "step_extra": ", encoder",
    "test_fixtures": ", encoder: EncoderRun",
    "advance": _ADVANCE,
}
"""... and in one whose request has them: the test takes the ``encoder`` fixture, passes it
to every step and advances it after a step the request takes."""

_ONE_REQUEST = {
    "step_parameters": "",
    "step_lines": "",
    "step_subject": "this request",
    "step_config": "CONFIG",
    "step_attributes": "REQUEST_ATTRIBUTES",
}
"""``schedule_step`` of a single-request file: on the one ``CONFIG``."""
