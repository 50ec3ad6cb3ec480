"""Adaptive replacement (Megiddo & Modha, FAST'03) inside one offload tier: blocks seen
once (recency) are kept apart from blocks seen again (frequency), and ghost lists of
recently evicted keys adapt the split, so one long scan cannot flush the reused prefixes."""

from __future__ import annotations

from collections import OrderedDict


class ARCSet:
    """Adaptive replacement: T1 (seen once), T2 (seen again), ghosts B1/B2 steer `p`."""

    name = "arc"
    keeps_promoted = True

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.p = 0
        self.t1: OrderedDict[int, None] = OrderedDict()
        self.t2: OrderedDict[int, None] = OrderedDict()
        self.b1: OrderedDict[int, None] = OrderedDict()
        self.b2: OrderedDict[int, None] = OrderedDict()

    def __contains__(self, key: int) -> bool:
        return key in self.t1 or key in self.t2

    def __len__(self) -> int:
        return len(self.t1) + len(self.t2)

    def touch(self, key: int) -> None:
        """A hit: the block is now frequent."""
        if key in self.t1:
            del self.t1[key]
        else:
            del self.t2[key]
        self.t2[key] = None

    def remove(self, key: int) -> None:
        (self.t1 if key in self.t1 else self.t2).pop(key)

    def _replace(self, key: int) -> int:
        if self.t1 and (len(self.t1) > self.p or (key in self.b2 and len(self.t1) == self.p)):
            victim = self.t1.popitem(last=False)[0]
            self.b1[victim] = None
        else:
            victim = self.t2.popitem(last=False)[0]
            self.b2[victim] = None
        return victim

    def add(self, key: int) -> list[int]:
        if self.capacity <= 0:
            return [key]
        evicted = []
        if key in self.b1:  # recently evicted from recency: grow its share
            self.p = min(self.capacity, self.p + max(1, len(self.b2) // max(1, len(self.b1))))
            del self.b1[key]
            if len(self) >= self.capacity:
                evicted.append(self._replace(key))
            self.t2[key] = None
        elif key in self.b2:  # recently evicted from frequency: grow that share
            self.p = max(0, self.p - max(1, len(self.b1) // max(1, len(self.b2))))
            del self.b2[key]
            if len(self) >= self.capacity:
                evicted.append(self._replace(key))
            self.t2[key] = None
        else:
            if len(self.t1) + len(self.b1) >= self.capacity:
                if len(self.t1) < self.capacity:
                    self.b1.popitem(last=False)
                    if len(self) >= self.capacity:
                        evicted.append(self._replace(key))
                else:
                    evicted.append(self.t1.popitem(last=False)[0])
            elif len(self) + len(self.b1) + len(self.b2) >= self.capacity:
                if len(self) + len(self.b1) + len(self.b2) >= 2 * self.capacity and self.b2:
                    self.b2.popitem(last=False)
                if len(self) >= self.capacity:
                    evicted.append(self._replace(key))
            self.t1[key] = None
        return evicted
