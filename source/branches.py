"""Every branch of ``schedule()`` that can change a chunk or a queue, and what the model does
with it (SPEC X3; history note section 6).

The composition (:mod:`chunkproof.source.schedule`) reads the chain of stores to n. A reviewer
of a new release also needs the rest: each ``if`` or ``while`` of ``schedule()`` (outside nested
``def``) whose own body stores n (``num_new_tokens``), calls a queue operation (``pop_request``,
``prepend_request(s)``, ``add_request``, ``remove_requests``, ``skip_request``, a
``_preempt*`` or ``_reorder*`` method) or ends a loop (``break``, ``continue``). Each one is:

* **modelled**: it holds a stage, a zero test or an exit of the composition's chain that the
  model runs, or it is one of the two loops;
* **held fixed**: its test reads an input the model holds at one value (:data:`HELD`, or a
  stage the model leaves out for a fixed input, :data:`~chunkproof.source.schedule.INACTIVE`),
  named with that value;
* **not modelled**: anything else, which a verdict does not cover.

A branch's fingerprint is a hash of its kind, test, effects and own body (no line numbers,
no vLLM text is stored), so the branches a release adds or changes over the previous one are
found from a table of fingerprints per release (:data:`FINGERPRINTS_FILE`, written by
:func:`write_fingerprint_table`, checked against every release by the fidelity tests).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
from pathlib import Path

from chunkproof.model.policy import ScheduleBranch
from chunkproof.source.schedule import INACTIVE, Composition, Event

MODELLED, HELD_FIXED, NOT_MODELLED = "modelled", "held fixed", "not modelled"

QUEUE_CALLS = frozenset(
    {"pop_request", "prepend_request", "prepend_requests", "add_request", "remove_requests"}
)
"""Calls on a request queue that move a request in or out of it."""

HELD: dict[str, str] = {
    "defer_prefills": "no prefill is deferred (defer_prefills False)",
    "local_prefill_interval": "prefill_schedule_interval 1 (no local prefill cadence)",
    "load_kv_async": "external KV hits load synchronously (load_kv_async False)",
    "pad_spec_decode": "no decode padding of an admission with one token left",
    "padded_num_tokens": "no decode padding of an admission with one token left",
    "max_model_len": "no max_model_len cap",
    "enable_chunked_prefill": "chunked prefill on (vLLM refuses Mamba prefix caching without it)",
    "disable_chunked_mm_input": "chunked multimodal input (align mode refuses it off)",
    "connector": "no KV connector",
    "ec_connector": "no encoder-cache connector",
    "aux_output_connector": "no auxiliary output connector",
    "_ec_transfer_pending": "no encoder-cache connector",
    "ext_tokens": "no KV connector",
    "cache_aware_window": "cache_aware_admission_window 0, the default: the waiting queue "
    "keeps its order",
    "lora_config": "no LoRA adapters",
    "_pause_state": "the engine is not paused",
    "policy": "one fixed queue order (FCFS, or priorities without preemption)",
    "new_blocks": "the KV pool never runs out: every allocation succeeds",
    "effective_lookahead_tokens": "the KV pool never runs out: the lookahead slots a chunk "
    "allocates do not change it",
    "preempted_reqs": "no preemption (the KV pool never runs out)",
    "preempted_req": "no preemption (the KV pool never runs out)",
    "num_output_placeholders": "no asynchronous-scheduling output placeholder",
    "next_decode_eligible_step": "no pipeline-parallel decode throttle",
    **dict.fromkeys(
        (
            "ready_to_schedule",
            "is_ready",
            "_is_blocked_waiting_status",
            "structured_output_req",
            "WAITING_FOR_STREAMING_REQ",
        ),
        "every waiting request is ready (no remote KV, grammar or stream wait)",
    ),
    "num_stale_output_tokens": "no stale output tokens",
    "is_encoder_decoder": "a decoder-only model",
    "is_mm_encoder_only": "a decoder-only model",
    "holds_blocks": "no waiting request holds KV blocks (no asynchronous KV load)",
    "kv_holding_waiting": "no waiting request holds KV blocks (no asynchronous KV load)",
    "async_kv_waiting": "no asynchronous KV load waits (max_num_inflight_kv_loads unset)",
    "take_async_kv": "no asynchronous KV load waits (max_num_inflight_kv_loads unset)",
    "loads_only": "no asynchronous KV load waits (max_num_inflight_kv_loads unset): a pass "
    "with no seat or budget left ends the loop",
    "draft_slots": "drafts take no budget slots (draft_slots 0)",
    "scheduled_loras": "no LoRA adapters",
    "_preempt_request": "no preemption (the KV pool never runs out)",
    "step_skipped_kv_holding": "no waiting request holds KV blocks (no asynchronous KV load)",
    "step_skipped_async_kv": "no asynchronous KV load waits (max_num_inflight_kv_loads unset)",
}
"""Names a branch's test may read that the model holds at one value, and that value: the
inputs of ``schedule()`` and of the engine outside SPEC S1's configuration, at vLLM's default
or at what align mode requires. Each is an attribute or local name (``self.connector`` is
``connector``)."""

MODELLED_NAMES: dict[str, str] = {
    "num_eligible_reqs": "theta_eff: the static threshold from two eligible requests on, else 0",
    **dict.fromkeys(
        ("max_num_running_reqs", "max_num_active_reqs"),
        "the running list's seat limit (max_seqs of the scheduler step)",
    ),
    "step_skipped_waiting": "skipped requests return to the queue's head in their order: a "
    "skip keeps the request's place (the loop rules' skip)",
    "skipped_waiting_requests": "skipped requests return to the queue's head in their order: "
    "a skip keeps the request's place (the loop rules' skip)",
}
"""Names a branch's test reads whose branch the model runs as a rule of the loops."""

