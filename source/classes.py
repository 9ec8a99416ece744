"""Find a policy wherever it is defined (SPEC X2): classes, subclasses and patch
modules read as data, never imported or executed.

A vLLM scheduler reaches the split through ``self``: whichever class the engine instantiates
(``scheduler_cls``) decides which ``_mamba_block_aligned_split``, ``_reserve_prefill_lookahead``
and ``schedule()`` run. This module answers that question from the source text, the way Python
would answer it at run time:

* **Classes and bases.** A class is looked up in its module (top-level ``class`` statements and
  what the module imports); its bases are followed through the modules of the policy's own
  package, then of the base tree (a vLLM checkout or a cached release, ``--base``). vLLM's
  ``Scheduler`` of ``vllm/v1/core/sched/scheduler.py`` is the root of the hierarchy: its own
  base (the abstract ``SchedulerInterface``) defines none of the members a policy reaches, and is
  not followed. Members are found along the C3 linearisation (Python's MRO), so a subclass that
  overrides only the split inherits the base's reservation and ``schedule()``.
* **super() and explicit base calls.** ``super().m(args)`` (or ``super(C, self).m(args)``) in a
  method defined in class C is the member ``m`` of the first class after C in the MRO of the
  policy class, called with the method's ``self``; ``Base.m(self, args)`` is ``Base``'s member
  ``m`` (its MRO), called unbound. Both are rewritten into calls of that member's syntax tree.
* **Patch modules.** The module-level statements of the policy file are evaluated statically
  ("glue"): imports, ``def`` (decorators applied: ``functools.wraps(f)`` and ``wraps(f)`` are the
  identity, a decorator defined in the module is called), ``class``, assignments (``Cls.m = f``
  patches the class dictionary, ``orig = Cls.m`` captures the member current at that point, as
  Python binds it), ``setattr(Cls, "m", f)``, calls of functions defined in the module (their
  bodies are evaluated the same way, with closures binding late as in Python), ``try`` bodies,
  and ``if`` statements whose test is a constant (``TYPE_CHECKING`` is false) or one of whose
  branches only raises (an import-time guard such as a signature check: the module is assumed
  to import). A patch function that the module defines but never calls (a plugin's
  ``apply()``) runs when POLICY names it (``patch.py:apply``). Nothing else a module does at
  import can change a class, so everything else is ignored; a value glue cannot know (a call
  of a library) is an error only if a reached function uses it.
* **The base tree's own module bindings (SPEC Q2).** ``scheduler.py`` and the package
  ``__init__`` files Python runs to import it (:data:`~chunkproof.source.extraction.
  PACKAGE_INITS`, innermost first) are evaluated the same way, after their definitions are
  read as the tree's: ``Scheduler.m = f``, ``setattr`` and the other patches above apply to
  the tree's classes, and a function they install resolves the names its module binds at
  import (``orig = Scheduler.m``). What would change which class or function a name of such a
  module denotes and that glue does not follow (a second ``class Scheduler``, rebinding a
  class or a function the module defines or imports, assigning a module's attribute,
  ``globals()``, ``global``, ``del``) is one :class:`~chunkproof.model.errors.PolicyError`
  naming file, line and construct, never ignored.
* **Wrappers.** A wrapper that forwards ``*args``/``**kwargs`` to the function it wraps takes
  that function's remaining parameters instead (with their constant defaults), and passes them
  on by name; any other use of ``*args`` or ``**kwargs`` is outside the policy subset. In code of
  the policy's own files, ``getattr(obj, "name"[, default])`` reads ``obj.name``: a stand-in has
  no optional attributes (a missing one is an input to give with ``--set``).
* **Bases the cache lacks.** A release cache keeps only the files the model reads, not
  ``vllm/v1/core/sched/async_scheduler.py``; on a cached release, vLLM's ``AsyncScheduler`` is
  read as ``Scheduler`` plus the members it defines there (:data:`ASYNC_OVERRIDES`, read from
  every release's wheel), which are unreadable: the policy summary says so, and reaching one
  is an error. On a checkout the file is read as any other.
* **Missing modules.** A name the reached code (or a base class) needs from a module that
  neither the policy's package nor the base tree has is collected; all of them are reported in
  one error naming each module and where it is imported.

The result is a :class:`~chunkproof.model.subset.SourceClass` whose members are the reachable
members of the policy class (MRO resolved, patches applied), each a validated
:class:`~chunkproof.model.subset.SubsetFunction` (:func:`~chunkproof.source.functions.check`).
"""

from __future__ import annotations

import ast
import copy
import hashlib
import json
import operator
import sys
from collections import ChainMap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chunkproof.model.errors import PolicyError, SubsetError
from chunkproof.model.files import read_bytes
from chunkproof.model.subset import Member, SourceClass, SubsetFunction
from chunkproof.source.extraction import (
    MAX_SOURCE_BYTES,
    PACKAGE_INITS,
    SCHEDULER_FILE,
    Collector,
    DirectoryTree,
    SourceError,
    global_names,
    parse_source,
    stripped,
)
from chunkproof.source.functions import Outside, check, fill_namespaces

ClassKey = tuple[str, str]
"""A class: (the path of its module in its tree, its name)."""

ROOT: ClassKey = (SCHEDULER_FILE, "Scheduler")
"""vLLM's ``Scheduler``: the root of the hierarchy (module docstring)."""

ASYNC_MODULE = "vllm.v1.core.sched.async_scheduler"
ASYNC_SCHEDULER: ClassKey = ("vllm/v1/core/sched/async_scheduler.py", "AsyncScheduler")
ASYNC_OVERRIDES = {
    "0.15.0": ("_update_after_schedule", "_update_request_with_output"),
    **{
        version: ("__init__", "_update_after_schedule", "_update_request_with_output")
        for version in [
            "0.17.0",
            "0.23.0",
            "0.24.0",
            "0.25.0",
            "0.26.0",
            "0.27.0",
            "0.28.0",
            "0.29.0",
            "0.30.0",
            "0.31.0",
            "0.32.0",
        ]
    },
    "0.33.0": ("__init__", "_update_after_schedule"),
    "0.34.0": ("__init__", "_update_after_schedule"),
}
"""The members vLLM's ``AsyncScheduler(Scheduler)`` defines, per release, read from each
release's wheel (``vllm/v1/core/sched/async_scheduler.py``, which the release cache does not
keep): its ``__init__`` sets attributes of the asynchronous output (placeholders, pipeline
stagger) and the two others update requests after a step; the split, the reservation and
``schedule()`` are ``Scheduler``'s (module docstring, "Bases the cache lacks")."""

_KIND_DECORATORS = {
    "property": "property",
    "cached_property": "property",
    "staticmethod": "staticmethod",
    "classmethod": "classmethod",
}
_MAX_GLUE_DEPTH = 32


# --- values of the static evaluation -----------------------------------------------------------


@dataclass(eq=False)
class FunctionValue:
    """A ``def`` read from source: a member of a class, a module function, or a function defined
    inside another (then ``closure`` is that call's locals, bound late as in Python)."""

    node: ast.FunctionDef
    rel: str
    """The module's path in its tree."""
    user: bool
    """Defined in the policy's own files (evaluated as glue) rather than in the base tree."""
    closure: Mapping[str, Any] | None = None
    owner: ClassKey | None = None
    """The class whose body defines it (for ``super()``)."""
    kind: str = "method"
    """``method``, ``property``, ``staticmethod`` or ``classmethod``."""
    bad_decorator: int | None = None
    """The line of a decorator chunkproof cannot apply, if any."""


@dataclass(frozen=True)
class ClassValue:
    key: ClassKey


@dataclass(frozen=True)
class Constant:
    value: Any


@dataclass(frozen=True)
class Opaque:
    """A value static evaluation cannot know; ``reason`` says where it comes from."""

    reason: str


@dataclass(frozen=True)
class Missing:
    """A name imported from a module no tree has."""

    module: str
    where: str


