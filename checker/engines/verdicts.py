"""A property's verdict over a stated range (SPEC P): PROVED (a solver's unsat or a complete
enumeration), VIOLATED (with a counterexample), UNKNOWN (a resource limit: never a pass), and
EMPTY (no configuration in scope: never PROVED)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chunkproof.model.counterexample import Counterexample
from chunkproof.spec.properties import CONNECTOR, PROPERTIES

PROVED, VIOLATED, UNKNOWN, EMPTY = "PROVED", "VIOLATED", "UNKNOWN", "EMPTY"


@dataclass
class Verdict:
    """One property's verdict over a stated range, with its minimal counterexample and the
    picture drawn beside it."""

    property: str
    status: str
    range: dict[str, Any]
    counterexample: str | None
    summary: str
    method: str
    configs: int
    violating: int
    figure: dict[str, Any] | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)
    picture: str | None = None
    witness: Counterexample | None = None
    """The counterexample itself (``counterexample`` is its file, when the run keeps files)."""

    def to_dict(self) -> dict[str, Any]:
        """The verdict as the JSON contract has it; its range also names the KV pool the
        property is judged in and the connector mode (:class:`~chunkproof.spec.properties.
        Property`)."""
        prop = PROPERTIES[self.property]
        return {
            "property": self.property,
            "name": prop.name,
            "status": self.status,
            "range": {**self.range, "pool": prop.pool, "connector": CONNECTOR},
            "counterexample": self.counterexample,
            "picture": self.picture,
            "summary": self.summary,
            "method": self.method,
            "configs": self.configs,
            "violating_configs": self.violating,
            "figure": self.figure,
            "findings": self.findings,
        }
