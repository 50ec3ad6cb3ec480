"""Validate a Hugging Face config.json before the estimator reads a single number from it.

One table, FIELD_RULES, names every field the estimator (hf_config.py, params.py) reads
and what a usable value looks like; CONSISTENCY holds the checks that involve several
fields. A new architecture adds its fields to the table (and a consistency check if it
needs one); hf_config.py calls `check_config` once, on the merged text config.

Rules follow what a real config holds: integers are JSON integers (an integral float
such as 4096.0 is accepted, 127.5 is not), booleans are JSON true/false (never 0/1 or
"no"), `null` means "not set" and is always accepted. Values beyond the bounds are typos
(1e30 layers), not models; bounds are generous (10x the largest shipped model).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DIM_MAX = 2**20  # hidden sizes, head dims, ranks: 1,048,576 (largest shipped: 16,384)
COUNT_MAX = 2**16  # layers, heads, experts (largest shipped: 256 experts, 128 heads)
LENGTH_MAX = 2**34  # context lengths and vocabularies
PARAMS_MAX = 10**16  # a stated parameter count


@dataclass(frozen=True)
class FieldRule:
    """What one config field must be. kind: int, bool, str, dict, list[str], list[int]."""

    # int, bool, str, dict, list[str], list[int], list[dict], int|flags (an int or a 0/1 list per
    # layer), int|pattern (an int or a string of L / G per layer, EXAONE-4's "LLLG")
    kind: str
    low: int = 1
    high: int = DIM_MAX

    def problem(self, value: Any) -> str | None:
        """Why `value` is unusable ("must be ..."), or None when it is fine."""
        if self.kind == "bool":
            return None if isinstance(value, bool) else "must be true or false"
        if self.kind == "str":
            return None if isinstance(value, str) else "must be a string"
        if self.kind == "dict":
            return None if isinstance(value, dict) else "must be a JSON object"
        if self.kind == "list[str]":
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
            return None if ok else "must be a list of strings"
        if self.kind == "list[dict]":
            ok = isinstance(value, list) and all(isinstance(v, dict) for v in value)
            return None if ok else "must be a list of JSON objects, one per layer"
        if self.kind == "int|pattern" and isinstance(value, str):
            ok = bool(value) and not set(value) - {"L", "G"}
            return (
                None
                if ok
                else "must be an integer or a string of L (local) and G (global) per layer"
            )
        if self.kind == "list[int]":
            ok = isinstance(value, list) and all(
                _integer(v) is not None and 0 <= v < COUNT_MAX for v in value
            )
            return None if ok else "must be a list of layer indices (integers >= 0)"
        if self.kind == "int|flags" and isinstance(value, list):
            ok = all(isinstance(v, bool) or _integer(v) in (0, 1) for v in value)
            return None if ok else "must be an integer or a list of 0 / 1 per layer"
        number = _integer(value)
        wanted = "a positive integer" if self.low == 1 else f"an integer >= {self.low}"
        if number is None or not self.low <= number <= self.high:
            return f"must be {wanted} (at most {self.high:,})"
        return None


def _integer(value: Any) -> int | None:
    """value as an int when it is a finite whole JSON number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        return None
    return int(value)


def _dims(*names: str, low: int = 1, high: int = DIM_MAX) -> dict[str, FieldRule]:
    return {name: FieldRule("int", low, high) for name in names}


