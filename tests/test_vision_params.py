"""Vision towers counted apart (spec/vision.py), against published parameter totals.

The configs below are constructed for these tests: the published config.json values of
each checkpoint that the counts read, nothing else. Totals are the Hugging Face model pages'
safetensors parameter counts.
"""

from __future__ import annotations

import pytest

from kvplan.spec.hf_config import model_spec_from_config
from kvplan.spec.resolve import load_model
from kvplan.spec.vision import siglip_params, vision_params

QWEN25_VL_7B = {  # Qwen/Qwen2.5-VL-7B-Instruct
    "model_type": "qwen2_5_vl",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "max_position_embeddings": 128000,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vision_config": {
        "depth": 32,
        "hidden_act": "silu",
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "in_chans": 3,
        "out_hidden_size": 3584,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 112,
    },
}
QWEN3_VL_8B = {  # Qwen/Qwen3-VL-8B-Instruct
    "model_type": "qwen3_vl",
    "tie_word_embeddings": False,
    "text_config": {
        "model_type": "qwen3_vl_text",
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
        "max_position_embeddings": 262144,
    },
    "vision_config": {
        "model_type": "qwen3_vl",
        "depth": 27,
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_heads": 16,
        "in_channels": 3,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": 4096,
        "num_position_embeddings": 2304,
        "deepstack_visual_indexes": [8, 16, 24],
        "hidden_act": "gelu_pytorch_tanh",
    },
}
SIGLIP_GEMMA3 = {
    "model_type": "siglip_vision_model",
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "patch_size": 14,
    "image_size": 896,
    "vision_use_head": False,
}
LLAVA_15_7B = {  # llava-hf/llava-1.5-7b-hf
    "model_type": "llava",
    "vision_feature_layer": -2,
    "text_config": {
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "vocab_size": 32064,
        "max_position_embeddings": 4096,
    },
    "vision_config": {
        "model_type": "clip_vision_model",
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "patch_size": 14,
        "image_size": 336,
    },
}
LLAMA4_VISION = {
    "model_type": "llama4_vision_model",
    "hidden_size": 1408,
    "intermediate_size": 5632,
    "num_hidden_layers": 34,
    "num_attention_heads": 16,
    "patch_size": 14,
    "image_size": 336,
    "num_channels": 3,
    "projector_input_dim": 4096,
    "projector_output_dim": 4096,
    "vision_output_dim": 4096,
    "pixel_shuffle_ratio": 0.5,
}


def gemma3(hidden: int, layers: int, heads: int, kv: int, head_dim: int, inter: int) -> dict:
    return {
        "model_type": "gemma3",
        "mm_tokens_per_image": 256,
        "vision_config": SIGLIP_GEMMA3,
        "text_config": {
            "model_type": "gemma3_text",
            "hidden_size": hidden,
            "intermediate_size": inter,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "num_key_value_heads": kv,
            "head_dim": head_dim,
            "vocab_size": 262208,
            "sliding_window": 1024,
            "sliding_window_pattern": 6,
            "max_position_embeddings": 131072,
        },
    }


@pytest.mark.parametrize(
    ("config", "total", "vision"),
    [
        (QWEN25_VL_7B, 8_292_166_656, 676_550_144),  # "8.29B"; the tower + merger 0.677B
        (
            QWEN3_VL_8B,
            8_767_123_696,
            576_388_336,
        ),  # 27 blocks, position table, merger + 3 deepstack mergers
        (
            gemma3(2560, 34, 8, 4, 256, 10240),
            4_300_079_472,
            416_866_032 + 1152 + 1152 * 2560,
        ),  # Gemma-3-4b-it 4.3B
        (
            gemma3(5376, 62, 32, 16, 128, 21504),
            27_432_406_640,
            416_866_032 + 1152 + 1152 * 5376,
        ),  # 27b-it 27.4B
        (
            LLAVA_15_7B,
            7_063_427_072,
            303_507_456 + 1024 * 4096 + 4096 + 4096 * 4096 + 4096,
        ),  # CLIP-L/336 + 2 linears
    ],
)
def test_totals_match_the_published_counts(config: dict, total: int, vision: int) -> None:
    params = model_spec_from_config(config, "vl", "test").params
    assert params.vision == vision
    assert params.total == total
    assert params.text_total == total - vision
    assert params.active == params.text_total  # a dense model: every text weight, no vision weight


