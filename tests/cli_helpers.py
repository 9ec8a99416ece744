"""Run the CLI in-process and capture what a user would see."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass
class CliRun:
    """Exit status, standard output and standard error of one CLI run."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


class Cli(Protocol):
    """``cli("trace", "vllm-0.33", ...)`` -> :class:`CliRun`."""

    def __call__(self, *argv: str) -> CliRun: ...
