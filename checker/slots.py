"""The slot oracle: which Mamba state each live prefix-cache key holds after one prefill.

Pure math over a chunk-end sequence, written rule by rule after the slot note
(``reference/state-slot-semantics.md``) section 6; its section 1 gives the notation (N, B, h, S,
A, T, col, ckpos) and sections 2-5 the vLLM 0.33.0 behaviour each rule stands for. SPEC P3
(NOCROSS) says the oracle reports no violation; :func:`crossing_claim` is P3 for one chunk and is
exactly the test of rule 5's violation branch, so the checker's P3 edge test and the oracle agree.

Reading notes (where the note's section 6 is terse, the reading chosen here):

* drop is the *effective* EAGLE block drop: off whenever hash lookahead is on (section 1).
* Rule 7's junction variant is part of R2, which is fine-grained only (section 3), like T.
* Rule 9 for R > 0 keeps the R grid *and* the reachable boundaries (R4: "additionally keep").
* Rule 10 only lands on claims that are multiples of A (section 5, "Reachability").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import pairwise

from chunkproof.model.arith import cdiv, ck33, fl, valid

__all__ = ["Poison", "SlotReport", "SlotSetup", "crossing_claim", "oracle", "runs_past_block"]


@dataclass(frozen=True)
class SlotSetup:
    """One request's geometry and flags: the oracle's input (slot note 6, "Input").

    ``hash_block`` is h (default B) and must divide B; ``sched_block`` is S (default B), the lcm
    of the group block sizes, so a multiple of B. ``checkpoint_alignment`` is g (None: no internal
    checkpoints); ``retention`` is None (dense), 0, or R > 0; ``junction`` is J (0: off).
    """

    prompt: int
    block: int
    hash_block: int | None = None
    sched_block: int | None = None
    drop: bool = False
    hash_lookahead: int = 0
    checkpoint_alignment: int | None = None
    retention: int | None = None
    junction: int = 0
    start: int = 0

    def __post_init__(self) -> None:
        _check_setup(self)

    @property
    def hash_unit(self) -> int:
        """h: the hash block (slot note 1), B unless given."""
        return self.block if self.hash_block is None else self.hash_block

    @property
    def sched_unit(self) -> int:
        """S: the scheduler block (slot note 1), B unless given."""
        return self.block if self.sched_block is None else self.sched_block

    @property
    def eagle_drop(self) -> bool:
        """drop: EAGLE block drop, forced off by hash lookahead (slot note 1)."""
        return self.drop and self.hash_lookahead == 0

    @property
    def fine(self) -> bool:
        """fine = (h < B): fine-grained partial hits are on (slot note 6, "Input")."""
        return self.hash_unit < self.block

    @property
    def hit_unit(self) -> int:
        """A := h if fine else S (slot note 6 rule 1)."""
        return self.hash_unit if self.fine else self.sched_unit

    @property
    def tail(self) -> int | None:
        """T := ckpos(N, h, drop) if fine, else undefined (slot note 6 rule 1)."""
        return self.ckpos(self.prompt, self.hash_unit) if self.fine else None

    @property
    def resend_position(self) -> int:
        """R* := ckpos(N, A, drop), where an identical resend lands (slot note 5)."""
        return self.ckpos(self.prompt, self.hit_unit)

    @cached_property
    def reachable_columns(self) -> frozenset[int]:
        """Columns holding a reachable boundary, floored to A (slot note 6 rule 9, R4).

        The replay boundary N - 1 without drop; with drop max(S*floor((N-1)/S) - S, 0) and
        max(S*floor(N/S) - S, 0); plus J (and J - B with drop) when J > 0.
        """
        n, s = self.prompt, self.sched_unit
        points = [max(fl(n - 1, s) - s, 0), max(fl(n, s) - s, 0)] if self.eagle_drop else [n - 1]
        if self.junction > 0:
            points.append(self.junction)
            if self.eagle_drop:
                points.append(self.junction - self.block)
        return frozenset(fl(p, self.hit_unit) // self.block - 1 for p in points)

    def ckpos(self, n: int, unit: int) -> int:
        """ckpos(n, unit, drop), hash lookahead included (slot note 1; ``ck33``)."""
        return ck33(n, unit, self.eagle_drop, self.hash_lookahead)


@dataclass(frozen=True)
class Poison:
    """One violation: claim P keyed onto a block holding state@held (slot note 4.2).

    ``step`` is the index, in the chunk-end sequence, of the chunk end at which it happened.
    """

    claim: int
    held: int
    step: int


@dataclass(frozen=True)
class SlotReport:
    """The oracle's output (slot note 6 rule 10).

    ``live`` maps every live claim to the state its block holds, sound or not; ``covered`` (Cov)
    holds the claims whose block holds the claimed state; ``resend_hit`` is where an identical
    resend lands, poisoned entries included.
    """

    live: Mapping[int, int]
    covered: frozenset[int]
    violations: tuple[Poison, ...]
    resend_hit: int


@dataclass
class _Run:
    """The oracle's running state: frontier n, previous end, Live and V (slot note 6 rule 2)."""

    frontier: int
    prev: int
    live: dict[int, int] = field(default_factory=dict)
    violations: list[Poison] = field(default_factory=list)


