"""Which encoder items a request holds, and which ones a step encodes: the state the encoder
cache needs when requests share it (SPEC N1; encoder-and-loops note sections 1-2).

vLLM has one ``EncoderCacheManager`` and one encoder compute budget per scheduler. What one
request's call decides depends on the others only through R, the capacity their referenced
entries leave (:func:`~chunkproof.model.config.encoder_room`), so the step needs, per
request, which entries it references. A call schedules items in position order and stops at
the first it cannot, and the scheduler frees an item once the request is past it, so a
request's items are: those before index e were encoded (or ended by the admission start c0
and were never needed), the rest were not. Its state for the shared cache is (c, e); e only
grows, and only a step that schedules tokens for the request moves it (the scheduler
allocates what the call returned after the request is scheduled).

What the request's own call decides is still a function of c (the argument of
:func:`~chunkproof.model.stages.held_embeds`): e matters to the other requests only. The
compute budget never decides when b0 >= C (vLLM's own b0 = C): a call's items need m + k <=
R, and R is at most C less what earlier calls of the step scheduled (their entries are
referenced), which is at most the budget they left. A smaller b0 with two requests that carry
items is outside the model (:func:`~chunkproof.spec.scheduler_step.encoder_exact`).

Written in the policy subset: the explorer's NumPy form and the symbolic scheduler step's Z3
form (:mod:`chunkproof.spec.scheduler_step_symbolic`) are derived from this one definition.
"""

from collections.abc import Callable
from dataclasses import dataclass

from chunkproof.model.config import Config
from chunkproof.model.policy import Stage
from chunkproof.model.stages import (
    ENCODER_CALL_SITES,
    encoder_v15,
    encoder_v24,
    encoder_v28,
    encoder_v33,
    first_refused,
)


def referenced_embeds(cfg: Config, c: int, encoded: int, margin: int) -> int:
    """The embeddings of the request's entries the cache references at state (c, e): the
    items before index e that end after max(c0, c - margin). ``_free_encoder_inputs`` frees an
    item once its end + margin <= c (note 2.4, margin per release as in
    :func:`~chunkproof.model.stages.held_embeds`); an item that ends by c0 was never encoded.
    The items are in position order, so the referenced ones are a run: a difference of prefix
    sums."""
    floor = max(cfg.start, c - margin)
    through = max(
        (item.before + item.length for item in cfg.mm_items if item.index < encoded), default=0
    )
    released = max(
        (item.before + item.length for item in cfg.mm_items if item.end <= floor), default=0
    )
    return max(through - released, 0)


def encoded_through(
    cfg: Config, c: int, n: int, shift: int, margin: int, scheduled_shift: int
) -> int:
    """The count of items up to the last one the call at (c, n) schedules or finds in the
    cache (0 when it looks at none): the items overlapping [c, c + n + scheduled_shift) before
    the first it refuses (:func:`~chunkproof.model.stages.first_refused`, the window widened
    by ``shift``). From 0.28 the call schedules the items only the shift shows
    (``scheduled_shift`` = shift: the drafter reads their embeddings); up to 0.27 it tests
    them and schedules none (``scheduled_shift`` = 0; note 1.3). A call with n = 0 returns at
    once. The request's e after a step that schedules it is max(e, this)."""
    refused = first_refused(cfg, c, n, shift, margin)
    window = c + n + scheduled_shift
    return max(
        (
            item.index + 1
            for item in cfg.mm_items
            if n > 0
            and item.end > c
            and item.start < window
            and (refused < 0 or item.start < refused)
        ),
        default=0,
    )


SCHEDULES_SHIFTED: dict[Callable[[Config, int, int], int], bool] = {
    encoder_v15: False,
    encoder_v24: False,
    encoder_v28: True,
    encoder_v33: True,
}
"""Whether each built-in encoder stage's call schedules the items only its shift shows
(:func:`encoded_through`): from 0.28 (``encoder_window_end`` includes the shift), not up to
0.27 (the embeddings range ends at c + n)."""


@dataclass(frozen=True)
class CallRules:
    """How a policy's encoder stage calls ``_try_schedule_encoder_inputs``: the window
    ``shift`` and the free ``margin`` (functions of the step view, as in
    :data:`~chunkproof.model.stages.ENCODER_CALL_SITES`), and whether the call schedules the
    items only the shift shows (:data:`SCHEDULES_SHIFTED`; ``None`` for real code, whose own
    call says which items it scheduled)."""

    shift: Callable[..., int]
    margin: Callable[..., int]
    scheduled_shift: bool | None


def call_rules(stage: Stage | None) -> CallRules | None:
    """The :class:`CallRules` of an encoder stage: a built-in one's from the tables, real
    code's from its stage (the release's call site); ``None`` for a stage of neither kind (a
    user's own function) or no stage."""
    if stage is None:
        return None
    if stage.function in SCHEDULES_SHIFTED:
        shift, margin = ENCODER_CALL_SITES[stage.function]
        return CallRules(shift, margin, SCHEDULES_SHIFTED[stage.function])
    own_shift = getattr(stage.source, "shift", None)
    own_margin = getattr(stage.source, "margin", None)
    if hasattr(stage.source, "run") and own_shift is not None and own_margin is not None:
        return CallRules(own_shift, own_margin, None)
    return None
