"""One request's parameters (SPEC S1), validated on construction."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from chunkproof.model.errors import ConfigError


class Items(tuple[tuple[int, int], ...]):
    """A request's multimodal encoder items (SPEC S1 "encoder items"; encoder-and-loops note
    1.2): ``(start, length)`` pairs, the placeholder tokens ``[start, start + length)`` of each
    item in the prompt, in position order. Each item has its own identifier (no two items of
    the request share an encoder cache entry) and no ``is_embed`` mask, so it needs ``length``
    embeddings in the encoder cache.

    ``int(items)`` is the layout's place in SPEC C's minimisation order (fewer items first,
    then smaller positions and lengths), so that the generic "then every other field" ordering
    of counterexamples can rank layouts like any integer field.
    """

    def __new__(cls, pairs: Iterable[Iterable[int]] = ()) -> Items:
        normalised = []
        for pair in pairs:
            values = tuple(pair)
            if len(values) != 2:
                raise ConfigError(f"--items: an item is (start, length), not {values!r}")
            normalised.append((values[0], values[1]))
        return super().__new__(cls, normalised)

    def __int__(self) -> int:
        weight = sum(start + length for start, length in self)
        return (len(self) << 50) | min(weight, (1 << 50) - 1)

    def describe(self) -> str:
        """``start+length`` per item (the ``--items`` syntax), or ``none``."""
        return ",".join(f"{s}+{n}" for s, n in self) or "none"


@dataclass(frozen=True)
class ItemView:
    """One encoder item as the policy subset reads it, in any value domain (Python ints,
    arrays over a batch, Z3 terms): its position ``index``, ``start`` and ``length``, its
    ``end``, the total length of the items before it (``before``: a prefix sum, so that sums
    over a run of items are differences) and the end of the item before it (``prev_end``, 0 for
    the first)."""

    index: int
    start: Any
    length: Any
    end: Any
    before: Any
    prev_end: Any


def item_views(pairs: Iterable[tuple[Any, Any]]) -> tuple[ItemView, ...]:
    """The :class:`ItemView` of ``(start, length)`` pairs whose values may be of any domain
    (only ``+`` is used)."""
    views: list[ItemView] = []
    before: Any = 0
    prev_end: Any = 0
    for index, (start, length) in enumerate(pairs):
        end = start + length
        views.append(ItemView(index, start, length, end, before, prev_end))
        before = before + length
        prev_end = end
    return tuple(views)


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

    Encoder inputs (SPEC S1; encoder-and-loops note sections 1-2): ``items`` (:class:`Items`),
    the encoder cache capacity C ``encoder_cache`` and the per-step encoder compute budget
    ``encoder_budget``, both in embeddings. 0 stands for vLLM's own value, which depends on M
    and is therefore resolved where it is read (:func:`encoder_capacity`,
    :func:`encoder_compute_budget`): both are max(max_num_batched_tokens, the largest item),
    ``compute_mm_encoder_budget``. Without items the encoder stages are the identity, and
    :meth:`to_dict` leaves the three fields out while they hold their defaults.
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
    items: Items = Items()  # noqa: RUF009  (an immutable tuple: one shared default is safe)
    encoder_cache: int = 0
    encoder_budget: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.items, Items):
            try:
                object.__setattr__(self, "items", Items(self.items))
            except TypeError:
                message = f"--items must be (start, length) pairs, got {self.items!r}"
                raise ConfigError(message) from None
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

    @functools.cached_property
    def mm_items(self) -> tuple[ItemView, ...]:
        """The encoder items as the policy subset reads them (:class:`ItemView`)."""
        return item_views(self.items)

    @property
    def encoder_shared(self) -> int:
        """The encoder cache embeddings other requests' entries reference: none for a request
        alone (the scheduler step sets it per visit on a step view: :func:`encoder_room`)."""
        return 0

    @property
    def has_items(self) -> bool:
        """Whether the request carries encoder items (the encoder stages are the identity
        without)."""
        return len(self.items) > 0

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
        """``replace(max_sched=m)`` without re-validating fields it cannot affect (hot path;
        :func:`validity_reads_max_sched`)."""
        if not isinstance(m, int) or isinstance(m, bool) or not 1 <= m <= MAX_VALUE:
            raise ConfigError(f"--max-sched must be a positive integer, got {m!r}")
        clone = object.__new__(Config)
        clone.__dict__.update(self.__dict__)  # the fields and prefill_end, which M leaves as is
        clone.__dict__["max_sched"] = m
        if validity_reads_max_sched(clone.items):
            _validate(clone)
        return clone

    def to_dict(self) -> dict[str, Any]:
        """Every field, resolved (the full config of a counterexample file, SPEC C); the
        encoder fields only when one is set (:data:`ENCODER_FIELDS`), so a configuration
        without encoder inputs reads and writes exactly as before they existed."""
        encoder = self.has_encoder_fields
        return {
            name: getattr(self, name)
            for name in _FIELD_NAMES
            if encoder or name not in ENCODER_FIELDS
        }

    @property
    def has_encoder_fields(self) -> bool:
        """Whether an encoder field is not at its default."""
        return any(getattr(self, name) != _FIELD_DEFAULTS[name] for name in ENCODER_FIELDS)

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

ENCODER_FIELDS = ("items", "encoder_cache", "encoder_budget")
"""The encoder inputs; :meth:`Config.to_dict` names them only when one is set."""

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
    "items": "items",
    "encoder_cache": "C_enc",
    "encoder_budget": "b_enc",
}
"""History-note symbols of the fields :meth:`Config.describe` shows when not at default."""


def _derived_defaults(cfg: Config) -> dict[str, Any]:
    fields = cfg.to_dict()
    return {name: derive(fields) for name, derive in _DERIVED.items()}


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, Items):
        return value.describe()
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
    "encoder_cache",
    "encoder_budget",
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
    for start, length in cfg.items:
        for value in (start, length):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_VALUE:
                raise ConfigError(
                    f"--items: positions and lengths are non-negative integers, got {value!r}"
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


def encoder_capacity(cfg: Config) -> int:
    """C, the encoder cache capacity in embeddings: ``encoder_cache``, or (0) vLLM's own
    max(max_num_batched_tokens, largest item) with M for max_num_batched_tokens
    (``compute_mm_encoder_budget``, encoder-and-loops note 2.1: the largest item is the
    model's per-item maximum, at least every item a request carries)."""
    if cfg.encoder_cache > 0:
        return cfg.encoder_cache
    return max(cfg.max_sched, max((item.length for item in cfg.mm_items), default=0))


def encoder_room(cfg: Config) -> int:
    """What of the encoder cache one request's call can claim: C less the embeddings that
    entries of the other requests reference (``encoder_shared``). vLLM's cache is one per
    scheduler; an entry another request references is neither free nor evictable, so
    ``can_allocate`` sees it as missing capacity (encoder-and-loops note 1.2)."""
    return encoder_capacity(cfg) - cfg.encoder_shared


def validity_reads_max_sched(items: Items) -> bool:
    """Whether a configuration's validity (SPEC S1) can depend on M: of its rules only the
    encoder ones read M, through the capacity and the compute budget (max(M, the largest
    item) when not given: :func:`encoder_capacity`), so only a configuration with items."""
    return len(items) > 0


def encoder_compute_budget(cfg: Config) -> int:
    """b0, the encoder compute budget of a step in embeddings: ``encoder_budget``, or (0)
    vLLM's own value, which is the capacity's formula (encoder-and-loops note 1.3)."""
    if cfg.encoder_budget > 0:
        return cfg.encoder_budget
    return encoder_capacity(cfg)


def items_ordered(cfg: Config) -> bool:
    """Items are non-empty, in position order and do not overlap (vLLM sorts a request's
    placeholders; ``get_mm_features_in_window`` assumes it)."""
    gaps = min((item.start - item.prev_end for item in cfg.mm_items), default=0)
    return gaps >= 0 and min((item.length for item in cfg.mm_items), default=1) >= 1


def items_inside_prompt(cfg: Config) -> bool:
    """Every item's placeholders are prompt tokens: the last item ends at or before P."""
    return max((item.end for item in cfg.mm_items), default=0) <= cfg.prompt


def items_fit_encoder(cfg: Config) -> bool:
    """Every item fits the cache and the compute budget: vLLM sizes both at least the
    model's largest item, and the input processor refuses a larger one (encoder-and-loops
    note 2.1)."""
    largest = max((item.length for item in cfg.mm_items), default=0)
    return largest <= encoder_capacity(cfg) and largest <= encoder_compute_budget(cfg)


def encoder_budget_path_free(cfg: Config) -> bool:
    """b0 >= min(C, total item length): the region where one request's state is c alone.

    Argument (:func:`chunkproof.model.stages.held_embeds`): what the encoder cap decides at
    c depends on the cache only through the reclaimable capacity R = C - (embeddings of the
    items the request holds), and on which items earlier, wider windows encoded ahead of the
    chunk only through the compute budget, which such items no longer draw on. Every item a
    call tests after others needs m + k <= R <= C embeddings, and k + m never exceeds the
    total item length, so with b0 at least the smaller of the two the budget test never
    decides alone and the step is a function of c. vLLM sets b0 = C for every model, so this
    holds for every real configuration; a smaller b0 (a step another request's encoder work
    shares) needs the set of items encoded ahead as state, which the multi-request model has.
    """
    total = max((item.before + item.length for item in cfg.mm_items), default=0)
    return encoder_compute_budget(cfg) >= min(encoder_capacity(cfg), total)


WELL_FORMED: tuple[tuple[Callable[[Config], bool], str], ...] = (
    (tokens_cover_prompt, "--tokens {tokens} is below --prompt {prompt}"),
    (start_inside_prefill, "--start {start} leaves no prefill: it must be below E"),
    (external_inside_start, "the external hit {external} exceeds the start {start}"),
    (junction_inside_request, "the junction {junction} lies past the {tokens} tokens"),
    (
        scheduler_block_common,
        "the scheduler block {sched_block} must be a multiple of B={block} and G={split_block}",
    ),
    (items_ordered, "--items {items}: items need a length >= 1, in order, without overlap"),
    (items_inside_prompt, "--items {items}: every item must end within the prompt P={prompt}"),
    (
        items_fit_encoder,
        "--items {items}: an item larger than the encoder cache {encoder_cache} or budget "
        "{encoder_budget} (vLLM sizes both at least the largest item)",
    ),
    (
        encoder_budget_path_free,
        "--encoder-budget {encoder_budget} is below min(the encoder cache, the items' total): "
        "the step would depend on which items earlier steps encoded ahead, state the "
        "single-request model does not keep (vLLM's budget equals the cache)",
    ),
)
"""What makes a configuration at all (SPEC S1), as predicates in the policy subset (the prover
translates them) and the error each breach gives; what a release refuses at start-up is the
release's acceptance rules (SPEC S1b, :mod:`chunkproof.model.acceptance`)."""


def _validate(cfg: Config) -> None:
    """The first rule of :data:`WELL_FORMED` the configuration breaks is a ConfigError."""
    for holds, message in WELL_FORMED:
        if not holds(cfg):
            fields = {name: _show(getattr(cfg, name)) for name in _FIELD_NAMES}
            raise ConfigError(message.format(**fields))


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
    "encoder_cache": "--encoder-cache",
    "encoder_budget": "--encoder-budget",
}


def _flag(name: str) -> str:
    return _FLAGS.get(name, name)
