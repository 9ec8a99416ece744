"""The stub pool under the real managers keeps vLLM's free queue
(:class:`~chunkproof.source.kv_alloc_run.CachingPool`): a block is evicted when it is handed
out again, in the order the blocks were freed, so what a later lookup finds depends on what
was allocated since, as in vLLM's ``BlockPool``."""

from __future__ import annotations

from chunkproof.source.kv_alloc_run import CachingPool, PoolBlock


def keyed(pool: CachingPool, block: PoolBlock, name: bytes) -> None:
    """Give ``block`` a cache entry of group 0 under ``name``."""
    block.block_hash = name
    pool.index[(0, name)] = block


def ids(blocks: list[PoolBlock]) -> list[int]:
    return [block.block_id for block in blocks]


def test_blocks_are_handed_out_in_id_order_then_in_the_order_they_were_freed() -> None:
    """Blocks 1..N-1 go out in id order (block 0 is the null block); freed ones join the back,
    in the order freed, so the never-used blocks go first and a request's tail (freed first by
    the managers) goes before its head."""
    pool = CachingPool(6)
    first = pool.get_new_blocks(3)
    assert ids(first) == [1, 2, 3] and pool.get_num_free_blocks() == 2
    pool.free_blocks(list(reversed(first)))
    assert pool.get_num_free_blocks() == 5
    assert ids(pool.get_new_blocks(5)) == [4, 5, 3, 2, 1]


def test_a_cached_block_is_found_until_it_is_handed_out_again() -> None:
    """A freed block keeps its entry (an evictable block, counted free) until the queue hands
    it out, which drops the entry; a hit on a free block takes it out of the queue."""
    pool = CachingPool(4)
    head, tail = pool.get_new_blocks(2)
    keyed(pool, head, b"head")
    keyed(pool, tail, b"tail")
    pool.free_blocks([tail, head])
    assert pool.get_num_free_blocks() == 3
    assert ids(pool.get_new_blocks(1)) == [3]
    assert (0, b"tail") in pool.index and (0, b"head") in pool.index
    assert ids(pool.get_new_blocks(1)) == [tail.block_id]
    assert (0, b"tail") not in pool.index and tail.block_hash is None
    pool.touch([head])
    assert pool.get_num_free_blocks() == 0 and head.ref_cnt == 1
    assert pool.index[(0, b"head")] is head


def test_prepended_blocks_go_out_first() -> None:
    """``free_blocks(..., prepend=True)`` (0.23 on: uncached scratch blocks) puts the blocks at
    the front, in the order given."""
    pool = CachingPool(6)
    blocks = pool.get_new_blocks(3)
    pool.free_blocks(blocks[:1])
    pool.free_blocks(blocks[1:], prepend=True)
    assert ids(pool.get_new_blocks(5)) == [2, 3, 4, 5, 1]
