"""What each release accepts (SPEC S1b): start-up checks, and what a release's configuration
cannot be (history note sections 1, 2 and 9; the code of every release decides).

Each rule is a predicate in the policy subset, so the explorer evaluates it natively and the
prover translates it into a constraint on the symbolic parameters; ``reason`` says what a
configuration that breaks it is. A rule applies to the releases ``first``..``last`` (minor
versions of 0.x).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from chunkproof.model.config import Config


@dataclass(frozen=True)
class Rule:
    """A start-up check: ``holds(cfg)`` in the policy subset, and what breaking it means."""

    holds: Callable[[Config], bool]
    reason: str
    first: int = 15
    last: int = 99

    def applies_to(self, minor: int) -> bool:
        return self.first <= minor <= self.last


def threshold_at_least_block(cfg: Config) -> bool:
    """0.15-0.26: in align mode theta > 0 requires theta >= cache_config.block_size."""
    return cfg.threshold == 0 or cfg.threshold >= cfg.split_block


def block_within_budget(cfg: Config) -> bool:
    """0.17-0.26: cache_config.block_size <= max_num_batched_tokens."""
    return cfg.split_block <= cfg.max_sched


def hash_divides_blocks(cfg: Config) -> bool:
    """Every release: the hash block divides every prefix-cacheable group's block, the Mamba
    block B and the split grid G among them (``resolve_kv_cache_block_sizes``)."""
    return cfg.block % cfg.hash_block == 0 and cfg.split_block % cfg.hash_block == 0


def partial_hits_follow_hash(cfg: Config) -> bool:
    """SPEC S1b, 0.26-0.33: partial hash hits F are on exactly when H < B. The coordinator
    derives ``enable_partial_hash_hits`` from the configuration alone: a Mamba "align" group
    whose block exceeds the hash block, without context parallelism (0.26-0.28:
    ``dcp_world_size == 1 and ...``; 0.29-0.31 ``has_partial_mamba_group``; 0.32-0.33
    ``partial_hash_hits_enabled``), kept only while every prefix-cacheable group's manager
    supports fine-grained lookups (0.28+; the full-attention and Mamba managers both do). No
    user setting turns it off: 0.30-0.33's ``allow_partial_hash_hits`` is a parameter of
    ``get_kv_cache_coordinator`` the scheduler's ``KVCacheManager`` never passes (its default
    is True), and the scheduler's F (``mamba_partial_cache_hit``) is H < B_s and, from 0.28,
    the coordinator's flag."""
    return cfg.partial_hits == (cfg.hash_block < cfg.block)


def no_partial_hits(cfg: Config) -> bool:
    """Before 0.26 there are no partial hash hits."""
    return not cfg.partial_hits


def drop_is_eagle(cfg: Config) -> bool:
    """0.15-0.29: D is ``use_eagle``, on exactly with an EAGLE-family method, which is what
    gives L >= 1 (history note 5)."""
    return cfg.drop == (cfg.lookahead >= 1)


def drop_needs_eagle(cfg: Config) -> bool:
    """0.30+: the block drop is a setting of an EAGLE-family method (L >= 1)."""
    return not cfg.drop or cfg.lookahead >= 1


def no_hash_lookahead(cfg: Config) -> bool:
    """Before 0.33 there is no num_hash_lookahead_tokens."""
    return cfg.hash_lookahead == 0


def hash_lookahead_zero_or_lookahead(cfg: Config) -> bool:
    """0.33: L_h is L (prefix caching with the block drop needed) or 0."""
    return cfg.hash_lookahead == 0 or cfg.hash_lookahead == cfg.lookahead


def drop_off_with_hash_lookahead(cfg: Config) -> bool:
    """0.33: the EAGLE block drop is forced off whenever L_h > 0."""
    return not (cfg.drop and cfg.hash_lookahead > 0)


def no_connector_with_hash_lookahead(cfg: Config) -> bool:
    """0.33: a KV connector (external hits) sets L_h to 0."""
    return cfg.hash_lookahead == 0 or cfg.external == 0


def scheduler_block_covers_lookahead(cfg: Config) -> bool:
    """0.28+: multi-module MTP with prefix caching needs the scheduler block >= L when the
    block drop is configured (``kv_cache_coordinator``; in 0.33 the drop setting counts even
    when L_h > 0 turns it off)."""
    return not (cfg.drop or cfg.hash_lookahead > 0) or cfg.sched_block >= cfg.lookahead


