"""One group of a model's layers that keep KV the same way, as a frozen spec with its byte
sizes: one class per way (vLLM's KVCacheSpec subclasses are the model). Full, sliding-window
and chunked-local attention and image cross-attention keep a K and a V per KV head; MLA keeps
one compressed latent per token, DeepSeek's sparse-attention indexer one fp8 key; a Mamba or
linear-attention layer keeps a constant state per sequence."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from kvplan.spec.kv_format import KVFormat

INDEXER_SCALE_BLOCK = 128  # DeepSeek sparse attention caches: one fp32 scale per 128 fp8 elements


@dataclass(frozen=True)
class AttentionGroup:
    """Layers that share one KV layout; a subclass says which layout.

    Every group has all the fields; each kind reads those its layout has (a headed group its
    KV heads and head_dim, a latent one its latent dimension, a state group its bytes).
    """

    # the name config.json's layer types and kvplan's outputs give the kind
    kind: ClassVar[str] = ""
    # whether the group keeps only the last `window` tokens (or one `window`-token chunk)
    windowed: ClassVar[bool] = False
    # whether the group stores KV for every decoded token (cross holds image tokens, a state none)
    has_token_kv: ClassVar[bool] = True

    num_layers: int
    num_kv_heads: int = 0
    head_dim: int = 0
    window: int | None = None
    latent_dim: int = 0
    state_bytes_per_layer: int = 0
    # state: its recurrent mixer, "mamba2" or "gated-deltanet" (state_layers.py)
    mixer: str = ""
    rope_dim: int = 0  # mla: the RoPE part of the latent (qk_rope_head_dim)
    sparse: bool = False  # mla read by DeepSeek sparse attention (an indexer picks the keys)
    # mla: the per-head dimensions of the uncompressed keys' no-RoPE part and of the values
    # (qk_nope_head_dim, v_head_dim), which a prefill computes with (see attention_flops_per_pair)
    nope_dim: int = 0
    value_dim: int = 0

    def __post_init__(self) -> None:
        if not self.kind:
            raise TypeError("AttentionGroup is abstract: build one of its kinds (GROUP_TYPES)")
        if self.num_layers <= 0:
            raise ValueError(f"attention group needs at least one layer, got {self.num_layers}")

    @property
    def vector_dim(self) -> int:
        return self.head_dim

    def vectors_per_token(self, tp: int = 1) -> int:
        """KV vectors one GPU stores per token per layer at tensor-parallel degree tp."""
        return 0

    def attention_flops_per_pair(self, heads: float, prefill: bool) -> float:
        """FLOPs of QK^T and PV for one (query, key) pair over `heads` heads of every layer:
        2 x the vector dimension each way."""
        return 4.0 * self.num_layers * heads * self.vector_dim

    def up_projection_flops_per_token(self, heads: float) -> float:
        """FLOPs to up-project one context token's cache to per-head keys and values, per step
        that prefills over it: MLA's prefill only."""
        return 0.0

    def bytes_per_token_layer(self, fmt: KVFormat, tp: int = 1) -> float:
        return self.vectors_per_token(tp) * fmt.bytes_per_vector(self.vector_dim)

    def bytes_per_token(self, fmt: KVFormat, tp: int = 1) -> float:
        """Bytes per token across all layers of the group, as if every layer kept full length."""
        return self.num_layers * self.bytes_per_token_layer(fmt, tp)

    def retained_tokens(self, context: int) -> int:
        """Tokens whose KV the group must keep at this context length (windows respected)."""
        return context if self.has_token_kv else 0

    def describe(self) -> str:
        return f"{self.num_layers} x {self.num_kv_heads} KV heads x {self.head_dim}"


@dataclass(frozen=True)
class HeadedAttentionSpec(AttentionGroup):
    """A K and a V vector per KV head per token (vLLM's AttentionSpec)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_kv_heads <= 0 or self.head_dim <= 0:
            raise ValueError(f"{self.kind} attention needs positive kv heads and head_dim")

    def vectors_per_token(self, tp: int = 1) -> int:
        # vLLM shards KV heads across ranks and replicates them when tp > kv heads.
        return 2 * max(1, self.num_kv_heads // tp)


@dataclass(frozen=True)
class FullAttentionSpec(HeadedAttentionSpec):
    kind: ClassVar[str] = "full"


@dataclass(frozen=True)
class WindowedAttentionSpec(HeadedAttentionSpec):
    """Attention that sees a bounded span of the context: `window` tokens."""

    windowed: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.window is None or self.window <= 0:
            raise ValueError(f"{self.kind} attention needs a positive window")

    def retained_tokens(self, context: int) -> int:
        return min(context, self.window or context)


@dataclass(frozen=True)
class SlidingWindowSpec(WindowedAttentionSpec):
    """Sliding-window attention: a query sees the last `window` tokens."""

    kind: ClassVar[str] = "sliding"

    def describe(self) -> str:
        return super().describe() + f", window {self.window}"


@dataclass(frozen=True)
class ChunkedLocalAttentionSpec(WindowedAttentionSpec):
    """Llama-4's chunked local attention: a query sees only the tokens of its own `window`-token
    chunk; a sequence that reaches a context held a whole chunk on the way, so its peak is one
    chunk."""

    kind: ClassVar[str] = "chunked"

    def describe(self) -> str:
        return super().describe() + f", chunk {self.window}"


@dataclass(frozen=True)
class CrossAttentionSpec(HeadedAttentionSpec):
    """Image cross-attention (Llama-3.2-Vision): a K and a V per KV head for each image token,
    none for text tokens; such groups live in ModelSpec.cross_groups, never in ModelSpec.groups."""

    kind: ClassVar[str] = "cross"
    has_token_kv: ClassVar[bool] = False

    def describe(self) -> str:
        return super().describe() + " per image token"


@dataclass(frozen=True)
class LatentSpec(AttentionGroup):
    """One vector per token shared by all heads, replicated on every tensor-parallel rank."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.latent_dim <= 0:
            raise ValueError(f"{self.kind} cache needs a positive latent dimension")

    @property
    def vector_dim(self) -> int:
        return self.latent_dim

    def vectors_per_token(self, tp: int = 1) -> int:
        return 1


