"""A policy: named stages composed in the order of a release's ``schedule()`` (SPEC S3)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from chunkproof.model.acceptance import Rule
from chunkproof.model.config import Config
from chunkproof.model.subset import SubsetFunction, Value, parse

StageFunction = Callable[[Config, int, int], int]
"""A subset function ``(cfg, c, n) -> n``."""

STAGE_NAMES = ("cap", "split", "encoder", "reservation")
"""Stage names, as they appear in a trace step (SPEC C)."""

FIXED_INPUTS = {
    "defer_prefills": "no prefill is deferred for DP balancing: schedule(throttle_prefills=False)",
    "local_prefill_interval": "prefill_schedule_interval 1 (no local prefill cadence)",
    "load_kv_async": "external KV hits load synchronously (no asynchronous KV load)",
    "pad_spec_decode": "no decode padding of an admission with one token left",
    "max_model_len": "no max_model_len cap",
}
"""The inputs of ``schedule()`` and of the engine that SPEC S3's step fixes, and at which
value, keyed by the name the code reads (every report names them: :attr:`Policy.fixed`)."""


@dataclass(frozen=True)
class LoopRules:
    """What a chunk of 0 does in each loop of ``schedule()`` (history note 6), read from its
    zero tests (``if num_new_tokens == 0:``). ``running``: in the running loop; ``split`` and
    ``later``: in the waiting loop, for a zero the split gives (the test right after the
    split, or the first one after it) and for a zero a later stage gives (the encoder cap, the
    reservation). An action is ``break`` (the loop ends: in the waiting loop, head-of-line
    blocking), ``continue`` (the loop's counter moves past the request: the running loop's
    ``req_index += 1``), ``skip`` (a call takes the request out of its queue, then
    ``continue``: 0.33's ``skip_request``; it keeps its place for the next step) or ``stay``
    (a ``continue`` that does neither: the loop finds the same request again)."""

    running: str = "continue"
    split: str = "break"
    later: str = "break"
    unknown: str = ""
    """Why ``schedule()``'s zero tests give no rules of this form (the actions then mean
    nothing); empty when they do."""

    def describe(self) -> str:
        waiting = (
            self.split
            if self.split == self.later
            else f"{self.split} after the split, {self.later} after a later stage"
        )
        return f"running: 0 => {self.running}, waiting: 0 => {waiting}"


@dataclass(frozen=True)
class ScheduleBranch:
    """One branch of a ``schedule()`` read from source that sets a chunk, moves requests
    between queues or ends a loop, and how the model treats it (SPEC X3): ``status`` is
    ``modelled``, ``held fixed`` (``why`` names the value) or ``not modelled``; ``changed``:
    the release the report compares with has no branch of the same fingerprint (test,
    effects and own body)."""

    line: int
    test: str
    effects: tuple[str, ...]
    status: str
    why: str
    fingerprint: str
    changed: bool = False

    def describe(self) -> str:
        return f"{self.line:>5}  {self.status:<12}  {self.test}: {self.why}"


@dataclass(frozen=True)
class UserSource:
    """The user's own file whose methods a policy read from source runs (SPEC X2): a lone
    ``scheduler.py`` (``replaces_scheduler``: it stands for the tree's), or a patch module or
    a subclass's module, whose ``methods`` (member name, line of its ``def`` there) replace
    the tree's ``Scheduler``'s. ``unsupported`` names what a repro cannot carry (a method
    defined inside a function, or in another of the user's files)."""

    path: str
    replaces_scheduler: bool
    methods: tuple[tuple[str, int], ...] = ()
    unsupported: tuple[str, ...] = ()


def variant_number(composition: str) -> int | None:
    """The number of the built-in C-variant a composition is (``C9+extra`` is 9: extra
    stages change no loop rule), ``None`` for one that is none (``schedule()``)."""
    match = re.match(r"C(\d+)", composition)
    return None if match is None else int(match.group(1))


def variant_loop_rules(composition: str) -> LoopRules | None:
    """The loop rules of a built-in C-variant (history note 6): every zero of the running
    loop is ``continue``, every zero of the waiting loop ``break``, except that from C9
    (0.33) a zero after the split is ``skip_request``; ``None`` for a composition that is no
    C-variant (:func:`variant_number`)."""
    number = variant_number(composition)
    if number is None:
        return None
    return LoopRules(later="skip" if number >= 9 else "break")


class StageSource(Protocol):
    """A stage defined by other code than a subset function ``(cfg, c, n)``: a real vLLM
    method (:class:`chunkproof.source.methods.MethodStage`)."""

    def subset(self) -> SubsetFunction:
        """The syntax tree the interpreter runs."""

    def arguments(self, cfg: Any, c: Value, n: Value) -> list[Value]:
        """Its arguments for config ``cfg``, state ``c`` and input ``n`` (any value domain)."""


@dataclass(frozen=True)
class Stage:
    """One cap of the composition: a name from :data:`STAGE_NAMES`, its native form
    ``function`` and, when that is not itself a subset function ``(cfg, c, n)``, the
    ``source`` the interpreter runs instead (one definition: the native form is compiled from
    the same syntax tree)."""

    name: str
    function: StageFunction
    source: StageSource | None = None

    def __post_init__(self) -> None:
        if self.name not in STAGE_NAMES:
            raise ValueError(f"unknown stage name {self.name!r}")

    def subset(self) -> SubsetFunction:
        """The syntax tree the vectorised and symbolic forms interpret."""
        return parse(self.function) if self.source is None else self.source.subset()

    def arguments(self, cfg: Any, c: Value, n: Value) -> list[Value]:
        """The interpreter's arguments for :meth:`subset`: ``[cfg, c, n]`` for a subset
        function."""
        return [cfg, c, n] if self.source is None else self.source.arguments(cfg, c, n)


@dataclass(frozen=True)
class Policy:
    """A chunk policy: ``stages`` run in order; the first receives the offered budget.

    ``acceptance`` lists the start-up checks of the release (SPEC S1b).
    """

    name: str
    summary: str
    stages: tuple[Stage, ...]
    split_variant: str
    reservation_variant: str | None
    composition: str
    releases: tuple[str, ...] = ()
    acceptance: tuple[Rule, ...] = ()
    source_sha256: str | None = None
    options: tuple[str, ...] = ()
    """Command-line options that rebuild this policy from its name (``--compose``, ``--set``)."""
    fixed: tuple[str, ...] = tuple(FIXED_INPUTS.values())
    """What the model fixes of the code it stands for (:data:`FIXED_INPUTS`): those its
    ``schedule()`` reads, its release's for a built-in (all of them by default)."""
    user_source: UserSource | None = None
    """The user's file whose methods the policy runs, for a repro to carry (``None``: a
    release, a checkout or a built-in)."""
    branches: tuple[ScheduleBranch, ...] = ()
    """The branches of the ``schedule()`` a policy read from source runs (none for a
    built-in)."""
    branches_since: str | None = None
    """The release (``X.Y.Z``) whose ``schedule()`` :attr:`ScheduleBranch.changed` compares
    with; ``None`` when there is none."""
    loop_rules: LoopRules | None = None
    """What a zero does in each loop, read from the ``schedule()`` of a policy read from
    source; ``None``: those of its composition's C-variant (:meth:`rules`)."""
    cache_release: str | None = None
    """The vLLM release (``X.Y.Z``) whose cache manager a policy with no ``releases`` runs on:
    the lookup and retention rules of SPEC KV1; ``None`` with no releases: the latest."""

    @property
    def kv_release(self) -> str | None:
        """The release whose cache rules apply (SPEC KV1): the first of ``releases`` (a
        built-in group shares them; a source tree names its version), else
        :attr:`cache_release`."""
        return self.releases[0] if self.releases else self.cache_release

    @property
    def file_stem(self) -> str:
        """The policy's name as a folder name under ``--out`` (counterexamples, certificates)."""
        return "".join(ch if ch.isalnum() or ch in "-_.=" else "_" for ch in self.name)

    def accepts(self, cfg: Config) -> str | None:
        """``None`` if the release accepts ``cfg`` at start-up, else why it refuses it."""
        return next((rule.reason for rule in self.acceptance if not rule.holds(cfg)), None)

    def rules(self) -> LoopRules | None:
        """The loop rules the scheduler step runs: those read from ``schedule()``, else those
        of the composition's C-variant (:func:`variant_loop_rules`); ``None`` when neither
        is known."""
        return self.loop_rules or variant_loop_rules(self.composition)

    def stage(self, name: str) -> Stage | None:
        """The stage called ``name``, if this policy has one."""
        return next((s for s in self.stages if s.name == name), None)