def test_siglip_so400m_tower_is_about_0_4b() -> None:
    # google/siglip-so400m-patch14-384's vision model, pooling head included: 428,225,600
    per_layer = 4 * 1152 + 4 * (1152 * 1152 + 1152) + (1152 * 4304 + 4304) + (4304 * 1152 + 1152)
    assert per_layer == 15_239_504
    embeddings = 3 * 14 * 14 * 1152 + 1152 + 27 * 27 * 1152  # patch conv with bias, 729 positions
    head = (
        1152
        + 3 * 1152 * 1152
        + 3 * 1152
        + 1152 * 1152
        + 1152
        + 2 * 1152
        + 1152 * 4304
        + 4304
        + 4304 * 1152
        + 1152
    )
    assert (
        siglip_params({**SIGLIP_GEMMA3, "image_size": 384, "vision_use_head": True})
        == embeddings + 27 * per_layer + 2 * 1152 + head
        == 428_225_600
    )
    # Gemma 3's: no head, 4096 positions at 896 px: the "417M" of the Gemma 3 report
    assert siglip_params(SIGLIP_GEMMA3) == 416_866_032


def test_llama4_scout_with_its_vision_tower_is_the_card_109b() -> None:
    vision = vision_params({"model_type": "llama4", "vision_config": LLAMA4_VISION}, 5120)
    per_layer = 4 * (1408 * 1408 + 1408) + 1408 * 5632 + 5632 + 5632 * 1408 + 1408 + 4 * 1408
    embeddings = 3 * 14 * 14 * 1408 + 1408 + 577 * 1408
    adapter = 5632 * 4096 + 4096 * 4096
    assert vision == embeddings + 4 * 1408 + 34 * per_layer + adapter + 4096 * 5120 == 871_932_416
    text = load_model("llama-4-scout").params.total  # the shipped profile has no vision_config
    assert round((text + vision) / 1e9) == 109


def test_vision_counts_in_weight_bytes_not_in_active() -> None:
    spec = model_spec_from_config(QWEN25_VL_7B, "qwen2.5-vl-7b", "test")
    assert spec.weight_bytes() == spec.params.total * 2
    assert spec.vision_weight_bytes() == 676_550_144 * 2
    assert (
        spec.params.matmul_active == spec.params.text_total - spec.params.embedding
    )  # untied: the head, not the gather
    scaled = spec.with_param_count(spec.params.total * 2)
    assert scaled.params.vision == 2 * spec.params.vision


def test_towers_without_a_formula_count_zero() -> None:
    gemma4 = load_model(
        "gemma-4-26b-a4b"
    )  # gemma4_vision: not derived; the card lists its 550M apart
    assert gemma4.params.vision == 0
    assert load_model("qwen3.5-27b").params.vision > 0  # Qwen3-VL-style tower, no deepstack


def test_bad_vision_fields_raise_value_errors() -> None:
    bad = {**QWEN25_VL_7B, "vision_config": {**QWEN25_VL_7B["vision_config"], "depth": -1}}
    with pytest.raises(ValueError, match="depth"):
        model_spec_from_config(bad, "bad", "test")


def test_decode_reads_no_vision_weight() -> None:
    """The tower is in the memory a checkpoint takes, never in what a text decode step reads:
    Qwen2.5-VL-7B's 676,550,144 tower parameters in bf16 are 1,353,100,288 bytes."""
    from kvplan.spec import parse_kv_format
    from kvplan.spec.resolve import load_gpu, load_model
    from kvplan.spec.roofline import Roofline

    roof = Roofline(
        load_model("qwen2.5-vl-7b-instruct"), load_gpu("h100"), 1, parse_kv_format("bf16")
    )
    assert roof.weight_bytes_per_gpu - roof.weight_bytes_read(1) == 676_550_144 * 2