@dataclass(frozen=True)
class ModuleValue:
    """A module (``import x.y``): its attributes resolve in it when a tree has it."""

    name: str


@dataclass(frozen=True)
class Builtin:
    """A standard-library or builtin callable glue understands (``functools.wraps``,
    ``setattr``, ``staticmethod``, ...)."""

    name: str


@dataclass(frozen=True)
class _Identity:
    """What ``functools.wraps(f)`` returns: a decorator that returns its function."""


_WRAPS = frozenset({"functools.wraps", "wraps"})
_DYNAMIC_BINDERS = frozenset({"globals", "vars", "locals", "exec", "eval", "__import__"})
_GLUE_BUILTINS = {
    "setattr": "setattr",
    "staticmethod": "staticmethod",
    "classmethod": "classmethod",
    "property": "property",
}


# --- where the modules are ---------------------------------------------------------------------


@dataclass
class _UserModule:
    """A module of the policy's own files, evaluated as glue."""

    rel: str
    label: str
    path: Path
    tree: ast.Module
    env: dict[str, Any] = field(default_factory=dict)
    state: str = "new"
    """``new``, ``running`` or ``done``."""
    of_tree: bool = False
    """A module of the base tree (SPEC Q2): its ``def`` and ``class`` statements are the
    tree's own definitions, which glue does not re-read."""
    kinds: dict[str, str] = field(default_factory=dict)
    """In a tree module, how each module-level name was first bound: ``def``, ``class``,
    ``import`` or ``value`` (:meth:`_Glue.bind`)."""


@dataclass(frozen=True)
class Sources:
    """The trees a policy is read from: the base tree (a vLLM checkout or release root) and,
    when the policy file is not inside it, the package the file belongs to."""

    base: Path
    policy_file: Path | None = None
    scheduler: Path | None = None
    """A ``scheduler.py`` to read in place of the base tree's (a lone edited file)."""

    def policy_rel(self) -> str | None:
        """The policy file's path in its tree (``pkg/mod.py``, or its file name)."""
        if self.policy_file is None:
            return None
        root = self.user_root()
        return _relative(self.policy_file, self.base if root is None else root)

    def user_root(self) -> Path | None:
        """The directory the policy's own imports resolve in: the parent of the top package
        holding the policy file (its own directory outside any package), or ``None`` when the
        file lies inside the base tree."""
        if self.policy_file is None:
            return None
        path = self.policy_file.resolve()
        if _is_within(path, self.base.resolve()):
            return None
        top = path.parent
        while (top / "__init__.py").is_file() and (top.parent / "__init__.py").is_file():
            top = top.parent
        return top.parent if (top / "__init__.py").is_file() else top


