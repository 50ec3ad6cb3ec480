"""Turn a Hugging Face config.json (a plain dict) into a ModelSpec.

A plain-dict parser on purpose: `kvplan estimate` must stay instant and must never reach
a model hub, so transformers' config classes are not needed here. Field names follow the
HF conventions of the families covered (Llama, Llama-4, Mistral/Mixtral, Qwen2/3/3.5, Gemma2/3/4,
Phi-3, gpt-oss, DeepSeek-V2/V3/V3.2/Kimi, OPT, GPT-2/Falcon-style names, EXAONE-4, Nemotron-H,
DeciLM / Nemotron-NAS, Llama-3.2-Vision); which layer is what lives in layers.py (layer_plans.py
for the families described layer by layer), constant-state layers in state_layers.py, and the
config-class defaults some configs rely on in family_defaults.py.
"""

from __future__ import annotations

from typing import Any

from kvplan.spec import AttentionGroup, ModelSpec
from kvplan.spec.attention_group import (
    GROUP_TYPES,
    ChunkedLocalAttentionSpec,
    CrossAttentionSpec,
    FullAttentionSpec,
    IndexerSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)
from kvplan.spec.checkpoint_quant import checkpoint_quant
from kvplan.spec.config_checks import check_config
from kvplan.spec.family_defaults import with_family_defaults
from kvplan.spec.layers import (
    kv_shared_layers,
    layer_kinds,
    layer_kv_heads,
    layer_shape,
    window_size,
)
from kvplan.spec.max_len import derived_max_len
from kvplan.spec.params import count_params
from kvplan.spec.quant_storage import CheckpointQuant
from kvplan.spec.state_layers import recurrent_mixer, state_bytes_per_layer
from kvplan.spec.vision import encoder_tokens_per_image, vision_params

_ALIASES: dict[str, tuple[str, ...]] = {
    "hidden_size": ("hidden_size", "n_embd", "d_model", "dim"),
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "num_heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
    "max_position_embeddings": (
        "max_position_embeddings",
        "n_positions",
        "max_seq_len",
        "seq_length",
        "context_window_size",
    ),
}


def get_field(cfg: dict[str, Any], key: str, default: Any = None) -> Any:
    for alias in _ALIASES.get(key, (key,)):
        if cfg.get(alias) is not None:
            return cfg[alias]
    return default


def text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs (Qwen3.5, Gemma3, Llama-4) nest the language model's config."""
    inner = cfg.get("text_config")
    if isinstance(inner, dict) and get_field(cfg, "num_layers") is None:
        merged = {k: v for k, v in cfg.items() if k != "text_config"}
        merged.update(inner)
        return merged
    return cfg


def _positive_int(cfg: dict[str, Any], key: str, name: str) -> int:
    value = get_field(cfg, key)
    if value is None:
        raise ValueError(
            f"config of '{name}' has no '{_ALIASES.get(key, (key,))[0]}'; "
            "pass a Hugging Face config.json of a decoder-only model"
        )
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value <= 0
        or value != int(value)
    ):
        raise ValueError(
            f"config of '{name}' has an invalid {key} = {value!r}; it must be a positive integer"
        )
    return int(value)


def _headed_group(
    cfg: dict[str, Any],
    spec: type[AttentionGroup],
    count: int,
    heads: int | None,
    num_heads: int,
    hidden: int,
) -> AttentionGroup:
    default_heads, head_dim = layer_shape(cfg, spec.kind, num_heads, hidden)
    if heads is not None and (heads <= 0 or heads > num_heads or num_heads % heads):
        raise ValueError(
            f"a layer's {heads} KV heads must divide num_attention_heads = {num_heads}"
        )
    windows: dict[type[AttentionGroup], Any] = {
        SlidingWindowSpec: window_size(cfg),
        ChunkedLocalAttentionSpec: cfg.get("attention_chunk_size"),
    }
    window = windows.get(spec)
    return spec(count, heads or default_heads, head_dim, int(window) if window else None)


def attention_groups(
    cfg: dict[str, Any], num_layers: int, num_heads: int, hidden: int
) -> tuple[AttentionGroup, ...]:
    """The per-token KV groups (and per-sequence state groups) of the decoder's layers; layers
    with no attention ('none') and image cross-attention ('cross', see cross_attention_groups)
    hold no per-token KV and are left out."""
    if cfg.get("kv_lora_rank"):
        rope = int(cfg.get("qk_rope_head_dim") or 0)
        sparse = bool(
            cfg.get("index_head_dim") and cfg.get("index_topk")
        )  # DeepSeek-V3.2 sparse attention
        groups: list[AttentionGroup] = [
            MLAAttentionSpec(
                num_layers,
                latent_dim=int(cfg["kv_lora_rank"]) + rope,
                rope_dim=rope,
                sparse=sparse,
                nope_dim=int(cfg.get("qk_nope_head_dim") or 0),
                value_dim=int(cfg.get("v_head_dim") or 0),
            )
        ]
        if sparse:
            groups.append(IndexerSpec(num_layers, latent_dim=int(cfg["index_head_dim"])))
        return tuple(groups)
    owned = num_layers - kv_shared_layers(cfg, num_layers)
    layers = list(zip(layer_kinds(cfg, num_layers), layer_kv_heads(cfg, num_layers)))[:owned]
    groups = []
    for spec in (FullAttentionSpec, SlidingWindowSpec, ChunkedLocalAttentionSpec, MambaSpec):
        members = [heads for kind, heads in layers if GROUP_TYPES.get(kind) is spec]
        if spec is MambaSpec:
            if members:
                groups.append(
                    MambaSpec(
                        len(members),
                        state_bytes_per_layer=state_bytes_per_layer(cfg),
                        mixer=recurrent_mixer(cfg),
                    )
                )
            continue
        # one group per KV head count: DeciLM layers may each have their own
        counts: dict[int | None, int] = {}
        for heads in members:
            counts[heads] = counts.get(heads, 0) + 1
        groups += [
            _headed_group(cfg, spec, n, heads, num_heads, hidden) for heads, n in counts.items()
        ]
    return tuple(groups)


