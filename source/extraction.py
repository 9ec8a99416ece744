"""Extract a vLLM ``Scheduler``'s split and reservation from source text and compile them.

This module imports nothing but the standard library, so that a generated repro test (SPEC C,
``chunkproof repro``) can carry it verbatim and run the real methods without chunkproof, vLLM's
imports or torch. :func:`extract` parses ``vllm/v1/core/sched/scheduler.py`` with :mod:`ast`,
takes class ``Scheduler``'s ``_mamba_block_aligned_split`` (required) and
``_reserve_prefill_lookahead`` (0.28+, optional), every ``self.<member>`` they reach, and every
module-level helper they call (``get_mamba_prefill_checkpoint_position``,
``is_mamba_prefill_checkpoint_valid``, ``cdiv``, ...), resolved through each module's own
top-level ``from vllm.x.y import name`` imports into the release's files, transitively. Only
those function definitions are compiled, with annotations and decorators stripped
(``property``, ``staticmethod`` and ``classmethod`` on members are kept), one fresh namespace
per source module, under the real file name and line numbers. A name a compiled function uses
must be one of: an extracted function, a standard-library import, or a builtin; anything else
is a :class:`SourceError` naming file and line.

The compiled class ``Scheduler`` derives from :class:`StandIn`: its instances hold exactly the
attributes they are given, and reading any other raises :class:`StandInError` naming it.
"""

from __future__ import annotations

import ast
import builtins
import copy
import importlib
import symtable
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Protocol

SCHEDULER_FILE = "vllm/v1/core/sched/scheduler.py"
"""Where ``scheduler.py`` sits below a release root."""

PACKAGE_INITS = (
    "vllm/v1/core/sched/__init__.py",
    "vllm/v1/core/__init__.py",
    "vllm/v1/__init__.py",
    "vllm/__init__.py",
)
"""The package ``__init__`` files Python runs to import ``scheduler.py`` (SPEC Q2), innermost
first: each outer package's statements after its import of the inner one run last."""

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


class SourceError(Exception):
    """The source cannot be extracted or compiled; the message names file and line."""


MAX_SOURCE_NESTING = 120
"""Deepest syntax tree a source file may have: vLLM's own files nest at most 20 deep (a
module, a class, a method and 14 levels inside it); the walks over a tree recurse once per
level."""

MAX_SOURCE_BYTES = 4 << 20
"""Largest source file read (vLLM's scheduler.py is about 100 kB): the bound of
``chunkproof.model.files`` for a user's files, restated because this module imports nothing of
chunkproof (the generated repros carry it)."""


def parse_source(text: str, label: str) -> ast.Module:
    """The syntax tree of Python source ``text`` (``label`` names it in errors), nested at most
    :data:`MAX_SOURCE_NESTING` deep: a syntax error, a null byte or a tree too deep for the
    parser or for the walks after it (a 20,000-term expression, a 3,000-branch ``elif``) is a
    one-line :class:`SourceError`, never a traceback."""
    try:
        tree = ast.parse(text, filename=label)
    except SyntaxError as exc:
        raise SourceError(f"{label}:{exc.lineno}: syntax error: {exc.msg}") from None
    except (RecursionError, MemoryError):
        raise SourceError(f"{label}: the source nests too deeply to parse") from None
    except ValueError as exc:  # a null byte
        raise SourceError(f"{label}: not Python source: {exc}") from None
    pending: list[tuple[ast.AST, int]] = [(tree, 0)]
    while pending:
        node, depth = pending.pop()
        if depth > MAX_SOURCE_NESTING:
            line = getattr(node, "lineno", "?")
            raise SourceError(
                f"{label}:{line}: the source nests more than {MAX_SOURCE_NESTING} levels deep "
                "(a long elif chain or expression); chunkproof reads at most that"
            )
        pending.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return tree


class StandInError(SourceError):
    """Real vLLM code read (or wrote) a stand-in attribute that was not given."""