def _is_within(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def _relative(path: Path, root: Path) -> str:
    return path.resolve().relative_to(root.resolve()).as_posix()


# --- the loader --------------------------------------------------------------------------------


class ClassLoader:
    """Resolves classes, evaluates the policy file's glue, and turns the functions a policy
    reaches into validated syntax trees (module docstring)."""

    def __init__(self, sources: Sources) -> None:
        self.sources = sources
        try:
            self.collector = Collector(DirectoryTree(sources.base, sources.scheduler))
        except SourceError as exc:
            raise PolicyError(str(exc)) from None
        self.user: dict[str, _UserModule] = {}
        self.classes: dict[ClassKey, ast.ClassDef] = {}
        self.class_bases: dict[ClassKey, list[Any]] = {}
        self.dicts: dict[ClassKey, dict[str, Any]] = {}
        self.patched: list[tuple[ClassKey, str, str]] = []
        """(class, member, file:line) of every patch glue applied."""
        self.missing: dict[str, str] = {}
        """Modules no tree has that reached code needs: module -> where it is imported."""
        self._mros: dict[ClassKey, list[ClassKey]] = {}
        self._functions: dict[int, SubsetFunction] = {}
        self._converted: list[tuple[FunctionValue, SubsetFunction]] = []
        self._tree_namespaces: dict[str, dict[str, Any]] = {}
        self._params: dict[int, list[tuple[str, ast.expr | None]]] = {}
        self._depth = 0
        self.files: dict[str, bytes] = {}
        """Every user file read, by label (its bytes, for the policy's fingerprint)."""
        self.bound: dict[str, _UserModule] = {}
        self.notes: list[str] = []
        """What the summary must say about how the policy was read (a stand-in base)."""
        """The base tree's modules on the scheduler's import path, evaluated as glue."""
        self._bind_import_path()

    # -- modules ----------------------------------------------------------------------------

    def user_module(self, rel: str, path: Path) -> _UserModule:
        """The user module ``rel``, evaluated once (imports of it during its own evaluation see
        what it has defined so far, as in Python)."""
        module = self.user.get(rel)
        if module is None:
            label = str(path)
            data = read_bytes(path, "policy source", MAX_SOURCE_BYTES)
            try:
                tree = parse_source(data.decode("utf-8"), label)
            except UnicodeDecodeError as exc:
                raise PolicyError(f"{label}: not UTF-8 text (byte {exc.start})") from None
            except SourceError as exc:
                raise PolicyError(str(exc)) from None
            self.files[label] = data
            module = _UserModule(rel, label, path, tree)
            self.user[rel] = module
        if module.state == "new":
            module.state = "running"
            _Glue(self, module).run_module()
            module.state = "done"
        return module

    def _bind_import_path(self) -> None:
        """Evaluate ``scheduler.py``, then the package ``__init__`` files on its import path
        that the tree has, as Python runs them at import (SPEC Q2; module docstring)."""
        for rel in (SCHEDULER_FILE, *PACKAGE_INITS):
            if rel == SCHEDULER_FILE or self.collector.tree.read(rel) is not None:
                self.bound_module(rel)

    def bound_module(self, rel: str) -> _UserModule:
        """Tree module ``rel`` with its import-time statements evaluated as glue, once."""
        module = self.bound.get(rel)
        if module is None:
            try:
                parsed = self.collector.module(rel)
            except SourceError as exc:
                raise PolicyError(str(exc)) from None
            module = _UserModule(rel, parsed.label, Path(parsed.label), parsed.tree, of_tree=True)
            self.bound[rel] = module
        if module.state == "new":
            module.state = "running"
            _Glue(self, module).run_module()
            module.state = "done"
        return module

    def glue_module(self, rel: str) -> _UserModule | None:
        """The module ``rel`` evaluated as glue: a user module or a bound tree module."""
        return self.user.get(rel) or self.bound.get(rel)

    def policy_module(self) -> _UserModule:
        """The policy file as a user module."""
        rel, path = self.sources.policy_rel(), self.sources.policy_file
        assert rel is not None and path is not None
        return self.user_module(rel, path)

    def find_module(self, dotted: str, importer: str | None = None, level: int = 0) -> Any:
        """Where module ``dotted`` is: ``("user", rel, path)``, ``("tree", rel)`` or ``None``.
        A relative import (``level`` > 0) resolves against ``importer``'s package."""
        if level:
            if importer is None:
                return None
            parts = importer.split("/")[:-1]
            if level - 1 > len(parts):
                return None
            package = parts[: len(parts) - (level - 1)]
            dotted = ".".join([*package, *([dotted] if dotted else [])])
        root = self.sources.user_root()
        base = dotted.replace(".", "/")
        policy_rel = self.sources.policy_rel()
        for rel in (f"{base}.py", f"{base}/__init__.py"):
            if root is not None and (root / rel).is_file():
                return ("user", rel, root / rel)
            if rel == policy_rel and self.sources.policy_file is not None:
                return ("user", rel, self.sources.policy_file)
        found = self.collector.find(dotted) if dotted else None
        return None if found is None else ("tree", found)

    def import_value(
        self, module: str, imported: str | None, importer: str, label: str, line: int, level: int
    ) -> Any:
        """What ``from module import imported`` (or ``import module``) binds."""
        found = self.find_module(module, importer, level)
        where = f"{label}:{line}"
        if found is None and not level and imported is not None:
            known = self.release_class(module, imported)
            if known is not None:
                return known
        if found is None:
            top = module.partition(".")[0]
            if not level and top in sys.stdlib_module_names:
                name = f"{module}.{imported}" if imported else module
                if imported is None:
                    return ModuleValue(module)
                if name == "typing.TYPE_CHECKING":
                    return Constant(False)
                if name == "functools.wraps":
                    return Builtin(name)
                return Opaque(f"{where}: {name} from the standard library")
            return Missing(("." * level) + module, where)
        if imported is None:
            return ModuleValue(module)
        if found[0] == "user":
            env = self.user_module(found[1], found[2]).env
            if imported in env:
                return env[imported]
            sub = self.find_module(f"{module}.{imported}", importer, level)
            if sub is not None:
                return ModuleValue(f"{module}.{imported}")
            return Opaque(f"{where}: {module} defines no {imported!r}")
        return self.tree_name(found[1], imported, where)

    def tree_name(self, rel: str, name: str, where: str) -> Any:
        """What ``name`` is bound to at the top level of tree module ``rel``."""
        try:
            module = self.collector.module(rel)
        except SourceError as exc:
            raise PolicyError(str(exc)) from None
        for node in module.tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                key = (rel, name)
                self.classes.setdefault(key, node)
                return ClassValue(key)
        if name in module.functions:
            return FunctionValue(module.functions[name], rel, user=False)
        if name in module.imports:
            source, imported, line = module.imports[name]
            return self.import_value(source, imported, rel, module.label, line, 0)
        dotted = rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        if self.find_module(f"{dotted}.{name}") is not None:
            return ModuleValue(f"{dotted}.{name}")
        return Opaque(
            f"{where}: {module.label} binds {name!r} to something other than a "
            "class, a function or an import"
        )

    def module_attribute(self, module: str, name: str, where: str) -> Any:
        """``module.name`` for a module value."""
        found = self.find_module(module)
        known = self.release_class(module, name) if found is None else None
        if known is not None:
            return known
        if found is None:
            if module.partition(".")[0] in sys.stdlib_module_names:
                full = f"{module}.{name}"
                if full == "typing.TYPE_CHECKING":
                    return Constant(False)
                return Builtin(full) if full in _WRAPS else Opaque(f"{where}: {full}")
            return Missing(module, where)
        if found[0] == "user":
            env = self.user_module(found[1], found[2]).env
            return env.get(name, Opaque(f"{where}: {module} defines no {name!r}"))
        return self.tree_name(found[1], name, where)

    def release_class(self, module: str, name: str) -> ClassValue | None:
        """vLLM's ``AsyncScheduler`` on a cached release that lacks its file: ``Scheduler``
        with the members :data:`ASYNC_OVERRIDES` lists for that release, each unreadable (an
        error if the policy reaches one); ``None`` for any other name or release."""
        version = _cached_version(self.sources.base)
        if (module, name) != (ASYNC_MODULE, ASYNC_SCHEDULER[1]) or version not in ASYNC_OVERRIDES:
            return None
        if ASYNC_SCHEDULER not in self.classes:
            self.tree_name(SCHEDULER_FILE, ROOT[1], SCHEDULER_FILE)
            node = ast.parse(f"class {name}({ROOT[1]}):\n    pass\n").body[0]
            assert isinstance(node, ast.ClassDef)
            self.classes[ASYNC_SCHEDULER] = node
            self.class_bases[ASYNC_SCHEDULER] = [ClassValue(ROOT)]
            self.dicts[ASYNC_SCHEDULER] = {
                member: Opaque(
                    f"defined in {ASYNC_SCHEDULER[0]}, which the release cache does not keep"
                )
                for member in ASYNC_OVERRIDES[version]
            }
            self.notes.append(
                f"{name} read as Scheduler (in vLLM {version} it defines only "
                f"{', '.join(ASYNC_OVERRIDES[version])}, none of which the model reads)"
            )
            self._mros.clear()
        return ClassValue(ASYNC_SCHEDULER)

    def label(self, fv: FunctionValue) -> str:
        if fv.user:
            return self.user[fv.rel].label
        return self.collector.module(fv.rel).label

    # -- classes ----------------------------------------------------------------------------

    def register_user_class(self, module: _UserModule, node: ast.ClassDef, bases: list[Any]) -> Any:
        key = (module.rel, node.name)
        self.classes[key] = node
        self.class_bases[key] = bases
        self.dicts.pop(key, None)
        self._mros.clear()
        return ClassValue(key)

    def is_user(self, key: ClassKey) -> bool:
        return key[0] in self.user

    def class_dict(self, key: ClassKey) -> dict[str, Any]:
        """The class's dictionary: its body's functions and constants, then the patches glue
        applied to it."""
        if key not in self.dicts:
            node = self.classes[key]
            user = self.is_user(key)
            entries: dict[str, Any] = {}
            for stmt in node.body:
                if isinstance(stmt, ast.FunctionDef):
                    entries[stmt.name] = _member_value(stmt, key, user)
                elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                    for target in targets:
                        if isinstance(target, ast.Name) and stmt.value is not None:
                            entries[target.id] = _literal(stmt.value, f"{key[1]}.{target.id}")
            self.dicts[key] = entries
        return self.dicts[key]

    def bases(self, key: ClassKey) -> list[ClassKey]:
        """The class's bases that are classes of a tree (``object``, ``ABC``, ``Generic[...]``
        and other standard-library bases have no members a policy reaches)."""
        if key == ROOT:
            return []
        if key not in self.class_bases:
            node = self.classes[key]
            label = self.collector.module(key[0]).label
            values = [
                self._tree_base(key[0], base, f"{label}:{node.lineno}") for base in node.bases
            ]
            self.class_bases[key] = values
        found: list[ClassKey] = []
        for value in self.class_bases[key]:
            if isinstance(value, ClassValue):
                found.append(value.key)
            elif isinstance(value, Missing):
                self.missing.setdefault(value.module, value.where)
        return found

    def _tree_base(self, rel: str, node: ast.expr, where: str) -> Any:
        if isinstance(node, ast.Name):
            return self.tree_name(rel, node.id, where)
        if isinstance(node, ast.Attribute):
            base = self._tree_base(rel, node.value, where)
            if isinstance(base, ModuleValue):
                return self.module_attribute(base.name, node.attr, where)
        return Opaque(f"{where}: base {ast.unparse(node)}")

    def mro(self, key: ClassKey) -> list[ClassKey]:
        """The C3 linearisation of ``key`` (Python's method resolution order)."""
        if key not in self._mros:
            self._mros[key] = [key]  # guards against a cycle while computing
            sequences = [self.mro(base) for base in self.bases(key)]
            self._mros[key] = [key, *_c3([*sequences, self.bases(key)], key)]
        return self._mros[key]

    def lookup(self, key: ClassKey, name: str, after: ClassKey | None = None) -> Any:
        """Member ``name`` of class ``key`` (``after``: of the classes after it in the MRO of
        ``key``, as ``super()`` looks it up), or ``None``."""
        order = self.mro(key)
        if after is not None:
            order = order[order.index(after) + 1 :] if after in order else []
        for cls in order:
            entries = self.class_dict(cls)
            if name in entries:
                return entries[name]
        return None

    def patch(self, key: ClassKey, name: str, value: Any, where: str) -> None:
        """``Class.name = value`` at import."""
        self.class_dict(key)[name] = value
        self.patched.append((key, name, where))

    def scheduler_patches(
        self, patches: list[tuple[ClassKey, str, str]]
    ) -> list[tuple[ClassKey, str, str]]:
        """The ``patches`` (of :attr:`patched`) applied to a scheduler class, one whose MRO
        holds vLLM's ``Scheduler``: a module that also patches an engine class, or any other,
        is the scheduler's patch (module docstring)."""
        return [patch for patch in patches if self._is_scheduler(patch[0])]

    def _is_scheduler(self, key: ClassKey) -> bool:
        """Whether ``ROOT`` is in ``key``'s MRO; a module another class's bases need and no
        tree has is not the policy's (:attr:`missing` is left as it was)."""
        missing = dict(self.missing)
        try:
            return ROOT in self.mro(key)
        finally:
            self.missing = missing

    def check_init_flags(self, key: ClassKey, modelled: frozenset[str]) -> None:
        """An ``__init__`` of the policy's own files along ``key``'s MRO (a subclass's, or one
        patched onto a class) that sets an attribute the model holds (``modelled``: the
        stand-in ``self``'s, such as ``need_mamba_block_aligned_split`` or a configuration
        input) is one error naming it: chunkproof runs no ``__init__``, and would otherwise
        check the class with the model's value in its place (SPEC X4)."""
        for cls in self.mro(key):
            init = self.class_dict(cls).get("__init__")
            if not isinstance(init, FunctionValue) or not init.user or not init.node.args.args:
                continue
            me = init.node.args.args[0].arg
            for node in ast.walk(init.node):
                name = _set_attribute(node, me)
                if name in modelled:
                    raise PolicyError(_init_flag_error(self.label(init), node, name))

    def subclasses_of(self, module: _UserModule, root: ClassKey) -> list[ClassKey]:
        """The classes module ``module`` defines whose MRO contains ``root``."""
        mine = [key for key in self.classes if key[0] == module.rel and key != root]
        return [key for key in mine if root in self.mro(key)]

    # -- functions as syntax trees ----------------------------------------------------------

    def function(self, fv: FunctionValue) -> SubsetFunction:
        """``fv`` as a syntax tree the subset interpreter runs (module docstring: forwarding,
        ``super()``, explicit base calls and ``getattr`` rewritten), with a namespace binding
        every global name it reads; cached per function value."""
        known = self._functions.get(id(fv))
        if known is not None:
            return known
        label = self.label(fv)
        if fv.bad_decorator is not None:
            raise SubsetError(
                f"{label}:{fv.bad_decorator}: {fv.node.name}: decorators other than one of "
                "property, staticmethod and classmethod are outside the policy subset"
            )
        node = stripped(fv.node, member=False)
        node = self._forwarding(fv, node, label)
        rewriter = _Rewriter(self, fv, label)
        node = rewriter.visit(node)
        assert isinstance(node, ast.FunctionDef)
        ast.fix_missing_locations(node)
        synthetic: dict[str, Any] = {}
        local: dict[str, Any] = {}
        shared = local if fv.user else self._tree_namespaces.setdefault(fv.rel, {})
        namespace = ChainMap(synthetic, shared)
        function = SubsetFunction(fv.node.name, node, label, namespace)
        self._functions[id(fv)] = function
        self._converted.append((fv, function))
        for key, value in rewriter.targets.items():
            synthetic[key] = self.function(value)
        names = global_names(node) - set(synthetic)
        if fv.user:
            for name in sorted(names):
                found = self._glue_lookup(fv, name)
                if found is not None:
                    local[name] = self._namespace_value(found, name, label, node)
        else:
            for name, value in self._import_bindings(fv, names).items():
                synthetic[name] = self._namespace_value(value, name, label, node)
            try:
                self.collector.link(fv.rel, node, frozenset(synthetic))
            except SourceError as exc:
                raise PolicyError(str(exc)) from None
        return function

    def _import_bindings(self, fv: FunctionValue, names: set[str]) -> dict[str, Any]:
        """The global names of tree function ``fv`` that its module binds at import other
        than by a ``def`` or an import (``orig = Scheduler.m`` in a patched ``scheduler.py``,
        SPEC Q2), with their values; the extraction resolves the others."""
        module = self.bound.get(fv.rel)
        if module is None:
            return {}
        parsed = self.collector.module(fv.rel)
        return {
            name: module.env[name]
            for name in sorted(names)
            if name in module.env and name not in parsed.functions and name not in parsed.imports
        }

    def _glue_lookup(self, fv: FunctionValue, name: str) -> Any:
        """What global name ``name`` of user function ``fv`` is bound to, or ``None``."""
        scopes: list[Mapping[str, Any]] = []
        if fv.closure is not None:
            scopes.append(fv.closure)
        scopes.append(self.user[fv.rel].env)
        for scope in scopes:
            if name in scope:
                return scope[name]
        return None

    def _namespace_value(self, value: Any, name: str, label: str, node: ast.FunctionDef) -> Any:
        """A glue value as the interpreter's namespace holds it."""
        line = _line_of(node, name)
        if isinstance(value, FunctionValue):
            return self.function(value)
        if isinstance(value, Constant) and _plain_constant(value.value):
            return value.value
        if isinstance(value, Missing):
            self.missing.setdefault(value.module, value.where)
            return Outside(f"{label}:{line}: {name!r} is imported from {value.module}")
        if isinstance(value, Opaque):
            return Outside(f"{label}:{line}: {name!r} is {value.reason}")
        return Outside(f"{label}:{line}: {name!r} is not a function of the source")

    def params(self, fv: FunctionValue) -> list[tuple[str, ast.expr | None]]:
        """``fv``'s positional parameters and their defaults, after forwarding is resolved."""
        if id(fv) not in self._params:
            node = self._forwarding(fv, stripped(fv.node, member=False), self.label(fv))
            args = node.args.args
            defaults: list[ast.expr | None] = [None] * (len(args) - len(node.args.defaults))
            defaults += list(node.args.defaults)
            self._params[id(fv)] = [(a.arg, d) for a, d in zip(args, defaults, strict=True)]
        return self._params[id(fv)]

    def _forwarding(self, fv: FunctionValue, node: ast.FunctionDef, label: str) -> ast.FunctionDef:
        """Replace ``*args``/``**kwargs`` by the forwarded function's remaining parameters
        (module docstring)."""
        spec = node.args
        if spec.vararg is None and spec.kwarg is None:
            return node
        star = spec.vararg.arg if spec.vararg else None
        dstar = spec.kwarg.arg if spec.kwarg else None
        calls = [
            call
            for call in ast.walk(node)
            if isinstance(call, ast.Call)
            and (
                any(isinstance(a, ast.Starred) and _is_name(a.value, star) for a in call.args)
                or any(k.arg is None and _is_name(k.value, dstar) for k in call.keywords)
            )
        ]
        where = f"{label}:{node.lineno}: {node.name}"
        forwarded_uses = {
            id(a.value) for c in calls for a in c.args if isinstance(a, ast.Starred)
        } | {id(k.value) for c in calls for k in c.keywords if k.arg is None}
        for use in ast.walk(node):
            if (
                isinstance(use, ast.Name)
                and use.id in (star, dstar)
                and id(use) not in forwarded_uses
            ):
                raise SubsetError(
                    f"{label}:{use.lineno}: {node.name} uses {use.id} other than to forward it "
                    "to the function it wraps, which is outside the policy subset"
                )
        if not calls:
            raise SubsetError(f"{where}: *args/**kwargs are outside the policy subset")
        callee = self._callee(fv, calls[0], label)
        params = self.params(callee)
        first = calls[0]
        before = next(i for i, a in enumerate(first.args) if isinstance(a, ast.Starred))
        implicit = 1 if _is_super_call(first) or _is_bound_call(first) else 0
        given = {k.arg for k in first.keywords if k.arg is not None}
        taken = {a.arg for a in spec.args}
        used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | taken
        extra: list[tuple[str, ast.expr | None]] = []
        renames: dict[str, str] = {}
        for name, default in params[before + implicit :]:
            if name in given:
                continue
            new = name
            while new in used:
                new += "_fwd"
            used.add(new)
            renames[name] = new
            extra.append((new, default))
        result = copy.deepcopy(node)
        result.args.vararg = None
        result.args.kwarg = None
        defaults = list(result.args.defaults)
        for new, default in extra:
            result.args.args.append(ast.arg(new))
            if default is not None:
                if not isinstance(default, ast.Constant):
                    raise SubsetError(
                        f"{where}: forwards to a parameter {new!r} whose default is not a constant"
                    )
                defaults.append(copy.deepcopy(default))
            elif defaults:
                raise SubsetError(
                    f"{where}: forwards a parameter {new!r} without a default "
                    "after parameters with defaults"
                )
        result.args.defaults = defaults
        for call in ast.walk(result):
            if not isinstance(call, ast.Call):
                continue
            args: list[ast.expr] = []
            for a in call.args:
                if isinstance(a, ast.Starred) and _is_name(a.value, star):
                    args.extend(ast.Name(new, ast.Load()) for new, _ in extra)
                else:
                    args.append(a)
            call.args = args
            call.keywords = [
                k for k in call.keywords if not (k.arg is None and _is_name(k.value, dstar))
            ]
        return ast.fix_missing_locations(result)

    def _callee(self, fv: FunctionValue, call: ast.Call, label: str) -> FunctionValue:
        """The function a forwarding call calls."""
        func = call.func
        target: Any = None
        if isinstance(func, ast.Name) and fv.user:
            target = self._glue_lookup(fv, func.id)
        elif isinstance(func, ast.Name):
            target = self.tree_name(fv.rel, func.id, label)
        elif _is_super_call(call) and isinstance(func, ast.Attribute):
            target = self.super_target(fv, func.attr, label, call.lineno)
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            owner = self._glue_lookup(fv, func.value.id) if fv.user else None
            if isinstance(owner, ClassValue):
                target = self.lookup(owner.key, func.attr)
        if not isinstance(target, FunctionValue):
            raise SubsetError(
                f"{label}:{call.lineno}: cannot tell which function "
                f"{ast.unparse(func)} is, to which {fv.node.name} forwards *args/**kwargs"
            )
        return target

    def super_target(self, fv: FunctionValue, name: str, label: str, line: int) -> FunctionValue:
        """``super().name`` in ``fv`` (defined in class ``fv.owner``) for the policy class."""
        if fv.owner is None:
            raise SubsetError(f"{label}:{line}: super() outside a class body")
        target = self.lookup(self._policy_key(fv.owner), name, after=fv.owner)
        if not isinstance(target, FunctionValue):
            raise SubsetError(
                f"{label}:{line}: super().{name}: no class after {fv.owner[1]} in the method "
                f"resolution order defines a method {name!r}"
            )
        return target

    policy_key: ClassKey | None = None
    """The class the policy instantiates (set by the caller): ``super()`` follows its MRO."""

    def _policy_key(self, owner: ClassKey) -> ClassKey:
        if self.policy_key is not None and owner in self.mro(self.policy_key):
            return self.policy_key
        return owner

    # -- the reachable member table ---------------------------------------------------------

    def source_class(
        self, key: ClassKey, entries: list[str], provided: frozenset[str] = frozenset()
    ) -> SourceClass:
        """The members of class ``key`` that ``entries`` (member names) and every function
        converted so far reach through ``self.<name>``, MRO resolved, as validated trees; also
        checks that no needed module is missing (one error naming all of them).

        A constant of a class body becomes a property unless ``provided`` (the stand-in's own
        attributes, which model instance attributes and so shadow class constants) has it."""
        members: dict[str, Member] = {}
        pending = list(entries)
        done_functions = 0
        while True:
            while pending:
                name = pending.pop()
                if name in members:
                    continue
                value = self.lookup(key, name)
                if isinstance(value, Constant) and name in provided:
                    continue
                member = self._member(key, name, value)
                if member is not None:
                    members[name] = member
            while done_functions < len(self._converted):
                _, function = self._converted[done_functions]
                done_functions += 1
                pending.extend(_self_attributes(function.node) - members.keys())
            if not pending:
                break
        self._check_missing()
        helpers = fill_namespaces(self.collector, self._tree_namespaces)
        for function in [*helpers, *(f for _, f in self._converted)]:
            check(function)
        for member in members.values():
            check(member.function)
        return SourceClass(key[1], members)

    def _member(self, key: ClassKey, name: str, value: Any) -> Member | None:
        """A class-dictionary entry as a member of the stand-in ``self``, or ``None`` for a name
        the class does not define (a data attribute the stand-in provides)."""
        if value is None:
            return None
        if isinstance(value, FunctionValue):
            return Member(value.kind, self.function(value))
        if isinstance(value, Constant) and _plain_constant(value.value):
            node = ast.parse(f"def {name}(self):\n    return {value.value!r}\n").body[0]
            assert isinstance(node, ast.FunctionDef)
            owner = self.classes.get(key)
            label = f"{key[0]}:{owner.lineno if owner else 1}"
            return Member("property", SubsetFunction(name, node, label, {}))
        reason = value.reason if isinstance(value, Opaque) else f"{value!r}"
        raise PolicyError(
            f"{key[1]}.{name} is {reason}, which chunkproof cannot read as a method of the "
            "policy subset"
        )

    def note_missing_imports(self, module: _UserModule) -> None:
        """Add to :attr:`missing` the modules no tree has that ``module`` imports names from
        and uses in a function or class body (a base that cannot be followed hides which
        of them the policy reaches)."""
        used = {
            node.id
            for stmt in module.tree.body
            if isinstance(stmt, (ast.FunctionDef, ast.ClassDef))
            for node in ast.walk(stmt)
            if isinstance(node, ast.Name)
        }
        for name, value in module.env.items():
            if isinstance(value, Missing) and name in used:
                self.missing.setdefault(value.module, value.where)

    def check_missing(self) -> None:
        """One error naming every module the policy needs that no tree has."""
        self._check_missing()

    def _check_missing(self) -> None:
        if not self.missing:
            return
        ordered = sorted(self.missing.items(), key=lambda item: _location(item[1]))
        listed = "; ".join(f"{module} (imported at {where})" for module, where in ordered)
        count = len(self.missing)
        raise PolicyError(
            f"the policy needs {count} module{'s' if count > 1 else ''} that neither its own "
            f"files nor the base tree {self.sources.base} have: {listed}; give the tree they "
            "belong to with --base (a checkout that has them)"
        )

    def fingerprint(self) -> str:
        """sha256 over the bytes of every file the policy was read from (the user's files, the
        base tree's package ``__init__`` files that patched a class, and its ``scheduler.py``),
        in a fixed order."""
        digest = hashlib.sha256()
        scheduler = self.sources.scheduler or self.sources.base / SCHEDULER_FILE
        patching = {_location(where)[0] for _, _, where in self.patched}
        inits = [m.path for rel, m in self.bound.items() if rel != SCHEDULER_FILE]
        files = dict(self.files)
        files.update((str(path), path.read_bytes()) for path in inits if str(path) in patching)
        parts = sorted(files.items())
        parts.append((str(scheduler), scheduler.read_bytes()))
        for label, data in parts:
            digest.update(hashlib.sha256(label.encode()).digest())
            digest.update(hashlib.sha256(data).digest())
        return digest.hexdigest()


def _set_attribute(node: ast.AST, me: str) -> str | None:
    """The attribute of ``me`` that ``node`` sets (``me.x = ...``, ``setattr(me, "x", ...)``)."""
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name)
        and node.value.id == me
    ):
        return node.attr
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "setattr"
        and len(node.args) >= 2
        and _is_name(node.args[0], me)
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ):
        return node.args[1].value
    return None


