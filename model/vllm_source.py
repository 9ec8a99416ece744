"""The real split and reservation of a vLLM ``scheduler.py``, compiled from source text.

vLLM is never imported. :func:`load_scheduler` parses ``scheduler.py`` with :mod:`ast`, takes
class ``Scheduler``'s ``_mamba_block_aligned_split`` (required) and
``_reserve_prefill_lookahead`` (0.28+, optional), every ``self.<member>`` they reach, and every
module-level helper they call (``get_mamba_prefill_checkpoint_position``,
``is_mamba_prefill_checkpoint_valid``, ``cdiv``, ...), resolved through each module's own
top-level ``from vllm.x.y import name`` imports into the release's files, transitively. Only
those function definitions are compiled, with annotations and decorators stripped
(``property``, ``staticmethod`` and ``classmethod`` on members are kept), one fresh namespace
per source module, under the real file name and line numbers. A name a compiled function uses
must be one of: an extracted function, a standard-library import, or a builtin; anything else
is a :class:`~chunkproof.model.errors.PolicyError` naming file and line.

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

import ast
import builtins
import copy
import hashlib
import importlib
import symtable
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Protocol

from chunkproof.model.config import Config
from chunkproof.model.errors import PolicyError
from chunkproof.model.subset import SUBSET_ATTRIBUTE, SubsetFunction, Value, parse

SCHEDULER_FILE = "vllm/v1/core/sched/scheduler.py"
"""Where ``scheduler.py`` sits below a release root."""

SPLIT_METHOD = "_mamba_block_aligned_split"
RESERVE_METHOD = "_reserve_prefill_lookahead"
UNCACHED_PARAM = "num_uncached_common_prefix_tokens"
"""V3's (0.24-0.25) extra split parameter u."""

_MEMBER_DECORATORS = {
    "property": "property",
    "cached_property": "property",
    "staticmethod": "staticmethod",
    "classmethod": "classmethod",
}
_STANDIN_BASE = "_chunkproof_StandIn"


class StandInError(PolicyError):
    """Real vLLM code read (or wrote) a stand-in attribute the model does not define."""


class StandIn:
    """A read-only stand-in for a vLLM object that has exactly the attributes it is given.

    Reading any other attribute raises :class:`StandInError` naming it. That is deliberately not
    an ``AttributeError``, so ``getattr(obj, name, default)`` in vLLM code cannot default it.
    """

    _label: str

    def __init__(self, label: str, **attributes: object) -> None:
        object.__setattr__(self, "_label", label)
        for name, value in attributes.items():
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> NoReturn:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        path = f"{_set_path(self._label)}.{name}"
        raise StandInError(
            f"the vLLM code reads {path}, an input chunkproof does not model; "
            f"give it a value with --set {path}=VALUE"
        )

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise StandInError(f"{self._label} is read-only: the vLLM code assigns {name!r}")

    def __repr__(self) -> str:
        return f"<{self._label}>"


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

_ROOTS = {"stand-in Scheduler": "self", "stand-in Request": "request"}


def _set_path(label: str) -> str:
    """A stand-in's label as the ``--set`` path of its attributes (``self.cache_config``)."""
    root, _, rest = label.partition(".")
    return ".".join(part for part in (_ROOTS.get(root, root), rest) if part)


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


def _apply(scheduler: StandIn, request: StandIn, overrides: Overrides) -> None:
    """Give the stand-ins the ``--set`` values; a modelled input cannot be overridden."""
    for path, value in overrides:
        root, *names = path.split(".")
        target = scheduler if root == "self" else request
        for name in names[:-1]:
            child = target.__dict__.get(name)
            if child is None:
                child = StandIn(f"{target._label}.{name}")
                object.__setattr__(target, name, child)
            target = child
        if names[-1] in target.__dict__:
            raise PolicyError(f"--set {path}: a model parameter, set by the configuration")
        object.__setattr__(target, names[-1], value)


