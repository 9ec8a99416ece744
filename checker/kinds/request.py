"""The single-request model's counterexamples (SPEC C): one request's trace of SPEC C stage
values under the budgets the environment offered, judged by P0-P8."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from chunkproof.checker.engines.traces import describe, violates
from chunkproof.checker.reports.graph_picture import save_graph
from chunkproof.checker.reports.request_picture import save_picture
from chunkproof.checker.repro.requests import repro_source
from chunkproof.checker.repro.vllm_style import vllm_repro_source
from chunkproof.model.counterexample import FORMAT, Counterexample, replay_steps
from chunkproof.model.files import printable
from chunkproof.model.policy import Policy
from chunkproof.model.trace_file import TraceFile, TraceFormat
from chunkproof.spec.properties import PROPERTIES


def _mine(cx: TraceFile) -> Counterexample:
    assert isinstance(cx, Counterexample), type(cx)
    return cx


@dataclass(frozen=True)
class RequestKind:
    """One request's counterexamples (:class:`~chunkproof.checker.kinds.TraceKind`)."""

    format: TraceFormat = FORMAT
    properties: tuple[str, ...] = tuple(PROPERTIES)

    def owns(self, cx: TraceFile) -> bool:
        return isinstance(cx, Counterexample)

    def replay(self, policy: Policy, cx: TraceFile) -> str | None:
        """Every recorded step re-run (:func:`~chunkproof.model.counterexample.replay_steps`),
        then the last one judged again by the file's property under its window and budgets."""
        mine = _mine(cx)
        difference = replay_steps(policy, mine)
        if difference is None and not violates(
            mine.property,
            mine.config,
            mine.steps[-1],
            mine.window(),
            mine.largest_budget(),
            policy=policy,
        ):
            difference = f"the last step no longer breaks {mine.property}"
        return difference

    def replayed_words(self, cx: TraceFile) -> str:
        """The verdict in the tool's own words, from the last step (not the file's text)."""
        mine = _mine(cx)
        return printable(describe(mine.property, mine.config, mine.steps[-1], mine.details))

    def draw(self, cx: TraceFile, policy: Callable[[], Policy], path: Path) -> Path:
        return save_picture(_mine(cx), policy(), path)

    def graph(self, cx: TraceFile, policy: Callable[[], Policy], path: Path) -> Path:
        return save_graph(policy(), _mine(cx), path)

    def repro_source(self, cx: TraceFile, source_name: str, style: str) -> str:
        make = vllm_repro_source if style == "vllm" else repro_source
        return make(_mine(cx), source_name)


REQUEST = RequestKind()
