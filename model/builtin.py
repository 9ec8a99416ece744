"""The built-in policies (SPEC V): every released variant, and the proposed fixes."""

from __future__ import annotations

from chunkproof.model import acceptance, splits, stages
from chunkproof.model.errors import PolicyError
from chunkproof.model.policy import FIXED_INPUTS, Policy, Stage, StageFunction

LATEST = "vllm-0.34"


def _composition(
    cap: StageFunction,
    split: StageFunction,
    reserve: StageFunction | None,
    encoder: StageFunction,
) -> tuple[Stage, ...]:
    """The stages in the order ``schedule()`` applies them (history note 6; encoder-and-loops
    note 3): the encoder cap before the split up to 0.27 (C1-C4, no reservation), after it
    and before the reservation from 0.28 (C5-C9, #51603)."""
    if reserve is None:
        return (Stage("cap", cap), Stage("encoder", encoder), Stage("split", split))
    return (
        Stage("cap", cap),
        Stage("split", split),
        Stage("encoder", encoder),
        Stage("reservation", reserve),
    )


def _encoder(minor: int) -> StageFunction:
    """The encoder cap of vLLM 0.``minor`` (encoder-and-loops note 6: E1-E3 with F1/F2 up to
    0.23, E3 with F3 in 0.24-0.27, E4-E6 with F4 in 0.28-0.32, E7 with F5 in 0.33)."""
    if minor <= 23:
        return stages.encoder_v15
    if minor <= 27:
        return stages.encoder_v24
    if minor <= 32:
        return stages.encoder_v28
    return stages.encoder_v33


FIXED_FROM = {
    "max_model_len": 15,
    "load_kv_async": 15,
    "defer_prefills": 24,
    "pad_spec_decode": 25,
    "local_prefill_interval": 33,
}
"""The first release (minor) whose ``schedule()`` reads each input the model fixes
(:data:`~chunkproof.model.policy.FIXED_INPUTS`)."""


def _fixed(minor: int) -> tuple[str, ...]:
    """What the model fixes of release 0.``minor``'s ``schedule()``: the inputs it reads
    (:data:`FIXED_FROM`), as its source reading names them."""
    return tuple(text for key, text in FIXED_INPUTS.items() if minor >= FIXED_FROM[key])


def _release(
    name: str,
    releases: tuple[str, ...],
    split_variant: str,
    split: StageFunction,
    composition: str,
) -> Policy:
    """A released variant: C1-C4 have no reservation, C5-C9 add R1, C8-C9 a per-step theta;
    every release has its encoder cap (:func:`_encoder`)."""
    number = int(composition[1:])
    cap = stages.cap_lone_request if number >= 8 else stages.cap_static_threshold
    reserve = stages.reserve_r1 if number >= 5 else None
    minor = int(releases[0].split(".")[1])
    return Policy(
        name=name,
        summary=f"vLLM {releases[0]}"
        + (f"-{releases[-1]}" if len(releases) > 1 else "")
        + f": split {split_variant}"
        + (", reservation R1" if reserve else "")
        + f", composition {composition}",
        stages=_composition(cap, split, reserve, _encoder(minor)),
        split_variant=split_variant,
        reservation_variant="R1" if reserve else None,
        composition=composition,
        releases=releases,
        acceptance=acceptance.rules_for(minor),
        fixed=_fixed(minor),
    )


def _keep_policy(
    name: str, summary: str, split: StageFunction, variant: str, composition: str, minor: int
) -> Policy:
    """A #40709 variant (SPEC V): the split ``split`` in place of the release's, with the
    static-threshold cap and no reservation of release 0.``minor`` (C1 or C4), its encoder cap,
    its acceptance rules and its cache manager (SPEC KV1)."""
    return Policy(
        name=name,
        summary=summary,
        stages=_composition(stages.cap_static_threshold, split, None, _encoder(minor)),
        split_variant=variant,
        reservation_variant=None,
        composition=composition,
        acceptance=acceptance.rules_for(minor),
        cache_release=f"0.{minor}.0",
        fixed=_fixed(minor),
    )


