"""Parameter counts from a config: dense, MoE total vs active, MLA projections, tied embeddings.

Counted the way the published sizes are (Mixtral-8x7B 46.7B / 12.9B active, DeepSeek-V3
671B / 37B): embeddings and the LM head included, DeepSeek's multi-token-prediction
module excluded. A multimodal checkpoint's vision tower is counted apart (ParamCount.vision,
from spec/vision.py: in the total and the weight bytes, not in the per-token figures); audio
encoders are not counted. Families described layer by layer (Nemotron-H, DeciLM, mllama:
layer_plans.py) count each layer's own mixer, feed-forward and norms.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from kvplan.spec import AttentionGroup, ParamCount
from kvplan.spec.attention_group import (
    FullAttentionSpec,
    IndexerSpec,
    MambaSpec,
    MLAAttentionSpec,
)
from kvplan.spec.layer_plans import layer_plans
from kvplan.spec.layers import kv_shared_layers, layer_kinds, layer_shape
from kvplan.spec.state_layers import state_layer_params

_UNGATED_MLP = {"opt", "gpt2", "gpt_bigcode", "falcon", "gpt_neox", "phi", "bloom"}
_TIED_BY_DEFAULT = {
    "opt",
    "gpt2",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "gemma4",
    "gemma4_text",
    "bloom",
    "gpt_bigcode",
}
_QK_NORM = {
    "qwen3",
    "qwen3_moe",
    "qwen3_next",
    "qwen3_vl",
    "qwen3_vl_text",
    "qwen3_vl_moe",
    "qwen3_vl_moe_text",
    "qwen3_5_text",
    "qwen3_5",
    "gemma3",
    "gemma3_text",
    "gemma4",
    "gemma4_text",
    "olmo2",
    "exaone4",
}  # EXAONE-4: RMSNorm on q and k (vLLM Exaone4Attention q_norm / k_norm)
_QKV_BIAS_ONLY = {
    "qwen2",
    "qwen2_moe",
    "qwen2_vl",
    "qwen2_vl_text",
    "qwen2_5_vl",
    "qwen2_5_vl_text",
}
_FOUR_NORMS = {"gemma2", "gemma3", "gemma3_text", "gemma4", "gemma4_text"}
# gpt-oss's bias; DeepSeek's and Nemotron-H's e_score_correction_bias
_ROUTER_BIAS = {"gpt_oss", "deepseek_v3", "deepseek_v32", "kimi_k2", "nemotron_h"}
# Nemotron-H's MLPs and experts are up / down projections with a squared ReLU, no gate
# (vLLM NemotronHMLP, FusedMoE with activation_without_mul)
_UNGATED_NO_BIAS = {"nemotron_h"}
# Families whose model cards leave the input embedding out of "active": OpenAI's gpt-oss
# card (5.13B for 120b) and DeepSeek's (37B for V3; Kimi-K2, a V3-shaped model, 32B).
_ACTIVE_WITHOUT_EMBEDDING = {"gpt_oss", "deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2"}
_EXPERT_COUNT_KEYS = ("n_routed_experts", "num_local_experts", "num_experts")
# top-k under each family's key: Mixtral/Qwen/DeepSeek/Llama-4, gpt-oss, Hunyuan, Gemma-4
_TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_topk", "top_k_experts")


def _attention_params(
    cfg: dict[str, Any], hidden: int, num_heads: int, group: AttentionGroup
) -> int:
    model_type = cfg.get("model_type", "")
    kv, head_dim = group.num_kv_heads, group.head_dim
    q_out = num_heads * head_dim * (2 if cfg.get("attn_output_gate") else 1)
    # Gemma-4's K = V full layers have no v_proj: V is the (normed) K projection.
    kv_projections = (
        1 if (isinstance(group, FullAttentionSpec) and cfg.get("attention_k_eq_v")) else 2
    )
    params = (
        hidden * q_out + kv_projections * hidden * kv * head_dim + num_heads * head_dim * hidden
    )
    if cfg.get("attention_bias") or cfg.get("enable_bias") or model_type == "opt":
        params += q_out + kv_projections * kv * head_dim + hidden
    elif model_type in _QKV_BIAS_ONLY:
        params += q_out + 2 * kv * head_dim
    if model_type in _QK_NORM:
        params += 2 * head_dim
    if model_type == "gpt_oss":
        params += num_heads  # attention sinks
    return params


def _mla_params(cfg: dict[str, Any], hidden: int, num_heads: int) -> int:
    rope, nope = int(cfg.get("qk_rope_head_dim") or 0), int(cfg.get("qk_nope_head_dim") or 0)
    v_dim = int(
        cfg.get("v_head_dim") or nope
    )  # null (not set) as absent: V as wide as the no-RoPE part
    kv_rank = int(cfg["kv_lora_rank"])
    q_rank = cfg.get("q_lora_rank")
    q_head = nope + rope
    if q_rank:
        query = hidden * q_rank + q_rank + q_rank * num_heads * q_head
    else:
        query = hidden * num_heads * q_head
    kv = hidden * (kv_rank + rope) + kv_rank + kv_rank * num_heads * (nope + v_dim)
    return query + kv + num_heads * v_dim * hidden


def _kv_shared_attention_params(
    cfg: dict[str, Any], hidden: int, num_heads: int, num_layers: int
) -> int:
    """Layers that reuse an earlier layer's KV hold no KV group, but keep their q_proj,
    o_proj and q_norm (their k/v projections are not counted)."""
    shared = kv_shared_layers(cfg, num_layers)
    params = 0
    for kind in layer_kinds(cfg, num_layers)[num_layers - shared :] if shared else []:
        head_dim = layer_shape(cfg, kind, num_heads, hidden)[1]
        params += 2 * hidden * num_heads * head_dim + (
            head_dim if cfg.get("model_type") in _QK_NORM else 0
        )
    return params


def _indexer_params(cfg: dict[str, Any], hidden: int) -> int:
    """DeepSeek-V3.2's lightning indexer per layer (DeepSeek's inference/model.py Indexer):
    wq_b from the query latent, wk with a LayerNorm (weight + bias), weights_proj."""
    heads, dim = int(cfg.get("index_n_heads") or 0), int(cfg["index_head_dim"])
    q_rank = int(cfg.get("q_lora_rank") or hidden)
    return q_rank * heads * dim + hidden * dim + 2 * dim + hidden * heads


def _cross_attention_params(hidden: int, num_heads: int, group: AttentionGroup) -> int:
    """One mllama cross-attention layer's attention (MllamaTextCrossAttention): q / k / v / o
    without biases, RMSNorms on q and k, and the layer's two tanh gates (attention and MLP)."""
    q_width, kv_width = num_heads * group.head_dim, group.num_kv_heads * group.head_dim
    return 2 * hidden * q_width + 2 * hidden * kv_width + 2 * group.head_dim + 2


