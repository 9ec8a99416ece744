"""A policy: named stages composed in the order of a release's ``schedule()`` (SPEC S3)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from chunkproof.model.acceptance import Rule
from chunkproof.model.config import Config
from chunkproof.model.subset import SubsetFunction, Value, parse

StageFunction = Callable[[Config, int, int], int]
"""A subset function ``(cfg, c, n) -> n``."""

STAGE_NAMES = ("cap", "split", "encoder", "reservation")
"""Stage names, as they appear in a trace step (SPEC C)."""

FIXED_INPUTS = {
    "defer_prefills": "no prefill is deferred: schedule(throttle_prefills=False) (no DP "
    "prefill balancing) and prefill_schedule_interval 1 (no local prefill cadence, 0.33)",
    "load_kv_async": "external KV hits load synchronously (no asynchronous KV load)",
    "pad_spec_decode": "no decode padding of an admission with one token left",
    "max_model_len": "no max_model_len cap",
}
"""The inputs of ``schedule()`` and of the engine that SPEC S3's step fixes, and at which
value, keyed by the name the code reads (every report names them: :attr:`Policy.fixed`)."""


class StageSource(Protocol):
    """A stage defined by other code than a subset function ``(cfg, c, n)``: a real vLLM
    method (:class:`chunkproof.model.vllm_source.MethodStage`)."""

    def subset(self) -> SubsetFunction:
        """The syntax tree the interpreter runs."""

    def arguments(self, cfg: Any, c: Value, n: Value) -> list[Value]:
        """Its arguments for config ``cfg``, state ``c`` and input ``n`` (any value domain)."""


@dataclass(frozen=True)
class Stage:
    """One cap of the composition: a name from :data:`STAGE_NAMES`, its native form
    ``function`` and, when that is not itself a subset function ``(cfg, c, n)``, the
    ``source`` the interpreter runs instead (one definition: the native form is compiled from
    the same syntax tree)."""

    name: str
    function: StageFunction
    source: StageSource | None = None

    def __post_init__(self) -> None:
        if self.name not in STAGE_NAMES:
            raise ValueError(f"unknown stage name {self.name!r}")

    def subset(self) -> SubsetFunction:
        """The syntax tree the vectorised and symbolic forms interpret."""
        return parse(self.function) if self.source is None else self.source.subset()

    def arguments(self, cfg: Any, c: Value, n: Value) -> list[Value]:
        """The interpreter's arguments for :meth:`subset`: ``[cfg, c, n]`` for a subset
        function."""
        return [cfg, c, n] if self.source is None else self.source.arguments(cfg, c, n)


@dataclass(frozen=True)
class Policy:
    """A chunk policy: ``stages`` run in order; the first receives the offered budget.

    ``acceptance`` lists the start-up checks of the release (SPEC S1b).
    """

    name: str
    summary: str
    stages: tuple[Stage, ...]
    split_variant: str
    reservation_variant: str | None
    composition: str
    releases: tuple[str, ...] = ()
    acceptance: tuple[Rule, ...] = ()
    source_sha256: str | None = None
    options: tuple[str, ...] = ()
    """Command-line options that rebuild this policy from its name (``--compose``, ``--set``)."""
    fixed: tuple[str, ...] = tuple(FIXED_INPUTS.values())
    """What the model fixes of the code it stands for (:data:`FIXED_INPUTS`): all of them for
    a built-in composition, those its ``schedule()`` reads for one read from source."""

    @property
    def file_stem(self) -> str:
        """The policy's name as a folder name under ``--out`` (counterexamples, certificates)."""
        return "".join(ch if ch.isalnum() or ch in "-_.=" else "_" for ch in self.name)

    def accepts(self, cfg: Config) -> str | None:
        """``None`` if the release accepts ``cfg`` at start-up, else why it refuses it."""
        return next((rule.reason for rule in self.acceptance if not rule.holds(cfg)), None)

    def stage(self, name: str) -> Stage | None:
        """The stage called ``name``, if this policy has one."""
        return next((s for s in self.stages if s.name == name), None)