def runs_past_block(start: int, end: int, block: int) -> bool:
    """SPEC P3 / slot note 4.2 for one chunk [start, end): it starts mid-block (start > 0,
    start mod B != 0) and runs past the end of its block (end > B*ceil(start/B)).

    Written in the policy subset, so the explorer evaluates this very rule over arrays.
    """
    return start > 0 and start % block != 0 and end > block * cdiv(start, block)


def crossing_claim(start: int, end: int, block: int) -> int | None:
    """The claim B*ceil(start/B) that R1(a) keys onto the block holding state@start when
    :func:`runs_past_block` holds, else None."""
    return block * cdiv(start, block) if runs_past_block(start, end, block) else None


def oracle(setup: SlotSetup, ends: Sequence[int], decode_steps: int = 0) -> SlotReport:
    """Slot note section 6 rules 1-11 for the chunk ends ``ends`` (e_1 < ... < e_m = N).

    ``decode_steps`` one-token decode chunks follow the prefill (rule 11).
    """
    _check_ends(setup, ends, decode_steps)
    run = _Run(frontier=setup.start // setup.block, prev=setup.start)  # slot note 6 rule 2
    for step, end in enumerate(_chunk_ends(setup, ends, decode_steps)):
        _step(setup, run, end, step)
    return _report(setup, run)


def _check_setup(setup: SlotSetup) -> None:
    """Reject geometry and flags outside slot note 6's "Input" with a one-line ValueError."""
    _require(setup.prompt >= 1, f"prompt must be >= 1, got {setup.prompt}")
    _require(setup.block >= 1, f"block must be >= 1, got {setup.block}")
    h, s = setup.hash_unit, setup.sched_unit
    _require(h >= 1 and setup.block % h == 0, f"hash_block {h} must divide block {setup.block}")
    _require(
        s >= 1 and s % setup.block == 0,
        f"sched_block {s} must be a multiple of block {setup.block}",
    )
    _require(setup.hash_lookahead >= 0, f"hash_lookahead must be >= 0, got {setup.hash_lookahead}")
    g = setup.checkpoint_alignment
    _require(g is None or g >= 1, f"checkpoint_alignment must be None or >= 1, got {g}")
    r = setup.retention
    _require(r is None or r >= 0, f"retention must be None or >= 0, got {r}")
    _require(setup.junction >= 0, f"junction must be >= 0, got {setup.junction}")
    _require(setup.start >= 0, f"start must be >= 0, got {setup.start}")


def _check_ends(setup: SlotSetup, ends: Sequence[int], decode_steps: int) -> None:
    """Reject a chunk-end sequence that is not start < e_1 < ... < e_m = N (slot note 1)."""
    _require(len(ends) > 0, "ends is empty: the last chunk end must be the prompt length")
    _require(
        all(a < b for a, b in pairwise((setup.start, *ends))),
        f"chunk ends must be strictly increasing and above start {setup.start}: {list(ends)}",
    )
    _require(ends[-1] == setup.prompt, f"last chunk end {ends[-1]} != prompt {setup.prompt}")
    _require(decode_steps >= 0, f"decode_steps must be >= 0, got {decode_steps}")


def _require(ok: bool, message: str) -> None:
    """Raise ``ValueError(message)`` unless ``ok``."""
    if not ok:
        raise ValueError(message)


def _chunk_ends(setup: SlotSetup, ends: Sequence[int], decode_steps: int) -> list[int]:
    """The prefill's chunk ends, then one-token decode steps [n, n+1) (slot note 6 rule 11)."""
    decode = range(setup.prompt + 1, setup.prompt + 1 + decode_steps)
    return [*ends, *decode]


def _step(setup: SlotSetup, run: _Run, end: int, step: int) -> None:
    """One chunk [s, e) with s the previous end (slot note 6 rules 3-8)."""
    start = run.prev
    cacheable = _cacheable(setup, end)
    checkpoint = _checkpoint(setup, start, end)
    _register_full_blocks(setup, run, start, end, cacheable, step)
    if checkpoint is not None:
        _rekey_checkpoint(setup, run, checkpoint)
    else:
        _register_tail(setup, run, end)
    run.frontier, run.prev = cacheable // setup.block, end  # slot note 6 rule 8


def _cacheable(setup: SlotSetup, end: int) -> int:
    """Slot note 6 rule 3: the cacheable count c := e, or S*floor(e/S) when not fine."""
    return end if setup.fine else fl(end, setup.sched_unit)


def _checkpoint(setup: SlotSetup, start: int, end: int) -> int | None:
    """Slot note 6 rule 4 (W6): the checkpoint ck the chunk [s, e) writes at col(e) - 1, or None.

    With g set, cp := ckpos(e, A, drop); ck := cp when V(s, e) holds and a block is reserved for
    it (R != 0, or the chunk reaches N).
    """
    alignment = setup.checkpoint_alignment
    if alignment is None:
        return None
    cp = setup.ckpos(end, setup.hit_unit)
    reserved = setup.retention != 0 or end >= setup.prompt
    if reserved and valid(start, end, cp, setup.hash_unit, setup.block, alignment):
        return cp
    return None


def _register_full_blocks(
    setup: SlotSetup, run: _Run, start: int, end: int, cacheable: int, step: int
) -> None:
    """Slot note 6 rule 5 (R1): claim (j+1)*B for every kept column j in [n, floor(c/B)).

    * j = col(e) (then e = (j+1)*B): the running block holds state@e, correct (R1(b)).
    * (j+1)*B = crossing_claim(s, e, B), i.e. j = col(s) with s mid-block: the block still holds
      state@s, a violation (R1(a), slot note 4.2).
    * Otherwise col(e) - 1 holding a checkpoint (rule 6 decides its key) or a null column (W3):
      nothing is keyed here.
    """
    block = setup.block
    running = cdiv(end, block) - 1  # col(e)
    crossing = crossing_claim(start, end, block)
    for column in range(run.frontier, cacheable // block):
        claim = (column + 1) * block
        if not _keeps(setup, column):
            continue
        if column == running:
            run.live[claim] = end
        elif claim == crossing:
            run.live[claim] = start
            run.violations.append(Poison(claim=claim, held=start, step=step))


def _rekey_checkpoint(setup: SlotSetup, run: _Run, checkpoint: int) -> None:
    """Slot note 6 rule 6 (R3): re-key the checkpoint block to ck, or evict its keys.

    It keeps ck when ck = ckpos(N, A, drop), or ck is on the block grid and the segment-only mask
    keeps block ck/B - 1, or ck = J > 0; the block then holds state@ck.
    """
    own = checkpoint == setup.resend_position  # ckpos(N, A, drop)
    on_grid = checkpoint % setup.block == 0
    segment = on_grid and _segment_keeps(setup, checkpoint // setup.block - 1)
    junction = setup.junction > 0 and checkpoint == setup.junction
    if own or segment or junction:
        run.live[checkpoint] = checkpoint


def _register_tail(setup: SlotSetup, run: _Run, end: int) -> None:
    """Slot note 6 rule 7 (R2): under fine hits, key T (or J <= N) when the chunk ends on it.

    Under fine hits c = e, so a prefill chunk (s < J automatically) ends on the position, and its
    running block holds state@e. A later crossing chunk can still poison the block's full-block
    claim through rule 5.
    """
    if setup.fine and end <= setup.prompt and end in (setup.tail, setup.junction):
        run.live[end] = end


def _keeps(setup: SlotSetup, column: int) -> bool:
    """Slot note 6 rule 9 (R4): the retention mask lets column j be keyed.

    R = None keeps every block; R = 0 only the reachable-boundary columns; R > 0 those plus the
    R grid (the segment-only mask).
    """
    if setup.retention is None:
        return True
    return _segment_keeps(setup, column) or column in setup.reachable_columns


def _segment_keeps(setup: SlotSetup, column: int) -> bool:
    """Slot note 6 rule 9, segment-only mask (used by rule 6).

    R = None: true; R = 0: false; R > 0: true if R/B <= 1 or (j+1)*B = 0 mod R.
    """
    retention = setup.retention
    if retention is None:
        return True
    if retention == 0:
        return False
    return retention <= setup.block or (column + 1) * setup.block % retention == 0


def _report(setup: SlotSetup, run: _Run) -> SlotReport:
    """Slot note 6 rule 10: Live, Cov = {P : Live[P] = P}, V, and the resend hit.

    The resend hit (no pool pressure) is the largest live claim P <= R* with P = 0 mod A
    (section 5), or 0; the lookup does not tell poisoned entries apart.
    """
    live = dict(sorted(run.live.items()))
    resend = setup.resend_position
    hit = max((p for p in live if p <= resend and p % setup.hit_unit == 0), default=0)
    return SlotReport(
        live=live,
        covered=frozenset(p for p, held in live.items() if p == held),
        violations=tuple(run.violations),
        resend_hit=hit,
    )
