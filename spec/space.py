"""The configurations a verdict covers (SPEC S1, CLI RANGES): every input of the two methods and
their composition, each with the set of values it ranges over or the one value it is fixed at.

A :class:`Grid` maps every input of :data:`INPUTS` to a value set; its configurations are the
product, in the order of :data:`INPUTS` (later sets may be written in terms of earlier inputs:
``--tokens P+0-2``, ``--hash-block B/2``, ``--start block``). A :class:`Space` is a union of
grids plus the per-step budget range (SPEC S4), so a default that varies the new inputs on a
smaller base than the classic grid says exactly that. :meth:`Space.describe` names every input
of every grid, fixed ones included, and is what every verdict prints as its range.

The same value sets drive both engines: the explorer enumerates them (:meth:`Space.configs`),
the prover enumerates the inputs it keeps concrete per proof cell and turns the others into
linear constraints (:mod:`chunkproof.proofs.scope`), so a flag means the same set of
configurations in both.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from chunkproof.model.config import MAX_VALUE, Config, Items, validity_reads_max_sched
from chunkproof.model.errors import ConfigError

# -- value sets -----------------------------------------------------------------------------------


class ValueSet(Protocol):
    """The values one input ranges over, possibly in terms of earlier inputs."""

    def values(self, ctx: Mapping[str, Any]) -> Iterator[Any]:
        """The values, given the earlier inputs' values ``ctx``."""

    def describe(self) -> str:
        """The set, as a verdict states it."""

    def fixed(self) -> bool:
        """Whether the set is a single value independent of other inputs."""


@dataclass(frozen=True)
class Ints:
    """A union of closed integer intervals (``16,64,1600``, ``0-8``, ``1-4,8``)."""

    intervals: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, values: Iterable[int]) -> Ints:
        """The union of the fewest intervals that holds exactly ``values``."""
        runs: list[tuple[int, int]] = []
        for v in sorted(set(values)):
            if runs and v == runs[-1][1] + 1:
                runs[-1] = (runs[-1][0], v)
            else:
                runs.append((v, v))
        return cls(tuple(runs))

    def values(self, ctx: Mapping[str, Any]) -> Iterator[int]:
        for low, high in self.intervals:
            yield from range(low, high + 1)

    def size(self) -> int:
        return sum(high - low + 1 for low, high in self.intervals)

    def describe(self) -> str:
        parts = []
        for low, high in self.intervals:
            if low == high:
                parts.append(str(low))
            elif high == low + 1:
                parts.append(f"{low},{high}")
            else:
                parts.append(f"{low}-{high}")
        return ",".join(parts)

    def fixed(self) -> bool:
        return self.intervals[0][0] == self.intervals[-1][1]

    @property
    def low(self) -> int:
        return self.intervals[0][0]

    @property
    def high(self) -> int:
        return self.intervals[-1][1]


@dataclass(frozen=True)
class Bools:
    """``off``, ``on`` or ``both``."""

    options: tuple[bool, ...]

    def values(self, ctx: Mapping[str, Any]) -> Iterator[bool]:
        yield from self.options

    def describe(self) -> str:
        return "both" if len(self.options) == 2 else ("on" if self.options[0] else "off")

    def fixed(self) -> bool:
        return len(self.options) == 1


@dataclass(frozen=True)
class Term:
    """``base * mul // div + k`` for k in [low, high], of an earlier input (``P+0-2``, ``B/2``,
    ``2B``, ``L``)."""

    base: str
    mul: int = 1
    div: int = 1
    low: int = 0
    high: int = 0

    def origin(self, ctx: Mapping[str, Any]) -> Any:
        return ctx[self.base] * self.mul // self.div

    def values(self, ctx: Mapping[str, Any]) -> Iterator[int]:
        origin = self.origin(ctx)
        yield from range(origin + self.low, origin + self.high + 1)

    def describe(self) -> str:
        symbol = _SYMBOL_OF[self.base]
        text = symbol if self.mul == 1 else f"{self.mul}{symbol}"
        if self.div != 1:
            text += f"/{self.div}"
        if self.high != self.low:
            return f"{text}+{self.low}-{self.high}"
        return text + (f"{self.low:+d}" if self.low else "")


