"""Where an operator's time comes from, in order of trust: a table measured on the device
(`kvplan profile`, profile_source.py), NVIDIA's aiconfigurator tables (aic_source.py, where
they cover the GPU and engine), else the physics roofline below. Each source answers None
for what it does not cover, and `Sources` asks them in turn, remembering which one timed
each kind of operator so the output can say so.

The roofline: a kernel takes max(bytes / achievable bandwidth, FLOPs / achievable FLOP/s)
plus a launch floor. The three constants are read off aiconfigurator-core 0.12.0's own data
for the H100 SXM (vLLM 0.24.0): its system spec scales HBM bandwidth by 0.8 and adds 3 us to
every memory-bound kernel (mem_bw_empirical_scaling_factor, mem_empirical_constant_latency);
its measured 8192 x 8192 bf16 GEMM at M = 4096 takes 0.698 ms, 79% of the datasheet peak; its
prefill attention (one 4,096-token sequence, 64 heads, head size 128) 0.499 ms, 55%. They are
the roofline's only numbers, used for every GPU it times: a named simplification.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from kvplan.sizing.operators.attention import AttentionOp
from kvplan.sizing.operators.shapes import Experts, Gemm
from kvplan.spec import GpuSpec

MEMORY_EFFICIENCY = 0.8
GEMM_EFFICIENCY = 0.79
ATTENTION_EFFICIENCY = 0.55
KERNEL_FLOOR_S = 3e-6
ACTIVATION_BYTES = 2.0  # bf16 activations, whatever the weights' format
ELEMENTWISE = "elementwise"


class OperatorSource(Protocol):
    @property
    def name(self) -> str: ...

    def gemm(self, gemm: Gemm, m: int) -> float | None: ...

    def experts(self, experts: Experts, tokens: int) -> float | None: ...

    def decode_attention(self, op: AttentionOp, batch: int, context: int) -> float | None: ...

    def prefill_attention(self, op: AttentionOp, new: int, before: int) -> float | None: ...

    def all_reduce(self, hidden: int, tp: int, tokens: int) -> float | None: ...

    def memory(self, nbytes: float) -> float | None: ...


@dataclass(frozen=True)
class RooflineSource:
    """The physics of the GPU's datasheet, at the achievable shares above."""

    gpu: GpuSpec
    name: str = "roofline"

    @property
    def bandwidth(self) -> float:
        return self.gpu.hbm_tbps * 1e12 * MEMORY_EFFICIENCY

    def flops_rate(self, compute: str) -> float:
        fp8 = compute in ("fp8", "int8", "fp4") and self.gpu.fp8_support
        return self.gpu.peak_flops(fp8) * GEMM_EFFICIENCY

    def _kernel(self, nbytes: float, flops: float, rate: float, kernels: int = 1) -> float:
        return max(nbytes / self.bandwidth, flops / rate) + KERNEL_FLOOR_S * kernels

    def gemm(self, gemm: Gemm, m: int) -> float:
        weights = gemm.n * gemm.k * gemm.fmt.bytes_per_weight
        activations = m * (gemm.n + gemm.k) * ACTIVATION_BYTES
        return self._kernel(
            weights + activations, 2.0 * m * gemm.n * gemm.k, self.flops_rate(gemm.fmt.compute)
        )

    def experts(self, experts: Experts, tokens: int) -> float:
        """A grouped GEMM over the experts the tokens route to (Experts.touched), each read
        once, each computing its share of the tokens x top-k rows."""
        k = experts.topk
        touched = experts.touched(tokens)
        params = 3 * experts.hidden * experts.inter
        nbytes = touched * params * experts.fmt.bytes_per_weight
        nbytes += tokens * k * (3 * experts.hidden + 3 * experts.inter) * ACTIVATION_BYTES
        flops = 2.0 * tokens * k * params
        return self._kernel(nbytes, flops, self.flops_rate(experts.fmt.compute))

    def decode_attention(self, op: AttentionOp, batch: int, context: int) -> float:
        rate = self.gpu.peak_flops(False) * ATTENTION_EFFICIENCY
        return self._kernel(
            batch * op.decode_bytes(context), batch * op.decode_flops(context), rate, op.layers
        )

    def prefill_attention(self, op: AttentionOp, new: int, before: int) -> float:
        rate = self.gpu.peak_flops(False) * ATTENTION_EFFICIENCY
        return self._kernel(
            op.prefill_bytes(new, before), op.prefill_flops(new, before), rate, op.layers
        )

    def all_reduce(self, hidden: int, tp: int, tokens: int) -> float:
        """Ring all-reduce of tokens x hidden bf16 activations: the link's latency, then
        2 (tp - 1) / tp of the message over its bandwidth (the GPU profile's interconnect)."""
        message = tokens * hidden * ACTIVATION_BYTES
        ring = 2.0 * (tp - 1) / tp * message / (self.gpu.interconnect_gbps * 1e9)
        return self.gpu.interconnect_latency_us * 1e-6 + ring

    def memory(self, nbytes: float) -> float:
        return nbytes / self.bandwidth + KERNEL_FLOOR_S


@dataclass
class Sources:
    """Sources asked in order; `used` records which ones timed each kind of operator."""

    chain: tuple[OperatorSource, ...]
    # kind -> the sources that timed it, by name, in the order first used
    used: dict[str, dict[str, OperatorSource]] = field(default_factory=dict)

    def _ask(self, kind: str, method: str, *args: object) -> float:
        for source in self.chain:
            seconds = getattr(source, method)(*args)
            if seconds is not None:
                self.used.setdefault(kind, {})[source.name] = source
                return float(seconds)
        raise ValueError(f"no source times {kind}")  # the roofline always answers

    def gemm(self, gemm: Gemm, m: int) -> float:
        return self._ask("gemm", "gemm", gemm, m)

    def experts(self, experts: Experts, tokens: int) -> float:
        return self._ask("moe", "experts", experts, tokens)

    def decode_attention(self, op: AttentionOp, batch: int, context: int) -> float:
        return self._ask("decode attention", "decode_attention", op, batch, context)

    def prefill_attention(self, op: AttentionOp, new: int, before: int) -> float:
        return self._ask("prefill attention", "prefill_attention", op, new, before)

    def all_reduce(self, hidden: int, tp: int, tokens: int) -> float:
        return self._ask("all-reduce", "all_reduce", hidden, tp, tokens)

    def memory(self, nbytes: float) -> float:
        return self._ask(ELEMENTWISE, "memory", nbytes)

    def measured(self) -> bool:
        """Whether a measured table (a profile, aiconfigurator's) timed every operator whose
        time a table can hold: the GEMMs, experts, attention and all-reduces. Elementwise
        passes are memory traffic, which aiconfigurator too computes from bandwidth."""
        return all(
            not isinstance(source, RooflineSource)
            for kind, sources in self.used.items()
            if kind != ELEMENTWISE
            for source in sources.values()
        )

    def describe(self) -> str:
        """'gemm: aiconfigurator h100_sxm vllm 0.24.0; moe: aiconfigurator ... + roofline; ...'
        (a kind timed by several sources took the later ones for shapes the first lacks)."""
        return "; ".join(f"{kind}: {' + '.join(names)}" for kind, names in self.used.items())
