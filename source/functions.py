"""Code from a user's file as data: syntax trees the policy-subset interpreter runs, never code
Python runs.

:class:`~chunkproof.source.extraction.Collector` finds, in a vLLM tree, the members of class
``Scheduler`` that the split and the reservation reach and the module helpers they call, by
reading the source text. :func:`source_class` turns what it found into a
:class:`~chunkproof.model.subset.SourceClass` whose members are validated
:class:`~chunkproof.model.subset.SubsetFunction` trees, and whose helpers resolve, name by
name, to other validated trees. Nothing is compiled, imported or executed: default values,
decorators, property bodies and helpers are interpreted (only when reached, and only after the
whole reachable code passed :func:`~chunkproof.model.subset.validate`). A name that would need
anything else (a standard-library module, an object of another library) is a
:class:`~chunkproof.model.errors.SubsetError` naming file and line.
"""

from __future__ import annotations

import ast
import copy
import inspect
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chunkproof.model import concrete
from chunkproof.model.errors import PolicyCrash, PolicyError, SubsetError
from chunkproof.model.files import read_text
from chunkproof.model.subset import Member, SourceClass, SubsetFunction, validate
from chunkproof.source.extraction import (
    SCHEDULER_FILE,
    Collector,
    Link,
    SourceError,
    global_names,
    parse_source,
    stripped,
    top_imports,
)

_KINDS = {
    "property": "property",
    "staticmethod": "staticmethod",
    "classmethod": "classmethod",
}


def source_class(collector: Collector) -> SourceClass:
    """The collected ``Scheduler`` members and their helpers as validated syntax trees."""
    namespaces: dict[str, dict[str, Any]] = {}
    helpers = fill_namespaces(collector, namespaces)
    label = collector.modules[SCHEDULER_FILE].label
    scheduler_namespace = namespaces[SCHEDULER_FILE]
    members = {
        name: _member(node, label, scheduler_namespace) for name, node in collector.members.items()
    }
    for function in [*helpers, *(m.function for m in members.values())]:
        check(function)
    return SourceClass(collector.class_def.name, members)


def fill_namespaces(
    collector: Collector, namespaces: dict[str, dict[str, Any]]
) -> list[SubsetFunction]:
    """Fill ``namespaces`` (one dict per module of the tree, created if absent, kept if given:
    functions built earlier may already refer to them) with the helpers the collector found
    and what every linked global name is bound to; the helpers, not yet validated."""
    for rel in collector.modules:
        namespaces.setdefault(rel, {})
    helpers: dict[tuple[str, str], SubsetFunction] = {}
    for rel, functions in collector.needed.items():
        label = collector.modules[rel].label
        for name, node in functions.items():
            helpers[(rel, name)] = SubsetFunction(name, node, label, namespaces[rel])
    for rel, links in collector.links.items():
        for name, link in links.items():
            namespaces[rel][name] = _linked(helpers, link, name)
    return list(helpers.values())


def check(function: SubsetFunction) -> None:
    """Validate ``function`` against the policy subset and check every global name it reads
    resolves to something the subset can use (SubsetError naming file and line otherwise)."""
    validate(function)
    _check_names(function)


def _linked(helpers: Mapping[tuple[str, str], SubsetFunction], link: Link, name: str) -> Any:
    """The value a global name is bound to: an extracted helper, or a marker that using it is
    outside the subset (a standard-library name is never imported)."""
    if link.stdlib is not None:
        module, imported, label, line = link.stdlib
        what = f"{module}.{imported}" if imported else module
        return Outside(f"{label}:{line}: {name!r} is {what} from the standard library")
    return helpers[(link.rel, link.name)]


