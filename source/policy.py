"""Policies made of real vLLM code (SPEC CLI: POLICY forms ``vllm==X.Y.Z``, ``vllm``, a path,
``path.py:ClassName``; SPEC X2, X3).

Where the source comes from:

* ``vllm==X.Y.Z``: the release's cached source root (:func:`chunkproof.source.releases.
  release_root`: the wheel is fetched once, only the needed files are kept);
* ``vllm``: the installed distribution, located through :mod:`importlib.metadata` (never
  imported);
* a path to a ``scheduler.py`` (a file with a top-level ``class Scheduler``; helpers resolve into
  the tree above its innermost ``vllm`` directory, or into ``--base``), or to a directory holding
  ``vllm/v1/core/sched/scheduler.py`` (a checkout or an unpacked wheel);
* a path to any other Python file (a platform's scheduler subclass, a patch module), or
  ``path.py:Name`` naming a class or a patch function in it: the file sits on the tree that
  ``--base`` names (``vllm==X.Y.Z`` or a checkout), or on the vLLM tree it lies in.

Which class: vLLM's ``Scheduler``, or the class ``--class NAME`` (or ``path.py:Name``) names,
or in a policy file the one class it patches at import, else the one class it defines that
derives from ``Scheduler``; its members are found along its bases and after the file's patches
(:mod:`chunkproof.source.classes`).

Composition (SPEC S3): read from the ``schedule()`` the class runs
(:mod:`chunkproof.source.schedule`), unless ``--compose Cn`` names a built-in one. A
source without ``schedule()`` (a file holding only the methods) runs in the composition of its
release's built-in variant, or, without a known release, that of ``vllm-latest`` (C9) with
``_reserve_prefill_lookahead`` and of ``vllm-0.27`` (C4) without it. The release is the one
named (``vllm==``), the installed distribution's version, or the version recorded beside the
source tree (a cache ``manifest.json``, ``vllm/_version.py`` or ``vllm/version.py``, a
``*.dist-info`` ``METADATA``); it decides the start-up checks (SPEC S1b), and names the
C-variant when the extracted chain is its release's.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib.metadata
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from chunkproof.model.acceptance import Rule
from chunkproof.model.builtin import LATEST, builtin_policies, get_builtin, policy_for_release
from chunkproof.model.config import Config
from chunkproof.model.errors import ChunkproofError, PolicyError, SubsetError
from chunkproof.model.files import read_text
from chunkproof.model.policy import Policy, Stage, UserSource
from chunkproof.model.step import VIEW_FIELDS
from chunkproof.model.subset import SubsetFunction
from chunkproof.source.branches import review, version_key
from chunkproof.source.classes import (
    ROOT,
    ClassKey,
    ClassLoader,
    ClassValue,
    FunctionValue,
    Sources,
)
from chunkproof.source.encoder import with_source_encoder
from chunkproof.source.extraction import (
    RESERVE_METHOD,
    SCHEDULER_FILE,
    SPLIT_METHOD,
    UNCACHED_PARAM,
    SourceError,
    package_root,
    parse_source,
)
from chunkproof.source.inputs import check_overrides, missing_inputs
from chunkproof.source.methods import (
    MethodStage,
    Overrides,
    SchedulerMethods,
    parse_overrides,
    standin_attributes,
)
from chunkproof.source.releases import MANIFEST, release_root
from chunkproof.source.schedule import (
    BUILTIN_CAPS,
    Composition,
    ScheduleStage,
    effective_schedule,
    extract_composition,
    recognised,
    segments,
    stage_function,
    stage_name,
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


@dataclass(frozen=True)
class Target:
    """What a POLICY names: the trees to read, the release, the class (or patch function) in
    the policy file, and the name to record."""

    name: str
    sources: Sources
    version: str | None
    member: str | None = None
    """A class or patch function of the policy file (``path.py:Name``, ``--class``)."""
    class_name: str | None = None
    """``--class`` for a tree: ``Name`` in ``scheduler.py`` or a dotted ``module.Name``."""
    lone: bool = False
    """A ``scheduler.py`` outside any vLLM tree, given without ``--base``: read on the newest
    release's tree (SPEC X2)."""