SPLIT_FLAG = "need_mamba_block_aligned_split"
"""The flag ``schedule()`` tests before it calls the split (true in align mode)."""


def _init_flag_error(label: str, node: ast.AST, name: str) -> str:
    """The error for an ``__init__`` that sets a modelled attribute (:meth:`ClassLoader.
    check_init_flags`), with what to do instead."""
    where = f"{label}:{getattr(node, 'lineno', 0)}: __init__ sets self.{name}"
    if name == SPLIT_FLAG:
        return (
            f"{where}, the flag schedule() tests before it calls the split; chunkproof runs no "
            "__init__ and checks the split in align mode, where the flag is true (where it is "
            "false the split never runs and there is nothing to check): check the class without "
            "that assignment"
        )
    return (
        f"{where}, which the model holds as an input of the configuration (or a fixed flag); "
        "chunkproof runs no __init__ and would check the class with the model's value in its "
        "place: drop the assignment, and give the value through the range options instead "
        "(e.g. --lookahead for num_prefill_lookahead)"
    )


def _cached_version(base: Path) -> str | None:
    """The release a cache entry holds (its ``manifest.json``), or ``None`` for another tree."""
    try:
        manifest = json.loads((base / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    version = manifest.get("version") if isinstance(manifest, dict) else None
    return version if isinstance(version, str) else None


def _location(where: str) -> tuple[str, int]:
    """``file:line`` as a sort key."""
    file, _, line = where.rpartition(":")
    return (file, int(line) if line.isdigit() else 0)


def _c3(sequences: list[list[ClassKey]], key: ClassKey) -> list[ClassKey]:
    """Merge step of the C3 linearisation."""
    result: list[ClassKey] = []
    work = [list(s) for s in sequences if s]
    while work:
        for seq in work:
            head = seq[0]
            if not any(head in other[1:] for other in work):
                break
        else:
            raise PolicyError(
                f"class {key[1]}: its bases admit no consistent method resolution order"
            )
        result.append(head)
        work = [[c for c in s if c != head] for s in work]
        work = [s for s in work if s]
    return result


def _member_value(node: ast.FunctionDef, owner: ClassKey, user: bool) -> FunctionValue:
    """A ``def`` in a class body: its kind from its decorator."""
    kinds = []
    bad: int | None = None
    for decorator in node.decorator_list:
        name = _terminal(decorator)
        if name in _KIND_DECORATORS:
            kinds.append(_KIND_DECORATORS[name])
        elif name not in ("override", "abstractmethod"):
            bad = decorator.lineno
    if len(kinds) > 1:
        bad = node.lineno
    return FunctionValue(node, owner[0], user, None, owner, kinds[0] if kinds else "method", bad)


def _terminal(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        return _terminal(node.func)
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _literal(node: ast.expr, what: str) -> Any:
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return Opaque(f"set to {ast.unparse(node)[:60]!r}")
    return Constant(value) if _plain_constant(value) else Opaque(f"set to {value!r}")


def _plain_constant(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, str))


def _is_name(node: ast.expr, name: str | None) -> bool:
    return name is not None and isinstance(node, ast.Name) and node.id == name


def _is_super_call(call: ast.Call) -> bool:
    """``super().m(...)`` or ``super(C, self).m(...)``."""
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Call)
        and isinstance(func.value.func, ast.Name)
        and func.value.func.id == "super"
    )


