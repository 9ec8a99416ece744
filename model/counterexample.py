"""Counterexample files (SPEC C): schema, reading (the multi-request schema too), writing, and
step-by-step replay of a single-request trace."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from chunkproof.model.budget import Adversarial, BudgetModel, budget_model_from_dict
from chunkproof.model.config import Config
from chunkproof.model.errors import ChunkproofError
from chunkproof.model.files import printable, read_json
from chunkproof.model.policy import Policy
from chunkproof.model.step import Step, step
from chunkproof.model.system_counterexample import (
    MALFORMED,
    SYSTEM_SCHEMA,
    SYSTEM_SCHEMAS,
    SystemCounterexample,
    recorded_sha256,
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
            "policy": {
                "name": self.policy,
                "source_sha256": self.source_sha256,
                "options": list(self.policy_options),
            },
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
        if data.get("schema") not in READABLE:
            raise ChunkproofError(
                f"not a chunkproof counterexample (schema {data.get('schema')!r},"
                f" expected {SCHEMA!r} or {SYSTEM_SCHEMA!r})"
            )
        if not data.get("trace"):
            raise ChunkproofError("malformed counterexample: the trace is empty")
        try:
            return cls(
                policy=str(data["policy"]["name"]),
                source_sha256=recorded_sha256(data["policy"].get("source_sha256")),
                policy_options=tuple(str(o) for o in data["policy"].get("options", ())),
                config=Config.from_dict(data["config"]),
                budget_model=budget_model_from_dict(data["budget_model"]),
                property=str(data["property"]),
                steps=tuple(Step.from_dict(s) for s in data["trace"]),
                verdict=printable(str(data["verdict"])),
                minimised=tuple(str(name) for name in data.get("minimised", ())),
                details=dict(data.get("details", {})),
            )
        except MALFORMED as exc:
            raise ChunkproofError(f"malformed counterexample: missing or bad field {exc}") from None

    def save(self, path: Path) -> Path:
        """Write the file (SPEC C); a folder that cannot be written is bad input."""
        return write_file(path, self.to_dict())

    @classmethod
    def load(cls, path: Path) -> Counterexample:
        return cls.from_dict(_read(path))


def write_file(path: Path, document: dict[str, Any]) -> Path:
    """Write a counterexample document as JSON; a folder that cannot be written is bad input."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=2) + "\n")
    except OSError as exc:
        raise ChunkproofError(f"{path}: cannot write: {exc.strerror}") from None
    return path


def _read(path: Path) -> dict[str, Any]:
    """The JSON object of a counterexample file (:func:`~chunkproof.model.files.read_json`:
    a regular file of bounded size, UTF-8, bounded nesting and numbers)."""
    data = read_json(Path(path), "counterexample file")
    if not isinstance(data, dict):
        raise ChunkproofError(f"{path}: not a chunkproof counterexample")
    return data


def load_any(path: Path) -> Counterexample | SystemCounterexample:
    """A counterexample file of any schema this version reads: a multi-request one
    (:data:`SYSTEM_SCHEMAS`) or a single-request one (:data:`READABLE`); any other schema is
    a one-line error."""
    data = _read(path)
    if data.get("schema") in SYSTEM_SCHEMAS:
        return SystemCounterexample.from_dict(data)
    return Counterexample.from_dict(data)


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