def names_tree(text: str) -> bool:
    """Whether POLICY ``text`` names a whole tree (``vllm``, ``vllm==...``, a checkout), which
    ``--base`` cannot apply to."""
    return text == INSTALLED or text.startswith(RELEASE_PREFIX) or Path(text).is_dir()


def names_source(text: str) -> bool:
    """Whether POLICY ``text`` names vLLM source rather than a built-in or ``module:function``:
    ``vllm``, ``vllm==...``, or an existing path."""
    return text == INSTALLED or text.startswith(RELEASE_PREFIX) or Path(text).exists()


def names_class(text: str) -> bool:
    """Whether POLICY ``text`` is ``path.py:Name`` with ``Name`` a class, or a function without
    parameters (a patch function), of that file (read, never imported)."""
    module, sep, name = text.rpartition(":")
    if not sep or not name.isidentifier():
        return False
    path = Path(module)
    if not path.is_file():
        return False
    try:
        tree = parse_source(read_text(path, "policy source"), str(path))
    except (ChunkproofError, SourceError):
        return False
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return True
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return not node.args.args and not node.args.vararg
    return False


def source_policy(
    text: str,
    compose: str | None = None,
    overrides: Overrides = (),
    class_name: str | None = None,
    base: str | None = None,
    interpreted: str | None = None,
) -> Policy:
    """The policy of the vLLM source named by ``text`` (module docstring). ``compose`` (C1 ...
    C9) replaces the composition read from ``schedule()``; ``overrides`` are the ``--set``
    values of inputs the model does not have; ``class_name`` (``--class``) and ``base``
    (``--base``) say which class and on which tree. ``interpreted`` (``"both"`` or
    ``"running"``) runs every stage of the extracted composition as ``schedule()``'s own
    statements, the built-in shapes included (of both loops, or of the running loop alone:
    :func:`~chunkproof.source.schedule.stage_function`)."""
    target = _target(text, class_name, base)
    loader = ClassLoader(target.sources)
    try:
        return _build(loader, target, compose, overrides, interpreted, class_name, base)
    except SubsetError as exc:
        raise PolicyError(str(exc)) from None


def source_composition(
    text: str, class_name: str | None = None, base: str | None = None
) -> Composition | None:
    """The composition read from the ``schedule()`` the class POLICY ``text`` names runs
    (``None`` when no class defines one)."""
    target = _target(text, class_name, base)
    loader = ClassLoader(target.sources)
    key = _policy_class(loader, target)
    loader.policy_key = key
    schedule = effective_schedule(loader, key)
    return None if schedule is None else extract_composition(loader, schedule, target.version)


def _target(text: str, class_name: str | None, base: str | None) -> Target:
    """The trees, release and class POLICY ``text`` names (module docstring)."""
    module, sep, member = text.rpartition(":")
    if sep and names_class(text):
        path = Path(module).resolve()
        if class_name:
            raise PolicyError(f"{text} names the class already; drop --class {class_name}")
        return _user_target(f"{path}:{member}", path, base, member)
    if names_tree(text):
        if base is not None:
            raise PolicyError(f"--base applies to a policy file, not to {text}")
        located = locate(text)
        scheduler = (
            None if located.scheduler == located.root / SCHEDULER_FILE else (located.scheduler)
        )
        return Target(
            located.name, Sources(located.root, None, scheduler), located.version, None, class_name
        )
    path = Path(text).resolve()
    if _defines_scheduler(path):
        if base is None and not (package_root(path) / SCHEDULER_FILE).is_file():
            newest = get_builtin(LATEST).releases[0]
            root = release_root(newest)
            return Target(str(path), Sources(root, None, path), newest, None, class_name, True)
        if base is None:
            located = locate(text)
            return Target(
                located.name,
                Sources(located.root, None, path),
                located.version,
                None,
                class_name,
            )
        root, version = _base_tree(base)
        return Target(str(path), Sources(root, None, path), version, None, class_name)
    return _user_target(str(path), path, base, class_name)


