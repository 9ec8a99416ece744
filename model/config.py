"""One request's parameters (SPEC S1), validated on construction."""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chunkproof.model.errors import ConfigError


@dataclass(frozen=True)
class Config:
    """The parameters of one request and its scheduler (SPEC S1; history note section 2).

    Attribute names are what policy functions read (``cfg.block``, ``cfg.tokens``, ...).
    Defaults are resolved on construction: ``tokens`` = 0 to ``prompt``, ``hash_block`` = 0 and
    ``sched_block`` = 0 to ``block``, ``partial_hits`` = None to ``hash_block < sched_block``.
    """

    block: int
    prompt: int
    max_sched: int
    lookahead: int = 0
    tokens: int = 0
    threshold: int = 0
    hash_block: int = 0
    sched_block: int = 0
    drop: bool = False
    hash_lookahead: int = 0
    start: int = 0
    junction: int = 0
    exact_junction: bool = False
    partial_hits: bool | None = None
    checkpoints: bool = False
    checkpoint_alignment: int = 0
    uncached_prefix: int = 0

    def __post_init__(self) -> None:
        if self.tokens == 0:
            object.__setattr__(self, "tokens", self.prompt)
        if self.hash_block == 0:
            object.__setattr__(self, "hash_block", self.block)
        if self.sched_block == 0:
            object.__setattr__(self, "sched_block", self.block)
        if self.partial_hits is None:
            object.__setattr__(self, "partial_hits", self.hash_block < self.sched_block)
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
        """How reports name a configuration: T, B, L, M, then whatever is not at its default
        (P, D, theta, H, L_h, c0)."""
        extras = (
            (self.prompt != self.tokens, f"P={self.prompt}"),
            (self.drop, "D=on"),
            (self.threshold > 0, f"theta={self.threshold}"),
            (self.hash_block != self.block, f"H={self.hash_block}"),
            (self.hash_lookahead > 0, f"L_h={self.hash_lookahead}"),
            (self.start > 0, f"c0={self.start}"),
        )
        parts = [f"T={self.tokens}", f"B={self.block}", f"L={self.lookahead}"]
        parts.append(f"M={self.max_sched}")
        return " ".join(parts + [text for shown, text in extras if shown])

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
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

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
    "hash_block": lambda f: f["block"],
    "sched_block": lambda f: f["block"],
    "partial_hits": lambda f: f["hash_block"] < f["sched_block"],
}


def _validate(cfg: Config) -> None:
    """Reject configurations outside the model (SPEC S1); one clear reason each."""
    for name in ("block", "prompt", "max_sched"):
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{_flag(name)} must be a positive integer, got {value!r}")
    for name in (
        "lookahead",
        "threshold",
        "hash_lookahead",
        "start",
        "junction",
        "checkpoint_alignment",
        "uncached_prefix",
        "tokens",
        "hash_block",
        "sched_block",
    ):
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"{_flag(name)} must be a non-negative integer, got {value!r}")
    if cfg.H < 1 or cfg.block % cfg.H != 0:
        raise ConfigError(f"--hash-block {cfg.H} must be positive and divide --block {cfg.block}")
    if cfg.sched_block < 1:
        raise ConfigError("the scheduler block size must be positive")
    if cfg.prompt > cfg.T:
        raise ConfigError(f"--tokens {cfg.T} is below --prompt {cfg.prompt}")
    if cfg.lookahead > cfg.T:
        raise ConfigError(f"--lookahead {cfg.lookahead} exceeds the {cfg.T} tokens of the request")
    if cfg.start >= cfg.prefill_end:
        raise ConfigError(
            f"--start {cfg.start} leaves no prefill: it must be below E = {cfg.prefill_end}"
        )
    if cfg.junction > cfg.T:
        raise ConfigError(f"the junction {cfg.junction} lies past the {cfg.T} tokens")


_FLAGS = {
    "block": "--block",
    "prompt": "--prompt",
    "max_sched": "--max-sched",
    "lookahead": "--lookahead",
    "threshold": "--threshold",
    "hash_block": "--hash-block",
    "hash_lookahead": "--hash-lookahead",
    "start": "--start",
    "tokens": "--tokens",
}


def _flag(name: str) -> str:
    return _FLAGS.get(name, name)
