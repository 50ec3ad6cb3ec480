"""Offload tiers below the device pool (host memory, then local disk): the tiered cache
(cache.py) and the eviction sets inside one tier, LRU (lru.py) and ARC (arc.py)."""

from kvplan.core.tiers.arc import ARCSet
from kvplan.core.tiers.cache import TIER_POLICIES, Tier, TieredCache, TierStats
from kvplan.core.tiers.lru import LRUSet

__all__ = ["ARCSet", "LRUSet", "TIER_POLICIES", "Tier", "TierStats", "TieredCache"]