def standins(
    cfg: Config, c_split: Hits, scheduler_type: type[StandIn] = StandIn, overrides: Overrides = ()
) -> tuple[StandIn, StandIn]:
    """The stand-in ``(self, request)`` of ``cfg`` (the table in the module docstring)."""
    return view_standins(cfg, c_split.computed, scheduler_type, overrides)


def view_standins(
    cfg: Any, computed: Value, scheduler_type: type[StandIn] = StandIn, overrides: Overrides = ()
) -> tuple[StandIn, StandIn]:
    """:func:`standins` for a config whose fields may hold arrays or Z3 terms.

    ``request.num_computed_tokens`` is ``computed`` [c_r]; every other attribute is the config
    field of the table in the module docstring, passed through unconverted, plus the
    ``--set`` ``overrides``.
    """
    scheduler = scheduler_type(
        "stand-in Scheduler",
        cache_config=StandIn("stand-in Scheduler.cache_config", block_size=cfg.block),
        scheduler_config=StandIn(
            "stand-in Scheduler.scheduler_config", long_prefill_token_threshold=cfg.threshold
        ),
        block_size=cfg.sched_block,
        hash_block_size=cfg.hash_block,
        use_eagle=cfg.drop,
        use_eagle_block_drop=cfg.drop,
        mamba_partial_cache_hit=cfg.partial_hits,
        mamba_fine_grained_prefix_cache=cfg.exact_junction,
        mamba_shared_prefix_checkpoint=cfg.exact_junction,
        mamba_has_prefill_checkpoint_blocks=cfg.checkpoints,
        mamba_prefill_checkpoint_alignment=_alignment(cfg.checkpoint_alignment),
        max_num_scheduled_tokens=cfg.max_sched,
        num_hash_lookahead_tokens=cfg.hash_lookahead,
        num_prefill_lookahead=cfg.lookahead,
    )
    request = StandIn(
        "stand-in Request",
        num_prompt_tokens=cfg.prompt,
        num_tokens=cfg.tokens,
        num_output_tokens=cfg.tokens - cfg.prompt,
        num_computed_tokens=computed,
        shared_prefix_boundary=cfg.junction,
    )
    _apply(scheduler, request, overrides)
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
    scheduler_type: type[StandIn] = field(repr=False)
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


class SourceTree(Protocol):
    """Source files by release-relative posix path (``vllm/v1/...py``)."""

    def read(self, rel: str) -> str | None:
        """The text of ``rel``, or ``None`` if the tree has no such file."""

    def label(self, rel: str) -> str:
        """How to name ``rel`` in an error message."""


@dataclass(frozen=True)
class DirectoryTree:
    """A release root directory; ``scheduler`` stands for :data:`SCHEDULER_FILE` if given."""

    root: Path
    scheduler: Path | None = None

    def _path(self, rel: str) -> Path:
        if rel == SCHEDULER_FILE and self.scheduler is not None:
            return self.scheduler
        return self.root / rel

    def read(self, rel: str) -> str | None:
        """The file's text, or ``None`` if it is missing."""
        path = self._path(rel)
        if not path.is_file():
            return None
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyError(f"{path}: cannot read: {exc}") from None

    def label(self, rel: str) -> str:
        """The file's path."""
        return str(self._path(rel))


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
    collector = _Collector(DirectoryTree(root or package_root(scheduler_py), scheduler_py))
    return SchedulerMethods(
        path=scheduler_py,
        sha256=hashlib.sha256(data).hexdigest(),
        scheduler_type=collector.compile(),
        has_reservation=RESERVE_METHOD in collector.members,
        takes_uncached_prefix=collector.takes_uncached_prefix,
    )


def source_files(tree: SourceTree) -> list[str]:
    """The release-relative paths of every file :func:`load_scheduler` reads from ``tree``."""
    return sorted(_Collector(tree).modules)


