"""Each model's counterexamples above the engines, behind one interface (SPEC C).

A model checked by the engines (:mod:`chunkproof.spec.interface`) leaves counterexample files.
What a command does with one is the same for every model: read it (the envelope of
:mod:`chunkproof.model.trace_file`, the model's own part by its schema), check its property is
one the model judges, replay it on a policy, say what it shows, draw it, write its pytest
repro, save it with its picture in a run folder. A :class:`TraceKind` is what a model gives
for these; :data:`KINDS` lists them, and the functions here are the one path every command
takes. A new model adds a module beside :mod:`.request` and :mod:`.system` and a line to
:data:`KINDS`.

Imports :mod:`chunkproof.checker.reports` and :mod:`chunkproof.checker.repro` (a kind's
picture and repro) and below; the runs and the CLI call it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from chunkproof.checker.kinds.request import REQUEST
from chunkproof.checker.kinds.system import SYSTEM
from chunkproof.checker.reports.output import RunFolder
from chunkproof.model.errors import ChunkproofError
from chunkproof.model.policy import Policy
from chunkproof.model.trace_file import TraceFile, TraceFormat, load

REPRO_STYLES = ("standalone", "vllm")
"""A repro reads the real methods from a source tree it is given, importing nothing
(``standalone``, :mod:`chunkproof.checker.repro.requests`), or calls them from the installed
vLLM on a stub ``self`` as vLLM's own tests do (``vllm``,
:mod:`chunkproof.checker.repro.vllm_style`)."""

PolicyOf = Callable[[], Policy]
"""The policy a trace was found on, resolved only when a kind needs it (rebuilding a source
policy reads its files)."""


class TraceKind(Protocol):
    """What a model gives for its counterexamples (module docstring)."""

    @property
    def format(self) -> TraceFormat:
        """Its files' schemas and reader."""

    @property
    def properties(self) -> tuple[str, ...]:
        """The property ids its files may name."""

    def owns(self, cx: TraceFile) -> bool:
        """``cx`` is one of this model's counterexamples."""

    def replay(self, policy: Policy, cx: TraceFile) -> str | None:
        """How replaying ``cx`` on ``policy`` differs from the file; ``None`` when every step
        is as recorded and the last one still breaks the property."""

    def replayed_words(self, cx: TraceFile) -> str:
        """What a trace that reproduced shows, escaped (a file's free text is untrusted)."""

    def draw(self, cx: TraceFile, policy: PolicyOf, path: Path) -> Path:
        """The trace picture of ``cx`` written to ``path`` (.svg or .png)."""

    def graph(self, cx: TraceFile, policy: PolicyOf, path: Path) -> Path:
        """The state graph around ``cx`` written to ``path``; a one-line error where the model
        has none."""

    def repro_source(self, cx: TraceFile, source_name: str, style: str) -> str:
        """The text of the pytest repro of ``cx`` (read from ``source_name``) in ``style``
        (:data:`REPRO_STYLES`); a style the model has no form in is a one-line error."""


KINDS: tuple[TraceKind, ...] = (REQUEST, SYSTEM)
"""Every model's counterexamples, in the order their schemas are named in errors."""


def kind_of(cx: TraceFile) -> TraceKind:
    """The kind a counterexample belongs to."""
    return next(kind for kind in KINDS if kind.owns(cx))


def load_counterexample(path: Path) -> TraceFile:
    """The counterexample file at ``path``, of any model, read and checked: its schema is one a
    kind reads, and its property one that kind's model judges."""
    cx = load(path, [kind.format for kind in KINDS])
    known = kind_of(cx).properties
    if cx.property not in known:
        raise ChunkproofError(
            f"{path}: unknown property {cx.property!r} (not one of {', '.join(known)})"
        )
    return cx


def save_counterexample(
    cx: TraceFile, policy: Policy, out: RunFolder, name: str
) -> tuple[str, str]:
    """Write ``cx``, found on ``policy``, as ``name.json`` with its picture beside it into the
    run folder; their final paths."""
    kind = kind_of(cx)
    return out.save_counterexample(
        cx, policy.file_stem, name, lambda path: kind.draw(cx, lambda: policy, path)
    )
