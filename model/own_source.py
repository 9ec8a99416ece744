"""The source text of one of chunkproof's own functions, proved to be the code that runs.

:func:`inspect.getsource` reads a function's file as it is *now*, at the line numbers of the
code loaded *then*. A file edited (or a package upgraded) while a long run goes on would give
the subset interpreter another function's text, or a half of one, and every engine would judge
that instead of the policy (SPEC Q1: the forms compute what CPython computes). So the text read
is compiled again and its code compared with the function's own (for a module an import hook
rewrote, its name and parameters); any difference is a
:class:`~chunkproof.model.errors.SubsetError`, never a verdict.
"""

from __future__ import annotations
import __future__

import ast
import functools
import importlib.machinery
import inspect
import operator
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType
from typing import Any

from chunkproof.model.errors import SubsetError

_FUTURE_FLAGS = functools.reduce(
    operator.or_, (getattr(__future__, name).compiler_flag for name in __future__.all_feature_names)
)
"""Every ``from __future__`` compiler flag: the ones a code object carries are compiled again."""


@dataclass(frozen=True)
class OwnSource:
    """A function's text (dedented), the line it starts on in its file, and the file."""

    text: str
    first_line: int
    filename: str

    def tree(self) -> ast.FunctionDef:
        """The function's syntax tree, its line numbers those of the file."""
        node = ast.parse(self.text).body[0]
        ast.increment_lineno(node, self.first_line - 1)
        if not isinstance(node, ast.FunctionDef):
            raise SubsetError(f"{self.filename}:{self.first_line}: not a plain function")
        return node


def own_source(fn: Callable[..., Any]) -> OwnSource:
    """The source of ``fn``, after checking that it compiles to ``fn``'s own code (its
    bytecode, constants, names and first line). A mismatch means the file changed since it was
    loaded: one line saying so."""
    try:
        lines, first_line = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or "<unknown>"
    except (OSError, TypeError) as exc:
        raise SubsetError(f"cannot read the source of {fn!r}: {exc}") from None
    source = OwnSource(textwrap.dedent("".join(lines)), first_line, filename)
    code = getattr(fn, "__code__", None)
    if not isinstance(code, CodeType) or not _matches(fn, source, code):
        raise SubsetError(
            f"{filename}:{first_line}: the text of {getattr(fn, '__name__', fn)!r} in its file "
            "is not the code loaded (the file changed while chunkproof ran); run it again"
        )
    return source


def _matches(fn: Callable[..., Any], source: OwnSource, code: CodeType) -> bool:
    """Whether ``source`` is ``fn``'s: it compiles to ``code`` when its module was loaded
    from its file as it stood; when an import hook rewrote the module (pytest rewrites the
    asserts of test modules), the code cannot be compiled again, and its name and parameters
    are compared instead."""
    module = sys.modules.get(getattr(fn, "__module__", ""))
    if isinstance(getattr(module, "__loader__", None), importlib.machinery.SourceFileLoader):
        return _compiles_to(source, code)
    try:
        node = source.tree()
    except (SyntaxError, SubsetError, IndexError):
        return False
    params = [a.arg for a in node.args.args]
    return node.name == code.co_name and params == list(code.co_varnames[: code.co_argcount])


def _compiles_to(source: OwnSource, code: CodeType) -> bool:
    """Whether ``source`` compiled as a module holds a function whose code is ``code``."""
    try:
        module = ast.Module(body=[source.tree()], type_ignores=[])
        compiled = compile(
            module, source.filename, "exec", flags=code.co_flags & _FUTURE_FLAGS, dont_inherit=True
        )
    except (SyntaxError, SubsetError, IndexError):
        return False
    inner = [c for c in compiled.co_consts if isinstance(c, CodeType)]
    return len(inner) == 1 and _same_code(inner[0], code)


def _same_code(left: CodeType, right: CodeType) -> bool:
    """Equal bytecode, names, first line and constants (nested code compared the same way)."""
    fields = ("co_name", "co_code", "co_names", "co_varnames", "co_freevars", "co_cellvars")
    if any(getattr(left, f) != getattr(right, f) for f in fields):
        return False
    if left.co_firstlineno != right.co_firstlineno or len(left.co_consts) != len(right.co_consts):
        return False
    return all(
        _same_code(a, b) if isinstance(a, CodeType) and isinstance(b, CodeType) else a == b
        for a, b in zip(left.co_consts, right.co_consts, strict=True)
    )
