"""RANGES (SPEC CLI): the range flags shared by ``explore``, ``prove``, ``check``, ``compare``
and ``conform``, read into a :class:`~chunkproof.spec.space.Space`, and the single-value flags
of ``trace`` that name one configuration."""

from __future__ import annotations

import argparse
import re

from chunkproof.model.config import Items
from chunkproof.model.errors import ConfigError
from chunkproof.spec.space import INPUTS, parse_ints, parse_layouts

RANGE_HELP = {
    "block": "Mamba block sizes B, e.g. 4,8,16 or 16-64",
    "split_block": "split grids G (cache_config.block_size): numbers or forms of B (B, B/2)",
    "hash_block": "hash blocks H: numbers or forms of B, G (G, G/2)",
    "lookahead": "lookaheads L, e.g. 0-8",
    "drop": "EAGLE block drop D: off, on or both",
    "hash_lookahead": "hash lookahead L_h (0.33): numbers or L (0,L)",
    "threshold": "long-prefill thresholds theta, e.g. 0,16",
    "checkpoints": "internal prefill checkpoints K: off, on or both",
    "checkpoint_alignment": "checkpoint alignments alpha with K: numbers or forms of B, H",
    "exact_junction": "exact shared-prefix checkpoint S: off, on or both",
    "retention": "retention intervals R: none and numbers (none,0,32)",
    "uncached_prefix": "uncached common prefix u (0.24-0.25), e.g. 0,8",
    "prompt": "prompt lengths P, e.g. 1-48",
    "tokens": "num_tokens T: P (fresh), P+0-2 (resumed), or numbers",
    "start": "admission starts c0: 0, block, hash, external, and numbers",
    "junction": "shared-prefix junctions J: 0, any, and numbers",
    "max_sched": "max scheduled tokens M, e.g. 1-32",
    "layout": "encoder items START+LENGTH (^GAP+LENGTH: after the previous item), alternatives "
    "separated by ;: none, 4+20,26+20, 0-3+1-8,^0-4+1-8",
    "encoder_cache": "encoder cache capacities C in embeddings (0: vLLM's max(M, largest item))",
    "encoder_budget": "encoder compute budgets per step (0: vLLM's, equal to the capacity)",
}


MAX_DIGITS = 20
"""Most digits a number on the command line may have (every input is at most 2^40; a longer
number is refused before Python converts it)."""
_INTEGER = re.compile(r"-?[0-9]+")
_DIGITS = re.compile(r"[0-9]+")


def ascii_int(text: str, flag: str) -> int:
    """An integer written in ASCII digits (an optional ``-``), at most :data:`MAX_DIGITS`
    long: Python's ``int()`` also reads other scripts' digits, ``_`` and spaces, which no
    flag takes."""
    if not _INTEGER.fullmatch(text):
        raise ConfigError(f"{flag}: {text[:40]!r} is not an integer (ASCII digits 0-9)")
    plain_number(text, flag)
    return int(text)


def plain_number(text: str, flag: str) -> str:
    """``text`` (a range flag's value) when it is ASCII and each number in it has at most
    :data:`MAX_DIGITS` digits; the parsers of :mod:`chunkproof.spec.space` then read it."""
    if not text.isascii():
        raise ConfigError(f"{flag}: {text[:40]!r} is not ASCII (numbers are digits 0-9)")
    for number in _DIGITS.findall(text):
        if len(number.lstrip("0")) > MAX_DIGITS:
            raise ConfigError(
                f"{flag}: a number of {len(number)} digits (at most {MAX_DIGITS}; the largest "
                "value is 2^40)"
            )
    return text


def add_range_flags(parser: argparse.ArgumentParser) -> None:
    """Every input of SPEC S1 as a range flag, plus ``--budget``."""
    group = parser.add_argument_group("ranges (every input; default: the command's grids)")
    for item in INPUTS:
        group.add_argument(item.flag, dest=f"range_{item.name}", help=RANGE_HELP[item.name])
    group.add_argument("--budget", help="narrow the per-step budgets to lo-hi within 1..M")


def range_texts(args: argparse.Namespace) -> dict[str, str]:
    """The range flags given, by input name."""
    return {
        item.name: plain_number(value, item.flag)
        for item in INPUTS
        if (value := getattr(args, f"range_{item.name}", None)) is not None
    }


def budget_range(args: argparse.Namespace) -> tuple[int, int] | None:
    """``--budget lo-hi`` (or one value)."""
    if getattr(args, "budget", None) is None:
        return None
    values = parse_ints(plain_number(args.budget, "--budget"), "--budget")
    if values.low < 1:
        raise ConfigError("--budget must be positive")
    return values.low, values.high


def trace_items(text: str | None) -> Items:
    """``trace --items``: one layout in the syntax of the range flag (``4+20,26+20``)."""
    if text is None:
        return Items()
    layouts = parse_layouts(plain_number(text, "--items"))
    if not layouts.fixed():
        raise ConfigError(f"--items {text}: trace takes one layout (START+LENGTH,...)")
    pattern = layouts.alternatives[0]
    pairs: list[tuple[int, int]] = []
    end = 0
    for item in pattern:
        start = end + item.start.low if item.relative else item.start.low
        pairs.append((start, item.length.low))
        end = start + item.length.low
    return Items(pairs)
