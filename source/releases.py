"""A per-user cache of the few vLLM source files chunkproof reads from each release.

:func:`release_root` returns ``<cache>/vllm-<version>``, a directory holding only
:data:`ALWAYS_FILES` (those a wheel has) plus every file
:func:`chunkproof.source.methods.source_files` reads, in the wheel's layout (``vllm/...``),
and ``manifest.json`` (version, wheel name and sha256, and each file's sha256). On a miss the
wheel is fetched with ``pip download --no-deps --only-binary=:all:`` into a temporary directory
beside the cache entry, those files are extracted with :mod:`zipfile`, and the wheel is deleted,
so a machine downloads each wheel at most once. An entry whose files no longer match its
manifest, or that was written before a file joined :data:`ALWAYS_FILES`, is fetched again
(once: the fetch holds a per-version lock file, and a run that waited for it finds the entry
complete). vLLM is never imported or installed.

``<cache>`` is ``$CHUNKPROOF_CACHE`` if set, else ``$XDG_CACHE_HOME/chunkproof``, else
``~/.cache/chunkproof``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from chunkproof.model.errors import PolicyError
from chunkproof.source.encoder import ENCODER_FILES
from chunkproof.source.extraction import PACKAGE_INITS, SCHEDULER_FILE
from chunkproof.source.methods import source_files

KV_LOOKUP_FILES = (
    "vllm/v1/core/kv_cache_coordinator.py",
    "vllm/v1/core/single_type_kv_cache_manager.py",
    "vllm/v1/core/kv_cache_manager.py",
    "vllm/v1/core/kv_cache_utils.py",
)
"""The cache manager's files: the prefix-cache lookup and the state retention a resend meets
(SPEC KV1; the slot note's sections 3 and 5), read by the fidelity tests. A release without
one of them records it ``absent``."""

ALWAYS_FILES = (
    SCHEDULER_FILE,
    "vllm/v1/kv_cache_interface.py",
    "vllm/utils/math_utils.py",
    *KV_LOOKUP_FILES,
    *PACKAGE_INITS,
    *ENCODER_FILES,
)
"""Files kept from every wheel that has them, whether or not the methods reach them: the
split's, the package ``__init__`` files Python runs to import it (SPEC Q2: they could patch
the class), those the encoder scheduling reads
(:data:`chunkproof.source.encoder.ENCODER_FILES`, about 80 KB) and the cache manager's
(:data:`KV_LOOKUP_FILES`)."""

MANIFEST = "manifest.json"
_VERSION = re.compile(r"^\d+\.\d+\.\d+$", re.ASCII)


def cache_dir() -> Path:
    """The cache directory (module docstring)."""
    if os.environ.get("CHUNKPROOF_CACHE"):
        return Path(os.environ["CHUNKPROOF_CACHE"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "chunkproof"
    return Path.home() / ".cache" / "chunkproof"


def release_root(version: str) -> Path:
    """The cached source root of vLLM ``version`` (``X.Y.Z``), fetched once on a miss."""
    if not _VERSION.fullmatch(version):
        raise PolicyError(f"invalid vLLM version {version!r}: expected X.Y.Z, such as 0.33.0")
    root = cache_dir() / f"vllm-{version}"
    if _is_complete(root):
        return root
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PolicyError(
            f"the release cache {root.parent} cannot be created ({exc.strerror}); "
            "set CHUNKPROOF_CACHE to a folder"
        ) from None
    with _locked(root.parent / f".vllm-{version}.lock"):
        if _is_complete(root):  # fetched by a concurrent run while this one waited
            return root
        with tempfile.TemporaryDirectory(dir=root.parent, prefix=f".vllm-{version}-") as tmp:
            wheel = _download(version, Path(tmp))
            staging = Path(tmp) / "tree"
            _extract(wheel, staging, version)
            wheel.unlink()
            _install(staging, root)
    return root


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if absent) for the block: one fetch of a
    release at a time on this machine (module docstring)."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _is_complete(root: Path) -> bool:
    """Whether ``root`` has a manifest and every file it lists, with the listed sha256, and the
    manifest accounts for every file of :data:`ALWAYS_FILES` (kept, or ``absent`` from the
    wheel): an entry written before a file joined the list is fetched again."""
    try:
        manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
        files: dict[str, str] = manifest["files"]
        absent = set(manifest.get("absent", []))
        if not set(ALWAYS_FILES) <= set(files) | absent:
            return False
        return all(_sha256((root / rel).read_bytes()) == digest for rel, digest in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _download(version: str, into: Path) -> Path:
    """Fetch the ``vllm==version`` wheel into ``into`` with pip; the wheel's path."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--no-cache-dir",
        "--quiet",
        f"vllm=={version}",
        "-d",
        str(into),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"pip exited with status {done.returncode}"
        raise PolicyError(f"cannot download vllm=={version}: {reason}")
    wheels = sorted(into.glob("vllm-*.whl"))
    if len(wheels) != 1:
        raise PolicyError(f"cannot download vllm=={version}: pip left {len(wheels)} wheels")
    return wheels[0]


@dataclass(frozen=True)
class _WheelTree:
    """A wheel's members as a :class:`~chunkproof.source.methods.SourceTree`."""

    wheel: zipfile.ZipFile
    name: str

    def read(self, rel: str) -> str | None:
        """The member's text, or ``None`` if the wheel has no such member."""
        try:
            return self.wheel.read(rel).decode("utf-8")
        except KeyError:
            return None

    def label(self, rel: str) -> str:
        """``<wheel>/<member>``."""
        return f"{self.name}/{rel}"


def _extract(wheel: Path, into: Path, version: str) -> None:
    """Write the needed members of ``wheel`` and the manifest under ``into``."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            tree = _WheelTree(archive, wheel.name)
            present = set(archive.namelist())
            if SCHEDULER_FILE not in present:
                raise PolicyError(f"{wheel.name}: the wheel has no {SCHEDULER_FILE}")
            wanted = sorted(
                {rel for rel in ALWAYS_FILES if rel in present} | set(_reachable_files(tree))
            )
            digests = {rel: _write(into / rel, archive.read(rel)) for rel in wanted}
    except zipfile.BadZipFile as exc:
        raise PolicyError(f"{wheel.name}: not a readable wheel: {exc}") from None
    manifest = {
        "version": version,
        "wheel": wheel.name,
        "wheel_sha256": _file_sha256(wheel),
        "files": digests,
        "absent": sorted(rel for rel in ALWAYS_FILES if rel not in present),
    }
    (into / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def _reachable_files(tree: _WheelTree) -> list[str]:
    """The files the extraction reads; none extra when the methods cannot be extracted.

    A release without the methods (before 0.15.0) still gets a cache entry, so that the
    extraction's own error is reported without downloading the wheel again.
    """
    try:
        return source_files(tree)
    except PolicyError:
        return []


def _write(path: Path, data: bytes) -> str:
    """Write ``data`` to ``path``; its sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return _sha256(data)


def _install(staging: Path, root: Path) -> None:
    """Move ``staging`` to ``root``, replacing a stale entry; a concurrent winner is kept."""
    if root.exists() and not _is_complete(root):
        shutil.rmtree(root, ignore_errors=True)
    try:
        staging.rename(root)
    except OSError:
        if not _is_complete(root):
            raise PolicyError(f"cannot write the vLLM source cache {root}") from None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha256(path: Path) -> str:
    """sha256 of a file too large to read at once (a wheel)."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
