"""Contiguous reservations (Orca / FasterTransformer style): a real first-fit allocator over
a linear slot space, so external fragmentation is measured from the free extents rather
than assumed."""

from __future__ import annotations

import bisect

from kvplan.core.kv.base import NO_HITS, Allocator, PrefixLookup
from kvplan.core.sequence import Sequence


class ContiguousAllocator(Allocator):
    """Reserve one extent per request at admission: max_model_len (Orca-Max), the next power
    of two of the final length (Orca-Pow2), or exactly the final length (Orca-Oracle)."""

    reserves_ahead = True
    fragments_externally = True

    def __init__(self, policy: str, capacity_slots: int, max_model_len: int) -> None:
        if policy not in ("max", "pow2", "oracle"):
            raise ValueError(f"unknown contiguous policy '{policy}'")
        self.name = f"contiguous-{policy}"
        self.block_size = 1  # extents start and end on any slot
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
            return min(
                1 << (seq.final_len - 1).bit_length(), max(self.max_model_len, seq.final_len)
            )
        return seq.final_len

    def _first_fit(self, size: int) -> int | None:
        for start in self.free_starts:
            if self.free_lengths[start] >= size:
                return start
        return None

    def can_admit(
        self, seq: Sequence, tokens: int, hits: PrefixLookup = NO_HITS, watermark: bool = True
    ) -> bool:
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
