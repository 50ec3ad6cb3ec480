"""Layers that keep a constant per-sequence state instead of per-token KV: their state bytes
and their parameters, for the two recurrent mixers kvplan knows.

- Gated DeltaNet (Qwen3-Next, Qwen3.5: `linear_*` keys): a causal conv over q, k and v plus a
  recurrent matrix of key_dim x value_dim per value head.
- Mamba-2 (NVIDIA Nemotron-H: `mamba_*`, `ssm_state_size`, `n_groups`, `conv_kernel`): sized as
  vLLM allocates it (MambaStateShapeCalculator.mamba2_state_shape in
  model_executor/layers/mamba/mamba_utils.py): a conv state of (conv_kernel - 1) x conv_dim with
  conv_dim = intermediate + 2 x n_groups x ssm_state_size, where intermediate is
  mamba_num_heads x mamba_head_dim (NemotronHForCausalLM.get_mamba_state_shape_from_config,
  not hidden x expand: Nemotron-3-Nano's 64 x 64 = 4096 is not 2 x 2688), and an SSM state of
  mamba_num_heads x mamba_head_dim x ssm_state_size. The conv state is in the model dtype
  (mamba_cache_dtype "auto"); the SSM state in mamba_ssm_cache_dtype, float32 unless the config
  names another (vLLM's NemotronH config hook reads it from the HF config, else float32).

Both are split over tensor-parallel ranks by heads (ModelSpec.state_bytes_per_seq divides by
tp); vLLM pads n_groups up to a multiple of tp when it does not divide, which is not modeled.
"""

from __future__ import annotations

from typing import Any

from kvplan.spec.kv_format import dtype_bytes


def is_mamba2(cfg: dict[str, Any]) -> bool:
    """Mamba-2 mixers name their heads `mamba_num_heads`; Gated DeltaNet uses `linear_*` keys."""
    return bool(cfg.get("mamba_num_heads")) and not cfg.get("linear_num_value_heads")


def recurrent_mixer(cfg: dict[str, Any]) -> str:
    """Which of the two mixers a config's state layers are."""
    return "mamba2" if is_mamba2(cfg) else "gated-deltanet"


def _model_dtype_bytes(cfg: dict[str, Any]) -> int:
    return int(dtype_bytes(str(cfg.get("torch_dtype") or cfg.get("dtype") or "bf16")))


def _ssm_dtype_bytes(cfg: dict[str, Any]) -> int:
    # Qwen3.5 names it mamba_ssm_dtype, Nemotron-H mamba_ssm_cache_dtype; vLLM defaults both to
    # fp32.
    return int(
        dtype_bytes(
            str(cfg.get("mamba_ssm_cache_dtype") or cfg.get("mamba_ssm_dtype") or "float32")
        )
    )


def _gdn_dims(cfg: dict[str, Any]) -> tuple[int, int, int, int]:
    key_heads = int(cfg.get("linear_num_key_heads") or 0)
    value_heads = int(cfg.get("linear_num_value_heads") or 0)
    key_dim = int(cfg.get("linear_key_head_dim") or 0)
    value_dim = int(cfg.get("linear_value_head_dim") or 0)
    if not (key_heads and value_heads and key_dim and value_dim):
        raise ValueError(
            "linear-attention layers need linear_num_key_heads, linear_num_value_heads, "
            "linear_key_head_dim and linear_value_head_dim in the config"
        )
    return key_heads, value_heads, key_dim, value_dim


def _mamba2_dims(cfg: dict[str, Any]) -> tuple[int, int, int, int, int, int]:
    """(heads, head_dim, intermediate, n_groups, state_size, conv_kernel)."""
    heads, head_dim = int(cfg["mamba_num_heads"]), int(cfg.get("mamba_head_dim") or 0)
    groups, state = int(cfg.get("n_groups") or 0), int(cfg.get("ssm_state_size") or 0)
    if not (head_dim and groups and state):
        raise ValueError(
            "Mamba-2 layers need mamba_head_dim, n_groups and ssm_state_size in the config"
        )
    return heads, head_dim, heads * head_dim, groups, state, int(cfg.get("conv_kernel") or 4)


def state_bytes_per_layer(cfg: dict[str, Any]) -> int:
    """One state layer's per-sequence state (conv + recurrent / SSM), bytes on one GPU at tp 1."""
    if is_mamba2(cfg):
        heads, head_dim, intermediate, groups, state, kernel = _mamba2_dims(cfg)
        conv_state = (kernel - 1) * (intermediate + 2 * groups * state) * _model_dtype_bytes(cfg)
        return conv_state + heads * head_dim * state * _ssm_dtype_bytes(cfg)
    key_heads, value_heads, key_dim, value_dim = _gdn_dims(cfg)
    conv_dim = 2 * key_heads * key_dim + value_heads * value_dim
    kernel = int(cfg.get("linear_conv_kernel_dim", 4))
    conv_state = conv_dim * (kernel - 1) * _model_dtype_bytes(cfg)
    return conv_state + value_heads * key_dim * value_dim * _ssm_dtype_bytes(cfg)


def state_layer_params(cfg: dict[str, Any], hidden: int) -> int:
    """Weights of one state layer's mixer (what replaces attention in that layer)."""
    if is_mamba2(cfg):
        # vLLM's MambaMixer2: in_proj to [z, x, B, C, dt], a depthwise conv over x, B and C,
        # A / D / dt_bias per head, a gated RMSNorm over the intermediate width, out_proj.
        heads, _, intermediate, groups, state, kernel = _mamba2_dims(cfg)
        conv_dim = intermediate + 2 * groups * state
        bias = bool(cfg.get("use_bias"))
        in_proj = hidden * (intermediate + conv_dim + heads) + (
            intermediate + conv_dim + heads if bias else 0
        )
        conv = conv_dim * kernel + (conv_dim if cfg.get("use_conv_bias", True) else 0)
        out_proj = intermediate * hidden + (hidden if bias else 0)
        return in_proj + conv + 3 * heads + intermediate + out_proj
    key_heads, value_heads, key_head_dim, value_head_dim = _gdn_dims(cfg)
    key_dim, value_dim = key_heads * key_head_dim, value_heads * value_head_dim
    conv_dim = 2 * key_dim + value_dim
    kernel = int(cfg.get("linear_conv_kernel_dim", 4))
    in_proj = hidden * (2 * key_dim + 2 * value_dim) + hidden * 2 * value_heads
    return in_proj + conv_dim * kernel + 2 * value_heads + value_head_dim + value_dim * hidden
