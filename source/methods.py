"""The real split and reservation of a vLLM ``scheduler.py`` as policy stages.

vLLM is never imported, and nothing read from its files is compiled or executed.
:func:`load_scheduler` finds the two methods and everything they reach in the source text with
:mod:`chunkproof.source.extraction` (whose errors are re-raised here as one-line
:class:`~chunkproof.model.errors.PolicyError`) and turns them into validated syntax trees
(:mod:`chunkproof.source.functions`). :class:`MethodStage` runs those trees through the
policy-subset interpreter: over Python integers (the concrete form,
:mod:`chunkproof.model.concrete`), over NumPy arrays, or translated to Z3.

The methods run on stand-ins built from a :class:`~chunkproof.model.config.Config` (or any
object with its fields holding arrays or Z3 terms) by :func:`standins`: plain data
(:class:`~chunkproof.model.subset.SourceObject`) with exactly the attributes of the table below.
Reading any other one raises :class:`~chunkproof.model.subset.StandInError` naming it and the
``--set`` that gives it a value, so an input the model does not have can never be silently
defaulted. Attribute -> Config
field (history note section 2 symbol; releases reading it):

=====================================================  ===========================  ===========
stand-in attribute                                     Config field [symbol]        read by
=====================================================  ===========================  ===========
``self.cache_config.block_size``                       ``block`` [B]                0.15+
``self.block_size``                                    ``sched_block`` [B_s]        0.32+
``self.hash_block_size``                               ``hash_block`` [H]           0.26+
``self.use_eagle``                                     ``drop`` [D]                 0.15-0.29
``self.use_eagle_block_drop``                          ``drop`` [D]                 0.30+
``self.mamba_partial_cache_hit``                       ``partial_hits`` [F]         0.26+
``self.mamba_fine_grained_prefix_cache``               ``exact_junction`` [S]       0.30
``self.mamba_shared_prefix_checkpoint``                ``exact_junction`` [S]       0.31+
``self.mamba_has_prefill_checkpoint_blocks``           ``checkpoints`` [K]          0.29+
``self.mamba_prefill_checkpoint_alignment``            ``checkpoint_alignment``     0.30+
                                                       [alpha; 0 -> ``None``]
``self.max_num_scheduled_tokens``                      ``max_sched`` [M]            0.27+
``self.scheduler_config.long_prefill_token_threshold`` ``threshold`` [theta]        0.27+
``self.num_hash_lookahead_tokens``                     ``hash_lookahead`` [L_h]     0.33
``self.num_prefill_lookahead``                         ``lookahead`` [L]            0.28+
``request.num_prompt_tokens``                          ``prompt`` [P]               0.15+
``request.num_tokens``                                 ``tokens`` [T]               0.17+
``request.num_output_tokens``                          ``tokens - prompt`` [O]      0.15
``request.shared_prefix_boundary``                     ``junction`` [J]             0.26+
``request.num_computed_tokens``                        :class:`Hits` ``computed``   0.15+
                                                       [c_r]
=====================================================  ===========================  ===========

The split's other inputs are arguments: ``num_new_tokens`` [n], the local and external hits
``Hits.local`` [l] and ``Hits.external`` [x], and in 0.24-0.25 the fifth positional argument
``num_uncached_common_prefix_tokens`` = ``uncached_prefix`` [u], passed as the waiting loop does.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chunkproof.model.config import MAX_VALUE, Config
from chunkproof.model.errors import PolicyError, SubsetError
from chunkproof.model.step import step_view
from chunkproof.model.subset import Member, SourceClass, SourceObject, SubsetFunction, Value
from chunkproof.source.encoder_run import ENCODER_REQUEST_ID
from chunkproof.source.extraction import (
    REQUEST_LABEL,
    RESERVE_METHOD,
    SCHEDULER_LABEL,
    SPLIT_METHOD,
    Collector,
    DirectoryTree,
    SourceError,
    SourceTree,
    attribute_path,
    package_root,
)
from chunkproof.source.functions import interpret, source_class
from chunkproof.source.imperative import LaneSet


def _missing(path: str) -> str:
    """The error for a read of a stand-in attribute the model does not have."""
    return (
        f"the vLLM code reads {path}, an input chunkproof does not model; "
        f"give it a value with --set {path}=VALUE"
    )


@dataclass(frozen=True)
class Hits:
    """How the split's start c = c_r + l + x divides (history note section 2)."""

    computed: int
    """``request.num_computed_tokens`` [c_r]."""
    local: int = 0
    """``num_new_local_computed_tokens`` [l] (waiting loop only)."""
    external: int = 0
    """``num_external_computed_tokens`` [x] (waiting loop only)."""

    @property
    def start(self) -> int:
        """c, the split's start."""
        return self.computed + self.local + self.external


