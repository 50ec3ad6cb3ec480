"""KV formats and per-token byte sizes, pinned to figures derived by hand from configs."""

from __future__ import annotations

import pytest

from kvplan.spec import parse_kv_format
from kvplan.spec.attention_group import FullAttentionSpec, SlidingWindowSpec
from kvplan.spec.resolve import load_model

BF16 = parse_kv_format("bf16")
FP16 = parse_kv_format("fp16")


@pytest.mark.parametrize(
    ("name", "per_token"),
    [
        ("llama-3.1-8b", 32 * 2 * 8 * 128 * 2),  # 131,072
        ("llama-3.1-70b", 80 * 2 * 8 * 128 * 2),  # 327,680
        ("llama-3.1-405b", 126 * 2 * 8 * 128 * 2),  # 516,096
        ("llama-2-7b", 32 * 2 * 32 * 128 * 2),  # 524,288 (MHA)
        ("mixtral-8x7b", 131_072),
        ("qwen3-8b", 36 * 2 * 8 * 128 * 2),  # 147,456
        ("deepseek-v3", 61 * (512 + 64) * 2),  # 70,272: one MLA latent, no K/V pair
        ("gpt-oss-120b", 36 * 2 * 8 * 64 * 2),  # 73,728 with every layer at full length
    ],
)
def test_kv_bytes_per_token_matches_hand_derivation(name: str, per_token: int) -> None:
    assert load_model(name).kv_bytes_per_token(BF16) == per_token


def test_llama_70b_fp16_at_40000_tokens() -> None:
    model = load_model("llama-3.1-70b")
    assert model.kv_bytes_per_token(FP16) == 327_680
    assert model.kv_bytes(40_000, FP16, respect_windows=False) == 13_107_200_000


def test_gpt_oss_ideal_size_respects_the_128_token_window() -> None:
    model = load_model("gpt-oss-120b")
    per_layer = 2 * 8 * 64 * 2  # 2,048 B per token per layer
    full = model.kv_bytes(8192, BF16, respect_windows=False)
    ideal = model.kv_bytes(8192, BF16, respect_windows=True)
    assert full == 36 * per_layer * 8192 == 603_979_776
    assert ideal == 18 * per_layer * 8192 + 18 * per_layer * 128 == 306_708_480
    assert model.kv_bytes(100, BF16, respect_windows=True) == model.kv_bytes(
        100, BF16, respect_windows=False
    )


@pytest.mark.parametrize(
    ("fmt", "bytes_per_token_head"),
    [
        ("fp16", 512),
        ("bf16", 512),
        ("fp32", 1024),
        ("fp8", 256),
        ("fp8-e5m2", 256),
        ("int8", 264),  # vLLM: 128 B + one fp32 scale, for K and for V
        ("int4", 136),  # 64 B + 4 B, twice
        ("int4-g32", 2 * (64 + 4 * 4)),  # four fp32 group scales per 128-wide vector
        ("int2-g32", 2 * (32 + 4 * 4)),
        ("int8-tensor", 256),
    ],
)
def test_kv_format_bytes_at_head_dim_128(fmt: str, bytes_per_token_head: int) -> None:
    assert 2 * parse_kv_format(fmt).bytes_per_vector(128) == bytes_per_token_head


def test_fp8_halves_and_int4_is_136_of_512() -> None:
    model = load_model("llama-3.1-70b")
    fp16 = model.kv_bytes_per_token(FP16)
    assert model.kv_bytes_per_token(parse_kv_format("fp8")) * 2 == fp16
    assert model.kv_bytes_per_token(parse_kv_format("int4")) == fp16 * 136 / 512


def test_auto_kv_dtype_follows_the_checkpoint() -> None:
    assert parse_kv_format("auto", load_model("llama-2-7b")).name == "fp16"
    assert parse_kv_format("auto", load_model("llama-3.1-8b")).name == "bf16"


@pytest.mark.parametrize("bad", ["fp6", "int3", "int4-g0", "", "float8"])
def test_unknown_kv_formats_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_kv_format(bad)


def test_tensor_parallel_shards_kv_heads_and_replicates_mla() -> None:
    llama = load_model("llama-3.1-70b")
    assert llama.kv_bytes_per_token(BF16, tp=2) == 327_680 / 2
    assert (
        llama.kv_bytes_per_token(BF16, tp=16) == 327_680 / 8
    )  # 8 KV heads: one per rank, replicated
    deepseek = load_model("deepseek-v3")
    assert deepseek.kv_bytes_per_token(BF16, tp=8) == 70_272


def test_attention_group_validation() -> None:
    with pytest.raises(ValueError):
        SlidingWindowSpec(4, 8, 128, window=None)
    with pytest.raises(ValueError):
        FullAttentionSpec(0, 8, 128)


def test_vllm_spellings_of_kv_dtypes_are_the_same_formats() -> None:
    """vLLM's --kv-cache-dtype and its logs write fp8_e4m3 / fp8_e5m2."""
    from kvplan.spec import parse_kv_format

    assert parse_kv_format("fp8_e5m2") == parse_kv_format("fp8-e5m2")
    assert parse_kv_format("fp8_e4m3") == parse_kv_format("fp8")
