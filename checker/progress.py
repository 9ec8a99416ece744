"""A progress bar on standard error, shown only for runs longer than a second on a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Call :meth:`tick` with (done, total); call :meth:`close` when the run ends."""

    def __init__(self, label: str, stream: TextIO | None = None, delay: float = 1.0) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.delay = delay
        self.started = time.monotonic()
        self.shown = False
        self.enabled = self.stream.isatty()

    def tick(self, done: int, total: int) -> None:
        elapsed = time.monotonic() - self.started
        if not self.enabled or elapsed < self.delay:
            return
        width = 30
        filled = width * done // max(total, 1)
        bar = "#" * filled + "." * (width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {done}/{total} {elapsed:5.1f}s")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r" + " " * 79 + "\r")
            self.stream.flush()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started
