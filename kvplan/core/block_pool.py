"""A pool of fixed-size KV blocks with reference counts and an ordered free queue.

The free queue is ordered by eviction priority (front = reclaimed first). Freed blocks go
to the back; a block that still carries a prefix-cache hash stays findable until it is
reclaimed from the front, as in vLLM's FreeKVCacheBlockQueue. With `unhashed_first` (vLLM
V1's free_blocks), freed blocks that hold no hash go to the front instead, to be reused
first. With `duplicates` (vLLM V1's cached_block_hash_to_block), a block filled with a prefix
another block already holds is cached as well: a lookup finds the first, and the next takes
its place when it is reclaimed.

The state lives in arrays so a long prompt's thousands of blocks move in a few array
operations: per block its reference count and the hash of the prefix it holds, and the
free queue as an append-only log of block ids with, per free block, the
log position it was queued at. A block taken out of the middle (a cache hit on a free block)
only forgets its position; the stale log entry is skipped when the front reaches it, and the
log is compacted when full. The log keeps a pool's length of room before its front, so
blocks can be put at the front the same way. The hash -> block map stays a dict: hashes are
arbitrary 64-bit
ints, and the dict holds only what the pool caches now (numbering every hash a long trace
ever shows costs more than it saves).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

import numpy as np

NONE = (
    -1
)  # a block holding no prefix: Python's hash() never returns -1, kvplan's other hashes are >= 0
_FEW = 4  # batches up to this size take the scalar path (array calls cost more than they save)
_count = np.count_nonzero  # in C; ndarray.any() / .all() go through Python-level wrappers


def as_blocks(blocks: Iterable[int]) -> np.ndarray:
    """Block ids as an int64 array (a list converts in C)."""
    if isinstance(blocks, np.ndarray):
        return blocks
    if not isinstance(blocks, list):
        blocks = list(blocks)
    return np.fromiter(blocks, dtype=np.int64, count=len(blocks))


class BlockPool:
    def __init__(
        self, num_blocks: int, unhashed_first: bool = False, duplicates: bool = False
    ) -> None:
        if num_blocks < 1:
            raise ValueError(f"the KV pool needs at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.unhashed_first = unhashed_first
        self.ref_counts = np.zeros(num_blocks, dtype=np.int64)
        self.block_hashes = np.full(
            num_blocks, NONE, dtype=np.int64
        )  # block -> hash of the prefix it holds
        self.hash_to_block: dict[int, int] = {}  # hash -> the first block cached with it
        # hash -> the further blocks cached with it, in caching order (duplicates=True only)
        self.duplicates: dict[int, list[int]] | None = {} if duplicates else None
        self.num_free = num_blocks
        # The free queue: log[head:tail] in order, an entry live while queued_at[block] is its
        # position. A compaction puts the live entries at `num_blocks`, leaving that much room
        # on either side: enough for every block at the front or at the back.
        capacity = 3 * num_blocks + 1
        self._log = np.zeros(capacity, dtype=np.int64)
        self._log[num_blocks : 2 * num_blocks] = np.arange(num_blocks)
        self._positions = np.arange(capacity, dtype=np.int64)
        self._queued_at = np.arange(num_blocks, 2 * num_blocks, dtype=np.int64)  # -1: not free
        self._marks = np.empty(num_blocks, dtype=np.int64)  # scratch for free()'s repeat check
        self._head, self._tail = num_blocks, 2 * num_blocks
        self.cached_evictions = 0  # cached blocks reclaimed for new allocations
        # moves when blocks join the free queue (an admission refused for want of blocks may now
        # fit; a prefix cached since is asked about by the scheduler, kvplan.core.scheduler)
        self.epoch = 0
        # Kept incrementally so per-step metrics never walk the pool:
        self.num_cached_free = 0  # free blocks that still hold a reusable prefix
        self.extra_refs = 0  # references beyond the first: sum of max(0, ref_count - 1)
        self.on_evict: Callable[[int, int], None] | None = (
            None  # offload: (hash, block) moves down a tier
        )

    @property
    def num_allocated(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def free_queue(self) -> list[int]:
        """The free blocks, front (reclaimed first) to back; for inspection, O(pool)."""
        live = self._log[self._head : self._tail]
        return live[self._queued_at[live] == self._positions[self._head : self._tail]].tolist()

    @property
    def block_to_hash(self) -> dict[int, int]:
        """Each block holding a prefix -> its hash; for inspection, O(pool)."""
        blocks = np.flatnonzero(self.block_hashes != NONE)
        return dict(zip(blocks.tolist(), self.block_hashes[blocks].tolist()))

    def allocate(self, count: int) -> list[int]:
        """Take `count` blocks from the front of the free queue (caller checks num_free)."""
        if count > self.num_free:
            raise RuntimeError(f"asked for {count} blocks with {self.num_free} free")
        if count <= _FEW:
            return self._allocate_few(count)
        log, queued_at, head = self._log, self._queued_at, self._head
        end = head + count
        while True:  # widen the window over stale entries until it holds `count` live ones
            window = log[head:end]
            live = queued_at[window] == self._positions[head:end]
            found = int(np.count_nonzero(live))
            if found >= count:
                break
            end = min(self._tail, end + 2 * (count - found))
        if found == len(window):
            blocks = window.copy()
        else:
            taken = np.flatnonzero(live)[:count]
            blocks, end = window[taken], head + int(taken[-1]) + 1
        self._head = end
        queued_at[blocks] = -1
        self.ref_counts[blocks] = 1
        self.num_free -= count
        if self.hash_to_block:
            hashes = self.block_hashes[blocks]
            cached = hashes != NONE
            if _count(cached):  # reclaiming a cached block evicts its prefix
                self._evict(hashes[cached], blocks[cached])
        return blocks.tolist()

    def _allocate_few(self, count: int) -> list[int]:
        log, queued_at, ref_counts, block_hashes = (
            self._log,
            self._queued_at,
            self.ref_counts,
            self.block_hashes,
        )
        head = self._head
        blocks: list[int] = []
        evicted: list[int] = []
        caching = bool(self.hash_to_block)
        while len(blocks) < count:
            block = log.item(head)
            if queued_at.item(block) == head:
                blocks.append(block)
                queued_at[block] = -1
                ref_counts[block] = 1
                if caching and block_hashes.item(block) != NONE:
                    evicted.append(block)
            head += 1
        self._head = head
        self.num_free -= count
        if evicted:
            evicted_blocks = np.array(evicted, dtype=np.int64)
            self._evict(block_hashes[evicted_blocks], evicted_blocks)
        return blocks

    def _evict(self, evicted_hashes: np.ndarray, blocks: np.ndarray) -> None:
        hashes = evicted_hashes.tolist()
        if self.duplicates:
            self._evict_with_duplicates(hashes, blocks.tolist())
        elif len(hashes) == 1:
            del self.hash_to_block[hashes[0]]
        else:
            deque(map(self.hash_to_block.__delitem__, hashes), 0)
        self.block_hashes[blocks] = NONE
        count = len(blocks)
        self.cached_evictions += count
        self.num_cached_free -= count
        if self.on_evict is not None:
            for block_hash, block in zip(hashes, blocks.tolist()):
                self.on_evict(block_hash, block)

    def _evict_with_duplicates(self, hashes: list[int], blocks: list[int]) -> None:
        """Forget each block's hash: the next block cached with it takes a first block's place."""
        duplicates, first = self.duplicates, self.hash_to_block
        assert duplicates is not None
        for block_hash, block in zip(hashes, blocks):
            others = duplicates.get(block_hash)
            if first.get(block_hash) == block:
                if others:
                    first[block_hash] = others.pop(0)
                else:
                    del first[block_hash]
            elif others is not None:
                others.remove(block)
            if others is not None and not others:
                del duplicates[block_hash]

    def touch(self, block: int) -> None:
        """Add a reference to a block another sequence holds or the cache keeps."""
        if self.ref_counts[block] == 0:
            self._queued_at[block] = -1  # its log entry goes stale
            self.num_free -= 1
            if self.block_hashes[block] != NONE:
                self.num_cached_free -= 1
        else:
            self.extra_refs += 1
        self.ref_counts[block] += 1

    def touch_all(self, blocks: Iterable[int]) -> None:
        """touch() each of these distinct blocks, as one batch (a prefix hit takes thousands)."""
        blocks = as_blocks(blocks)
        if not len(blocks):
            return
        ref_counts = self.ref_counts
        idle = blocks[ref_counts[blocks] == 0]  # leave the free queue
        self._queued_at[idle] = -1
        self.num_free -= len(idle)
        if len(idle) and self.hash_to_block:
            self.num_cached_free -= int(np.count_nonzero(self.block_hashes[idle] != NONE))
        self.extra_refs += len(blocks) - len(idle)
        ref_counts[blocks] += 1

    def free(self, blocks: Iterable[int]) -> None:
        """Drop one reference per block; blocks reaching zero join the back of the queue in
        the order given (pass a sequence's blocks tail-first so its tail is reclaimed first)."""
        if isinstance(blocks, list) and len(blocks) <= 1:
            if blocks:
                self._free_one(blocks[0])
            return
        blocks = as_blocks(blocks)
        count = len(blocks)
        if count <= 1:
            if count:
                self._free_one(int(blocks[0]))
            return
        ref_counts = self.ref_counts
        counts = ref_counts[blocks]
        if _count(counts) < count:
            raise RuntimeError(
                f"block {int(blocks[np.argmin(counts != 0)])} freed more often than allocated"
            )
        # A block listed twice drops twice, in order: scatter positions, and any block whose
        # slot does not read back its own position appeared again later
        # (more entries than the pool has blocks can only be repeats).
        scratch = self._positions[:count] if count <= self.num_blocks else np.arange(count)
        marks = self._marks
        marks[blocks] = scratch
        if _count(marks[blocks] != scratch):
            for block in blocks.tolist():
                self._free_one(block)
            return
        counts -= 1
        ref_counts[blocks] = counts
        released = blocks if not _count(counts) else blocks[counts == 0]
        self.extra_refs -= count - len(released)
        cached = self.block_hashes[released] != NONE if self.hash_to_block else None
        if self.unhashed_first:
            unhashed = ~cached if cached is not None else np.ones(len(released), dtype=bool)
            self._prepend(released[unhashed])
            self._enqueue(released[~unhashed])
        else:
            self._enqueue(released)
        if cached is not None:
            self.num_cached_free += int(np.count_nonzero(cached))

    def _free_one(self, block: int) -> None:
        count = self.ref_counts.item(block)
        if not count:
            raise RuntimeError(f"block {block} freed more often than allocated")
        self.ref_counts[block] = count - 1
        if count > 1:
            self.extra_refs -= 1
            return
        if self.unhashed_first and self.block_hashes.item(block) == NONE:
            self._prepend(np.array([block], dtype=np.int64))
            return
        if self._tail == len(self._log):
            self._enqueue(np.array([block], dtype=np.int64))
        else:  # the scalar form of _enqueue
            self._log[self._tail] = block
            self._queued_at[block] = self._tail
            self._tail += 1
            self.num_free += 1
            self.epoch += 1
        if self.block_hashes.item(block) != NONE:
            self.num_cached_free += 1

    def _compact(self) -> None:
        """Keep the live entries, in order, from position num_blocks on."""
        head, tail, start = self._head, self._tail, self.num_blocks
        window = self._log[head:tail]
        live = window[self._queued_at[window] == self._positions[head:tail]]
        self._log[start : start + len(live)] = live
        self._queued_at[live] = self._positions[start : start + len(live)]
        self._head, self._tail = start, start + len(live)

    def _prepend(self, blocks: np.ndarray) -> None:
        """Put blocks at the front of the free queue, blocks[0] first (vLLM's prepend_n)."""
        count = len(blocks)
        if not count:
            return
        if self._head < count:
            self._compact()
        head = self._head - count
        self._log[head : self._head] = blocks
        self._queued_at[blocks] = self._positions[head : self._head]
        self._head = head
        self.num_free += count
        self.epoch += 1

    def _enqueue(self, blocks: np.ndarray) -> None:
        count = len(blocks)
        if not count:
            return
        if self._tail + count > len(self._log):
            self._compact()
        self.epoch += 1
        tail = self._tail
        self._log[tail : tail + count] = blocks
        self._queued_at[blocks] = self._positions[tail : tail + count]
        self._tail = tail + count
        self.num_free += count

    def cache(self, block: int, block_hash: int) -> None:
        """Remember that `block` holds the full block identified by `block_hash`."""
        if self.block_hashes.item(block) != NONE:
            return
        first = self.hash_to_block.setdefault(block_hash, block)
        if first != block:
            if self.duplicates is None:
                return  # the hash keeps its block; this one stays uncached
            self.duplicates.setdefault(block_hash, []).append(block)
        self.block_hashes[block] = block_hash
        if not self.ref_counts.item(block):
            self.num_cached_free += 1

    def cache_all(self, blocks: list[int], hashes: list[int]) -> None:
        """cache() each (live) block with its hash, as one batch; a block's hashes are chained,
        so the batch names no hash or block twice."""
        known = self.hash_to_block
        block_ids = as_blocks(blocks)
        unhashed = self.block_hashes[block_ids] == NONE
        if _count(unhashed) < len(unhashed):  # some blocks already hold a prefix: keep them
            picked = np.flatnonzero(unhashed).tolist()
            block_ids, hashes = block_ids[picked], [hashes[i] for i in picked]
            blocks = block_ids.tolist()
        if not len(block_ids):
            return
        # One dict operation per block: a hash already held keeps its first block (setdefault
        # returns that block instead of this one).
        held = np.fromiter(map(known.setdefault, hashes, blocks), dtype=np.int64, count=len(hashes))
        fresh = held == block_ids
        if _count(fresh) == len(fresh):
            self.block_hashes[block_ids] = np.fromiter(hashes, dtype=np.int64, count=len(hashes))
        elif self.duplicates is not None:  # the others are cached beside the first block
            for index in np.flatnonzero(~fresh).tolist():
                self.duplicates.setdefault(hashes[index], []).append(blocks[index])
            self.block_hashes[block_ids] = np.fromiter(hashes, dtype=np.int64, count=len(hashes))
        else:
            picked = np.flatnonzero(fresh).tolist()
            self.block_hashes[block_ids[picked]] = [hashes[i] for i in picked]

    def lookup(self, block_hash: int) -> int | None:
        return self.hash_to_block.get(block_hash)
