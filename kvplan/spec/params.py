"""Parameter counts from a config: dense, MoE total vs active, MLA projections, tied embeddings.

Counted the way the published sizes are (Mixtral-8x7B 46.7B / 12.9B active, DeepSeek-V3
671B / 37B): embeddings and the LM head included, DeepSeek's multi-token-prediction
module excluded.
"""

from __future__ import annotations

from typing import Any

from kvplan.spec import AttentionGroup, ParamCount

_UNGATED_MLP = {"opt", "gpt2", "gpt_bigcode", "falcon", "gpt_neox", "phi", "bloom"}
_TIED_BY_DEFAULT = {"opt", "gpt2", "gemma", "gemma2", "gemma3", "gemma3_text", "bloom", "gpt_bigcode"}
_QK_NORM = {"qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_text", "qwen3_5", "gemma3", "gemma3_text", "olmo2"}
_QKV_BIAS_ONLY = {"qwen2", "qwen2_moe", "qwen2_vl"}
_FOUR_NORMS = {"gemma2", "gemma3", "gemma3_text"}


def _attention_params(cfg: dict[str, Any], hidden: int, num_heads: int, kv: int, head_dim: int) -> int:
    model_type = cfg.get("model_type", "")
    q_out = num_heads * head_dim * (2 if cfg.get("attn_output_gate") else 1)
    params = hidden * q_out + 2 * hidden * kv * head_dim + num_heads * head_dim * hidden
    if cfg.get("attention_bias") or cfg.get("enable_bias") or model_type == "opt":
        params += q_out + 2 * kv * head_dim + hidden
    elif model_type in _QKV_BIAS_ONLY:
        params += q_out + 2 * kv * head_dim
    if model_type in _QK_NORM:
        params += 2 * head_dim
    if model_type == "gpt_oss":
        params += num_heads  # attention sinks
    return params


def _mla_params(cfg: dict[str, Any], hidden: int, num_heads: int) -> int:
    rope, nope = int(cfg.get("qk_rope_head_dim", 0)), int(cfg.get("qk_nope_head_dim", 0))
    v_dim = int(cfg.get("v_head_dim", nope))
    kv_rank = int(cfg["kv_lora_rank"])
    q_rank = cfg.get("q_lora_rank")
    q_head = nope + rope
    if q_rank:
        query = hidden * q_rank + q_rank + q_rank * num_heads * q_head
    else:
        query = hidden * num_heads * q_head
    kv = hidden * (kv_rank + rope) + kv_rank + kv_rank * num_heads * (nope + v_dim)
    return query + kv + num_heads * v_dim * hidden


def _linear_attention_params(cfg: dict[str, Any], hidden: int) -> int:
    key_heads, value_heads = int(cfg["linear_num_key_heads"]), int(cfg["linear_num_value_heads"])
    key_dim = key_heads * int(cfg["linear_key_head_dim"])
    value_dim = value_heads * int(cfg["linear_value_head_dim"])
    conv_dim = 2 * key_dim + value_dim
    kernel = int(cfg.get("linear_conv_kernel_dim", 4))
    in_proj = hidden * (2 * key_dim + 2 * value_dim) + hidden * 2 * value_heads
    return in_proj + conv_dim * kernel + 2 * value_heads + int(cfg["linear_value_head_dim"]) + value_dim * hidden


def _mlp_params(cfg: dict[str, Any], hidden: int, intermediate: int) -> int:
    if cfg.get("model_type") in _UNGATED_MLP:
        return 2 * hidden * intermediate + intermediate + hidden  # fc1/fc2 with biases
    return 3 * hidden * intermediate


def _moe_layout(cfg: dict[str, Any], num_layers: int) -> tuple[int, int, int]:
    """(experts per MoE layer, experts per token, number of MoE layers)."""
    experts = int(cfg.get("n_routed_experts") or cfg.get("num_local_experts") or cfg.get("num_experts") or 0)
    if experts <= 1:
        return 0, 0, 0
    per_token = int(cfg.get("num_experts_per_tok") or cfg.get("experts_per_token") or cfg.get("moe_topk") or 1)
    dense_first = int(cfg.get("first_k_dense_replace", 0))
    step = int(cfg.get("moe_layer_freq") or cfg.get("decoder_sparse_step") or 1)
    only_dense = set(cfg.get("mlp_only_layers") or [])
    moe_layers = sum(
        1 for i in range(num_layers)
        if i >= dense_first and i not in only_dense and (i - dense_first) % step == 0
    )
    return experts, per_token, moe_layers


def count_params(
    cfg: dict[str, Any], hidden: int, num_layers: int, num_heads: int, vocab: int,
    groups: tuple[AttentionGroup, ...],
) -> tuple[ParamCount, int, int]:
    """Returns (ParamCount, experts per MoE layer, experts per token)."""
    if cfg.get("num_parameters"):  # a profile may state the count outright
        total = int(cfg["num_parameters"])
        return ParamCount(0, 0, 0, total, 0, 0, 0), 0, 0
    model_type = cfg.get("model_type", "")
    head_dim = int(cfg.get("head_dim") or hidden // num_heads)
    kv = next((g.num_kv_heads for g in groups if g.kind in ("full", "sliding")), num_heads)

    attention = 0
    for group in groups:
        if group.kind == "mla":
            attention += group.num_layers * _mla_params(cfg, hidden, num_heads)
        elif group.kind == "state":
            attention += group.num_layers * _linear_attention_params(cfg, hidden)
        else:
            attention += group.num_layers * _attention_params(cfg, hidden, num_heads, kv, head_dim)

    intermediate = int(cfg.get("intermediate_size") or cfg.get("ffn_dim") or 4 * hidden)
    experts, per_token, moe_layers = _moe_layout(cfg, num_layers)
    dense_mlp = (num_layers - moe_layers) * _mlp_params(cfg, hidden, intermediate)
    experts_total = experts_active = 0
    if experts:
        expert_width = int(cfg.get("moe_intermediate_size") or intermediate)
        one_expert = 3 * hidden * expert_width
        if model_type == "gpt_oss":
            one_expert += 2 * expert_width + hidden  # gate_up and down biases
        experts_total = moe_layers * experts * one_expert
        experts_active = moe_layers * per_token * one_expert
        router = hidden * experts + (experts if model_type in ("gpt_oss", "deepseek_v3", "kimi_k2") else 0)
        shared = int(cfg.get("n_shared_experts") or 0) * 3 * hidden * expert_width
        if cfg.get("shared_expert_intermediate_size"):
            shared += 3 * hidden * int(cfg["shared_expert_intermediate_size"]) + hidden
        dense_mlp += moe_layers * (router + shared)

    tied = cfg.get("tie_word_embeddings", model_type in _TIED_BY_DEFAULT)
    embedding = vocab * hidden
    lm_head = 0 if tied else vocab * hidden
    if model_type == "opt":
        embedding += (int(cfg.get("max_position_embeddings", 2048)) + 2) * hidden  # learned positions
    norms_per_layer = 4 if model_type in _FOUR_NORMS else 2
    norm_width = 2 * hidden if model_type == "opt" else hidden  # LayerNorm has a bias
    other = (num_layers * norms_per_layer + 1) * norm_width
    counts = ParamCount(embedding, lm_head, attention, dense_mlp, experts_total, experts_active, other)
    return counts, experts, per_token