def _user_target(name: str, path: Path, base: str | None, member: str | None) -> Target:
    """A policy file that is not a ``scheduler.py``: on ``--base``, or on the tree it is in."""
    if base is not None:
        root, version = _base_tree(base)
    else:
        root = package_root(path)
        if not (root / SCHEDULER_FILE).is_file():
            raise PolicyError(
                f"{path} is not inside a vLLM tree: name the tree it derives from or patches "
                "with --base vllm==X.Y.Z (or --base path/to/checkout)"
            )
        version = _recorded_version(root)
    return Target(name, Sources(root, path), version, member)


def _base_tree(base: str) -> tuple[Path, str | None]:
    """The root and release of ``--base``: ``vllm==X.Y.Z``, ``vllm``, or a checkout."""
    if not (base.startswith(RELEASE_PREFIX) or base == INSTALLED or Path(base).is_dir()):
        raise PolicyError(
            f"--base {base}: expected vllm==X.Y.Z, vllm, or a directory holding {SCHEDULER_FILE}"
        )
    located = locate(base)
    return located.root, located.version


def _defines_scheduler(path: Path) -> bool:
    """Whether the file has a top-level ``class Scheduler`` (a ``scheduler.py``)."""
    try:
        tree = parse_source(read_text(path, "policy source"), str(path))
    except (ChunkproofError, SourceError):
        return True  # reported by the loader, with file and line
    return any(isinstance(n, ast.ClassDef) and n.name == "Scheduler" for n in tree.body)


def _policy_class(loader: ClassLoader, target: Target) -> ClassKey:
    """The class the policy instantiates (module docstring)."""
    if target.sources.policy_file is None:
        if target.class_name is None:
            loader.tree_name(SCHEDULER_FILE, "Scheduler", SCHEDULER_FILE)
            return ROOT
        dotted, _, name = target.class_name.rpartition(".")
        value = (
            loader.module_attribute(dotted, name, "--class")
            if dotted
            else loader.tree_name(SCHEDULER_FILE, name, "--class")
        )
        if not isinstance(value, ClassValue):
            raise PolicyError(
                f"--class {target.class_name}: no such class in {loader.sources.base}"
            )
        return value.key
    module = loader.policy_module()
    label = module.label
    if target.member is not None:
        value = module.env.get(target.member)
        if isinstance(value, ClassValue):
            return value.key
        if isinstance(value, FunctionValue) and not value.node.args.args:
            before = len(loader.patched)
            from chunkproof.source.classes import _Glue

            _Glue(loader, module).call(value, [], value.node)
            patches = loader.scheduler_patches(loader.patched[before:])
            return _patched_class(loader, patches, f"{label}:{target.member}")
        raise PolicyError(f"{label}: {target.member} is neither a class nor a patch function")
    if loader.scheduler_patches(loader.patched):
        return _patched_class(loader, loader.scheduler_patches(loader.patched), label)
    derived = loader.subclasses_of(module, ROOT)
    if len(derived) == 1:
        return derived[0]
    if derived:
        names = ", ".join(key[1] for key in derived)
        raise PolicyError(
            f"{label} defines several scheduler classes ({names}): name one with "
            f"{label}:NAME or --class NAME"
        )
    loader.note_missing_imports(module)
    loader.check_missing()
    functions = [
        name
        for name, v in module.env.items()
        if isinstance(v, FunctionValue) and not v.node.args.args and _assigns_class(v.node)
    ]
    hint = (
        f" (it defines {', '.join(functions)}: name one, {label}:{functions[0]})"
        if functions
        else ""
    )
    raise PolicyError(
        f"{label} neither patches a scheduler class at import nor defines a class deriving from "
        f"vLLM's Scheduler{hint}"
    )


