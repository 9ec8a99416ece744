"""What every picture shares, whatever model's trace it draws: the colours, the suffixes a
picture may have, matplotlib's settings, a figure with no display, and writing it.

matplotlib is imported only inside these functions (a bare ``Figure`` renders through Agg for
PNG and through the SVG backend for SVG), so the CLI starts fast.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from chunkproof.model.errors import ChunkproofError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PICTURE_SUFFIXES = (".svg", ".png")

RED = "#c92a2a"
BAR = "#4c6ef5"
POSITION = "#2b8a3e"
WINDOW = "#ffc078"
ADMITTED = "#dee2e6"
HALO = {"boxstyle": "round,pad=0.15", "facecolor": "white", "alpha": 0.85, "edgecolor": "none"}
"""A white background that keeps red text readable over lines and shading."""


def check_picture_suffix(path: Path, flag: str) -> None:
    """A picture is an .svg or a .png file; anything else is a one-line error."""
    if path.suffix.lower() not in PICTURE_SUFFIXES:
        raise ChunkproofError(
            f"{flag} {path}: a picture is written as .svg or .png (by its suffix)"
        )


@contextmanager
def picture_style() -> Iterator[None]:
    """matplotlib settings of every picture: SVG text stays text (searchable, greppable)."""
    import matplotlib

    with matplotlib.rc_context({"svg.fonttype": "none", "font.size": 9}):
        yield


def new_figure(width: float, height: float) -> Figure:
    """A figure that is not attached to any display (no pyplot, no GUI backend)."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def save_figure(fig: Figure, path: Path) -> None:
    """Write ``fig`` as .svg or .png (by the suffix); an unwritable path is a one-line error."""
    check_picture_suffix(path, "picture")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format=path.suffix.lower()[1:], dpi=150)
    except OSError as exc:
        raise ChunkproofError(f"{path}: cannot write the picture ({exc.strerror})") from None
