"""A pool of fixed-size KV blocks with reference counts and an ordered free queue.

The free queue is ordered by eviction priority (front = reclaimed first). Freed blocks go
to the back; a block that still carries a prefix-cache hash stays findable until it is
reclaimed from the front, as in vLLM's FreeKVCacheBlockQueue. An OrderedDict gives O(1)
pop-front, append and removal from the middle (a cache hit on a free block).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"the KV pool needs at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.ref_counts = [0] * num_blocks
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.hash_to_block: dict[int, int] = {}
        self.block_to_hash: dict[int, int] = {}
        self.cached_evictions = 0  # cached blocks reclaimed for new allocations
        # Kept incrementally so per-step metrics never walk the pool:
        self.num_cached_free = 0  # free blocks that still hold a reusable prefix
        self.extra_refs = 0  # references beyond the first: sum of max(0, ref_count - 1)
        self.on_evict: Callable[[int, int], None] | None = None  # offload: (hash, block) moves down a tier

    @property
    def num_free(self) -> int:
        return len(self.free_queue)

    @property
    def num_allocated(self) -> int:
        return self.num_blocks - len(self.free_queue)

    def allocate(self, count: int) -> list[int]:
        """Take `count` blocks from the front of the free queue (caller checks num_free)."""
        if count > len(self.free_queue):
            raise RuntimeError(f"asked for {count} blocks with {len(self.free_queue)} free")
        popitem = self.free_queue.popitem
        blocks = [popitem(last=False)[0] for _ in range(count)]
        block_to_hash = self.block_to_hash
        if block_to_hash:
            pop, hash_to_block, evicted = block_to_hash.pop, self.hash_to_block, 0
            for block in blocks:
                block_hash = pop(block, None)
                if block_hash is not None:  # reclaiming a cached block evicts its prefix
                    del hash_to_block[block_hash]
                    evicted += 1
                    if self.on_evict is not None:
                        self.on_evict(block_hash, block)
            self.cached_evictions += evicted
            self.num_cached_free -= evicted
        ref_counts = self.ref_counts
        for block in blocks:
            ref_counts[block] = 1
        return blocks

    def touch(self, block: int) -> None:
        """Add a reference to a block another sequence holds or the cache keeps."""
        if self.ref_counts[block] == 0:
            del self.free_queue[block]
            if block in self.block_to_hash:
                self.num_cached_free -= 1
        else:
            self.extra_refs += 1
        self.ref_counts[block] += 1

    def free(self, blocks: Iterable[int]) -> None:
        """Drop one reference per block; blocks reaching zero join the back of the queue in
        the order given (pass a sequence's blocks tail-first so its tail is reclaimed first)."""
        ref_counts, queue, block_to_hash = self.ref_counts, self.free_queue, self.block_to_hash
        for block in blocks:
            count = ref_counts[block] - 1
            if count < 0:
                raise RuntimeError(f"block {block} freed more often than allocated")
            ref_counts[block] = count
            if count == 0:
                queue[block] = None
                if block in block_to_hash:
                    self.num_cached_free += 1
            else:
                self.extra_refs -= 1

    def cache(self, block: int, block_hash: int) -> None:
        """Remember that `block` holds the full block identified by `block_hash`."""
        if block_hash not in self.hash_to_block and block not in self.block_to_hash:
            self.hash_to_block[block_hash] = block
            self.block_to_hash[block] = block_hash
            if self.ref_counts[block] == 0:
                self.num_cached_free += 1

    def lookup(self, block_hash: int) -> int | None:
        return self.hash_to_block.get(block_hash)
