"""Progress on standard error (cells proved, configurations explored, the least counterexamples'
search, time left), for runs longer than a second and never under ``--json``: on a terminal a
``tqdm`` bar that clears itself; elsewhere (a CI log, a pipe) one line every
:data:`LOG_INTERVAL` seconds, so a long run is never silent.

A line's time left is the items left at the rate since the first item was done: the first
item carries the run's start-up (a solver context, the first batch's tables), and one slow
cell of many would otherwise set the estimate; with one item done it is ``?``. The bar's is
``tqdm``'s own, redrawn as it goes."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from tqdm import tqdm

LOG_INTERVAL = 30.0
"""Seconds between two progress lines off a terminal."""

LINE_FORMAT = "{desc}: {n}/{total} done in {elapsed}, about {remaining} left"
"""A progress line off a terminal (``tqdm``'s meter fields)."""

BAR_FORMAT = "{desc} |{bar}| {n}/{total} [{elapsed}, about {remaining} left]"
"""The terminal bar."""


class Progress:
    """Call :meth:`tick` with (done, total); call :meth:`close` when the run ends."""

    def __init__(
        self,
        label: str,
        stream: TextIO | None = None,
        delay: float = 1.0,
        enabled: bool = True,
        interval: float = LOG_INTERVAL,
    ) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.delay = delay
        self.interval = interval
        self.started = time.monotonic()
        self.enabled = enabled
        self.terminal = self.stream.isatty()
        self.bar: tqdm[Any] | None = None
        self.logged: float | None = None
        self.first: tuple[float, int] | None = None
        """(elapsed, done) at the first tick with an item done."""

    def rate(self, done: int, elapsed: float) -> float:
        """Items per second since the first item was done (module docstring); 0 (time left
        unknown) before a second one."""
        if self.first is None:
            if done > 0:
                self.first = (elapsed, done)
            return 0.0
        since, counted = self.first
        return (done - counted) / (elapsed - since) if elapsed > since else 0.0

    def tick(self, done: int, total: int) -> None:
        elapsed = time.monotonic() - self.started
        rate = self.rate(done, elapsed)
        if not self.enabled or elapsed < self.delay:
            return
        if self.terminal:
            self._draw(done, total)
        elif self.logged is None or elapsed - self.logged >= self.interval:
            self.logged = elapsed
            line = tqdm.format_meter(
                done, total, elapsed, prefix=self.label, bar_format=LINE_FORMAT, rate=rate
            )
            self.stream.write(line + "\n")
            self.stream.flush()

    def _draw(self, done: int, total: int) -> None:
        """The terminal bar at ``done`` of ``total``, timed from the run's (or stage's) start."""
        bar = self.bar
        if bar is None:
            bar = tqdm(
                total=total, desc=self.label, file=self.stream, leave=False, bar_format=BAR_FORMAT
            )
            bar.start_t = time.time() - (time.monotonic() - self.started)
            self.bar = bar
        bar.total = total
        bar.n = done
        bar.refresh()

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
                self.logged = self.first = None
            self.tick(done, total)

        return tick

    def close(self) -> None:
        """Clear the terminal bar (a log keeps its lines)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started