def _mlp_params(cfg: dict[str, Any], hidden: int, intermediate: int) -> int:
    if cfg.get("model_type") in _UNGATED_MLP:
        return 2 * hidden * intermediate + intermediate + hidden  # fc1/fc2 with biases
    if cfg.get("model_type") in _UNGATED_NO_BIAS:
        return 2 * hidden * intermediate + ((intermediate + hidden) if cfg.get("mlp_bias") else 0)
    return 3 * hidden * intermediate


def _moe_layers(cfg: dict[str, Any], num_layers: int) -> list[int]:
    """Indices of the layers that hold routed experts."""
    plans = layer_plans(cfg, num_layers)
    if plans is not None:  # Nemotron-H: the E layers
        return [i for i, plan in enumerate(plans) if plan.ffn == "moe"]
    if str(cfg.get("model_type", "")).startswith("llama4"):
        # transformers' Llama4TextConfig: moe_layers defaults to every interleave_moe_layer_step-th
        # layer
        step = int(cfg.get("interleave_moe_layer_step") or 1)
        return list(cfg.get("moe_layers") or range(step - 1, num_layers, step))
    flags = cfg.get("moe_layer_freq")
    if isinstance(flags, list) and flags:
        # MiMo-V2-Flash / MiniMax-M3: one 0 / 1 per layer (vLLM's
        # MiniMaxM3DecoderLayer.is_moe_layer:
        # bool(moe_layer_freq[layer_id]); the same per-layer list in MiMoV2Flash)
        if len(flags) != num_layers:
            raise ValueError(
                f"moe_layer_freq has {len(flags)} entries but the model has {num_layers} layers"
            )
        return [i for i, moe in enumerate(flags) if moe]
    dense_first = int(cfg.get("first_k_dense_replace") or 0)
    step = int(flags or cfg.get("decoder_sparse_step") or 1)
    only_dense = set(cfg.get("mlp_only_layers") or [])
    return [
        i
        for i in range(num_layers)
        if i >= dense_first and i not in only_dense and (i - dense_first) % step == 0
    ]