def _assigns_class(node: ast.FunctionDef) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store))
        or (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "setattr")
        for n in ast.walk(node)
    )


def _patched_class(
    loader: ClassLoader, patches: list[tuple[ClassKey, str, str]], where: str
) -> ClassKey:
    keys = list(dict.fromkeys(key for key, _, _ in patches))
    if not keys:
        raise PolicyError(f"{where} patches no class")
    if len(keys) > 1:
        names = ", ".join(k[1] for k in keys)
        raise PolicyError(f"{where} patches several classes ({names}): name one with --class NAME")
    return keys[0]


def _build(
    loader: ClassLoader,
    target: Target,
    compose: str | None,
    overrides: Overrides,
    interpreted: str | None,
    class_name: str | None,
    base: str | None,
) -> Policy:
    key = _policy_class(loader, target)
    loader.policy_key = key
    loader.mro(key)
    if loader.missing and key[0] in loader.user:
        loader.note_missing_imports(loader.user[key[0]])
    loader.check_missing()
    loader.check_init_flags(key, _provided())
    split = loader.lookup(key, SPLIT_METHOD)
    if not isinstance(split, FunctionValue):
        raise PolicyError(
            f"{_where(loader, key)}: class {key[1]} has no method {SPLIT_METHOD} (looked up along "
            f"its bases: {', '.join(k[1] for k in loader.mro(key))})"
        )
    takes_uncached = _split_parameters(loader, split)
    reserve = loader.lookup(key, RESERVE_METHOD)
    if reserve is not None and not isinstance(reserve, FunctionValue):
        raise PolicyError(f"{_where(loader, key)}: {key[1]}.{RESERVE_METHOD} is not a method")
    if isinstance(reserve, FunctionValue) and len(loader.params(reserve)) != 4:
        names = ", ".join(name for name, _ in loader.params(reserve))
        raise PolicyError(
            f"{loader.label(reserve)}:{reserve.node.lineno}: {RESERVE_METHOD} has an unexpected "
            f"signature ({names})"
        )
    schedule = None if compose else effective_schedule(loader, key)
    composition = (
        extract_composition(loader, schedule, target.version) if schedule is not None else None
    )
    plan: list[tuple[str, str, object]] = []
    if composition is not None:
        for index, segment in enumerate(segments(composition)):
            kind = None if interpreted else recognised(segment, composition)
            if kind is None:
                running = interpreted == "running"
                fv, bound = stage_function(loader, composition, segment, index == 0, running)
                data = (loader.function(fv), bound, running)
                plan.append((stage_name(segment.kind), "schedule", data))
            else:
                plan.append((stage_name(segment.kind), kind, None))
        if any(k == "reservation" for _, k, _ in plan) and reserve is None:
            raise PolicyError(
                f"{composition.label}: schedule() calls {RESERVE_METHOD}, which class {key[1]} "
                "does not define"
            )
    entries = [SPLIT_METHOD]
    if isinstance(reserve, FunctionValue):
        entries.append(RESERVE_METHOD)
    cls = loader.source_class(key, entries, _provided())
    if target.sources.policy_file is None and target.class_name is None:
        scheduler = target.sources.scheduler or target.sources.base / SCHEDULER_FILE
        sha = (
            loader.fingerprint()
            if loader.patched
            else hashlib.sha256(scheduler.read_bytes()).hexdigest()
        )
        path = scheduler
    else:
        sha = loader.fingerprint()
        path = (
            target.sources.policy_file
            or target.sources.scheduler
            or (target.sources.base / SCHEDULER_FILE)
        )
    methods = SchedulerMethods(
        path=path,
        sha256=sha,
        cls=cls,
        has_reservation=isinstance(reserve, FunctionValue),
        takes_uncached_prefix=takes_uncached,
    )
    base_policy = None
    if composition is None:
        base_policy = (
            composition_policy(compose) if compose else _base_policy(target.version, methods)
        )

    def stages_of(methods: SchedulerMethods) -> tuple[Stage, ...]:
        if base_policy is not None:
            return _fixed_stages(methods, base_policy)
        return _extracted_stages(methods, plan)

    methods = _with_inputs(methods, stages_of, overrides)
    stages = stages_of(methods)
    after_split = None if composition is None else composition.encoder_after_split()
    if composition is None or after_split is not None:
        # SPEC X5: the real encoder scheduling, where schedule() calls it (a
        # schedule() without an encoder cap has no encoder stage)
        stages = with_source_encoder(
            stages,
            target.sources.scheduler or target.sources.base / SCHEDULER_FILE,
            target.sources.base,
            target.version,
            overrides,
            after_split,
        )
    if base_policy is not None:
        name = base_policy.composition
        acceptance = base_policy.acceptance
        fixed = base_policy.fixed
        how = f"composition {name} of {base_policy.name}" + (
            "" if compose else " (no schedule() in the source)"
        )
    else:
        assert composition is not None
        name = composition.name
        acceptance = _acceptance(target.version, composition, methods)
        fixed = composition.fixed() + _cache_rules_note(target.version)
        how = (
            f"composition {name}, read from {_owner(composition)}.schedule() "
            f"({composition.label}:{composition.line})"
        )
        if composition.extras():
            how += f": {composition.describe()}"
    reserves = any(s.name == "reservation" for s in stages)
    branches, since = ((), None) if composition is None else review(composition, target.version)
    return Policy(
        name=target.name,
        summary=_summary(loader, target, key, split, reserve if reserves else None, sha, how),
        stages=stages,
        split_variant=f"source {SPLIT_METHOD}",
        reservation_variant=f"source {RESERVE_METHOD}" if reserves else None,
        composition=name,
        releases=(target.version,) if target.version else (),
        acceptance=acceptance,
        source_sha256=sha,
        options=_options(compose, overrides, class_name, base),
        fixed=fixed,
        user_source=_user_source(loader, key, target),
        branches=branches,
        branches_since=since,
        loop_rules=None if composition is None else composition.loop_rules(),
    )


