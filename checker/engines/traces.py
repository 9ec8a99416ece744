"""Counterexample traces: a violating step's trace as a replayable file (SPEC C)."""

from __future__ import annotations

from typing import Any

from chunkproof.model.budget import Adversarial, Const
from chunkproof.model.config import Config
from chunkproof.model.counterexample import Counterexample
from chunkproof.model.errors import ChunkproofError
from chunkproof.model.policy import Policy
from chunkproof.model.step import Step, step
from chunkproof.spec import properties as props
from chunkproof.spec.kv_blocks import (
    asked_blocks,
    at_external_hit,
    free_blocks,
    longest_model_len,
    pool_rules,
    taken_blocks,
)
from chunkproof.spec.request import budget_bounds, encoder_forced
from chunkproof.spec.slots import (
    KvRules,
    block_end,
    crossing_claim,
    kv_rules,
    oracle,
    spare_claims,
)

MINIMISED = ("prompt", "block", "lookahead", "max_sched", "trace_length")
"""Dimensions minimised, in lexicographic order (smallest T, then B, L, M, length)."""


class ModelMismatch(ChunkproofError):
    """Two forms of a policy disagree (vectorised and concrete, or solver and concrete): a bug
    in the tool itself."""

    exit_code = 3


def violates(pid: str, cfg: Config, s: Step, window: str, high: int, *, policy: Policy) -> bool:
    """Whether the final step ``s`` of a trace breaks property ``pid`` (SPEC P; P6 under the
    cache rules of ``policy``'s release, SPEC KV1). For P7 the trace is a ``const(b)`` run and
    its last step yields 0 (or breaks P0)."""
    if pid == "P0":
        return s.unsafe is not None
    if pid in props.STUCK_PROPERTIES and pid != "P7" and s.crash is None:
        return s.budget == high and bool(props.stuck(cfg, s.c, s.chunk))  # SPEC Q3
    if s.unsafe is not None:
        return pid == "P7" and s.c < cfg.prefill_end
    if pid == "P7":
        return bool(props.stuck(cfg, s.c, s.chunk))
    if s.chunk <= 0:
        return False
    if pid == "P4" and encoder_forced(s.order, stage_values(s)):
        return False  # SPEC P4 exemption (b), as the explorer judges it
    edge_properties = props.edge_properties(policy)
    if pid in edge_properties:
        return bool(edge_properties[pid](cfg, s.c, s.end))
    if pid == "P5":
        return bool(props.WINDOW_PROPERTIES[window](cfg, s.c, s.n, s.end))
    raise ValueError(f"no trace check for {pid}")


def stage_values(s: Step) -> dict[str, int]:
    """A step's value after each stage, by stage name, and its chunk."""
    return {
        "cap": s.n,
        "split": s.split,
        "encoder": s.encoder,
        "reservation": s.reservation,
        "chunk": s.chunk,
    }


def _finish(policy: Policy, cfg: Config, steps: list[Step], high: int) -> list[int] | None:
    """Chunk ends of the trace continued with the largest budget; None if it gets stuck."""
    ends = [s.end for s in steps if s.chunk > 0]
    c = ends[-1] if ends else cfg.start
    while c < cfg.prefill_end:
        s = step(policy, cfg, c, high)
        if s.chunk <= 0 or s.unsafe is not None:
            return None
        c = s.end
        ends.append(c)
    return ends


def _slot_findings(policy: Policy, cfg: Config, steps: list[Step], high: int) -> dict[str, Any]:
    """The slot oracle's report on the completed trace (slot note 6), when it completes."""
    ends = _finish(policy, cfg, steps, high)
    if ends is None or cfg.prompt != cfg.T or ends[-1] != cfg.prompt:
        return {}
    report = oracle(cfg, ends, rules=kv_rules(policy.kv_release))
    return {
        "completed_ends": ends,
        "poisoned": [p.text() for p in report.violations],
        "covered": sorted(report.covered),
        "resend_hit": report.resend_hit,
    }


def _agree_with_oracle(
    pid: str, cfg: Config, last: Step, details: dict[str, Any], rules: KvRules
) -> None:
    """The step rules of P3 and P6 are the slot oracle's (slot note 4.2, 5): when the oracle
    ran on the completed trace, it must report the same failure (P6 under the release's cache
    ``rules``, SPEC KV1)."""
    if "covered" not in details:
        return
    landing = details.get("junction_position", rules.resend(cfg))
    if pid == "P6" and landing in details["covered"]:
        raise ModelMismatch(f"P6: the slot oracle covers {landing} on the trace ending {last.end}")
    if pid != "P3":
        return
    spare = details.get("spare_claim")
    claim = crossing_claim(cfg, last.c, last.end, rules)
    expected = f"{spare} holds no state" if spare is not None else f"{claim} holds state@{last.c}"
    if expected not in details["poisoned"]:
        raise ModelMismatch(f"P3: the slot oracle does not report {expected}")


