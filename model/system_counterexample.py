"""Multi-request counterexamples (SPEC C for ``chunkproof system``, SPEC N1): a trace of
``schedule()`` steps over several requests, with one SPEC C trace per request in it.

A file of schema :data:`SYSTEM_SCHEMA` holds: the policy (name, sha256 of its source when it
came from a file, the options it was checked with); the engine the requests share
(``max_num_seqs``, ``max_num_batched_tokens`` M, ``long_prefill_token_threshold_adaptive``,
the budget model ``adversarial(1..M)`` of SPEC S4, FCFS order); the requests' full
configurations (SPEC S1; request ``#i`` is ``requests[i]``) and the order they arrived in (the
waiting queue at Init); the property id; the trace, one entry per step: the budget offered,
with the adaptive floor the number of eligible requests the step counted, and per request the
list it was in (running, waiting, decoding, finished) and its place there, whether the step
scheduled it, where a loop reached it the SPEC C stage values of its step at the budget that
loop offered it (c, budget, n before the split, after the split, after the encoder cap, after
the reservation, chunk: :class:`~chunkproof.model.step.Step`), and for a decoding request the
tokens its decode step advanced; the properties each step breaks; and the verdict in words.
The envelope (schema, policy, property, verdict, details) is every model's
(:mod:`chunkproof.model.trace_file`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chunkproof.model.budget import Adversarial
from chunkproof.model.config import Config
from chunkproof.model.errors import ChunkproofError
from chunkproof.model.step import Step
from chunkproof.model.trace_file import (
    MALFORMED,
    PolicyRecord,
    TraceFormat,
    malformed,
    recorded_verdict,
)

SYSTEM_SCHEMA = "chunkproof.system-counterexample/6"
"""Version 2 adds the adaptive floor: the engine's ``long_prefill_token_threshold_adaptive``
and each step's eligible count; a file of version 1 reads as one with the floor off. Version 3
adds decoding requests (list ``decoding``: the prefill done, an encoder entry still
referenced) and the tokens each one's decode step advanced (``decoded``); a file of an earlier
version has none. Version 4 adds the KV block pool the requests share (the engine's
``kv_pool_blocks``, absent without one), which requests each step preempted (``preempted``)
and, for a run that goes on for ever (S-POOL), the step its loop starts at (``loop``).
Version 5 (SPEC KV2 rule 5e): a preempted request keeps its c, and a waiting request with
c > 0 records it (``computed``) and the hit it resumed at in the step (``hit``), its stages'
c; a pooled file of version 4 resumed every preempted request at c = 0. Version 6 (SPEC KV2
rule 5g): a request admitted at a KV connector's hit records ``connector`` with its hit, and one
whose admission made the pool raise records ``pool_raised``; a file of version 5 has neither."""
SYSTEM_SCHEMAS = (
    "chunkproof.system-counterexample/1",
    "chunkproof.system-counterexample/2",
    "chunkproof.system-counterexample/3",
    "chunkproof.system-counterexample/4",
    "chunkproof.system-counterexample/5",
    SYSTEM_SCHEMA,
)
"""The versions a reader accepts."""


@dataclass(frozen=True)
class RequestStep:
    """One request in one step: the list it was in (running, waiting, decoding: in the
    running list, c >= E and an encoder entry still referenced, or finished: in neither of
    vLLM's lists) and its place there (a decoding request's in the running list), its c,
    whether the step preempted it (with a KV block pool),
    whether the step scheduled it (its code did not raise and its chunk passed the loop's zero
    test: a stage may have broken P0, and a chunk below 0 that no clamp caught is scheduled as
    it is, SPEC Q3), its stages at the budget a loop offered it (``None``: no loop reached it,
    so it got nothing), for a decoding request the tokens its decode step advanced c (0:
    the running loop did not reach it), and for a waiting request with c > 0 in a pool (one
    a step preempted) the hit it resumed at in this step (SPEC KV2 rule 5e: its stages run
    from there; ``None`` for every other request), whether that hit is a KV connector's
    (``connector``, rule 5g) and whether its admission made the pool raise (``pool_raised``,
    rules 2e and 5g: the engine core is down)."""

    queue: str
    place: int
    c: int
    scheduled: bool
    stages: Step | None
    decoded: int = 0
    preempted: bool = False
    hit: int | None = None
    connector: bool = False
    pool_raised: bool = False

    @property
    def resumed(self) -> int:
        """The c the request's step ran from: its resume hit, else its c."""
        return self.c if self.hit is None else self.hit

    @property
    def hit_words(self) -> str:
        """The hit it resumed at in words: ``hit h``, or ``the connector's hit x`` (SPEC KV2
        rule 5g)."""
        return f"the connector's hit {self.hit}" if self.connector else f"hit {self.hit}"

    @property
    def chunk(self) -> int:
        """The tokens the step scheduled for the request."""
        return self.stages.chunk if self.scheduled and self.stages is not None else 0

    def to_dict(self) -> dict[str, Any]:
        head = {"list": self.queue, "place": self.place, "scheduled": self.scheduled}
        decoded = {"decoded": self.decoded} if self.queue == "decoding" else {}
        preempted = {"preempted": True} if self.preempted else {}
        stages = self.stages.to_dict() if self.stages is not None else {"c": self.resumed}
        hit = {"computed": self.c, "hit": self.hit} if self.hit is not None else {}
        flags = {name: True for name in ("connector", "pool_raised") if getattr(self, name)}
        return head | stages | decoded | preempted | hit | flags

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestStep:
        stages = Step.from_dict(data) if "budget" in data else None
        place, scheduled = int(data["place"]), bool(data["scheduled"])
        c = int(data.get("computed", data["c"]))
        decoded = int(data.get("decoded", 0))
        preempted = bool(data.get("preempted", False))
        hit = int(data["hit"]) if "hit" in data else None
        connector, raised = (bool(data.get(name, False)) for name in ("connector", "pool_raised"))
        return cls(
            str(data["list"]),
            place,
            c,
            scheduled,
            stages,
            decoded,
            preempted,
            hit,
            connector,
            raised,
        )