def _user_source(loader: ClassLoader, key: ClassKey, target: Target) -> UserSource | None:
    """The user's file whose methods class ``key`` runs (:class:`~chunkproof.model.policy.
    UserSource`): every member its MRO resolves to a ``def`` of the policy file."""
    sources = target.sources
    if sources.policy_file is None:
        if sources.scheduler is None:
            return None
        return UserSource(str(sources.scheduler), replaces_scheduler=True)
    rel = sources.policy_rel()
    names = dict.fromkeys(name for cls in loader.mro(key) for name in loader.class_dict(cls))
    methods: list[tuple[str, int]] = []
    unsupported: list[str] = []
    for name in names:
        value = loader.lookup(key, name)
        if not isinstance(value, FunctionValue) or not value.user:
            continue
        where = f"{loader.label(value)}:{value.node.lineno}"
        if value.rel != rel:
            unsupported.append(f"{name} is defined in another file ({where})")
        elif value.closure is not None:
            unsupported.append(f"{name} is defined inside a function ({where})")
        else:
            methods.append((name, value.node.lineno))
    return UserSource(str(sources.policy_file), False, tuple(methods), tuple(unsupported))


def _cache_rules_note(version: str | None) -> tuple[str, ...]:
    """What a tree newer than every built-in release (or of no known version) is held to:
    the newest release's cache rules (SPEC KV1), which its own code may not follow."""
    newest = get_builtin(LATEST).releases[0]
    known = version_key(version)
    if known is not None and known <= (version_key(newest) or ()):
        return ()
    return (
        f"the prefix cache's lookup and retention of vLLM {newest} (SPEC KV1), not checked "
        f"against this tree's ({version or 'no version'})",
    )


