"""Progress on standard error: a bar on a terminal, cleared when the run ends; periodic lines
elsewhere (a CI log), so a long run is never silent; nothing under ``--json``; a later stage of
a run shown at once under its own label, its time left counted from its start."""

from __future__ import annotations

import io

from chunkproof.checker.reports.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_shows_a_bar_that_the_end_clears() -> None:
    screen = Terminal()
    progress = Progress("proving p", stream=screen, delay=0.0)
    progress.tick(1, 4)
    drawn = screen.getvalue()
    assert "proving p" in drawn and "1/4" in drawn and "\n" not in drawn.rstrip("\n")
    progress.close()
    cleared = screen.getvalue()[len(drawn) :]
    assert cleared.startswith("\r") and cleared.endswith("\r") and not cleared.strip()


def test_a_later_stage_is_shown_at_once_under_its_label() -> None:
    screen = Terminal()
    progress = Progress("proving p", stream=screen, delay=0.0)
    progress.tick(2, 2)
    stage = progress.stage("least counterexamples of p")
    assert "least" not in screen.getvalue()  # nothing until the stage begins
    progress.delay = 3600.0  # the stage shows even where the run's own delay would not
    stage(1, 4)
    shown = screen.getvalue()
    assert "proving p" in shown and "2/2" in shown
    assert shown.index("least counterexamples of p") > shown.index("2/2") and "1/4" in shown
    progress.close()


def test_off_a_terminal_it_logs_a_line_per_interval() -> None:
    """Every tick at least ``interval`` after the last line writes one whole line (no carriage
    return); ticks in between write nothing; a stage logs its first tick at once."""
    log = io.StringIO()
    progress = Progress("proving p", stream=log, delay=0.0, interval=0.0)
    progress.tick(1, 4)
    progress.tick(2, 4)
    progress.stage("least counterexamples of p")(1, 3)
    progress.close()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and len(lines) == 3
    assert lines[0].startswith("proving p: 1/4 done in ") and "left" in lines[0]
    assert lines[1].startswith("proving p: 2/4") and lines[2].startswith("least counterexamples")
    quiet = io.StringIO()
    spaced = Progress("proving p", stream=quiet, delay=0.0, interval=3600.0)
    for done in range(1, 5):
        spaced.tick(done, 4)
    assert len(quiet.getvalue().splitlines()) == 1


def test_nothing_is_shown_when_disabled_or_before_the_delay() -> None:
    for progress in (
        Progress("proving p", stream=io.StringIO(), delay=0.0, enabled=False),
        Progress("proving p", stream=io.StringIO(), delay=3600.0),
        Progress("proving p", stream=Terminal(), delay=3600.0),
    ):
        progress.tick(1, 2)
        progress.close()
        assert isinstance(progress.stream, io.StringIO) and progress.stream.getvalue() == ""


def test_a_line_estimates_the_time_left_from_the_items_after_the_first() -> None:
    """The first item carries the start-up: with one item done the time left is unknown, and
    then it is the items left at the rate since the first was done, not since the start."""
    log = io.StringIO()
    progress = Progress("conform", stream=log, delay=0.0, interval=0.0)
    progress.started -= 600.0  # the first item took ten minutes
    progress.tick(1, 101)
    first_tick = progress.first
    assert first_tick is not None
    progress.first = (first_tick[0] - 10.0, 1)  # ... and the next 50 took ten seconds
    progress.tick(51, 101)
    lines = log.getvalue().splitlines()
    assert lines[0].endswith("about ? left"), lines[0]
    assert lines[1].endswith("about 00:10 left"), lines[1]