def _moe_layout(cfg: dict[str, Any], num_layers: int) -> tuple[int, int, int]:
    """(experts per MoE layer, experts per token, number of MoE layers)."""
    experts = int(next((cfg[k] for k in _EXPERT_COUNT_KEYS if cfg.get(k)), 0))
    if experts <= 1:
        return 0, 0, 0
    per_token = int(next((cfg[k] for k in _TOP_K_KEYS if cfg.get(k)), 1))
    moe_layers = len(_moe_layers(cfg, num_layers))
    if not moe_layers:  # Nemotron-H-56B: NemotronHConfig's default expert count, but no E layer
        return 0, 0, 0
    return experts, per_token, moe_layers


def _router_params(cfg: dict[str, Any], hidden: int, experts: int) -> int:
    """One MoE layer's router: the gate matrix (and gpt-oss's bias, DeepSeek's correction bias,
    Gemma-4's scales), which quantized checkpoints keep in 16 bit."""
    model_type = str(cfg.get("model_type", ""))
    router = hidden * experts + (experts if model_type in _ROUTER_BIAS else 0)
    if model_type.startswith("gemma4"):
        router += hidden + experts  # Gemma4TextRouter: scale and per_expert_scale
    return router


def _always_on_per_moe_layer(
    cfg: dict[str, Any], hidden: int, experts: int, expert_width: int
) -> int:
    """Weights of a MoE layer every token uses: router, shared experts, a dense MLP beside the
    experts."""
    model_type = str(cfg.get("model_type", ""))
    router = _router_params(cfg, hidden, experts)
    if model_type == "nemotron_h":
        # one ungated shared MLP of n_shared x moe_shared_expert_intermediate_size, and with a
        # moe_latent_size the fc1 / fc2 projections into and out of the experts' latent width
        width = int(cfg.get("n_shared_experts") or 0) * int(
            cfg.get("moe_shared_expert_intermediate_size") or 0
        )
        latent = 2 * hidden * int(cfg["moe_latent_size"]) if cfg.get("moe_latent_size") else 0
        return router + _mlp_params(cfg, hidden, width) + latent
    shared = int(cfg.get("n_shared_experts") or 0) * 3 * hidden * expert_width  # DeepSeek
    if cfg.get("shared_expert_intermediate_size"):  # Qwen2-MoE / Qwen3-Next: a gated shared expert
        shared += 3 * hidden * int(cfg["shared_expert_intermediate_size"]) + hidden
    if model_type.startswith("llama4"):  # Llama4TextMoe: one shared expert as wide as a routed one
        shared += 3 * hidden * expert_width
    if cfg.get("enable_moe_block"):  # Gemma-4 26B-A4B: the dense MLP runs beside the experts
        shared += _mlp_params(cfg, hidden, int(cfg["intermediate_size"]))
        shared += 3 * hidden  # pre_feedforward_layernorm_2, post_feedforward_layernorm_1 and _2
    return router + shared


def _norm_params(cfg: dict[str, Any], hidden: int, num_layers: int) -> int:
    """Every norm's weights: per layer plus the final one (LayerNorm biases for OPT)."""
    model_type = cfg.get("model_type", "")
    plans = layer_plans(cfg, num_layers)
    if model_type == "nemotron_h":
        norms = num_layers  # one norm before each layer's single mixer
    elif plans is not None:  # DeciLM: a no-op attention or FFN has no norm either
        norms = sum((p.mixer != "none") + (p.ffn != "none") for p in plans)
    else:
        norms = num_layers * (4 if model_type in _FOUR_NORMS else 2)
    norm_width = 2 * hidden if model_type == "opt" else hidden  # LayerNorm has a bias
    return (norms + 1) * norm_width


