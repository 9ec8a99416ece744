"""One request's encoder under a vLLM tree's real code, compiled from the source text, driven
the way ``schedule()`` and ``update_from_output`` drive it (a standalone repro of a
counterexample with encoder items).

Standard library only beside :mod:`chunkproof.source.extraction`, so that a generated repro
test can carry it verbatim after the loader. It compiles release code natively, so chunkproof
itself never calls it: a repro test runs it on the vLLM tree its user points it at, and the
fidelity tests on the cached releases. The CLI interprets the same code instead
(:mod:`chunkproof.source.encoder`), which the fidelity tests check against this.

:class:`EncoderRun` compiles the release's ``EncoderCacheManager`` (whole), the ``Request``
members the encoder code calls, ``PlaceholderRange`` and the scheduler's encoder methods
(``_try_schedule_encoder_inputs`` and what it and the freeing call), each from its file with
annotations and decorators stripped, into one namespace with ``OrderedDict``, ``bisect`` and
``get_mm_features_in_window`` (0.23+). The scheduler and the request are
:class:`~chunkproof.source.extraction.StandIn` objects holding exactly what that code reads (no
connector, chunked multimodal input on, not encoder-decoder), so a read of anything else is an
error naming it, never a crash of the code. Where ``schedule()`` calls the encoder (before or
after the split) and the shift it passes are read from the tree's ``schedule()``
(:func:`encoder_call_site`), the shift evaluated on the stand-in scheduler. One step is
:meth:`EncoderRun.encode` at (c, n); a step that schedules tokens then
:meth:`EncoderRun.advance`: the scheduled inputs are allocated, c moves on, and the inputs the
request no longer needs are freed.
"""

from __future__ import annotations

import ast
import bisect
from collections import OrderedDict
from pathlib import Path
from typing import Any

from chunkproof.source.extraction import (
    REQUEST_LABEL,
    SCHEDULER_FILE,
    SCHEDULER_LABEL,
    SourceError,
    StandIn,
    standin_tree,
    stripped,
)

ENCODER_CACHE_FILE = "vllm/v1/core/encoder_cache_manager.py"
REQUEST_FILE = "vllm/v1/request.py"
INPUTS_FILE = "vllm/multimodal/inputs.py"
UTILS_FILE = "vllm/multimodal/utils.py"
ENCODER_SCHEDULER_METHODS = {
    "_try_schedule_encoder_inputs",
    "_reject_on_encoder_cache_embed_mismatch",
    "_free_encoder_inputs",
    "_free_encoder_input",
    "_allocate_encoder_inputs",
}
"""The scheduler's encoder methods (each release has some of them)."""
REQUEST_MEMBERS = {"get_num_encoder_embeds", "has_encoder_inputs", "num_encoder_inputs"}
ENCODER_REQUEST_ID = "request-0"
"""The request id the encoder stand-ins carry (one request)."""