def _is_bound_call(call: ast.Call) -> bool:
    """``self.m(...)``: the instance is passed implicitly."""
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and (func.value.id == "self")
    )


def _line_of(node: ast.FunctionDef, name: str) -> int:
    lines = [n.lineno for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name]
    return min(lines, default=node.lineno)


def _self_attributes(node: ast.FunctionDef) -> set[str]:
    """Every ``<first parameter>.name`` the function reads."""
    if not node.args.args:
        return set()
    me = node.args.args[0].arg
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == me
    }


class _Rewriter(ast.NodeTransformer):
    """``super().m(args)``, ``Base.m(self, args)`` and (user code) ``getattr(o, "a"[, d])``
    as calls the interpreter runs (module docstring). ``targets`` maps each synthetic name to
    the function it calls."""

    def __init__(self, loader: ClassLoader, fv: FunctionValue, label: str) -> None:
        self.loader = loader
        self.fv = fv
        self.label = label
        self.targets: dict[str, FunctionValue] = {}
        args = fv.node.args.args
        self.me = args[0].arg if args else None

    def _key(self, prefix: str, target: FunctionValue) -> str:
        for i in range(1000):
            key = f"{prefix}_{target.node.name.lstrip('_')}" + (f"_{i}" if i else "")
            if key not in self.targets or self.targets[key] is target:
                self.targets[key] = target
                return key
        raise AssertionError("unreachable")

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        if _is_super_call(node):
            node.args = [self.visit(a) for a in node.args]
            node.keywords = [self.visit(k) for k in node.keywords]
        else:
            self.generic_visit(node)
        if _is_super_call(node):
            assert isinstance(func, ast.Attribute)
            target = self.loader.super_target(self.fv, func.attr, self.label, node.lineno)
            if target.kind == "property":
                raise SubsetError(f"{self.label}:{node.lineno}: super().{func.attr} is a property")
            owner = self.fv.owner[1] if self.fv.owner else "object"
            key = self._key(f"super_{owner}", target)
            bound: list[ast.expr] = []
            if target.kind != "staticmethod":
                if self.me is None:
                    raise SubsetError(f"{self.label}:{node.lineno}: super() without self")
                bound = [ast.Name(self.me, ast.Load())]
            return ast.copy_location(
                ast.Call(ast.Name(key, ast.Load()), [*bound, *node.args], node.keywords), node
            )
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            owner_value = self._class_named(func.value.id)
            if isinstance(owner_value, ClassValue):
                target = self.loader.lookup(owner_value.key, func.attr)
                if isinstance(target, FunctionValue) and target.kind != "property":
                    key = self._key(f"{owner_value.key[1]}", target)
                    return ast.copy_location(
                        ast.Call(ast.Name(key, ast.Load()), node.args, node.keywords), node
                    )
        if (
            self.fv.user
            and isinstance(func, ast.Name)
            and func.id == "getattr"
            and len(node.args) in (2, 3)
            and not node.keywords
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and node.args[1].value.isidentifier()
        ):
            return ast.copy_location(
                ast.Attribute(node.args[0], node.args[1].value, ast.Load()), node
            )
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if (
            isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id == "super"
        ):
            raise SubsetError(
                f"{self.label}:{node.lineno}: super().{node.attr} other than in a call is "
                "outside the policy subset"
            )
        return node

    def _class_named(self, name: str) -> Any:
        if name == self.me:
            return None
        if self.fv.user:
            return self.loader._glue_lookup(self.fv, name)
        module = self.loader.collector.module(self.fv.rel)
        if name in module.imports or any(
            isinstance(n, ast.ClassDef) and n.name == name for n in module.tree.body
        ):
            return self.loader.tree_name(self.fv.rel, name, self.label)
        return None