def _with_inputs(
    methods: SchedulerMethods,
    stages_of: Callable[[SchedulerMethods], tuple[Stage, ...]],
    overrides: Overrides,
) -> SchedulerMethods:
    """``methods`` with the ``--set`` values, each checked against how the code uses its path,
    and every input the code reads that the model still lacks (SPEC X4;
    :mod:`chunkproof.source.inputs`)."""
    standin_attributes(_abstract_view(), overrides)  # a modelled input is refused here
    check_overrides(_probe(stages_of(methods)), overrides)
    methods = dataclasses.replace(methods, overrides=overrides)
    unmodelled = missing_inputs(_probe(stages_of(methods)))
    return dataclasses.replace(methods, unmodelled=unmodelled)


def _probe(stages: tuple[Stage, ...]) -> Policy:
    """A policy holding ``stages`` only, for the static analysis."""
    return Policy("probe", "", stages, "", None, "")


def _where(loader: ClassLoader, key: ClassKey) -> str:
    if key[0] in loader.user:
        return loader.user[key[0]].label
    return loader.collector.module(key[0]).label


def _owner(composition: Composition) -> str:
    owner = composition.schedule.owner
    return owner[1] if owner else "the module's"


def _split_parameters(loader: ClassLoader, split: FunctionValue) -> bool:
    """Check the split takes (self, request, n, l, x[, u]), as the call sites pass; whether it
    takes V3's u."""
    params = [name for name, _ in loader.params(split)]
    if len(params) == 6 and params[5] == UNCACHED_PARAM:
        return True
    if len(params) != 5:
        raise PolicyError(
            f"{loader.label(split)}:{split.node.lineno}: {SPLIT_METHOD} has an unexpected "
            f"signature ({', '.join(params)})"
        )
    return False


def _abstract_view() -> SimpleNamespace:
    """A step view with every field 0 (False for flags), L >= 1."""
    fields = dict.fromkeys(Config.__dataclass_fields__, 0)
    fields.update(dict.fromkeys(VIEW_FIELDS, 0), speculative=True, retention=-1)
    return SimpleNamespace(**fields)


def _provided() -> frozenset[str]:
    """The first-level attributes of the stand-in ``self`` (never shadowed by class
    constants)."""
    scheduler, _ = standin_attributes(_abstract_view())
    return frozenset(path.partition(".")[0] for path in scheduler)


def _fixed_stages(methods: SchedulerMethods, base: Policy) -> tuple[Stage, ...]:
    """The stages of a built-in composition with the real split (and reservation)."""
    cap = base.stage("cap")
    assert cap is not None
    stages = [cap, Stage("split", split := MethodStage(methods, SPLIT_METHOD), split)]
    if methods.has_reservation and base.stage("reservation") is not None:
        stages.append(
            Stage("reservation", reserve := MethodStage(methods, RESERVE_METHOD), reserve)
        )
    return tuple(stages)


def _extracted_stages(
    methods: SchedulerMethods, plan: list[tuple[str, str, object]]
) -> tuple[Stage, ...]:
    """The stages of the extracted composition: built-in stages for the recognised shapes,
    the real methods, and :class:`ScheduleStage` for the rest."""
    stages: list[Stage] = []
    for name, kind, data in plan:
        if kind in BUILTIN_CAPS:
            stages.append(Stage(name, BUILTIN_CAPS[kind]))
        elif kind == "split":
            stages.append(Stage(name, split := MethodStage(methods, SPLIT_METHOD), split))
        elif kind == "reservation":
            stages.append(Stage(name, res := MethodStage(methods, RESERVE_METHOD), res))
        else:
            assert isinstance(data, tuple)
            function, bound, running = data
            assert isinstance(function, SubsetFunction)
            stage = ScheduleStage(function, methods, tuple(bound), bool(running))
            stages.append(Stage(name, stage, stage))
    return tuple(stages)