class StandIn:
    """A read-only stand-in for a vLLM object that has exactly the attributes it is given.

    Reading any other attribute raises :attr:`error` naming it. That is deliberately not an
    ``AttributeError``, so ``getattr(obj, name, default)`` in vLLM code cannot default it.
    """

    error: type[Exception] = StandInError
    """What reading a missing attribute or writing any raises (a subclass may change it)."""
    _label: str

    def __init__(self, label: str, **attributes: object) -> None:
        object.__setattr__(self, "_label", label)
        for name, value in attributes.items():
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> NoReturn:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        raise self.error(self.missing(f"{attribute_path(self._label)}.{name}"))

    def missing(self, path: str) -> str:
        """The message for a read of the missing attribute ``path`` (``self.x.y``)."""
        return f"the vLLM code reads {path}, which the stand-in does not have"

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise self.error(f"{self._label} is read-only: the vLLM code assigns {name!r}")

    def __repr__(self) -> str:
        return f"<{self._label}>"


SCHEDULER_LABEL = "stand-in Scheduler"
REQUEST_LABEL = "stand-in Request"
_ROOTS = {SCHEDULER_LABEL: "self", REQUEST_LABEL: "request"}


def attribute_path(label: str) -> str:
    """A stand-in's label as the path the vLLM code reads it by (``self.cache_config``)."""
    root, _, rest = label.partition(".")
    return ".".join(part for part in (_ROOTS.get(root, root), rest) if part)


def standin_tree(
    label: str,
    flat: dict[str, object],
    kind: type[StandIn] = StandIn,
    inner: type[StandIn] = StandIn,
) -> StandIn:
    """A stand-in of type ``kind`` from dotted attribute paths: ``{"cache_config.block_size":
    16}`` gives ``x.cache_config.block_size == 16``, every inner object an ``inner``; a path
    ending in a call (``model_config.get_mamba_chunk_size()``) is a method that returns the
    value whatever its arguments (``--set PATH()=VALUE``)."""
    nested: dict[str, dict[str, object]] = {}
    direct: dict[str, object] = {}
    for path, value in flat.items():
        head, dot, tail = path.partition(".")
        if dot and not head.endswith(")"):
            nested.setdefault(head, {})[tail] = value
        elif path.endswith("()"):
            direct[path[:-2]] = _returning(value)
        else:
            direct[head] = value
    for head, attributes in nested.items():
        direct[head] = standin_tree(f"{label}.{head}", attributes, inner, inner)
    return kind(label, **direct)


def _returning(value: object) -> Any:
    """A method that returns ``value`` whatever it is called with."""
    return lambda *args, **kwargs: value


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
            if path.stat().st_size > MAX_SOURCE_BYTES:
                raise SourceError(f"{path}: more than {MAX_SOURCE_BYTES} bytes of source")
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SourceError(f"{path}: cannot read: {exc}") from None

    def label(self, rel: str) -> str:
        """The file's path."""
        return str(self._path(rel))


@dataclass(frozen=True)
class OverlayTree:
    """``base`` with ``files`` (release-relative path -> text) laid over it: a user's own file
    (a patch module, a subclass, a lone ``scheduler.py``) read beside a release tree."""

    base: SourceTree
    files: dict[str, str]

    def read(self, rel: str) -> str | None:
        return self.files[rel] if rel in self.files else self.base.read(rel)

    def label(self, rel: str) -> str:
        return rel if rel in self.files else self.base.label(rel)


def package_root(scheduler_py: Path) -> Path:
    """The parent of the innermost ``vllm`` directory above ``scheduler_py``."""
    for parent in scheduler_py.resolve().parents:
        if parent.name == "vllm":
            return parent.parent
    return scheduler_py.resolve().parent


# --- reading and resolving -----------------------------------------------------------------


@dataclass(frozen=True)
class Compiled:
    """One compiled function (or member), with the stripped syntax tree it was compiled from."""

    member: object
    """The function, or the ``property``/``staticmethod``/``classmethod`` wrapping it."""
    node: ast.FunctionDef
    label: str
    """The source file's name."""
    namespace: dict[str, Any] = field(repr=False)
    """Its module's globals."""

    @property
    def function(self) -> Any:
        """The plain function under a ``property``, ``staticmethod`` or ``classmethod``."""
        return getattr(self.member, "fget", None) or getattr(self.member, "__func__", self.member)


