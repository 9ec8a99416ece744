"""The real split and reservation of a vLLM ``scheduler.py`` as policy stages.

vLLM is never imported. :func:`load_scheduler` extracts and compiles the two methods and
everything they reach from the source text with :mod:`chunkproof.model.extraction` (whose
errors are re-raised here as one-line :class:`~chunkproof.model.errors.PolicyError`).

Each compiled function also carries its stripped syntax tree as a
:class:`~chunkproof.model.subset.SubsetFunction` (attribute
:data:`~chunkproof.model.subset.SUBSET_ATTRIBUTE`), so :class:`MethodStage` runs the very tree
that was compiled natively, vectorised over NumPy or translated to Z3 by the policy-subset
interpreter: helper calls and ``self.<method>(...)`` calls are inlined from their attached
trees; a ``property`` member is read natively.

The methods run on stand-ins built from a :class:`~chunkproof.model.config.Config` (or any
object with its fields holding arrays or Z3 terms) by :func:`standins`. Every attribute any
release 0.15.0-0.33.0 reads is set; reading any other one raises :class:`StandInError` naming
it, so an input the model does not have can never be silently defaulted. Attribute -> Config
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

import copy
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chunkproof.model import extraction
from chunkproof.model.config import Config
from chunkproof.model.errors import PolicyError
from chunkproof.model.extraction import (
    REQUEST_LABEL,
    RESERVE_METHOD,
    SCHEDULER_LABEL,
    SPLIT_METHOD,
    DirectoryTree,
    SourceError,
    SourceTree,
    package_root,
)
from chunkproof.model.subset import SUBSET_ATTRIBUTE, SubsetFunction, Value, parse, validate


class StandInError(PolicyError):
    """Real vLLM code read (or wrote) a stand-in attribute the model does not define."""


class StandIn(extraction.StandIn):
    """:class:`chunkproof.model.extraction.StandIn` raising :class:`StandInError`, whose message
    names the ``--set`` that gives the missing input a value."""

    error = StandInError

    def missing(self, path: str) -> str:
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
    """``["self.scheduler_config.x=3", ...]`` -> overrides; values are ints, True, False, None."""
    constants: dict[str, object] = {"True": True, "False": False, "None": None}
    parsed = []
    for item in items:
        path, sep, text = item.partition("=")
        root = path.split(".", 1)[0]
        if not sep or root not in ("self", "request") or "." not in path:
            raise PolicyError(f"--set {item}: expected self.NAME=VALUE or request.NAME=VALUE")
        try:
            value = constants[text] if text in constants else int(text)
        except ValueError:
            message = f"--set {item}: the value must be an integer, True, False or None"
            raise PolicyError(message) from None
        parsed.append((path, value))
    return tuple(parsed)


def standins(
    cfg: Config,
    c_split: Hits,
    scheduler_type: type[extraction.StandIn] = StandIn,
    overrides: Overrides = (),
) -> tuple[extraction.StandIn, extraction.StandIn]:
    """The stand-in ``(self, request)`` of ``cfg`` (the table in the module docstring)."""
    return view_standins(cfg, c_split.computed, scheduler_type, overrides)


def view_standins(
    cfg: Any,
    computed: Value,
    scheduler_type: type[extraction.StandIn] = StandIn,
    overrides: Overrides = (),
) -> tuple[extraction.StandIn, extraction.StandIn]:
    """:func:`standins` for a config whose fields may hold arrays or Z3 terms.

    ``request.num_computed_tokens`` is ``computed`` [c_r]; every other attribute is the config
    field of the table in the module docstring, passed through unconverted, plus the
    ``--set`` ``overrides``.
    """
    scheduler, request = standin_attributes(cfg, overrides)
    request["num_computed_tokens"] = computed
    return (
        extraction.standin_tree(SCHEDULER_LABEL, scheduler, scheduler_type, StandIn),
        extraction.standin_tree(REQUEST_LABEL, request, StandIn, StandIn),
    )


def standin_attributes(
    cfg: Any, overrides: Overrides = ()
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The attributes of the stand-in ``self`` and ``request`` (without
    ``request.num_computed_tokens``) by dotted path: the table in the module docstring, plus
    the ``--set`` ``overrides`` (which may not replace a modelled input)."""
    scheduler: dict[str, Any] = {
        "cache_config.block_size": cfg.block,
        "scheduler_config.long_prefill_token_threshold": cfg.threshold,
        "block_size": cfg.sched_block,
        "hash_block_size": cfg.hash_block,
        "use_eagle": cfg.drop,
        "use_eagle_block_drop": cfg.drop,
        "mamba_partial_cache_hit": cfg.partial_hits,
        "mamba_fine_grained_prefix_cache": cfg.exact_junction,
        "mamba_shared_prefix_checkpoint": cfg.exact_junction,
        "mamba_has_prefill_checkpoint_blocks": cfg.checkpoints,
        "mamba_prefill_checkpoint_alignment": _alignment(cfg.checkpoint_alignment),
        "max_num_scheduled_tokens": cfg.max_sched,
        "num_hash_lookahead_tokens": cfg.hash_lookahead,
        "num_prefill_lookahead": cfg.lookahead,
    }
    request: dict[str, Any] = {
        "num_prompt_tokens": cfg.prompt,
        "num_tokens": cfg.tokens,
        "num_output_tokens": cfg.tokens - cfg.prompt,
        "shared_prefix_boundary": cfg.junction,
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


def _alignment(alpha: Value) -> Value:
    """alpha as vLLM holds it: 0 (off) is ``None``; it must be one plain int for a batch."""
    if not isinstance(alpha, int):
        raise PolicyError("the checkpoint alignment alpha must be the same in every configuration")
    return alpha or None


@dataclass(frozen=True)
class SchedulerMethods:
    """The split and reservation of one ``scheduler.py``, runnable on :func:`standins`.

    ``scheduler_type`` is a :class:`StandIn` subclass holding the compiled members.
    """

    path: Path
    sha256: str
    """sha256 of ``scheduler.py``'s bytes."""
    scheduler_type: type[extraction.StandIn] = field(repr=False)
    has_reservation: bool
    takes_uncached_prefix: bool
    """The split has V3's fifth argument ``num_uncached_common_prefix_tokens``."""
    overrides: Overrides = ()
    """``--set`` values for inputs the model does not have."""

    def split(self, cfg: Config, c: int | Hits, n: int) -> int:
        """The real ``_mamba_block_aligned_split(request, n, l, x[, u])``.

        An ``int`` start is all ``num_computed_tokens`` (running loop); u is
        ``cfg.uncached_prefix`` when the release takes it.
        """
        hits = c if isinstance(c, Hits) else Hits(c)
        scheduler, request = standins(cfg, hits, self.scheduler_type, self.overrides)
        args = [request, n, hits.local, hits.external]
        if self.takes_uncached_prefix:
            args.append(cfg.uncached_prefix)
        return _as_int(getattr(scheduler, SPLIT_METHOD)(*args), self.path)

    def reserve(self, cfg: Config, c: int, n: int) -> int:
        """The real ``_reserve_prefill_lookahead(request, num_computed_tokens=c, n)``."""
        if not self.has_reservation:
            raise PolicyError(f"{self.path}: class Scheduler has no method {RESERVE_METHOD}")
        scheduler, request = standins(cfg, Hits(c), self.scheduler_type, self.overrides)
        return _as_int(getattr(scheduler, RESERVE_METHOD)(request, c, n), self.path)


def _as_int(value: object, path: Path) -> int:
    """The method's result, which must be an int."""
    if not isinstance(value, int):
        raise PolicyError(f"{path}: the vLLM method returned {value!r}, not an int")
    return value


@dataclass(frozen=True)
class MethodStage:
    """A policy stage that is one real method of ``methods``, ``SPLIT_METHOD`` or
    ``RESERVE_METHOD`` (the split in the running loop, SPEC S3; the reservation R1).

    Calling it runs the compiled method natively; :meth:`subset` and :meth:`arguments` give the
    same syntax tree and its stand-in arguments to the policy-subset interpreter.
    """

    methods: SchedulerMethods
    method: str

    def __call__(self, cfg: Config, c: int, n: int) -> int:
        """The native form: the compiled method on :func:`standins` of ``cfg``."""
        if self.method == RESERVE_METHOD:
            return self.methods.reserve(cfg, c, n)
        return self.methods.split(cfg, c, n)

    def subset(self) -> SubsetFunction:
        """The method's syntax tree (validated against the policy subset)."""
        return parse(getattr(self.methods.scheduler_type, self.method))

    def arguments(self, cfg: Any, c: Value, n: Value) -> list[Value]:
        """The interpreter's arguments: ``self``, ``request`` and the call site's values."""
        methods = self.methods
        scheduler, request = view_standins(cfg, c, methods.scheduler_type, methods.overrides)
        if self.method == RESERVE_METHOD:
            return [scheduler, request, c, n]
        uncached = [cfg.uncached_prefix] if self.methods.takes_uncached_prefix else []
        return [scheduler, request, n, 0, 0, *uncached]


def load_scheduler(scheduler_py: Path, root: Path | None = None) -> SchedulerMethods:
    """Extract and compile the split and reservation of ``scheduler_py`` (module docstring).

    ``root`` holds the ``vllm`` package that ``from vllm.x import y`` resolves into; by default
    the parent of the innermost ``vllm`` directory containing ``scheduler_py``.
    """
    scheduler_py = Path(scheduler_py)
    try:
        data = scheduler_py.read_bytes()
    except OSError as exc:
        raise PolicyError(f"{scheduler_py}: cannot read: {exc.strerror}") from None
    try:
        extracted = extraction.extract(
            DirectoryTree(root or package_root(scheduler_py), scheduler_py), StandIn
        )
    except SourceError as exc:
        raise PolicyError(str(exc)) from None
    for compiled in extracted.functions:
        _attach(compiled)
    return SchedulerMethods(
        path=scheduler_py,
        sha256=hashlib.sha256(data).hexdigest(),
        scheduler_type=extracted.scheduler_type,
        has_reservation=extracted.has_reservation,
        takes_uncached_prefix=extracted.takes_uncached_prefix,
    )


def source_files(tree: SourceTree) -> list[str]:
    """The release-relative paths of every file :func:`load_scheduler` reads from ``tree``."""
    try:
        return extraction.files_read(tree)
    except SourceError as exc:
        raise PolicyError(str(exc)) from None


def _attach(compiled: extraction.Compiled) -> None:
    """Give a compiled function (or the function under a property, staticmethod or
    classmethod) the syntax tree it was compiled from, without decorators, for the
    policy-subset interpreter; a function outside the subset is rejected here."""
    bare = copy.copy(compiled.node)
    bare.decorator_list = []
    tree = SubsetFunction(bare.name, bare, compiled.label, compiled.namespace)
    if not isinstance(compiled.member, property):  # a property is read natively
        validate(tree)  # reject code outside the policy subset now, with file and line
    setattr(compiled.function, SUBSET_ATTRIBUTE, tree)
