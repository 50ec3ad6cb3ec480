"""Which layer is what: per-layer attention kind (full, sliding, chunked, state; cross and
none for the families layer_plans.py reads layer by layer), window, KV heads and head_dim per
kind, and the layers that share another layer's KV, read from a Hugging Face config dict under
each family's own keys."""

from __future__ import annotations

from typing import Any

from kvplan.spec.layer_plans import layer_plans


def kv_heads(cfg: dict[str, Any], num_heads: int) -> int:
    for key in ("num_key_value_heads", "n_head_kv", "num_kv_heads", "multi_query_group_num"):
        if cfg.get(key):
            return int(cfg[key])
    if cfg.get("multi_query"):
        return 1
    return num_heads


def window_size(cfg: dict[str, Any]) -> int | None:
    """The sliding window, under HF's key or MLC's `sliding_window_size`.

    MLC's `attention_sink_size` needs no term: its paged KV cache keeps the sink tokens
    inside the `sliding_window_size` tokens it retains (TVM's SlideWindowForSequence slides
    by seq_length - sliding_window_size), so the sink does not change the size.
    """
    if cfg.get("use_sliding_window") is False:
        return None  # Qwen2/Qwen3 ship sliding_window but disable it
    window = cfg.get("sliding_window") or cfg.get("sliding_window_size")
    return int(window) if window and int(window) > 0 else None


def _llama4_kinds(cfg: dict[str, Any], num_layers: int) -> list[str] | None:
    """Llama-4: RoPE layers use chunked local attention; NoPE layers are global.

    `no_rope_layers[i]` is 1 where layer i uses RoPE; when the config leaves it empty,
    transformers' Llama4TextConfig derives it from `no_rope_layer_interval` (default 4):
    every 4th layer is NoPE. vLLM chunks exactly the RoPE layers (Llama4Attention).
    """
    if not (
        str(cfg.get("model_type", "")).startswith("llama4") and cfg.get("attention_chunk_size")
    ):
        return None
    rope_layers = cfg.get("no_rope_layers") or [
        int((i + 1) % int(cfg.get("no_rope_layer_interval") or 4) != 0) for i in range(num_layers)
    ]
    if len(rope_layers) != num_layers:
        raise ValueError(
            f"no_rope_layers has {len(rope_layers)} entries but the model has {num_layers} layers"
        )
    return ["chunked" if uses_rope else "full" for uses_rope in rope_layers]


def _pattern_kinds(pattern: int | str, num_layers: int) -> list[str]:
    """sliding_window_pattern as an integer (Gemma3, EXAONE-4: every pattern-th layer global) or
    as a string of L (local, sliding) and G (global) repeated over the layers (EXAONE-4's
    "LLLG"); with a string the last layer is global whatever its letter (vLLM 0.10's
    Exaone4Config.check_is_sliding, transformers' Exaone4Config docstring)."""
    if isinstance(pattern, str):
        if not pattern or set(pattern) - {"L", "G"}:
            raise ValueError(
                f"sliding_window_pattern '{pattern}' must be a string of L (local) and G (global)"
            )
        return [
            "sliding" if pattern[i % len(pattern)] == "L" and i != num_layers - 1 else "full"
            for i in range(num_layers)
        ]
    return ["full" if (i + 1) % int(pattern) == 0 else "sliding" for i in range(num_layers)]


