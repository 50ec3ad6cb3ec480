"""Parallel sampling by copy-on-write, as in the vLLM paper: a sample forked after the
prompt's first token shares every full block of its parent."""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.core.block_pool import BlockPool
from kvplan.core.sequence import Sequence


@dataclass
class ForkStats:
    forks: int = 0
    cow_copies: int = 0  # partial last blocks copied at a fork


def fork_blocks(
    pool: BlockPool,
    block_size: int,
    parent: Sequence,
    child: Sequence,
    stats: ForkStats,
    table_tokens: int | None = None,
) -> bool:
    """The child shares every full block; a partial last block is copied now (eager
    copy-on-write: the next decode step would write into it anyway). False if no block
    is free for the copy. `table_tokens`: the tokens the parent's table spans (a compacting
    eviction policy holds fewer than it computed); by default every computed token."""
    dropped = parent.dropped_blocks  # a window's table starts at logical block `dropped`
    spanned = parent.num_computed if table_tokens is None else table_tokens
    full = spanned // block_size - dropped
    partial = len(parent.block_table) > full
    if partial and pool.num_free < 1:
        return False
    for block in parent.block_table[:full]:
        pool.touch(block)
    child.block_table = parent.block_table[:full]
    if partial:
        child.block_table += pool.allocate(1)
        stats.cow_copies += 1
    child.capacity = (dropped + len(child.block_table)) * block_size
    child.dropped_blocks = dropped
    child.hashes, child.cached_blocks = parent.hashes, min(parent.cached_blocks, full + dropped)
    stats.forks += 1
    return True
