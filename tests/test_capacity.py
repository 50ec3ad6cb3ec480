"""GPU fit, blocks and concurrency as vLLM computes them; roofline lower bounds."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from kvplan.sizing.capacity import PlanInputs, plan, smallest_tp_for_weights
from kvplan.spec import parse_kv_format
from kvplan.spec.resolve import load_gpu, load_model
from kvplan.spec.roofline import Roofline

GIB = 2**30
MIB = 2**20


def inputs(model: str, gpu: str = "h100-80gb", **kwargs) -> PlanInputs:
    spec = load_model(model)
    kwargs.setdefault("kv_format", parse_kv_format("bf16"))
    return PlanInputs(model=spec, gpu=load_gpu(gpu), **kwargs)


def test_vllm_llama3_8b_on_a100_40gb_report() -> None:
    """vLLM's log for Llama-3-8B on one A100-40GB: 11.12 GiB of KV, 5,691 blocks of 2 MiB,
    'Maximum concurrency for 8192 tokens per request: 11.12x'. Llama-3.1-8B has the same
    KV shape (32 layers x 8 KV heads x 128)."""
    result = plan(inputs("llama-3.1-8b", "a100-40gb", context=8192, kv_cache_bytes=5691 * 2 * MIB))
    assert result.block_bytes == 2 * MIB
    assert result.num_blocks == 5691
    assert round(result.kv_pool_bytes / GIB, 2) == 11.12
    assert result.kv_cache_tokens == 91_056
    assert round(result.max_concurrency, 2) == 11.12
    # The rounded 11.12 GiB budget gives the same answer within 0.05%.
    rounded = plan(inputs("llama-3.1-8b", "a100-40gb", context=8192, kv_cache_bytes=11.12 * GIB))
    assert rounded.num_blocks == pytest.approx(5691, rel=5e-4)


def test_budget_blocks_and_concurrency_by_hand() -> None:
    result = plan(inputs("llama-3.1-8b", "a100-80gb", context=4096, reserve_bytes=2 * GIB))
    # no driver total observed for A100-80GB: datasheet x 0.99; vLLM >= 0.20's default utilization
    # 0.92
    usable = 80 * 0.99 * GIB * 0.92
    weights = 8_030_261_248 * 2
    budget = usable - weights - 2 * GIB
    blocks = math.floor(budget / (16 * 131_072))
    assert result.weight_bytes_per_gpu == weights
    assert result.kv_pool_bytes == pytest.approx(budget)
    assert result.num_blocks == blocks
    assert result.kv_cache_tokens == blocks * 16
    assert result.max_concurrency == pytest.approx(blocks * 16 / 4096)
    assert result.max_batch == blocks * 16 // 4096
    assert result.verdict == "fits"


def test_issue_example_70b_tp2_fp8_32k_batch16() -> None:
    result = plan(
        inputs("llama-3.1-70b", tp=2, kv_format=parse_kv_format("fp8"), context=32768, batch=16)
    )
    assert result.kv_bytes_per_token == 327_680 / 2 / 2  # fp8 halves, TP=2 splits heads
    assert result.seq_bytes == 32768 * 81_920
    assert result.verdict == "kv-does-not-fit"
    largest = result.max_context
    assert 16 * math.ceil(largest / 16) * 16 * 81_920 <= result.allocatable_bytes
    assert 16 * math.ceil((largest + 16) / 16) * 16 * 81_920 > result.allocatable_bytes
    assert any("max-model-len" in tip for tip in result.suggestions)
    assert any(tip.startswith("TP=4") for tip in result.suggestions)


def test_weights_that_do_not_fit_suggest_more_gpus() -> None:
    result = plan(inputs("llama-3.1-70b", context=8192))
    assert result.verdict == "weights-do-not-fit"
    assert smallest_tp_for_weights(result.inputs) == 2
    assert plan(replace(result.inputs, tp=2)).verdict == "fits"


def test_gpt_oss_fits_one_h100_in_mxfp4_and_ideal_allocation_holds_more() -> None:
    base = inputs("gpt-oss-120b", context=131072)
    full, ideal = plan(base), plan(replace(base, respect_windows=True))
    assert full.weight_bytes_per_gpu < 70 * GIB  # 4.25-bit experts: about 65 GB
    assert ideal.max_concurrency > 1.9 * full.max_concurrency  # half the layers keep 128 tokens


def test_hybrid_state_is_paid_per_sequence() -> None:
    result = plan(inputs("qwen3.5-27b", "h200", context=4096, kv_cache_bytes=10 * GIB))
    state = 48 * 3_207_168
    per_seq = state + 4096 * 16 * 2 * 4 * 256 * 2
    assert result.seq_bytes == per_seq
    assert result.max_batch == (10 * GIB) // per_seq


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tp": 3}, "must divide"),
        ({"batch": 0}, "^batch"),
        ({"context": -5}, "^context"),
        ({"gpu_memory_utilization": 1.5}, "utilization"),
        ({"block_size": 0}, "^block_size"),
    ],
)
def test_impossible_inputs_raise(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        inputs("llama-3.1-8b", **kwargs)


def test_decode_roofline_batch1_is_weights_over_bandwidth() -> None:
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-80gb")
    roof = Roofline(model, gpu, 1, parse_kv_format("bf16"))
    expected = (8_030_261_248 * 2 + 1024 * 131_072) / 3.35e12
    assert roof.decode_step_time(1, 1024) == pytest.approx(expected)
    # Large batches become compute bound: 2 x active params FLOPs per token.
    big = roof.decode_step_time(4096, 16)
    assert big >= 4096 * 2 * model.params.matmul_active / 989.4e12


def test_moe_weights_read_grow_with_batch() -> None:
    model = load_model("mixtral-8x7b")
    roof = Roofline(model, load_gpu("h100-80gb"), 1, parse_kv_format("bf16"))
    experts = roof.expert_bytes_per_gpu
    dense = roof.weight_bytes_per_gpu - experts
    assert roof.weight_bytes_read(1) == pytest.approx(dense + experts * 2 / 8)
    assert roof.weight_bytes_read(2) == pytest.approx(dense + experts * (1 - (6 / 8) ** 2))
    assert roof.weight_bytes_read(1000) == pytest.approx(roof.weight_bytes_per_gpu)


def test_prefill_lower_bound_is_flops_over_peak() -> None:
    model, gpu = load_model("llama-3.1-70b"), load_gpu("h100-80gb")
    roof = Roofline(model, gpu, 8, parse_kv_format("bf16"))
    flops = 2 * model.params.matmul_active * 8192 / 8 + roof.attention_flops(8192, 4096)
    assert roof.prefill_time(8192) == pytest.approx(flops / 989.4e12)