def describe(pid: str, cfg: Config, last: Step, details: dict[str, Any]) -> str:
    """The verdict in words (SPEC C); P6 names the R* the trace's details record (the
    release's, SPEC KV1), else 0.33's."""
    e, big_e = last.end, cfg.prefill_end
    if pid == "P0":
        return f"at c={last.c} with budget {last.budget}, {last.unsafe}"
    if pid == "P1":
        return (
            f"stuck at c={last.c} < E={big_e}: even the largest budget, {last.budget}, yields "
            f"{last.chunk}, and c, T and the flags never change"
        )
    if pid == "P2":
        return f"b* does not exist: at c={last.c} no budget up to {last.budget} makes progress"
    if pid == "P7":
        why = "breaks P0"
        if last.crash is None and last.chunk <= 0:  # SPEC Q3: the chunk the code schedules
            why = f"yields {last.chunk}" + (" and breaks P0" if last.unsafe is not None else "")
        return f"const({last.budget}) never finishes: at c={last.c} < E={big_e} the step {why}"
    if pid == "P3" and "spare_claim" in details:  # 0.30-0.31: a spare speculative block
        claim = details["spare_claim"]
        return (
            f"chunk [{last.c}, {e}) writes a checkpoint and keeps its speculative blocks in "
            f"place: the cache keys {claim} onto one, which holds no state"
        )
    if pid == "P3":
        claim = block_end(cfg, last.c)  # the claim the release's mask kept (P3)
        return (
            f"chunk [{last.c}, {e}) starts mid-block and runs past {claim}: the cache keys "
            f"{claim} onto the block holding state@{last.c}"
        )
    if pid == "P4":
        return (
            f"chunk [{last.c}, {e}) ends off the Mamba block grid (B={cfg.block}) before E={big_e}"
        )
    if pid == "P5":
        return (
            f"chunk [{last.c}, {e}) ends inside the lookahead window "
            f"({cfg.T - cfg.lookahead}, {cfg.T})"
        )
    if pid == "P6" and "junction_position" in details:  # SPEC S-COVER
        r = details["junction_position"]
        where = (
            f"R*_J={r}, where a sibling sharing the request's first J={cfg.junction} tokens "
            "lands (S-COVER)"
        )
        if e == r:
            return (
                f"chunk [{last.c}, {e}) ends at {where}, and the retention mask (interval "
                f"{cfg.retention}) drops its state, so R*_J is never cached"
            )
        return (
            f"chunk [{last.c}, {e}) runs over {where} with budget {last.budget}, so R*_J is "
            "never cached"
        )
    if pid == "P6":
        hit = details.get("resend_hit")
        suffix = (
            f"; an identical resend right after this prefill hits {hit}" if hit is not None else ""
        )
        r = details.get("resend_position", kv_rules(None).resend(cfg))
        if e == r:
            return (
                f"chunk [{last.c}, {e}) ends at the resend position R*={r}, and the retention "
                f"mask (interval {cfg.retention}) drops its state, so R* is never "
                f"cached{suffix}"
            )
        return (
            f"chunk [{last.c}, {e}) runs over the resend position R*={r} with budget "
            f"{last.budget}, so R* is never cached{suffix}"
        )
    if pid == "P8":
        copy, checkpoint = details["tail_copy"], details.get("checkpoint_blocks", 0)
        parts = [f"{copy} of them to copy the prompt's tail state"] if copy else []
        if checkpoint:
            parts.append(f"{checkpoint} of them Mamba blocks of a prefill checkpoint chunk")
        tail = "".join(f", {part}" for part in parts) + ("," if parts else "")
        then = "the running loop preempts the request, the last one running"
        if last.c == cfg.start:
            then = "the waiting loop cannot admit the request"
        if last.c == cfg.start > 0:
            then += f" at the local hit c0={cfg.start} an identical prompt's prefill left"
        asks = f"asks {details['asked']} KV blocks{tail}"
        if at_external_hit(cfg, last.c):
            then = f"the waiting loop cannot admit the request at the external hit x={cfg.start}"
            taken = details.get("taken", details["asked"])
            if taken > details["asked"]:
                asks += f" and takes {taken} (a block for the loaded state at x)"
                then = (
                    f"it counts {details['asked']} and is admitted, and the pool's "
                    "get_new_blocks raises (the engine core is down)"
                )
        return (
            f"chunk [{last.c}, {e}) {asks} with "
            f"{details['free']} free, in a pool of {details['pool']} blocks, the fewest "
            f"{details['pool_rules']}'s start-up check accepts for max_model_len="
            f"{longest_model_len(cfg)}: "
            f"{then}"
        )
    raise ValueError(pid)


