"""What every counterexample file shares, whatever model wrote it (SPEC C): the envelope.

A file is one JSON object: ``schema`` (which model's trace, and its version), ``policy`` (the
policy's name, the sha256 of its source when it came from a file, the options it was checked
with), ``property``, ``trace`` (the model's steps), ``verdict`` (in words) and ``details``;
the model adds its own inputs beside them. Each model's file type reads and writes its part
and uses this module for the rest, so a new model's files are read, checked and written the
same way: :class:`TraceFormat` names a model's schemas and reader, and :func:`load` picks the
format of a file by its schema.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from chunkproof.model.errors import ChunkproofError
from chunkproof.model.files import printable, read_json

MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError)
"""What reading a field of the wrong shape raises (a list where an object belongs, a string
where a number does): each is a malformed file, one line of bad input."""


class TraceFile(Protocol):
    """A counterexample of any model: the envelope's fields (module docstring)."""

    @property
    def policy(self) -> str: ...
    @property
    def source_sha256(self) -> str | None: ...
    @property
    def policy_options(self) -> tuple[str, ...]: ...
    @property
    def verdict(self) -> str: ...
    @property
    def steps(self) -> Sequence[Any]: ...

    def to_dict(self) -> dict[str, Any]: ...

    @property
    def property(self) -> str: ...  # last: the name shadows the decorator below it


@dataclass(frozen=True)
class PolicyRecord:
    """The ``policy`` object of a file: name, source digest (``None``: a built-in policy) and
    the options it was checked with."""

    name: str
    source_sha256: str | None
    options: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source_sha256": self.source_sha256,
            "options": list(self.options),
        }

    @classmethod
    def of(cls, cx: TraceFile) -> PolicyRecord:
        return cls(cx.policy, cx.source_sha256, cx.policy_options)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PolicyRecord:
        options = tuple(str(o) for o in data.get("options", ()))
        return cls(str(data["name"]), recorded_sha256(data.get("source_sha256")), options)


def recorded_sha256(value: object) -> str | None:
    """A file's recorded source digest: ``None`` (a built-in policy) or 64 hex digits."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) != 64 or value.strip("0123456789abcdef"):
        raise ValueError(f"source_sha256 is not a sha256 digest: {printable(str(value))[:80]}")
    return value


def recorded_verdict(data: dict[str, Any]) -> str:
    """The file's verdict words, escaped: a file's free text is untrusted (SPEC C)."""
    return printable(str(data["verdict"]))


def malformed(exc: Exception) -> ChunkproofError:
    """The one-line error of a field of the wrong shape (:data:`MALFORMED`)."""
    return ChunkproofError(f"malformed counterexample: missing or bad field {exc}")


@dataclass(frozen=True)
class TraceFormat:
    """One model's files: the schemas it reads (the current one last, the one it writes) and
    the reader of a document of one of them (which raises :class:`ChunkproofError` on a
    malformed one)."""

    schemas: tuple[str, ...]
    read: Callable[[dict[str, Any]], TraceFile]

    @property
    def schema(self) -> str:
        return self.schemas[-1]


def write_file(path: Path, document: dict[str, Any]) -> Path:
    """Write a counterexample document as JSON; a folder that cannot be written is bad input."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=2) + "\n")
    except OSError as exc:
        raise ChunkproofError(f"{path}: cannot write: {exc.strerror}") from None
    return path


def read_document(path: Path) -> dict[str, Any]:
    """The JSON object of a counterexample file (:func:`~chunkproof.model.files.read_json`:
    a regular file of bounded size, UTF-8, bounded nesting and numbers)."""
    data = read_json(Path(path), "counterexample file")
    if not isinstance(data, dict):
        raise ChunkproofError(f"{path}: not a chunkproof counterexample")
    return data


def format_of(data: dict[str, Any], formats: Sequence[TraceFormat]) -> TraceFormat:
    """The format whose schemas hold the document's; any other schema is a one-line error
    naming the schemas this version writes."""
    for fmt in formats:
        if data.get("schema") in fmt.schemas:
            return fmt
    expected = " or ".join(repr(fmt.schema) for fmt in formats)
    raise ChunkproofError(
        f"not a chunkproof counterexample (schema {data.get('schema')!r}, expected {expected})"
    )


def load(path: Path, formats: Sequence[TraceFormat]) -> TraceFile:
    """The counterexample in the file at ``path``, read by the format its schema names."""
    data = read_document(path)
    return format_of(data, formats).read(data)
