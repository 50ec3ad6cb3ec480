"""`kvplan estimate` against lengths the engine refuses, the decode roofline under an eviction
budget, and FP8 weights among the ways to fit; figures derived by hand from the configs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hardening_helpers import fails_cleanly, invoke

from kvplan.sizing.capacity import PlanInputs, plan
from kvplan.spec import parse_kv_format
from kvplan.spec.max_len import derived_max_len
from kvplan.spec.resolve import load_gpu, load_model
from kvplan.spec.roofline import Roofline
from kvplan.spec.setting_error import SettingError

LLAMA_8B_MAX = 131_072  # max_position_embeddings; llama3 RoPE scaling is already in it
# Llama-3.1-8B: 32 layers x (K and V) x 8 KV heads x 128 dims x 2 bytes (bf16)
LLAMA_8B_KV_BYTES_PER_TOKEN = 32 * 2 * 8 * 128 * 2
LLAMA_8B_PARAMS = 8_030_261_248  # the published parameter count
H100_BYTES_PER_S = 3.35e12  # H100 SXM HBM3


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")


# --- the longest max_model_len, as vLLM derives it --------------------------------------------


@pytest.mark.parametrize(
    ("config", "most"),
    [
        (
            {
                "max_position_embeddings": 131072,
                "rope_scaling": {"rope_type": "llama3", "factor": 8.0},
            },
            131072,
        ),
        (
            {"max_position_embeddings": 16384, "rope_scaling": {"type": "linear", "factor": 4.0}},
            65536,
        ),
        (
            {
                "max_position_embeddings": 163840,
                "rope_scaling": {
                    "type": "yarn",
                    "factor": 40,
                    "original_max_position_embeddings": 4096,
                },
            },
            163840,
        ),
        (
            {
                "max_position_embeddings": 32768,
                "rope_scaling": {"rope_type": "longrope", "factor": 4},
            },
            32768,
        ),
        ({"max_position_embeddings": 2048, "n_positions": 1024}, 1024),  # the smallest key
        ({"max_position_embeddings": 2048, "model_max_length": 4096}, 4096),  # vLLM allows up to it
        (
            {
                "model_type": "gemma3_text",
                "max_position_embeddings": 131072,
                "rope_scaling": {"rope_type": "linear", "factor": 8.0},
            },
            131072,
        ),
        (
            {  # transformers v5: rope parameters per layer type, one factor for all
                "max_position_embeddings": 8192,
                "rope_parameters": {
                    "full_attention": {"rope_type": "linear", "factor": 2.0},
                    "sliding_attention": {"rope_type": "default"},
                },
            },
            16384,
        ),
        (
            {
                "max_position_embeddings": 4096,
                "rope_scaling": {"rope_type": "linear", "factor": "x"},
            },
            4096,
        ),
        (
            {
                "max_position_embeddings": 4096,
                "rope_scaling": {"rope_type": "linear", "factor": 1e300},
            },
            2**62,
        ),
        ({"hidden_size": 64}, 0),
    ],
)
def test_the_derived_maximum_follows_vllm(config: dict[str, Any], most: int) -> None:
    assert derived_max_len(config) == most


def test_profiles_carry_the_derived_maximum() -> None:
    assert load_model("llama-3.1-8b").derived_max_model_len == LLAMA_8B_MAX
    assert load_model("deepseek-coder-6.7b-instruct").derived_max_model_len == 16384 * 4


def test_a_context_above_the_model_maximum_is_refused(tmp_path: Path) -> None:
    # the setting and its value, the model's maximum, and the fix: a length at most that
    line = fails_cleanly(
        ["estimate", "llama-3.1-8b", "--context", "1000000"], tmp_path, "131,072", "at most 131072"
    )
    assert line.startswith("error: --context 1,000,000 "), line
    accepted = invoke(["estimate", "llama-3.1-8b", "--context", str(LLAMA_8B_MAX), "--json"])
    assert accepted.exit_code == 0, accepted.output


def test_bench_and_a_context_sweep_refuse_it_too(tmp_path: Path) -> None:
    line = fails_cleanly(
        [
            "bench",
            "--max-model-len",
            "200000",
            "--num-requests",
            "5",
            "--out",
            tmp_path / "r.jsonl",
        ],
        tmp_path,
    )
    assert line.startswith("error: --max-model-len 200,000 ") and "131,072" in line
    line = fails_cleanly(["estimate", "llama-3.1-8b", "--sweep", "context=64k..1m"], tmp_path)
    assert line.startswith("error: --sweep context 1,048,576 ") and "131,072" in line


def test_the_library_refuses_it_by_the_setting() -> None:
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-80gb")
    with pytest.raises(SettingError) as err:
        PlanInputs(model, gpu, context=LLAMA_8B_MAX + 1)
    assert err.value.settings == ("context",)


# --- the decode roofline under --kv-budget ---------------------------------------------------


def test_a_decode_step_reads_only_the_kept_tokens() -> None:
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-80gb")
    roof = Roofline(model, gpu, 1, parse_kv_format("bf16"), kv_budget=1024)
    weights = 2 * LLAMA_8B_PARAMS  # bf16, every weight read once per step
    kept = 1024 * LLAMA_8B_KV_BYTES_PER_TOKEN  # 134,217,728 bytes
    assert roof.kv_read_bytes(8192, kept=True) == kept == 134_217_728
    assert roof.kv_read_bytes(8192) == 8192 * LLAMA_8B_KV_BYTES_PER_TOKEN  # prefill: all of it
    assert roof.decode_step_time(1, 8192) == pytest.approx((weights + kept) / H100_BYTES_PER_S)
    assert roof.decode_step_time(1, 512) == pytest.approx(
        (weights + 512 * LLAMA_8B_KV_BYTES_PER_TOKEN) / H100_BYTES_PER_S
    )  # below the budget every token is kept


def test_the_estimate_table_shows_the_budgeted_step() -> None:
    args = ["estimate", "llama-3.1-8b", "--gpu", "h100-80gb", "--context", "8192"]
    full = invoke(args).stdout
    budgeted = invoke([*args, "--kv-budget", "1024"]).stdout
    # batch 1: (16,060,522,496 + 1,073,741,824) B / 3.35 TB/s = 5.11 ms without the budget,
    # (16,060,522,496 + 134,217,728) B / 3.35 TB/s = 4.83 ms (207 tokens/s) with it
    assert _row(full, "1") == ["1", "5.11", "196", "memory"]
    assert _row(budgeted, "1") == ["1", "4.83", "207", "memory"]
    assert "Decode roofline at 8,192 tokens, 1,024 kept (--kv-budget)" in " ".join(budgeted.split())


def _row(text: str, batch: str) -> list[str]:
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip("│ ").split("│")]
        if cells and cells[0] == batch and len(cells) == 4:
            return cells
    raise AssertionError(f"no roofline row for batch {batch} in:\n{text}")


# --- FP8 weights among the suggestions -------------------------------------------------------


def test_fp8_weights_are_suggested_when_they_make_it_fit() -> None:
    model, gpu = load_model("llama-3.1-70b"), load_gpu("h100-80gb")
    inputs = PlanInputs(model, gpu, tp=2, context=8192, batch=16)
    result = plan(inputs)
    # Llama-3.1-70B at TP 2: 80 layers x (K and V) x 8 KV heads x 128 dims x 2 bytes / 2 GPUs
    per_token = 80 * 2 * 8 * 128 * 2 // 2
    needed = 16 * 8192 * per_token  # 20 GiB of KV per GPU
    assert needed == 20 * 2**30 and result.kv_pool_bytes < needed / 2  # FP8 KV alone is short
    fp8 = plan(replace(inputs, weight_dtype="fp8"), suggest=False)
    pool = fp8.usable_bytes - fp8.weight_bytes_per_gpu - fp8.reserve_bytes
    assert pool > needed  # the weights FP8 frees make room for the batch
    tokens = int(pool // (per_token * 16)) * 16
    assert result.verdict == "kv-does-not-fit"
    assert "FP8 KV cache (--kv-dtype fp8): still does not fit, 74,560 tokens of KV cache" in (
        result.suggestions
    )
    assert f"FP8 weights (--weight-dtype fp8): fits, {tokens:,} tokens of KV cache" in (
        result.suggestions
    )
    assert tokens == 246_176


def test_no_fp8_weights_suggestion_where_they_would_not_fit_or_are_fp8() -> None:
    model, gpu = load_model("llama-3.1-8b"), load_gpu("l4")
    long = plan(PlanInputs(model, gpu, context=131072, batch=64))
    assert long.verdict == "kv-does-not-fit"
    assert not any(tip.startswith("FP8 weights") for tip in long.suggestions)
    fp8 = plan(
        PlanInputs(model, load_gpu("h100-80gb"), context=131072, batch=64, weight_dtype="fp8")
    )
    assert not any(tip.startswith("FP8 weights") for tip in fp8.suggestions)