@dataclass(frozen=True)
class TermSet:
    """Integers and :class:`Term` forms (``B,8``, ``B/2,B/4``, ``P+0-2``)."""

    numbers: Ints | None
    terms: tuple[Term, ...]

    def values(self, ctx: Mapping[str, Any]) -> Iterator[int]:
        seen: set[int] = set()
        sources: list[Iterator[int]] = [t.values(ctx) for t in self.terms]
        if self.numbers is not None:
            sources.append(self.numbers.values(ctx))
        for source in sources:
            for value in source:
                if value not in seen:
                    seen.add(value)
                    yield value

    def describe(self) -> str:
        parts = [t.describe() for t in self.terms]
        if self.numbers is not None:
            parts.append(self.numbers.describe())
        return ",".join(parts)

    def fixed(self) -> bool:
        return not self.terms and self.numbers is not None and self.numbers.fixed()


START_KINDS = ("0", "block", "hash", "external")


@dataclass(frozen=True)
class Starts:
    """The admission start c0 and its external part x (history note 10; research of 0.33.0).

    Kinds: ``0``; ``block``: a local prefix hit on the scheduler block grid (every multiple of
    B_s in (0, E)); ``hash``: a local partial hash hit (every multiple of H in (0, E) that is
    not a multiple of B_s; needs partial hits F); ``external``: a KV connector loaded all of it
    (x = c0, every c0 in (0, E)). Explicit numbers are local hits where they sit on the hit
    grid (H with F, else B_s) and otherwise end in an external part.
    """

    kinds: tuple[str, ...]
    numbers: Ints | None = None

    def values(self, ctx: Mapping[str, Any]) -> Iterator[tuple[int, int]]:
        end = max(ctx["prompt"], ctx["tokens"] - 1)
        sched, hash_block = ctx["sched_block"], ctx["hash_block"]
        fine = hash_block < ctx["block"]
        seen: set[tuple[int, int]] = set()
        for kind in self.kinds:
            if kind == "0":
                found: Iterator[tuple[int, int]] = iter([(0, 0)])
            elif kind == "block":
                found = ((c, 0) for c in range(sched, end, sched))
            elif kind == "hash":
                found = ((c, 0) for c in range(hash_block, end, hash_block) if fine and c % sched)
            else:
                found = ((c, c) for c in range(1, end))
            for pair in found:
                if pair not in seen:
                    seen.add(pair)
                    yield pair
        if self.numbers is not None:
            unit = hash_block if fine else sched
            for c in self.numbers.values(ctx):
                pair = (c, c % unit)
                if c < end and pair not in seen:
                    seen.add(pair)
                    yield pair

    def describe(self) -> str:
        words = {
            "0": "0",
            "block": "local hits on B_s",
            "hash": "partial hits on H",
            "external": "external (any c0, x = c0)",
        }
        parts = [words[k] for k in self.kinds]
        if self.numbers is not None:
            parts.append(self.numbers.describe())
        return ", ".join(parts)

    def fixed(self) -> bool:
        return self.kinds == ("0",) and self.numbers is None