Overrides = tuple[tuple[str, object], ...]
"""``--set`` values: (``self.x.y`` or ``request.z``, value) for inputs the model does not have."""


def parse_overrides(items: list[str]) -> Overrides:
    """``["self.scheduler_config.x=3", "self.a.f()=256", "request.y=True", ...]`` ->
    overrides: an attribute path of ``self`` or ``request``, or (a trailing call) the value a
    call of a method of a stand-in returns; values are ints, True, False, None, or a quoted
    string. How the code uses each value is checked when the policy is built
    (:func:`chunkproof.source.inputs.check_overrides`).

    A call is matched by the method's name, whatever its arguments: ``self.a.f(p, t)=4``,
    ``self.a.f(...)=4`` and ``self.a.f()=4`` all make every call of ``self.a.f`` return 4
    (recorded as ``self.a.f()``); the text between the parentheses is the user's note and
    must be well-formed call arguments."""
    constants: dict[str, object] = {"True": True, "False": False, "None": None}
    parsed = []
    for item in items:
        path, sep, text = _split_override(item)
        parts = path.removesuffix("()").split(".")
        if (
            not sep
            or parts[0] not in ("self", "request")
            or len(parts) < 2
            or not all(part.isidentifier() and not part.startswith("__") for part in parts)
        ):
            raise PolicyError(
                f"--set {item}: expected self.NAME=VALUE or request.NAME=VALUE "
                "(or self.NAME.method()=VALUE)"
            )
        quoted = len(text) >= 2 and text[0] == text[-1] and text[0] in "'\""
        try:
            value = text[1:-1] if quoted else constants[text] if text in constants else int(text)
        except ValueError:
            message = (
                f"--set {item}: the value must be an integer, True, False, None or a quoted string"
            )
            raise PolicyError(message) from None
        parsed.append((path, value))
    return tuple(parsed)


_CALL_OVERRIDE = re.compile(r"^(?P<path>[^=(]*)\((?P<args>.*)\)\s*=(?P<value>.*)$", re.DOTALL)


def _split_override(item: str) -> tuple[str, str, str]:
    """``PATH=VALUE`` as ``(path, "=", value)``; a call ``PATH(ARGS)=VALUE`` as
    ``(PATH(), "=", value)`` when ``ARGS`` are well-formed call arguments (or ``...``)."""
    call = _CALL_OVERRIDE.match(item)
    if call is None:
        return item.partition("=")
    try:
        ast.parse(f"f({call['args']})", mode="eval")
    except SyntaxError:
        return item.partition("=")
    return f"{call['path'].strip()}()", "=", call["value"]


def standins(
    cfg: Any,
    computed: Value,
    cls: SourceClass | None = None,
    overrides: Overrides = (),
    unmodelled: Unmodelled = (),
) -> tuple[SourceObject, SourceObject]:
    """The stand-in ``(self, request)`` of ``cfg`` (the table in the module docstring), for a
    config whose fields may hold Python values, arrays or Z3 terms.

    ``request.num_computed_tokens`` is ``computed`` [c_r]; every other attribute is the config
    field of the table, passed through unconverted, plus the ``--set`` ``overrides``; ``self``
    has the members of ``cls``. Reading an attribute neither has is an error naming it, and
    (``unmodelled``) every other input the code reads that the model lacks.
    """
    scheduler, request = standin_attributes(cfg, overrides)
    request["num_computed_tokens"] = computed
    missing = _missing_message(unmodelled)
    return (
        _tree(SCHEDULER_LABEL, scheduler, cls, missing),
        _tree(REQUEST_LABEL, request, None, missing),
    )


