"""What one forward pass runs on one GPU: the operators of a model at a tensor-parallel degree.

Shapes come from the model's parameter counts by role (kvplan.spec.model.ParamCount), so the
bytes and FLOPs they imply add up to the model's own: per layer, the attention projections as
a QKV GEMM (column-parallel) and an output GEMM (row-parallel) split as heads : 2 KV heads
across them, the dense MLP as a gate-and-up GEMM and a down GEMM of a gated MLP (I = dense
MLP parameters / 3 hidden), the routed experts as a grouped GEMM of E experts of the same
gated shape, top-k of which each token visits, and the router. Once per step: the LM head over
the sequences that sample, and the sampler over their vocabulary. Attention is one operator
per kind of attention group (attention.py), chosen by the group's kind.

Named simplifications: every layer is given the same share of the dense-MLP weights (the
dense MLPs of DeepSeek's first three layers and the shared experts of the others are averaged
into one GEMM per layer, the same bytes and FLOPs); MLA's low-rank projections are one GEMM of
the attention parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvplan.sizing.operators.attention import AttentionOp, attention_ops
from kvplan.spec import KVFormat, ModelSpec
from kvplan.spec.weight_quant import weight_quant

SIXTEEN_BIT = 2.0
Compute = Literal["16bit", "fp8", "int8", "fp4"]


@dataclass(frozen=True)
class WeightFormat:
    """How a GEMM's weights are stored and what it multiplies in."""

    bytes_per_weight: float  # as stored, scales and zero points included
    compute: Compute  # the tensor-core precision: weight-only formats dequantize to 16 bit
    label: str  # bf16, fp8, fp8-block, int8, int4-wo, mxfp4-wo, nvfp4: what a table keys


BF16 = WeightFormat(SIXTEEN_BIT, "16bit", "bf16")


@dataclass(frozen=True)
class Gemm:
    name: str
    n: int  # output features on this GPU
    k: int  # input features on this GPU
    per_step: int  # how many run per step (layers)
    fmt: WeightFormat


@dataclass(frozen=True)
class Experts:
    """A routed-expert layer on one GPU (expert parallelism not modeled: every GPU holds a
    1 / tp slice of every expert, as vLLM's default tensor-parallel MoE does)."""

    hidden: int
    inter: int  # each expert's intermediate size on this GPU
    experts: int
    topk: int
    per_step: int  # MoE layers
    tp: int
    fmt: WeightFormat

    def touched(self, tokens: int) -> float:
        """The distinct experts uniform routing of `tokens` tokens touches: E (1 - (1 - k / E)^T)
        of the E experts (the chance that no one of T tokens picks a given expert is
        (1 - k / E)^T)."""
        return expected_touched(self.experts, self.topk, tokens)


def expected_touched(experts: int, topk: int, tokens: int) -> float:
    return experts * (1.0 - (1.0 - topk / experts) ** tokens) if tokens else 0.0


@dataclass(frozen=True)
class Elementwise:
    """A memory-bound kernel each layer runs over every token (a fused residual add and
    RMSNorm, the MLP's activation), as aiconfigurator's model op lists count them."""

    name: str
    bytes_per_token: float  # read and written
    per_step: int  # layers


@dataclass(frozen=True)
class ModelOps:
    gemms: tuple[Gemm, ...]  # token-major: M = the step's tokens
    experts: Experts | None
    lm_head: Gemm  # M = the sequences that sample this step
    attention: tuple[AttentionOp, ...]
    all_reduces_per_step: int  # each of tokens x hidden activations (0 at tp 1)
    hidden: int
    tp: int
    vocab_per_gpu: int
    elementwise: tuple[Elementwise, ...]
    embedding_bytes_per_token: float


def role_format(model: ModelSpec, role: str, weight_dtype: str | None) -> WeightFormat:
    """The storage and compute format of one parameter role (attention, dense, experts,
    lm_head), as kvplan.spec.model.ModelSpec.weight_bytes sizes it."""
    quant = model.checkpoint_quant if weight_dtype is None else None
    if quant is not None:
        kept = (quant.experts_only and role != "experts") or (
            role == "lm_head" and not quant.lm_head_quantized
        )
        if kept:
            return BF16
        stored = quant.role_bytes(role, model.hidden_size)
        label = "fp8-block" if quant.dtype == "fp8" and quant.block else quant.dtype
        return _format(quant.dtype, stored, label)
    recipe = weight_quant(weight_dtype or model.weight_dtype)
    if recipe.element_bytes >= SIXTEEN_BIT or role == "lm_head":
        return BF16
    if role == "attention" and not recipe.attention_quantized:
        return BF16
    return _format(recipe.dtype, recipe.element_bytes, recipe.dtype)