_POLICIES: tuple[Policy, ...] = (
    _release("vllm-0.15", ("0.15.0", "0.15.1", "0.16.0"), "V1", splits.split_v1, "C1"),
    _release(
        "vllm-0.17",
        (
            "0.17.0",
            "0.17.1",
            "0.18.0",
            "0.18.1",
            "0.19.0",
            "0.19.1",
            "0.20.0",
            "0.20.1",
            "0.20.2",
            "0.21.0",
            "0.22.0",
            "0.22.1",
        ),
        "V2",
        splits.split_v2,
        "C1",
    ),
    _release("vllm-0.23", ("0.23.0",), "V2b", splits.split_v2b, "C2"),
    _release("vllm-0.24", ("0.24.0",), "V3", splits.split_v3, "C3"),
    _release("vllm-0.25", ("0.25.0", "0.25.1"), "V3", splits.split_v3, "C4"),
    _release("vllm-0.26", ("0.26.0",), "V4", splits.split_v4, "C4"),
    _release("vllm-0.27", ("0.27.0", "0.27.1"), "V5", splits.split_v5, "C4"),
    _release("vllm-0.28", ("0.28.0",), "V5", splits.split_v5, "C5"),
    _release("vllm-0.29", ("0.29.0",), "V6", splits.split_v6, "C6"),
    _release("vllm-0.30", ("0.30.0",), "V7", splits.split_v7, "C7"),
    _release("vllm-0.31", ("0.31.0",), "V7'", splits.split_v7, "C8"),
    _release("vllm-0.32", ("0.32.0",), "V8", splits.split_v8, "C8"),
    _release("vllm-0.33", ("0.33.0",), "V9", splits.split_v9, "C9"),
    _release("vllm-0.34", ("0.34.0",), "V9", splits.split_v9, "C9"),
    Policy(
        name="lookahead-in-split",
        summary="proposed fix for the lookahead livelock: V9 resolves window ends itself; "
        "R1 leaves aligned ends alone (SPEC V)",
        stages=_composition(
            stages.cap_lone_request,
            splits.split_lookahead_in_split,
            stages.reserve_unaligned,
            stages.encoder_v33,
        ),
        split_variant="V9+window",
        reservation_variant="R1-unaligned",
        composition="C9",
        acceptance=acceptance.rules_for(33),
        fixed=_fixed(33),
    ),
    _keep_policy(
        "keep-subblock",
        "proposed fix for the sub-block zero collapse: V2 keeps an unfloored chunk instead of 0 "
        "(SPEC V)",
        splits.split_keep_subblock,
        "V2+keep",
        "C1",
        17,
    ),
    _keep_policy(
        "keep-subblock-v5",
        "#40709 on vLLM 0.27: V5 keeps a sub-block chunk instead of flooring it to 0; encoder "
        "cap before the split (C4)",
        splits.split_keep_subblock_v5,
        "V5+keep",
        "C4",
        27,
    ),
    _keep_policy(
        "keep-subblock-realign",
        "#40709 review on vLLM 0.27: V5 keeps a sub-block chunk from a grid start only, so the "
        "next chunk ends on the grid; encoder cap before the split (C4)",
        splits.split_keep_subblock_realign,
        "V5+keep-aligned",
        "C4",
        27,
    ),
    _keep_policy(
        "keep-subblock-encoder-only",
        "#40709 narrowed to #40707 on vLLM 0.27: V5 keeps a sub-block chunk only when the "
        "encoder cap forced its end (C4)",
        splits.split_keep_subblock_encoder_only,
        "V5+keep-encoder",
        "C4",
        27,
    ),
)

ALIASES = {"vllm-latest": LATEST}


def builtin_policies() -> tuple[Policy, ...]:
    """Every built-in policy, releases first in release order."""
    return _POLICIES


def is_builtin(name: str) -> bool:
    """Whether ``name`` is a built-in policy or an alias of one."""
    return any(policy.name == ALIASES.get(name, name) for policy in _POLICIES)


def get_builtin(name: str) -> Policy:
    """The built-in policy called ``name`` (or an alias such as ``vllm-latest``)."""
    resolved = ALIASES.get(name, name)
    for policy in _POLICIES:
        if policy.name == resolved:
            return policy
    known = ", ".join([p.name for p in _POLICIES] + list(ALIASES))
    raise PolicyError(f"unknown policy {name!r}; built-in policies: {known}")


def policy_for_release(version: str) -> Policy:
    """The built-in variant of a vLLM release such as ``0.25.1``."""
    for policy in _POLICIES:
        if version in policy.releases:
            return policy
    raise PolicyError(f"no built-in variant for vLLM {version} (align mode starts at 0.15.0)")
