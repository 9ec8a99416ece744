"""The short pytest repro a vLLM pull request would add (SPEC C; ``chunkproof repro FILE
--style vllm --pytest OUT``).

The file imports vLLM's own ``Scheduler`` and calls its ``_mamba_block_aligned_split`` and
``_reserve_prefill_lookahead`` on a stub ``self``, as vLLM's scheduler tests do: a
``SimpleNamespace`` holding the counterexample's configuration (:data:`STUB`: any other member
of ``Scheduler`` the methods use, a helper method or a property, is ``Scheduler``'s own, bound
to the stub; an attribute neither has is an error naming it, never a default). The test is the
standalone repro's (:mod:`.requests`: the recorded steps, the budgets offered, P0 and then the
file's property on every step, with chunkproof's own predicates and budget cap copied in); only
the source loader is gone, so the file is short and runs wherever vLLM's own tests run. It
fails while the bug is in the installed vLLM and passes on a fix.

It serves one request without encoder items and any property but P6: a multi-request file
needs ``schedule()``'s loops, a request with encoder items the tree's encoder cache, and P6 the
tree's own KV cache lookup and retention (SPEC KV1: R* is each release's own), which vLLM's KV
cache classes cannot run on a stub; the standalone form builds them (``--style standalone``, the
default).
"""

from __future__ import annotations

import textwrap
from string import Template

from chunkproof.checker.repro.frame import (
    RAISED,
    UNSAFE,
    cache_rules_note,
    copied_functions,
    import_lines,
)
from chunkproof.checker.repro.requests import TEST, offered, predicates, title, trace_values
from chunkproof.model.counterexample import Counterexample
from chunkproof.model.errors import ChunkproofError
from chunkproof.source.loading import recorded_policy

IMPORTS = (
    "import inspect",
    "import traceback",
    "from types import SimpleNamespace",
    "from typing import Any, NamedTuple",
)
"""The file's standard-library imports."""

PRELUDE = """$docstring

from __future__ import annotations

$imports

import pytest

from vllm.v1.core.sched.scheduler import Scheduler

Config = SimpleNamespace  # chunkproof's configuration type, here a plain namespace
"""
"""The head of the file (a :class:`~string.Template`): ``docstring`` and ``imports``; vLLM's
``Scheduler`` is imported as its own tests import it."""

STUB = '''

class SourceError(Exception):
    """The methods read an attribute the stub does not set (the test is wrong, not vLLM)."""


class Stub(SimpleNamespace):
    """A stub ``self``: the attributes it is given, and any other member of ``Scheduler`` the
    methods use (a helper method, a property) bound to it."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            member = inspect.getattr_static(Scheduler, name)
        except AttributeError:
            raise SourceError(f"the code reads self.{name}, which the stub does not set") from None
        if isinstance(member, property) and member.fget is not None:
            return member.fget(self)
        return member.__get__(self, Scheduler) if hasattr(member, "__get__") else member


Extracted = SimpleNamespace  # what the test needs to know of the installed Scheduler
StandIn = SimpleNamespace
SCHEDULER_LABEL, REQUEST_LABEL = "self", "request"


def standin_tree(label: str, flat: dict[str, object], kind: type = SimpleNamespace) -> Any:
    """A stub from dotted attribute paths: ``{"cache_config.block_size": 16}`` gives
    ``x.cache_config.block_size == 16``."""
    nested: dict[str, dict[str, object]] = {}
    direct: dict[str, object] = {}
    for path, value in flat.items():
        head, dot, tail = path.partition(".")
        if dot:
            nested.setdefault(head, {})[tail] = value
        else:
            direct[head] = value
    for head, attributes in nested.items():
        direct[head] = standin_tree(f"{label}.{head}", attributes)
    return kind(**direct)


@pytest.fixture(scope="module")
def vllm() -> Extracted:
    """The installed vLLM's Scheduler: the stub type, whether it has the reservation, and
    whether its split takes V3's (0.24-0.25) num_uncached_common_prefix_tokens."""
    split = inspect.signature(Scheduler._mamba_block_aligned_split).parameters
    return Extracted(
        scheduler_type=Stub,
        has_reservation=hasattr(Scheduler, "_reserve_prefill_lookahead"),
        takes_uncached_prefix="num_uncached_common_prefix_tokens" in split,
    )


# ---------------------------------------------------------------------------------------------
# chunkproof's property and budget-cap functions (SPEC P, S3), copied from its source.
# ---------------------------------------------------------------------------------------------

$functions
'''
"""The stub ``self``, what the test asks of the installed ``Scheduler``, and chunkproof's
functions (a :class:`~string.Template` piece)."""

_TEMPLATE = Template(PRELUDE + TEST + UNSAFE + RAISED + STUB)


def vllm_repro_source(cx: Counterexample, source_name: str) -> str:
    """The text of the short pytest file for ``cx`` (module docstring); a counterexample with
    encoder items, of P6 or P8, or of a policy with its own file (a patch, a subclass: the short
    form imports vLLM's unpatched ``Scheduler``) is a one-line error."""
    if cx.config.items:
        raise ChunkproofError(
            "--style vllm: a request with encoder items needs the tree's encoder cache; "
            "use --style standalone"
        )
    if cx.property == "P6":
        raise ChunkproofError(
            "--style vllm: P6 is judged at the tree's own KV cache lookup and retention, "
            "which the short form cannot run; use --style standalone"
        )
    if cx.property == "P8":
        raise ChunkproofError(
            "--style vllm: P8 is judged by the tree's own KV block allocation, which the "
            "short form cannot run; use --style standalone"
        )
    policy = recorded_policy(cx)
    if policy.user_source is not None:
        raise ChunkproofError(
            f"--style vllm: the test imports vLLM's Scheduler, not {policy.user_source.path}'s "
            "methods; use --style standalone, which carries that file"
        )
    values = trace_values(cx, source_name)
    functions = copied_functions(policy, predicates(cx))
    head = {"docstring": _docstring(cx, source_name), "imports": import_lines(IMPORTS)}
    return _TEMPLATE.substitute(values | functions | head)


def _docstring(cx: Counterexample, source_name: str) -> str:
    """The file's docstring: what breaks where, the verdict, what the test runs, and where the
    file came from. Backslashes and double quotes are escaped (SPEC C: a file's text is
    untrusted)."""
    lines = [
        f"Repro: {title(cx)}.",
        "",
        *textwrap.wrap(f"What goes wrong: {cx.verdict}.", 96),
        "",
        *textwrap.wrap(
            "The test calls vLLM's own Scheduler._mamba_block_aligned_split and "
            "Scheduler._reserve_prefill_lookahead on a stub self holding exactly the values "
            f"below (as vLLM's scheduler tests do), offers {offered(cx)} on every step (P0: "
            "the code raises, or a stage returns a value outside [0, its input]). It fails "
            "while the bug is in the installed vLLM and passes once it is fixed."
            + cache_rules_note(cx),
            92,
        ),
        "",
        *textwrap.wrap(
            f"Generated by `chunkproof repro {source_name} --style vllm --pytest ...`; the "
            "property and budget-cap functions are chunkproof's own. `--style standalone` "
            "writes a form that reads the methods from any vLLM source tree without importing "
            "vLLM.",
            96,
        ),
    ]
    text = "\n".join(lines).replace("\\", "\\\\").replace('"', '\\"')
    return '"""' + text + '\n"""'
