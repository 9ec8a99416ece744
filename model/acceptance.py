"""What each release accepts at start-up (SPEC S1b; history note section 1).

Each rule is a predicate in the policy subset, so the explorer evaluates it natively and the
prover translates it into a constraint on the symbolic parameters; ``reason`` says what a
configuration that breaks it is.
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


def threshold_at_least_block(cfg: Config) -> bool:
    """0.15-0.26: in align mode theta > 0 requires theta >= B."""
    return cfg.threshold == 0 or cfg.threshold >= cfg.block


def block_within_budget(cfg: Config) -> bool:
    """0.17-0.26: B <= max_num_batched_tokens."""
    return cfg.block <= cfg.max_sched


def no_hash_lookahead(cfg: Config) -> bool:
    """Before 0.33 there is no num_hash_lookahead_tokens."""
    return cfg.hash_lookahead == 0


def hash_lookahead_zero_or_lookahead(cfg: Config) -> bool:
    """0.33: L_h is L (prefix caching with the block drop needed) or 0."""
    return cfg.hash_lookahead == 0 or cfg.hash_lookahead == cfg.lookahead


def drop_off_with_hash_lookahead(cfg: Config) -> bool:
    """0.33: the EAGLE block drop is forced off whenever L_h > 0."""
    return not (cfg.drop and cfg.hash_lookahead > 0)


THRESHOLD = Rule(threshold_at_least_block, "0 < theta < B (needs theta >= B)")
BLOCK = Rule(block_within_budget, "B > max_num_batched_tokens")
NO_HASH_LOOKAHEAD = Rule(no_hash_lookahead, "L_h > 0 (exists from 0.33 on)")
HASH_LOOKAHEAD = Rule(hash_lookahead_zero_or_lookahead, "L_h other than 0 or L")
DROP = Rule(drop_off_with_hash_lookahead, "the EAGLE block drop on with L_h > 0")

OLD = (THRESHOLD, NO_HASH_LOOKAHEAD)
"""0.15-0.16."""
MID = (BLOCK, THRESHOLD, NO_HASH_LOOKAHEAD)
"""0.17-0.26."""
NEW = (NO_HASH_LOOKAHEAD,)
"""0.27-0.32."""
LATEST = (HASH_LOOKAHEAD, DROP)
"""0.33."""