class _Logger:
    """``logger``: every call does nothing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def compiled_class(
    root: Path, rel: str, name: str, members: set[str] | None, base: type = object
) -> type:
    """Class ``name`` of ``root / rel`` with its methods (those of ``members``), compiled with
    annotations and decorators stripped, deriving from ``base`` (module docstring)."""
    path = root / rel
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise SourceError(f"{path}: cannot read: {exc}") from None
    found = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    if not found:
        raise SourceError(f"{path}: no class {name}")
    body: list[ast.stmt] = [
        stripped(f, member=True)
        for f in found[0].body
        if isinstance(f, ast.FunctionDef) and (members is None or f.name in members)
    ]
    bases: list[ast.expr] = [ast.Name("_chunkproof_base", ast.Load())]
    cls = ast.ClassDef(name=name, bases=bases, keywords=[], body=body, decorator_list=[])
    namespace: dict[str, Any] = {
        "OrderedDict": OrderedDict,
        "bisect": bisect,
        "logger": _Logger(),
        "_chunkproof_base": base,
    }
    helper = _window_helper(root)
    if helper is not None:
        exec(compile(ast.fix_missing_locations(helper), str(root / UTILS_FILE), "exec"), namespace)
    module = ast.fix_missing_locations(ast.Module([cls], []))
    exec(compile(module, str(path), "exec"), namespace)
    result: type = namespace[name]
    return result


def _window_helper(root: Path) -> ast.Module | None:
    """``get_mm_features_in_window`` (0.23+), which the encoder method calls, or None."""
    path = root / UTILS_FILE
    if not path.is_file():
        return None
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef) and node.name == "get_mm_features_in_window":
            return ast.Module([stripped(node, member=False)], [])
    return None


def encoder_call_site(root: Path) -> tuple[bool, ast.expr]:
    """How ``Scheduler.schedule()`` of the tree at ``root`` calls the encoder: whether its
    first call of ``_try_schedule_encoder_inputs`` comes before its first call of the split
    (both loops keep one order: before up to 0.27, after from 0.28), and the expression it
    passes as ``shift_computed_tokens``."""
    path = root / SCHEDULER_FILE
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise SourceError(f"{path}: cannot read: {exc}") from None
    found = [
        member
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name == "Scheduler"
        for member in node.body
        if isinstance(member, ast.FunctionDef) and member.name == "schedule"
    ]
    if not found:
        raise SourceError(f"{path}: no Scheduler.schedule")
    calls: dict[str, ast.Call] = {}
    in_order = sorted(
        (n for n in ast.walk(found[0]) if isinstance(n, ast.Call)),
        key=lambda n: (n.lineno, n.col_offset),
    )
    for node in in_order:
        called = node.func
        if isinstance(called, ast.Attribute) and ast.unparse(called.value) == "self":
            calls.setdefault(called.attr, node)
    encoder = calls.get("_try_schedule_encoder_inputs")
    split = calls.get("_mamba_block_aligned_split")
    if encoder is None or split is None:
        raise SourceError(f"{path}: schedule() does not call both the encoder and the split")
    shift = [k.value for k in encoder.keywords if k.arg == "shift_computed_tokens"]
    if not shift:
        raise SourceError(f"{path}:{encoder.lineno}: the encoder call passes no shift")
    return (encoder.lineno, encoder.col_offset) < (split.lineno, split.col_offset), shift[0]


class EncoderRun:
    """The encoder of one request with ``items`` ((start, length) pairs) under the real code of
    the tree at ``root``: a cache of ``capacity`` embeddings, ``budget`` encoder embeddings a
    step, and the scheduler's ``use_eagle`` and lookahead L (module docstring). Requests of
    one scheduler share its cache: ``shared`` is another request's run, whose cache manager
    this one uses; each request has its own ``request_id`` and item identifiers."""

    def __init__(
        self,
        root: Path,
        items: list[tuple[int, int]],
        capacity: int,
        budget: int,
        use_eagle: bool,
        lookahead: int,
        shared: EncoderRun | None = None,
        request_id: str = ENCODER_REQUEST_ID,
    ) -> None:
        manager_type = compiled_class(root, ENCODER_CACHE_FILE, "EncoderCacheManager", None)
        request_type = compiled_class(root, REQUEST_FILE, "Request", REQUEST_MEMBERS, StandIn)
        position_type = compiled_class(root, INPUTS_FILE, "PlaceholderRange", None)
        scheduler_type = compiled_class(
            root, SCHEDULER_FILE, "Scheduler", ENCODER_SCHEDULER_METHODS, StandIn
        )
        self.manager: Any = manager_type(capacity) if shared is None else shared.manager
        self.scheduler: Any = standin_tree(
            SCHEDULER_LABEL,
            {
                "encoder_cache_manager": self.manager,
                "is_encoder_decoder": False,
                "ec_connector": None,
                "scheduler_config.disable_chunked_mm_input": False,
                "use_eagle": use_eagle,
                "num_prefill_lookahead": lookahead,
                "encoder_cache_mismatch_reqs": set(),
            },
            scheduler_type,
        )
        features = []
        for index, (start, length) in enumerate(items):
            position: Any = object.__new__(position_type)
            position.__dict__.update(offset=start, length=length, is_embed=None)
            feature = standin_tree(
                f"{REQUEST_LABEL}.mm_features[{index}]",
                {"identifier": f"{request_id}/item-{index}", "mm_position": position},
            )
            features.append(feature)
        self.request: Any = standin_tree(
            REQUEST_LABEL,
            {
                "mm_features": features,
                "request_id": request_id,
                "num_computed_tokens": 0,
                "num_output_placeholders": 0,
            },
            request_type,
        )
        self.budget = budget
        self.before_split, shift = encoder_call_site(root)
        expression = ast.fix_missing_locations(ast.Expression(shift))
        label = str(root / SCHEDULER_FILE)
        self.shift: int = eval(compile(expression, label, "eval"), {"self": self.scheduler})

    def encode(self, c: int, n: int) -> tuple[list[int], int, list[int]]:
        """``_try_schedule_encoder_inputs(request, c, n, budget, shift_computed_tokens=...)``
        with the call site's shift: the inputs it schedules, the tokens it leaves the chunk,
        and the inputs another request computes (0.33's duplicates; none before)."""
        result = self.scheduler._try_schedule_encoder_inputs(
            self.request, c, n, self.budget, shift_computed_tokens=self.shift
        )
        duplicates = list(result[4]) if len(result) > 4 else []
        return list(result[0]), result[1], duplicates

    def advance(self, inputs: list[int], duplicates: list[int], end: int) -> None:
        """After a step that scheduled tokens up to ``end``: :meth:`allocate`, then
        :meth:`computed`."""
        self.allocate(inputs, duplicates)
        self.computed(end)

    def allocate(self, inputs: list[int], duplicates: list[int]) -> None:
        """The request is scheduled: the inputs its call scheduled are allocated, in the loop
        of ``schedule()`` that scheduled it."""
        if hasattr(type(self.scheduler), "_allocate_encoder_inputs"):
            self.scheduler._allocate_encoder_inputs(self.request, inputs, duplicates)
        else:
            for i in inputs:
                self.manager.allocate(self.request, i)

    def computed(self, end: int) -> None:
        """The step's tokens are computed up to ``end``: the inputs the request no longer
        needs are freed (``update_from_output``)."""
        object.__setattr__(self.request, "num_computed_tokens", end)
        self.scheduler._free_encoder_inputs(self.request)

    def holds(self) -> bool:
        """Whether the request still references an entry of the cache (``_free_encoder_inputs``
        has not freed every item it allocated; an entry no request references stays cached,
        freeable)."""
        request_id = self.request.request_id
        return any(
            request_id in self.manager.cached.get(feature.identifier, ())
            for feature in self.request.mm_features
        )

    def finished(self) -> None:
        """The request finished: every entry it references is freed (``_free_request``)."""
        self.manager.free(self.request)

    def referenced(self) -> tuple[frozenset[str], int, int]:
        """The cache's state: the entries some request references, and its free and
        freeable slots."""
        held = frozenset(h for h, refs in self.manager.cached.items() if refs)
        return held, self.manager.num_free_slots, self.manager.num_freeable_slots
