"""KV allocators behind one interface: paged blocks, or contiguous first-fit reservations.

The contiguous allocators (Orca/FasterTransformer style) are real first-fit allocators over
a linear slot space, so external fragmentation is measured from the free extents rather
than assumed. All allocators account in slots (one token's KV in every layer).
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from dataclasses import dataclass

from kvplan.core.block_pool import BlockPool
from kvplan.core.hashing import block_hashes
from kvplan.core.tiers import Tier, TieredCache
from kvplan.core.sequence import Sequence

ALLOCATORS = ("paged", "contiguous-max", "contiguous-pow2", "contiguous-oracle")


class Allocator(ABC):
    """`allocate(seq, tokens)` makes room for the sequence to hold `tokens` tokens of KV and
    keeps `seq.capacity` (slots held) current, so callers can skip the call when it fits."""

    name: str
    capacity_slots: int
    reserved_slots: int
    prefix_caching = False

    @abstractmethod
    def can_admit(self, seq: Sequence, tokens: int, hits: list[int] | None = None) -> bool: ...

    def lookup(self, seq: Sequence) -> list[int]:
        """Cached blocks holding the longest prefix of a sequence about to be admitted."""
        return []

    def hit_tokens(self, hits: list[int]) -> int:
        return 0

    def take_transfer_s(self) -> float:
        return 0.0

    def adopt(self, seq: Sequence, hits: list[int]) -> int:
        """Take references to prefix-cache hits (the head of the block table); returns the
        tokens they serve."""
        return 0

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Register the sequence's newly filled blocks in the prefix cache."""

    def fork(self, parent: Sequence, child: Sequence) -> bool:
        """Share the parent's blocks with a parallel sample (copy-on-write)."""
        return False

    @property
    def shared_slots(self) -> int:
        """Slots in the per-sequence token sum that hold no distinct KV: shared blocks beyond
        their first holder, and tokens an eviction budget dropped."""
        return 0

    @property
    def cached_free_slots(self) -> int:
        return 0

    @abstractmethod
    def allocate(self, seq: Sequence, tokens: int) -> bool: ...

    @abstractmethod
    def free(self, seq: Sequence) -> None: ...

    @abstractmethod
    def reservation_size(self, seq: Sequence) -> int:
        """Slots the sequence will hold at most (what must fit in an empty pool)."""

    def planned_slots(self, seq: Sequence) -> int:
        """Slots a running sequence is entitled to: its final length within its reservation."""
        return min(seq.final_len, self.reservation_size(seq))

    def external_fragmentation(self, smallest_need: int) -> int:
        return 0

    @property
    def admissible_slots(self) -> int:
        """The largest reservation an idle pool can admit (arrivals above it are rejected)."""
        return self.capacity_slots

    @property
    def usage(self) -> float:
        return self.reserved_slots / self.capacity_slots


@dataclass
class PrefixStats:
    """vLLM's prefix-cache counters, in tokens; preempted re-admissions counted apart."""

    queries: int = 0
    hits: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0
    forks: int = 0
    cow_copies: int = 0