@dataclass(frozen=True)
class SystemStep:
    """One ``schedule()`` step: the budget offered, each request's part in label order, the
    properties the step breaks, and with the adaptive floor the number of eligible requests
    (running + waiting) the step counted (``None`` without it)."""

    budget: int
    requests: tuple[RequestStep, ...]
    breaks: tuple[str, ...]
    eligible: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget": self.budget,
            **({"eligible": self.eligible} if self.eligible is not None else {}),
            "requests": [r.to_dict() for r in self.requests],
            "breaks": list(self.breaks),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SystemStep:
        requests = tuple(RequestStep.from_dict(r) for r in data["requests"])
        eligible = int(data["eligible"]) if "eligible" in data else None
        return cls(int(data["budget"]), requests, tuple(str(p) for p in data["breaks"]), eligible)


@dataclass(frozen=True)
class SystemCounterexample:
    """A replayable scheduler-step trace that breaks one property (module docstring)."""

    policy: str
    requests: tuple[Config, ...]
    arrival: tuple[int, ...]
    max_seqs: int
    property: str
    steps: tuple[SystemStep, ...]
    verdict: str
    source_sha256: str | None = None
    policy_options: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)
    adaptive: bool = False
    """The engine's ``long_prefill_token_threshold_adaptive`` (every step then records its
    eligible count)."""
    blocks: int = 0
    """The KV block pool the requests share (its N; 0: none)."""
    loop: int | None = None
    """For a run that goes on for ever, the step its loop starts at: the state after the last
    step is the one before it, and every step from it on is offered the whole budget M."""

    def budget_model(self) -> Adversarial:
        """Any budget 1..M at every step (SPEC S4; M is shared by the requests)."""
        return Adversarial(1, self.requests[0].max_sched)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SYSTEM_SCHEMA,
            "policy": PolicyRecord.of(self).to_dict(),
            "engine": {
                "max_num_seqs": self.max_seqs,
                "max_num_batched_tokens": self.requests[0].max_sched,
                "long_prefill_token_threshold_adaptive": self.adaptive,
                "budget_model": self.budget_model().to_dict(),
                "order": "FCFS",
                **({"kv_pool_blocks": self.blocks} if self.blocks else {}),
            },
            "requests": [cfg.to_dict() for cfg in self.requests],
            "arrival": list(self.arrival),
            "property": self.property,
            "trace": [s.to_dict() for s in self.steps],
            **({"loop": self.loop} if self.loop is not None else {}),
            "verdict": self.verdict,
            "details": self.details,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SystemCounterexample:
        """Inverse of :meth:`to_dict` (the schema is checked by the reader)."""
        try:
            record = PolicyRecord.from_dict(data["policy"])
            cx = cls(
                policy=record.name,
                source_sha256=record.source_sha256,
                policy_options=record.options,
                requests=tuple(Config.from_dict(c) for c in data["requests"]),
                arrival=tuple(int(label) for label in data["arrival"]),
                max_seqs=int(data["engine"]["max_num_seqs"]),
                adaptive=bool(data["engine"].get("long_prefill_token_threshold_adaptive", False)),
                blocks=int(data["engine"].get("kv_pool_blocks", 0)),
                loop=int(data["loop"]) if "loop" in data else None,
                property=str(data["property"]),
                steps=tuple(SystemStep.from_dict(s) for s in data["trace"]),
                verdict=recorded_verdict(data),
                details=dict(data.get("details", {})),
            )
        except MALFORMED as exc:
            raise malformed(exc) from None
        if not cx.steps or sorted(cx.arrival) != list(range(len(cx.requests))):
            raise ChunkproofError(
                "malformed counterexample: an empty trace, or an arrival order that is not "
                "one of the requests"
            )
        if any((s.eligible is not None) != cx.adaptive for s in cx.steps):
            raise ChunkproofError(
                "malformed counterexample: every step records its eligible count exactly when "
                "the engine's adaptive floor is on"
            )
        return cx


SYSTEM_FORMAT = TraceFormat(SYSTEM_SCHEMAS, SystemCounterexample.from_dict)
"""The scheduler step's files."""
