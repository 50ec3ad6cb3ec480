"""Defaults a config.json may leave out because its transformers config class supplies them.

A Hugging Face config.json holds only the values that differ from the config class's
defaults (google/gemma-3-4b-it's text_config has no num_attention_heads, head_dim or
vocab_size: Gemma3TextConfig provides them). kvplan reads the plain dict, so for the families
listed here it fills each missing key from the class named by the config's model_type before
parsing. Only the fields kvplan reads are listed, each with the class that defines it (read in
transformers 4.54 and 5.24, which agree on them; vLLM's own config classes, where it has one,
agree too).

A key present in the config, even as null, is kept: the class takes the config's value over
its default, and null means "not set" (Nemotron-H's "sliding_window": null is no window).
"""

from __future__ import annotations

from typing import Any

# transformers Gemma3TextConfig (models/gemma3/configuration_gemma3.py). sliding_window_pattern
# is read from kwargs with a default of 6 (every 6th layer global), which is how the class
# derives layer_types when a config ships neither.
_GEMMA3_TEXT = {
    "vocab_size": 262_208,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "max_position_embeddings": 131_072,
    "tie_word_embeddings": True,
    "attention_bias": False,
    "sliding_window": 4096,
    "sliding_window_pattern": 6,
}

# transformers Exaone4Config (models/exaone4/configuration_exaone4.py); vLLM 0.10's own
# Exaone4Config (transformers_utils/configs/exaone4.py) has the same shape defaults.
_EXAONE4 = {
    "vocab_size": 102_400,
    "hidden_size": 4096,
    "intermediate_size": 16_384,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
    "sliding_window": 4096,
    "sliding_window_pattern": 4,
}

# transformers NemotronHConfig (models/nemotron_h/configuration_nemotron_h.py), the same values
# as vLLM's NemotronHConfig (transformers_utils/configs/nemotron_h.py). mamba_ssm_cache_dtype:
# float32 is also what vLLM falls back to
# (NemotronHForCausalLMConfig.DEFAULT_MAMBA_SSM_CACHE_DTYPE).
_NEMOTRON_H = {
    "vocab_size": 131_072,
    "hidden_size": 4096,
    "intermediate_size": 21_504,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "use_bias": False,
    "use_conv_bias": True,
    "ssm_state_size": 128,
    "mamba_num_heads": 128,
    "mamba_head_dim": 64,
    "n_groups": 8,
    "conv_kernel": 4,
    "mamba_ssm_cache_dtype": "float32",
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "moe_intermediate_size": 7688,
    "moe_shared_expert_intermediate_size": 7688,
    "num_experts_per_tok": 2,
}

# transformers MllamaTextConfig (models/mllama/configuration_mllama.py): the 11B's shape, with
# cross_attention_layers defaulting to [3, 8, ..., 38] when None.
_MLLAMA_TEXT = {
    "vocab_size": 128_256,
    "hidden_size": 4096,
    "num_hidden_layers": 40,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14_336,
    "max_position_embeddings": 131_072,
    "tie_word_embeddings": False,
    "cross_attention_layers": [3, 8, 13, 18, 23, 28, 33, 38],
}
MLLAMA_CROSS_LAYERS: list[int] = _MLLAMA_TEXT["cross_attention_layers"]  # type: ignore[assignment]  # also what an explicit null means

# transformers MllamaVisionConfig: read by spec/vision.py (tower) and the encoder-token count.
MLLAMA_VISION = {
    "hidden_size": 1280,
    "num_hidden_layers": 32,
    "num_global_layers": 8,
    "num_attention_heads": 16,
    "num_channels": 3,
    "intermediate_size": 5120,
    "vision_output_dim": 7680,
    "image_size": 448,
    "patch_size": 14,
    "max_num_tiles": 4,
    "supported_aspect_ratios": [[1, 1], [1, 2], [1, 3], [1, 4], [2, 1], [2, 2], [3, 1], [4, 1]],
}

# model_type -> defaults. Only families kvplan was extended for; others parse as before.
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": _GEMMA3_TEXT,
    "gemma3": _GEMMA3_TEXT,  # a text config whose model_type was left at the outer "gemma3"
    "exaone4": _EXAONE4,
    "nemotron_h": _NEMOTRON_H,
    "mllama_text_model": _MLLAMA_TEXT,
    "mllama": _MLLAMA_TEXT,
}


def with_family_defaults(cfg: dict[str, Any]) -> dict[str, Any]:
    """The (text) config with its config class's defaults filled in where a key is absent."""
    defaults = FAMILY_DEFAULTS.get(str(cfg.get("model_type", "")))
    if not defaults:
        return cfg
    filled = {**defaults, **cfg}
    blocks = cfg.get("layers_block_type") or cfg.get("hybrid_override_pattern")
    if cfg.get("model_type") == "nemotron_h" and "num_hidden_layers" not in cfg and blocks:
        # NemotronHConfig.num_hidden_layers is a property: the length of the layer list
        filled["num_hidden_layers"] = len(blocks)
    return filled


def with_vision_defaults(vision: dict[str, Any], outer_model_type: str) -> dict[str, Any]:
    """A vision_config with its class's defaults (Llama-3.2-Vision's MllamaVisionConfig)."""
    if outer_model_type == "mllama":
        return {**MLLAMA_VISION, **vision}
    return vision
