"""A pool of fixed-size KV blocks with reference counts and an ordered free queue.

The free queue is ordered by eviction priority (front = reclaimed first). Freed blocks go
to the back; a block that still carries a prefix-cache hash stays findable until it is
reclaimed from the front, as in vLLM's FreeKVCacheBlockQueue. An OrderedDict gives O(1)
pop-front, append and removal from the middle (a cache hit on a free block).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable


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

    @property
    def num_free(self) -> int:
        return len(self.free_queue)

    @property
    def num_allocated(self) -> int:
        return self.num_blocks - len(self.free_queue)

    @property
    def num_cached_free(self) -> int:
        """Free blocks that still hold a reusable prefix (the cache beyond live sequences)."""
        return sum(1 for block in self.block_to_hash if self.ref_counts[block] == 0)

    def allocate(self, count: int) -> list[int]:
        """Take `count` blocks from the front of the free queue (caller checks num_free)."""
        if count > len(self.free_queue):
            raise RuntimeError(f"asked for {count} blocks with {len(self.free_queue)} free")
        blocks = []
        for _ in range(count):
            block, _ = self.free_queue.popitem(last=False)
            if block in self.block_to_hash:
                del self.hash_to_block[self.block_to_hash.pop(block)]
                self.cached_evictions += 1
            self.ref_counts[block] = 1
            blocks.append(block)
        return blocks

    def touch(self, block: int) -> None:
        """Add a reference to a block another sequence holds or the cache keeps."""
        if self.ref_counts[block] == 0:
            del self.free_queue[block]
        self.ref_counts[block] += 1

    def free(self, blocks: Iterable[int]) -> None:
        """Drop one reference per block; blocks reaching zero join the back of the queue in
        the order given (pass a sequence's blocks tail-first so its tail is reclaimed first)."""
        for block in blocks:
            count = self.ref_counts[block] - 1
            if count < 0:
                raise RuntimeError(f"block {block} freed more often than allocated")
            self.ref_counts[block] = count
            if count == 0:
                self.free_queue[block] = None

    def cache(self, block: int, block_hash: int) -> None:
        """Remember that `block` holds the full block identified by `block_hash`."""
        if block_hash not in self.hash_to_block and block not in self.block_to_hash:
            self.hash_to_block[block_hash] = block
            self.block_to_hash[block] = block_hash

    def lookup(self, block_hash: int) -> int | None:
        return self.hash_to_block.get(block_hash)
