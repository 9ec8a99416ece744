"""The real encoder scheduling of a vLLM tree as a policy stage (SPEC X5).

:func:`load_encoder` reads, from the source text only, ``Scheduler._try_schedule_encoder_inputs``
and every class member and module function it reaches, through each module's own imports:
the ``EncoderCacheManager`` (``vllm/v1/core/encoder_cache_manager.py``), ``Request``
(``vllm/v1/request.py``), ``PlaceholderRange`` (``vllm/multimodal/inputs.py``) and helpers
such as ``get_mm_features_in_window`` (0.23+). Members are turned into syntax trees when first
called and validated then against the extended subset of
:mod:`chunkproof.source.imperative`; nothing is compiled, imported or executed.

:class:`EncoderMethodStage` is the stage: at state c with proposed chunk n it builds the
stand-ins of :func:`chunkproof.source.methods.encoder_standins`, brings the encoder cache
manager to the state the request has at c by running the real ``__init__`` (capacity C, less
what other requests' entries reference: :func:`~chunkproof.model.config.encoder_room`) and
the real ``allocate`` of every item the request holds there
(:func:`chunkproof.model.stages.item_held`, with the release's free margin), and calls the
real ``_try_schedule_encoder_inputs(request, c, n, b0, shift_computed_tokens=shift)`` as
``schedule()`` does (the shift is the call site's: ``use_eagle`` up to 0.27, L from 0.28); the
chunk is the second element of what it returns. Why that cache state is exact for one request
is :func:`~chunkproof.model.stages.held_embeds`'s argument.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chunkproof.model.concrete import ScalarDomain
from chunkproof.model.config import encoder_compute_budget, encoder_room
from chunkproof.model.errors import PolicyCrash, PolicyError, SubsetError
from chunkproof.model.policy import Stage
from chunkproof.model.stages import ENCODER_CALL_SITES, item_held
from chunkproof.model.subset import (
    Domain,
    Interpreter,
    Member,
    SourceClass,
    SubsetFunction,
    Value,
    parse,
)
from chunkproof.source.extraction import (
    SCHEDULER_FILE,
    DirectoryTree,
    SourceError,
    SourceTree,
    package_root,
    parse_source,
    stripped,
    top_imports,
)
from chunkproof.source.imperative import (
    ImperativeInterpreter,
    LaneList,
    Logger,
    is_domain,
    stdlib_value,
)
from chunkproof.source.methods import Overrides, encoder_standins

ENCODER_METHOD = "_try_schedule_encoder_inputs"
ENCODER_CACHE_FILE = "vllm/v1/core/encoder_cache_manager.py"
REQUEST_FILE = "vllm/v1/request.py"
INPUTS_FILE = "vllm/multimodal/inputs.py"
ENCODER_FILES = (ENCODER_CACHE_FILE, REQUEST_FILE, INPUTS_FILE, "vllm/multimodal/utils.py")
"""The files the encoder stage reads besides ``scheduler.py`` (the release cache keeps them)."""

_CLASSES = {
    "scheduler": (SCHEDULER_FILE, "Scheduler"),
    "cache_manager": (ENCODER_CACHE_FILE, "EncoderCacheManager"),
    "request": (REQUEST_FILE, "Request"),
    "placeholder": (INPUTS_FILE, "PlaceholderRange"),
}
_KINDS = {
    "property": "property",
    "cached_property": "property",
    "staticmethod": "staticmethod",
    "classmethod": "classmethod",
}


class _Unbound:
    """A global name the interpreter cannot use; reading it is the error in :attr:`reason`."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class _Modules:
    """The modules of a source tree, parsed once, with namespaces resolved name by name."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self.parsed: dict[str, ast.Module] = {}
        self.namespaces: dict[str, _Namespace] = {}
        self.functions: dict[tuple[str, str], SubsetFunction] = {}

    def module(self, rel: str) -> ast.Module:
        if rel not in self.parsed:
            text = self.tree.read(rel)
            label = self.tree.label(rel)
            if text is None:
                raise SourceError(f"{label}: no such file")
            self.parsed[rel] = parse_source(text, label)
        return self.parsed[rel]

    def namespace(self, rel: str) -> _Namespace:
        if rel not in self.namespaces:
            self.namespaces[rel] = _Namespace(self, rel)
        return self.namespaces[rel]

    def find(self, dotted: str) -> str | None:
        base = dotted.replace(".", "/")
        for rel in (f"{base}.py", f"{base}/__init__.py"):
            if rel in self.parsed or self.tree.read(rel) is not None:
                return rel
        return None

    def function(self, rel: str, name: str) -> SubsetFunction | None:
        """Module-level function ``name`` of ``rel`` as a syntax tree."""
        key = (rel, name)
        if key not in self.functions:
            found = [
                n
                for n in self.module(rel).body
                if isinstance(n, ast.FunctionDef) and n.name == name
            ]
            if not found:
                return None
            node = stripped(found[-1], member=False)
            node.decorator_list = []
            self.functions[key] = SubsetFunction(
                name, node, self.tree.label(rel), self.namespace(rel)
            )
        return self.functions[key]

    def source_class(self, rel: str, name: str) -> SourceClass:
        """Class ``name`` of ``rel``: every method, property, static and class method."""
        classes = [
            n for n in self.module(rel).body if isinstance(n, ast.ClassDef) and n.name == name
        ]
        if not classes:
            raise SourceError(f"{self.tree.label(rel)}: no class {name}")
        members: dict[str, Member] = {}
        for node in classes[-1].body:
            if not isinstance(node, ast.FunctionDef):
                continue
            kinds = [_KINDS.get(_decorator_name(d), "") for d in node.decorator_list]
            if len(kinds) > 1 or "" in kinds:
                continue  # a setter, or a decorator the interpreter cannot follow
            bare = stripped(node, member=True)
            bare.decorator_list = []
            members[node.name] = Member(
                kinds[0] if kinds else "method",
                SubsetFunction(node.name, bare, self.tree.label(rel), self.namespace(rel)),
            )
        return SourceClass(name, members)


class _Namespace(Mapping[str, Any]):
    """The global names of one module, resolved when read: its functions, what its imports
    name in the tree (functions), the standard-library names
    :mod:`chunkproof.source.imperative` models, and for anything else an :class:`_Unbound`."""

    def __init__(self, modules: _Modules, rel: str) -> None:
        self.modules = modules
        self.rel = rel
        self.resolved: dict[str, Any] = {}

    def _globals(self) -> set[str]:
        names: set[str] = set()
        for node in self.modules.module(self.rel).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
        return names | set(top_imports(self.modules.module(self.rel)))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._globals()

    def __getitem__(self, name: str) -> Any:
        if name not in self.resolved:
            if name not in self:
                raise KeyError(name)
            self.resolved[name] = self._resolve(self.rel, name, 0)
        return self.resolved[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._globals())

    def __len__(self) -> int:
        return len(self._globals())

    def _resolve(self, rel: str, name: str, depth: int) -> Any:
        modules = self.modules
        label = modules.tree.label(rel)
        function = modules.function(rel, name)
        if function is not None:
            return function
        if _is_logger(modules.module(rel), name):
            return Logger(name)
        imports = top_imports(modules.module(rel))
        if name not in imports or depth > 16:
            return _Unbound(f"{label}: {name!r} is neither a function nor an import of one")
        source, imported, line = imports[name]
        found = modules.find(source)
        if found is not None and imported is not None:
            return self._resolve(found, imported, depth + 1)
        modelled = stdlib_value(source, imported)
        if modelled is not None:
            return modelled
        what = f"{source}.{imported}" if imported else source
        return _Unbound(f"{label}:{line}: {name!r} is {what}, which the interpreter does not model")


def _is_logger(module: ast.Module, name: str) -> bool:
    """``name = init_logger(...)`` (vLLM) or ``name = logging.getLogger(...)`` at top level."""
    for node in module.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
            and isinstance(node.value, ast.Call)
        ):
            return _decorator_name(node.value.func) in ("init_logger", "getLogger")
    return False


def _decorator_name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


@dataclass(frozen=True)
class EncoderMethods:
    """The classes the encoder stage reads from one source tree (module docstring)."""

    path: Path
    scheduler: SourceClass = field(repr=False)
    cache_manager: SourceClass = field(repr=False)
    request: SourceClass = field(repr=False)
    placeholder: SourceClass = field(repr=False)

    def member(self, cls: SourceClass, name: str) -> SubsetFunction:
        """Member ``name`` of ``cls``; a missing one is a one-line error."""
        member = cls.members.get(name)
        if member is None:
            raise PolicyError(f"{self.path}: class {cls.name} has no method {name}")
        return member.function


def load_encoder(scheduler_py: Path, root: Path | None = None) -> EncoderMethods | None:
    """The encoder classes of the tree of ``scheduler_py`` (module docstring), or ``None`` when
    its ``Scheduler`` has no ``_try_schedule_encoder_inputs``."""
    scheduler_py = Path(scheduler_py)
    tree = DirectoryTree(root or package_root(scheduler_py), scheduler_py)
    try:
        modules = _Modules(tree)
        classes = {key: modules.source_class(*where) for key, where in _CLASSES.items()}
    except SourceError as exc:
        if ENCODER_METHOD not in _scheduler_methods(tree):
            return None
        raise PolicyError(str(exc)) from None
    if ENCODER_METHOD not in classes["scheduler"].members:
        return None
    return EncoderMethods(scheduler_py, **classes)


def _scheduler_methods(tree: SourceTree) -> set[str]:
    text = tree.read(SCHEDULER_FILE)
    if text is None:
        return set()
    try:
        module = parse_source(text, SCHEDULER_FILE)
    except SourceError:
        return set()
    return {
        f.name
        for c in module.body
        if isinstance(c, ast.ClassDef) and c.name == "Scheduler"
        for f in c.body
        if isinstance(f, ast.FunctionDef)
    }


def _own(domain: Domain, function: Callable[..., Any], args: list[Value]) -> Value:
    """One of chunkproof's own subset functions in ``domain`` (they never raise)."""
    return Interpreter(domain).call(parse(function), args)


