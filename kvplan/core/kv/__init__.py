"""KV allocators behind one interface (base.py): paged blocks (paged.py, composing prefix
caching, eviction budgets and copy-on-write forks), or contiguous first-fit reservations
(contiguous.py). All allocators account in slots (one token's KV in every layer)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvplan import lazy_attribute
from kvplan.engines.scheduling_rules import KVPLAN_RULES, SchedulingRules

if TYPE_CHECKING:
    from kvplan.core.kv.base import Allocator
    from kvplan.core.policies import PolicySpec
    from kvplan.core.tiers import TieredCache

# each contiguous allocator by the reservation rule it passes ContiguousAllocator
CONTIGUOUS_RULES = {
    "contiguous-max": "max",
    "contiguous-pow2": "pow2",
    "contiguous-oracle": "oracle",
}
ALLOCATORS = ("paged", *CONTIGUOUS_RULES)

# The rest load on first use (kvplan.lazy_attribute): the allocator names alone are a CLI's help
# text.
_HOMES = {
    "NO_HITS": "kvplan.core.kv.base",
    "Allocator": "kvplan.core.kv.base",
    "PrefixLookup": "kvplan.core.kv.base",
    "PolicyBudget": "kvplan.core.kv.budget",
    "ContiguousAllocator": "kvplan.core.kv.contiguous",
    "ForkStats": "kvplan.core.kv.fork",
    "PagedAllocator": "kvplan.core.kv.paged",
    "PrefixCache": "kvplan.core.kv.prefix_cache",
    "PrefixStats": "kvplan.core.kv.prefix_stats",
    "hit_rate": "kvplan.core.kv.prefix_stats",
}
__all__ = sorted([*_HOMES, "ALLOCATORS", "CONTIGUOUS_RULES", "make_allocator"])


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _HOMES, name)


def make_allocator(
    kind: str,
    capacity_slots: int,
    block_size: int,
    max_model_len: int,
    watermark: float | None = None,
    prefix_caching: bool = False,
    policy: PolicySpec | None = None,
    tiers: TieredCache | None = None,
    recompute_s_per_token: float = 0.0,
    copy_s_per_slot: float = 0.0,
    rules: SchedulingRules = KVPLAN_RULES,
) -> Allocator:
    from kvplan.core.kv.contiguous import ContiguousAllocator
    from kvplan.core.kv.paged import PagedAllocator

    if kind == "paged":
        return PagedAllocator(
            capacity_slots // block_size,
            block_size,
            watermark,
            prefix_caching,
            policy,
            tiers,
            recompute_s_per_token,
            copy_s_per_slot,
            rules,
        )
    if prefix_caching or (policy is not None and policy.evicts):
        raise ValueError(
            f"prefix caching and eviction budgets need the paged allocator, not {kind}"
        )
    if kind in CONTIGUOUS_RULES:
        return ContiguousAllocator(CONTIGUOUS_RULES[kind], capacity_slots, max_model_len)
    raise ValueError(f"unknown allocator '{kind}'; use one of: {', '.join(ALLOCATORS)}")
