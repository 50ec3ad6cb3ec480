"""Checkpoint weight formats from quantization_config (spec/checkpoint_quant.py).

Every config here is constructed for the test (the quantization_config forms the quantizers
write, on a small Llama shape); the byte figures are worked by hand in the comments.
"""

from __future__ import annotations

import pytest
from checkpoint_helpers import AWQ, GPTQ, KEPT, LINEAR, LLAMA, quant, spec

from kvplan.spec.checkpoint_quant import checkpoint_quant, kept_modules
from kvplan.spec.resolve import load_model


def test_a_4096_square_gptq_g128_layer() -> None:
    # qweight 4096*4096*4/8 = 8,388,608 B; scales 32 groups x 4096 x 2 B = 262,144 B;
    # qzeros 32 x 4096 x 4/8 = 65,536 B (stored although sym): 8,716,288 B = 4 + 16/128 + 4/128 bits
    q = quant(GPTQ)
    assert q.bits_per_weight(4096) == 4 + 16 / 128 + 4 / 128 == 4.15625
    assert 4096 * 4096 * q.bits_per_weight(4096) / 8 == 8_716_288
    assert q.label == "gptq-int4-g128" and q.dtype == "int4"
    assert quant({**GPTQ, "bits": 8, "group_size": -1}).bits_per_weight(4096) == 8 + (16 + 8) / 4096


def test_gptq_model_bytes_by_hand() -> None:
    model = spec(GPTQ)
    # 354,418,688 x 4.15625 / 8 = 184,131,584 B of quantized linears + 262,164,480 x 2 B
    assert model.weight_bytes() == 184_131_584 + 524_328_960
    assert model.weight_format_name() == "gptq-int4-g128"
    assert model.weight_dtype == "int4"  # what the roofline and --weight-dtype comparisons read


def test_awq_zeros_follow_zero_point() -> None:
    assert quant(AWQ).bits_per_weight(4096) == 4.15625
    assert quant({**AWQ, "zero_point": False}).bits_per_weight(4096) == 4.125
    assert spec(AWQ).weight_format_name() == "awq-int4-g128"
    kept = quant({**AWQ, "modules_to_not_convert": ["model.layers.0.mlp"]})
    assert (kept.attention_kept, kept.dense_kept, kept.experts_kept) == (0.0, 0.5, 0.5)
    # layer 0's MLP (135,266,304) back to 16 bit
    mlp0 = 135_266_304
    assert (
        spec({**AWQ, "modules_to_not_convert": ["model.layers.0.mlp"]}).weight_bytes()
        == (LINEAR - mlp0) * 4.15625 / 8 + (KEPT + mlp0) * 2
    )


@pytest.mark.parametrize(
    ("packing", "sym", "bits"),
    [
        ("auto_round:auto_gptq", True, 4.15625),  # GPTQ layout: qzeros whatever sym
        ("auto_round:auto_awq", True, 4.125),  # AWQ layout: zero_point = not sym
        ("auto_round:auto_awq", False, 4.15625),
    ],
)
def test_auto_round_layout_follows_packing_format(packing: str, sym: bool, bits: float) -> None:
    for method in ("auto-round", "intel/auto-round"):
        q = quant(
            {
                "quant_method": method,
                "bits": 4,
                "group_size": 128,
                "sym": sym,
                "packing_format": packing,
            }
        )
        assert q.bits_per_weight(4096) == bits


def test_fp8_block_scales() -> None:
    # 4096 x 4096 fp8: 16,777,216 B + 32 x 32 blocks x 4 B fp32 scale = 16,781,312 B
    q = quant(
        {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}
    )
    assert 4096 * 4096 * q.bits_per_weight(4096) / 8 == 16_781_312
    assert q.label == "fp8-block128"
    assert quant({"quant_method": "fp8"}).bits_per_weight(4096) == 8  # per-tensor scale: negligible


