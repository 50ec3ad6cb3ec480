"""How `kvplan profile` runs a routed-expert layer: with the serving engine's own kernel where
the profiling environment has it, else as a loop of torch GEMMs.

A MoE layer's time depends on the kernel far more than a dense GEMM's does. vLLM's CPU
backend serves an unquantized MoE with its own grouped GEMM over prepacked weights
(`cpu_fused_moe`, vllm/model_executor/layers/fused_moe/experts/cpu_moe.py), which runs
3-5x faster on one AVX2 thread than torch's per-expert linear at 16-512 tokens. Run in an
environment where vLLM's CPU build imports, the profile times that kernel (the table's notes
say so); anywhere else, the loop over the experts the tokens touch.

Both route the same way: uniform routing of T tokens to top-k of E experts touches
E (1 - (1 - k / E)^T) of them (kvplan.sizing.operators.shapes.expected_touched), and the T x k
rows split evenly among those.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from types import ModuleType

import torch
import torch.nn.functional as F

from kvplan.sizing.operators.shapes import expected_touched

# vLLM's CPU grouped GEMM needs its hidden and (zero-padded) intermediate widths in multiples
# of its output tile (CPUUnquantizedExperts.output_alignment)
VLLM_CPU_ALIGNMENT = 32

Call = Callable[[], object]


def touched_experts(experts: int, topk: int, tokens: int) -> int:
    """The distinct experts uniform routing of `tokens` tokens touches (expected_touched),
    rounded: at least top-k, at most all."""
    return max(topk, min(experts, round(expected_touched(experts, topk, tokens))))


def even_split(rows: int, parts: int) -> list[int]:
    return [rows // parts + (1 if i < rows % parts else 0) for i in range(parts)]


@dataclass(frozen=True)
class ExpertLayer:
    """One layer's expert weights, gate-and-up (E x 2I x H) and down (E x H x I)."""

    up: torch.Tensor
    down: torch.Tensor


class TorchExpertLoop:
    """Each touched expert a gate-and-up GEMM, SiLU-and-multiply and a down GEMM over its rows."""

    name = "torch F.linear per touched expert"

    def prepare(self, up: torch.Tensor, down: torch.Tensor) -> ExpertLayer:
        return ExpertLayer(up, down)

    def call(self, layer: ExpertLayer, x: torch.Tensor, tokens: int, topk: int) -> Call:
        experts = layer.up.shape[0]
        split = even_split(tokens * topk, touched_experts(experts, topk, tokens))
        return partial(_expert_loop, x, layer.up, layer.down, split)


def _expert_loop(
    x: torch.Tensor, up: torch.Tensor, down: torch.Tensor, split: Sequence[int]
) -> None:
    start = 0
    for expert, rows in enumerate(split):
        gate, value = F.linear(x[start : start + rows], up[expert]).chunk(2, dim=-1)
        F.linear(F.silu(gate) * value, down[expert])
        start += rows


class VllmCpuFusedMoe:
    """vLLM's CPU grouped GEMM (`cpu_fused_moe` on weights `cpu_prepack_moe_weight` packed):
    the kernel its CPU backend runs an unquantized MoE layer with, on AMX where the CPU has it
    and the weights are bf16, else its portable vector path (as vLLM chooses)."""

    def __init__(self, ops: ModuleType, version: str, isa: str) -> None:
        self.ops, self.isa = ops, isa
        self.name = f"vLLM {version} cpu_fused_moe ({isa})"

    def prepare(self, up: torch.Tensor, down: torch.Tensor) -> ExpertLayer:
        experts, double, hidden = up.shape
        inter = double // 2
        padded = -(-inter // VLLM_CPU_ALIGNMENT) * VLLM_CPU_ALIGNMENT
        if padded != inter:  # zero columns, as vLLM pads the intermediate width at load
            zeros = up.new_zeros(experts, padded - inter, hidden)
            up = torch.cat([up[:, :inter], zeros, up[:, inter:], zeros], 1)
            down = torch.cat([down, down.new_zeros(experts, hidden, padded - inter)], 2)
        pack = self.ops.cpu_prepack_moe_weight
        return ExpertLayer(pack(up.contiguous(), self.isa), pack(down.contiguous(), self.isa))

    def call(self, layer: ExpertLayer, x: torch.Tensor, tokens: int, topk: int) -> Call:
        experts = layer.up.shape[0]
        touched = touched_experts(experts, topk, tokens)
        # token t's j-th choice is expert (t k + j) mod touched: k distinct experts per token,
        # the touched experts' rows as even as the count allows
        picks = torch.arange(tokens * topk, dtype=torch.int32).remainder_(touched)
        ids = picks.view(tokens, topk)
        weights = torch.full((tokens, topk), 1.0 / topk, dtype=torch.float32)
        rows = x[:tokens].contiguous()
        out = torch.empty_like(rows)
        return partial(self.ops.cpu_fused_moe, out, rows, layer.up, layer.down, None, None,
                       weights, ids, "silu", self.isa)  # fmt: skip


ExpertKernel = TorchExpertLoop | VllmCpuFusedMoe


def expert_kernel(device: str, dtype: torch.dtype, hidden: int) -> ExpertKernel:
    """The serving engine's kernel where it imports and takes this shape, else the loop."""
    if device != "cpu" or dtype not in (torch.bfloat16, torch.float16, torch.float32):
        return TorchExpertLoop()
    if hidden % VLLM_CPU_ALIGNMENT:
        return TorchExpertLoop()
    ops = _vllm_cpu_ops() if importlib.util.find_spec("vllm") else None
    if ops is None:
        return TorchExpertLoop()
    amx = dtype == torch.bfloat16 and bool(getattr(torch.cpu, "_is_amx_tile_supported", bool)())
    version = getattr(importlib.import_module("vllm"), "__version__", "?")
    return VllmCpuFusedMoe(ops, version, "amx" if amx else "vec")


def _vllm_cpu_ops() -> ModuleType | None:
    """vllm._custom_ops when vLLM's CPU build (its compiled `_C` with cpu_fused_moe) imports."""
    try:
        ops = importlib.import_module("vllm._custom_ops")
        torch.ops._C.cpu_fused_moe  # noqa: B018 (present only in the CPU build)
    except (ImportError, AttributeError, RuntimeError, OSError):
        return None
    return ops if hasattr(ops, "cpu_fused_moe") else None