@dataclass(frozen=True)
class EncoderMethodStage:
    """The real encoder scheduling as a stage (module docstring); ``shift`` and ``margin`` are
    the release's call-site rules (:data:`chunkproof.model.stages.ENCODER_CALL_SITES`)."""

    methods: EncoderMethods
    shift: Callable[..., int]
    margin: Callable[..., int]
    overrides: Overrides = ()

    def __call__(self, view: Any, c: int, n: int) -> int:
        """The concrete form: interpreted on Python values; a crash raises
        :class:`~chunkproof.model.errors.PolicyCrash`."""
        domain = ScalarDomain()
        value = self.interpret(domain, view, c, n)
        if domain.crashed:
            raise PolicyCrash(domain.where or ENCODER_METHOD)
        if not isinstance(value, int) or isinstance(value, bool):
            raise PolicyError(f"{self.methods.path}: {ENCODER_METHOD} gave {value!r}, not an int")
        return value

    def subset(self) -> SubsetFunction:
        """The method's syntax tree."""
        return self.methods.member(self.methods.scheduler, ENCODER_METHOD)

    def arguments(self, view: Any, c: Value, n: Value) -> list[Value]:
        """Not used: the stage runs through :meth:`interpret` (its code keeps state)."""
        raise SubsetError(f"{ENCODER_METHOD} runs through the imperative interpreter")

    def interpret(self, domain: Domain, view: Any, c: Value, n: Value) -> Value:
        """The chunk after the real encoder scheduling at state ``c`` with proposed ``n``, in
        ``domain`` (crashes are reported to it)."""
        return self.run(domain, view, c, n)[0]

    def run(self, domain: Domain, view: Any, c: Value, n: Value) -> tuple[Value, Value]:
        """:meth:`interpret`'s chunk, and the count of items up to the last one the call
        scheduled (0 for none; :func:`~chunkproof.model.encoder_items.encoded_through`, read
        here from the real call's ``encoder_inputs_to_schedule``)."""
        methods = self.methods
        shift = _own(domain, self.shift, [view])
        margin = _own(domain, self.margin, [view])
        capacity = _own(domain, encoder_room, [view])
        budget = _own(domain, encoder_compute_budget, [view])
        scheduler, request, manager = encoder_standins(
            view,
            view.computed,
            budget,
            methods.scheduler,
            methods.cache_manager,
            methods.request,
            methods.placeholder,
            self.overrides,
        )
        interpreter = ImperativeInterpreter(domain)
        interpreter.call(
            methods.member(methods.cache_manager, "__init__"), [manager], {"cache_size": capacity}
        )
        allocate = methods.member(methods.cache_manager, "allocate")
        for index, item in enumerate(view.mm_items):
            held = _own(domain, item_held, [view, c, margin, item.start, item.end])
            interpreter.call(allocate, [manager, request, index], active=held)
        result = interpreter.call(
            self.subset(),
            [scheduler, request, c, n, budget],
            {"shift_computed_tokens": shift},
        )
        if not isinstance(result, tuple) or len(result) < 2 or not is_domain(result[1]):
            raise PolicyError(
                f"{methods.path}: {ENCODER_METHOD} does not return (inputs, n, budget, ...)"
            )
        return result[1], _through(domain, result[0])


