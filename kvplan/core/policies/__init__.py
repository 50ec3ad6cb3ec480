"""KV eviction policies, one object each (base.py, one module per policy, registry.py),
their configuration (spec.py) and the slot/block memory model (slots.py). Pure Python and
numpy (no torch): the quality evaluator, the real engine and the simulator all use these."""

from __future__ import annotations

from typing import Any

from kvplan import lazy_attribute
from kvplan.core.policies.base import SINKS, EvictionPolicy
from kvplan.core.policies.spec import PolicySpec

# The registry imports every policy module (light: numpy loads inside selection); the
# selection functions and the memory model load on first use (kvplan.lazy_attribute).
_HOMES = {
    "keep_h2o": "kvplan.core.policies.h2o",
    "keep_paged": "kvplan.core.policies.paged_eviction",
    "keep_snapkv": "kvplan.core.policies.snapkv",
    "split_budget": "kvplan.core.policies.entropy_budget",
    "policy_names": "kvplan.core.policies.registry",
    "policies": "kvplan.core.policies.registry",
}
_HOMES.update(
    {
        name: "kvplan.core.policies.slots"
        for name in (
            "attended_tokens",
            "held_blocks",
            "held_tokens",
            "peak_held_tokens",
            "used_tokens",
        )
    }
)
__all__ = [
    "SINKS",
    "EvictionPolicy",
    "PolicySpec",
    "attended_tokens",
    "held_blocks",
    "held_tokens",
    "keep_h2o",
    "keep_paged",
    "keep_snapkv",
    "peak_held_tokens",
    "policies",
    "policy_names",
    "split_budget",
    "used_tokens",
]


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _HOMES, name)