@dataclass(frozen=True)
class MLAAttentionSpec(LatentSpec):
    """DeepSeek's multi-head latent attention: the compressed KV latent (kv_lora_rank + rope)."""

    kind: ClassVar[str] = "mla"

    def attention_flops_per_pair(self, heads: float, prefill: bool) -> float:
        """MLA as vLLM runs it (vllm/v1/attention/backends/mla/common.py): a decode attends in the
        latent space with the key and value up-projections absorbed into the query and the
        output (QK^T over kv_lora_rank + rope, PV over kv_lora_rank); a prefill up-projects the
        latent to per-head keys and values and runs plain attention over them (QK^T over
        nope + rope, PV over the value dimension)."""
        if not self.value_dim:
            return super().attention_flops_per_pair(heads, prefill)
        lora = self.latent_dim - self.rope_dim
        dims = (
            (self.nope_dim + self.rope_dim + self.value_dim)
            if prefill
            else (self.latent_dim + lora)
        )
        return 2.0 * self.num_layers * heads * dims

    def up_projection_flops_per_token(self, heads: float) -> float:
        if not self.value_dim:
            return 0.0
        lora = self.latent_dim - self.rope_dim
        return 2.0 * self.num_layers * heads * lora * (self.nope_dim + self.value_dim)

    def bytes_per_token_layer(self, fmt: KVFormat, tp: int = 1) -> float:
        if self.sparse and fmt.is_float and fmt.bits == 8:
            # vLLM turns an fp8 KV cache of sparse MLA into FlashMLA's fp8_ds_mla record:
            # fp8 latent, an fp32 scale per 128 of it, the RoPE part kept in bf16 (656 B for V3.2).
            nope = self.latent_dim - self.rope_dim
            return nope + math.ceil(nope / INDEXER_SCALE_BLOCK) * 4 + self.rope_dim * 2
        return super().bytes_per_token_layer(fmt, tp)

    def describe(self) -> str:
        return f"{self.num_layers} x MLA latent {self.latent_dim}"


@dataclass(frozen=True)
class IndexerSpec(LatentSpec):
    """DeepSeek-V3.2's sparse-attention indexer key, stored fp8 with an fp32 scale per 128
    elements whatever the KV dtype (vLLM's DeepseekV32IndexerCache), one per token."""

    kind: ClassVar[str] = "indexer"

    def attention_flops_per_pair(self, heads: float, prefill: bool) -> float:
        """0: the indexer's own scoring heads (index_n_heads) are not in the spec, so its
        FLOPs are left out; its key reads are counted as bytes."""
        return 0.0

    def bytes_per_token_layer(self, fmt: KVFormat, tp: int = 1) -> float:
        return self.latent_dim + math.ceil(self.latent_dim / INDEXER_SCALE_BLOCK) * 4

    def describe(self) -> str:
        return f"{self.num_layers} x indexer key {self.latent_dim} (fp8 + scale)"


@dataclass(frozen=True)
class MambaSpec(AttentionGroup):
    """A constant per-sequence state (linear attention / SSM layers), no per-token KV."""

    kind: ClassVar[str] = "state"
    has_token_kv: ClassVar[bool] = False

    def describe(self) -> str:
        return f"{self.num_layers} x state {self.state_bytes_per_layer:,} B/seq"


# the layer-type names config.json parsing yields, each to its spec class
GROUP_TYPES: dict[str, type[AttentionGroup]] = {
    cls.kind: cls
    for cls in (
        FullAttentionSpec,
        SlidingWindowSpec,
        ChunkedLocalAttentionSpec,
        CrossAttentionSpec,
        MLAAttentionSpec,
        IndexerSpec,
        MambaSpec,
    )
}