FINGERPRINTS_FILE = Path(__file__).with_name("schedule_branches.json")
"""Per release (``X.Y.Z``), the fingerprints of its ``schedule()``'s branches."""


def schedule_branches(composition: Composition) -> list[ScheduleBranch]:
    """The branches of ``composition``'s ``schedule()`` (module docstring), in source order,
    with the conditional values (``x if test else y``) it assigns to a name either loop
    reads (the per-step threshold of C8-C9)."""
    node = composition.schedule.node
    found: list[ast.If | ast.While | ast.Assign] = [b for b in _walk(node.body) if _effects(b)]
    read = set().union(*(_names(loop) for loop in composition.loops.values()))
    found += [
        s
        for s in ast.walk(node)
        if isinstance(s, ast.Assign)
        and isinstance(s.value, ast.IfExp)
        and len(s.targets) == 1
        and isinstance(s.targets[0], ast.Name)
        and s.targets[0].id in read
    ]
    loops = {id(loop) for loop in composition.loops.values()}
    events = [e for loop in (composition.running, composition.waiting) for e in loop.events]
    return [_classify(b, loops, events) for b in sorted(found, key=lambda b: b.lineno)]


def _walk(body: list[ast.stmt]) -> list[ast.If | ast.While]:
    """Every ``if`` and ``while`` in ``body``, at any depth, outside nested ``def``."""
    found: list[ast.If | ast.While] = []
    for statement in body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(statement, ast.If | ast.While):
            found.append(statement)
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(statement, field, None)
            if isinstance(inner, list):
                found += _walk([s for s in inner if isinstance(s, ast.stmt)])
            if field == "handlers" and isinstance(inner, list):
                for handler in inner:
                    found += _walk(handler.body)
    return found


def _own(branch: ast.If | ast.While) -> list[ast.AST]:
    """The nodes of ``branch``'s own body and ``else``: not inside a nested ``if``, loop or
    ``def`` (those are branches of their own)."""
    own: list[ast.AST] = []
    pending: list[ast.AST] = [*branch.body, *branch.orelse]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If | ast.While | ast.For | ast.FunctionDef | ast.ClassDef):
            continue
        own.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return own


def _effects(branch: ast.If | ast.While | ast.Assign) -> tuple[str, ...]:
    """What ``branch`` itself does to a chunk or a queue (module docstring)."""
    if isinstance(branch, ast.Assign):
        return (f"sets {ast.unparse(branch.targets[0])}",)
    found: set[str] = set()
    for node in _own(branch):
        if isinstance(node, ast.Name) and node.id == "num_new_tokens":
            if isinstance(node.ctx, ast.Store):
                found.add("sets the chunk")
        elif isinstance(node, ast.Call):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else ""
            called = called or (node.func.id if isinstance(node.func, ast.Name) else "")
            if called in QUEUE_CALLS or called == "skip_request":
                found.add("moves requests")
            elif called.startswith(("_preempt", "_reorder")):
                found.add(f"calls {called}")
        elif isinstance(node, ast.Break | ast.Continue):
            found.add("ends the loop" if isinstance(node, ast.Break) else "skips ahead")
    if isinstance(branch, ast.While):
        found.add("loops")
    return tuple(sorted(found))


