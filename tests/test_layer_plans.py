"""Families sized layer by layer or from their config class's defaults, pinned to figures
derived by hand from each shipped (verbatim) config.json; the arithmetic is in the comments.

Gemma-3-4b-it (Gemma3TextConfig defaults), EXAONE-4.0-32B (sliding_window_pattern "LLLG"),
Nemotron-H-56B and Nemotron-3-Nano-30B-A3B (Mamba-2 state, hybrid_override_pattern),
Llama-3.3-Nemotron-Super-49B (DeciLM block_configs) and Llama-3.2-90B-Vision (cross-attention).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvplan.spec import parse_kv_format
from kvplan.spec.hf_config import model_spec_from_config
from kvplan.spec.layer_plans import decilm_ffn_width
from kvplan.spec.profiles import model_profiles
from kvplan.spec.resolve import load_model

BF16, FP8 = parse_kv_format("bf16"), parse_kv_format("fp8")


def config(name: str) -> dict[str, Any]:
    return json.loads(model_profiles()[name].path.read_text())


def shapes(name: str) -> list[tuple[str, int, int, int, int | None]]:
    return [
        (g.kind, g.num_layers, g.num_kv_heads, g.head_dim, g.window)
        for g in load_model(name).groups
    ]


# --- Gemma-3-4b-it: a text_config that leans on Gemma3TextConfig ------------------------


def test_gemma3_text_config_takes_the_config_class_defaults() -> None:
    text = config("gemma-3-4b")["text_config"]
    assert not {"num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size"} & set(text)
    # Defaults: 8 heads, 4 KV heads, head_dim 256, sliding_window_pattern 6 -> layers 5, 11, 17,
    # 23, 29 global (5), the other 29 slide over the config's window of 1024.
    assert shapes("gemma-3-4b") == [("full", 5, 4, 256, None), ("sliding", 29, 4, 256, 1024)]
    assert load_model("gemma-3-4b").kv_bytes_per_token(BF16) == 34 * 2 * 4 * 256 * 2 == 139_264
    # Ideal at 131,072 tokens: 5 full layers keep every token, 29 sliding ones 1,024 each.
    assert load_model("gemma-3-4b").kv_bytes(131_072, BF16, respect_windows=True) == (
        (5 * 131_072 + 29 * 1_024) * 2 * 4 * 256 * 2
    )


def test_gemma3_defaults_give_the_same_count_as_the_spelled_out_config() -> None:
    cfg = config("gemma-3-4b")
    spelled = {
        **cfg,
        "text_config": {
            **cfg["text_config"],
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "vocab_size": 262_208,
            "sliding_window_pattern": 6,
        },
    }
    model = load_model("gemma-3-4b")
    assert model.params == model_spec_from_config(spelled, "g", "t").params
    assert (
        model.params.total == 4_300_079_472
    )  # tests/test_vision_params.py's Gemma-3-4b-it figure, "4.3B"


def test_a_key_present_as_null_is_not_replaced_by_a_default() -> None:
    # "sliding_window": null means no window (the class takes the config's value), not 4096.
    cfg = config("gemma-3-4b")
    cfg = {**cfg, "text_config": {**cfg["text_config"], "sliding_window": None}}
    assert [(g.kind, g.num_layers) for g in model_spec_from_config(cfg, "g", "t").groups] == [
        ("full", 34)
    ]


# --- EXAONE-4.0-32B: sliding_window_pattern as a string ---------------------------------


def test_exaone4_string_pattern_matches_its_layer_types() -> None:
    # 64 layers, "LLLG": 48 sliding (window 4096), 16 full; 8 KV heads x head_dim 128.
    assert shapes("exaone-4.0-32b") == [("full", 16, 8, 128, None), ("sliding", 48, 8, 128, 4096)]
    # full 16 x 2 x 8 x 128 x 2 = 65,536 + sliding 48 x 4,096 = 196,608
    assert load_model("exaone-4.0-32b").kv_bytes_per_token(BF16) == 65_536 + 196_608 == 262_144
    without_types = {k: v for k, v in config("exaone-4.0-32b").items() if k != "layer_types"}
    assert (
        model_spec_from_config(without_types, "e", "t").groups
        == load_model("exaone-4.0-32b").groups
    )


def test_string_pattern_keeps_the_last_layer_global() -> None:
    # 6 layers of "LLLG": L L L G L, and layer 5 (an L by the pattern) is global as the last layer.
    cfg = {
        "model_type": "exaone4",
        "hidden_size": 64,
        "num_hidden_layers": 6,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 100,
        "sliding_window": 16,
        "sliding_window_pattern": "LLLG",
    }
    assert [(g.kind, g.num_layers) for g in model_spec_from_config(cfg, "e", "t").groups] == [
        ("full", 2),
        ("sliding", 4),
    ]
    with pytest.raises(ValueError, match="sliding_window_pattern"):
        model_spec_from_config({**cfg, "sliding_window_pattern": "LXG"}, "e", "t")


def test_exaone4_params_count_qk_norm_and_post_norms() -> None:
    h, vocab = 5120, 102_400
    attention = 2 * h * 40 * 128 + 2 * h * 8 * 128 + 2 * 128  # q, o; k, v; q_norm, k_norm
    mlp = 3 * h * 27_392
    layer = attention + mlp + 2 * h  # post_attention_layernorm, post_feedforward_layernorm
    total = 2 * vocab * h + 64 * layer + h  # untied embedding and LM head, final norm
    assert load_model("exaone-4.0-32b").params.total == total == 32_003_216_384  # card: "32B"


# --- Nemotron-H: Mamba-2 state, KV only on '*' layers ------------------------------------


def test_nemotron_h_56b_layers_kv_and_mamba_state() -> None:
    pattern = config("nemotron-h-56b-base-8k")["hybrid_override_pattern"]
    assert (pattern.count("M"), pattern.count("-"), pattern.count("*")) == (54, 54, 10)
    model = load_model("nemotron-h-56b-base-8k")
    full, state = model.groups
    assert (full.kind, full.num_layers, full.num_kv_heads, full.head_dim) == ("full", 10, 8, 128)
    assert model.kv_bytes_per_token(BF16) == 10 * 2 * 8 * 128 * 2 == 40_960
    # conv: (conv_kernel 4 - 1) x (256 heads x 64 + 2 x 8 groups x 256 state) x 2 B (bf16) = 122,880
    # ssm:  256 heads x 64 head_dim x 256 state x 4 B (mamba_ssm_cache_dtype absent -> float32)
    conv, ssm = 3 * (256 * 64 + 2 * 8 * 256) * 2, 256 * 64 * 256 * 4
    assert (
        (state.kind, state.num_layers, state.state_bytes_per_layer)
        == ("state", 54, conv + ssm)
        == ("state", 54, 16_900_096)
    )
    assert model.state_bytes_per_seq() == 54 * 16_900_096 == 912_605_184
    assert (
        model.state_bytes_per_seq(tp=8) == 912_605_184 // 8
    )  # heads and conv channels split over ranks


def test_nemotron_h_56b_params_match_the_card() -> None:
    h, vocab, inner, conv_dim, heads = 8192, 131_072, 256 * 64, 256 * 64 + 2 * 8 * 256, 256
    # MambaMixer2: in_proj to z, x, B, C, dt; depthwise conv with bias; A, D, dt_bias; gated norm;
    # out_proj
    mamba = h * (inner + conv_dim + heads) + conv_dim * 4 + conv_dim + 3 * heads + inner + inner * h
    attention = 2 * h * 64 * 128 + 2 * h * 8 * 128
    mlp = 2 * h * 32_768  # up / down, squared ReLU, no gate
    total = (
        2 * vocab * h + 54 * mamba + 10 * attention + 54 * mlp + 119 * h
    )  # one norm per layer + final
    params = load_model("nemotron-h-56b-base-8k").params
    assert params.total == total == 56_324_350_464  # card: "This model has 56B model parameters"


def test_nemotron_3_nano_state_kv_and_moe_params() -> None:
    model = load_model("nemotron-3-nano-30b-a3b")
    assert shapes("nemotron-3-nano-30b-a3b") == [
        ("full", 6, 2, 128, None),
        ("state", 23, 0, 0, None),
    ]
    assert model.kv_bytes_per_token(BF16) == 6 * 2 * 2 * 128 * 2 == 6_144
    # The Mamba width is 64 heads x 64 = 4096 (not 2 x hidden 2688): conv_dim 4096 + 2 x 8 x 128 =
    # 6144.
    conv, ssm = 3 * 6_144 * 2, 64 * 64 * 128 * 4  # mamba_ssm_cache_dtype float32
    assert model.groups[1].state_bytes_per_layer == conv + ssm == 2_134_016
    assert model.state_bytes_per_seq() == 23 * 2_134_016 == 49_082_368
    h = 2688
    mamba = h * (4096 + 6144 + 64) + 6144 * 4 + 6144 + 3 * 64 + 4096 + 4096 * h
    attention = 2 * h * 32 * 128 + 2 * h * 2 * 128
    expert = 2 * h * 1856  # up / down
    always_on = h * 128 + 128 + 2 * h * 3712  # router + e_score_correction_bias, the shared expert
    shared = 2 * 131_072 * h + 23 * mamba + 6 * attention + 23 * always_on + 53 * h
    assert (
        (model.params.total, model.params.active)
        == (shared + 23 * 128 * expert, shared + 23 * 6 * expert)
        == (31_577_940_288, 3_580_076_352)
    )
    assert (model.num_experts, model.experts_per_token) == (
        128,
        6,
    )  # card: 31.6B total, 3.6B with embeddings


def test_nemotron_h_list_form_and_bad_patterns() -> None:
    cfg = config("nemotron-3-nano-30b-a3b")
    names = {"M": "mamba", "E": "moe", "*": "attention", "-": "mlp"}
    listed = {k: v for k, v in cfg.items() if k != "hybrid_override_pattern"}
    listed["layers_block_type"] = [names[c] for c in cfg["hybrid_override_pattern"]]
    assert (
        model_spec_from_config(listed, "n", "t").groups
        == load_model("nemotron-3-nano-30b-a3b").groups
    )
    with pytest.raises(ValueError, match="hybrid_override_pattern"):
        model_spec_from_config(
            {**cfg, "hybrid_override_pattern": "M*" * 10}, "n", "t"
        )  # 20 of 52 layers
    with pytest.raises(ValueError, match="unknown Nemotron-H layer"):
        model_spec_from_config({**cfg, "hybrid_override_pattern": "X" * 52}, "n", "t")


# --- DeciLM / Nemotron-NAS: per-layer heads, no-op attention ------------------------------


def test_decilm_super_49b_skips_no_op_attention() -> None:
    blocks = config("llama-3.3-nemotron-super-49b")["block_configs"]
    assert sum(not b["attention"]["no_op"] for b in blocks) == 49
    assert shapes("llama-3.3-nemotron-super-49b") == [
        ("full", 49, 8, 128, None)
    ]  # 64 heads / 8 per group
    assert (
        load_model("llama-3.3-nemotron-super-49b").kv_bytes_per_token(BF16)
        == 49 * 2 * 8 * 128 * 2
        == 200_704
    )


def test_decilm_ffn_widths_and_param_count() -> None:
    # 2/3 x ffn_mult x 8192, rounded up to a multiple of 256
    assert [decilm_ffn_width(m, 8192) for m in (5.25, 2.625, 1.3125, 1.0, 0.5, 3.28125)] == [
        28_672,
        14_336,
        7_168,
        5_632,
        2_816,
        17_920,
    ]
    h, blocks = 8192, config("llama-3.3-nemotron-super-49b")["block_configs"]
    attention = 2 * h * 64 * 128 + 2 * h * 8 * 128
    total = 2 * 128_256 * h + h  # untied embedding, LM head, final norm
    for b in blocks:  # a norm only in front of a sublayer that exists
        if not b["attention"]["no_op"]:
            total += attention + h
        total += 3 * h * decilm_ffn_width(b["ffn"]["ffn_mult"], h) + h
    params = load_model("llama-3.3-nemotron-super-49b").params
    assert params.total == total == 49_867_145_216  # HF page: 49.9B


def test_decilm_layers_with_their_own_kv_heads_form_their_own_groups() -> None:
    def block(group: int | None, mult: float = 1.0) -> dict[str, Any]:
        return {
            "attention": {"n_heads_in_group": group, "no_op": group is None},
            "ffn": {"ffn_mult": mult},
        }

    cfg = {
        "model_type": "nemotron-nas",
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "vocab_size": 100,
        "block_configs": [block(2), block(4), block(None), block(2)],
    }
    spec = model_spec_from_config(cfg, "d", "t")
    assert [(g.kind, g.num_layers, g.num_kv_heads) for g in spec.groups] == [
        ("full", 2, 4),
        ("full", 1, 2),
    ]
    assert spec.kv_bytes_per_token(BF16) == (2 * 4 + 1 * 2) * 2 * 8 * 2
    bad = {**cfg, "block_configs": [block(3)] * 4}
    with pytest.raises(ValueError, match="n_heads_in_group"):
        model_spec_from_config(bad, "d", "t")
    linear = [{"attention": {"replace_with_linear": True}, "ffn": {"ffn_mult": 1.0}}] * 4
    with pytest.raises(ValueError, match="linear"):
        model_spec_from_config({**cfg, "block_configs": linear}, "d", "t")


# --- Llama-3.2-90B-Vision: cross-attention KV of the image, apart from per-token KV --------


def test_mllama_cross_attention_layers_hold_image_kv_not_token_kv() -> None:
    model = load_model("llama-3.2-90b-vision-instruct")
    assert shapes("llama-3.2-90b-vision-instruct") == [("full", 80, 8, 128, None)]
    assert model.kv_bytes_per_token(BF16) == 80 * 2 * 8 * 128 * 2 == 327_680
    (cross,) = model.cross_groups
    assert (cross.kind, cross.num_layers, cross.num_kv_heads, cross.head_dim) == (
        "cross",
        20,
        8,
        128,
    )
    # One image at 4 tiles of (560 / 14)^2 patches + a class token: 4 x 1,601 = 6,404 encoder
    # tokens,
    # each with K and V in all 20 cross layers: 20 x 6,404 x 2 x 8 x 128 x 2 B = 500.3 MiB.
    assert model.encoder_tokens_per_image == 4 * ((560 // 14) ** 2 + 1) == 6_404
    assert model.cross_kv_bytes_per_image(BF16) == 20 * 6_404 * 2 * 8 * 128 * 2 == 524_615_680
    assert (
        model.cross_kv_bytes_per_image(FP8, tp=8) == 20 * 6_404 * 2 * 1 * 128 * 1
    )  # a KV head per rank
    assert model.kv_kind == "GQA+cross"
    assert (
        model.kv_bytes(1_000, BF16, respect_windows=True) == 1_000 * 327_680
    )  # no image: no cross KV


def test_mllama_params_text_layers_and_vision_tower() -> None:
    h, kv_width, inter = 8192, 8 * 128, 28_672
    attention = 2 * h * h + 2 * h * kv_width
    self_layer = attention + 3 * h * inter + 2 * h
    cross_layer = self_layer + 2 * 128 + 2  # q_norm, k_norm and the two tanh gates
    text = (
        (128_256 + 8) * h + 128_256 * h + 80 * self_layer + 20 * cross_layer + h
    )  # +8 embedding rows
    d, i, patches, rows = 1280, 5120, 40 * 40 + 1, 8 + 1  # 8 supported aspect ratios + 1
    block = 2 * 2 * d + 4 * d * d + (d * i + i) + (i * d + d)
    tower = (
        3 * 14 * 14 * d
        + d  # patch conv (no bias), class embedding
        + 1
        + patches * d
        + rows * 4 * patches * d  # gated position table, tile-position table
        + 2 * (rows * 4 * d + 1)  # pre / post tile tables with gates
        + 2 * 2 * d
        + 32 * block
        + 8 * (block + 2)  # pre / post LayerNorm, local + gated global encoders
        + 7680 * h
        + h
    )  # projector with bias
    params = load_model("llama-3.2-90b-vision-instruct").params
    assert (params.text_total, params.vision) == (text, tower)
    assert params.total / 1e9 == pytest.approx(88.6, abs=0.05)  # HF page: 88.6B


def test_mllama_null_cross_layers_mean_the_class_default() -> None:
    cfg = {
        "model_type": "mllama",
        "text_config": {"model_type": "mllama_text_model", "cross_attention_layers": None},
    }
    spec = model_spec_from_config(
        cfg, "m", "t"
    )  # MllamaTextConfig: the 11B shape, cross layers 3, 8, ..., 38
    assert [(g.kind, g.num_layers) for g in spec.groups] == [("full", 32)]
    assert [(g.kind, g.num_layers) for g in spec.cross_groups] == [("cross", 8)]


def test_deepseek_v4_is_refused_rather_than_misread() -> None:
    # Without compress_ratios support it would read as one 512-wide KV head per layer, all sliding.
    cfg = {
        "model_type": "deepseek_v4",
        "hidden_size": 4096,
        "num_hidden_layers": 43,
        "num_attention_heads": 64,
        "num_key_value_heads": 1,
        "head_dim": 512,
        "vocab_size": 129_280,
        "sliding_window": 128,
        "compress_ratios": [0, 0] + [4, 128] * 20 + [4, 0],
    }
    with pytest.raises(ValueError, match="DeepSeek-V4"):
        model_spec_from_config(cfg, "v4", "t")
