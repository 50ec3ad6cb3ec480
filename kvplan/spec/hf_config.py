"""Turn a Hugging Face config.json (a plain dict) into a ModelSpec.

A plain-dict parser on purpose: `kvplan estimate` must stay instant and must never reach
a model hub, so transformers' config classes are not needed here. Field names follow the
HF conventions of the families covered (Llama, Llama-4, Mistral/Mixtral, Qwen2/3/3.5, Gemma2/3/4,
Phi-3, gpt-oss, DeepSeek-V2/V3/V3.2/Kimi, OPT, GPT-2/Falcon-style names); which layer is
what lives in layers.py.
"""

from __future__ import annotations

from typing import Any

from kvplan.spec.checkpoint_quant import CheckpointQuant, checkpoint_quant
from kvplan.spec.config_checks import check_config
from kvplan.spec.layers import kv_shared_layers, layer_kinds, layer_shape, window_size
from kvplan.spec.params import count_params
from kvplan.spec.vision import vision_params
from kvplan.spec import AttentionGroup, ModelSpec, dtype_bytes

_ALIASES: dict[str, tuple[str, ...]] = {
    "hidden_size": ("hidden_size", "n_embd", "d_model", "dim"),
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "num_heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
    "max_position_embeddings": ("max_position_embeddings", "n_positions", "max_seq_len",
                                "seq_length", "context_window_size"),
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
        raise ValueError(f"config of '{name}' has no '{_ALIASES.get(key, (key,))[0]}'; "
                         "pass a Hugging Face config.json of a decoder-only model")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0 or value != int(value):
        raise ValueError(f"config of '{name}' has an invalid {key} = {value!r}; it must be a positive integer")
    return int(value)


def linear_state_bytes(cfg: dict[str, Any]) -> int:
    """Per-layer state of a gated-delta-net layer (Qwen3-Next / Qwen3.5): conv + recurrent."""
    key_heads = int(cfg.get("linear_num_key_heads", 0))
    value_heads = int(cfg.get("linear_num_value_heads", 0))
    key_dim = int(cfg.get("linear_key_head_dim", 0))
    value_dim = int(cfg.get("linear_value_head_dim", 0))
    if not (key_heads and value_heads and key_dim and value_dim):
        raise ValueError("linear-attention layers need linear_num_key_heads, linear_num_value_heads, "
                         "linear_key_head_dim and linear_value_head_dim in the config")
    conv_dim = 2 * key_heads * key_dim + value_heads * value_dim
    kernel = int(cfg.get("linear_conv_kernel_dim", 4))
    model_bytes = int(dtype_bytes(str(cfg.get("torch_dtype") or cfg.get("dtype") or "bf16")))
    state_bytes = int(dtype_bytes(str(cfg.get("mamba_ssm_dtype") or "float32")))
    conv_state = conv_dim * (kernel - 1) * model_bytes
    recurrent_state = value_heads * key_dim * value_dim * state_bytes
    return conv_state + recurrent_state


def attention_groups(cfg: dict[str, Any], num_layers: int, num_heads: int, hidden: int) -> tuple[AttentionGroup, ...]:
    if cfg.get("kv_lora_rank"):
        rope = int(cfg.get("qk_rope_head_dim", 0))
        sparse = bool(cfg.get("index_head_dim") and cfg.get("index_topk"))  # DeepSeek-V3.2 sparse attention
        groups = [AttentionGroup("mla", num_layers, latent_dim=int(cfg["kv_lora_rank"]) + rope, rope_dim=rope,
                                 sparse=sparse)]
        if sparse:
            groups.append(AttentionGroup("indexer", num_layers, latent_dim=int(cfg["index_head_dim"])))
        return tuple(groups)
    kinds = layer_kinds(cfg, num_layers)[:num_layers - kv_shared_layers(cfg, num_layers)]
    groups = []
    for kind in ("full", "sliding", "chunked", "state"):
        count = kinds.count(kind)
        if not count:
            continue
        if kind == "state":
            groups.append(AttentionGroup("state", count, state_bytes_per_layer=linear_state_bytes(cfg)))
            continue
        heads, head_dim = layer_shape(cfg, kind, num_heads, hidden)
        window = {"sliding": window_size(cfg), "chunked": cfg.get("attention_chunk_size")}.get(kind)
        groups.append(AttentionGroup(kind, count, heads, head_dim, int(window) if window else None))
    return tuple(groups)


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
    outer = cfg
    cfg = text_config(cfg)
    check_config(cfg, name, source)  # issue 13: every field's type, range and consistency, before any int()
    hidden = _positive_int(cfg, "hidden_size", name)
    num_layers = _positive_int(cfg, "num_layers", name)
    num_heads = _positive_int(cfg, "num_heads", name)
    vocab = _positive_int(cfg, "vocab_size", name)
    max_len = int(get_field(cfg, "max_position_embeddings", 0) or 0)
    groups = attention_groups(cfg, num_layers, num_heads, hidden)
    weight_dtype, quant = weight_format(cfg, num_layers)
    params, experts, per_token = count_params(cfg, hidden, num_layers, num_heads, vocab, groups,
                                              vision=vision_params(outer, hidden))
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
        num_experts=experts,
        experts_per_token=per_token,
        checkpoint_quant=quant,
    )