# --- glue: a module's import-time statements, evaluated statically ------------------------------


class _GlueReturn(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


class _Glue:
    """Static evaluation of a user module's import-time statements (module docstring)."""

    def __init__(self, loader: ClassLoader, module: _UserModule) -> None:
        self.loader = loader
        self.module = module

    def where(self, node: ast.AST) -> str:
        return f"{self.module.label}:{getattr(node, 'lineno', 0)}"

    def run_module(self) -> None:
        self.block(self.module.tree.body, self.module.env, None)

    def call(self, fv: FunctionValue, args: list[Any], node: ast.AST) -> Any:
        """A call of a user function at import: its body, evaluated as glue."""
        loader = self.loader
        module = loader.glue_module(fv.rel)
        if module is None:
            return Opaque(f"the result of {fv.node.name}() at {self.where(node)}")
        if loader._depth >= _MAX_GLUE_DEPTH:
            raise PolicyError(f"{self.where(node)}: import-time calls nest too deeply")
        glue = self if module is self.module else _Glue(loader, module)
        scope: dict[str, Any] = {}
        params = fv.node.args.args
        defaults = fv.node.args.defaults
        first_default = len(params) - len(defaults)
        for i, param in enumerate(params):
            if i < len(args):
                scope[param.arg] = args[i]
            elif i >= first_default:
                scope[param.arg] = glue.expr(defaults[i - first_default], {}, fv.closure)
            else:
                scope[param.arg] = Opaque(f"missing argument {param.arg}")
        loader._depth += 1
        try:
            glue.block(fv.node.body, scope, fv.closure)
        except _GlueReturn as done:
            return done.value
        finally:
            loader._depth -= 1
        return Constant(None)

    def lookup(self, name: str, scope: dict[str, Any], closure: Mapping[str, Any] | None) -> Any:
        for table in (scope, closure or {}, self.module.env):
            if name in table:
                return table[name]
        if name in _GLUE_BUILTINS:
            return Builtin(_GLUE_BUILTINS[name])
        if name in ("True", "False", "None"):
            return Constant({"True": True, "False": False, "None": None}[name])
        return Opaque(f"the name {name!r} at import")

    def block(
        self, body: list[ast.stmt], scope: dict[str, Any], closure: Mapping[str, Any] | None
    ) -> None:
        for stmt in body:
            self.stmt(stmt, scope, closure)

    def stmt(
        self, stmt: ast.stmt, scope: dict[str, Any], closure: Mapping[str, Any] | None
    ) -> None:
        loader = self.loader
        self.refuse_dynamic_binding(stmt)
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            self.imports(stmt, scope)
        elif isinstance(stmt, ast.FunctionDef):
            inner: Mapping[str, Any] | None = None
            if scope is not self.module.env:
                inner = scope if closure is None else ChainMap(scope, dict(closure))
            fv = FunctionValue(stmt, self.module.rel, not self.module.of_tree, inner)
            self.bind(scope, stmt.name, self.decorate(fv, stmt, scope, closure), "def", stmt)
        elif isinstance(stmt, ast.AsyncFunctionDef):
            value = Opaque(f"an async function ({self.where(stmt)})")
            self.bind(scope, stmt.name, value, "def", stmt)
        elif isinstance(stmt, ast.ClassDef):
            if self.module.of_tree:
                self.bind(scope, stmt.name, self.tree_class(stmt, scope), "class", stmt)
            else:
                bases = [self.expr(b, scope, closure) for b in stmt.bases]
                scope[stmt.name] = loader.register_user_class(self.module, stmt, bases)
        elif isinstance(stmt, ast.Assign):
            value = self.expr(stmt.value, scope, closure)
            for target in stmt.targets:
                self.assign(target, value, scope, closure, stmt)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            self.assign(stmt.target, self.expr(stmt.value, scope, closure), scope, closure, stmt)
        elif isinstance(stmt, ast.AugAssign):
            self.assign(stmt.target, Opaque(f"updated at {self.where(stmt)}"), scope, closure, stmt)
        elif isinstance(stmt, ast.Expr):
            if isinstance(stmt.value, ast.Call):
                self.expr(stmt.value, scope, closure)
        elif isinstance(stmt, ast.Return):
            raise _GlueReturn(
                Constant(None) if stmt.value is None else self.expr(stmt.value, scope, closure)
            )
        elif isinstance(stmt, ast.If):
            self.branch(stmt, scope, closure)
        elif isinstance(stmt, ast.Try):
            self.block(stmt.body, scope, closure)
            self.block(stmt.orelse, scope, closure)
            self.block(stmt.finalbody, scope, closure)
        elif isinstance(stmt, ast.With):
            self.block(stmt.body, scope, closure)
        elif isinstance(stmt, ast.Raise):
            raise PolicyError(
                f"{self.where(stmt)}: the module raises at import (chunkproof evaluates its "
                "import-time statements statically)"
            )
        elif self.module.of_tree and scope is self.module.env and _stored_names(stmt):
            raise PolicyError(
                f"{self.where(stmt)}: a {type(stmt).__name__.lower()} statement binds "
                f"{', '.join(sorted(_stored_names(stmt)))} at import, which chunkproof does not "
                "evaluate statically (SPEC Q2)"
            )
        elif _patches(stmt):
            raise PolicyError(
                f"{self.where(stmt)}: a {type(stmt).__name__.lower()} statement that changes a "
                "class at import is outside what chunkproof evaluates statically"
            )

    def bind(self, scope: dict[str, Any], name: str, value: Any, kind: str, stmt: ast.AST) -> None:
        """``name = value`` in ``scope``. In a tree module, a module-level name bound by a
        ``def``, a ``class`` or an import is bound once (imports of it may repeat): chunkproof
        reads the tree's definitions by name, so any other second binding is refused rather
        than ignored (SPEC Q2)."""
        module = self.module
        if module.of_tree and scope is module.env:
            first = module.kinds.setdefault(name, kind)
            again = name in scope and {first, kind} not in ({"import"}, {"value"})
            if again:
                raise PolicyError(
                    f"{self.where(stmt)}: {name!r} is bound again at import (by a {kind}; a "
                    f"{first} bound it first): Python uses the last binding, chunkproof reads "
                    "one definition per name of a vLLM module (SPEC Q2)"
                )
        scope[name] = value

    def tree_class(self, stmt: ast.ClassDef, scope: dict[str, Any]) -> Any:
        """A ``class`` statement of a tree module: the tree's class (read from its body);
        refused when a decorator could replace it (SPEC Q2)."""
        if scope is not self.module.env:
            return Opaque(f"a class defined in a function ({self.where(stmt)})")
        if stmt.decorator_list:
            raise PolicyError(
                f"{self.where(stmt)}: class {stmt.name} is decorated; a decorator can replace "
                "the class at import, which chunkproof cannot evaluate statically (SPEC Q2)"
            )
        key = (self.module.rel, stmt.name)
        self.loader.classes.setdefault(key, stmt)
        return ClassValue(key)

    def refuse_dynamic_binding(self, stmt: ast.stmt) -> None:
        """``global``, ``nonlocal``, ``del`` of a name or attribute, and calls of
        ``globals``, ``vars``, ``locals``, ``exec``, ``eval`` or ``__import__`` at import can
        rebind what a module's names or a class's members are; glue does not follow them, so
        they are refused (SPEC Q2)."""
        what = None
        if isinstance(stmt, (ast.Global, ast.Nonlocal)):
            what = f"`{type(stmt).__name__.lower()} {', '.join(stmt.names)}`"
        elif isinstance(stmt, ast.Delete):
            what = f"`del {', '.join(ast.unparse(t) for t in stmt.targets)[:60]}`"
        elif not isinstance(
            stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.Try, ast.With)
        ):
            for node in ast.walk(stmt):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in _DYNAMIC_BINDERS
                ):
                    what = f"a call of {node.func.id}()"
                    break
        if what is not None:
            raise PolicyError(
                f"{self.where(stmt)}: {what} at import can rebind a module's names or a "
                "class's members, which chunkproof cannot evaluate statically (SPEC Q2)"
            )

    def imports(self, stmt: ast.Import | ast.ImportFrom, scope: dict[str, Any]) -> None:
        loader, module = self.loader, self.module
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    value = loader.import_value(
                        alias.name, None, module.rel, module.label, stmt.lineno, 0
                    )
                    self.bind(scope, alias.asname, value, "import", stmt)
                else:
                    top = alias.name.partition(".")[0]
                    value = loader.import_value(top, None, module.rel, module.label, stmt.lineno, 0)
                    self.bind(scope, top, value, "import", stmt)
            return
        for alias in stmt.names:
            if alias.name == "*":
                if module.of_tree:
                    raise PolicyError(
                        f"{self.where(stmt)}: `from {stmt.module} import *` at import can "
                        "rebind any name of the module, which chunkproof cannot evaluate "
                        "statically (SPEC Q2)"
                    )
                continue
            value = loader.import_value(
                stmt.module or "", alias.name, module.rel, module.label, stmt.lineno, stmt.level
            )
            self.bind(scope, alias.asname or alias.name, value, "import", stmt)

    def decorate(
        self,
        fv: FunctionValue,
        stmt: ast.FunctionDef,
        scope: dict[str, Any],
        closure: Mapping[str, Any] | None,
    ) -> Any:
        value: Any = fv
        for decorator in reversed(stmt.decorator_list):
            applied = self.expr(decorator, scope, closure)
            if isinstance(applied, _Identity):
                continue
            if isinstance(applied, Builtin) and applied.name in (
                "staticmethod",
                "classmethod",
                "property",
            ):
                if isinstance(value, FunctionValue):
                    value = _with_kind(value, applied.name)
                continue
            if isinstance(applied, FunctionValue) and self.loader.glue_module(applied.rel):
                value = self.call(applied, [value], decorator)
                continue
            value = Opaque(f"decorated with {ast.unparse(decorator)} at {self.where(decorator)}")
        return value

    def assign(
        self,
        target: ast.expr,
        value: Any,
        scope: dict[str, Any],
        closure: Mapping[str, Any] | None,
        stmt: ast.stmt,
    ) -> None:
        if isinstance(target, ast.Name):
            self.bind(scope, target.id, value, "value", stmt)
        elif isinstance(target, ast.Attribute):
            owner = self.expr(target.value, scope, closure)
            if isinstance(owner, ClassValue):
                self.loader.patch(owner.key, target.attr, value, self.where(stmt))
            elif isinstance(owner, ModuleValue) and self.loader.find_module(owner.name):
                raise PolicyError(
                    f"{self.where(stmt)}: assigns {ast.unparse(target)[:60]}, a name of another "
                    "module, at import; chunkproof reads each module's own bindings and does "
                    "not follow this (SPEC Q2)"
                )
            elif self.module.of_tree and not isinstance(owner, Missing):
                raise PolicyError(
                    f"{self.where(stmt)}: assigns {ast.unparse(target)[:60]} at import, and "
                    "chunkproof cannot tell statically what it changes (SPEC Q2)"
                )
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.assign(
                    element, Opaque(f"unpacked at {self.where(stmt)}"), scope, closure, stmt
                )

    def branch(
        self, stmt: ast.If, scope: dict[str, Any], closure: Mapping[str, Any] | None
    ) -> None:
        test = self.expr(stmt.test, scope, closure)
        if isinstance(test, Constant):
            self.block(stmt.body if test.value else stmt.orelse, scope, closure)
        elif _always_raises(stmt.body):
            self.block(stmt.orelse, scope, closure)
        elif stmt.orelse and _always_raises(stmt.orelse):
            self.block(stmt.body, scope, closure)
        elif any(
            _patches(s) or isinstance(s, (ast.FunctionDef, ast.Import, ast.ImportFrom))
            for s in [*stmt.body, *stmt.orelse]
        ):
            raise PolicyError(
                f"{self.where(stmt)}: chunkproof cannot tell statically which branch of this "
                f"`if {ast.unparse(stmt.test)[:60]}` runs at import, and it defines or patches "
                "what the policy may use"
            )

    def expr(self, node: ast.expr, scope: dict[str, Any], closure: Mapping[str, Any] | None) -> Any:
        loader = self.loader
        if isinstance(node, ast.Constant):
            return Constant(node.value)
        if isinstance(node, ast.Name):
            return self.lookup(node.id, scope, closure)
        if isinstance(node, ast.Attribute):
            base = self.expr(node.value, scope, closure)
            if isinstance(base, ClassValue):
                member = loader.lookup(base.key, node.attr)
                if member is not None:
                    return member
                return Opaque(
                    f"{base.key[1]}.{node.attr}, which the class does not define "
                    f"({self.where(node)})"
                )
            if isinstance(base, ModuleValue):
                return loader.module_attribute(base.name, node.attr, self.where(node))
            if isinstance(base, Missing):
                return base
            return Opaque(f"{ast.unparse(node)[:60]} ({self.where(node)})")
        if isinstance(node, ast.Call):
            func = self.expr(node.func, scope, closure)
            args = [self.expr(a, scope, closure) for a in node.args]
            if isinstance(func, Builtin) and func.name in _WRAPS:
                return _Identity()
            if isinstance(func, Builtin) and func.name == "setattr":
                if (
                    len(args) == 3
                    and isinstance(args[0], ClassValue)
                    and isinstance(args[1], Constant)
                    and isinstance(args[1].value, str)
                ):
                    loader.patch(args[0].key, args[1].value, args[2], self.where(node))
                elif (args and isinstance(args[0], (ClassValue, ModuleValue))) or (
                    self.module.of_tree and not (args and isinstance(args[0], Missing))
                ):
                    raise PolicyError(
                        f"{self.where(node)}: {ast.unparse(node)[:60]} at import: chunkproof "
                        "cannot tell statically which class member or name it sets (SPEC Q2)"
                    )
                return Constant(None)
            kinds = ("staticmethod", "classmethod", "property")
            wrapped = args[0] if len(args) == 1 else None
            if (
                isinstance(func, Builtin)
                and func.name in kinds
                and isinstance(wrapped, FunctionValue)
            ):
                return _with_kind(wrapped, func.name)
            if isinstance(func, FunctionValue):
                return self.call(func, args, node)
            return Opaque(f"the result of {ast.unparse(node.func)[:60]}() ({self.where(node)})")
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self.expr(node.operand, scope, closure)
            if isinstance(inner, Constant):
                return Constant(not inner.value)
        if isinstance(node, ast.BoolOp):
            return self.bool_op(node, scope, closure)
        if isinstance(node, ast.Compare):
            return self.compare(node, scope, closure)
        return Opaque(f"{ast.unparse(node)[:60]} ({self.where(node)})")

    def bool_op(
        self, node: ast.BoolOp, scope: dict[str, Any], closure: Mapping[str, Any] | None
    ) -> Any:
        """``a and b`` / ``a or b`` of constants, short-circuited as Python does (an operand
        glue cannot know makes the whole unknown unless an earlier constant decides it)."""
        is_and = isinstance(node.op, ast.And)
        value: Any = None
        for operand in node.values:
            value = self.expr(operand, scope, closure)
            if not isinstance(value, Constant):
                return Opaque(f"{ast.unparse(node)[:60]} ({self.where(node)})")
            if bool(value.value) is not is_and:
                return value
        return value

    def compare(
        self, node: ast.Compare, scope: dict[str, Any], closure: Mapping[str, Any] | None
    ) -> Any:
        """A comparison of constants (``PLATFORM == "device"``, ``VERSION >= 2``), as Python
        evaluates it; anything else is unknown."""
        values = [self.expr(operand, scope, closure) for operand in [node.left, *node.comparators]]
        unknown = Opaque(f"{ast.unparse(node)[:60]} ({self.where(node)})")
        if not all(isinstance(v, Constant) and _plain_constant(v.value) for v in values):
            return unknown
        plain = [v.value for v in values]
        for op, left, right in zip(node.ops, plain, plain[1:], strict=False):
            compare = _CONSTANT_COMPARISONS.get(type(op))
            if compare is None:
                return unknown
            try:
                holds = compare(left, right)
            except TypeError:
                return unknown  # Python raises here: the module would not import
            if not holds:
                return Constant(False)
        return Constant(True)


_CONSTANT_COMPARISONS: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}
"""The comparisons glue evaluates on constants (None, bool, int, str)."""


def _with_kind(fv: FunctionValue, kind: str) -> FunctionValue:
    return FunctionValue(fv.node, fv.rel, fv.user, fv.closure, fv.owner, kind, fv.bad_decorator)


def _always_raises(body: list[ast.stmt]) -> bool:
    """Every path through ``body`` ends in ``raise``."""
    if not body:
        return False
    last = body[-1]
    if isinstance(last, ast.Raise):
        return True
    if isinstance(last, ast.If):
        return _always_raises(last.body) and _always_raises(last.orelse)
    return False


def _stored_names(stmt: ast.stmt) -> set[str]:
    """The names a statement glue does not evaluate binds (``for`` targets, walrus, ...)."""
    return {
        node.id
        for node in ast.walk(stmt)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
    }


def _patches(stmt: ast.stmt) -> bool:
    """Whether ``stmt`` may change a class: an attribute store or a ``setattr`` call in it."""
    for node in ast.walk(stmt):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and (node.func.id == "setattr")
        ):
            return True
    return False