def test_compressed_tensors_forms() -> None:
    def ct(weights: dict, fmt: str, **extra):
        return quant(
            {
                "quant_method": "compressed-tensors",
                "format": fmt,
                **extra,
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
            }
        )

    w4 = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}
    assert ct(w4, "pack-quantized").bits_per_weight(4096) == 4 + 16 / 128  # bf16 scales, no zeros
    asym = ct({**w4, "symmetric": False}, "pack-quantized")
    assert asym.bits_per_weight(4096) == 4 + 16 / 128 + 4 / 128 and asym.label == "int4-g128-zp"
    assert (
        ct(w4, "naive-quantized").bits_per_weight(4096) == 8 + 16 / 128
    )  # an int8 container per value
    fp8 = ct({"num_bits": 8, "type": "float", "strategy": "channel"}, "float-quantized")
    assert fp8.bits_per_weight(4096) == 8 + 32 / 4096 and fp8.dtype == "fp8"
    block = ct(
        {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]},
        "float-quantized",
    )
    assert block.bits_per_weight(4096) == 8 + 32 / 16384
    nvfp4 = ct(
        {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
        "nvfp4-pack-quantized",
    )
    assert (nvfp4.label, nvfp4.bits_per_weight(4096)) == ("nvfp4", 4.5)  # + fp8 scale per 16
    ignored = ct(w4, "pack-quantized", ignore=["lm_head", "re:.*self_attn.*"])
    assert (ignored.attention_kept, ignored.dense_kept) == (1.0, 0.0)
    mlp_only = quant(
        {
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "config_groups": {"g": {"targets": ["re:.*mlp.*"], "weights": w4}},
        }
    )
    assert (mlp_only.attention_kept, mlp_only.dense_kept) == (1.0, 0.0)


def test_compressed_tensors_quantizes_a_vision_tower_unless_ignored() -> None:
    base = {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {
            "g": {
                "targets": ["Linear"],
                "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
            }
        },
    }
    vision = {"vision_config": {"model_type": "siglip_vision_model"}}
    assert quant({**base, "ignore": ["lm_head"]}, **vision).vision_quantized
    assert not quant(
        {**base, "ignore": ["lm_head", "re:vision_tower.*"]}, **vision
    ).vision_quantized
    assert not quant(GPTQ, **vision).vision_quantized  # GPTQ walks the decoder blocks only


@pytest.mark.parametrize(
    "config",
    [
        {
            "quant_method": "modelopt",
            "quant_algo": "NVFP4",
            "group_size": 16,
            "ignore": ["lm_head"],
        },
        {
            "quantization": {
                "quant_algo": "NVFP4",
                "group_size": 16,
                "exclude_modules": ["lm_head"],
            }
        },  # hf_quant_config.json
    ],
)
def test_modelopt_nvfp4(config: dict) -> None:
    q = quant(config)
    assert (q.label, q.dtype, q.bits_per_weight(4096)) == ("nvfp4", "nvfp4", 4.5)
    assert spec(config).weight_bytes() == LINEAR * 4.5 / 8 + KEPT * 2


def test_bitsandbytes() -> None:
    nf4 = quant(
        {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}
    )
    assert (nf4.label, nf4.bits_per_weight(4096)) == ("bnb-nf4", 4.5)  # fp32 absmax per 64
    dq = quant(
        {
            "quant_method": "bitsandbytes",
            "load_in_4bit": True,
            "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_use_double_quant": True,
        }
    )
    assert dq.bits_per_weight(4096) == 4 + 8 / 64 + 32 / (64 * 256) == 4.126953125
    int8 = quant(
        {"quant_method": "bitsandbytes", "load_in_8bit": True, "llm_int8_skip_modules": ["lm_head"]}
    )
    assert int8.bits_per_weight(4096) == 8 + 32 / 4096


def test_fbgemm_fp8_not_convert_list() -> None:
    # Meta's 405B-FP8 form: every self_attn projection named per layer, the MLPs of the first and
    # last layers
    names = [
        f"model.layers.{i}.self_attn.{p}"
        for i in range(4)
        for p in ("q_proj", "k_proj", "v_proj", "o_proj")
    ]
    q = quant(
        {
            "quant_method": "fbgemm_fp8",
            "modules_to_not_convert": names
            + ["model.layers.0.mlp", "model.layers.3.mlp", "lm_head"],
        },
        layers=4,
    )
    assert (q.attention_kept, q.dense_kept, q.label) == (1.0, 0.5, "fp8-channel")
    assert (
        quant(
            {"quant_method": "fbgemm_fp8", "modules_to_not_convert": names[:2]}, layers=4
        ).attention_kept
        == 0.125
    )


def test_not_convert_patterns() -> None:
    kept = kept_modules(
        [
            "lm_head",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "re:.*self_attn.*",
            "model.layers.1.input_layernorm",
            "re:model.visual.*",
        ],
        4,
    )
    assert kept.roles == {"lm_head", "routers", "embedding", "vision"}
    assert (kept.attention_kept, kept.dense_kept, kept.experts_kept) == (1.0, 0.0, 0.0)
    # a router (also its correction bias) is not the MLP; gate_proj is the dense MLP
    router = kept_modules(
        ["model.layers.0.mlp.gate", "model.layers.0.mlp.gate.e_score_correction_bias"], 4
    )
    assert (router.roles, router.dense_kept) == ({"routers"}, 0.0)
    assert kept_modules(["model.layers.0.mlp.gate_proj"], 4).dense_kept == 0.25


def test_moe_not_convert_forms_of_shipped_checkpoints() -> None:
    # moonshotai/Kimi-K2.5 (compressed-tensors int4 g32): only the routed experts are quantized
    kimi = kept_modules(
        [
            "lm_head",
            "re:.*self_attn.*",
            "re:.*shared_experts.*",
            r"re:.*mlp\.(gate|up|gate_up|down)_proj.*",
        ],
        61,
    )
    assert (kimi.attention_kept, kimi.dense_kept, kimi.experts_kept) == (1.0, 1.0, 0.0)
    # nvidia/Qwen3.5-*-NVFP4 (modelopt): per-layer wildcards over attention and the shared expert
    layers = (
        [f"model.language_model.layers.{i}.linear_attn*" for i in range(3)]
        + ["model.language_model.layers.3.self_attn*"]
        + [f"model.language_model.layers.{i}.mlp.shared_expert*" for i in range(4)]
        + ["model.visual*", "mtp*"]
    )
    qwen = kept_modules(layers, 4)
    assert (qwen.attention_kept, qwen.dense_kept, qwen.experts_kept, qwen.roles) == (
        1.0,
        1.0,
        0.0,
        {"vision"},
    )
    # zai-org/GLM-5-FP8: the indexer's small projection is not the attention
    assert (
        kept_modules(
            ["model.layers.0.self_attn.indexers_proj", "model.layers.0.self_attn.kv_a_layernorm"], 4
        ).attention_kept
        == 0.0
    )


def test_unknown_methods_and_plain_configs_stay_native() -> None:
    assert quant({"quant_method": "hqq"}) is None
    assert checkpoint_quant(LLAMA, 2) is None
    assert spec({"quant_method": "hqq"}).weight_bytes() == (LINEAR + KEPT) * 2


def test_overrides_still_size_as_before() -> None:
    model = spec(GPTQ)
    assert model.weight_bytes("fp8") == KEPT * 2 + LINEAR * 1  # the recipe, not the checkpoint
    assert model.weight_bytes("bf16") == (KEPT + LINEAR) * 2
    assert model.weight_format_name("fp8") == "fp8"


def test_qwen3_30b_a3b_fp8_as_shipped() -> None:
    """Block-wise fp8 [128, 128]: one fp32 scale per block; routers (mlp.gate), norms, embeddings
    and lm_head in bf16 (its modules_to_not_convert). Today's figure (everything but the
    embeddings at 1 byte) moves by the routers and norms' second byte and the scale bytes."""
    model = load_model("qwen3-30b-a3b-fp8")
    p = model.params
    assert model.weight_format_name() == "fp8-block128" and model.weight_dtype == "fp8"
    assert p.routers == 48 * 2048 * 128
    quantized = p.attention + p.dense_mlp - p.routers + p.experts_total
    assert model.weight_bytes() == pytest.approx(
        quantized * (1 + 4 / 16384) + (p.total - quantized) * 2
    )
    before = (p.embedding + p.lm_head) * 2 + (p.total - p.embedding - p.lm_head)
    assert model.weight_bytes() - before == pytest.approx(
        p.routers + p.other + quantized * 4 / 16384
    )
    assert abs(model.weight_bytes() / before - 1) < 1e-3


def test_gpt_oss_20b_as_shipped() -> None:
    """MXFP4 experts (4.25 bits), everything else bf16: the same bytes as before."""
    model = load_model("gpt-oss-20b")
    p = model.params
    assert model.weight_format_name() == "mxfp4-experts+bf16"
    assert model.expert_weight_bits == 4.25 and model.weight_dtype == "bf16"
    assert model.weight_bytes() == pytest.approx(
        p.experts_total * 4.25 / 8 + (p.total - p.experts_total) * 2
    )


# --- ModelOpt MIXED_PRECISION: per-layer algorithms from quantized_layers -------------------