def _through(domain: Domain, inputs: Value) -> Value:
    """1 + the largest index in ``inputs`` (a list, or a :class:`LaneList` whose entries hold
    on some lanes), 0 when empty."""
    through: Value = 0
    entries = inputs.entries() if isinstance(inputs, LaneList) else ((i, True) for i in inputs)
    for index, present in entries:
        later = domain.binop("+", index, 1)
        through = domain.ite(present, domain.maximum(through, later), through)
    return through


@dataclass(frozen=True)
class MissingEncoderStage:
    """The encoder stage of a source without ``_try_schedule_encoder_inputs``: the identity
    for a request without encoder items; a configuration with items is refused (the source
    cannot say what its encoder scheduling does)."""

    path: Path

    def __call__(self, view: Any, c: int, n: int) -> int:
        self._refuse(view)
        return n

    def subset(self) -> SubsetFunction:
        raise SubsetError(f"{self.path} has no {ENCODER_METHOD}")

    def arguments(self, view: Any, c: Value, n: Value) -> list[Value]:
        raise SubsetError(f"{self.path} has no {ENCODER_METHOD}")

    def interpret(self, domain: Domain, view: Any, c: Value, n: Value) -> Value:
        self._refuse(view)
        return n

    def _refuse(self, view: Any) -> None:
        if view.has_items:
            raise PolicyError(
                f"{self.path}: class Scheduler has no {ENCODER_METHOD}, so this source cannot "
                "run a request with encoder items (--items)"
            )


