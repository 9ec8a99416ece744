"""The ``--out`` folder: each run's files, written so that no reader sees a mix of runs and no
run deletes another run's results.

A run takes an exclusive lock on ``OUT/.lock`` (a second run on the same folder stops with a
one-line error instead of mixing files), writes everything into a staging folder
``OUT/.staging-<pid>/<policy>/`` (counterexamples and pictures, certificates under
``certificates/``), and when the run completes, replaces each ``OUT/<policy>/`` by a new folder
with renames: its own staged files, and every file of the old folder that another run wrote
(hard links). A run is known by its identity (the command and every option that decides its
results, :func:`run_folder`); ``OUT/.manifests/<policy>.json`` lists, per identity, the files
its last run left there. The files an earlier run of the same identity wrote and this one did
not are dropped (a repeated run leaves no stale file), unless another run's entry lists them
too; a file two runs write is the later run's, and stays listed by both. So every path a run
printed still exists after any other run. An interrupted run removes its staging folder and
leaves the folder as it was. The paths a report names are the final ones
(:meth:`RunFolder.final`), and the run lists every file it wrote (:attr:`RunFolder.written`).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from chunkproof.model.errors import ChunkproofError
from chunkproof.model.trace_file import TraceFile, write_file

LOCK = ".lock"
CERTIFICATES = "certificates"
MANIFESTS = ".manifests"
DEFAULT_RUN = "run"


class RunFolder:
    """The files of one run under ``root`` (module docstring)."""

    def __init__(self, root: Path, prefix: str = "", identity: str = DEFAULT_RUN) -> None:
        self.root = root
        self.staging = root / f".staging-{os.getpid()}"
        self.written: list[Path] = []
        self.policies: set[str] = set()
        self.prefix = prefix
        self.identity = identity

    def within(self, prefix: str) -> RunFolder:
        """The same run, with every policy folder named ``<prefix>-<policy>`` (compare's two
        sides when both policies have the same folder name)."""
        child = RunFolder(self.root, prefix, self.identity)
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

    def save_counterexample(
        self, cx: TraceFile, stem: str, name: str, draw: Callable[[Path], Path]
    ) -> tuple[str, str]:
        """Write counterexample ``cx`` of any model as ``name.json`` into policy folder
        ``stem`` and its picture beside it (``draw`` writes it at the path it is given, with
        the suffix .svg); their final paths."""
        staged = self.path(stem, f"{name}.json")
        write_file(staged, cx.to_dict())
        return self.record(staged), self.record(draw(staged.with_suffix(".svg")))

    def commit(self) -> None:
        """Replace each policy folder of the run by its staged one merged with the files of
        other runs (module docstring); a folder an earlier run of this identity wrote in is
        among them even when this run writes nothing there (its stale files go). A folder that
        is another run's ``--out`` (it holds a lock file, its own or deeper) is never replaced:
        the run stops with an error instead of deleting that run's files."""
        folders = self.policies | _folders_of(self.root, self.identity)
        targets = [self.root / stem for stem in sorted(folders)]
        for target in targets:
            _refuse_other_runs(target)
        for target in targets:
            self._commit_folder(target)
        shutil.rmtree(self.staging, ignore_errors=True)

    def _commit_folder(self, target: Path) -> None:
        """One policy folder: the staged files, the kept files of other runs linked in beside
        them, the whole swapped in with two renames, then its manifest."""
        staged = self.staging / target.name
        staged.mkdir(parents=True, exist_ok=True)
        mine = _files(staged)
        manifest = _read_manifest(self.root, target.name)
        retired = self.root / f".retired-{os.getpid()}-{target.name}"
        if target.exists():
            with _held(target):
                for name in _kept(_files(target), mine, manifest, self.identity):
                    _link(target / name, staged / name)
                target.rename(retired)
        staged.rename(target)
        shutil.rmtree(retired, ignore_errors=True)
        present = set(_files(target))
        entries = {run: [f for f in files if f in present] for run, files in manifest.items()}
        entries[self.identity] = sorted(mine)
        _write_manifest(self.root, target.name, {run: f for run, f in entries.items() if f})

    def abandon(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


@contextmanager
def run_folder(root: Path, identity: str = DEFAULT_RUN) -> Iterator[RunFolder]:
    """A :class:`RunFolder` under ``root``, locked for the run, committed when the block ends
    normally and abandoned otherwise. ``identity`` names the run (the command and the options
    that decide its results): a later run of the same identity replaces its files, a run of
    another identity keeps them (module docstring)."""
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
        folder = RunFolder(root, identity=identity)
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


def _files(folder: Path) -> list[str]:
    """Every file under ``folder`` (its lock file aside), as paths relative to it."""
    return sorted(
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*")
        if path.is_file() and path.name != LOCK
    )


def _kept(
    present: list[str], mine: list[str], manifest: dict[str, list[str]], identity: str
) -> list[str]:
    """The files of the old folder the new one keeps: every file this run does not write,
    except those only this run's identity wrote before (its stale files). A file no entry
    lists (a folder written before manifests) is kept: no run is known to own it."""
    own = set(manifest.get(identity, ()))
    others = {name for run, files in manifest.items() if run != identity for name in files}
    written = set(mine)
    return [name for name in present if name not in written and (name not in own or name in others)]


def _folders_of(root: Path, identity: str) -> set[str]:
    """The policy folders whose manifest lists files of ``identity``."""
    folder = root / MANIFESTS
    if not folder.is_dir():
        return set()
    return {
        path.stem
        for path in folder.glob("*.json")
        if not path.name.startswith(".") and identity in _read_manifest(root, path.stem)
    }


def _link(source: Path, target: Path) -> None:
    """``target`` as a second name of ``source`` (a copy where links are not supported)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _manifest_path(root: Path, folder: str) -> Path:
    return root / MANIFESTS / f"{folder}.json"


def _read_manifest(root: Path, folder: str) -> dict[str, list[str]]:
    """Per run identity, the files it left in ``folder``; an unreadable manifest lists none
    (every file is then kept)."""
    try:
        document = json.loads(_manifest_path(root, folder).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(document, dict):
        return {}
    return {
        str(run): [str(name) for name in files]
        for run, files in document.items()
        if isinstance(files, list)
    }


def _write_manifest(root: Path, folder: str, entries: dict[str, list[str]]) -> None:
    """Replace the manifest of ``folder`` with a rename (never half written)."""
    path = _manifest_path(root, folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_name(f".{path.name}.{os.getpid()}")
    staged.write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n")
    staged.rename(path)


def _clear_leftovers(root: Path) -> None:
    """Staging and retired folders, and half-written manifests, of runs that were killed (the
    lock proves none is alive)."""
    for entry in root.iterdir():
        if entry.name.startswith((".staging-", ".retired-")):
            shutil.rmtree(entry, ignore_errors=True)
    manifests = root / MANIFESTS
    if manifests.is_dir():
        for entry in manifests.glob(".*"):
            entry.unlink(missing_ok=True)


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
