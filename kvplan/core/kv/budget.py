"""An eviction policy's token budget, applied as memory (simulated mode): a sequence keeps
at most `max_blocks` blocks; older ones (after `sink_blocks` kept from the start, as
StreamingLLM keeps its attention sinks) go back to the pool as new ones are needed."""

from __future__ import annotations

from kvplan.core.block_pool import BlockPool
from kvplan.core.sequence import Sequence


class TokenBudget:
    def __init__(self, token_budget: int, block_size: int, sink_blocks: int = 0) -> None:
        self.block_size = block_size
        self.max_blocks = -(-token_budget // block_size)
        self.sink_blocks = sink_blocks
        self.evicted_slots = 0  # tokens of live sequences dropped by the budget

    @property
    def retained_cap(self) -> int:
        """Tokens a sequence's attention can read at most (the budget, in whole blocks)."""
        return self.max_blocks * self.block_size

    def new_blocks(self, seq: Sequence, needed: int) -> int:
        """Blocks to take for `needed` more: beyond the budget they replace the oldest ones."""
        return min(needed, self.max_blocks - len(seq.block_table) + 1)

    def reservation_blocks(self, blocks: int) -> int:
        return min(blocks, self.max_blocks)

    def drop_oldest(self, seq: Sequence, tokens: int, pool: BlockPool) -> None:
        """Keep the blocks covering the newest tokens (and the sink blocks) within the budget;
        positions that skip whole blocks are counted as dropped without holding them."""
        block_size = self.block_size
        total = -(-tokens // block_size)  # blocks this many tokens span
        skipped = total - len(seq.block_table) - seq.dropped_blocks
        seq.dropped_blocks += max(0, skipped)
        self.evicted_slots += max(0, skipped) * block_size
        while len(seq.block_table) > self.max_blocks:
            victim = seq.block_table.pop(self.sink_blocks)
            pool.free([victim])
            seq.dropped_blocks += 1
            self.evicted_slots += block_size

    def release(self, seq: Sequence) -> None:
        """The sequence is freed: its dropped tokens no longer count as evicted-while-live."""
        self.evicted_slots -= seq.dropped_blocks * self.block_size