@dataclass(frozen=True)
class Extracted:
    """The compiled class ``Scheduler`` of one source tree."""

    scheduler_type: type[StandIn]
    has_reservation: bool
    takes_uncached_prefix: bool
    """The split has V3's (0.24-0.25) fifth parameter ``num_uncached_common_prefix_tokens``."""
    functions: tuple[Compiled, ...] = field(repr=False)


def extract(
    tree: SourceTree,
    base: type[StandIn] = StandIn,
    overrides: dict[str, tuple[str, int]] | None = None,
) -> Extracted:
    """The split, the reservation and all they reach in ``tree``, compiled (module docstring).
    ``overrides`` gives members of class ``Scheduler`` another definition, as a patch module
    or a subclass does: method name -> (the file of the tree, the line of its ``def``)."""
    return Collector(tree, overrides or {}).compile(base)


@dataclass
class _Module:
    """One parsed source file: its top-level functions and ``from``/``import`` names."""

    rel: str
    label: str
    tree: ast.Module
    functions: dict[str, ast.FunctionDef]
    imports: dict[str, tuple[str, str | None, int]]
    """local name -> (module, imported name or ``None`` for ``import m``, line)."""


SourceModule = _Module
"""A parsed source file of a tree (what :meth:`Collector.module` returns)."""


@dataclass(frozen=True)
class Link:
    """What a global name of an extracted module is bound to: function ``name`` of module
    ``rel`` of the tree, or (``stdlib``) a standard-library module or name, which is looked up
    only when the functions are compiled (:func:`extract`), never while collecting."""

    rel: str = ""
    name: str = ""
    stdlib: tuple[str, str | None, str, int] | None = None
    """(module, imported name or None, file label, line)."""
    original: str = ""
    """A member of class ``Scheduler`` as ``scheduler.py`` defines it, before a patch or a
    subclass replaces it (``_original = Scheduler.member`` in the user's file)."""

    def resolve(self, namespaces: dict[str, dict[str, Any]]) -> object:
        if self.stdlib is not None:
            return _stdlib_object(*self.stdlib)
        if self.original:
            return namespaces[SCHEDULER_FILE][_ORIGINAL_PREFIX + self.original]
        return namespaces[self.rel][self.name]


_ORIGINAL_PREFIX = "_chunkproof_original_"
"""The name a member's unpatched definition is compiled under in ``scheduler.py``'s
namespace (:attr:`Link.original`)."""