def _dense_mlp_params(
    cfg: dict[str, Any], hidden: int, num_layers: int, moe_layers: int, width: int
) -> int:
    """The dense MLPs of the layers without experts (a layer plan names which have one, and
    DeciLM's give each its own width)."""
    plans = layer_plans(cfg, num_layers)
    if plans is None:
        return (num_layers - moe_layers) * _mlp_params(cfg, hidden, width)
    return sum(_mlp_params(cfg, hidden, p.ffn_width or width) for p in plans if p.ffn == "dense")


class MoeLayout(NamedTuple):
    """The routed experts: how many per MoE layer, how many a token visits, in how many
    layers, and each expert's intermediate width (0 throughout for a dense model)."""

    experts: int = 0
    per_token: int = 0
    layers: int = 0
    width: int = 0


def count_params(
    cfg: dict[str, Any],
    hidden: int,
    num_layers: int,
    num_heads: int,
    vocab: int,
    groups: tuple[AttentionGroup, ...],
    vision: int = 0,
    cross: tuple[AttentionGroup, ...] = (),
) -> tuple[ParamCount, MoeLayout]:
    """Returns the ParamCount and the routed experts' layout. `vision`: the vision tower's
    parameters (spec/vision.py), counted apart; `cross`: image cross-attention groups."""
    if cfg.get("num_parameters"):  # a profile may state the count outright
        total = int(cfg["num_parameters"])
        return ParamCount(0, 0, 0, total, 0, 0, 0), MoeLayout()
    model_type = cfg.get("model_type", "")

    attention = 0
    for group in groups:
        if isinstance(group, MLAAttentionSpec):
            attention += group.num_layers * _mla_params(cfg, hidden, num_heads)
        elif isinstance(group, IndexerSpec):
            attention += group.num_layers * _indexer_params(cfg, hidden)
        elif isinstance(group, MambaSpec):
            attention += group.num_layers * state_layer_params(cfg, hidden)
        else:
            attention += group.num_layers * _attention_params(cfg, hidden, num_heads, group)
    attention += sum(g.num_layers * _cross_attention_params(hidden, num_heads, g) for g in cross)

    attention += _kv_shared_attention_params(cfg, hidden, num_heads, num_layers)
    intermediate = int(cfg.get("intermediate_size") or cfg.get("ffn_dim") or 4 * hidden)
    # Llama-4 sizes its dense layers with intermediate_size_mlp; intermediate_size is the experts'
    # (MiniMax-M3: dense_intermediate_size)
    dense_width = int(
        cfg.get("intermediate_size_mlp") or cfg.get("dense_intermediate_size") or intermediate
    )
    experts, per_token, moe_layers = _moe_layout(cfg, num_layers)
    dense_mlp = _dense_mlp_params(cfg, hidden, num_layers, moe_layers, dense_width)
    experts_total = experts_active = routers = expert_width = 0
    if experts:
        expert_width = int(cfg.get("moe_intermediate_size") or intermediate)
        one_expert = 3 * hidden * expert_width
        if model_type == "gpt_oss":
            one_expert += 2 * expert_width + hidden  # gate_up and down biases
        if (
            model_type in _UNGATED_NO_BIAS
        ):  # up and down only, in the latent width when there is one
            one_expert = 2 * int(cfg.get("moe_latent_size") or hidden) * expert_width
        experts_total = moe_layers * experts * one_expert
        experts_active = moe_layers * per_token * one_expert
        dense_mlp += moe_layers * _always_on_per_moe_layer(cfg, hidden, experts, expert_width)
        routers = moe_layers * _router_params(cfg, hidden, experts)

    tied = cfg.get("tie_word_embeddings", model_type in _TIED_BY_DEFAULT)
    embedding = vocab * hidden
    lm_head = 0 if tied else vocab * hidden
    if model_type == "opt":
        embedding += (
            int(cfg.get("max_position_embeddings", 2048)) + 2
        ) * hidden  # learned positions
    if str(model_type).startswith("mllama"):
        embedding += (
            8 * hidden
        )  # MllamaTextModel's table has vocab_size + 8 rows; its LM head vocab_size
    other = _norm_params(cfg, hidden, num_layers)
    counts = ParamCount(
        embedding,
        lm_head,
        attention,
        dense_mlp,
        experts_total,
        experts_active,
        other,
        embedding_in_active=model_type not in _ACTIVE_WITHOUT_EMBEDDING,
        vision=vision,
        routers=routers,
    )
    return counts, MoeLayout(experts, per_token, moe_layers if experts else 0, expert_width)