def cross_attention_groups(
    cfg: dict[str, Any], num_layers: int, num_heads: int, hidden: int
) -> tuple[AttentionGroup, ...]:
    """Llama-3.2-Vision's cross-attention layers: K and V of the image tokens, with the
    self-attention layers' KV heads and head_dim (MllamaTextCrossAttention).

    What vLLM does differs from this ideal split: mllama ran only on vLLM's V0 engine (dropped
    in v0.11 with V0). There every KV block held all layers of a non-hybrid model (CacheEngine.
    get_cache_block_size counts num_hidden_layers, cross layers included), and a request took
    blocks for its text tokens (the decoder block table) and for its image tokens (the cross
    block table, sized by the encoder prompt of num_tiles x token_per_chunk); so vLLM V0 charged
    every text token and every image token the KV of all 100 layers."""
    count = layer_kinds(cfg, num_layers).count(CrossAttentionSpec.kind)
    if not count:
        return ()
    heads, head_dim = layer_shape(cfg, "full", num_heads, hidden)
    return (CrossAttentionSpec(count, heads, head_dim),)


def native_dtype(cfg: dict[str, Any]) -> str:
    native = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bf16").lower()
    native = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}.get(native, native)
    return native if native in ("fp32", "fp16", "bf16") else "bf16"


def weight_format(cfg: dict[str, Any], num_layers: int) -> tuple[str, CheckpointQuant | None]:
    """(element dtype of the quantized weights, or the native dtype; the checkpoint's format
    as its quantization_config states it, None when unquantized)."""
    quant = checkpoint_quant(cfg, num_layers)
    if quant is None or quant.experts_only:
        return native_dtype(cfg), quant
    return quant.dtype, quant


def model_spec_from_config(cfg: dict[str, Any], name: str, source: str) -> ModelSpec:
    if not isinstance(cfg, dict):
        raise ValueError(f"config of '{name}' must be a JSON object")
    if cfg.get("model_type") == "deepseek_v4" or "compress_ratios" in cfg:
        # Read as a plain config it would look like one 512-wide KV head in every layer with a
        # 128-token window, which is not what vLLM allocates (a per-layer sliding cache, a KV
        # compressed 4x or 128x, an indexer, fp32 compressor states): refuse rather than mislead.
        raise ValueError(
            f"config of '{name}': DeepSeek-V4's compressed sparse attention (compress_ratios) "
            "is not modeled by kvplan yet"
        )
    linear = text_config(cfg).get("linear_attn_config")
    if isinstance(linear, dict) and linear.get("kda_layers"):
        # Kimi Delta Attention layers keep a recurrent state kvplan has no shape for; read as
        # a plain config every layer would look like MLA, and the state would be missed.
        raise ValueError(
            f"config of '{name}': Kimi Delta Attention layers (linear_attn_config.kda_layers) "
            "are not modeled by kvplan yet"
        )
    # The config class's defaults for what the file leaves out (Gemma-3's text_config has no
    # num_attention_heads), then checks of every field's type, range and consistency.
    cfg_text = with_family_defaults(text_config(cfg))
    check_config(cfg_text, name, source)
    try:
        return _spec(cfg, cfg_text, name, source)
    except ValueError as err:  # a layer plan's own complaint: say which config it is about
        message = str(err)
        raise ValueError(message if name in message else f"config of '{name}': {message}") from None


def _spec(outer: dict[str, Any], cfg: dict[str, Any], name: str, source: str) -> ModelSpec:
    hidden = _positive_int(cfg, "hidden_size", name)
    num_layers = _positive_int(cfg, "num_layers", name)
    num_heads = _positive_int(cfg, "num_heads", name)
    vocab = _positive_int(cfg, "vocab_size", name)
    max_len = int(get_field(cfg, "max_position_embeddings", 0) or 0)
    groups = attention_groups(cfg, num_layers, num_heads, hidden)
    cross = cross_attention_groups(cfg, num_layers, num_heads, hidden)
    weight_dtype, quant = weight_format(cfg, num_layers)
    params, moe = count_params(
        cfg,
        hidden,
        num_layers,
        num_heads,
        vocab,
        groups,
        vision=vision_params(outer, hidden),
        cross=cross,
    )
    return ModelSpec(
        name=name,
        source=source,
        model_type=str(cfg.get("model_type", "unknown")),
        hidden_size=hidden,
        num_layers=num_layers,
        num_heads=num_heads,
        head_dim=int(cfg.get("head_dim") or hidden // num_heads),
        vocab_size=vocab,
        max_position_embeddings=max_len,
        groups=groups,
        params=params,
        weight_dtype=weight_dtype,
        dtype=native_dtype(cfg),
        num_experts=moe.experts,
        experts_per_token=moe.per_token,
        moe_layers=moe.layers,
        expert_width=moe.width,
        checkpoint_quant=quant,
        cross_groups=cross,
        encoder_tokens_per_image=encoder_tokens_per_image(outer) if cross else 0,
        derived_max_model_len=derived_max_len(cfg),
        mtp_layers=int(
            cfg.get("mtp_num_hidden_layers") or cfg.get("num_nextn_predict_layers") or 0
        ),
        state_chunk_size=int(cfg.get("mamba_chunk_size") or cfg.get("chunk_size") or 0)
        if any(isinstance(g, MambaSpec) for g in groups)
        else 0,
    )
