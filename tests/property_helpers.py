"""What the property-based engine tests share (test_engine_properties.py,
test_engine_run_properties.py, test_window_prefix.py): how many examples each property
runs, and the allocator invariants checked after every step."""

from __future__ import annotations

import os
from collections import Counter

from kvplan.core.kv import Allocator, ContiguousAllocator, PagedAllocator
from kvplan.core.sequence import Sequence

EXAMPLES = int(os.environ.get("KVPLAN_PROPERTY_EXAMPLES", "120"))  # raise for a longer hunt


def check_paged(
    allocator: PagedAllocator, holders: list[Sequence], others: list[Sequence] = ()
) -> None:
    """Block tables of `holders` are disjoint, singly referenced and out of the free queue;
    everything else is free; sequences not holding anything have empty tables."""
    pool, size = allocator.pool, allocator.block_size
    tables: Counter[int] = Counter()
    for seq in holders:
        tables.update(seq.block_table)
        assert seq.capacity == len(seq.block_table) * size
    for block, count in tables.items():
        assert count == 1, f"block {block} is in {count} live block tables"
        assert pool.ref_counts[block] == count
        assert block not in pool.free_queue
    assert pool.num_allocated == sum(tables.values())  # nothing held outside live tables
    for block in range(pool.num_blocks):
        if block not in tables:
            assert pool.ref_counts[block] == 0 and block in pool.free_queue
    for seq in others:
        assert seq.block_table == [] and seq.capacity == 0
    assert allocator.reserved_slots == len(tables) * size <= allocator.capacity_slots


def contiguous_gaps(capacity: int, extents: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The free extents implied by the live ones (checked not to overlap), coalesced."""
    gaps, cursor = [], 0
    for start, length in sorted(extents):
        assert length > 0
        assert start >= cursor, f"extent {(start, length)} overlaps the one before it"
        if start > cursor:
            gaps.append((cursor, start - cursor))
        cursor = start + length
    assert cursor <= capacity, "a live extent runs past the end of the slot space"
    if cursor < capacity:
        gaps.append((cursor, capacity - cursor))
    return gaps


def check_contiguous(
    allocator: ContiguousAllocator, holders: list[Sequence], others: list[Sequence] = ()
) -> None:
    extents = []
    for seq in holders:
        assert seq.extent is not None
        assert seq.capacity == seq.extent[1] == allocator.reservation_size(seq)
        extents.append(seq.extent)
    # Live extents plus free extents tile [0, capacity) exactly; free extents are coalesced.
    gaps = contiguous_gaps(allocator.capacity_slots, extents)
    assert allocator.free_starts == sorted(allocator.free_starts)
    assert set(allocator.free_lengths) == set(allocator.free_starts)
    assert [(s, allocator.free_lengths[s]) for s in allocator.free_starts] == gaps
    for (a, la), (b, _) in zip(gaps, gaps[1:]):
        assert a + la < b  # no two free extents touch
    assert allocator.reserved_slots == sum(length for _, length in extents)
    assert (
        allocator.reserved_slots + sum(allocator.free_lengths.values()) == allocator.capacity_slots
    )
    for seq in others:
        assert seq.extent is None and seq.capacity == 0


def check_allocator(
    allocator: Allocator, holders: list[Sequence], others: list[Sequence] = ()
) -> None:
    if isinstance(allocator, PagedAllocator):
        check_paged(allocator, holders, others)
    else:
        check_contiguous(allocator, holders, others)


def check_all_free(allocator: Allocator) -> None:
    assert allocator.reserved_slots == 0
    if isinstance(allocator, PagedAllocator):
        assert allocator.pool.num_free == allocator.pool.num_blocks
        assert all(count == 0 for count in allocator.pool.ref_counts)
    else:
        assert allocator.free_starts == [0]
        assert allocator.free_lengths == {0: allocator.capacity_slots}
