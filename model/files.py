"""Reading a user's file (bad input, SPEC CLI): only a regular file, at most a bound of bytes,
UTF-8 text, JSON of bounded nesting and number length; anything else is one line of
:class:`~chunkproof.model.errors.ChunkproofError` (exit 2), never a traceback, a hang on a
device such as ``/dev/zero`` or an exhausted memory. Python source is parsed, with its nesting
bounded, by :func:`chunkproof.source.extraction.parse_source`. Free text read from a file is
printed only through :func:`printable`."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from chunkproof.model.errors import ChunkproofError

MAX_SOURCE_BYTES = 4 << 20
"""Largest policy source file read (vLLM's scheduler.py is about 100 kB); the release trees'
files are bounded alike by :data:`chunkproof.source.extraction.MAX_SOURCE_BYTES`, which stays
standard-library only for the repros that carry it."""
MAX_COUNTEREXAMPLE_BYTES = 8 << 20
"""Largest counterexample file read (the curated ones are a few kB; a long multi-request
trace a few MB at most)."""
MAX_JSON_DEPTH = 32
"""Deepest nesting of lists and objects a JSON file may have (a counterexample nests 5 deep)."""
MAX_JSON_DIGITS = 40
"""Most digits of a number in a JSON file (every value the tool reads is below 2^64)."""


def read_bytes(path: Path, what: str, limit: int) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes (``what`` names it in
    the error)."""
    try:
        # O_NONBLOCK: opening a FIFO that no one writes returns at once (and is then refused).
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as stream:
            info = os.fstat(stream.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise ChunkproofError(f"{path}: the {what} is not a regular file")
            if info.st_size > limit:
                raise ChunkproofError(
                    f"{path}: the {what} has {info.st_size} bytes; chunkproof reads at most {limit}"
                )
            data = stream.read(limit + 1)
    except FileNotFoundError:
        raise ChunkproofError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ChunkproofError(f"{path}: the {what} is a directory, not a file") from None
    except OSError as exc:
        raise ChunkproofError(f"{path}: cannot read the {what}: {exc.strerror}") from None
    if len(data) > limit:  # it grew while read
        raise ChunkproofError(f"{path}: the {what} has more than {limit} bytes")
    return data


def read_text(path: Path, what: str, limit: int = MAX_SOURCE_BYTES) -> str:
    """The UTF-8 text of ``path`` (:func:`read_bytes`)."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ChunkproofError(
            f"{path}: the {what} is not UTF-8 text (byte {exc.start} cannot be decoded)"
        ) from None


def read_json(path: Path, what: str, limit: int = MAX_COUNTEREXAMPLE_BYTES) -> Any:
    """The JSON document of ``path`` (:func:`read_text`), nested at most
    :data:`MAX_JSON_DEPTH` deep, its numbers at most :data:`MAX_JSON_DIGITS` digits long."""
    text = read_text(path, what, limit)
    try:
        data = json.loads(text, parse_int=_bounded_int, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ChunkproofError(f"{path}: the {what} is not JSON ({exc})") from None
    except RecursionError:
        raise ChunkproofError(f"{path}: the {what} nests deeper than {MAX_JSON_DEPTH}") from None
    except ValueError as exc:  # a number json cannot convert, raised by _bounded_int
        raise ChunkproofError(f"{path}: the {what} is not usable JSON: {exc}") from None
    if _depth(data) > MAX_JSON_DEPTH:
        raise ChunkproofError(f"{path}: the {what} nests deeper than {MAX_JSON_DEPTH}")
    return data


def _bounded_int(text: str) -> int:
    """A JSON integer of at most :data:`MAX_JSON_DIGITS` digits."""
    if len(text.lstrip("-")) > MAX_JSON_DIGITS:
        raise ValueError(f"a number of {len(text)} digits (at most {MAX_JSON_DIGITS})")
    return int(text)


def _no_constant(text: str) -> Any:
    """``NaN`` and ``Infinity`` are not JSON and no value of a counterexample."""
    raise ValueError(f"{text} is not a number chunkproof reads")


def _depth(data: Any) -> int:
    """How deep lists and objects nest in ``data`` (without recursion)."""
    deepest, pending = 0, [(data, 1)]
    while pending:
        value, level = pending.pop()
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            deepest = max(deepest, level)
            if level <= MAX_JSON_DEPTH:
                pending.extend((child, level + 1) for child in value)
    return deepest


def printable(text: str) -> str:
    """``text`` with every control character (a newline, an ANSI escape) written as its
    escape sequence: free text from a file is never printed verbatim."""
    return "".join(_escape(char) for char in text)


def _escape(char: str) -> str:
    if char.isprintable() or char == " ":
        return char
    return char.encode("unicode_escape").decode("ascii")
