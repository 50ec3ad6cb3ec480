"""Roofline time model: a step costs at least its HBM bytes over bandwidth and its FLOPs
over peak compute, whichever is larger.

Used by `estimate` (ITL and tokens/s per batch size, prefill lower bound) and by the
simulated engine (the modeled time of every step). All figures are per GPU at tensor
parallel degree tp; communication is not modeled, so these are lower bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from kvplan.spec import GpuSpec, KVFormat, ModelSpec
from kvplan.spec.attention_group import AttentionGroup
from kvplan.spec.weight_quant import weight_quant


@dataclass(frozen=True)
class Roofline:
    model: ModelSpec
    gpu: GpuSpec
    tp: int
    kv_format: KVFormat
    weight_dtype: str | None = None
    # Tokens per layer an eviction policy keeps (--kv-budget): a decode step then reads and
    # attends to at most these, the memory model of kvplan.core.policies; None: every token
    kv_budget: int | None = None

    @cached_property
    def weight_bytes_per_gpu(self) -> float:
        return self.model.weight_bytes(self.weight_dtype) / self.tp

    @cached_property
    def expert_bytes_per_gpu(self) -> float:
        params = self.model.params
        if not params.is_moe:
            return 0.0
        return self.weight_bytes_per_gpu * params.experts_total / params.total

    @property
    def uses_fp8_compute(self) -> bool:
        dtype = self.weight_dtype or self.model.weight_dtype
        return (
            weight_quant(dtype).dtype == "fp8" and self.gpu.fp8_support
        )  # W8A8; weight-only formats compute in 16 bit

    @cached_property
    def peak_flops(self) -> float:
        return self.gpu.peak_flops(self.uses_fp8_compute)

    @cached_property
    def bandwidth(self) -> float:
        return self.gpu.hbm_tbps * 1e12

    def weight_bytes_read(self, tokens: int) -> float:
        """Weights one forward pass over `tokens` tokens reads: every dense weight of the
        language model (a vision tower is loaded but no text step reads it), and for MoE the
        experts at least one token routes to (uniform routing: E(1-(1-k/E)^n))."""
        experts = self.expert_bytes_per_gpu
        dense = (
            self.weight_bytes_per_gpu
            - experts
            - self.model.vision_weight_bytes(self.weight_dtype) / self.tp
        )
        if not experts or tokens <= 0:
            return dense + (experts if tokens > 0 else 0.0)
        total, per_token = self.model.num_experts, self.model.experts_per_token
        touched = 1.0 - (1.0 - per_token / total) ** tokens
        return dense + experts * touched

    def linear_flops(self, tokens: int) -> float:
        return 2.0 * self.model.params.matmul_active * tokens / self.tp

    def expert_flops(self, tokens: int) -> float:
        """The part of linear_flops that runs in the routed experts' GEMMs (0 for dense models)."""
        return 2.0 * self.model.params.experts_active * tokens / self.tp

    def seen_tokens(self, group: AttentionGroup, context: int, kept: bool = False) -> int:
        """Tokens of `group` a query at `context` attends to: its window, and with `kept` at
        most the eviction budget (a decode step, once the policy has pruned)."""
        seen = group.retained_tokens(context)
        return min(seen, self.kv_budget) if kept and self.kv_budget is not None else seen

    def attention_flops(self, query_tokens: int, context: int, kept: bool = False) -> float:
        """QK^T and PV for `query_tokens` new tokens that each see up to `context` tokens
        (with `kept`, up to the tokens the eviction budget keeps)."""
        heads_per_gpu = self.model.num_heads / self.tp
        flops = 0.0
        for group in self.model.token_groups:
            seen = self.seen_tokens(group, context, kept)
            per_pair = group.attention_flops_per_pair(heads_per_gpu, prefill=query_tokens > 1)
            flops += per_pair * seen * query_tokens
            if query_tokens > 1:
                flops += group.up_projection_flops_per_token(heads_per_gpu) * seen
        return flops

    def kv_read_bytes(self, context: int, kept: bool = False) -> float:
        """KV bytes one step reads for one sequence of `context` tokens: attention reads only
        the window, and with `kept` only what the eviction budget keeps."""
        total = float(self.model.state_bytes_per_seq(self.tp))
        for group in self.model.token_groups:
            seen = self.seen_tokens(group, context, kept)
            total += seen * group.bytes_per_token(self.kv_format, self.tp)
        return total

    def step_time(self, tokens: int, flops: float, kv_bytes: float) -> float:
        compute = (self.linear_flops(tokens) + flops) / self.peak_flops
        return max(self.memory_time(tokens, kv_bytes), compute)

    def memory_time(self, tokens: int, kv_bytes: float) -> float:
        """The HBM side of step_time: the weights a step of `tokens` reads and `kv_bytes`."""
        return (self.weight_bytes_read(tokens) + kv_bytes) / self.bandwidth

    def decode_step_time(self, batch: int, context: int) -> float:
        """One decode step of `batch` sequences that each hold `context` tokens (each keeps
        at most the eviction budget)."""
        flops = batch * self.attention_flops(1, context, kept=True)
        return self.step_time(batch, flops, batch * self.kv_read_bytes(context, kept=True))

    def decode_memory_time(self, batch: int, context: int) -> float:
        """The HBM side of decode_step_time: decode is memory-bound where this is the step."""
        return self.memory_time(batch, batch * self.kv_read_bytes(context, kept=True))

    def prefill_time(self, prompt: int) -> float:
        """Lower bound for one prompt's prefill: causal attention sees prompt/2 on average
        (every prompt token: an eviction policy prunes after the prompt is read)."""
        flops = self.attention_flops(prompt, max(1, prompt // 2))
        return self.step_time(prompt, flops, self.kv_read_bytes(prompt))
