"""Frozen descriptions of what is being planned for: a model's KV layout, a GPU, a KV format.

Byte sizes are properties or small methods on these specs, so that every layer of kvplan
(estimator, engine, kernels) derives sizes from one place.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Literal

AttentionKind = Literal["full", "sliding", "mla", "state"]


@dataclass(frozen=True)
class AttentionGroup:
    """Layers that share one KV layout.

    full / sliding: a K and a V vector per KV head per token. mla: one latent vector per
    token (DeepSeek's compressed KV, shared by all heads, not split by tensor parallelism).
    state: a constant per-sequence state (linear attention / SSM layers), no per-token KV.
    """

    kind: AttentionKind
    num_layers: int
    num_kv_heads: int = 0
    head_dim: int = 0
    window: int | None = None
    latent_dim: int = 0
    state_bytes_per_layer: int = 0

    def __post_init__(self) -> None:
        if self.num_layers <= 0:
            raise ValueError(f"attention group needs at least one layer, got {self.num_layers}")
        if self.kind in ("full", "sliding") and (self.num_kv_heads <= 0 or self.head_dim <= 0):
            raise ValueError(f"{self.kind} attention needs positive kv heads and head_dim")
        if self.kind == "sliding" and (self.window is None or self.window <= 0):
            raise ValueError("sliding attention needs a positive window")
        if self.kind == "mla" and self.latent_dim <= 0:
            raise ValueError("MLA attention needs a positive latent dimension")

    @property
    def has_token_kv(self) -> bool:
        return self.kind != "state"

    def vectors_per_token(self, tp: int = 1) -> int:
        """KV vectors one GPU stores per token per layer at tensor-parallel degree tp."""
        if self.kind == "mla":
            return 1  # the latent is replicated on every rank
        if self.kind == "state":
            return 0
        # vLLM shards KV heads across ranks and replicates them when tp > kv heads.
        return 2 * max(1, self.num_kv_heads // tp)

    @property
    def vector_dim(self) -> int:
        return self.latent_dim if self.kind == "mla" else self.head_dim

    def bytes_per_token_layer(self, fmt: KVFormat, tp: int = 1) -> float:
        return self.vectors_per_token(tp) * fmt.bytes_per_vector(self.vector_dim)

    def bytes_per_token(self, fmt: KVFormat, tp: int = 1) -> float:
        """Bytes per token across all layers of the group, as if every layer kept full length."""
        return self.num_layers * self.bytes_per_token_layer(fmt, tp)

    def retained_tokens(self, context: int) -> int:
        """Tokens whose KV the group must keep at this context length (windows respected)."""
        if self.kind == "sliding":
            return min(context, self.window or context)
        return context if self.has_token_kv else 0

    def describe(self) -> str:
        if self.kind == "mla":
            return f"{self.num_layers} x MLA latent {self.latent_dim}"
        if self.kind == "state":
            return f"{self.num_layers} x state {self.state_bytes_per_layer:,} B/seq"
        text = f"{self.num_layers} x {self.num_kv_heads} KV heads x {self.head_dim}"
        return text + (f", window {self.window}" if self.kind == "sliding" else "")


@dataclass(frozen=True)
class ParamCount:
    """Parameter counts by role, so weight bytes can use a different dtype per role.

    `active` is what one token's forward pass multiplies with: inactive experts and the
    input embedding table (a row gather, not a matmul) are left out, as OpenAI and DeepSeek
    count active parameters. A tied LM head is the embedding table, so it stays in.
    """

    embedding: int
    lm_head: int
    attention: int
    dense_mlp: int
    experts_total: int
    experts_active: int
    other: int

    @property
    def total(self) -> int:
        return (self.embedding + self.lm_head + self.attention + self.dense_mlp
                + self.experts_total + self.other)

    @property
    def active(self) -> int:
        head = self.lm_head or self.embedding
        return head + self.attention + self.dense_mlp + self.experts_active + self.other

    @property
    def is_moe(self) -> bool:
        return self.experts_total > 0


@dataclass(frozen=True)
class ModelSpec:
    name: str
    source: str
    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    groups: tuple[AttentionGroup, ...]
    params: ParamCount
    weight_dtype: str = "bf16"
    dtype: str = "bf16"  # the checkpoint's activation dtype; what `--kv-dtype auto` means
    expert_weight_bits: float | None = None
    num_experts: int = 0
    experts_per_token: int = 0

    @property
    def token_groups(self) -> tuple[AttentionGroup, ...]:
        return tuple(g for g in self.groups if g.has_token_kv)

    @property
    def has_windows(self) -> bool:
        return any(g.kind == "sliding" for g in self.groups)

    @property
    def kv_kind(self) -> str:
        """MHA / GQA / MQA / MLA, with +SWA for sliding-window layers and +linear for state layers."""
        kinds = {g.kind for g in self.groups}
        if "mla" in kinds:
            return "MLA"
        heads = next(g.num_kv_heads for g in self.groups if g.kind in ("full", "sliding"))
        label = "MHA" if heads == self.num_heads else ("MQA" if heads == 1 else "GQA")
        if "sliding" in kinds:
            label += "+SWA" if "full" in kinds else " (all SWA)"
        if "state" in kinds:
            label += "+linear"
        return label

    def kv_bytes_per_token(self, fmt: KVFormat, tp: int = 1) -> float:
        """Per-token KV bytes on one GPU with every attention layer kept at full length."""
        return sum(g.bytes_per_token(fmt, tp) for g in self.groups)

    def state_bytes_per_seq(self, tp: int = 1) -> int:
        # Linear-attention state is sharded over heads like the projections that own it.
        return sum(g.num_layers * g.state_bytes_per_layer for g in self.groups) // tp

    def kv_bytes(self, context: int, fmt: KVFormat, tp: int = 1, *, respect_windows: bool) -> float:
        """KV bytes one sequence of `context` tokens needs on one GPU.

        respect_windows=False is what an engine that allocates every layer at full length
        (one shared block table for all layers) needs; True is the ideal size.
        """
        total = float(self.state_bytes_per_seq(tp))
        for g in self.token_groups:
            tokens = g.retained_tokens(context) if respect_windows else context
            total += tokens * g.bytes_per_token(fmt, tp)
        return total

    def naive_kv_bytes_per_token(self, fmt: KVFormat) -> float:
        """The blog-post formula: 2 x layers x hidden_size x bytes, ignoring GQA/MLA/windows."""
        return 2 * self.num_layers * self.hidden_size * fmt.bits / 8

    def weight_bytes(self, weight_dtype: str | None = None) -> float:
        """Weight bytes for the whole model; quantized expert weights where the config says so."""
        if weight_dtype is not None:
            return self.params.total * dtype_bytes(weight_dtype)
        base = dtype_bytes(self.weight_dtype)
        embeddings = self.params.embedding + self.params.lm_head
        embed_bytes = embeddings * max(base, 2.0)  # checkpoints keep embeddings in 16 bit
        if self.expert_weight_bits is not None:
            experts = self.params.experts_total * self.expert_weight_bits / 8
            rest = (self.params.total - self.params.experts_total - embeddings) * 2.0
            return embed_bytes + experts + rest
        return embed_bytes + (self.params.total - embeddings) * base

    def with_param_count(self, total: float) -> ModelSpec:
        """The same model with its parameter count overridden (each role scaled alike)."""
        if total <= 0:
            raise ValueError(f"--params-b must be positive, got {total / 1e9:g}")
        scale = total / self.params.total
        p = self.params
        counts = ParamCount(*(round(v * scale) for v in (p.embedding, p.lm_head, p.attention, p.dense_mlp,
                                                        p.experts_total, p.experts_active, p.other)))
        return replace(self, params=counts)


_DTYPE_BYTES = {
    "fp32": 4.0, "float32": 4.0, "fp16": 2.0, "float16": 2.0, "bf16": 2.0, "bfloat16": 2.0,
    "fp8": 1.0, "int8": 1.0, "int4": 0.5, "fp4": 0.5, "mxfp4": 4.25 / 8, "nvfp4": 4.5 / 8,
}


def dtype_bytes(name: str) -> float:
    try:
        return _DTYPE_BYTES[name.lower()]
    except KeyError:
        raise ValueError(
            f"unknown weight dtype '{name}'; use one of: {', '.join(sorted(_DTYPE_BYTES))}"
        ) from None


ScaleScheme = Literal["none", "tensor", "token-head", "group", "kivi"]


@dataclass(frozen=True)
class KVFormat:
    """How one KV vector is stored: element bits plus the scales a quantized format needs.

    Scales are fp32 as vLLM sizes them: per-token-head int8 at head_dim 128 is
    128 + 4 = 132 B per vector, 264 B per token per head for K and V.
    """

    name: str
    bits: int
    is_float: bool
    scale: ScaleScheme = "none"
    group_size: int | None = None
    scale_bytes: int = 4

    def bytes_per_vector(self, dim: int) -> float:
        data = math.ceil(dim * self.bits / 8)
        if self.scale == "token-head":
            return data + self.scale_bytes
        if self.scale == "group":
            return data + math.ceil(dim / (self.group_size or dim)) * self.scale_bytes
        if self.scale == "kivi":
            # KIVI: a key's scales are per channel, shared by a group of tokens; a value's are
            # per token. Averaged over the K and V vectors of a token; the full-precision
            # recent window is not counted (steady state).
            key_scales = dim * self.scale_bytes / (self.group_size or 1)
            return data + (key_scales + self.scale_bytes) / 2
        return float(data)  # per-tensor scales are a few bytes per layer, not per token

    @property
    def label(self) -> str:
        return self.name


_FLOAT_FORMATS = {
    "fp32": KVFormat("fp32", 32, True),
    "fp16": KVFormat("fp16", 16, True),
    "bf16": KVFormat("bf16", 16, True),
    "fp8-e4m3": KVFormat("fp8-e4m3", 8, True, "tensor"),
    "fp8-e5m2": KVFormat("fp8-e5m2", 8, True, "tensor"),
}
_ALIASES = {"fp8": "fp8-e4m3", "float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
_INT_PATTERN = re.compile(r"^int(8|4|2)(?:-(g(\d+)|tensor|token))?$")

KV_FORMAT_NAMES = ("auto", "fp32", "fp16", "bf16", "fp8", "fp8-e4m3", "fp8-e5m2", "int8", "int4",
                   "int2-g32", "int4-g64 (any int{8,4,2}-gN)", "kivi-int2", "kivi-int4")


def parse_kv_format(name: str, model: ModelSpec | None = None) -> KVFormat:
    """auto (the model's dtype), fp32, fp16, bf16, fp8[-e4m3|-e5m2], int8/int4/int2 (per token-head scales),
    int4-g64 (group-wise scales every 64 elements), int8-tensor (one scale per tensor)."""
    key = _ALIASES.get(name.lower(), name.lower())
    if key == "auto":
        key = model.dtype if model is not None and model.dtype in _FLOAT_FORMATS else "bf16"
    if key in _FLOAT_FORMATS:
        return _FLOAT_FORMATS[key]
    if key in ("kivi-int2", "kivi-int4"):
        return KVFormat(key, int(key[-1]), False, "kivi", 32)
    match = _INT_PATTERN.match(key)
    if not match:
        raise ValueError(f"unknown KV dtype '{name}'; use one of: {', '.join(KV_FORMAT_NAMES)}")
    bits = int(match.group(1))
    if match.group(3):
        group = int(match.group(3))
        if group <= 0:
            raise ValueError(f"group size must be positive in '{name}'")
        return KVFormat(key, bits, False, "group", group)
    if match.group(2) == "tensor":
        return KVFormat(key, bits, False, "tensor")
    return KVFormat(f"int{bits}", bits, False, "token-head")


@dataclass(frozen=True)
class GpuSpec:
    """Dense (non-sparsity) datasheet figures for one GPU, with the datasheet named."""

    name: str
    display_name: str
    memory_gib: float
    hbm_tbps: float
    bf16_tflops: float
    source: str
    fp8_tflops: float | None = None  # None: no FP8 tensor cores
    host_link_gbps: float = 64.0
    nvme_gbps: float = 7.0
    price_per_hour: float | None = None
    aliases: tuple[str, ...] = field(default_factory=tuple)

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 2**30

    @property
    def fp8_support(self) -> bool:
        return self.fp8_tflops is not None

    def peak_flops(self, fp8: bool = False) -> float:
        tflops = self.fp8_tflops if (fp8 and self.fp8_tflops) else self.bf16_tflops
        return tflops * 1e12
