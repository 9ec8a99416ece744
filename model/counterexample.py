"""The single-request model's counterexample files (SPEC C): its part of the file (the
configuration, the budget model, the trace of SPEC C stage values) on the envelope every
model's files share (:mod:`chunkproof.model.trace_file`), and step-by-step replay."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from chunkproof.model.budget import Adversarial, BudgetModel, budget_model_from_dict
from chunkproof.model.config import Config
from chunkproof.model.errors import ChunkproofError
from chunkproof.model.policy import Policy
from chunkproof.model.step import Step, step
from chunkproof.model.trace_file import (
    MALFORMED,
    PolicyRecord,
    TraceFormat,
    format_of,
    malformed,
    read_document,
    recorded_verdict,
)

SCHEMA = "chunkproof.counterexample/2"
READABLE = ("chunkproof.counterexample/1", SCHEMA)
"""Schema 1 lacks the inputs added in 2 (G, x, R) and the P0 crash of a step; it reads with
their defaults."""


@dataclass(frozen=True)
class Counterexample:
    """A replayable trace that breaks one property (SPEC C)."""

    policy: str
    config: Config
    budget_model: BudgetModel
    property: str
    steps: tuple[Step, ...]
    verdict: str
    minimised: tuple[str, ...] = ()
    source_sha256: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    policy_options: tuple[str, ...] = ()

    def largest_budget(self) -> int:
        """The most tokens one step can offer: the budget model's top, else M (SPEC S4)."""
        model = self.budget_model
        return model.high if isinstance(model, Adversarial) else self.config.max_sched

    def window(self) -> str:
        """The form of P5 the trace was checked under (relaxed unless recorded)."""
        return str(self.details.get("window", "relaxed"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "policy": PolicyRecord.of(self).to_dict(),
            "config": self.config.to_dict(),
            "budget_model": self.budget_model.to_dict(),
            "property": self.property,
            "trace": [s.to_dict() for s in self.steps],
            "verdict": self.verdict,
            "minimised": list(self.minimised),
            "details": self.details,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Counterexample:
        """Inverse of :meth:`to_dict` (the schema is checked by the reader)."""
        if not data.get("trace"):
            raise ChunkproofError("malformed counterexample: the trace is empty")
        try:
            record = PolicyRecord.from_dict(data["policy"])
            return cls(
                policy=record.name,
                source_sha256=record.source_sha256,
                policy_options=record.options,
                config=Config.from_dict(data["config"]),
                budget_model=budget_model_from_dict(data["budget_model"]),
                property=str(data["property"]),
                steps=tuple(Step.from_dict(s) for s in data["trace"]),
                verdict=recorded_verdict(data),
                minimised=tuple(str(name) for name in data.get("minimised", ())),
                details=dict(data.get("details", {})),
            )
        except MALFORMED as exc:
            raise malformed(exc) from None

    @classmethod
    def load(cls, path: Path) -> Counterexample:
        """The single-request counterexample in the file at ``path``."""
        data = read_document(path)
        format_of(data, (FORMAT,))
        return cls.from_dict(data)


FORMAT = TraceFormat(READABLE, Counterexample.from_dict)
"""The single-request model's files."""


def replay_steps(policy: Policy, cx: Counterexample) -> str | None:
    """Re-run every recorded step; ``None`` when all match, else the first difference.

    A crash matches a crash at the same step whatever its text: the built-in and the source
    form of one release name the same failing check differently (SPEC P0)."""
    c = cx.config.start
    for index, recorded in enumerate(cx.steps):
        if recorded.c != c:
            return f"step {index}: recorded c={recorded.c}, but the previous steps lead to c={c}"
        actual = step(policy, cx.config, recorded.c, recorded.budget)
        if (actual.crash is None) == (recorded.crash is None):
            actual = replace(actual, crash=recorded.crash)
        if actual != recorded:
            return (
                f"step {index} (c={recorded.c}, budget {recorded.budget}): recorded "
                f"{recorded.to_dict()}, replayed {actual.to_dict()}"
            )
        c = actual.end
    return None