def package_root(scheduler_py: Path) -> Path:
    """The parent of the innermost ``vllm`` directory above ``scheduler_py``."""
    for parent in scheduler_py.resolve().parents:
        if parent.name == "vllm":
            return parent.parent
    return scheduler_py.resolve().parent


# --- reading and resolving -----------------------------------------------------------------


@dataclass
class _Module:
    """One parsed source file: its top-level functions and ``from``/``import`` names."""

    rel: str
    label: str
    tree: ast.Module
    functions: dict[str, ast.FunctionDef]
    imports: dict[str, tuple[str, str | None, int]]
    """local name -> (module, imported name or ``None`` for ``import m``, line)."""


@dataclass(frozen=True)
class _Link:
    """What a global name of a compiled module is bound to: an extracted function or an object."""

    rel: str = ""
    name: str = ""
    value: object = None

    def resolve(self, namespaces: dict[str, dict[str, Any]]) -> object:
        return namespaces[self.rel][self.name] if self.rel else self.value


class _Collector:
    """Finds, strips and compiles the functions the two methods reach (module docstring)."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self.modules: dict[str, _Module] = {}
        self.needed: dict[str, dict[str, ast.FunctionDef]] = {}
        self.links: dict[str, dict[str, _Link]] = {}
        self.members: dict[str, ast.FunctionDef] = {}
        scheduler = self._module(SCHEDULER_FILE)
        self.class_def = _scheduler_class(scheduler)
        available = {f.name: f for f in self.class_def.body if isinstance(f, ast.FunctionDef)}
        if SPLIT_METHOD not in available:
            raise PolicyError(f"{scheduler.label}: class Scheduler has no method {SPLIT_METHOD}")
        self.takes_uncached_prefix = _split_signature(available[SPLIT_METHOD], scheduler.label)
        if RESERVE_METHOD in available:
            _check_arity(available[RESERVE_METHOD], 4, scheduler.label)
        for name in (SPLIT_METHOD, RESERVE_METHOD):
            if name in available:
                self._need_member(scheduler, available, name)

    def _module(self, rel: str) -> _Module:
        """Parse ``rel`` once (a syntax error is a one-line PolicyError with file:line)."""
        if rel in self.modules:
            return self.modules[rel]
        label = self.tree.label(rel)
        text = self.tree.read(rel)
        if text is None:
            raise PolicyError(f"{label}: no such file")
        try:
            tree = ast.parse(text, filename=label)
        except SyntaxError as exc:
            raise PolicyError(f"{label}:{exc.lineno}: syntax error: {exc.msg}") from None
        module = _Module(rel, label, tree, _top_functions(tree), _top_imports(tree))
        self.modules[rel] = module
        return module

    def _need_member(
        self, scheduler: _Module, available: dict[str, ast.FunctionDef], name: str
    ) -> None:
        """Add method ``name`` of class Scheduler, the members it reads, and its helpers."""
        if name in self.members:
            return
        method = _stripped(available[name], member=True)
        self.members[name] = method
        for used in _self_attributes(method) & available.keys():
            self._need_member(scheduler, available, used)
        self._link_globals(scheduler, method)

    def _need(self, module: _Module, name: str) -> None:
        """Add top-level function ``name`` of ``module`` and, transitively, its helpers."""
        needed = self.needed.setdefault(module.rel, {})
        if name in needed:
            return
        function = _stripped(module.functions[name], member=False)
        needed[name] = function
        self._link_globals(module, function)

    def _link_globals(self, module: _Module, function: ast.FunctionDef) -> None:
        """Bind every global name ``function`` uses; builtins stay unbound."""
        links = self.links.setdefault(module.rel, {})
        for name in sorted(_global_names(function)):
            if name in links:
                continue
            if name in module.functions or name in module.imports:
                links[name] = self._resolve(module, name, _line_of(function, name))
            elif not hasattr(builtins, name):
                raise PolicyError(
                    f"{module.label}:{_line_of(function, name)}: {function.name} "
                    f"uses {name!r}, which is neither a function nor an import"
                )

    def _resolve(self, module: _Module, name: str, line: int) -> _Link:
        """What ``name`` means in ``module``: a function there, or what its import names."""
        if name in module.functions:
            self._need(module, name)
            return _Link(module.rel, name)
        if name not in module.imports:
            raise PolicyError(f"{module.label}: {name!r} is neither a function nor an import here")
        source, imported, line = module.imports[name]
        rel = self._find(source)
        if rel is not None and imported is not None:
            return self._resolve(self._module(rel), imported, line)
        if source.partition(".")[0] in sys.stdlib_module_names:
            return _Link(value=_stdlib_object(source, imported, module.label, line))
        raise PolicyError(
            f"{module.label}:{line}: cannot resolve {name!r} from {source}: it must "
            "be a function in the source tree or a standard-library name (a scheduler.py "
            "edited on its own belongs at vllm/v1/core/sched/ in a copy of a checkout or "
            "of a release tree such as the one `vllm==X.Y.Z` caches)"
        )

    def _find(self, dotted: str) -> str | None:
        """The tree path of module ``dotted``, if the tree has it."""
        base = dotted.replace(".", "/")
        for rel in (f"{base}.py", f"{base}/__init__.py"):
            if rel in self.modules or self.tree.read(rel) is not None:
                return rel
        return None

    def compile(self) -> type[StandIn]:
        """Compile the collected functions; return class Scheduler (a :class:`StandIn`)."""
        namespaces: dict[str, dict[str, Any]] = {rel: {} for rel in self.modules}
        for rel, functions in self.needed.items():
            _exec(list(functions.values()), self.modules[rel].label, namespaces[rel])
        scheduler = namespaces[SCHEDULER_FILE]
        scheduler[_STANDIN_BASE] = StandIn
        class_def = copy.copy(self.class_def)
        class_def.bases = [ast.Name(_STANDIN_BASE, ast.Load())]
        class_def.keywords = []
        class_def.decorator_list = []
        class_def.body = list(self.members.values())
        _exec([class_def], self.modules[SCHEDULER_FILE].label, scheduler)
        for rel, links in self.links.items():
            for name, link in links.items():
                namespaces[rel][name] = link.resolve(namespaces)
        result: type[StandIn] = scheduler[self.class_def.name]
        for rel, functions in self.needed.items():
            for name, node in functions.items():
                _attach(namespaces[rel][name], node, self.modules[rel].label, namespaces[rel])
        for name, node in self.members.items():
            _attach(vars(result)[name], node, self.modules[SCHEDULER_FILE].label, scheduler)
        return result


def _attach(member: object, node: ast.FunctionDef, label: str, namespace: dict[str, Any]) -> None:
    """Give a compiled function (or the function under a property, staticmethod or
    classmethod) the syntax tree it was compiled from, without decorators."""
    function = getattr(member, "fget", None) or getattr(member, "__func__", member)
    bare = copy.copy(node)
    bare.decorator_list = []
    setattr(function, SUBSET_ATTRIBUTE, SubsetFunction(node.name, bare, label, namespace))


def _scheduler_class(module: _Module) -> ast.ClassDef:
    """The top-level ``class Scheduler`` of ``scheduler.py``."""
    for node in module.tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Scheduler":
            return node
    raise PolicyError(f"{module.label}: no class Scheduler")


def _split_signature(method: ast.FunctionDef, label: str) -> bool:
    """Check the split takes (self, request, n, l, x[, u]); whether it takes u."""
    params = [a.arg for a in method.args.args]
    if len(params) == 6 and params[5] == UNCACHED_PARAM:
        return True
    _check_arity(method, 5, label)
    return False


def _check_arity(method: ast.FunctionDef, count: int, label: str) -> None:
    """A method must take exactly ``count`` positional parameters, as the call sites pass."""
    params = [a.arg for a in method.args.args]
    if len(params) != count or method.args.vararg or method.args.kwonlyargs:
        raise PolicyError(
            f"{label}:{method.lineno}: {method.name} has an unexpected signature "
            f"({', '.join(params)})"
        )


def _top_functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """The module's top-level function definitions by name."""
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def _top_imports(tree: ast.Module) -> dict[str, tuple[str, str | None, int]]:
    """The module's top-level absolute imports: local name -> (module, name, line)."""
    imports: dict[str, tuple[str, str | None, int]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                imports[alias.asname or alias.name] = (node.module, alias.name, node.lineno)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.partition(".")[0]
                imports[local] = (alias.name if alias.asname else local, None, node.lineno)
    return imports


def _stdlib_object(source: str, imported: str | None, label: str, line: int) -> object:
    """A standard-library module, or a name from one."""
    try:
        module = importlib.import_module(source)
        return module if imported is None else getattr(module, imported)
    except (ImportError, AttributeError) as exc:
        raise PolicyError(
            f"{label}:{line}: cannot import {imported or source} from {source}: {exc}"
        ) from None


def _self_attributes(method: ast.FunctionDef) -> set[str]:
    """Every ``<self>.name`` the method reads, ``<self>`` being its first parameter."""
    if not method.args.args:
        return set()
    me = method.args.args[0].arg
    return {
        node.attr
        for node in ast.walk(method)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == me
    }


def _global_names(function: ast.FunctionDef) -> set[str]:
    """The global (module or builtin) names ``function``'s body and nested scopes use."""
    table = symtable.symtable(ast.unparse(function), "<extracted>", "exec")
    names: set[str] = set()
    scopes = list(table.get_children())
    while scopes:
        scope = scopes.pop()
        names.update(s.get_name() for s in scope.get_symbols() if s.is_global())
        scopes.extend(scope.get_children())
    return names


def _line_of(function: ast.FunctionDef, name: str) -> int:
    """The first line on which ``function`` uses ``name``."""
    lines = [
        node.lineno for node in ast.walk(function) if isinstance(node, ast.Name) and node.id == name
    ]
    return min(lines, default=function.lineno)


class _StripAnnotations(ast.NodeTransformer):
    """Drops parameter, return and variable annotations (their names are never resolved)."""

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.returns = None
        self.generic_visit(node)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.stmt:
        if node.value is None:
            return ast.copy_location(ast.Pass(), node)
        return ast.copy_location(ast.Assign([node.target], node.value), node)


def _stripped(function: ast.FunctionDef, member: bool) -> ast.FunctionDef:
    """A copy of ``function`` without annotations or decorators.

    A class member keeps ``property`` (also for ``cached_property``), ``staticmethod`` and
    ``classmethod``, which change how ``self.<name>`` binds.
    """
    copied = _StripAnnotations().visit(copy.deepcopy(function))
    assert isinstance(copied, ast.FunctionDef)
    kept = [_MEMBER_DECORATORS.get(_terminal_name(d), "") for d in copied.decorator_list]
    copied.decorator_list = [
        ast.copy_location(ast.Name(name, ast.Load()), function) for name in kept if member and name
    ]
    return copied


def _terminal_name(decorator: ast.expr) -> str:
    """``property`` for ``@property``, ``cached_property`` for ``@functools.cached_property``."""
    if isinstance(decorator, ast.Attribute):
        return decorator.attr
    return decorator.id if isinstance(decorator, ast.Name) else ""


def _exec(nodes: list[ast.stmt], label: str, namespace: dict[str, Any]) -> None:
    """Compile ``nodes`` under the source file's name and line numbers into ``namespace``."""
    module = ast.fix_missing_locations(ast.Module(body=nodes, type_ignores=[]))
    exec(compile(module, label, "exec"), namespace)