FIELD_RULES: dict[str, FieldRule] = {
    # shape of the transformer (every alias hf_config.get_field accepts)
    **_dims(
        "hidden_size",
        "n_embd",
        "d_model",
        "dim",
        "head_dim",
        "intermediate_size",
        "ffn_dim",
        "moe_intermediate_size",
        "kv_lora_rank",
        "q_lora_rank",
        "v_head_dim",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "index_head_dim",
        "intermediate_size_mlp",
        "dense_intermediate_size",
        "swa_head_dim",
        "global_head_dim",
        "mamba_head_dim",
        "ssm_state_size",
        "moe_latent_size",
    ),
    # 0 is a real value: Qwen3-Coder (qwen3_moe) ships shared_expert_intermediate_size 0, "no shared
    # expert"
    **_dims(
        "qk_rope_head_dim",
        "qk_nope_head_dim",
        "shared_expert_intermediate_size",
        "moe_shared_expert_intermediate_size",
        low=0,
    ),
    **_dims(
        "num_hidden_layers",
        "n_layer",
        "num_layers",
        "n_layers",
        "num_attention_heads",
        "n_head",
        "num_heads",
        "n_heads",
        "num_key_value_heads",
        "n_head_kv",
        "num_kv_heads",
        "multi_query_group_num",
        "linear_num_key_heads",
        "linear_num_value_heads",
        "linear_conv_kernel_dim",
        "full_attention_interval",
        "num_experts_per_tok",
        "experts_per_token",
        "mamba_num_heads",
        "n_groups",
        "conv_kernel",
        "moe_topk",
        "decoder_sparse_step",
        "index_n_heads",
        "interleave_moe_layer_step",
        "num_global_key_value_heads",
        "no_rope_layer_interval",
        "swa_num_key_value_heads",
        high=COUNT_MAX,
    ),
    **_dims(
        "n_routed_experts",
        "num_local_experts",
        "num_experts",
        "n_shared_experts",
        "first_k_dense_replace",
        "max_window_layers",
        "num_kv_shared_layers",
        "mtp_num_hidden_layers",
        "num_nextn_predict_layers",
        low=0,
        high=COUNT_MAX,
    ),
    **_dims(
        "vocab_size",
        "padded_vocab_size",
        "max_position_embeddings",
        "n_positions",
        "max_seq_len",
        "seq_length",
        "context_window_size",
        "sliding_window",
        "attention_chunk_size",
        "index_topk",
        "sliding_window_size",
        "chunk_size",
        "mamba_chunk_size",
        high=LENGTH_MAX,
    ),
    # DeepSeek: every n-th layer past first_k_dense_replace; MiMo-V2-Flash / MiniMax-M3: one 0 / 1
    # per layer
    "moe_layer_freq": FieldRule("int|flags", 1, COUNT_MAX),
    "num_parameters": FieldRule("int", 1, PARAMS_MAX),
    "sliding_window_pattern": FieldRule("int|pattern", 1, COUNT_MAX),  # Gemma3: 6; EXAONE-4: "LLLG"
    # switches
    **{
        name: FieldRule("bool")
        for name in (
            "tie_word_embeddings",
            "use_sliding_window",
            "multi_query",
            "attention_bias",
            "enable_bias",
            "attn_output_gate",
            "attention_k_eq_v",
            "enable_moe_block",
            "mlp_bias",
            "use_bias",
            "use_conv_bias",
        )
    },
    # names and nested objects
    **{
        name: FieldRule("str")
        for name in (
            "model_type",
            "torch_dtype",
            "dtype",
            "mamba_ssm_dtype",
            "mamba_ssm_cache_dtype",
            "hybrid_override_pattern",
        )
    },
    "quantization_config": FieldRule("dict"),
    "text_config": FieldRule("dict"),
    "layer_types": FieldRule("list[str]"),
    "mlp_only_layers": FieldRule("list[int]"),
    "moe_layers": FieldRule("list[int]"),
    "no_rope_layers": FieldRule("list[int]"),
    "cross_attention_layers": FieldRule("list[int]"),  # mllama
    "layers_block_type": FieldRule("list[str]"),  # Nemotron-H as newer transformers write it
    "block_configs": FieldRule("list[dict]"),  # DeciLM / Nemotron-NAS, one per layer
    "hybrid_layer_pattern": FieldRule(
        "int|flags", 0, 0
    ),  # MiMo-V2-Flash: 1 sliding, 0 full, per layer
}

# Fields inside nested objects: (object, field) -> rule.
NESTED_RULES: dict[tuple[str, str], FieldRule] = {
    ("quantization_config", "quant_method"): FieldRule("str"),
}


def _first(cfg: dict[str, Any], *names: str) -> tuple[str, int] | None:
    """(name, value) of the first set field among names (the aliases hf_config reads)."""
    for name in names:
        if cfg.get(name) is not None:
            return name, int(cfg[name])
    return None


