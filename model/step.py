"""One scheduling step (SPEC S3): the stages of a policy applied to (c, b)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from chunkproof.model.config import Config
from chunkproof.model.policy import STAGE_NAMES, Policy
from chunkproof.model.subset import Value
from chunkproof.model.vectorised import INTERPRETER


@dataclass(frozen=True)
class Step:
    """One step of a trace (SPEC C): the value after each stage, and the chunk taken.

    ``n`` is the chunk before the split (after the budget and theta caps), ``split``,
    ``encoder`` and ``reservation`` the values after those stages (a stage a policy does not
    have passes its input through), ``chunk`` what the request is scheduled.
    """

    c: int
    budget: int
    n: int
    split: int
    encoder: int
    reservation: int
    chunk: int

    @property
    def end(self) -> int:
        """The chunk end c + chunk."""
        return self.c + self.chunk

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Step:
        return cls(
            **{
                k: int(data[k])
                for k in ("c", "budget", "n", "split", "encoder", "reservation", "chunk")
            }
        )


def _fill(values: dict[str, Value], budget: Value) -> dict[str, Value]:
    """Stage values in STAGE_NAMES order; a missing stage passes its input through."""
    filled: dict[str, Value] = {}
    current = budget
    for name in STAGE_NAMES:
        current = values.get(name, current)
        filled[name] = current
    return filled


def step(policy: Policy, cfg: Config, c: int, budget: int) -> Step:
    """SPEC S3: run the policy's stages on (c, b) natively (the concrete form)."""
    values: dict[str, Value] = {}
    n = budget
    for stage in policy.stages:
        n = stage.function(cfg, c, n)
        values[stage.name] = n
    f = _fill(values, budget)
    return Step(c, budget, f["cap"], f["split"], f["encoder"], f["reservation"], n)


def chunk(policy: Policy, cfg: Config, c: int, budget: int) -> int:
    """The chunk of one step (SPEC S3), natively."""
    n = budget
    for stage in policy.stages:
        n = stage.function(cfg, c, n)
    return n


def vectorised_stages(policy: Policy, cfg: Any, c: Value, budget: Value) -> dict[str, Value]:
    """Every stage's value over arrays, plus ``"chunk"``: the vectorised form of :func:`step`.

    Derived from the stage source by :mod:`chunkproof.model.vectorised`. ``cfg`` may be a
    :class:`Config` or any object with the same attributes holding arrays.
    """
    values: dict[str, Value] = {}
    n = budget
    for stage in policy.stages:
        n = INTERPRETER.call(stage.subset(), stage.arguments(cfg, c, n))
        values[stage.name] = n
    filled = _fill(values, budget)
    filled["chunk"] = n
    return filled
