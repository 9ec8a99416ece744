"""A policy: named stages composed in the order of a release's ``schedule()`` (SPEC S3)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from chunkproof.model.acceptance import Rule
from chunkproof.model.config import Config

StageFunction = Callable[[Config, int, int], int]
"""A subset function ``(cfg, c, n) -> n``."""

STAGE_NAMES = ("cap", "split", "encoder", "reservation")
"""Stage names, as they appear in a trace step (SPEC C)."""


@dataclass(frozen=True)
class Stage:
    """One cap of the composition: a name from :data:`STAGE_NAMES` and its subset function."""

    name: str
    function: StageFunction

    def __post_init__(self) -> None:
        if self.name not in STAGE_NAMES:
            raise ValueError(f"unknown stage name {self.name!r}")


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

    def accepts(self, cfg: Config) -> str | None:
        """``None`` if the release accepts ``cfg`` at start-up, else why it refuses it."""
        return next((rule.reason for rule in self.acceptance if not rule.holds(cfg)), None)

    def stage(self, name: str) -> Stage | None:
        """The stage called ``name``, if this policy has one."""
        return next((s for s in self.stages if s.name == name), None)
