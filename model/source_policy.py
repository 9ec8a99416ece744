"""Policies made of real vLLM code (SPEC CLI: POLICY forms ``vllm==X.Y.Z``, ``vllm``, a path).

Where the source comes from:

* ``vllm==X.Y.Z``: the release's cached source root (:func:`chunkproof.model.releases.
  release_root`: the wheel is fetched once, only the needed files are kept);
* ``vllm``: the installed distribution, located through :mod:`importlib.metadata` (never
  imported);
* a path to a ``scheduler.py`` (helpers resolve into the tree above its innermost ``vllm``
  directory), or to a directory holding ``vllm/v1/core/sched/scheduler.py`` (a checkout or an
  unpacked wheel).

Composition (SPEC S3): the stages of the built-in variant of the source's release, with the
split and the reservation replaced by the extracted methods. The release is the one named
(``vllm==``), the installed distribution's version, or the version recorded beside the source
(a cache ``manifest.json``, ``vllm/_version.py`` or ``vllm/version.py``, a ``*.dist-info``
``METADATA``); its ``X.Y.Z`` prefix picks the built-in variant. Without a known release the
source decides: with ``_reserve_prefill_lookahead`` the composition of ``vllm-latest`` (C9),
without it that of ``vllm-0.27`` (C4, the last one without a reservation). The reservation
stage is present exactly when the source has the method.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import re
from dataclasses import dataclass
from pathlib import Path

from chunkproof.model.builtin import LATEST, builtin_policies, get_builtin, policy_for_release
from chunkproof.model.errors import PolicyError
from chunkproof.model.extraction import RESERVE_METHOD, SCHEDULER_FILE, SPLIT_METHOD, package_root
from chunkproof.model.policy import Policy, Stage
from chunkproof.model.releases import MANIFEST, release_root
from chunkproof.model.vllm_source import (
    MethodStage,
    Overrides,
    SchedulerMethods,
    load_scheduler,
    parse_overrides,
)

RELEASE_PREFIX = "vllm=="
INSTALLED = "vllm"
WITHOUT_RESERVATION = "vllm-0.27"
"""The built-in composition for a source of unknown release without the reservation."""

_VERSION_FILES = ("vllm/_version.py", "vllm/version.py")
_VERSION_ASSIGNMENT = re.compile(r"^__version__\b.*?=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)
_METADATA_VERSION = re.compile(r"^Version:\s*(\S+)", re.MULTILINE)
_RELEASE = re.compile(r"^(\d+\.\d+\.\d+)")


@dataclass(frozen=True)
class Located:
    """Where a POLICY's ``scheduler.py`` is: the file, the root its imports resolve in, the
    release if known, and the policy name to record (one that resolves to the same source)."""

    name: str
    scheduler: Path
    root: Path
    version: str | None


def names_source(text: str) -> bool:
    """Whether POLICY ``text`` names vLLM source rather than a built-in or ``module:function``:
    ``vllm``, ``vllm==...``, or an existing path."""
    return text == INSTALLED or text.startswith(RELEASE_PREFIX) or Path(text).exists()


def source_policy(text: str, compose: str | None = None, overrides: Overrides = ()) -> Policy:
    """The policy of the vLLM source named by ``text`` (module docstring); ``compose`` (C1 ...
    C9) overrides the detected composition, which also decides whether ``schedule()`` calls
    the reservation (C5 and later); ``overrides`` are the ``--set`` values of inputs the model
    does not have."""
    located = locate(text)
    methods = dataclasses.replace(
        load_scheduler(located.scheduler, located.root), overrides=overrides
    )
    base = composition_policy(compose) if compose else _base_policy(located.version, methods)
    stages = [Stage("split", split := MethodStage(methods, SPLIT_METHOD), split)]
    reserves = methods.has_reservation and base.stage("reservation") is not None
    if reserves:
        stages.append(
            Stage("reservation", reserve := MethodStage(methods, RESERVE_METHOD), reserve)
        )
    cap = base.stage("cap")
    assert cap is not None
    return Policy(
        name=located.name,
        summary=_summary(located, methods, base),
        stages=(cap, *stages),
        split_variant=f"source {SPLIT_METHOD}",
        reservation_variant=f"source {RESERVE_METHOD}" if reserves else None,
        composition=base.composition,
        releases=(located.version,) if located.version else (),
        acceptance=base.acceptance,
        source_sha256=methods.sha256,
        options=_options(compose, overrides),
    )


def _options(compose: str | None, overrides: Overrides) -> tuple[str, ...]:
    """The ``--compose`` and ``--set`` options that rebuild the policy (recorded for replay)."""
    options = ["--compose", compose] if compose else []
    for path, value in overrides:
        options += ["--set", f"{path}={value}"]
    return tuple(options)


def recorded_options(options: tuple[str, ...]) -> tuple[str | None, Overrides]:
    """The inverse of :func:`_options`: ``--compose`` and ``--set`` values from recorded
    options; anything else is a one-line error."""
    compose, sets = None, []
    for flag, value in zip(options[::2], options[1::2], strict=False):
        if flag == "--compose":
            compose = value
        elif flag == "--set":
            sets.append(value)
        else:
            raise PolicyError(f"unknown recorded policy option {flag!r}")
    if len(options) % 2:
        raise PolicyError(f"recorded policy option {options[-1]!r} has no value")
    return compose, parse_overrides(sets)


def locate(text: str) -> Located:
    """The ``scheduler.py`` POLICY ``text`` names (module docstring)."""
    if text.startswith(RELEASE_PREFIX):
        version = text.removeprefix(RELEASE_PREFIX)
        root = release_root(version)
        return Located(text, root / SCHEDULER_FILE, root, version)
    if text == INSTALLED:
        return _installed()
    path = Path(text).resolve()
    if path.is_dir():
        if not (path / SCHEDULER_FILE).is_file():
            raise PolicyError(f"{path}: no {SCHEDULER_FILE} (expected a vLLM checkout or wheel)")
        return Located(str(path), path / SCHEDULER_FILE, path, _recorded_version(path))
    root = package_root(path)
    return Located(str(path), path, root, _recorded_version(root))


def _installed() -> Located:
    """The installed ``vllm`` distribution, found through its metadata (never imported)."""
    try:
        dist = importlib.metadata.distribution(INSTALLED)
    except importlib.metadata.PackageNotFoundError:
        raise PolicyError("policy 'vllm': no installed distribution named vllm") from None
    scheduler = Path(str(dist.locate_file(SCHEDULER_FILE)))
    if not scheduler.is_file():
        raise PolicyError(f"policy 'vllm': the installed vllm has no {scheduler}")
    root = Path(str(dist.locate_file("")))
    return Located(INSTALLED, scheduler, root, dist.version)


def _recorded_version(root: Path) -> str | None:
    """The version recorded beside a source root, if any (module docstring)."""
    manifest = root / MANIFEST
    if manifest.is_file():
        return str(json.loads(manifest.read_text(encoding="utf-8")).get("version")) or None
    for rel in _VERSION_FILES:
        if (root / rel).is_file():
            found = _VERSION_ASSIGNMENT.search((root / rel).read_text(encoding="utf-8"))
            if found:
                return found.group(1)
    for metadata in sorted(root.glob("vllm-*.dist-info/METADATA")):
        found = _METADATA_VERSION.search(metadata.read_text(encoding="utf-8"))
        if found:
            return found.group(1)
    return None


def composition_policy(name: str) -> Policy:
    """The first built-in release variant composed as ``name`` (``--compose C5``)."""
    known = [p for p in builtin_policies() if p.releases]
    for policy in known:
        if policy.composition == name.upper():
            return policy
    names = ", ".join(sorted({p.composition for p in known}))
    raise PolicyError(f"--compose {name}: unknown composition; known: {names}")


def _base_policy(version: str | None, methods: SchedulerMethods) -> Policy:
    """The built-in variant whose composition the source's methods join (module docstring)."""
    release = _RELEASE.match(version or "")
    if release:
        try:
            return policy_for_release(release.group(1))
        except PolicyError:
            pass
    return get_builtin(LATEST if methods.has_reservation else WITHOUT_RESERVATION)


def _summary(located: Located, methods: SchedulerMethods, base: Policy) -> str:
    """One line: which code, its fingerprint, and the composition it runs in."""
    release = f"vLLM {located.version}" if located.version else "vLLM source"
    return (
        f"{release} {located.scheduler} (sha256 {methods.sha256[:12]}): real split"
        + (" and reservation" if methods.has_reservation and base.stage("reservation") else "")
        + f" in composition {base.composition} of {base.name}"
    )