class Collector:
    """Finds, strips and compiles the functions the two methods reach (module docstring)."""

    def __init__(
        self, tree: SourceTree, overrides: dict[str, tuple[str, int]] | None = None
    ) -> None:
        self.tree = tree
        self.modules: dict[str, _Module] = {}
        self.needed: dict[str, dict[str, ast.FunctionDef]] = {}
        self.links: dict[str, dict[str, Link]] = {}
        self.members: dict[str, ast.FunctionDef] = {}
        self.overridden: dict[str, tuple[str, ast.FunctionDef]] = {}
        """Members defined elsewhere (``overrides``): name -> (module, its ``def``)."""
        self.originals: dict[str, ast.FunctionDef] = {}
        """Unpatched members a user's file reaches (:attr:`Link.original`), compiled as plain
        functions of ``scheduler.py``."""
        scheduler = self._module(SCHEDULER_FILE)
        self.class_def = _scheduler_class(scheduler)
        available = {f.name: f for f in self.class_def.body if isinstance(f, ast.FunctionDef)}
        for name, (rel, line) in (overrides or {}).items():
            available[name] = self._override(name, rel, line)
        self.available = available
        """Every method defined in the body of class ``Scheduler``, by name."""
        if SPLIT_METHOD not in available:
            raise SourceError(f"{scheduler.label}: class Scheduler has no method {SPLIT_METHOD}")
        self.takes_uncached_prefix = _split_signature(
            available[SPLIT_METHOD], self._module(self._home(SPLIT_METHOD)).label
        )
        if RESERVE_METHOD in available:
            _check_arity(
                available[RESERVE_METHOD], 4, self._module(self._home(RESERVE_METHOD)).label
            )
        for name in (SPLIT_METHOD, RESERVE_METHOD):
            if name in available:
                self._need_member(scheduler, available, name)

    def _override(self, name: str, rel: str, line: int) -> ast.FunctionDef:
        """The ``def`` at ``line`` of ``rel`` that stands for member ``name``: a module
        function (a patch) or a method of a class there (a subclass), never one inside a
        function."""
        module = self._module(rel)
        for node in _defs_outside_functions(module.tree.body):
            if node.lineno == line:
                self.overridden[name] = (rel, node)
                return node
        raise SourceError(f"{module.label}:{line}: no def of {name} outside a function")

    def _module(self, rel: str) -> _Module:
        """Parse ``rel`` once (a syntax error is a one-line SourceError with file:line)."""
        if rel in self.modules:
            return self.modules[rel]
        label = self.tree.label(rel)
        text = self.tree.read(rel)
        if text is None:
            raise SourceError(f"{label}: no such file")
        tree = parse_source(text, label)
        module = _Module(rel, label, tree, _top_functions(tree), top_imports(tree))
        self.modules[rel] = module
        return module

    def _need_member(
        self, scheduler: _Module, available: dict[str, ast.FunctionDef], name: str
    ) -> None:
        """Add method ``name`` of class Scheduler, the members it reads, and its helpers."""
        if name in self.members:
            return
        method = stripped(available[name], member=True)
        home = self._module(self._home(name))
        if name in self.overridden:
            method = self._without_super(home, method)
        self.members[name] = method
        for used in _self_attributes(method) & available.keys():
            self._need_member(scheduler, available, used)
        self._link_globals(home, method)

    def _without_super(self, module: _Module, method: ast.FunctionDef) -> ast.FunctionDef:
        """A subclass's method with each ``super().member(...)`` a call of ``scheduler.py``'s
        own ``member`` (:attr:`Link.original`): it is compiled as a plain function, which
        has no ``super()``; any other use of ``super`` is a SourceError."""
        if not method.args.args:
            raise SourceError(f"{module.label}:{method.lineno}: {method.name} takes no self")
        calls = _SuperCalls(method.args.args[0].arg)
        rewritten = calls.visit(method)
        assert isinstance(rewritten, ast.FunctionDef)
        if "super" in global_names(rewritten):
            raise SourceError(
                f"{module.label}:{method.lineno}: {method.name} uses super() other than to "
                "call a member of Scheduler"
            )
        links = self.links.setdefault(module.rel, {})
        for member in calls.members:
            if self._need_original(member):
                links[_ORIGINAL_PREFIX + member] = Link(original=member)
        return rewritten

    def _need_original(self, member: str) -> bool:
        """Collect ``scheduler.py``'s own ``member`` of class ``Scheduler`` (unpatched) as a
        plain function; False if the class defines none."""
        own = {f.name: f for f in self.class_def.body if isinstance(f, ast.FunctionDef)}
        if member not in own:
            return False
        if member not in self.originals:
            original = stripped(own[member], member=False)
            original.name = _ORIGINAL_PREFIX + member
            self.originals[member] = original
            scheduler = self._module(SCHEDULER_FILE)
            for used in _self_attributes(original) & self.available.keys():
                self._need_member(scheduler, self.available, used)
            self._link_globals(scheduler, original)
        return True

    def _home(self, member: str) -> str:
        """The file a member of class ``Scheduler`` is defined in (``overrides``, or
        ``scheduler.py``)."""
        return self.overridden[member][0] if member in self.overridden else SCHEDULER_FILE

    def _need(self, module: _Module, name: str) -> None:
        """Add top-level function ``name`` of ``module`` and, transitively, its helpers."""
        needed = self.needed.setdefault(module.rel, {})
        if name in needed:
            return
        function = stripped(module.functions[name], member=False)
        needed[name] = function
        self._link_globals(module, function)

    def module(self, rel: str) -> _Module:
        """The parsed module ``rel`` of the tree (parsed once)."""
        return self._module(rel)

    def find(self, dotted: str) -> str | None:
        """The tree path of module ``dotted``, if the tree has it."""
        return self._find(dotted)

    def link(self, rel: str, function: ast.FunctionDef, skip: frozenset[str] = frozenset()) -> None:
        """Bind the global names of ``function``, a function of module ``rel`` of the tree that
        is not a top-level function there (a method of another class of the module), except
        ``skip``; the helpers it reaches are collected like those of the split."""
        self._link_globals(self._module(rel), function, skip)

    def _link_globals(
        self, module: _Module, function: ast.FunctionDef, skip: frozenset[str] = frozenset()
    ) -> None:
        """Bind every global name ``function`` uses (but ``skip``); builtins stay unbound."""
        links = self.links.setdefault(module.rel, {})
        for name in sorted(global_names(function) - skip):
            if name in links:
                continue
            if name in module.functions or name in module.imports:
                links[name] = self._resolve(module, name, _line_of(function, name))
            elif (original := self._original_member(module, name)) is not None:
                links[name] = Link(original=original)
            elif not hasattr(builtins, name):
                raise SourceError(
                    f"{module.label}:{_line_of(function, name)}: {function.name} "
                    f"uses {name!r}, which is neither a function nor an import"
                )

    def _original_member(self, module: _Module, name: str) -> str | None:
        """The member ``name`` holds when ``module`` assigns ``name = Scheduler.member`` at
        top level (``Scheduler`` imported from ``scheduler.py``), collected unpatched."""
        for node in module.tree.body:
            if not (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == name
                and isinstance(node.value, ast.Attribute)
                and isinstance(node.value.value, ast.Name)
            ):
                continue
            source, imported, _ = module.imports.get(node.value.value.id, ("", None, 0))
            if self._find(source) != SCHEDULER_FILE or imported != self.class_def.name:
                return None
            member = node.value.attr
            return member if self._need_original(member) else None
        return None

    def _resolve(self, module: _Module, name: str, line: int) -> Link:
        """What ``name`` means in ``module``: a function there, or what its import names."""
        if name in module.functions:
            self._need(module, name)
            return Link(module.rel, name)
        if name not in module.imports:
            raise SourceError(
                f"{module.label}:{line}: {name!r} is neither a function nor an import here"
            )
        source, imported, line = module.imports[name]
        rel = self._find(source)
        if rel is not None and imported is not None:
            return self._resolve(self._module(rel), imported, line)
        if source.partition(".")[0] in sys.stdlib_module_names:
            return Link(stdlib=(source, imported, module.label, line))
        raise SourceError(
            f"{module.label}:{line}: cannot resolve {name!r} from {source}: it must "
            "be a function in the source tree or a standard-library name (a scheduler.py "
            "edited on its own belongs at vllm/v1/core/sched/ in a copy of a checkout or "
            "of a release tree such as the one `vllm==X.Y.Z` caches, or give --base "
            "vllm==X.Y.Z: the release it was edited from)"
        )

    def _find(self, dotted: str) -> str | None:
        """The tree path of module ``dotted``, if the tree has it."""
        base = dotted.replace(".", "/")
        for rel in (f"{base}.py", f"{base}/__init__.py"):
            if rel in self.modules or self.tree.read(rel) is not None:
                return rel
        return None

    def compile(self, base: type[StandIn]) -> Extracted:
        """Compile the collected functions; class Scheduler derives from ``base``."""
        namespaces: dict[str, dict[str, Any]] = {rel: {} for rel in self.modules}
        for rel, functions in self.needed.items():
            _exec(list(functions.values()), self.modules[rel].label, namespaces[rel])
        scheduler = namespaces[SCHEDULER_FILE]
        scheduler[_STANDIN_BASE] = base
        class_def = copy.copy(self.class_def)
        class_def.bases = [ast.Name(_STANDIN_BASE, ast.Load())]
        class_def.keywords = []
        class_def.decorator_list = []
        own = {n: m for n, m in self.members.items() if n not in self.overridden}
        class_def.body = list(own.values()) or [ast.Pass()]
        _exec([class_def], self.modules[SCHEDULER_FILE].label, scheduler)
        result: type[StandIn] = scheduler[self.class_def.name]
        for name in self.members.keys() & self.overridden.keys():
            rel, node = self._home(name), self.members[name]
            _exec([node], self.modules[rel].label, namespaces[rel])
            setattr(result, name, namespaces[rel][node.name])
        if self.originals:
            _exec(list(self.originals.values()), self.modules[SCHEDULER_FILE].label, scheduler)
        for rel, links in self.links.items():
            for name, link in links.items():
                namespaces[rel][name] = link.resolve(namespaces)
        compiled = [
            Compiled(namespaces[rel][name], node, self.modules[rel].label, namespaces[rel])
            for rel, needed in self.needed.items()
            for name, node in needed.items()
        ]
        compiled += [
            Compiled(
                vars(result)[name],
                node,
                self.modules[self._home(name)].label,
                namespaces[self._home(name)],
            )
            for name, node in self.members.items()
        ]
        return Extracted(
            result,
            RESERVE_METHOD in self.members,
            self.takes_uncached_prefix,
            tuple(compiled),
        )