def _kv_heads_divide_heads(cfg: dict[str, Any]) -> str | None:
    heads = _first(cfg, "num_attention_heads", "n_head", "num_heads", "n_heads")
    kv = _first(cfg, "num_key_value_heads", "n_head_kv", "num_kv_heads", "multi_query_group_num")
    if heads and kv and (kv[1] > heads[1] or heads[1] % kv[1]):
        return (
            f"'{kv[0]}' = {kv[1]} must divide '{heads[0]}' = {heads[1]} (grouped-query attention)"
        )
    return None


def _top_k_within_experts(cfg: dict[str, Any]) -> str | None:
    experts = _first(cfg, "n_routed_experts", "num_local_experts", "num_experts")
    top_k = _first(cfg, "num_experts_per_tok", "experts_per_token", "moe_topk")
    if experts and top_k and experts[1] > 1 and top_k[1] > experts[1]:
        return (
            f"'{top_k[0]}' = {top_k[1]} exceeds '{experts[0]}' = {experts[1]}: a token "
            "cannot use more experts than exist"
        )
    return None


def _layer_types_cover_layers(cfg: dict[str, Any]) -> str | None:
    layers = _first(cfg, "num_hidden_layers", "n_layer", "num_layers", "n_layers")
    types = cfg.get("layer_types")
    if layers and types and len(types) != layers[1]:
        return f"'layer_types' has {len(types)} entries but '{layers[0]}' = {layers[1]}"
    return None


def _per_layer_flags_cover_layers(cfg: dict[str, Any]) -> str | None:
    layers = _first(cfg, "num_hidden_layers", "n_layer", "num_layers", "n_layers")
    for key in (
        "moe_layer_freq",
        "hybrid_layer_pattern",
        "hybrid_override_pattern",
        "layers_block_type",
        "block_configs",
    ):
        flags = cfg.get(key)
        if layers and isinstance(flags, (list, str)) and flags and len(flags) != layers[1]:
            return f"'{key}' has {len(flags)} entries but '{layers[0]}' = {layers[1]}"
    return None


def _dense_layers_within_layers(cfg: dict[str, Any]) -> str | None:
    layers = _first(cfg, "num_hidden_layers", "n_layer", "num_layers", "n_layers")
    dense = _first(cfg, "first_k_dense_replace")
    if layers and dense and dense[1] > layers[1]:
        return f"'first_k_dense_replace' = {dense[1]} exceeds '{layers[0]}' = {layers[1]}"
    return None


def _derived_head_dim_positive(cfg: dict[str, Any]) -> str | None:
    hidden = _first(cfg, "hidden_size", "n_embd", "d_model", "dim")
    heads = _first(cfg, "num_attention_heads", "n_head", "num_heads", "n_heads")
    if hidden and heads and cfg.get("head_dim") is None and hidden[1] < heads[1]:
        return (
            f"'{hidden[0]}' = {hidden[1]} is smaller than '{heads[0]}' = {heads[1]}, so the head "
            "dimension "
            "(hidden / heads) is 0; set 'head_dim'"
        )
    return None


CONSISTENCY: tuple[Callable[[dict[str, Any]], str | None], ...] = (
    _kv_heads_divide_heads,
    _top_k_within_experts,
    _layer_types_cover_layers,
    _per_layer_flags_cover_layers,
    _dense_layers_within_layers,
    _derived_head_dim_positive,
)


def check_config(cfg: dict[str, Any], name: str, source: str = "") -> None:
    """Raise ValueError naming the first unusable field of config `name` and how to fix it."""
    where = f" ({source})" if source and source != name else ""
    name = f"{name}'{where}"
    fix = "fix the field in config.json (or remove it to use the default)"
    for key, rule in FIELD_RULES.items():
        value = cfg.get(key)
        if value is not None and (problem := rule.problem(value)) is not None:
            raise ValueError(f"config of '{name}: '{key}' = {_show(value)} {problem}; {fix}")
    for (outer, key), rule in NESTED_RULES.items():
        inner = cfg.get(outer)
        value = inner.get(key) if isinstance(inner, dict) else None
        if value is not None and (problem := rule.problem(value)) is not None:
            raise ValueError(
                f"config of '{name}: '{outer}.{key}' = {_show(value)} {problem}; {fix}"
            )
    for check in CONSISTENCY:
        if (problem := check(cfg)) is not None:
            raise ValueError(f"config of '{name}: {problem}; fix config.json")


def _show(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
