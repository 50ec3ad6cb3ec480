"""KV eviction policies, one implementation each: the spec, the per-head selection and the
slot/block memory model. Pure Python and numpy (no torch): the quality evaluator, the
real engine and the simulator all use these."""

from kvplan.core.policies.select import keep_h2o, keep_paged, keep_sliding, keep_snapkv, keep_streaming, split_budget
from kvplan.core.policies.slots import attended_tokens, held_blocks, held_tokens, peak_held_tokens, used_tokens
from kvplan.core.policies.spec import ATTENTION_POLICIES, POLICIES, SINKS, PolicySpec

__all__ = ["ATTENTION_POLICIES", "POLICIES", "SINKS", "PolicySpec", "attended_tokens", "held_blocks", "held_tokens",
           "keep_h2o", "keep_paged", "keep_sliding", "keep_snapkv", "keep_streaming", "peak_held_tokens",
           "split_budget", "used_tokens"]