def _names(node: ast.AST) -> set[str]:
    """The local and attribute names ``node`` reads."""
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return names | {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def _classify(
    branch: ast.If | ast.While | ast.Assign, loops: set[int], events: list[Event]
) -> ScheduleBranch:
    """``branch`` as the model treats it (module docstring). Its fingerprint covers its
    kind, test, effects and own body, so a branch whose body changed is a change too."""
    if isinstance(branch, ast.Assign):
        assert isinstance(branch.value, ast.IfExp)  # schedule_branches keeps only these
        tested = branch.value.test
    else:
        tested = branch.test
    test = ast.unparse(tested).replace("\n", " ")
    effects = _effects(branch)
    own = _own(branch) if not isinstance(branch, ast.Assign) else [branch]
    body = "|".join(ast.dump(n) for n in own if isinstance(n, ast.stmt))
    text = f"{type(branch).__name__}|{test}|{','.join(effects)}|{body}"
    fingerprint = hashlib.sha256(text.encode()).hexdigest()[:12]
    short = test if len(test) <= 70 else test[:67] + "..."

    def made(status: str, why: str) -> ScheduleBranch:
        return ScheduleBranch(branch.lineno, short, effects, status, why, fingerprint)

    if id(branch) in loops:
        return made(MODELLED, "one of the two loops")
    inside = {id(n) for n in [branch, *own]}
    mine = [e for e in events if id(e.node) in inside]
    fixed = [INACTIVE[e.kind] for e in mine if e.kind in INACTIVE and e.kind != "encoder"]
    read = _names(tested)
    if isinstance(branch, ast.Assign):
        read |= _names(branch.targets[0])
    if isinstance(branch, ast.While):
        read |= {
            n.func.attr
            for n in own
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        }
    held = [HELD[name] for name in sorted(read) if name in HELD]
    modelled = [MODELLED_NAMES[name] for name in sorted(read) if name in MODELLED_NAMES]
    if any(e.active or e.kind == "encoder" for e in mine) and not fixed:
        stages = ", ".join(dict.fromkeys(f"{e.kind} stage" for e in mine))
        return made(MODELLED, stages + "".join(f"; its test: {h}" for h in held))
    if modelled:
        return made(MODELLED, "; ".join(modelled) + "".join(f"; its test: {h}" for h in held))
    if fixed or held:
        return made(HELD_FIXED, "; ".join(dict.fromkeys(fixed + held)))
    if mine:
        return made(HELD_FIXED, "its guard is false for the model's request")
    return made(NOT_MODELLED, ", ".join(effects))


def fingerprint_table() -> dict[str, list[str]]:
    """The fingerprints of every release in :data:`FINGERPRINTS_FILE`."""
    if not FINGERPRINTS_FILE.exists():
        return {}
    table: dict[str, list[str]] = json.loads(FINGERPRINTS_FILE.read_text(encoding="utf-8"))
    return table


def previous_release(version: str | None, table: dict[str, list[str]]) -> str | None:
    """The newest release in ``table`` before ``version`` (``X.Y.Z``), if any."""
    key = version_key(version)
    if key is None:
        return None
    earlier = [v for v in table if (version_key(v) or ()) < key]
    return max(earlier, key=lambda v: version_key(v) or ()) if earlier else None


def version_key(version: str | None) -> tuple[int, ...] | None:
    """``X.Y.Z`` as a tuple to order releases by; ``None`` for no version or another form."""
    parts = (version or "").split(".")
    return tuple(int(p) for p in parts) if parts and all(p.isdigit() for p in parts) else None


def review(
    composition: Composition, version: str | None
) -> tuple[tuple[ScheduleBranch, ...], str | None]:
    """The branches of ``composition``'s ``schedule()``, each marked changed against a known
    release's (:data:`FINGERPRINTS_FILE`): the tree's own release when the code differs from
    it (a fork, a pull request on that release), else the newest release before it. The
    release compared with is ``None`` when the table has none."""
    branches = schedule_branches(composition)
    table = fingerprint_table()
    mine = sorted({b.fingerprint for b in branches})
    if version in table and table[version] != mine:
        since: str | None = version
    else:
        since = previous_release(version, table)
    if since is None:
        return tuple(branches), None
    known = set(table[since])
    marked = [dataclasses.replace(b, changed=b.fingerprint not in known) for b in branches]
    return tuple(marked), since


def release_fingerprints(version: str) -> list[str]:
    """The fingerprints of release ``version``'s own ``schedule()`` branches, read from its
    cached source (fetched once)."""
    from chunkproof.source.policy import source_composition  # it imports this module

    composition = source_composition(f"vllm=={version}")
    assert composition is not None, version
    return sorted({b.fingerprint for b in schedule_branches(composition)})


def write_fingerprint_table(versions: list[str]) -> None:
    """Write :data:`FINGERPRINTS_FILE` for ``versions`` (the built-in releases: run as
    ``python -m chunkproof.source.branches`` after a built-in release is added)."""
    table = {version: release_fingerprints(version) for version in versions}
    FINGERPRINTS_FILE.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    from chunkproof.model.builtin import builtin_policies

    write_fingerprint_table([p.releases[0] for p in builtin_policies() if p.releases])
