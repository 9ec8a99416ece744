"""A trajectory of one request under a sequence of budgets (SPEC S3, S4)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chunkproof.model.config import Config
from chunkproof.model.errors import ConfigError
from chunkproof.model.policy import Policy
from chunkproof.model.step import Step, step


@dataclass(frozen=True)
class Trajectory:
    """The steps a request takes, and whether it finished or got stuck.

    ``stuck`` means a step yielded 0 with the budget that repeats forever: c, T and the flags
    no longer change, so every later step yields 0 as well (SPEC P1); ``unsafe`` means the last
    step broke SPEC P0 (the code raised, or a stage left [0, its input]).
    """

    steps: tuple[Step, ...]
    finished: bool

    @property
    def outcome(self) -> str:
        if self.finished:
            return "finished"
        return "unsafe" if self.steps and self.steps[-1].unsafe is not None else "stuck"

    @property
    def stuck_at(self) -> int | None:
        return None if self.finished else self.steps[-1].c

    @property
    def chunks(self) -> list[int]:
        """Chunk lengths of the steps that scheduled tokens."""
        return [s.chunk for s in self.steps if s.chunk > 0 and s.unsafe is None]

    @property
    def ends(self) -> list[int]:
        """Chunk ends of the steps that scheduled tokens."""
        return [s.end for s in self.steps if s.chunk > 0 and s.unsafe is None]

    @property
    def scheduled_steps(self) -> int:
        """Steps taken until the prefill finished, zero steps included (SPEC P7)."""
        return len(self.steps)


def run(policy: Policy, cfg: Config, budgets: Sequence[int]) -> Trajectory:
    """Run from ``cfg.start`` until c >= E or the request is stuck.

    Budgets are offered in order and the last one repeats: ``[b]`` is ``const(b)``. A step
    that breaks SPEC P0 ends the run (in vLLM the engine core is down).
    """
    if not budgets or any(b < 1 for b in budgets):
        raise ConfigError("budgets must be positive integers")
    c, steps = cfg.start, list[Step]()
    while c < cfg.prefill_end:
        index = len(steps)
        s = step(policy, cfg, c, budgets[min(index, len(budgets) - 1)])
        steps.append(s)
        if s.unsafe is not None or (s.chunk <= 0 and index >= len(budgets) - 1):
            return Trajectory(tuple(steps), finished=False)
        c = s.end
    return Trajectory(tuple(steps), finished=True)
