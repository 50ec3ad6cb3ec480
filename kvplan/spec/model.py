"""A model's KV layout and parameter counts, as frozen specs.

Byte sizes are properties or small methods on these specs, so that every layer of kvplan
(estimator, engine, kernels) derives sizes from one place.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvplan.spec.attention_group import (
    AttentionGroup,
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    HeadedAttentionSpec,
    IndexerSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)
from kvplan.spec.kv_format import KVFormat
from kvplan.spec.quant_storage import CheckpointQuant
from kvplan.spec.setting_error import SettingError
from kvplan.spec.weight_quant import SIXTEEN_BIT, WeightQuant, weight_quant


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
        return any(g.windowed for g in self.groups)

    def has_group(self, kind: type[AttentionGroup]) -> bool:
        """Whether any of the decoder's groups is of this kind (a subclass counts)."""
        return any(isinstance(g, kind) for g in self.groups)

    @property
    def has_state(self) -> bool:
        """Whether some layers keep a per-sequence state (Mamba, linear attention)."""
        return self.has_group(MambaSpec)

    @property
    def self_attention_kv_heads(self) -> int:
        """The KV heads of the first full or sliding-window group; the query heads if none."""
        return next(
            (
                g.num_kv_heads
                for g in self.groups
                if isinstance(g, (FullAttentionSpec, SlidingWindowSpec))
            ),
            self.num_heads,
        )

    @property
    def kv_kind(self) -> str:
        """MHA / GQA / MQA / MLA, with +SWA for sliding-window layers and +linear for state
        layers."""
        if self.has_group(MLAAttentionSpec):
            return "MLA+indexer" if self.has_group(IndexerSpec) else "MLA"
        heads = next(g.num_kv_heads for g in self.groups if isinstance(g, HeadedAttentionSpec))
        label = "MHA" if heads == self.num_heads else ("MQA" if heads == 1 else "GQA")
        full = self.has_group(FullAttentionSpec)
        if self.has_group(SlidingWindowSpec):
            label += "+SWA" if full else " (all SWA)"
        if self.has_group(ChunkedLocalAttentionSpec):
            label += "+chunked" if full else " (all chunked)"
        if self.has_state:
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
