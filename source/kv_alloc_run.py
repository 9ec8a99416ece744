"""A vLLM tree's own KV block allocation for one request, compiled from its source text
(SPEC KV2): how many blocks of a finite pool each chunk of a prefill takes, per KV cache group,
and which chunk the pool refuses.

Standard library only beside :mod:`chunkproof.source.kv_run`, whose compiler it reuses with
``BlockPool`` bound to :class:`CountingPool`; like it, chunkproof never calls it on a user's
tree: the allocation fidelity tests run it on the cached releases. The manager is the tree's
own ``KVCacheManager``, built by its ``__init__`` over the groups chunkproof's model has (a
full-attention group of block G and a Mamba "align" group of block B, one pool shared by both
as vLLM's hybrid models share it) and asked, chunk by chunk, exactly as the scheduler asks it:
``allocate_slots(request, n, num_lookahead_tokens=...)``, the request ``WAITING`` at its first
chunk and ``RUNNING`` after, each call a step that starts and ends as ``schedule()`` has it
(:func:`end_step`; :class:`TreeAllocator`). Over a :class:`CachingPool` it also gives which
state each Mamba key's block holds after each chunk (:class:`TreeSlots`) and where an identical
resend lands after such a prefill (:func:`resend_after_prefill`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chunkproof.source.extraction import SourceError
from chunkproof.source.kv_run import (
    MAMBA_GROUP,
    REQUEST_FILE,
    CachedBlock,
    KvConfig,
    KvTree,
    RecordingPool,
    call_with,
    compiled_kv_tree,
    hash_end,
    hash_identity,
    kv_cache_config,
    kv_request,
    request_hash,
)

MANAGER_FILE = "vllm/v1/core/kv_cache_manager.py"


class PoolExhausted(ValueError):
    """``BlockPool.get_new_blocks``'s ``ValueError`` when fewer blocks are free than asked
    (the stub pools raise this subclass, so that a caller tells it from other errors)."""


class PoolBlock(CachedBlock):
    """A block of :class:`CountingPool`: block 0 is the null block."""

    def __init__(self, block_id: int) -> None:
        super().__init__(-1, -1)
        self.block_id = block_id
        self.is_null = block_id == 0
        self.ref_cnt = 1


class CountingPool(RecordingPool):
    """``BlockPool`` of ``num_gpu_blocks`` blocks, block 0 the null block as in vLLM's pool (so
    ``num_gpu_blocks - 1`` are free at first): it hands out fresh blocks and counts the free
    ones. Nothing is cached before the request, so no lookup hits; what the cache code keys is
    recorded as :class:`RecordingPool` records it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.num_gpu_blocks: int = kwargs.get("num_gpu_blocks", args[0] if args else 0)
        self.null_block = PoolBlock(0)
        self.free: int = self.num_gpu_blocks - 1
        self.issued = 0

    def get_num_free_blocks(self) -> int:
        return self.free

    def get_new_blocks(self, num_blocks: int) -> list[PoolBlock]:
        """vLLM's ``BlockPool.get_new_blocks``: ``num_blocks`` fresh blocks, or its
        ``ValueError`` when fewer are free."""
        if num_blocks > self.free:
            raise PoolExhausted(f"Cannot get {num_blocks} free blocks from the pool")
        self.free -= num_blocks
        first = self.issued + 1
        self.issued += num_blocks
        return [PoolBlock(i) for i in range(first, first + num_blocks)]

    def free_blocks(self, blocks: Sequence[PoolBlock], **order: Any) -> None:
        """Drop a reference to each of ``blocks``; one no request holds is free again (a
        cached one too: vLLM's pool counts an evictable block free). 0.23 also says where in
        the free queue, which does not matter here."""
        for block in blocks:
            if not block.is_null:
                block.ref_cnt -= 1
                self.free += block.ref_cnt == 0

    def is_block_writable(self, block: PoolBlock) -> bool:
        return not block.is_null and block.ref_cnt == 1 and block.block_hash is None

    def move_block_hashes(self, src_block: PoolBlock, dst_block: PoolBlock) -> None:
        """The cache entry of ``src_block`` now names ``dst_block`` (its private copy)."""
        dst_block.block_hash, src_block.block_hash = src_block.block_hash, None
        dst_block.block_hash_num_tokens = src_block.block_hash_num_tokens

    def _maybe_evict_cached_block(self, block: PoolBlock) -> bool:
        """Drop ``block``'s cache entry (its hash), if it has one; the block stays allocated."""
        cached = block.block_hash is not None
        block.block_hash, block.block_hash_num_tokens = None, None
        return cached

    def touch(self, blocks: Sequence[PoolBlock]) -> None:
        """Take a reference to each of ``blocks`` (a hit): a free one is free no longer."""
        for block in blocks:
            if not block.is_null:
                self.free -= block.ref_cnt == 0
                block.ref_cnt += 1

    def get_cached_block(self, key: Any, group_ids: Sequence[int]) -> None:
        return None


