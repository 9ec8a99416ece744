"""The ``--out`` folder: one run's files, written so that no reader sees a mix of runs.

A run takes an exclusive lock on ``OUT/.lock`` (a second run on the same folder stops with a
one-line error instead of mixing files), writes everything into a staging folder
``OUT/.staging-<pid>/<policy>/`` (counterexamples and pictures, certificates under
``certificates/``), and when the run completes, replaces each ``OUT/<policy>/`` by its staged
folder with renames. An interrupted run removes its staging folder and leaves the previous
complete run in place; a completed run never leaves an older run's files beside its own. The
paths a report names are the final ones (:meth:`RunFolder.final`), and the run lists every
file it wrote (:attr:`RunFolder.written`).
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from chunkproof.model.errors import ChunkproofError

LOCK = ".lock"
CERTIFICATES = "certificates"


class RunFolder:
    """The files of one run under ``root`` (module docstring)."""

    def __init__(self, root: Path, prefix: str = "") -> None:
        self.root = root
        self.staging = root / f".staging-{os.getpid()}"
        self.written: list[Path] = []
        self.policies: set[str] = set()
        self.prefix = prefix

    def within(self, prefix: str) -> RunFolder:
        """The same run, with every policy folder named ``<prefix>-<policy>`` (compare's two
        sides when both policies have the same folder name)."""
        child = RunFolder(self.root, prefix)
        child.written, child.policies = self.written, self.policies
        return child

    def _folder(self, stem: str) -> str:
        folder = f"{self.prefix}-{stem}" if self.prefix else stem
        self.policies.add(folder)
        return folder

    def path(self, stem: str, name: str) -> Path:
        """Where to write file ``name`` of policy folder ``stem`` now (in staging)."""
        target = self.staging / self._folder(stem) / name
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def certificates(self, stem: str) -> Path:
        """The staging folder of policy ``stem``'s certificates."""
        folder = self.staging / self._folder(stem) / CERTIFICATES
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def final(self, staged: Path) -> Path:
        """The path a staged file will have once the run completes."""
        return self.root / staged.relative_to(self.staging)

    def record(self, staged: Path) -> str:
        """Note a written file; its final path, as a report names it."""
        final = self.final(staged)
        self.written.append(final)
        return str(final)

    def commit(self) -> None:
        """Replace each policy folder of the run by its staged one. A folder that is another
        run's ``--out`` (it holds a lock file, its own or deeper) is never replaced: the run
        stops with an error instead of deleting that run's files."""
        targets = [self.root / stem for stem in sorted(self.policies)]
        for target in targets:
            _refuse_other_runs(target)
        for target in targets:
            staged = self.staging / target.name
            if not staged.exists():
                staged.mkdir(parents=True)
            retired = self.root / f".retired-{os.getpid()}-{target.name}"
            if target.exists():
                with _held(target):
                    target.rename(retired)
            staged.rename(target)
            shutil.rmtree(retired, ignore_errors=True)
        shutil.rmtree(self.staging, ignore_errors=True)

    def abandon(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


@contextmanager
def run_folder(root: Path) -> Iterator[RunFolder]:
    """A :class:`RunFolder` under ``root``, locked for the run, committed when the block ends
    normally and abandoned otherwise."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock: IO[str] = (root / LOCK).open("a")
    except OSError as exc:
        raise ChunkproofError(f"--out {root}: cannot write there: {exc.strerror}") from None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise ChunkproofError(
                f"--out {root}: another chunkproof run is writing there; use another --out"
            ) from None
        _clear_leftovers(root)
        folder = RunFolder(root)
        try:
            yield folder
        except BaseException:
            folder.abandon()
            raise
        try:
            folder.commit()
        except ChunkproofError:
            folder.abandon()
            raise
        except OSError as exc:
            folder.abandon()
            raise ChunkproofError(f"--out {root}: cannot write there: {exc.strerror}") from None


def _clear_leftovers(root: Path) -> None:
    """Staging and retired folders of runs that were killed (the lock proves none is alive)."""
    for entry in root.iterdir():
        if entry.name.startswith((".staging-", ".retired-")):
            shutil.rmtree(entry, ignore_errors=True)


def _refuse_other_runs(target: Path) -> None:
    """:class:`ChunkproofError` when ``target`` is, or holds, the ``--out`` folder of another
    run (a lock file in it or below)."""
    if not target.is_dir():
        return
    lock = next(target.rglob(LOCK), None)
    if lock is not None:
        raise ChunkproofError(
            f"--out {target.parent}: {lock.parent} is another run's --out folder; it is not "
            "replaced (use --out folders that do not nest)"
        )


@contextmanager
def _held(target: Path) -> Iterator[None]:
    """An exclusive lock on ``target``'s lock file while the run moves it away: a run that
    starts in it meanwhile stops (or, holding it first, this one does)."""
    path = target / LOCK
    with path.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise ChunkproofError(
                f"--out {target.parent}: another run writes in {target}; it is not replaced"
            ) from None
        try:
            yield
        except BaseException:
            path.unlink(missing_ok=True)  # the folder stays: no lock file of this run in it
            raise
