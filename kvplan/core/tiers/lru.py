"""Least-recently-used eviction inside one offload tier."""

from __future__ import annotations

from collections import OrderedDict


class LRUSet:
    """Least recently used: a block read back to the device leaves the tier."""

    name = "lru"
    # whether a block promoted to the device stays here too (seen again: kept as frequent)
    keeps_promoted = False

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.items: OrderedDict[int, None] = OrderedDict()

    def __contains__(self, key: int) -> bool:
        return key in self.items

    def __len__(self) -> int:
        return len(self.items)

    def touch(self, key: int) -> None:
        self.items.move_to_end(key)

    def remove(self, key: int) -> None:
        del self.items[key]

    def add(self, key: int) -> list[int]:
        """Insert; returns the keys evicted to make room."""
        if self.capacity <= 0:
            return [key]
        self.items[key] = None
        evicted = []
        while len(self.items) > self.capacity:
            evicted.append(self.items.popitem(last=False)[0])
        return evicted