class PagedAllocator(Allocator):
    """vLLM-style paging: blocks on demand, a watermark kept free at admission, and
    optionally automatic prefix caching over hash-chained full blocks."""

    def __init__(self, num_blocks: int, block_size: int, watermark: float = 0.01,
                 prefix_caching: bool = False, token_budget: int | None = None, sink_blocks: int = 0,
                 tiers: TieredCache | None = None, recompute_s_per_token: float = 0.0) -> None:
        self.name = "prefix" if prefix_caching else "paged"
        self.pool = BlockPool(num_blocks)
        self.block_size = block_size
        self.capacity_slots = num_blocks * block_size
        self.watermark_blocks = int(watermark * num_blocks)
        self.prefix_caching = prefix_caching
        self.stats = PrefixStats()
        self.known_hashes: dict[int, list[int]] = {}  # request id -> block hashes, computed once per run
        self.free_hits = 0
        # An eviction policy's budget (simulated mode applies it as memory only): a sequence
        # keeps at most this many blocks; older ones (after `sink_blocks`) are released.
        if token_budget is not None and prefix_caching:
            raise ValueError("prefix caching cannot be combined with an eviction budget in simulated mode")
        self.max_blocks = -(-token_budget // block_size) if token_budget else None
        self.sink_blocks = sink_blocks if token_budget else 0
        self.evicted_slots = 0  # tokens of live sequences dropped by the budget
        # Offload tiers (prefix caching only): reclaimed prefixes move down, hits come back up.
        self.tiers = tiers
        self.recompute_s_per_token = recompute_s_per_token
        self.pending_tier: list[tuple[int, Tier]] = []  # lower-tier hits found by the last lookup
        if tiers is not None:
            if not prefix_caching:
                raise ValueError("offload tiers hold prefix-cache blocks: combine offload with prefix caching")
            self.pool.on_evict = tiers.demote

    @property
    def reserved_slots(self) -> int:  # type: ignore[override]
        return self.pool.num_allocated * self.block_size

    @property
    def admissible_slots(self) -> int:  # type: ignore[override]
        # The watermark also gates re-admission after a preemption, so a request must fit
        # below it or it could be stranded half-way.
        return (self.pool.num_blocks - self.watermark_blocks) * self.block_size

    def blocks_needed(self, seq: Sequence, tokens: int) -> int:
        """New blocks for the sequence to span `tokens` (blocks a budget dropped still count)."""
        return max(0, -(-tokens // self.block_size) - len(seq.block_table) - seq.dropped_blocks)

    def can_admit(self, seq: Sequence, tokens: int, hits: list[int] | None = None) -> bool:
        if not hits:
            return self.pool.num_free - self.blocks_needed(seq, tokens) >= self.watermark_blocks
        # Hits on free cached blocks leave the free queue too (counted by lookup).
        new = -(-tokens // self.block_size) - len(hits)
        return self.pool.num_free - self.free_hits - new >= self.watermark_blocks

    def lookup(self, seq: Sequence) -> list[int]:
        if not self.prefix_caching:
            return []
        if seq.hashes is None:
            request = seq.request
            seq.hashes = self.known_hashes.get(request.request_id)
            if seq.hashes is None:
                seq.hashes = block_hashes(request, self.block_size)
        # At least one token is computed, so a fully cached prompt recomputes its last block.
        limit = (seq.known_tokens - 1) // self.block_size
        found, ref_counts = self.pool.hash_to_block, self.pool.ref_counts
        hits = []
        free_hits = 0
        for block_hash in seq.hashes[:limit]:
            block = found.get(block_hash)
            if block is None:
                break
            hits.append(block)
            if not ref_counts[block]:
                free_hits += 1
        self.free_hits = free_hits  # read by the can_admit call that follows
        self.pending_tier = self._tier_run(seq.hashes[len(hits):limit]) if self.tiers else []
        return hits

    def _tier_run(self, hashes: list[int]) -> list[tuple[int, Tier]]:
        """The prefix continues in the CPU / disk tiers: reload it if moving the blocks costs
        less than recomputing their tokens, else recompute (the run is not used)."""
        run = []
        for block_hash in hashes:
            tier = self.tiers.find(block_hash)  # type: ignore[union-attr]
            if tier is None:
                break
            run.append((block_hash, tier))
        if not run:
            return []
        reload_s = sum(self.tiers.block_bytes / tier.bandwidth for _, tier in run)  # type: ignore[union-attr]
        if reload_s > len(run) * self.block_size * self.recompute_s_per_token:
            self.tiers.recomputes += 1  # type: ignore[union-attr]
            return []
        self.tiers.reloads += 1  # type: ignore[union-attr]
        return run

    def hit_tokens(self, hits: list[int]) -> int:
        """Tokens the last lookup serves: device hits plus the lower-tier run it will reload."""
        return (len(hits) + len(self.pending_tier)) * self.block_size

    def take_transfer_s(self) -> float:
        """Offload transfer time since the last call (charged to the current step)."""
        if self.tiers is None:
            return 0.0
        seconds, self.tiers.unbilled_s = self.tiers.unbilled_s, 0.0
        return seconds

    def adopt(self, seq: Sequence, hits: list[int]) -> int:
        """Take the hits; returns the tokens they serve (lower-tier blocks that cannot be
        read back are left to recompute)."""
        if not self.prefix_caching:
            return 0
        payloads = []
        for block_hash, tier in self.pending_tier:  # leave the tiers before any demotion below
            payload = self.tiers.promote(block_hash, tier, self.block_size)  # type: ignore[union-attr]
            if payload is None:
                break
            payloads.append((block_hash, payload))
        self.pending_tier = []
        queried, device_tokens = seq.known_tokens, len(hits) * self.block_size
        hit_tokens = device_tokens + len(payloads) * self.block_size  # tier hits are counted per tier
        if seq.preemptions:
            self.stats.preempted_queries += queried
            self.stats.preempted_hits += device_tokens
        else:
            self.stats.queries += queried
            self.stats.hits += device_tokens
        for block in hits:
            self.pool.touch(block)
        seq.block_table = list(hits)
        if payloads:  # promote: fresh device blocks, filled over the host link / from disk
            promoted = self.pool.allocate(len(payloads))
            for block, (block_hash, payload) in zip(promoted, payloads):
                self.tiers.restore(block, payload)  # type: ignore[union-attr]
                self.pool.cache(block, block_hash)
            seq.block_table += promoted
        seq.capacity = len(seq.block_table) * self.block_size
        seq.cached_blocks = len(seq.block_table)
        seq.hit_tokens += hit_tokens
        return hit_tokens

    def cache_full_blocks(self, seq: Sequence) -> None:
        hashes = seq.hashes or ()
        full = min(seq.num_computed // self.block_size, len(hashes))
        # Inlined BlockPool.cache: the blocks are live (ref >= 1), so no free-queue change.
        hash_to_block, block_to_hash, table = self.pool.hash_to_block, self.pool.block_to_hash, seq.block_table
        for index in range(seq.cached_blocks, full):
            block_hash, block = hashes[index], table[index]
            if block_hash not in hash_to_block and block not in block_to_hash:
                hash_to_block[block_hash] = block
                block_to_hash[block] = block_hash
        seq.cached_blocks = max(seq.cached_blocks, full)

    def fork(self, parent: Sequence, child: Sequence) -> bool:
        """The child shares every full block; a partial last block is copied now (eager
        copy-on-write: the next decode step would write into it anyway)."""
        full = parent.num_computed // self.block_size
        partial = len(parent.block_table) > full
        if partial and self.pool.num_free < 1:
            return False
        for block in parent.block_table[:full]:
            self.pool.touch(block)
        child.block_table = parent.block_table[:full]
        if partial:
            child.block_table += self.pool.allocate(1)
            self.stats.cow_copies += 1
        child.capacity = len(child.block_table) * self.block_size
        child.hashes, child.cached_blocks = parent.hashes, min(parent.cached_blocks, full)
        self.stats.forks += 1
        return True

    @property
    def shared_slots(self) -> int:  # type: ignore[override]
        # Shared blocks count once; tokens an eviction budget dropped count not at all.
        return self.pool.extra_refs * self.block_size + self.evicted_slots

    @property
    def cached_free_slots(self) -> int:  # type: ignore[override]
        return self.pool.num_cached_free * self.block_size

    def allocate(self, seq: Sequence, tokens: int) -> bool:
        needed = self.blocks_needed(seq, tokens)
        if needed == 0:
            return True
        if self.max_blocks is not None:  # blocks beyond the budget replace the oldest ones
            needed = min(needed, self.max_blocks - len(seq.block_table) + 1)
        if needed > self.pool.num_free:
            return False
        seq.block_table.extend(self.pool.allocate(needed))
        if self.max_blocks is not None:
            self._drop_oldest(seq, tokens)
        seq.capacity = (len(seq.block_table) + seq.dropped_blocks) * self.block_size
        return True

    def _drop_oldest(self, seq: Sequence, tokens: int) -> None:
        """Keep the blocks covering the newest tokens (and the sink blocks) within the budget;
        positions that skip whole blocks are counted as dropped without holding them."""
        total = -(-tokens // self.block_size)  # blocks this many tokens span
        skipped = total - len(seq.block_table) - seq.dropped_blocks
        seq.dropped_blocks += max(0, skipped)
        self.evicted_slots += max(0, skipped) * self.block_size
        while len(seq.block_table) > self.max_blocks:  # type: ignore[operator]
            victim = seq.block_table.pop(self.sink_blocks)
            self.pool.free([victim])
            seq.dropped_blocks += 1
            self.evicted_slots += self.block_size

    def free(self, seq: Sequence) -> None:
        self.pool.free(reversed(seq.block_table))  # tail blocks are reclaimed first
        self.evicted_slots -= seq.dropped_blocks * self.block_size
        seq.block_table = []
        seq.capacity = 0
        seq.cached_blocks = 0
        seq.dropped_blocks = 0

    def reservation_size(self, seq: Sequence) -> int:
        blocks = -(-seq.final_len // self.block_size)
        if self.max_blocks is not None:
            blocks = min(blocks, self.max_blocks)
        return blocks * self.block_size

    def planned_slots(self, seq: Sequence) -> int:
        return len(seq.block_table) * self.block_size  # nothing is reserved ahead

    @property
    def retained_cap(self) -> int | None:
        """Tokens a sequence's attention can read at most (the budget, in whole blocks)."""
        return self.max_blocks * self.block_size if self.max_blocks is not None else None


class ContiguousAllocator(Allocator):
    """Reserve one extent per request at admission: max_model_len (Orca-Max), the next power
    of two of the final length (Orca-Pow2), or exactly the final length (Orca-Oracle)."""

    def __init__(self, policy: str, capacity_slots: int, max_model_len: int) -> None:
        if policy not in ("max", "pow2", "oracle"):
            raise ValueError(f"unknown contiguous policy '{policy}'")
        self.name = f"contiguous-{policy}"
        self.policy = policy
        self.capacity_slots = capacity_slots
        self.max_model_len = max_model_len
        self.reserved_slots = 0
        self.free_starts: list[int] = [0]  # sorted extent starts
        self.free_lengths: dict[int, int] = {0: capacity_slots}

    def reservation_size(self, seq: Sequence) -> int:
        if self.policy == "max":
            return self.max_model_len
        if self.policy == "pow2":
            return min(1 << (seq.final_len - 1).bit_length(), max(self.max_model_len, seq.final_len))
        return seq.final_len

    def _first_fit(self, size: int) -> int | None:
        for start in self.free_starts:
            if self.free_lengths[start] >= size:
                return start
        return None

    def can_admit(self, seq: Sequence, tokens: int, hits: list[int] | None = None) -> bool:
        return seq.extent is not None or self._first_fit(self.reservation_size(seq)) is not None

    def allocate(self, seq: Sequence, tokens: int) -> bool:
        if seq.extent is not None:
            return tokens <= seq.extent[1]
        size = self.reservation_size(seq)
        start = self._first_fit(size)
        if start is None or tokens > size:
            return False
        length = self.free_lengths.pop(start)
        index = bisect.bisect_left(self.free_starts, start)
        if length == size:
            del self.free_starts[index]
        else:
            self.free_starts[index] = start + size
            self.free_lengths[start + size] = length - size
        seq.extent = (start, size)
        seq.capacity = size
        self.reserved_slots += size
        return True

    def free(self, seq: Sequence) -> None:
        if seq.extent is None:
            return
        start, size = seq.extent
        seq.extent = None
        seq.capacity = 0
        self.reserved_slots -= size
        index = bisect.bisect_left(self.free_starts, start)
        # Coalesce with the following and the preceding free extents.
        following = start + size
        if index < len(self.free_starts) and self.free_starts[index] == following:
            size += self.free_lengths.pop(following)
            del self.free_starts[index]
        if index > 0:
            before = self.free_starts[index - 1]
            if before + self.free_lengths[before] == start:
                self.free_lengths[before] += size
                return
        self.free_starts.insert(index, start)
        self.free_lengths[start] = size

    def external_fragmentation(self, smallest_need: int) -> int:
        """Free slots in extents too small for the smallest waiting reservation."""
        return sum(length for length in self.free_lengths.values() if length < smallest_need)


def make_allocator(kind: str, capacity_slots: int, block_size: int, max_model_len: int,
                   watermark: float = 0.01, prefix_caching: bool = False, token_budget: int | None = None,
                   sink_blocks: int = 0, tiers: TieredCache | None = None,
                   recompute_s_per_token: float = 0.0) -> Allocator:
    if kind == "paged":
        return PagedAllocator(capacity_slots // block_size, block_size, watermark, prefix_caching, token_budget,
                              sink_blocks, tiers, recompute_s_per_token)
    if prefix_caching or token_budget:
        raise ValueError(f"prefix caching and eviction budgets need the paged allocator, not {kind}")
    if kind.startswith("contiguous-"):
        return ContiguousAllocator(kind.removeprefix("contiguous-"), capacity_slots, max_model_len)
    raise ValueError(f"unknown allocator '{kind}'; use one of: {', '.join(ALLOCATORS)}")
