"""vLLM-style paging: blocks on demand from a BlockPool, a watermark kept free at admission.
Prefix caching (with its offload tiers), an eviction budget and copy-on-write forks are
components the allocator composes (prefix_cache.py, budget.py, fork.py)."""

from __future__ import annotations

from kvplan import cdiv
from kvplan.core.block_pool import BlockPool
from kvplan.core.kv.base import NO_HITS, Allocator, PrefixLookup
from kvplan.core.kv.budget import PolicyBudget
from kvplan.core.kv.fork import ForkStats, fork_blocks
from kvplan.core.kv.prefix_cache import PrefixCache
from kvplan.core.policies import PolicySpec
from kvplan.core.sequence import Sequence
from kvplan.core.tiers import TieredCache
from kvplan.engines.scheduling_rules import KVPLAN_RULES, SchedulingRules


class PagedAllocator(Allocator):
    pool: BlockPool  # always present here (Allocator's may be None)
    fork_stats: ForkStats

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        watermark: float | None = None,
        prefix_caching: bool = False,
        policy: PolicySpec | None = None,
        tiers: TieredCache | None = None,
        recompute_s_per_token: float = 0.0,
        copy_s_per_slot: float = 0.0,
        rules: SchedulingRules = KVPLAN_RULES,
    ) -> None:
        evicting = policy if policy is not None and policy.evicts else None
        # A cached block is shared read-only by every request that hits it: the policy says
        # why it cannot keep that promise (sliding-window can, as vLLM's SlidingWindowManager).
        conflict = evicting.policy.prefix_conflict if evicting is not None else None
        if evicting is not None and conflict is not None and prefix_caching:
            raise ValueError(
                f"prefix caching cannot be combined with '{evicting.name}': {conflict}; "
                "use one or the other"
            )
        if tiers is not None and not prefix_caching:
            raise ValueError(
                "offload tiers hold prefix-cache blocks: combine offload with prefix caching"
            )
        if tiers is not None and evicting is not None:
            raise ValueError(
                f"offload tiers cannot be combined with '{evicting.name}': a tier reload "
                "continues a "
                "prefix hit block by block from its start, while a window's hit is the run of "
                "blocks "
                "before the hit point; use one or the other"
            )
        window = (
            evicting.budget if evicting is not None and prefix_caching else None
        )  # only a positional window gets here
        self.name = "prefix" if prefix_caching else "paged"
        self.rules = rules
        # vLLM's null block is one of the pool's blocks that no request may hold
        usable = num_blocks - 1 if rules.null_block and num_blocks > 1 else num_blocks
        self.pool = BlockPool(
            usable,
            unhashed_first=rules.unhashed_blocks_first,
            duplicates=rules.duplicate_cached_blocks,
        )
        self.block_size = block_size
        self.capacity_slots = usable * block_size
        fraction = rules.watermark if watermark is None else watermark
        self.watermark_blocks = int(fraction * num_blocks)
        self.prefix_caching = prefix_caching
        self.prefix_cache = (
            PrefixCache(
                self.pool,
                block_size,
                tiers,
                recompute_s_per_token,
                window,
                hash_generated=rules.hash_generated_tokens,
            )
            if prefix_caching
            else None
        )
        if self.prefix_cache is not None:
            self.prefix_stats = self.prefix_cache.stats
            self.tiers = tiers
        self.budget = PolicyBudget(evicting, block_size) if evicting is not None else None
        if evicting is not None:
            self.retained_cap = evicting.budget
            self.trims = True
        self.copy_s_per_slot = copy_s_per_slot  # compaction copies (simulated: charged as time)
        self.fork_stats = ForkStats()

    @property
    def reserved_slots(self) -> int:  # type: ignore[override]
        return self.pool.num_allocated * self.block_size

    @property
    def admissible_slots(self) -> int:  # type: ignore[override]
        # The watermark also gates re-admission after a preemption, so a request must fit
        # below it or it could be stranded half-way.
        return (self.pool.num_blocks - self.watermark_blocks) * self.block_size

    @property
    def evicted_slots(self) -> int:  # type: ignore[override]
        """Tokens of live sequences an eviction budget dropped."""
        return self.budget.evicted_slots if self.budget is not None else 0

    @property
    def evicted_tokens_total(self) -> int:  # type: ignore[override]
        # entropy-budget drops a mean over layers (a fraction of a slot of every layer)
        return round(self.budget.evicted_total) if self.budget is not None else 0

    def use_known_hashes(self, hashes: dict[int, list[int]]) -> None:
        if self.prefix_cache is not None:
            self.prefix_cache.known_hashes = hashes

    def blocks_needed(self, seq: Sequence, tokens: int) -> int:
        """New blocks for the sequence to span `tokens` (an eviction policy's memory model)."""
        if self.budget is not None:
            return max(0, self.budget.blocks_needed(seq, tokens))
        return max(0, cdiv(tokens, self.block_size) - len(seq.block_table))

    def can_admit(
        self, seq: Sequence, tokens: int, hits: PrefixLookup = NO_HITS, watermark: bool = True
    ) -> bool:
        kept = self.watermark_blocks if watermark else 0
        if not hits.blocks:
            return self.pool.num_free - self.blocks_needed(seq, tokens) >= kept
        # Hits on free cached blocks leave the free queue too; a window's skipped blocks are not
        # held.
        new = cdiv(tokens, self.block_size) - hits.skipped - len(hits.blocks)
        return self.pool.num_free - hits.free_cached - new >= kept

    @property
    def admission_epoch(self) -> int | None:  # type: ignore[override]
        # A free block only leaves the free queue otherwise, and a hit run only shrinks or
        # grows by its next hash (next_hit_hash); a lookup that reaches the offload tiers
        # counts reloads, so it must run every time, and a window's hit is a run anywhere.
        if self.tiers is not None or (self.prefix_cache and self.prefix_cache.window_blocks):
            return None
        return self.pool.epoch

    def next_hit_hash(self, seq: Sequence, hits: PrefixLookup) -> int | None:
        return self.prefix_cache.next_hash(seq, hits) if self.prefix_cache is not None else None

    def holds_hash(self, block_hash: int) -> bool:
        return block_hash in self.pool.hash_to_block

    def lookup(self, seq: Sequence) -> PrefixLookup:
        return self.prefix_cache.lookup(seq) if self.prefix_cache is not None else NO_HITS

    def hit_tokens(self, hits: PrefixLookup) -> int:
        return self.prefix_cache.hit_tokens(hits) if self.prefix_cache is not None else 0

    def adopt(self, seq: Sequence, hits: PrefixLookup) -> int:
        if self.prefix_cache is None:
            return 0
        tokens = self.prefix_cache.adopt(seq, hits)
        if self.budget is not None:
            self.budget.adopt(seq, tokens)
        return tokens

    def take_transfer_s(self) -> float:
        seconds = self.prefix_cache.take_transfer_s() if self.prefix_cache is not None else 0.0
        if self.budget is not None:
            seconds += self.budget.take_copied_slots() * self.copy_s_per_slot
        return seconds

    def attended(self, seq: Sequence, before: int, count: int) -> tuple[int, int]:
        return (
            self.budget.attended(seq, before, count)
            if self.budget is not None
            else (before + count, before)
        )

    def trim(self, seq: Sequence) -> None:
        if self.budget is not None:
            if (
                self.prefix_cache is not None
            ):  # register full blocks before the window frees them (vLLM order)
                self.prefix_cache.cache_full_blocks(seq)
            self.budget.trim(seq, self.pool)

    def cache_full_blocks(self, seq: Sequence, tokens: int | None = None) -> None:
        if self.prefix_cache is not None:
            self.prefix_cache.cache_full_blocks(seq, tokens)

    def cached_prefix_blocks(self, hashes: list[int]) -> int:
        return (
            self.prefix_cache.cached_prefix_blocks(hashes) if self.prefix_cache is not None else 0
        )

    def fork(self, parent: Sequence, child: Sequence) -> bool:
        budget = self.budget
        spanned = budget.table_tokens(parent) if budget is not None else None
        if not fork_blocks(self.pool, self.block_size, parent, child, self.fork_stats, spanned):
            return False
        if budget is not None:
            budget.fork(parent, child)
        return True

    @property
    def shared_slots(self) -> int:  # type: ignore[override]
        # Shared blocks count once; tokens an eviction budget dropped count not at all.
        budget = self.budget
        return self.pool.extra_refs * self.block_size + (
            budget.evicted_slots if budget is not None else 0
        )

    @property
    def cached_free_slots(self) -> int:  # type: ignore[override]
        return self.pool.num_cached_free * self.block_size

    def allocate(self, seq: Sequence, tokens: int) -> bool:
        if self.budget is not None:
            return self.budget.grow(seq, tokens, self.pool)
        needed = self.blocks_needed(seq, tokens)
        if needed == 0:
            return True
        if needed > self.pool.num_free:
            return False
        seq.block_table.extend(self.pool.allocate(needed))
        seq.capacity = len(seq.block_table) * self.block_size
        return True

    def free(self, seq: Sequence) -> None:
        self.pool.free(seq.block_table[::-1])  # tail blocks are reclaimed first
        if self.budget is not None:
            self.budget.release(seq)
        seq.block_table = []
        seq.capacity = 0
        seq.cached_blocks = 0
        seq.dropped_blocks = 0

    def reservation_size(self, seq: Sequence) -> int:
        tokens = seq.final_len if self.budget is None else self.budget.reservation_tokens(seq)
        return cdiv(tokens, self.block_size) * self.block_size

    def planned_slots(self, seq: Sequence) -> int:
        return len(seq.block_table) * self.block_size  # nothing is reserved ahead