class CachingPool(CountingPool):
    """:class:`CountingPool` that keeps what the cache code keys, as vLLM's prefix cache does:
    a block the code keys (a full block through the retention mask, or a partial tail) is found
    again under its group and the prefix its hash names (:func:`hash_identity`), also once no
    request holds it (an evictable block, counted free).

    Its free blocks are vLLM's free queue (``BlockPool`` over ``FreeKVCacheBlockQueue``), in
    eviction order: blocks 1 to N - 1 in id order at first; a new block is taken from the
    front, its cache entries dropped (evicted); a block whose last reference goes is put at the
    back, or at the front where the code frees it with ``prepend`` (0.23 on, uncached scratch
    blocks), in the order the code frees them (the managers free a request's tail first); a
    hit takes its free blocks out of the queue. So an entry stays until the code drops or moves
    it or its block is handed out again."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.index: dict[tuple[int, bytes], PoolBlock] = {}
        self.queue: list[PoolBlock] = [PoolBlock(i) for i in range(1, self.num_gpu_blocks)]
        """The free blocks in eviction order (:attr:`CountingPool.free` is its length)."""
        for block in self.queue:
            block.ref_cnt = 0

    def get_new_blocks(self, num_blocks: int) -> list[PoolBlock]:
        if num_blocks > len(self.queue):
            raise PoolExhausted(f"Cannot get {num_blocks} free blocks from the pool")
        taken, self.queue = self.queue[:num_blocks], self.queue[num_blocks:]
        for block in taken:
            self._maybe_evict_cached_block(block)
            block.ref_cnt = 1
        self.issued += num_blocks
        self.free = len(self.queue)
        return taken

    def free_blocks(self, blocks: Sequence[PoolBlock], **order: Any) -> None:
        freed = []
        for block in blocks:
            if not block.is_null:
                block.ref_cnt -= 1
                if block.ref_cnt == 0:
                    freed.append(block)
        self.queue = [*freed, *self.queue] if order.get("prepend") else [*self.queue, *freed]
        self.free = len(self.queue)

    def touch(self, blocks: Sequence[PoolBlock]) -> None:
        for block in blocks:
            if not block.is_null:
                if block.ref_cnt == 0:
                    self.queue.remove(block)
                block.ref_cnt += 1
        self.free = len(self.queue)

    def cache_full_blocks(self, **call: Any) -> None:
        super().cache_full_blocks(**call)
        first, last = call["num_cached_blocks"], call["num_full_blocks"]
        mask = call.get("block_mask") or [True] * (last - first)
        for index, keep in zip(range(first, last), mask, strict=True):
            block = call["blocks"][index]
            if keep and not block.is_null:
                self.index[(call["kv_cache_group_id"], block.block_hash)] = block

    def cache_partial_block(self, **call: Any) -> bytes:
        """vLLM's ``BlockPool.cache_partial_block`` (0.26 on): the block's entries go first when
        the call says its contents were replaced (``replace_existing_hashes``, 0.30 on: a
        re-keyed checkpoint) or when its primary entry names a shorter prefix than the new one;
        otherwise the new entry joins them. A block left without a primary entry takes it."""
        block, end, group = call["block"], call["num_tokens"], call["kv_cache_group_id"]
        key = request_hash(call.get("request"), end)
        already = self.index.get((group, key)) is block
        primary = block.block_hash_num_tokens if block.block_hash is not None else None
        shorter = not already and primary is not None and primary < end
        if call.get("replace_existing_hashes") or shorter:
            self._drop_entries(block)
        if block.block_hash is None:
            super().cache_partial_block(**call)
            block.block_hash = key
        else:
            self.tails.setdefault(group, set()).add(end)
        self.index[(group, key)] = block
        return key

    def _drop_entries(self, block: PoolBlock) -> None:
        """Every entry that names ``block`` leaves the index, its primary hash too."""
        for key in [key for key, cached in self.index.items() if cached is block]:
            del self.index[key]
        block.block_hash, block.block_hash_num_tokens = None, None

    def get_cached_block(self, key: Any, group_ids: Sequence[int]) -> list[PoolBlock] | None:  # type: ignore[override]
        prefix = hash_identity(key)
        found = [self.index.get((group, prefix)) for group in group_ids]
        return None if None in found else found  # type: ignore[return-value]

    def _maybe_evict_cached_block(self, block: PoolBlock) -> bool:
        cached = block.block_hash is not None
        self._drop_entries(block)
        return cached

    def move_block_hashes(self, src_block: PoolBlock, dst_block: PoolBlock) -> None:
        for key in [key for key, cached in self.index.items() if cached is src_block]:
            self.index[key] = dst_block
        super().move_block_hashes(src_block, dst_block)


class KVCacheBlocks:
    """The manager's return value (vLLM's is a dataclass; decorators are not compiled)."""

    def __init__(self, blocks: Any) -> None:
        self.blocks = blocks


class RequestStatus:
    """``vllm.v1.request.RequestStatus``, by the names the cache code compares."""

    WAITING = "WAITING"
    RUNNING = "RUNNING"
    PREEMPTED = "PREEMPTED"


@dataclass(frozen=True)
class TreeAllocation:
    """One ``allocate_slots`` call: whether the pool granted it, the free blocks after it, the
    blocks (not null) the request holds per group after it (attention, Mamba), and the pool's
    error where the manager counted enough free blocks and then took more than there were
    (``BlockPool.get_new_blocks`` raises; ``""``: it did not)."""

    granted: bool
    free: int
    held: tuple[int, ...]
    raised: str = ""


def allocation_tree(root: Path, pool: type = CountingPool) -> KvTree:
    """The tree's cache files compiled over ``pool`` (:class:`CountingPool`, or
    :class:`CachingPool` where a later request looks up what an earlier one cached), with the
    manager's ``KVCacheBlocks``, the request statuses and 0.34's ``untracked_list`` provided."""
    tree = compiled_kv_tree(root, pool)
    tree.files[MANAGER_FILE]["KVCacheBlocks"] = KVCacheBlocks
    for name, namespace in tree.files.items():
        if name != REQUEST_FILE:
            namespace["RequestStatus"] = RequestStatus
            if "untracked_list" in namespace:  # 0.34: a list the collector does not track
                namespace["untracked_list"] = list
    return tree


def kv_manager(
    tree: KvTree, cfg: KvConfig, use_eagle: bool, num_blocks: int, max_model_len: int
) -> Any:
    """The tree's ``KVCacheManager`` for ``cfg`` over a pool of ``num_blocks`` blocks (and
    ``max_model_len``): the groups of :func:`~chunkproof.source.kv_run.kv_cache_config`, the
    Mamba group's ``num_speculative_blocks`` the speculative tokens k = L (vLLM's Mamba
    layers set it to ``num_speculative_tokens``) and one prefill checkpoint block when the
    backend exports internal checkpoints (K), the exact shared-prefix checkpoint opted in
    when S is on (``enable_mamba_fine_grained_prefix_cache`` in 0.30,
    ``enable_mamba_shared_prefix_checkpoint`` from 0.31), watermark 0."""
    checkpoint_blocks = 1 if cfg.checkpoints else 0
    return call_with(
        tree["KVCacheManager"],
        kv_cache_config=kv_cache_config(tree, cfg, num_blocks, cfg.lookahead, checkpoint_blocks),
        max_model_len=max_model_len,
        max_in_flight_tokens=1 << 16,
        use_eagle=use_eagle,
        enable_caching=True,
        scheduler_block_size=cfg.sched_block,
        hash_block_size=cfg.hash_block,
        num_hash_lookahead_tokens=cfg.hash_lookahead,
        num_prefill_lookahead=cfg.lookahead,
        enable_mamba_fine_grained_prefix_cache=cfg.exact_junction,
        enable_mamba_shared_prefix_checkpoint=cfg.exact_junction,
        watermark=0.0,
    )


def end_step(manager: Any) -> None:
    """What ``schedule()`` does with the manager after its loops (0.26 on): it drains the
    boundary-state hand-offs (0.29 on) and the copy-on-write copies, and returns the blocks
    the copies retained to the pool; with synchronous scheduling the copies have run before
    the next step, so they are returned at once (``_free_cow_retained_blocks``)."""
    if hasattr(manager, "take_boundary_state_offloads"):
        manager.take_boundary_state_offloads()
    if hasattr(manager, "take_kv_cache_block_copies"):
        copies, retained = manager.take_kv_cache_block_copies()
        if copies:
            manager.block_pool.free_blocks(retained)


def fresh_request(
    cfg: KvConfig, request_id: str, tree: KvTree, prefix: tuple[int, int] | None = None
) -> Any:
    """A request of ``cfg``'s prompt (every other's, or one sharing ``prefix``'s first tokens
    with them: :func:`~chunkproof.source.kv_run.kv_request`) as the waiting queue holds it:
    nothing computed, no junction."""
    request = kv_request(cfg, request_id, tree, prefix)
    request.__dict__.update(
        num_computed_tokens=0,
        status=RequestStatus.WAITING,
        num_in_flight_tokens=0,
        num_output_tokens=0,
        shared_prefix_boundary=0,
        spec_token_ids=[],
        num_stale_output_tokens=0,
    )
    return request


def schedule_chunk(
    manager: Any,
    request: Any,
    chunk: int,
    lookahead: int,
    hit: int = 0,
    hit_blocks: Any = None,
    external: int = 0,
) -> bool:
    """One step that schedules ``chunk`` tokens of a request: ``allocate_slots`` between the
    step's start and end (:func:`end_step`), given the local hit and its blocks and the
    external hit (a connector's, loaded synchronously) at admission as the waiting loop gives
    them; a granted chunk is computed, and the request is running from then on. Whether the
    pool granted it."""
    if hasattr(manager, "new_step_starts"):
        manager.new_step_starts()
    admission: dict[str, Any] = {}
    if hit_blocks is not None:
        admission.update(num_new_computed_tokens=hit, new_computed_blocks=hit_blocks)
    if external:
        admission.update(num_external_computed_tokens=external)
    granted = manager.allocate_slots(request, chunk, num_lookahead_tokens=lookahead, **admission)
    end_step(manager)
    if granted is not None:
        request.__dict__.update(
            num_computed_tokens=request.num_computed_tokens + hit + external + chunk,
            status=RequestStatus.RUNNING,
        )
    return granted is not None


def park_for_load(manager: Any, request: Any, external: int) -> bool:
    """The step that starts an asynchronous load of a connector's external hit of ``external``
    tokens (SPEC KV3, KV2 rule 2e), as the waiting loop of 0.23 on asks it: ``allocate_slots`` with
    no new tokens, no lookahead slots (``limit_lookahead_tokens``) and the cache keys delayed
    (``delay_cache_blocks``); granted, the request holds its blocks while the load runs. Then
    the load completes as ``_update_waiting_for_remote_kv`` has it: the blocks are cached and
    ``num_computed_tokens`` is the hit, the request waiting again. Whether the pool granted
    the blocks."""
    if hasattr(manager, "new_step_starts"):
        manager.new_step_starts()
    granted = manager.allocate_slots(
        request,
        0,
        num_lookahead_tokens=0,
        num_external_computed_tokens=external,
        delay_cache_blocks=True,
    )
    end_step(manager)
    if granted is None:
        return False
    request.num_computed_tokens = external
    manager.cache_blocks(request, external)
    return True


NO_STATE = -1
"""What :class:`TreeSlots` says of a block no chunk wrote a state into."""


def tree_lookup(manager: Any, request: Any) -> tuple[int, Any]:
    """The hit the tree's ``get_computed_blocks`` finds for a waiting ``request``, and its
    blocks, which the request's next admission takes; as the waiting loop does, the request's
    junction J is set to the shared-prefix boundary the lookup gives with them (0.26 on: the
    attention group's longer hit, where the Mamba group's is shorter)."""
    found = manager.get_computed_blocks(request)
    blocks, hit = found[:2]
    if len(found) > 2:
        request.shared_prefix_boundary = int(found[2])
    return int(hit), blocks


class TreeSlots:
    """A fresh request of ``cfg``'s prompt computing its prefill one chunk per step
    (:meth:`compute`) through the tree's own ``KVCacheManager`` over a :class:`CachingPool` of
    ``num_blocks`` blocks, and the state each of its Mamba blocks holds (SPEC P3: a key names a
    state, and its block should hold that one). The block tables, reservations, copies and
    keys are the tree's own; the one rule not read from source is the kernel's write: a chunk
    [s, e) writes state@e into the request's block at column cdiv(e, B) - 1, and its internal
    checkpoint into the block the manager reserved for it (0.30 on: ``_checkpoints`` names the
    position and the block; 0.29: ``_num_checkpoint_blocks``, the block at column
    cdiv(e, B) - 2, holding the state at its end); a copy-on-write copy gives its destination
    the source's state. A block no chunk wrote holds :data:`NO_STATE`. The request can be
    preempted (:meth:`preempt`) or replaced by an identical fresh one (:meth:`resend`); either
    is admitted again at the hit the tree's lookup finds (:meth:`lookup`)."""

    def __init__(self, root: Path, cfg: KvConfig, use_eagle: bool, num_blocks: int) -> None:
        self.cfg = cfg
        self.tree = allocation_tree(root, CachingPool)
        self.manager = kv_manager(self.tree, cfg, use_eagle, num_blocks, 1 << 20)
        self.request = fresh_request(cfg, "first", self.tree)
        self.salt = 0
        """The last salt :meth:`sibling` gave a prompt."""
        self.found: tuple[int, Any] = (0, None)
        """The hit :meth:`lookup` found and its blocks, which the next chunk's admission
        takes."""
        self.holds: dict[int, int] = {}
        self._copies: list[Any] = []
        take = getattr(self.manager, "take_kv_cache_block_copies", None)
        if take is not None:

            def recording() -> Any:
                copies, retained = take()
                self._copies.extend(copies or ())
                return copies, retained

            self.manager.take_kv_cache_block_copies = recording

    def compute(self, chunk: int) -> None:
        """One step that schedules and computes ``chunk`` tokens (:func:`schedule_chunk`; a
        waiting request is admitted at the hit :meth:`lookup` found, 0 without one), and the
        states it writes. A chunk the pool refuses is a ``ValueError``."""
        request = self.request
        hit, blocks = self.found
        self.found = (0, None)
        if not schedule_chunk(self.manager, request, chunk, self.cfg.lookahead, hit, blocks):
            raise ValueError(
                f"the pool refused the chunk of {chunk} tokens at {request.num_computed_tokens}"
            )
        for moved in self._copies:
            self.holds[moved.dst_block_id] = self.holds.get(moved.src_block_id, NO_STATE)
        self._copies.clear()
        end = request.num_computed_tokens
        mamba = self.manager.coordinator.single_type_managers[MAMBA_GROUP]
        blocks = mamba.req_to_blocks[request.request_id]
        column = -(-end // self.cfg.block) - 1  # cdiv(e, B) - 1
        checkpoint = getattr(mamba, "_checkpoints", {}).get(request.request_id)
        if checkpoint is not None:
            position, index = checkpoint
            self.holds[blocks[index].block_id] = position
        elif getattr(mamba, "_num_checkpoint_blocks", {}).get(request.request_id):
            self.holds[blocks[column - 1].block_id] = column * self.cfg.block
        self.holds[blocks[column].block_id] = end

    def preempt(self) -> None:
        """``_preempt_request`` in the prefill: the request's blocks freed (the cache keeps
        their keys), c = 0, waiting again."""
        self.manager.free(self.request)
        self.request.__dict__.update(num_computed_tokens=0, status=RequestStatus.PREEMPTED)

    def resend(self) -> None:
        """The request freed (it finished or was aborted) and an identical fresh one waiting in
        its place."""
        self.manager.free(self.request)
        self.request = fresh_request(self.cfg, "resend", self.tree)

    def sibling(self, shared: int) -> None:
        """The request freed and a fresh one waiting in its place whose prompt, as long, shares
        only its first ``shared`` tokens with every prompt before it (a new salt past them)."""
        self.manager.free(self.request)
        self.salt += 1
        name = f"sibling-{self.salt}"
        self.request = fresh_request(self.cfg, name, self.tree, (shared, self.salt))

    def lookup(self) -> int:
        """:func:`tree_lookup` of the waiting request, which the next :meth:`compute` admits
        at that hit."""
        self.found = tree_lookup(self.manager, self.request)
        return self.found[0]

    def keyed(self) -> dict[int, int]:
        """Per Mamba key the cache holds now (by the end it names), the state its block holds
        (by the position it was computed to). Ends and positions do not name the prompt, so
        this reads one prompt's cache: after :meth:`sibling`, two prompts' keys at one end
        would be one entry."""
        return {
            hash_end(key): self.holds.get(block.block_id, NO_STATE)
            for (group, key), block in sorted(self.manager.block_pool.index.items())
            if group == MAMBA_GROUP
        }

    def poisoned(self) -> dict[int, int]:
        """The Mamba keys whose block holds another state than the one they name (SPEC P3),
        with the state it holds."""
        return {end: held for end, held in self.keyed().items() if held != end}


def prefilled(
    root: Path, cfg: KvConfig, use_eagle: bool, ends: Sequence[int], num_blocks: int
) -> TreeSlots:
    """:class:`TreeSlots` after computing the chunks ending at ``ends``."""
    slots = TreeSlots(root, cfg, use_eagle, num_blocks)
    computed = 0
    for end in ends:
        slots.compute(end - computed)
        computed = end
    return slots


def real_prefill(
    root: Path, cfg: KvConfig, use_eagle: bool, ends: Sequence[int], num_blocks: int
) -> tuple[KvTree, Any]:
    """The tree and its ``KVCacheManager`` after the prefill of :func:`prefilled` and the
    request freed: what each group cached is the tree's own (its retention mask, partial
    tails, the tokens multi-module MTP may re-prefill), not a set given to the lookup."""
    slots = prefilled(root, cfg, use_eagle, ends, num_blocks)
    slots.manager.free(slots.request)
    return slots.tree, slots.manager


def keyed_after_prefill(
    root: Path, cfg: KvConfig, use_eagle: bool, ends: Sequence[int], num_blocks: int
) -> dict[int, set[int]]:
    """Per KV cache group, the ends whose hash the tree's cache keys after the prefill of
    :func:`real_prefill` (the entries a later lookup can find)."""
    manager = real_prefill(root, cfg, use_eagle, ends, num_blocks)[1]
    keyed: dict[int, set[int]] = {}
    for group, key in manager.block_pool.index:
        keyed.setdefault(group, set()).add(hash_end(key))
    return keyed


def held_after_prefill(
    root: Path, cfg: KvConfig, use_eagle: bool, ends: Sequence[int], num_blocks: int
) -> dict[int, int]:
    """Per Mamba key after the prefill of :func:`prefilled`, the state its block holds
    (:meth:`TreeSlots.keyed`)."""
    return prefilled(root, cfg, use_eagle, ends, num_blocks).keyed()


def resend_after_prefill(
    root: Path, cfg: KvConfig, use_eagle: bool, ends: Sequence[int], num_blocks: int
) -> int:
    """Where an identical resend lands after a real prefill (SPEC KV1): the hit the tree's
    ``get_computed_blocks`` gives a request of the same prompt after :func:`real_prefill`."""
    tree, manager = real_prefill(root, cfg, use_eagle, ends, num_blocks)
    hit: int = manager.get_computed_blocks(fresh_request(cfg, "resend", tree))[1]
    return hit


def seed_hit(
    manager: Any, tree: KvTree, cfg: KvConfig, name: str, prefix: tuple[int, int] | None = None
) -> None:
    """SPEC KV2 rule 2d's seed of a request admitted at c0 > 0: an identical request (``name``,
    of ``cfg``'s prompt, or ``prefix``'s tokens: :func:`fresh_request`) computes [0, c0) and
    [c0, P) alone and finishes, so the blocks it leaves cached (a :class:`CachingPool`) are
    free in the pool and the request's lookup finds them."""
    seed = fresh_request(cfg, name, tree, prefix)
    for chunk in (cfg.start, cfg.prompt - cfg.start):
        if not schedule_chunk(manager, seed, chunk, cfg.lookahead):
            raise SourceError(
                f"the pool of {manager.block_pool.num_gpu_blocks} blocks refuses the identical "
                f"request that seeds the hit at {cfg.start} its chunk of {chunk} tokens"
            )
    manager.free(seed)


class TreeAllocator:
    """A request of ``cfg``'s prompt under the tree's own ``KVCacheManager`` over a pool of
    ``num_blocks`` blocks and ``max_model_len``, scheduled chunk by chunk (:meth:`allocate`)
    from its start c0. ``use_eagle`` is the manager's flag (the effective EAGLE drop, as
    :func:`~chunkproof.source.kv_run.kv_coordinator` is given it); the lookahead slots are the
    scheduler's ``num_lookahead_tokens``, the k = L draft tokens (0 without a drafter).

    At c0 > 0 without an external hit the hit is seeded as SPEC KV2 rule 2d has it: over a
    :class:`CachingPool`, an identical request computes [0, c0) and [c0, P) and finishes, and
    the request is admitted with the hit the tree's ``get_computed_blocks`` then gives it,
    which must be c0. An external hit x = c0 (rule 2e) is a connector's: the first chunk is
    admitted with it (a synchronous load), or :meth:`park` loads it first (an asynchronous
    one)."""

    def __init__(
        self,
        root: Path,
        cfg: KvConfig,
        use_eagle: bool,
        num_blocks: int,
        max_model_len: int = 1 << 20,
    ) -> None:
        if 0 < cfg.external < cfg.start:
            raise ValueError("a hit partly local and partly external is not modelled (rule 2e)")
        start = 0 if cfg.external else cfg.start
        tree = allocation_tree(root, CachingPool if start > 0 else CountingPool)
        self.cfg = cfg
        self.manager = kv_manager(tree, cfg, use_eagle, num_blocks, max_model_len)
        self.hit, self.hit_blocks, self.external = 0, None, cfg.external
        if start > 0:
            seed_hit(self.manager, tree, cfg, "seed")
        self.request = fresh_request(cfg, "r", tree)
        if start > 0:
            self.hit_blocks, self.hit = self.manager.get_computed_blocks(self.request)[:2]
            if self.hit != start:
                raise SourceError(
                    f"the tree's lookup gives the identical request a hit of {self.hit}, "
                    f"not c0 = {start}"
                )

    def allocate(self, chunk: int) -> TreeAllocation:
        """One step that schedules ``chunk`` tokens of the request (:func:`schedule_chunk`,
        with the hit at its first)."""
        manager = self.manager
        hit, blocks, external = self.hit, self.hit_blocks, self.external
        self.hit, self.hit_blocks, self.external = 0, None, 0
        try:
            granted = schedule_chunk(
                manager, self.request, chunk, self.cfg.lookahead, hit, blocks, external
            )
        except PoolExhausted as exc:
            return TreeAllocation(False, manager.block_pool.free, (), str(exc))
        return self._allocation(granted)

    def park(self) -> TreeAllocation:
        """The step that starts the asynchronous load of the external hit (:func:`park_for_load`);
        granted, the load completes and the next :meth:`allocate` is the request's first chunk
        from c0."""
        if self.hit_blocks is not None or not self.external:
            raise ValueError("only a request whose whole hit is external is parked for a load")
        granted = park_for_load(self.manager, self.request, self.external)
        if granted:
            self.external = 0
        return self._allocation(granted)

    def _allocation(self, granted: bool) -> TreeAllocation:
        manager = self.manager
        held = tuple(
            sum(1 for block in group.req_to_blocks.get("r", ()) if not block.is_null)
            for group in manager.coordinator.single_type_managers
        )
        return TreeAllocation(granted, manager.block_pool.free, held)


def tree_allocations(
    root: Path,
    cfg: KvConfig,
    use_eagle: bool,
    chunks: Sequence[int],
    num_blocks: int,
    max_model_len: int = 1 << 20,
) -> list[TreeAllocation]:
    """:class:`TreeAllocator` along ``chunks``: one :class:`TreeAllocation` per call, up to the
    first the pool refuses."""
    allocator = TreeAllocator(root, cfg, use_eagle, num_blocks, max_model_len)
    calls: list[TreeAllocation] = []
    for chunk in chunks:
        calls.append(allocator.allocate(chunk))
        if not calls[-1].granted:
            break
    return calls


@dataclass(frozen=True)
class PoolStepResult:
    """One step of :class:`TreePool`: per request, the tokens the step scheduled (0: none), the
    requests it preempted (in order), the free blocks after it and the blocks (not null) each
    request holds after it (both groups)."""

    scheduled: dict[int, int]
    preempted: list[int]
    free: int
    held: list[int]
    hits: dict[int, int]
    """The hit each waiting request the waiting loop reached was admitted or refused at."""
    raised: int | None = None
    """The request whose admission made the pool raise (:class:`PoolExhausted`: the engine
    core is down, and the step ends there), if any."""
    connected: tuple[int, ...] = ()
    """The waiting requests whose hit is the KV connector's (SPEC KV2 rule 5g)."""


class TreePool:
    """Requests of ``cfgs``' prompts sharing the tree's own ``KVCacheManager`` over a
    :class:`CountingPool` of ``num_blocks`` blocks (SPEC KV2 rule 5): each :meth:`step` runs
    ``schedule()``'s two loops as far as the pool goes, FCFS, as the releases' ``schedule()``
    has them (read from it): the running list in order, a refused request preempting
    ``running.pop()`` (its blocks freed, c = 0, at the head of the waiting queue) until it fits
    or preempts itself, which ends the loop; then, only when nothing was preempted, the waiting
    queue in order, each admitted with ``full_sequence_must_fit`` (0.23 on, the default
    ``scheduler_reserve_full_isl``), the first refusal ending the loop. The chunk each request
    takes when a loop reaches it is given (a zero is skipped in the running loop and ends the
    waiting loop, as every release's split zero does); a request whose prefill is done
    finishes after the step (max_tokens 1) and its blocks are freed. The requests share the
    engine's settings (the groups of ``cfgs[0]``). Nothing is cached between them (no hits)
    unless ``caching``: then the pool is a :class:`CachingPool`, and :meth:`lookup` gives a
    waiting request the hit the tree's ``get_computed_blocks`` finds, which its admission
    takes (the pool's free queue evicts in vLLM's order, so the hit is what is left after the
    blocks handed out since; :attr:`CountingPool.issued` counts those). A request admitted at
    c0 > 0 (its ``start``) is seeded before the first step (:func:`seed_hit`, caching only), so its
    lookup finds c0 unless the blocks handed out since evicted it. A request whose whole c0 is
    external (x = c0, SPEC KV2 rule 5g) is not seeded: :meth:`connect` gives it the KV
    connector's hit x, which its admission passes to ``allocate_slots`` (a synchronous load);
    :meth:`step` does so wherever the local lookup finds nothing (a connector that keeps
    what it loaded). The requests share their prompts' prefix, unless ``distinct``: then no
    token of one is another's."""

    def __init__(
        self,
        root: Path,
        cfgs: Sequence[KvConfig],
        use_eagle: bool,
        num_blocks: int,
        max_model_len: int,
        caching: bool = False,
        distinct: bool = False,
    ) -> None:
        tree = allocation_tree(root, CachingPool if caching else CountingPool)
        self.caching = caching
        self.lookahead = cfgs[0].lookahead
        self.manager = kv_manager(tree, cfgs[0], use_eagle, num_blocks, max_model_len)
        self.found: dict[int, tuple[int, Any]] = {}
        prefixes = [(0, i + 1) if distinct else None for i in range(len(cfgs))]
        self.loads: dict[int, int] = {}
        self.connector = {i: cfg.external for i, cfg in enumerate(cfgs) if cfg.external > 0}
        for i, cfg in enumerate(cfgs):
            if 0 < cfg.external < cfg.start:
                raise SourceError("a hit partly local and partly external is not modelled")
            if cfg.start > cfg.external:
                if not caching:
                    raise SourceError(
                        f"a request admitted at c0 = {cfg.start} needs a caching pool"
                    )
                seed_hit(self.manager, tree, cfg, f"seed{i}", prefixes[i])
        self.requests = [
            fresh_request(cfg, f"r{i}", tree, prefix)
            for i, (cfg, prefix) in enumerate(zip(cfgs, prefixes, strict=True))
        ]
        self.prompts = [cfg.prompt for cfg in cfgs]
        self.running: list[int] = []
        self.waiting = list(range(len(cfgs)))
        self.finished: list[int] = []
        self.gated = "full_sequence_must_fit" in self.manager.allocate_slots.__code__.co_varnames

    def step(self, chunks: Sequence[int]) -> PoolStepResult:
        """One step in which the request ``r`` takes ``chunks[r]`` tokens if a loop reaches
        it and the pool grants them (:meth:`begin`, :meth:`allocate` with :meth:`preempt`,
        :meth:`end`); with ``caching`` a waiting request is looked up (:meth:`lookup`) when
        the waiting loop reaches it, and takes at most its prompt less its hit."""
        self.begin()
        scheduled: dict[int, int] = {}
        preempted: list[int] = []
        index = 0
        while index < len(self.running):
            r = self.running[index]
            if chunks[r] <= 0:
                index += 1
                continue
            while not self.allocate(r, chunks[r]):
                victim = self.running.pop()
                self.preempt(victim)
                preempted.append(victim)
                if victim == r:
                    break
            if r in preempted:
                break
            scheduled[r] = chunks[r]
            index += 1
        hits: dict[int, int] = {}
        connected: list[int] = []
        while not preempted and self.waiting:
            r = self.waiting[0]
            hits[r] = self.lookup(r) if self.caching else 0
            if hits[r] == 0 and r in self.connector:
                hits[r] = self.connect(r)
                connected.append(r)
            chunk = min(chunks[r], self.prompts[r] - hits[r])
            try:
                if chunk <= 0 or not self.allocate(r, chunk, admission=True):
                    break
            except PoolExhausted:
                free = self.manager.block_pool.free
                found = (scheduled, preempted, free, self.held(), hits, r, tuple(connected))
                return PoolStepResult(*found)
            self.running.append(self.waiting.pop(0))
            scheduled[r] = chunk
        for r in self.end(scheduled):
            self.running.remove(r)
        free = self.manager.block_pool.free
        return PoolStepResult(scheduled, preempted, free, self.held(), hits, None, tuple(connected))

    def begin(self) -> None:
        """A step starts (``new_step_starts``, 0.29 on)."""
        if hasattr(self.manager, "new_step_starts"):
            self.manager.new_step_starts()

    def lookup(self, r: int) -> int:
        """:func:`tree_lookup` of waiting request ``r``, whose next admission
        (:meth:`allocate`) takes that hit."""
        self.found[r] = tree_lookup(self.manager, self.requests[r])
        return self.found[r][0]

    def connect(self, r: int) -> int:
        """The KV connector's hit x of waiting request ``r`` (rule 5g), whose next admission
        passes it to ``allocate_slots`` in place of any local hit."""
        self.found.pop(r, None)
        self.loads[r] = self.connector[r]
        return self.loads[r]

    def forget(self, r: int) -> None:
        """Waiting request ``r`` is admitted without the hit :meth:`lookup` found (its blocks
        taken as evicted)."""
        self.found.pop(r, None)

    def allocate(self, r: int, chunk: int, admission: bool = False) -> bool:
        """``allocate_slots`` for ``chunk`` tokens of request ``r``, as the running loop asks
        it, or with ``admission`` as the waiting loop does (``full_sequence_must_fit`` where the
        release has it, and the hit :meth:`lookup` found, local or the connector's; the request
        then runs, its computed tokens the hit). Whether the pool granted it; an admission the
        pool raises at (:class:`PoolExhausted`, rule 5g) raises."""
        request = self.requests[r]
        extra: dict[str, Any] = {"full_sequence_must_fit": True} if admission and self.gated else {}
        hit, blocks = self.found.pop(r, (0, None)) if admission else (0, None)
        external = self.loads.pop(r, 0) if admission else 0
        if blocks is not None:
            extra.update(num_new_computed_tokens=hit, new_computed_blocks=blocks)
        if external:
            extra.update(num_external_computed_tokens=external)
        granted = self.manager.allocate_slots(
            request, chunk, num_lookahead_tokens=self.lookahead, **extra
        )
        if granted is not None and admission:
            request.status = RequestStatus.RUNNING
            request.num_computed_tokens = hit + external
        return granted is not None

    def preempt(self, r: int) -> None:
        """``_preempt_request``: the request's blocks freed, c = 0, at the head of the waiting
        queue (the caller took it out of the running list)."""
        request = self.requests[r]
        self.manager.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        self.waiting.insert(0, r)

    def end(self, scheduled: dict[int, int]) -> list[int]:
        """The step ends (:func:`end_step`) and computes what it scheduled; the requests whose
        prefill that finishes leave, their blocks freed (max_tokens 1). Those requests."""
        end_step(self.manager)
        finished = []
        for r, chunk in scheduled.items():
            request = self.requests[r]
            request.num_computed_tokens += chunk
            if request.num_computed_tokens >= self.prompts[r]:
                self.manager.free(request)
                self.finished.append(r)
                finished.append(r)
        return finished

    def held(self) -> list[int]:
        """The blocks (not null) each request holds, both groups."""
        return [
            sum(
                1
                for group in self.manager.coordinator.single_type_managers
                for block in group.req_to_blocks.get(request.request_id, ())
                if not block.is_null
            )
            for request in self.requests
        ]