_LOADED: dict[tuple[Path, Path], EncoderMethods | None] = {}


def with_source_encoder(
    stages: tuple[Stage, ...],
    scheduler_py: Path,
    root: Path,
    version: str | None,
    overrides: Overrides = (),
    after_split: bool | None = None,
) -> tuple[Stage, ...]:
    """``stages`` of a source policy with its encoder stage (module docstring) inserted where
    ``schedule()`` applies the encoder cap: ``after_split`` as read from its ``schedule()``
    (:meth:`~chunkproof.source.schedule.Composition.encoder_after_split`), else (a
    built-in composition, ``--compose``) before the split in compositions without the
    reservation (up to 0.27) and between the split and the reservation in those with it (from
    0.28, history note 6). The call-site rules (shift, free margin) are those of the release
    (``version``'s built-in policy), else of the newest release with the same order."""
    key = (Path(scheduler_py).resolve(), Path(root).resolve())
    if key not in _LOADED:
        _LOADED[key] = load_encoder(Path(scheduler_py), Path(root))
    methods = _LOADED[key]
    names = [stage.name for stage in stages]
    if "encoder" in names or "split" not in names:
        return stages
    late = "reservation" in names if after_split is None else after_split
    source: Any
    if methods is None:
        source = MissingEncoderStage(Path(scheduler_py))
    else:
        shift, margin = _call_site(version, late)
        source = EncoderMethodStage(methods, shift, margin, overrides)
    stage = Stage("encoder", source, source)
    at = names.index("split") + 1 if late else names.index("split")
    return (*stages[:at], stage, *stages[at:])


def _call_site(version: str | None, late: bool) -> tuple[Callable[..., int], Callable[..., int]]:
    """(shift, free margin) of the release ``version``, else of 0.33 (encoder cap after the
    split) or 0.27 (before it)."""
    from chunkproof.model.builtin import get_builtin, policy_for_release

    policy = None
    if version:
        try:
            policy = policy_for_release(version)
        except PolicyError:
            policy = None
    if policy is None or (policy.stage("reservation") is not None) != late:
        policy = get_builtin("vllm-0.33" if late else "vllm-0.27")
    stage = policy.stage("encoder")
    assert stage is not None
    shift, margin = ENCODER_CALL_SITES[stage.function]
    return shift, margin
