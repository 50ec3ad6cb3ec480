"""One group of a model's layers that keep KV the same way (full, sliding window, chunked, MLA,
an indexer, a recurrent state, image cross-attention), as a frozen spec with its byte sizes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from kvplan.spec.kv_format import KVFormat

AttentionKind = Literal["full", "sliding", "chunked", "mla", "indexer", "state", "cross"]
WINDOWED_KINDS = ("sliding", "chunked")
HEADED_KINDS = ("full", "sliding", "chunked", "cross")
INDEXER_SCALE_BLOCK = 128  # DeepSeek sparse attention caches: one fp32 scale per 128 fp8 elements


@dataclass(frozen=True)
class AttentionGroup:
    """Layers that share one KV layout.

    full / sliding / chunked: a K and a V vector per KV head per token (sliding keeps the
    last `window` tokens; chunked local attention, Llama-4's, sees only the tokens of the
    current `window`-token chunk, so it never needs more than one chunk). mla: one latent
    vector per token (DeepSeek's compressed KV, shared by all heads, not split by tensor
    parallelism). indexer: DeepSeek-V3.2's sparse-attention indexer key, stored fp8 with an
    fp32 scale per 128 elements whatever the KV dtype (vLLM's DeepseekV32IndexerCache), one
    per token, replicated like the latent. state: a constant per-sequence state (linear
    attention / SSM layers), no per-token KV. cross: image cross-attention (Llama-3.2-Vision),
    a K and a V per KV head for each image token, none for text tokens; such groups live in
    ModelSpec.cross_groups, never in ModelSpec.groups.
    """

    kind: AttentionKind
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
        if self.num_layers <= 0:
            raise ValueError(f"attention group needs at least one layer, got {self.num_layers}")
        if self.kind in HEADED_KINDS and (self.num_kv_heads <= 0 or self.head_dim <= 0):
            raise ValueError(f"{self.kind} attention needs positive kv heads and head_dim")
        if self.kind in WINDOWED_KINDS and (self.window is None or self.window <= 0):
            raise ValueError(f"{self.kind} attention needs a positive window")
        if self.kind in ("mla", "indexer") and self.latent_dim <= 0:
            raise ValueError(f"{self.kind} cache needs a positive latent dimension")

    def attention_flops_per_pair(self, heads: float, prefill: bool) -> float:
        """FLOPs of QK^T and PV for one (query, key) pair over `heads` heads of every layer.

        MLA as vLLM runs it (vllm/v1/attention/backends/mla/common.py): a decode attends in the
        latent space with the key and value up-projections absorbed into the query and the
        output (QK^T over kv_lora_rank + rope, PV over kv_lora_rank); a prefill up-projects the
        latent to per-head keys and values and runs plain attention over them (QK^T over
        nope + rope, PV over the value dimension). Other layers: 2 x head_dim each way."""
        if self.kind == "mla" and self.value_dim:
            lora = self.latent_dim - self.rope_dim
            dims = (
                (self.nope_dim + self.rope_dim + self.value_dim)
                if prefill
                else (self.latent_dim + lora)
            )
            return 2.0 * self.num_layers * heads * dims
        dim = self.latent_dim if self.kind == "mla" else self.head_dim
        return 4.0 * self.num_layers * heads * dim

    def up_projection_flops_per_token(self, heads: float) -> float:
        """MLA prefill: FLOPs to up-project one context token's latent to every head's key
        (no-RoPE part) and value, per step that prefills over it; 0 for other layers."""
        if self.kind != "mla" or not self.value_dim:
            return 0.0
        return (
            2.0
            * self.num_layers
            * heads
            * (self.latent_dim - self.rope_dim)
            * (self.nope_dim + self.value_dim)
        )

    @property
    def has_token_kv(self) -> bool:
        """Whether the group stores KV for every decoded token (cross holds image tokens only)."""
        return self.kind not in ("state", "cross")

    def vectors_per_token(self, tp: int = 1) -> int:
        """KV vectors one GPU stores per token per layer at tensor-parallel degree tp."""
        if self.kind in ("mla", "indexer"):
            return 1  # the latent (and the indexer key) is replicated on every rank
        if self.kind == "state":
            return 0
        # vLLM shards KV heads across ranks and replicates them when tp > kv heads.
        return 2 * max(1, self.num_kv_heads // tp)

    @property
    def vector_dim(self) -> int:
        return self.latent_dim if self.kind in ("mla", "indexer") else self.head_dim

    def bytes_per_token_layer(self, fmt: KVFormat, tp: int = 1) -> float:
        if self.kind == "indexer":  # fp8 key + fp32 scales, independent of --kv-dtype
            return self.latent_dim + math.ceil(self.latent_dim / INDEXER_SCALE_BLOCK) * 4
        if self.kind == "mla" and self.sparse and fmt.is_float and fmt.bits == 8:
            # vLLM turns an fp8 KV cache of sparse MLA into FlashMLA's fp8_ds_mla record:
            # fp8 latent, an fp32 scale per 128 of it, the RoPE part kept in bf16 (656 B for V3.2).
            nope = self.latent_dim - self.rope_dim
            return nope + math.ceil(nope / INDEXER_SCALE_BLOCK) * 4 + self.rope_dim * 2
        return self.vectors_per_token(tp) * fmt.bytes_per_vector(self.vector_dim)

    def bytes_per_token(self, fmt: KVFormat, tp: int = 1) -> float:
        """Bytes per token across all layers of the group, as if every layer kept full length."""
        return self.num_layers * self.bytes_per_token_layer(fmt, tp)

    def retained_tokens(self, context: int) -> int:
        """Tokens whose KV the group must keep at this context length (windows respected)."""
        if self.kind in WINDOWED_KINDS:
            # A chunked layer at position p sees only tokens of p's chunk; a sequence that
            # reaches `context` held a whole chunk on the way, so its peak is one chunk.
            return min(context, self.window or context)
        return context if self.has_token_kv else 0

    def describe(self) -> str:
        if self.kind == "mla":
            return f"{self.num_layers} x MLA latent {self.latent_dim}"
        if self.kind == "indexer":
            return f"{self.num_layers} x indexer key {self.latent_dim} (fp8 + scale)"
        if self.kind == "state":
            return f"{self.num_layers} x state {self.state_bytes_per_layer:,} B/seq"
        if self.kind == "cross":
            return f"{self.num_layers} x {self.num_kv_heads} KV heads x {self.head_dim} per image token"
        text = f"{self.num_layers} x {self.num_kv_heads} KV heads x {self.head_dim}"
        if self.kind == "chunked":
            return text + f", chunk {self.window}"
        return text + (f", window {self.window}" if self.kind == "sliding" else "")