def _scheduler_class(module: _Module) -> ast.ClassDef:
    """The top-level ``class Scheduler`` of ``scheduler.py``."""
    for node in module.tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Scheduler":
            return node
    raise SourceError(f"{module.label}: no class Scheduler")


def _split_signature(method: ast.FunctionDef, label: str) -> bool:
    """Check the split takes (self, request, n, l, x[, u]); whether it takes u."""
    params = [a.arg for a in method.args.args]
    if len(params) == 6 and params[5] == UNCACHED_PARAM:
        return True
    _check_arity(method, 5, label)
    return False


def _check_arity(method: ast.FunctionDef, count: int, label: str) -> None:
    """A method must take exactly ``count`` positional parameters, as the call sites pass
    (``*args`` and ``**kwargs`` then take nothing; a keyword-only one needs a default)."""
    params = [a.arg for a in method.args.args]
    required = [d is None for d in method.args.kw_defaults]
    if len(params) != count or any(required):
        raise SourceError(
            f"{label}:{method.lineno}: {method.name} has an unexpected signature "
            f"({', '.join(params)})"
        )


class _SuperCalls(ast.NodeTransformer):
    """``super().member(args)`` -> ``_chunkproof_original_member(self, args)``; the members
    called are kept in :attr:`members`."""

    def __init__(self, first: str) -> None:
        self.first = first
        self.members: set[str] = set()

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        called = node.func
        if (
            isinstance(called, ast.Attribute)
            and isinstance(called.value, ast.Call)
            and isinstance(called.value.func, ast.Name)
            and called.value.func.id == "super"
            and not called.value.args
        ):
            self.members.add(called.attr)
            alias = ast.Name(_ORIGINAL_PREFIX + called.attr, ast.Load())
            direct = ast.Call(alias, [ast.Name(self.first, ast.Load()), *node.args], node.keywords)
            return ast.copy_location(direct, node)
        return node


def _defs_outside_functions(body: list[ast.stmt]) -> list[ast.FunctionDef]:
    """Every ``def`` of ``body`` at module level or in a class body, at any depth of
    classes (and ``if`` blocks), none inside a function."""
    found: list[ast.FunctionDef] = []
    for node in body:
        if isinstance(node, ast.FunctionDef):
            found.append(node)
        elif isinstance(node, ast.ClassDef):
            found += _defs_outside_functions(node.body)
        elif isinstance(node, ast.If | ast.Try):
            found += _defs_outside_functions([*node.body, *node.orelse])
    return found


def _top_functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """The module's top-level function definitions by name."""
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def top_imports(tree: ast.Module) -> dict[str, tuple[str, str | None, int]]:
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
        raise SourceError(
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


def global_names(function: ast.FunctionDef) -> set[str]:
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


def stripped(function: ast.FunctionDef, member: bool) -> ast.FunctionDef:
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