@dataclass(frozen=True)
class Junctions:
    """The shared-prefix junction J: ``0`` (none) and/or ``any`` (every multiple of the hit
    unit A in (c0, T - 1]: J is a hit length of the deeper attention groups, history note 10),
    and explicit positions."""

    kinds: tuple[str, ...]
    numbers: Ints | None = None

    def values(self, ctx: Mapping[str, Any]) -> Iterator[int]:
        seen: set[int] = set()
        unit = ctx["hash_block"] if ctx["hash_block"] < ctx["block"] else ctx["sched_block"]
        found: list[int] = []
        if "0" in self.kinds:
            found.append(0)
        if "any" in self.kinds:
            first = (ctx["start"] // unit + 1) * unit
            found.extend(range(first, ctx["tokens"], unit))
        if self.numbers is not None:
            found.extend(j for j in self.numbers.values(ctx) if j <= ctx["tokens"])
        for value in found:
            if value not in seen:
                seen.add(value)
                yield value

    def describe(self) -> str:
        words = {"0": "0", "any": "any hit position in (c0, T-1]"}
        parts = [words[k] for k in self.kinds]
        if self.numbers is not None:
            parts.append(self.numbers.describe())
        return ", ".join(parts)

    def fixed(self) -> bool:
        return self.kinds == ("0",) and self.numbers is None


@dataclass(frozen=True)
class Retentions:
    """``prefix_cache_retention_interval``: ``none`` (-1, every block kept) and integers."""

    options: tuple[int, ...]

    def values(self, ctx: Mapping[str, Any]) -> Iterator[int]:
        yield from self.options

    def describe(self) -> str:
        return ",".join("none" if r < 0 else str(r) for r in self.options)

    def fixed(self) -> bool:
        return len(self.options) == 1


@dataclass(frozen=True)
class ItemPattern:
    """One encoder item of a layout pattern: its start, either absolute (``4``, ``0-3``) or
    ``gap`` tokens after the previous item's end (``^0-2``; the first item's gap counts from
    0), and its length (``20``, ``1-8``)."""

    start: Ints
    relative: bool
    length: Ints

    def describe(self) -> str:
        where = f"^{self.start.describe()}" if self.relative else self.start.describe()
        return f"{where}+{self.length.describe()}"


@dataclass(frozen=True)
class Layouts:
    """Encoder item layouts (SPEC S1 encoder items; ``--items``): alternatives separated by
    ``;``, each ``none`` (no items) or items separated by ``,``, each ``START+LENGTH``
    (:class:`ItemPattern`). ``4+20,26+20`` is one layout; ``0-3+1-8,^0-4+1-8`` every layout of
    two items with the first starting at 0-3, a gap of 0-4 between them, lengths 1-8. Layouts
    whose items do not fit the prompt are not configurations (they are skipped, like other
    combinations SPEC S1 rules out)."""

    alternatives: tuple[tuple[ItemPattern, ...], ...]

    def values(self, ctx: Mapping[str, Any]) -> Iterator[Items]:
        seen: set[Items] = set()
        for pattern in self.alternatives:
            for layout in _layouts(pattern, 0, ctx.get("prompt")):
                items = Items(layout)
                if items not in seen:
                    seen.add(items)
                    yield items

    def describe(self) -> str:
        return ";".join(",".join(p.describe() for p in alt) or "none" for alt in self.alternatives)

    def fixed(self) -> bool:
        return len(self.alternatives) == 1 and all(
            p.start.fixed() and p.length.fixed() for p in self.alternatives[0]
        )


def _layouts(
    pattern: tuple[ItemPattern, ...], end: int, prompt: int | None
) -> Iterator[tuple[tuple[int, int], ...]]:
    """Every layout of ``pattern`` whose items start at or after ``end`` and end within
    ``prompt`` (when known)."""
    if not pattern:
        yield ()
        return
    head, rest = pattern[0], pattern[1:]
    for offset in head.start.values({}):
        start = end + offset if head.relative else offset
        if start < end or (prompt is not None and start >= prompt):
            continue
        for length in head.length.values({}):
            if length < 1 or (prompt is not None and start + length > prompt):
                continue
            for tail in _layouts(rest, start + length, prompt):
                yield ((start, length), *tail)


_ITEM = re.compile(r"^(\^)?([0-9-]+)\+([0-9-]+)$")


def parse_layouts(text: str, flag: str = "--items") -> Layouts:
    """``none``, or items ``START+LENGTH`` (``^GAP+LENGTH`` after the previous item), with
    ``;`` between alternatives (:class:`Layouts`)."""
    alternatives: list[tuple[ItemPattern, ...]] = []
    for alternative in (a.strip() for a in text.split(";")):
        if alternative in ("none", "0", ""):
            alternatives.append(())
            continue
        items = []
        for part in (p.strip() for p in alternative.split(",")):
            match = _ITEM.match(part)
            if not match:
                raise ConfigError(
                    f"{flag}: cannot read {part!r} (items are START+LENGTH or ^GAP+LENGTH, "
                    "e.g. 4+20,^2+20; alternatives are separated by ;)"
                )
            start = parse_ints(match.group(2), flag)
            length = parse_ints(match.group(3), flag)
            if length.low < 1:
                raise ConfigError(f"{flag}: an item's length is at least 1, not {part!r}")
            items.append(ItemPattern(start, match.group(1) is not None, length))
        alternatives.append(tuple(items))
    return Layouts(tuple(dict.fromkeys(alternatives)))


# -- the inputs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Input:
    """One input of S1: its Config field(s), flag, history-note symbol, what it is, and the
    parser of its value set."""

    name: str
    flag: str
    symbol: str
    meaning: str
    parse: Callable[[str], ValueSet]
    default: str


_PART = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def parse_ints(text: str, flag: str) -> Ints:
    """``"16,64,1600"``, ``"0-8"`` or a mix (``"1-4,8"``), without expanding the ranges."""
    pairs = []
    for part in text.split(","):
        match = _PART.match(part)
        if not match:
            raise ConfigError(f"{flag}: cannot read {part.strip()!r} (use 16,64 or 0-8)")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
        if high < low:
            raise ConfigError(f"{flag}: the range {low}-{high} is empty")
        if high > MAX_VALUE:
            raise ConfigError(f"{flag}: {high} exceeds the largest value, 2^40")
        pairs.append((low, high))
    return Ints(tuple(_merge(pairs)))


def _merge(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for low, high in sorted(pairs):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(high, merged[-1][1]))
        else:
            merged.append((low, high))
    return merged


def parse_bools(text: str, flag: str) -> Bools:
    """``off``, ``on`` or ``both``."""
    choices = {"off": (False,), "on": (True,), "both": (False, True)}
    if text not in choices:
        raise ConfigError(f"{flag} must be off, on or both, not {text!r}")
    return Bools(choices[text])


_TERM = re.compile(r"^(\d*)([A-Za-z_]+)(?:/(\d+))?(?:\+(\d+)(?:-(\d+))?)?$")


def parse_terms(text: str, flag: str, bases: Mapping[str, str]) -> TermSet:
    """Integers and forms of earlier inputs: ``B``, ``B/2``, ``2G``, ``P+0-2`` (``bases`` maps
    the symbols allowed to their Config fields)."""
    numbers: list[str] = []
    terms: list[Term] = []
    for part in (p.strip() for p in text.split(",")):
        if _PART.match(part):
            numbers.append(part)
            continue
        match = _TERM.match(part)
        if not match or match.group(2) not in bases:
            allowed = ", ".join(bases)
            raise ConfigError(f"{flag}: cannot read {part!r} (numbers, or forms of {allowed})")
        mul = int(match.group(1) or 1)
        div = int(match.group(3) or 1)
        if div == 0 or mul == 0:
            raise ConfigError(f"{flag}: {part!r} divides or multiplies by 0")
        low = int(match.group(4) or 0)
        high = int(match.group(5)) if match.group(5) else low
        if high < low:
            raise ConfigError(f"{flag}: the range in {part!r} is empty")
        if high > MAX_VALUE:
            raise ConfigError(f"{flag}: {high} exceeds the largest value, 2^40")
        terms.append(Term(bases[match.group(2)], mul, div, low, high))
    ints = parse_ints(",".join(numbers), flag) if numbers else None
    return TermSet(ints, tuple(terms))


def parse_starts(text: str, flag: str = "--start") -> Starts:
    """``0``, ``block``, ``hash``, ``external`` and explicit numbers (``0,block,5-9``)."""
    kinds, numbers = [], []
    for part in (p.strip() for p in text.split(",")):
        if part in START_KINDS:
            kinds.append(part)
        else:
            numbers.append(part)
    ints = parse_ints(",".join(numbers), flag) if numbers else None
    return Starts(tuple(dict.fromkeys(kinds)), ints)


def parse_junctions(text: str, flag: str = "--junction") -> Junctions:
    """``0``, ``any`` and explicit positions."""
    kinds, numbers = [], []
    for part in (p.strip() for p in text.split(",")):
        if part in ("0", "any"):
            kinds.append(part)
        else:
            numbers.append(part)
    ints = parse_ints(",".join(numbers), flag) if numbers else None
    return Junctions(tuple(dict.fromkeys(kinds)), ints)


def parse_retentions(text: str, flag: str = "--retention") -> Retentions:
    """``none`` and non-negative integers."""
    options: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if part == "none":
            options.append(-1)
        else:
            options.extend(parse_ints(part, flag).values({}))
    return Retentions(tuple(dict.fromkeys(options)))


def _ints(flag: str, minimum: int = 0) -> Callable[[str], ValueSet]:
    """Integer ranges of ``flag``, every value at least ``minimum`` (a block size, a prompt or
    a step budget of 0 is not a configuration: SPEC S1)."""

    def parse(text: str) -> ValueSet:
        values = parse_ints(text, flag)
        if values.low < minimum:
            raise ConfigError(f"{flag}: {values.low} is not allowed, values start at {minimum}")
        return values

    return parse


def _bools(flag: str) -> Callable[[str], ValueSet]:
    return lambda text: parse_bools(text, flag)


def _terms(flag: str, bases: Mapping[str, str], minimum: int = 0) -> Callable[[str], ValueSet]:
    """Integers and forms of ``flag`` (:func:`parse_terms`), every integer at least ``minimum``
    (a block size of 0 is not a configuration: SPEC S1)."""

    def parse(text: str) -> ValueSet:
        values = parse_terms(text, flag, bases)
        if values.numbers is not None and values.numbers.low < minimum:
            low = values.numbers.low
            raise ConfigError(f"{flag}: {low} is not allowed, values start at {minimum}")
        return values

    return parse


INPUTS: tuple[Input, ...] = (
    Input("block", "--block", "B", "Mamba block (the state grid)", _ints("--block", 1), "4,8,16"),
    Input(
        "split_block",
        "--split-block",
        "G",
        "cache_config.block_size (the split's grid)",
        _terms("--split-block", {"B": "block"}, 1),
        "B",
    ),
    Input(
        "hash_block",
        "--hash-block",
        "H",
        "hash block (prefix-match unit)",
        _terms("--hash-block", {"B": "block", "G": "split_block"}, 1),
        "G",
    ),
    Input("lookahead", "--lookahead", "L", "MTP prefill lookahead", _ints("--lookahead"), "0-4"),
    Input("drop", "--drop", "D", "EAGLE block drop", _bools("--drop"), "both"),
    Input(
        "hash_lookahead",
        "--hash-lookahead",
        "L_h",
        "hash lookahead tokens (0.33)",
        _terms("--hash-lookahead", {"L": "lookahead"}),
        "0",
    ),
    Input(
        "threshold",
        "--threshold",
        "theta",
        "static long-prefill threshold",
        _ints("--threshold"),
        "0",
    ),
    Input(
        "checkpoints",
        "--checkpoints",
        "K",
        "internal prefill checkpoints",
        _bools("--checkpoints"),
        "off",
    ),
    Input(
        "checkpoint_alignment",
        "--checkpoint-alignment",
        "alpha",
        "checkpoint alignment (with K)",
        _terms("--checkpoint-alignment", {"B": "block", "H": "hash_block"}),
        "1",
    ),
    Input(
        "exact_junction",
        "--exact-junction",
        "S",
        "exact shared-prefix checkpoint",
        _bools("--exact-junction"),
        "off",
    ),
    Input(
        "retention",
        "--retention",
        "R",
        "prefix_cache_retention_interval",
        parse_retentions,
        "none",
    ),
    Input(
        "uncached_prefix",
        "--uncached-prefix",
        "u",
        "uncached common prefix (0.24-0.25)",
        _ints("--uncached-prefix"),
        "0",
    ),
    Input("prompt", "--prompt", "P", "prompt tokens", _ints("--prompt", 1), "1-48"),
    Input(
        "tokens",
        "--tokens",
        "T",
        "num_tokens (T > P: a resumed request)",
        _terms("--tokens", {"P": "prompt"}),
        "P",
    ),
    Input("start", "--start", "c0", "admission start (x: its external part)", parse_starts, "0"),
    Input("junction", "--junction", "J", "shared-prefix junction", parse_junctions, "0"),
    Input(
        "layout",
        "--items",
        "items",
        "encoder items (start+length, in the prompt)",
        parse_layouts,
        "none",
    ),
    Input(
        "encoder_cache",
        "--encoder-cache",
        "C_enc",
        "encoder cache capacity C (0: vLLM's max(M, largest item))",
        _ints("--encoder-cache"),
        "0",
    ),
    Input(
        "encoder_budget",
        "--encoder-budget",
        "b_enc",
        "encoder compute budget per step (0: vLLM's, = C)",
        _ints("--encoder-budget"),
        "0",
    ),
    Input(
        "max_sched",
        "--max-sched",
        "M",
        "max scheduled tokens per step",
        _ints("--max-sched", 1),
        "1-32",
    ),
)
"""Every input of SPEC S1 the ranges cover, in enumeration order."""

_SYMBOL_OF = {i.name: i.symbol for i in INPUTS}
INPUT_NAMES = tuple(i.name for i in INPUTS)


# -- grids and spaces ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grid:
    """A product of value sets, one per input of :data:`INPUTS`."""

    sets: Mapping[str, ValueSet] = field(hash=False)
    label: str = ""

    def __post_init__(self) -> None:
        missing = [n for n in INPUT_NAMES if n not in self.sets]
        if missing:
            raise ConfigError(f"the grid sets no range for {', '.join(missing)}")

    def narrowed(self, changes: Mapping[str, ValueSet], label: str | None = None) -> Grid:
        return Grid({**self.sets, **changes}, self.label if label is None else label)

    def families(self, without: Sequence[str] = ("max_sched",)) -> Iterator[dict[str, Any]]:
        """Every combination of the inputs except ``without`` (as dicts of Config fields, with
        ``external`` beside ``start``); combinations that are not configurations at all are
        skipped (:func:`configs` counts them)."""
        names = [n for n in INPUT_NAMES if n not in without]
        yield from _product(self.sets, names, {})

    def describe(self) -> dict[str, str]:
        """Every input with its set or fixed value (the alignment reads "none" where the
        checkpoints are off: it matters only with them)."""
        out = {i.name: self.sets[i.name].describe() for i in INPUTS}
        if out["checkpoints"] == "off":
            out["checkpoint_alignment"] = "none (K off)"
        return out


def _product(
    sets: Mapping[str, ValueSet], names: Sequence[str], ctx: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    if not names:
        yield dict(ctx)
        return
    name, rest = names[0], names[1:]
    if name == "checkpoint_alignment" and not ctx.get("checkpoints", True):
        yield from _product(sets, rest, {**ctx, name: 0})  # alpha matters only with K
        return
    derived = _derived(name, ctx)
    for value in sets[name].values(derived):
        if name == "start":
            start, external = value
            yield from _product(sets, rest, {**ctx, "start": start, "external": external})
        elif name == "layout":
            yield from _product(sets, rest, {**ctx, "items": value})
        else:
            yield from _product(sets, rest, {**ctx, name: value})


def _derived(name: str, ctx: dict[str, Any]) -> dict[str, Any]:
    """``ctx`` with the derived fields the value set of ``name`` reads (B_s, E)."""
    out = dict(ctx)
    if "block" in ctx and "split_block" in ctx:
        out.setdefault("sched_block", _lcm(ctx["block"], ctx["split_block"]))
    if "prompt" in ctx and "tokens" in ctx:
        out["prefill_end"] = max(ctx["prompt"], ctx["tokens"] - 1)
    return out


def _lcm(a: int, b: int) -> int:
    return math.lcm(a, b)


def make_config(fields: Mapping[str, Any], max_sched: int) -> Config:
    """The configuration of a family's fields at M = ``max_sched`` (may raise ConfigError)."""
    return Config(max_sched=max_sched, **{k: v for k, v in fields.items() if k != "max_sched"})


def _family(fields: Mapping[str, Any], values: list[int]) -> tuple[Config, list[int]] | None:
    """The family's configuration at the first of the M ``values`` that makes one, and every
    M that does (SPEC S1); None when none does. A family whose validity does not read M
    (:func:`~chunkproof.model.config.validity_reads_max_sched`) makes one at every M or at
    none."""
    if not validity_reads_max_sched(fields.get("items", ())):
        try:
            return make_config(fields, values[0]), values
        except ConfigError:
            return None
    base: Config | None = None
    ms = []
    for m in values:
        try:
            cfg = make_config(fields, m) if base is None else base.replace(max_sched=m)
        except ConfigError:
            continue
        base = base or cfg
        ms.append(m)
    return None if base is None else (base, ms)


@dataclass(frozen=True)
class Space:
    """A union of grids and the per-step budgets [low, high] within 1..M (SPEC S4)."""

    grids: tuple[Grid, ...]
    budget: tuple[int, int] | None = None

    def configs(self) -> Iterator[Config]:
        """Every configuration of every grid (duplicates across grids are kept once)."""
        for base, ms in self.config_families():
            for m in ms:
                yield base.replace(max_sched=m)

    def config_families(self) -> Iterator[tuple[Config, list[int]]]:
        """The configurations of :meth:`configs`, in its order, grouped by family: a
        configuration of the family and the values of M it takes (the family's other
        fields are shared; a configuration another grid yielded before is left out)."""
        seen: dict[tuple[Any, ...], list[int]] = {}
        for grid in self.grids:
            for family in grid.families():
                found = _family(family, list(grid.sets["max_sched"].values(family)))
                if found is None:
                    continue
                base, values = found
                # the family's fields in INPUT_NAMES order, the same in every grid
                key = tuple(family.values())
                done = seen.get(key)
                if done is None:
                    ms = seen[key] = values
                else:
                    taken = set(done)
                    ms = [m for m in values if m not in taken]
                    seen[key] = done + ms
                if ms:
                    yield base, ms

    def describe(self) -> dict[str, Any]:
        """Every input of every grid with its range or fixed value (SPEC CLI ``range``)."""
        budget = "1-M" if self.budget is None else f"{self.budget[0]}-{self.budget[1]} within 1-M"
        if len(self.grids) == 1:
            return {**self.grids[0].describe(), "budget": budget}
        return {
            "union": [{"grid": g.label, **g.describe()} for g in self.grids],
            "budget": budget,
        }


def grid_from(texts: Mapping[str, str], label: str = "") -> Grid:
    """A grid from flag texts by input name; inputs not named take their default."""
    return Grid(
        {i.name: i.parse(texts.get(i.name, i.default)) for i in INPUTS},
        label,
    )