def no_checkpoints(cfg: Config) -> bool:
    """Before 0.29 no backend exports internal prefill checkpoints."""
    return not cfg.checkpoints


def checkpoints_without_eagle(cfg: Config) -> bool:
    """0.29: K requires use_eagle off."""
    return not (cfg.checkpoints and cfg.drop)


def no_exact_junction(cfg: Config) -> bool:
    """Before 0.30 there is no exact shared-prefix checkpoint S."""
    return not cfg.exact_junction


def exact_junction_setting(cfg: Config) -> bool:
    """0.30+: S needs partial hits, an EAGLE-family drop setting and no re-prefillable tokens
    (L <= 1), so L = 1 (``kv_cache_manager``)."""
    return not cfg.exact_junction or (
        cfg.partial_hits and cfg.lookahead == 1 and (cfg.drop or cfg.hash_lookahead > 0)
    )


def no_junction(cfg: Config) -> bool:
    """Before 0.26 there is no shared-prefix junction J."""
    return cfg.junction == 0


def no_uncached_prefix(cfg: Config) -> bool:
    """Only 0.24-0.25 pass num_uncached_common_prefix_tokens u to the split."""
    return cfg.uncached_prefix == 0


def no_retention(cfg: Config) -> bool:
    """SPEC S1b, 0.15-0.23: every Mamba block is kept (R = None). 0.15 and 0.17 have no
    retention interval; 0.23 reads VLLM_PREFIX_CACHE_RETENTION_INTERVAL, but its
    ``_validate_prefix_cache_retention_interval`` refuses any value unless the model has a
    sliding-window group, which an attention + Mamba model has not."""
    return cfg.retention == -1


def retention_on_scheduler_grid(cfg: Config) -> bool:
    """SPEC S1b, 0.24-0.33: the retention interval R is None or a non-negative multiple of the
    scheduler block B_s (``_validate_prefix_cache_retention_interval``, which accepts any R
    >= 0 on that grid once the model has a Mamba group). 0.24-0.28 read R from the
    environment variable VLLM_PREFIX_CACHE_RETENTION_INTERVAL, 0.29+ from
    ``prefix_cache_retention_interval``: either is a configuration the release accepts."""
    return cfg.retention == -1 or cfg.retention % cfg.sched_block == 0


RULES = (
    Rule(threshold_at_least_block, "0 < theta < G (needs theta >= G)", last=26),
    Rule(block_within_budget, "G > max_num_batched_tokens", first=17, last=26),
    Rule(hash_divides_blocks, "a hash block H that does not divide B and G"),
    Rule(no_partial_hits, "partial hash hits F (from 0.26)", last=25),
    Rule(partial_hits_follow_hash, "partial hits F other than H < B (from 0.26)", first=26),
    Rule(drop_is_eagle, "D other than use_eagle (on exactly when L >= 1)", last=29),
    Rule(drop_needs_eagle, "the block drop D without an EAGLE-family method (L = 0)", first=30),
    Rule(no_hash_lookahead, "L_h > 0 (from 0.33)", last=32),
    Rule(hash_lookahead_zero_or_lookahead, "L_h other than 0 or L", first=33),
    Rule(drop_off_with_hash_lookahead, "the EAGLE block drop on with L_h > 0", first=33),
    Rule(no_connector_with_hash_lookahead, "an external (connector) hit with L_h > 0", first=33),
    Rule(scheduler_block_covers_lookahead, "B_s < L with the block drop configured", first=28),
    Rule(no_checkpoints, "internal prefill checkpoints K (from 0.29)", last=28),
    Rule(checkpoints_without_eagle, "checkpoints K with use_eagle", first=29, last=29),
    Rule(no_exact_junction, "the exact junction S (from 0.30)", last=29),
    Rule(exact_junction_setting, "S without partial hits, L = 1 and the drop setting", first=30),
    Rule(no_junction, "a shared-prefix junction J (from 0.26)", last=25),
    Rule(no_uncached_prefix, "u > 0 (only 0.24-0.25 pass it)", last=23),
    Rule(no_uncached_prefix, "u > 0 (only 0.24-0.25 pass it)", first=26),
    Rule(no_retention, "a retention interval R (from 0.24)", last=23),
    Rule(
        retention_on_scheduler_grid, "a retention interval that is not a multiple of B_s", first=24
    ),
)
"""Every rule, with the releases it applies to."""


def rules_for(minor: int) -> tuple[Rule, ...]:
    """The acceptance rules of vLLM 0.``minor``."""
    return tuple(rule for rule in RULES if rule.applies_to(minor))
