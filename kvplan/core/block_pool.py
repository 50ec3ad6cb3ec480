"""A pool of fixed-size KV blocks with reference counts and an ordered free queue.

The free queue is ordered by eviction priority (front = reclaimed first). Freed blocks go
to the back; a block that still carries a prefix-cache hash stays findable until it is
reclaimed from the front, as in vLLM's FreeKVCacheBlockQueue. An OrderedDict gives O(1)
pop-front, append and removal from the middle (a cache hit on a free block).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from functools import partial
from itertools import compress, islice, repeat
from operator import add, eq, is_not, not_, sub

_is_hash = partial(is_not, None)  # block_to_hash.pop(block, None): None for a block that held no prefix


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
        self.evicted_log: list[int] | None = None  # blocks evicted since the prefix cache last looked (it clears it)

    @property
    def num_free(self) -> int:
        return len(self.free_queue)

    @property
    def num_allocated(self) -> int:
        return self.num_blocks - len(self.free_queue)

    def allocate(self, count: int) -> list[int]:
        """Take `count` blocks from the front of the free queue (caller checks num_free)."""
        queue = self.free_queue
        if count > len(queue):
            raise RuntimeError(f"asked for {count} blocks with {len(queue)} free")
        # Whole-batch operations iterate in C: a long prompt takes thousands of blocks at once.
        blocks = list(islice(queue, count))
        deque(map(queue.__delitem__, blocks), 0)
        block_to_hash = self.block_to_hash
        if block_to_hash:
            hashes = list(map(block_to_hash.pop, blocks, repeat(None)))
            evicted = len(hashes) - hashes.count(None)
            if evicted:  # reclaiming a cached block evicts its prefix
                deque(map(self.hash_to_block.__delitem__, filter(_is_hash, hashes)), 0)
                if self.on_evict is not None:
                    for block_hash, block in zip(hashes, blocks):
                        if block_hash is not None:
                            self.on_evict(block_hash, block)
                self.cached_evictions += evicted
                self.num_cached_free -= evicted
                if self.evicted_log is not None:
                    self.evicted_log.extend(compress(blocks, map(is_not, hashes, repeat(None))))
        deque(map(self.ref_counts.__setitem__, blocks, repeat(1)), 0)
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

    def touch_all(self, blocks: list[int]) -> None:
        """touch() each of these distinct blocks, as one batch (a prefix hit takes thousands)."""
        ref_counts = self.ref_counts
        counts = list(map(ref_counts.__getitem__, blocks))
        idle = list(compress(blocks, map(not_, counts)))  # leave the free queue
        deque(map(self.free_queue.__delitem__, idle), 0)
        if idle and self.block_to_hash:
            self.num_cached_free -= sum(map(self.block_to_hash.__contains__, idle))
        self.extra_refs += len(blocks) - len(idle)
        deque(map(ref_counts.__setitem__, blocks, map(add, counts, repeat(1))), 0)

    def free(self, blocks: Iterable[int]) -> None:
        """Drop one reference per block; blocks reaching zero join the back of the queue in
        the order given (pass a sequence's blocks tail-first so its tail is reclaimed first)."""
        blocks = list(blocks)
        ref_counts = self.ref_counts
        counts = list(map(ref_counts.__getitem__, blocks))
        if 0 in counts:
            raise RuntimeError(f"block {blocks[counts.index(0)]} freed more often than allocated")
        if len(set(blocks)) < len(blocks):  # a block listed twice drops twice, in order
            for block in blocks:
                self.free([block])
            return
        deque(map(ref_counts.__setitem__, blocks, map(sub, counts, repeat(1))), 0)
        released = blocks if counts.count(1) == len(counts) else list(compress(blocks, map(eq, counts, repeat(1))))
        self.extra_refs -= len(blocks) - len(released)
        self.free_queue.update(zip(released, repeat(None)))
        if self.block_to_hash:
            self.num_cached_free += sum(map(self.block_to_hash.__contains__, released))

    def cache(self, block: int, block_hash: int) -> None:
        """Remember that `block` holds the full block identified by `block_hash`."""
        if block_hash not in self.hash_to_block and block not in self.block_to_hash:
            self.hash_to_block[block_hash] = block
            self.block_to_hash[block] = block_hash
            if self.ref_counts[block] == 0:
                self.num_cached_free += 1

    def lookup(self, block_hash: int) -> int | None:
        return self.hash_to_block.get(block_hash)
