"""The progress line: shown only on a terminal, and a later stage of a run shown at once under
its own label, its time left counted from its start."""

from __future__ import annotations

import io

from chunkproof.checker.reports.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_later_stage_replaces_the_line_at_once() -> None:
    screen = Terminal()
    progress = Progress("proving p", stream=screen, delay=0.0)
    progress.tick(2, 2)
    stage = progress.stage("least counterexamples of p")
    assert "least" not in screen.getvalue()  # nothing until the stage begins
    progress.delay = 3600.0  # the stage shows even where the run's own delay would not
    stage(1, 4)
    shown = screen.getvalue()
    first, cleared, second = shown.partition("\r" + " " * 100 + "\r")
    assert "proving p [" in first and "2/2" in first and cleared
    assert second.startswith("\rleast counterexamples of p [") and "1/4" in second
    progress.close()


def test_nothing_is_shown_off_a_terminal() -> None:
    screen = io.StringIO()
    progress = Progress("proving p", stream=screen, delay=0.0)
    progress.stage("least counterexamples of p")(1, 4)
    progress.tick(1, 2)
    progress.close()
    assert screen.getvalue() == ""
