"""One request's parameters (SPEC S1), validated on construction."""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chunkproof.model.errors import ConfigError


@dataclass(frozen=True)
class Config:
    """The parameters of one request and its scheduler (SPEC S1; history note section 2).

    Attribute names are what policy functions read (``cfg.block``, ``cfg.tokens``, ...).
    ``block`` is the Mamba group's block B, the grid states are saved on (slot note 1);
    ``split_block`` is G = ``cache_config.block_size``, the grid the split aligns to (0.33 sets
    it to the least block of the prefix-cacheable groups, so G can differ from B: vLLM #54076).
    Defaults are resolved on construction: ``tokens`` = 0 to ``prompt``, ``split_block`` = 0 to
    ``block``, ``hash_block`` = 0 to ``split_block``, ``sched_block`` = 0 to lcm(B, G),
    ``partial_hits`` = None to ``hash_block < block``. ``start`` is the admission start c0 and
    ``external`` the part of it a KV connector loaded (x <= c0; the rest is a local prefix
    hit). ``retention`` is ``prefix_cache_retention_interval``, -1 standing for ``None``
    (every block kept).
    """

    block: int
    prompt: int
    max_sched: int
    lookahead: int = 0
    tokens: int = 0
    threshold: int = 0
    split_block: int = 0
    hash_block: int = 0
    sched_block: int = 0
    drop: bool = False
    hash_lookahead: int = 0
    start: int = 0
    external: int = 0
    junction: int = 0
    exact_junction: bool = False
    partial_hits: bool = None  # type: ignore[assignment]  # derived in __post_init__
    checkpoints: bool = False
    checkpoint_alignment: int = 0
    uncached_prefix: int = 0
    retention: int = -1

    def __post_init__(self) -> None:
        _check_integers(self)
        if self.tokens == 0:
            object.__setattr__(self, "tokens", self.prompt)
        if self.split_block == 0:
            object.__setattr__(self, "split_block", self.block)
        if self.hash_block == 0:
            object.__setattr__(self, "hash_block", self.split_block)
        if self.sched_block == 0:
            object.__setattr__(self, "sched_block", math.lcm(self.block, self.split_block))
        if self.partial_hits is None:
            object.__setattr__(self, "partial_hits", self.hash_block < self.block)
        _validate(self)

    @property
    def T(self) -> int:
        """num_tokens."""
        return self.tokens

    @property
    def H(self) -> int:
        """Hash block size."""
        return self.hash_block

    @functools.cached_property
    def prefill_end(self) -> int:
        """E = max(P, T - 1) (SPEC S1)."""
        return max(self.prompt, self.T - 1)

    def describe(self) -> str:
        """How reports name a configuration: T, B, L, M, then whatever is not at its default."""
        defaults = {"prompt": self.tokens, **_derived_defaults(self)}
        parts = [
            f"T={self.tokens}",
            f"B={self.block}",
            f"L={self.lookahead}",
            f"M={self.max_sched}",
        ]
        for name, symbol in _SYMBOLS.items():
            value = getattr(self, name)
            if value != defaults.get(name, _FIELD_DEFAULTS[name]):
                parts.append(f"{symbol}={_show(value)}")
        return " ".join(parts)

    def replace(self, **changes: Any) -> Config:
        """A copy with ``changes``. A field left at its derived default (``tokens`` = prompt,
        ``hash_block`` = ``sched_block`` = block, ``partial_hits`` = H < B_s) is derived
        again from the new values; a field set to something else keeps its value."""
        if changes.keys() == {"max_sched"}:
            return self._with_max_sched(changes["max_sched"])
        old = self.to_dict()
        fields = {**old, **changes}
        for name, derive in _DERIVED.items():
            if name not in changes and old[name] == derive(old):
                fields[name] = None if name == "partial_hits" else 0
        return Config(**fields)

    def _with_max_sched(self, m: int) -> Config:
        """``replace(max_sched=m)`` without re-validating fields it cannot affect (hot path)."""
        if not isinstance(m, int) or m < 1:
            raise ConfigError(f"--max-sched must be a positive integer, got {m!r}")
        clone = copy.copy(self)
        object.__setattr__(clone, "max_sched", m)
        return clone

    def to_dict(self) -> dict[str, Any]:
        """Every field, resolved (the full config of a counterexample file, SPEC C)."""
        return {name: getattr(self, name) for name in _FIELD_NAMES}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Config:
        """Inverse of :meth:`to_dict`; unknown keys are an error."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"unknown config field(s): {', '.join(unknown)}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(f"bad config: {exc}") from None


_DERIVED: dict[str, Callable[[dict[str, Any]], Any]] = {
    "tokens": lambda f: f["prompt"],
    "split_block": lambda f: f["block"],
    "hash_block": lambda f: f["split_block"],
    "sched_block": lambda f: math.lcm(f["block"], f["split_block"]),
    "partial_hits": lambda f: f["hash_block"] < f["block"],
}
"""Fields whose default is derived from others, in derivation order."""

_FIELD_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Config)}
_FIELD_NAMES = tuple(_FIELD_DEFAULTS)

_SYMBOLS = {
    "prompt": "P",
    "threshold": "theta",
    "split_block": "G",
    "hash_block": "H",
    "sched_block": "B_s",
    "drop": "D",
    "hash_lookahead": "L_h",
    "start": "c0",
    "external": "x",
    "junction": "J",
    "exact_junction": "S",
    "partial_hits": "F",
    "checkpoints": "K",
    "checkpoint_alignment": "alpha",
    "uncached_prefix": "u",
    "retention": "R",
}
"""History-note symbols of the fields :meth:`Config.describe` shows when not at default."""


def _derived_defaults(cfg: Config) -> dict[str, Any]:
    fields = cfg.to_dict()
    return {name: derive(fields) for name, derive in _DERIVED.items()}


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


MAX_VALUE = 1 << 40
"""Largest value of an integer parameter: keeps every intermediate of the policies exact in
the vectorised form (int64 lanes)."""

_NATURAL = (
    "lookahead",
    "threshold",
    "hash_lookahead",
    "start",
    "external",
    "junction",
    "checkpoint_alignment",
    "uncached_prefix",
    "tokens",
    "split_block",
    "hash_block",
    "sched_block",
)


def _check_integers(cfg: Config) -> None:
    """Every integer field is an int in range (before defaults are derived)."""
    for name in ("block", "prompt", "max_sched"):
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_VALUE:
            raise ConfigError(f"{_flag(name)} must be a positive integer, got {value!r}")
    for name in _NATURAL:
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_VALUE:
            raise ConfigError(f"{_flag(name)} must be a non-negative integer, got {value!r}")
    if not isinstance(cfg.retention, int) or not -1 <= cfg.retention <= MAX_VALUE:
        raise ConfigError(
            f"--retention must be none or a non-negative integer, got {cfg.retention!r}"
        )


def tokens_cover_prompt(cfg: Config) -> bool:
    """T >= P: num_tokens counts the prompt (SPEC S1)."""
    return cfg.tokens >= cfg.prompt


def start_inside_prefill(cfg: Config) -> bool:
    """c0 < E: an admission start at or past the prefill end leaves no prefill."""
    return cfg.start < max(cfg.prompt, cfg.tokens - 1)


def external_inside_start(cfg: Config) -> bool:
    """x <= c0: the external hit is part of the start."""
    return cfg.external <= cfg.start


def junction_inside_request(cfg: Config) -> bool:
    """J <= T: the junction is a token position of the request."""
    return cfg.junction <= cfg.tokens


def scheduler_block_common(cfg: Config) -> bool:
    """B_s is a multiple of B and of G (the lcm of the groups' blocks, or a multiple)."""
    return cfg.sched_block % cfg.block == 0 and cfg.sched_block % cfg.split_block == 0


WELL_FORMED: tuple[tuple[Callable[[Config], bool], str], ...] = (
    (tokens_cover_prompt, "--tokens {tokens} is below --prompt {prompt}"),
    (start_inside_prefill, "--start {start} leaves no prefill: it must be below E"),
    (external_inside_start, "the external hit {external} exceeds the start {start}"),
    (junction_inside_request, "the junction {junction} lies past the {tokens} tokens"),
    (
        scheduler_block_common,
        "the scheduler block {sched_block} must be a multiple of B={block} and G={split_block}",
    ),
)
"""What makes a configuration at all (SPEC S1), as predicates in the policy subset (the prover
translates them) and the error each breach gives; what a release refuses at start-up is the
release's acceptance rules (SPEC S1b, :mod:`chunkproof.model.acceptance`)."""


def _validate(cfg: Config) -> None:
    """The first rule of :data:`WELL_FORMED` the configuration breaks is a ConfigError."""
    for holds, message in WELL_FORMED:
        if not holds(cfg):
            raise ConfigError(message.format(**cfg.to_dict()))


_FLAGS = {
    "block": "--block",
    "prompt": "--prompt",
    "max_sched": "--max-sched",
    "lookahead": "--lookahead",
    "threshold": "--threshold",
    "split_block": "--split-block",
    "hash_block": "--hash-block",
    "hash_lookahead": "--hash-lookahead",
    "start": "--start",
    "junction": "--junction",
    "checkpoint_alignment": "--checkpoint-alignment",
    "uncached_prefix": "--uncached-prefix",
    "tokens": "--tokens",
}


def _flag(name: str) -> str:
    return _FLAGS.get(name, name)
