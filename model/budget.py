"""Budget models (SPEC S4): what the environment offers a request at each step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chunkproof.model.errors import ConfigError


@dataclass(frozen=True)
class Const:
    """``const(b)``: the same budget every step."""

    budget: int

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "const", "budget": self.budget}


@dataclass(frozen=True)
class Adversarial:
    """``adversarial(lo..hi)``: any budget in the range at each step."""

    low: int
    high: int

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "adversarial", "low": self.low, "high": self.high}


@dataclass(frozen=True)
class Alone:
    """``alone``: b = M every step."""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "alone"}


BudgetModel = Const | Adversarial | Alone


def budget_model_from_dict(data: dict[str, Any]) -> BudgetModel:
    """Inverse of ``to_dict``."""
    kind = data.get("kind")
    if kind == "const":
        return Const(int(data["budget"]))
    if kind == "adversarial":
        return Adversarial(int(data["low"]), int(data["high"]))
    if kind == "alone":
        return Alone()
    raise ConfigError(f"unknown budget model {kind!r}")
