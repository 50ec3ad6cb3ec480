"""KV eviction policies, one implementation each: the spec, the per-head selection and the
slot/block memory model. Pure Python and numpy (no torch): the quality evaluator, the
real engine and the simulator all use these."""

from __future__ import annotations

from typing import Any

from kvplan import lazy_attribute
from kvplan.core.policies.spec import ATTENTION_POLICIES, POLICIES, SINKS, PolicySpec

# The selection (numpy) and memory model load on first use (kvplan.lazy_attribute): the policy names
# alone are a CLI's help text.
_HOMES = {name: "kvplan.core.policies.select" for name in
          ("keep_h2o", "keep_paged", "keep_sliding", "keep_snapkv", "keep_streaming", "split_budget")}
_HOMES.update({name: "kvplan.core.policies.slots" for name in
               ("attended_tokens", "held_blocks", "held_tokens", "peak_held_tokens", "used_tokens")})
__all__ = ["ATTENTION_POLICIES", "POLICIES", "SINKS", "PolicySpec", "attended_tokens", "held_blocks", "held_tokens",
           "keep_h2o", "keep_paged", "keep_sliding", "keep_snapkv", "keep_streaming", "peak_held_tokens",
           "split_budget", "used_tokens"]


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _HOMES, name)
