"""Mixed-precision checkpoints (per-layer quantization configs) sized by hand and against the
shipped configs."""

from __future__ import annotations

import pytest
from checkpoint_helpers import quant, spec

from kvplan.spec.resolve import load_model

CONFIGS = __import__("pathlib").Path(__file__).parent / "data" / "configs"
NV4, FP8 = {"quant_algo": "W4A16_NVFP4", "group_size": 16}, {"quant_algo": "FP8"}
MIXED = {
    "quant_method": "modelopt",
    "quant_algo": "MIXED_PRECISION",
    "ignore": ["mtp*"],
    "quantized_layers": {
        **{f"model.layers.0.self_attn.{p}": FP8 for p in ("q_proj", "k_proj", "v_proj", "o_proj")},
        **{
            f"model.layers.{i}.mlp.{p}": NV4
            for i in (0, 1)
            for p in ("gate_proj", "up_proj", "down_proj")
        },
        "lm_head": NV4,
    },
}


def test_mixed_precision_bytes_by_hand() -> None:
    # layer 0 attention FP8: 41,943,040 x 1 B = 41,943,040; layer 1 attention not listed, so
    # 16 bit (vLLM: UnquantizedLinearMethod): 41,943,040 x 2 = 83,886,080; both MLPs NVFP4
    # (4 + 8/16 = 4.5 bits): 270,532,608 x 4.5 / 8 = 152,174,592; lm_head NVFP4: 131,072,000 x
    # 0.5625 = 73,728,000; embedding 131,072,000 x 2 = 262,144,000; norms 20,480 x 2 = 40,960.
    # Sum: 613,916,672 B.
    model = spec(MIXED)
    assert model.weight_bytes() == pytest.approx(613_916_672, abs=1)
    assert model.weight_format_name() == "mixed-nvfp4+fp8" and model.weight_dtype == "nvfp4"
    assert model.checkpoint_quant.mixed == (
        ("attention", "fp8", 0.5),
        ("dense", "nvfp4", 1.0),
        ("lm_head", "nvfp4", 1.0),
    )
    # all-FP8 attention costs what a 0.3043 share of 16 bit beside NVFP4 does: 2k + 0.5625 (1 - k) =
    # 1
    layers = {k: v for k, v in MIXED["quantized_layers"].items() if "mlp" in k}
    fp8_only = quant({**MIXED, "quantized_layers": {k: FP8 for k in layers}})
    assert (
        fp8_only.label == "mixed-fp8" and fp8_only.dtype == "fp8" and fp8_only.attention_kept == 1.0
    )


def test_mixed_precision_rejects_what_it_cannot_size() -> None:
    with pytest.raises(ValueError, match="quantized_layers"):
        quant({**MIXED, "quantized_layers": {}})
    with pytest.raises(ValueError, match="INT4_AWQ"):
        quant(
            {
                **MIXED,
                "quantized_layers": {"model.layers.0.mlp.up_proj": {"quant_algo": "INT4_AWQ"}},
            }
        )


def _by_role(model) -> float:
    # weight bytes worked from the role counts: attention all FP8 (1 B), the MLPs / shared
    # experts / routed experts and the LM head NVFP4 (0.5625 B), embedding, norms, routers and
    # the vision tower (not in quantized_layers) 16 bit
    p = model.params
    return (
        p.attention
        + 0.5625 * (p.dense_mlp - p.routers + p.experts_total + p.lm_head)
        + 2 * (p.embedding + p.other + p.routers + p.vision)
    )


@pytest.mark.parametrize(
    ("file", "low", "high", "kind"),
    [
        ("nvidia--Qwen3.6-27B-NVFP4_config.json", 26.5e9, 28.0e9, "GQA+linear"),
        ("nvidia--Qwen3.6-35B-A3B-NVFP4_config.json", 34.5e9, 36.0e9, "GQA+linear"),
    ],
)
def test_real_mixed_precision_checkpoints(file: str, low: float, high: float, kind: str) -> None:
    model = load_model(str(CONFIGS / file))
    assert low < model.params.total < high and model.kv_kind == kind
    assert model.weight_format_name() == "mixed-nvfp4+fp8"
    assert model.weight_bytes() == pytest.approx(_by_role(model), rel=1e-12)
    q = model.checkpoint_quant
    assert q.lm_head_quantized and not q.vision_quantized and ("attention", "fp8", 1.0) in q.mixed
    # the legacy hf_quant_config.json sibling ({"quantization": {...}}) reads the same
    sibling = __import__("json").loads(
        (CONFIGS / file.replace("_config", "_hf_quant_config")).read_text()
    )
    assert quant(sibling, model.num_layers, vision_config={}) == q


def test_real_mixed_precision_weight_bytes() -> None:
    # Qwen3.6-27B: embedding 1,271,398,400 x 2 + lm_head 1,271,398,400 x 0.5625 + attention
    # 7,239,780,864 x 1 + MLP 17,112,760,320 x 0.5625 + norms 660,480 x 2 + vision 460,730,096 x 2
    # = 2,542,796,800 + 715,161,600 + 7,239,780,864 + 9,625,927,680 + 1,320,960 + 921,460,192
    # = 21,046,448,096 B (19.60 GiB)
    model = load_model(str(CONFIGS / "nvidia--Qwen3.6-27B-NVFP4_config.json"))
    assert model.weight_bytes() == pytest.approx(21_046_448_096, abs=2)