def _acceptance(
    version: str | None, composition: Composition, methods: SchedulerMethods
) -> tuple[Rule, ...]:
    """The start-up checks (SPEC S1b): those of the release, else of the C-variant's first
    built-in policy, else of the latest (or 0.27 without a reservation)."""
    release = _RELEASE.match(version or "")
    if release:
        try:
            return policy_for_release(release.group(1)).acceptance
        except PolicyError:
            pass
    plain = composition.name.partition("+")[0]
    try:
        return composition_policy(plain).acceptance
    except PolicyError:
        return _base_policy(None, methods).acceptance


def _options(
    compose: str | None,
    overrides: Overrides,
    class_name: str | None = None,
    base: str | None = None,
) -> tuple[str, ...]:
    """The ``--compose``, ``--set``, ``--class`` and ``--base`` options that rebuild the policy
    (recorded for replay; a base directory is recorded as an absolute path)."""
    options = ["--compose", compose] if compose else []
    for path, value in overrides:
        options += ["--set", f"{path}={value}"]
    if class_name:
        options += ["--class", class_name]
    if base:
        options += ["--base", str(Path(base).resolve()) if Path(base).is_dir() else base]
    return tuple(options)


def recorded_options(options: tuple[str, ...]) -> tuple[str | None, Overrides]:
    """The inverse of :func:`_options` for ``--compose`` and ``--set`` (``--class`` and
    ``--base`` are in :func:`recorded_source_options`); anything else is a one-line error."""
    compose, overrides, _, _ = recorded_source_options(options)
    return compose, overrides


def recorded_source_options(
    options: tuple[str, ...],
) -> tuple[str | None, Overrides, str | None, str | None]:
    """The inverse of :func:`_options`: ``--compose``, ``--set``, ``--class`` and ``--base``
    values from recorded options; anything else is a one-line error."""
    compose, sets, class_name, base = None, [], None, None
    for flag, value in zip(options[::2], options[1::2], strict=False):
        if flag == "--compose":
            compose = value
        elif flag == "--set":
            sets.append(value)
        elif flag == "--class":
            class_name = value
        elif flag == "--base":
            base = value
        else:
            raise PolicyError(f"unknown recorded policy option {flag!r}")
    if len(options) % 2:
        raise PolicyError(f"recorded policy option {options[-1]!r} has no value")
    return compose, parse_overrides(sets), class_name, base


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


def _summary(
    loader: ClassLoader,
    target: Target,
    key: ClassKey,
    split: FunctionValue,
    reserve: FunctionValue | None,
    sha: str,
    how: str,
) -> str:
    """One line: which code, its fingerprint, which functions are the split and the
    reservation, and the composition."""
    release = f"vLLM {target.version}" if target.version else "vLLM source"
    base = target.sources.base
    if target.sources.policy_file is None and target.class_name is None:
        scheduler = target.sources.scheduler or base / SCHEDULER_FILE
        what = f"{release} {scheduler} (sha256 {sha[:12]}): real split"
        what += " and reservation" if reserve is not None else ""
        if loader.patched:  # SPEC Q2: patched at import by the tree's own modules
            where = ", ".join(f"{cls[1]}.{name} at {at}" for cls, name, at in loader.patched)
            what += f", as patched at import ({where})"
        if target.lone:
            what += (
                f", a lone scheduler.py read on the newest release's tree ({RELEASE_PREFIX}"
                f"{target.version}; --base vllm==X.Y.Z reads it on another)"
            )
        return f"{what} in {how}"
    where = f"class {key[1]} on {release} {base}"
    if loader.patched:
        where += f" patched by {target.sources.policy_file}"
    methods = f"split {_function_label(loader, split)}"
    if reserve is not None:
        methods += f", reservation {_function_label(loader, reserve)}"
    notes = "".join(f"; {note}" for note in loader.notes)
    return f"{where} (sha256 {sha[:12]}): {methods}{notes}; {how}"


def _function_label(loader: ClassLoader, fv: FunctionValue) -> str:
    """``Class.name (file:line)`` of a function read from source."""
    owner = f"{fv.owner[1]}." if fv.owner else ""
    return f"{owner}{fv.node.name} ({loader.label(fv)}:{fv.node.lineno})"