def _format(dtype: str, stored: float, label: str) -> WeightFormat:
    if dtype == "fp8":
        return WeightFormat(stored, "fp8", label)
    if dtype == "int8":
        return WeightFormat(stored, "int8", "int8")
    if dtype == "nvfp4":
        return WeightFormat(stored, "fp4", "nvfp4")
    # int4 (AWQ, GPTQ), mxfp4 and the like: weight-only, dequantized into 16-bit GEMMs
    return WeightFormat(stored, "16bit", f"{dtype}-wo")


def model_ops(
    model: ModelSpec, tp: int, kv_format: KVFormat, weight_dtype: str | None = None
) -> ModelOps:
    p, h, layers = model.params, model.hidden_size, model.num_layers
    attention = attention_ops(model, tp, kv_format)
    headed = [op for op in attention if op.heads_per_gpu and op.kv_heads_per_gpu]
    per_layer = p.attention / layers
    if headed:  # QKV : output as (heads + 2 KV heads) : heads
        heads, kv = model.num_heads, headed[0].group.num_kv_heads
        qkv_share = (heads + 2 * kv) / (2 * heads + 2 * kv)
    else:  # MLA's and linear attention's projections: in and out alike
        qkv_share = 0.5
    fmt = role_format(model, "attention", weight_dtype)
    gemms = [
        Gemm("qkv", _cols(per_layer * qkv_share, h, tp), h, layers, fmt),
        Gemm("o", h, _cols(per_layer * (1 - qkv_share), h, tp), layers, fmt),
    ]
    dense = (p.dense_mlp - p.routers) / layers
    if dense > 0:
        inter = dense / (3 * h)
        fmt = role_format(model, "dense", weight_dtype)
        gemms.append(Gemm("gate_up", _cols(2 * inter * h, h, tp), h, layers, fmt))
        gemms.append(Gemm("down", h, _cols(inter * h, h, tp), layers, fmt))
    experts = None
    if p.is_moe and model.num_experts:
        # the config's own layout where the spec has it; else every layer an equal share
        moe_layers = model.moe_layers or layers
        width = model.expert_width or p.experts_total / moe_layers / model.num_experts / (3 * h)
        if p.routers:
            gemms.append(Gemm("router", model.num_experts, h, moe_layers, BF16))
        experts = Experts(
            h,
            max(1, round(width / tp)),
            model.num_experts,
            max(1, model.experts_per_token),
            moe_layers,
            tp,
            role_format(model, "experts", weight_dtype),
        )
    vocab = max(1, -(-model.vocab_size // tp))
    lm_head = Gemm("lm_head", vocab, h, 1, role_format(model, "lm_head", weight_dtype))
    # per layer, as aiconfigurator's llama.py lists them: two fused residual-add + RMSNorm
    # kernels (read 2h, write 2h) and, for a dense MLP, SiLU-and-multiply (read 2I, write I);
    # RoPE and the KV cache write run inside attention
    norms = [Elementwise(f"add_norm_{i}", SIXTEEN_BIT * 4 * h, layers) for i in (1, 2)]
    if dense > 0:
        norms.append(Elementwise("act", SIXTEEN_BIT * 3 * dense / (3 * h) / tp, layers))
    return ModelOps(
        gemms=tuple(g for g in gemms if g.n > 0 and g.k > 0),
        experts=experts,
        lm_head=lm_head,
        attention=attention,
        all_reduces_per_step=2 * layers if tp > 1 else 0,
        hidden=h,
        tp=tp,
        vocab_per_gpu=vocab,
        elementwise=tuple(norms),
        embedding_bytes_per_token=SIXTEEN_BIT * h,
    )


def _cols(params: float, rows: int, tp: int) -> int:
    """Features on one GPU of a matrix of `params` weights with `rows` on the other side."""
    return max(1, round(params / rows / tp))
