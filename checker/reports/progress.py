"""Progress on standard error (cells proved, configurations explored, the least counterexamples'
search, time left), shown only on a terminal, only for runs longer than a second, and never
under ``--json``."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


class Progress:
    """Call :meth:`tick` with (done, total); call :meth:`close` when the run ends."""

    def __init__(
        self,
        label: str,
        stream: TextIO | None = None,
        delay: float = 1.0,
        enabled: bool = True,
    ) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.delay = delay
        self.started = time.monotonic()
        self.shown = False
        self.enabled = enabled and self.stream.isatty()

    def tick(self, done: int, total: int) -> None:
        elapsed = time.monotonic() - self.started
        if not self.enabled or elapsed < self.delay:
            return
        width = 30
        filled = width * done // max(total, 1)
        bar = "#" * filled + "." * (width - filled)
        left = elapsed * (total - done) / done if done else 0.0
        self.stream.write(
            f"\r{self.label} [{bar}] {done}/{total} {elapsed:5.1f}s, about {left:5.1f}s left"
        )
        self.stream.flush()
        self.shown = True

    def stage(self, label: str) -> Callable[[int, int], None]:
        """A :meth:`tick` for a later stage of the run, shown as ``label`` from its first call
        on, at once, its time left estimated from that call."""
        begun = False

        def tick(done: int, total: int) -> None:
            nonlocal begun
            if not begun:
                begun = True
                self.close()
                self.label, self.delay, self.started = label, 0.0, time.monotonic()
            self.tick(done, total)

        return tick

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r" + " " * 100 + "\r")
            self.stream.flush()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started
