"""Parameter ranges (SPEC CLI, RANGES) and the configurations of a grid."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from typing import Any

from chunkproof.model.config import Config
from chunkproof.model.errors import ConfigError

_PART = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def parse_int_set(text: str, flag: str) -> tuple[int, ...]:
    """``"16,64,1600"``, ``"0-8"`` or a mix (``"1-4,8"``) -> sorted distinct integers."""
    values: set[int] = set()
    for part in text.split(","):
        match = _PART.match(part)
        if not match:
            raise ConfigError(f"{flag}: cannot read {part.strip()!r} (use 16,64 or 0-8)")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
        if high < low:
            raise ConfigError(f"{flag}: the range {low}-{high} is empty")
        values.update(range(low, high + 1))
    return tuple(sorted(values))


def parse_drop(text: str) -> tuple[bool, ...]:
    """``--drop off|on|both``."""
    choices = {"off": (False,), "on": (True,), "both": (False, True)}
    if text not in choices:
        raise ConfigError(f"--drop must be off, on or both, not {text!r}")
    return choices[text]


@dataclass(frozen=True)
class Ranges:
    """A grid of configurations: the product of these value sets (SPEC CLI, RANGES).

    ``hash_block`` of ``None`` means H = B; ``budget`` narrows the adversarial budgets to
    [low, high] within 1..M (SPEC S4). Combinations the model rejects (L > T, ...) are not part
    of the grid and are counted as excluded.
    """

    block: tuple[int, ...]
    lookahead: tuple[int, ...]
    prompt: tuple[int, ...]
    max_sched: tuple[int, ...]
    drop: tuple[bool, ...] = (False, True)
    threshold: tuple[int, ...] = (0,)
    hash_block: tuple[int, ...] | None = None
    budget: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and len(value) == 0:
                raise ConfigError(f"the {f.name.replace('_', '-')} range is empty")
        if min(self.block) < 1:
            raise ConfigError("--block must be positive")
        if min(self.prompt) < 1:
            raise ConfigError("--prompt must be positive")
        if min(self.max_sched) < 1:
            raise ConfigError("--max-sched must be positive")
        if self.budget is not None and self.budget[0] < 1:
            raise ConfigError("--budget must be positive")

    def families(self) -> Iterator[Config]:
        """One configuration per combination of everything but M (M set to max(max_sched))."""
        top = max(self.max_sched)
        for block, lookahead, drop, threshold, prompt in itertools.product(
            self.block, self.lookahead, self.drop, self.threshold, self.prompt
        ):
            for hash_block in self.hash_block or (block,):
                try:
                    yield Config(
                        block=block,
                        prompt=prompt,
                        max_sched=top,
                        lookahead=lookahead,
                        drop=drop,
                        threshold=threshold,
                        hash_block=hash_block,
                    )
                except ConfigError:
                    continue

    def batches(self, cells: int = 1 << 20) -> list[list[Config]]:
        """The families, grouped so that one vectorised evaluation covers a batch: families
        that differ only in the prompt, at most ``cells`` table cells per batch."""
        groups: dict[tuple[object, ...], list[Config]] = {}
        for family in self.families():
            key = (family.block, family.lookahead, family.drop, family.threshold, family.H)
            groups.setdefault(key, []).append(family)
        batches = []
        for group in groups.values():
            batch: list[Config] = []
            for family in group:
                width = min(max(self.max_sched), family.T)
                size = (len(batch) + 1) * len(self.max_sched) * family.prefill_end * width
                if batch and size > cells:
                    batches.append(batch)
                    batch = []
                batch.append(family)
            batches.append(batch)
        return batches

    def cells(self) -> int:
        """Table cells (M, c, b) the explorer evaluates; 0 when no combination is valid or no
        budget of ``budget`` is ever offered (SPEC S4: b <= min(M, T))."""
        low, high = self.budget or (1, max(self.max_sched))
        total = 0
        for lookahead, prompt in itertools.product(self.lookahead, self.prompt):
            if lookahead <= prompt:
                offered = [min(high, m, prompt) - low + 1 for m in self.max_sched]
                total += prompt * sum(count for count in offered if count > 0)
        variants = (
            len(self.block) * len(self.drop) * len(self.threshold) * len(self.hash_block or (1,))
        )
        return total * variants

    def size(self) -> int:
        """Number of grid points (before excluding invalid combinations)."""
        hashes = len(self.hash_block) if self.hash_block else 1
        return (
            len(self.block)
            * len(self.lookahead)
            * len(self.drop)
            * len(self.threshold)
            * len(self.prompt)
            * len(self.max_sched)
            * hashes
        )

    def describe(self) -> dict[str, Any]:
        """The range as stated in a verdict: compact ``lo-hi`` strings for contiguous sets."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "drop":
                out[f.name] = "both" if len(value) == 2 else ("on" if value[0] else "off")
            elif f.name == "budget":
                out[f.name] = "1-M" if value is None else f"{value[0]}-{value[1]} within 1-M"
            elif value is None:
                out[f.name] = "B"
            else:
                out[f.name] = compact(value)
        return out

    def narrowed(self, **changes: Any) -> Ranges:
        return replace(self, **changes)


def compact(values: tuple[int, ...]) -> str:
    """``(1, 2, 3, 7)`` -> ``"1-3,7"``."""
    parts, run = [], [values[0]]
    for v in values[1:]:
        if v == run[-1] + 1:
            run.append(v)
        else:
            parts.append(run)
            run = [v]
    parts.append(run)
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ",".join(map(str, r)) for r in parts)


SMALL_GRID = Ranges(
    block=(4, 8, 16),
    lookahead=tuple(range(0, 5)),
    prompt=tuple(range(1, 49)),
    max_sched=tuple(range(1, 33)),
)
"""The default exhaustive grid of ``explore`` and ``check``."""
