"""A model's KV layout and parameter counts, as frozen specs.

Byte sizes are properties or small methods on these specs, so that every layer of kvplan
(estimator, engine, kernels) derives sizes from one place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from kvplan.spec.kv_format import KVFormat
from kvplan.spec.quant_storage import CheckpointQuant
from kvplan.spec.setting_error import SettingError
from kvplan.spec.weight_quant import SIXTEEN_BIT, WeightQuant, weight_quant

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


@dataclass(frozen=True)
class ParamCount:
    """Parameter counts by role, so weight bytes can use a different dtype per role.

    `active` is the per-token figure as model cards publish it: every weight but the
    experts a token is not routed to, the input embedding included (Mistral, Qwen, Meta,
    Google count it) unless `embedding_in_active` is False (OpenAI's gpt-oss and DeepSeek's
    cards leave it out). `matmul_active` is what one token's forward pass multiplies with:
    the input embedding is a row gather, not a matmul; a tied LM head is the embedding
    table, so it stays in.

    `vision` is a multimodal checkpoint's vision tower and projector (spec/vision.py): in
    `total` and in the weight bytes, never in the per-token figures (`text_total` leaves it
    out). `routers` is not a role of its own but the part of `dense_mlp` that is MoE router
    weights, which quantized checkpoints keep in 16 bit.
    """

    embedding: int
    lm_head: int
    attention: int
    dense_mlp: int
    experts_total: int
    experts_active: int
    other: int
    embedding_in_active: bool = True
    vision: int = 0
    routers: int = 0  # included in dense_mlp

    @property
    def total(self) -> int:
        return self.text_total + self.vision

    @property
    def text_total(self) -> int:
        return (
            self.embedding
            + self.lm_head
            + self.attention
            + self.dense_mlp
            + self.experts_total
            + self.other
        )

    @property
    def matmul_active(self) -> int:
        head = self.lm_head or self.embedding
        return head + self.attention + self.dense_mlp + self.experts_active + self.other

    @property
    def active(self) -> int:
        gathered = self.embedding if (self.embedding_in_active and self.lm_head) else 0
        return self.matmul_active + gathered

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
    num_experts: int = 0
    experts_per_token: int = 0
    moe_layers: int = 0  # layers with routed experts
    expert_width: int = 0  # each routed expert's intermediate size
    # The checkpoint's own format, from its quantization_config (spec/checkpoint_quant.py);
    # None for an unquantized checkpoint. weight_dtype then names its element dtype.
    checkpoint_quant: CheckpointQuant | None = None
    # Image cross-attention layers (Llama-3.2-Vision): their KV is the image's tokens, a fixed
    # size per image and none per decoded token, so they are counted apart from `groups`;
    # encoder_tokens_per_image is what one image at the most tiles gives them.
    cross_groups: tuple[AttentionGroup, ...] = ()
    encoder_tokens_per_image: int = 0
    # The longest max_model_len vLLM accepts (spec/max_len.py: the length keys with RoPE
    # scaling); 0 where the config names no length
    derived_max_model_len: int = 0
    # Layers of the model's own multi-token-prediction head (mtp_num_hidden_layers, or
    # num_nextn_predict_layers), which vLLM runs as the drafter of --speculative-config's MTP
    # methods, their KV cached beside the model's
    mtp_layers: int = 0
    # The recurrent layers' scan chunk (chunk_size / mamba_chunk_size): vLLM aligns the block
    # size to it when it caches a state at every block (prefix caching's "all" mode)
    state_chunk_size: int = 0

    @property
    def expert_weight_bits(self) -> float | None:
        """Bits per expert weight of a checkpoint that quantizes only its experts (gpt-oss's
        MXFP4: 4.25), else None."""
        quant = self.checkpoint_quant
        return (
            quant.bits_per_weight(self.hidden_size)
            if quant is not None and quant.experts_only
            else None
        )

    @property
    def token_groups(self) -> tuple[AttentionGroup, ...]:
        return tuple(g for g in self.groups if g.has_token_kv)

    @property
    def has_windows(self) -> bool:
        return any(g.kind in WINDOWED_KINDS for g in self.groups)

    @property
    def kv_kind(self) -> str:
        """MHA / GQA / MQA / MLA, with +SWA for sliding-window layers and +linear for state layers."""
        kinds = {g.kind for g in self.groups}
        if "mla" in kinds:
            return "MLA+indexer" if "indexer" in kinds else "MLA"
        heads = next(g.num_kv_heads for g in self.groups if g.kind in HEADED_KINDS)
        label = "MHA" if heads == self.num_heads else ("MQA" if heads == 1 else "GQA")
        if "sliding" in kinds:
            label += "+SWA" if "full" in kinds else " (all SWA)"
        if "chunked" in kinds:
            label += "+chunked" if "full" in kinds else " (all chunked)"
        if "state" in kinds:
            label += "+linear"
        if self.cross_groups:
            label += "+cross"
        return label

    def cross_kv_bytes_per_image(self, fmt: KVFormat, tp: int = 1) -> float:
        """KV bytes the cross-attention layers keep for one image at the most tiles, on one GPU:
        every cross layer stores K and V of each of the image's encoder tokens."""
        return self.encoder_tokens_per_image * sum(
            g.bytes_per_token(fmt, tp) for g in self.cross_groups
        )

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

    def weight_format_name(self, override: str | None = None) -> str:
        """The weight format weight_bytes() sizes: an override, or the checkpoint's as its
        quantization_config states it ('gptq-int4-g128', 'fp8-block128', 'nvfp4'; gpt-oss:
        'mxfp4-experts+bf16'), so the label matches the bytes."""
        if override is not None:
            return override
        quant = self.checkpoint_quant
        if quant is not None:
            return f"{quant.label}+{self.dtype}" if quant.experts_only else quant.label
        return self.weight_dtype

    def weight_bytes(self, weight_dtype: str | None = None) -> float:
        """Weight bytes for the whole model (vision tower included): as the checkpoint ships
        (its quantization_config, scales included), else as the weight dtype, an override's
        or the spec's own, sizes it (spec/weight_quant.py: a 16-bit-or-wider dtype applies to
        every weight, a narrower one to the linear layers only)."""
        if weight_dtype is None and self.checkpoint_quant is not None:
            return self._checkpoint_weight_bytes(self.checkpoint_quant)
        return self._quantized_weight_bytes(weight_quant(weight_dtype or self.weight_dtype))

    def _checkpoint_weight_bytes(self, quant: CheckpointQuant) -> float:
        """Each role the checkpoint quantizes at its stored bytes per weight (scales and zero
        points included; per-channel scales sized with hidden_size as the input width), the
        rest at 16 bit (vLLM loads a float32 config's unquantized weights in 16 bit too)."""
        p, width = self.params, self.hidden_size
        sized = {"experts": p.experts_total}
        if not quant.experts_only:
            sized.update(attention=p.attention, dense=p.dense_mlp - p.routers)
            if quant.lm_head_quantized:
                sized["lm_head"] = p.lm_head
            if quant.vision_quantized:
                sized["vision"] = p.vision
        stored = sum(count * quant.role_bytes(role, width) for role, count in sized.items())
        return stored + (p.total - sum(sized.values())) * SIXTEEN_BIT

    def vision_weight_bytes(self, weight_dtype: str | None = None) -> float:
        """The vision tower's share of weight_bytes(): loaded, but read by no decode step."""
        p = self.params
        quant = self.checkpoint_quant
        if (
            weight_dtype is None
            and quant is not None
            and quant.vision_quantized
            and not quant.experts_only
        ):
            return p.vision * quant.role_bytes("vision", self.hidden_size)
        if weight_dtype is not None and weight_quant(weight_dtype).element_bytes >= SIXTEEN_BIT:
            return p.vision * weight_quant(weight_dtype).element_bytes
        return p.vision * SIXTEEN_BIT

    def _quantized_weight_bytes(self, quant: WeightQuant) -> float:
        """Weights stored as `quant` says: a 16-bit-or-wider dtype applies to every weight; a
        narrower one only to the linear layers the recipe quantizes (see spec/weight_quant.py)."""
        p = self.params
        if quant.element_bytes >= SIXTEEN_BIT:
            return p.total * quant.element_bytes
        kept: float = (
            p.embedding + p.lm_head + p.other + p.vision
        )  # an override quantizes the language model
        if not quant.attention_quantized:
            kept += p.attention
        kept += p.dense_mlp * min(quant.edge_mlp_layers_kept, self.num_layers) / self.num_layers
        return kept * SIXTEEN_BIT + (p.total - kept) * quant.element_bytes

    def with_param_count(self, total: float) -> ModelSpec:
        """The same model with its parameter count overridden (each role scaled alike)."""
        if total <= 0:
            raise SettingError("{params_b} must be positive, got {got:g}", got=total / 1e9)
        scale = total / self.params.total
        p = self.params
        counts = replace(
            p,
            **{
                role: round(getattr(p, role) * scale)
                for role in (
                    "embedding",
                    "lm_head",
                    "attention",
                    "dense_mlp",
                    "experts_total",
                    "experts_active",
                    "other",
                    "vision",
                    "routers",
                )
            },
        )
        return replace(self, params=counts)