Unmodelled = tuple[tuple[str, str], ...]
"""Inputs the code reads that the model lacks: (path, where it is first read), from the
static analysis of :mod:`chunkproof.source.inputs`."""


def _missing_message(unmodelled: Unmodelled) -> Callable[[str], str]:
    """The error for a read of a missing attribute: it, and every other input the code reads
    that the model lacks, each with the line that first reads it (SPEC X4)."""

    def message(path: str) -> str:
        known = dict(unmodelled)
        covered = path in known or any(p.startswith(path + ".") for p in known)
        inputs = list(known.items()) if covered else [(path, ""), *known.items()]
        if len(inputs) == 1:
            where = f" (first read at {inputs[0][1]})" if inputs[0][1] else ""
            return _missing(inputs[0][0]) + where
        listed = ", ".join(f"{p} (first read at {w})" if w else p for p, w in inputs)
        return (
            f"the vLLM code reads {len(inputs)} inputs chunkproof does not model: {listed}; "
            f"give each a value with --set PATH=VALUE (e.g. --set {inputs[0][0]}=VALUE)"
        )

    return message


def _tree(
    label: str,
    flat: dict[str, Any],
    cls: SourceClass | None,
    missing: Callable[[str], str] = _missing,
) -> SourceObject:
    """A stand-in from dotted attribute paths (``{"cache_config.block_size": 16}``); a path
    ending in ``()`` is the value a call of that method returns."""
    nested: dict[str, dict[str, Any]] = {}
    direct: dict[str, Any] = {}
    for path, value in flat.items():
        head, dot, tail = path.partition(".")
        if dot:
            nested.setdefault(head, {})[tail] = value
        else:
            direct[head] = value
    for head, attributes in nested.items():
        direct[head] = _tree(f"{label}.{head}", attributes, None, missing)
    calls = {
        name.removesuffix("()"): direct.pop(name) for name in list(direct) if name.endswith("()")
    }
    if calls:
        cls = _returning(attribute_path(label), calls, cls)
    return SourceObject(attribute_path(label), direct, cls, missing)


def _returning(path: str, calls: dict[str, Any], cls: SourceClass | None) -> SourceClass:
    """``cls`` plus a member per ``--set PATH.name()=VALUE`` that returns the value, whatever
    the call's arguments (kind ``returns``: :meth:`~chunkproof.model.subset.Interpreter.
    bound_call`)."""
    members = dict(cls.members) if cls else {}
    for name, value in calls.items():
        if name in members:
            raise PolicyError(f"--set {path}.{name}()={value}: {name} is a method of the source")
        node = ast.parse(f"def {name}(self):\n    return {value!r}\n").body[0]
        assert isinstance(node, ast.FunctionDef)
        members[name] = Member("returns", SubsetFunction(name, node, "--set", {}))
    return SourceClass(cls.name if cls else path, members)