def verdict_details(policy: Policy, pid: str, cfg: Config, last: Step) -> dict[str, Any]:
    """What :func:`describe` reads of ``policy``'s release for a last step breaking ``pid``:
    P3 the spare block it keys (:func:`spare_details`), P6 its R* (SPEC KV1), P8 its pool
    (:func:`pool_details`); nothing for the others."""
    if pid == "P3":
        return spare_details(kv_rules(policy.kv_release), cfg, last)
    if pid == "P6":
        return landing_details(kv_rules(policy.kv_release), cfg, last)
    if pid == "P8":
        return pool_details(policy, cfg, last)
    return {}


def landing_details(rules: KvRules, cfg: Config, last: Step) -> dict[str, Any]:
    """P6's landings under ``rules`` (SPEC KV1, S-COVER): the release's R*, and R*_J when the
    last chunk keeps P6's rule at R* (so it breaks it at R*_J, where a sibling sharing the
    first J tokens lands)."""
    found: dict[str, Any] = {"resend_position": rules.resend(cfg)}
    r = found["resend_position"]
    checkpoint = rules.live_checkpoint(cfg, last.c, last.end)
    kept = rules.keeps(cfg, r // cfg.block - 1)
    if not props.misses_resend(cfg, last.c, last.end, r, kept, checkpoint):
        found["junction_position"] = rules.junction(cfg)
    return found


def spare_details(rules: KvRules, cfg: Config, last: Step) -> dict[str, Any]:
    """P3's claim when the last chunk keys a spare speculative block rather than crossing a
    block end under ``rules`` (0.30-0.31: SPEC P3, :func:`~chunkproof.spec.slots.spare_claims`)."""
    if crossing_claim(cfg, last.c, last.end, rules) is not None:
        return {}
    spares = spare_claims(cfg, last.c, last.end, rules)
    return {"spare_claim": spares[0]} if spares else {}


def pool_details(policy: Policy, cfg: Config, last: Step) -> dict[str, Any]:
    """What P8's verdict names (SPEC KV2): the release's smallest pool for max_model_len = P + 1,
    the blocks the last chunk asks (how many of them copy the tail, rule 2b, and how many the
    Mamba group asks when the chunk writes a prefill checkpoint, rule 2c), the blocks it takes
    (one more at an external hit whose chunk ends past x's Mamba block: rule 2e's miscount)
    and the free ones."""
    rules = pool_rules(policy.kv_release)
    pool = rules.startup_pool(cfg)
    copy = rules.tail_copy(cfg, last.c)
    mamba = rules.mamba_asked(cfg, last.c, last.end)
    checkpoint = mamba if rules.checkpoint(cfg, last.c, last.end) else 0
    mml = longest_model_len(cfg)
    return {
        "pool_rules": rules.releases,
        "pool": pool,
        "asked": asked_blocks(cfg, last.c, last.end, mml, mamba + copy),
        "taken": taken_blocks(cfg, last.c, last.end, mml, mamba + copy),
        "tail_copy": copy,
        "checkpoint_blocks": checkpoint,
        "free": free_blocks(cfg, last.c, pool, mml),
    }


def build_counterexample(
    policy: Policy,
    cfg: Config,
    pid: str,
    steps: list[Step],
    window: str,
    budget: tuple[int, int] | None,
    grid: dict[str, Any],
) -> Counterexample:
    """A SPEC C counterexample for ``steps``, whose last step breaks ``pid``."""
    low, high = budget_bounds(cfg, budget)
    details: dict[str, Any] = {"grid": grid, "order": "lexicographic: " + ", ".join(MINIMISED)}
    if pid == "P5":
        details["window"] = window
    if pid == "P8":
        details.update(pool_details(policy, cfg, steps[-1]))
    if pid in ("P3", "P6"):
        rules = kv_rules(policy.kv_release)
        details.update(verdict_details(policy, pid, cfg, steps[-1]))
        details.update(_slot_findings(policy, cfg, steps, high))
        _agree_with_oracle(pid, cfg, steps[-1], details, rules)
    model = Const(steps[-1].budget) if pid == "P7" else Adversarial(low, high)
    return Counterexample(
        policy=policy.name,
        source_sha256=policy.source_sha256,
        policy_options=policy.options,
        config=cfg,
        budget_model=model,
        property=pid,
        steps=tuple(steps),
        verdict=describe(pid, cfg, steps[-1], details),
        minimised=MINIMISED,
        details=details,
    )
