"""The ``chunkproof trace`` command line that names one configuration (SPEC CLI ``trace``):
what a report prints as a "reproduce" command."""

from __future__ import annotations

from typing import Any

from chunkproof.model.config import Config

TRACE_FLAGS: dict[str, tuple[str, Any]] = {
    "split_block": ("--split-block", int),
    "hash_block": ("--hash-block", int),
    "hash_lookahead": ("--hash-lookahead", int),
    "threshold": ("--threshold", int),
    "tokens": ("--tokens", int),
    "start": ("--start", int),
    "external": ("--external", int),
    "junction": ("--junction", int),
    "uncached_prefix": ("--uncached-prefix", int),
    "checkpoint_alignment": ("--checkpoint-alignment", int),
    "retention": ("--retention", int),
    "encoder_cache": ("--encoder-cache", int),
    "encoder_budget": ("--encoder-budget", int),
}
"""``trace``'s single-value flags beyond B, L, P, M, D, K, S and the items (Config field ->
flag)."""


def trace_arguments(cfg: Config) -> list[str]:
    """The ``trace`` flags that name ``cfg`` (every field not at its default)."""
    words = ["--block", str(cfg.block), "--lookahead", str(cfg.lookahead)]
    words += ["--prompt", str(cfg.prompt), "--max-sched", str(cfg.max_sched)]
    defaults = Config(block=cfg.block, prompt=cfg.prompt, max_sched=cfg.max_sched)
    if cfg.drop:
        words.append("--drop")
    if cfg.checkpoints:
        words.append("--checkpoints")
    if cfg.exact_junction:
        words.append("--exact-junction")
    for name, (flag, _) in TRACE_FLAGS.items():
        value = getattr(cfg, name)
        if name == "hash_block" and value == cfg.split_block:
            continue
        if value != getattr(defaults, name):
            words += [flag, str(value)]
    if cfg.items:
        words += ["--items", cfg.items.describe()]
    return words