class Outside:
    """A global name the subset cannot use; reading it is the error in :attr:`reason`."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _member(node: ast.FunctionDef, label: str, namespace: dict[str, Any]) -> Member:
    """A member with its kind taken from its (kept) decorator, the tree without it."""
    kinds = [
        _KINDS[d.id] for d in node.decorator_list if isinstance(d, ast.Name) and d.id in _KINDS
    ]
    if len(kinds) != len(node.decorator_list) or len(kinds) > 1:
        raise SubsetError(
            f"{label}:{node.lineno}: {node.name}: decorators other than one of property, "
            "staticmethod and classmethod are outside the policy subset"
        )
    bare = copy.copy(node)
    bare.decorator_list = []
    return Member(
        kinds[0] if kinds else "method", SubsetFunction(node.name, bare, label, namespace)
    )


def _check_names(func: SubsetFunction) -> None:
    """Every global name the function reads resolves to something the subset can use: a
    helper, ``min``/``max``, ``float`` (whose only values in the subset are the infinities),
    ``True``/``False``/``None``; others are errors naming the line."""
    nodes = list(_evaluated(func.node))
    local = {a.arg for a in func.node.args.args}
    local |= {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    local |= {
        g.target.id
        for n in nodes
        if isinstance(n, ast.GeneratorExp)
        for g in n.generators
        if isinstance(g.target, ast.Name)
    }
    for node in nodes:
        if not isinstance(node, ast.Name) or node.id in local:
            continue
        value = func.namespace.get(node.id)
        if isinstance(value, Outside):
            raise SubsetError(
                f"{value.reason}; only functions of the source tree are in the subset"
            )
        if value is None and node.id not in _BUILTIN_NAMES:
            raise SubsetError(
                f"{func.where(node)}: {func.name} uses {node.id!r}, which is not a function "
                "of the source tree"
            )


_BUILTIN_NAMES = frozenset({"min", "max", "float", "True", "False", "None"})
"""The builtins the policy subset knows (:mod:`chunkproof.model.subset`)."""


def _evaluated(node: ast.AST) -> list[ast.AST]:
    """Every node below ``node`` the interpreter may evaluate: all but the exception
    expressions of ``raise`` statements."""
    found: list[ast.AST] = []
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        found.append(child)
        if not isinstance(child, ast.Raise):
            stack.extend(ast.iter_child_nodes(child))
    return found


def interpret(tree: SubsetFunction, args: list[Any], label: str) -> int:
    """The concrete form of a stage read from a file: ``tree`` interpreted on Python values.
    A crash raises :class:`~chunkproof.model.errors.PolicyCrash` as Python would raise; a
    result that is not an integer is an error."""
    outcome = concrete.run(tree, args)
    if outcome.crashed:
        raise PolicyCrash(outcome.where or tree.name)
    value = outcome.value
    if not isinstance(value, int) or isinstance(value, bool):
        raise PolicyError(f"{label}: {tree.name} returned {value!r}, not an int")
    return value


@dataclass(frozen=True)
class TreeStage:
    """A stage ``(cfg, c, n) -> n`` read from a user's file (``module:function``): calling it
    interprets the tree (:func:`interpret`); :meth:`subset` and :meth:`arguments` feed the same
    tree to the vectorised and symbolic forms."""

    tree: SubsetFunction

    def __call__(self, cfg: Any, c: int, n: int) -> int:
        return interpret(self.tree, [cfg, c, n], self.tree.filename)

    def subset(self) -> SubsetFunction:
        return self.tree

    def arguments(self, cfg: Any, c: Any, n: Any) -> list[Any]:
        return [cfg, c, n]


def locate_module(text: str) -> Path:
    """The file of ``module`` in ``module:function``: a path (``dir/file.py``), or a dotted
    module name looked up along the working directory and ``sys.path`` without importing
    anything."""
    if text.endswith(".py") or "/" in text:
        path = Path(text)
        if not path.is_file():
            raise PolicyError(f"{text}: no such file")
        return path
    parts = text.split(".")
    if not all(part.isidentifier() for part in parts):
        raise PolicyError(f"{text!r} is not a module name or a path to a .py file")
    for entry in ["", *sys.path]:
        base = Path(entry or ".").joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    raise PolicyError(f"no module named {text!r} (looked for its .py file along sys.path)")


def read_function(path: Path, name: str) -> SubsetFunction:
    """Function ``name`` of the file ``path`` and the helpers it calls from the same file, as
    validated syntax trees (never imported or executed). Names imported from chunkproof's own
    modules resolve to chunkproof's functions; any other import a reached function uses is an
    error naming file and line."""
    label = str(path)
    try:
        tree = parse_source(read_text(path, "policy source"), label)
    except SourceError as exc:
        raise PolicyError(str(exc)) from None
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    if name not in functions:
        raise PolicyError(f"{label}: no function named {name!r}")
    imports = top_imports(tree)
    namespace: dict[str, Any] = {}
    trees: dict[str, SubsetFunction] = {}
    pending = [name]
    while pending:
        current = pending.pop()
        if current in trees:
            continue
        if functions[current].decorator_list:
            line = functions[current].lineno
            raise SubsetError(f"{label}:{line}: decorators are outside the policy subset")
        node = stripped(functions[current], member=False)
        trees[current] = SubsetFunction(current, node, label, namespace)
        for used in sorted(global_names(node)):
            if used in functions:
                namespace[used] = None  # filled below
                pending.append(used)
            elif used in imports and used not in namespace:
                namespace[used] = _imported(imports[used], used, label)
    namespace.update(trees)
    for function in trees.values():
        validate(function)
        _check_names(function)
    return trees[name]


def _imported(spec: tuple[str, str | None, int], name: str, label: str) -> Any:
    """What an imported name of a user's file means to the subset: a function of chunkproof's
    model (``chunkproof.model.*``) whose module the checker has already loaded, else a marker
    that using it is an error. A user's file never causes an import, not even of chunkproof's
    own modules (SPEC Q2: importing one runs its import-time code)."""
    module, imported, line = spec
    loaded = sys.modules.get(module) if module.startswith(_MODEL_PACKAGE) else None
    if loaded is not None and imported is not None:
        value = getattr(loaded, imported, None)
        if inspect.isfunction(value) and value.__module__.startswith(_MODEL_PACKAGE):
            return value
    reason = f"{label}:{line}: {name!r} is imported from {module}"
    if module.partition(".")[0] == "chunkproof":
        reason += (
            ", which is not a loaded module of chunkproof's model (a policy file never causes "
            "an import)"
        )
    return Outside(reason)


_MODEL_PACKAGE = "chunkproof.model."