def standin_attributes(
    view: Any, overrides: Overrides = ()
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The attributes of the stand-in ``self`` and ``request`` (without
    ``request.num_computed_tokens``) by dotted path: the table in the module docstring, plus
    the ``--set`` ``overrides`` (which may not replace a modelled input).

    ``view`` is a step view (:func:`chunkproof.model.step.step_view`): a configuration whose
    fields may hold Python values, arrays or Z3 terms, with the derived fields ``eagle``,
    ``spec_tokens`` and ``speculative``. Attributes that are ``None`` for some configurations
    (the retention interval, the checkpoint alignment, the speculative config, which exists
    exactly when ``speculative``: L >= 1) need their field to be one plain value for the whole
    batch or proof cell.
    """
    speculative = _plain(view.speculative, "whether a lookahead L >= 1 is configured")
    scheduler: dict[str, Any] = {
        "cache_config.block_size": view.split_block,
        "cache_config.mamba_cache_mode": "align",
        "cache_config.enable_prefix_caching": True,
        "cache_config.enable_mamba_shared_prefix_checkpoint": view.exact_junction,
        "cache_config.prefix_cache_retention_interval": _retention(view.retention),
        "scheduler_config.long_prefill_token_threshold": view.threshold,
        "scheduler_config.max_num_batched_tokens": view.max_sched,
        "scheduler_config.max_num_scheduled_tokens": view.max_sched,
        "scheduler_config.enable_chunked_prefill": True,
        "scheduler_config.disable_chunked_mm_input": False,
        "block_size": view.sched_block,
        "hash_block_size": view.hash_block,
        "use_eagle": view.eagle,
        "use_eagle_block_drop": view.drop,
        "need_mamba_block_aligned_split": True,
        "has_mamba_layers": True,
        "mamba_partial_cache_hit": view.partial_hits,
        "mamba_fine_grained_prefix_cache": view.exact_junction,
        "mamba_shared_prefix_checkpoint": view.exact_junction,
        "mamba_has_prefill_checkpoint_blocks": view.checkpoints,
        "mamba_prefill_checkpoint_alignment": _alignment(view.checkpoint_alignment),
        "max_num_scheduled_tokens": view.max_sched,
        "max_model_len": MAX_VALUE,
        "num_hash_lookahead_tokens": view.hash_lookahead,
        "num_prefill_lookahead": view.lookahead,
        "num_spec_tokens": view.spec_tokens,
        "num_lookahead_tokens": view.spec_tokens,
    }
    if not speculative:
        scheduler["speculative_config"] = None
    else:
        scheduler["speculative_config.num_speculative_tokens"] = view.spec_tokens
    request: dict[str, Any] = {
        "num_prompt_tokens": view.prompt,
        "num_tokens": view.tokens,
        "num_tokens_with_spec": view.tokens,
        "num_output_tokens": view.tokens - view.prompt,
        "num_output_placeholders": 0,
        "shared_prefix_boundary": view.junction,
    }
    for path, value in overrides:
        root, _, rest = path.partition(".")
        target = scheduler if root == "self" else request
        if (
            rest in target
            or rest == "num_computed_tokens"
            or any(rest.startswith(k + ".") or k.startswith(rest + ".") for k in target)
        ):
            raise PolicyError(f"--set {path}: a model parameter, set by the configuration")
        target[rest] = value
    return scheduler, request


def _plain(value: Value, what: str) -> Any:
    """A field that must be one plain value for a whole batch (or a proof cell)."""
    if isinstance(value, (bool, int)):
        return value
    raise PolicyError(f"{what} must be the same in every configuration of a batch")


def _retention(retention: Value) -> Value:
    """``prefix_cache_retention_interval`` as vLLM holds it: -1 stands for ``None``."""
    value = _plain(retention, "the retention interval")
    return None if value < 0 else value


def _alignment(alpha: Value) -> Value:
    """alpha as vLLM holds it: 0 (off) is ``None``."""
    return _plain(alpha, "the checkpoint alignment alpha") or None


def encoder_standins(
    view: Any,
    computed: Value,
    budget: Value,
    scheduler_cls: SourceClass,
    cache_cls: SourceClass,
    request_cls: SourceClass,
    placeholder_cls: SourceClass,
    overrides: Overrides = (),
) -> tuple[SourceObject, SourceObject, SourceObject]:
    """The stand-in ``self``, ``request`` and ``self.encoder_cache_manager`` the real encoder
    scheduling runs on (:mod:`chunkproof.source.encoder`), for a step view whose fields
    may hold Python values, arrays or Z3 terms. Besides :func:`standin_attributes`:

    ==================================================  ============================================
    stand-in attribute                                  value
    ==================================================  ============================================
    ``self.encoder_cache_manager``                      the manager (its class from source;
                                                        ``__init__``, then ``allocate`` run on it)
    ``self.is_encoder_decoder``                         False (decoder-only models: Mamba hybrids)
    ``self.ec_connector``                               None (no encoder-cache connector)
    ``self.max_num_encoder_input_tokens``               b0 (``budget``)
    ``self.encoder_cache_mismatch_reqs``                an empty set
    ``request.request_id``                              :data:`ENCODER_REQUEST_ID`
    ``request.mm_features[i].identifier``               ``request-0/item-i`` (each its own entry)
    ``request.mm_features[i].mm_position.offset``       the item's start
    ``request.mm_features[i].mm_position.length``       its length
    ``request.mm_features[i].mm_position.is_embed``     None (every placeholder is an embedding)
    ``request.mm_features[i].modality``, ``.data``,     ``"image"``, None, None
    ``.mm_hash``
    ==================================================  ============================================

    ``self`` has the members of ``scheduler_cls``, ``request`` those of ``request_cls`` (its
    data attributes above come first), the positions those of ``placeholder_cls``.
    """
    scheduler, request = standin_attributes(view, overrides)
    request["num_computed_tokens"] = computed
    request["request_id"] = ENCODER_REQUEST_ID
    features = []
    for item in view.mm_items:
        label = f"{REQUEST_LABEL}.mm_features[{item.index}]"
        position = SourceObject(
            attribute_path(f"{label}.mm_position"),
            {"offset": item.start, "length": item.length, "is_embed": None},
            placeholder_cls,
            _missing,
        )
        features.append(
            SourceObject(
                attribute_path(label),
                {
                    "identifier": f"{ENCODER_REQUEST_ID}/item-{item.index}",
                    "mm_position": position,
                    "modality": "image",
                    "data": None,
                    "mm_hash": None,
                },
                None,
                _missing,
            )
        )
    request["mm_features"] = tuple(features)
    manager = SourceObject("self.encoder_cache_manager", {}, cache_cls, _missing)
    scheduler.update(
        {
            "encoder_cache_manager": manager,
            "is_encoder_decoder": False,
            "ec_connector": None,
            "max_num_encoder_input_tokens": budget,
            "encoder_cache_mismatch_reqs": LaneSet(),
        }
    )
    return (
        _tree(SCHEDULER_LABEL, scheduler, scheduler_cls),
        _tree(REQUEST_LABEL, request, request_cls),
        manager,
    )


@dataclass(frozen=True)
class SchedulerMethods:
    """The split and reservation of one ``scheduler.py`` as validated syntax trees, runnable on
    :func:`standins` by the policy-subset interpreter."""

    path: Path
    sha256: str
    """sha256 of ``scheduler.py``'s bytes."""
    cls: SourceClass = field(repr=False)
    has_reservation: bool
    takes_uncached_prefix: bool
    """The split has V3's fifth argument ``num_uncached_common_prefix_tokens``."""
    overrides: Overrides = ()
    """``--set`` values for inputs the model does not have."""
    unmodelled: Unmodelled = ()
    """Every input the code reads that the model lacks (named when one is read)."""

    def method(self, name: str) -> SubsetFunction:
        """The syntax tree of member ``name``."""
        return self.cls.members[name].function

    def split(self, cfg: Config, c: int | Hits, n: int) -> int:
        """The real ``_mamba_block_aligned_split(request, n, l, x[, u])``, interpreted.

        An ``int`` start is all ``num_computed_tokens`` (running loop); u is
        ``cfg.uncached_prefix`` when the release takes it.
        """
        hits = c if isinstance(c, Hits) else Hits(c)
        view = step_view(cfg, cfg.start if isinstance(c, Hits) else c, _native)
        scheduler, request = standins(view, hits.computed, self.cls, self.overrides)
        args = [scheduler, request, n, hits.local, hits.external]
        if self.takes_uncached_prefix:
            args.append(cfg.uncached_prefix)
        return self._run(SPLIT_METHOD, args)

    def reserve(self, cfg: Config, c: int, n: int) -> int:
        """The real ``_reserve_prefill_lookahead(request, num_computed_tokens=c, n)``,
        interpreted."""
        if not self.has_reservation:
            raise PolicyError(f"{self.path}: class Scheduler has no method {RESERVE_METHOD}")
        view = step_view(cfg, c, _native)
        scheduler, request = standins(view, c, self.cls, self.overrides)
        return self._run(RESERVE_METHOD, [scheduler, request, c, n])

    def _run(self, name: str, args: list[Value]) -> int:
        """Interpret member ``name`` (:func:`~chunkproof.source.functions.interpret`)."""
        return interpret(self.method(name), args, str(self.path))


def _native(function: Callable[..., Any], args: list[Value]) -> Value:
    """Apply a view field's function natively (:func:`~chunkproof.model.step.step_view`)."""
    return function(*args)


@dataclass(frozen=True)
class MethodStage:
    """A policy stage that is one real method of ``methods``, ``SPLIT_METHOD`` or
    ``RESERVE_METHOD`` (the split in the running loop, SPEC S3; the reservation R1).

    Calling it interprets the method on Python integers; :meth:`subset` and :meth:`arguments`
    give the same syntax tree and its stand-in arguments to the vectorised and symbolic forms.
    """

    methods: SchedulerMethods
    method: str

    def __call__(self, view: Any, c: int, n: int) -> int:
        """The concrete form: the method interpreted on the stand-ins of a step view."""
        return interpret(self.subset(), self.arguments(view, c, n), str(self.methods.path))

    def subset(self) -> SubsetFunction:
        """The method's syntax tree (validated against the policy subset)."""
        return self.methods.method(self.method)

    def arguments(self, view: Any, c: Value, n: Value) -> list[Value]:
        """The interpreter's arguments: ``self``, ``request`` and the call site's values at
        this step (:func:`chunkproof.model.step.step_view`: the waiting loop passes the hits
        and u at admission, the running loop passes none)."""
        methods = self.methods
        scheduler, request = standins(
            view, view.computed, methods.cls, methods.overrides, methods.unmodelled
        )
        if self.method == RESERVE_METHOD:
            return [scheduler, request, c, n]
        uncached = [view.uncached_prefix] if methods.takes_uncached_prefix else []
        return [scheduler, request, n, view.local, view.external, *uncached]


def load_scheduler(scheduler_py: Path, root: Path | None = None) -> SchedulerMethods:
    """Read the split and reservation of ``scheduler_py`` as validated syntax trees (module
    docstring); nothing is compiled or executed.

    ``root`` holds the ``vllm`` package that ``from vllm.x import y`` resolves into; by default
    the parent of the innermost ``vllm`` directory containing ``scheduler_py``.
    """
    scheduler_py = Path(scheduler_py)
    try:
        data = scheduler_py.read_bytes()
    except OSError as exc:
        raise PolicyError(f"{scheduler_py}: cannot read: {exc.strerror}") from None
    try:
        collector = Collector(DirectoryTree(root or package_root(scheduler_py), scheduler_py))
    except SourceError as exc:
        raise PolicyError(str(exc)) from None
    try:
        cls = source_class(collector)
    except SubsetError as exc:
        raise PolicyError(str(exc)) from None
    return SchedulerMethods(
        path=scheduler_py,
        sha256=hashlib.sha256(data).hexdigest(),
        cls=cls,
        has_reservation=RESERVE_METHOD in collector.members,
        takes_uncached_prefix=collector.takes_uncached_prefix,
    )


def source_files(tree: SourceTree) -> list[str]:
    """The release-relative paths of every file :func:`load_scheduler` reads from ``tree``."""
    try:
        return sorted(Collector(tree).modules)
    except SourceError as exc:
        raise PolicyError(str(exc)) from None