def layer_kinds(cfg: dict[str, Any], num_layers: int) -> list[str]:
    """One of 'full', 'sliding', 'chunked', 'state' per layer, from the config's own conventions;
    'cross' (image cross-attention) and 'none' (no attention or state) for the families whose
    layers layer_plans.py reads one by one."""
    plans = layer_plans(cfg, num_layers)
    if plans is not None:
        # vLLM's NemotronHAttention gives every attention layer the config's sliding_window (null
        # in the shipped configs); DeciLM (a LlamaAttention) and mllama use no window.
        slides = cfg.get("model_type") == "nemotron_h" and window_size(cfg) is not None
        return ["sliding" if p.mixer == "full" and slides else p.mixer for p in plans]
    window = window_size(cfg)
    layer_types = cfg.get("layer_types")
    if layer_types:
        if len(layer_types) != num_layers:
            raise ValueError(
                f"layer_types has {len(layer_types)} entries but the model has {num_layers} layers"
            )
        mapping = {
            "full_attention": "full",
            "sliding_attention": "sliding",
            "linear_attention": "state",
            "chunked_attention": "chunked",
            "mamba": "state",
            "attention": "full",
        }
        kinds = []
        for entry in layer_types:
            if entry not in mapping:
                raise ValueError(
                    f"unknown layer type '{entry}' in layer_types; known: {', '.join(mapping)}"
                )
            kinds.append(mapping[entry])
        if "sliding" in kinds and not window:
            kinds = ["full" if k == "sliding" else k for k in kinds]
        if "chunked" in kinds and not cfg.get("attention_chunk_size"):
            kinds = ["full" if k == "chunked" else k for k in kinds]
        return kinds
    hybrid = cfg.get("hybrid_layer_pattern")
    if (
        isinstance(hybrid, list) and hybrid
    ):  # MiMo-V2-Flash (vLLM mimo_v2_flash.py): 1 = sliding-window layer, 0 = full
        if len(hybrid) != num_layers:
            raise ValueError(
                f"hybrid_layer_pattern has {len(hybrid)} entries but the model has {num_layers} "
                "layers"
            )
        return ["sliding" if flag and window else "full" for flag in hybrid]
    llama4 = _llama4_kinds(cfg, num_layers)
    if llama4 is not None:
        return llama4
    if cfg.get("full_attention_interval"):
        interval = int(cfg["full_attention_interval"])
        return ["full" if (i + 1) % interval == 0 else "state" for i in range(num_layers)]
    if not window:
        return ["full"] * num_layers
    pattern = cfg.get("sliding_window_pattern")
    if pattern:  # Gemma3: every pattern-th layer is global; EXAONE-4: "LLLG"
        return _pattern_kinds(pattern, num_layers)
    if cfg.get("model_type") == "gemma2":  # Gemma2 alternates, starting with a sliding layer
        return ["sliding" if i % 2 == 0 else "full" for i in range(num_layers)]
    if cfg.get("use_sliding_window") and cfg.get("max_window_layers") is not None:
        first = int(cfg["max_window_layers"])  # Qwen2: layers from max_window_layers on slide
        return ["sliding" if i >= first else "full" for i in range(num_layers)]
    return ["sliding"] * num_layers  # Mistral v0.1, Phi-3, Mixtral with a window: every layer


def layer_shape(cfg: dict[str, Any], kind: str, num_heads: int, hidden: int) -> tuple[int, int]:
    """(KV heads, head_dim) of one layer kind.

    Gemma-4 gives its full-attention layers their own `global_head_dim`, and with
    `attention_k_eq_v` their own `num_global_key_value_heads` (vLLM's and transformers'
    Gemma4 attention). K = V saves the v_proj weight only: the cache still holds K (normed,
    rotated) and V (normed, not rotated) apart, so a layer stores two vectors per head.
    """
    head_dim = int(cfg.get("head_dim") or hidden // num_heads)
    heads = kv_heads(cfg, num_heads)
    if kind == "sliding" and cfg.get("swa_num_key_value_heads"):  # MiMo-V2-Flash's SWA layers
        heads = int(cfg["swa_num_key_value_heads"])
        head_dim = int(cfg.get("swa_head_dim") or head_dim)
    if kind == "full" and cfg.get("global_head_dim"):
        head_dim = int(cfg["global_head_dim"])
        if cfg.get("attention_k_eq_v") and cfg.get("num_global_key_value_heads"):
            heads = int(cfg["num_global_key_value_heads"])
    if heads <= 0 or heads > num_heads or num_heads % heads:
        raise ValueError(
            f"num_key_value_heads = {heads} must divide num_attention_heads = {num_heads}"
        )
    return heads, head_dim


def kv_shared_layers(cfg: dict[str, Any], num_layers: int) -> int:
    """Gemma-3n / Gemma-4 E-models: the last `num_kv_shared_layers` layers read the KV of an
    earlier layer of their type and keep none of their own (vLLM allocates them nothing)."""
    shared = int(cfg.get("num_kv_shared_layers") or 0)
    if not 0 <= shared < num_layers:
        raise ValueError(
            f"num_kv_shared_layers = {shared} must be between 0 and num_hidden_layers - 1"
        )
    return shared


def layer_kv_heads(cfg: dict[str, Any], num_layers: int) -> list[int | None]:
    """Per-layer KV head counts where the config sets them layer by layer (DeciLM's
    n_heads_in_group); None where the model-wide count (layer_shape) applies."""
    plans = layer_plans(cfg, num_layers)
    return [p.kv_heads for p in plans] if plans is not None else [None] * num_layers
