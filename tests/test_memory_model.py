"""The engine startup memory model, checked against figures derived by hand."""

from __future__ import annotations

import math
import tomllib

import pytest

from kvplan import GIB
from kvplan.engines.memory_model import (
    EngineSettings,
    activation_elements_per_token,
    load_memory_fit,
    predict_memory,
)
from kvplan.sizing.capacity import PlanInputs, engine_memory, plan
from kvplan.spec import parse_kv_format
from kvplan.spec.profiles import profiles_dir
from kvplan.spec.resolve import load_gpu, load_model


def test_fixture_llama3_8b_a100_40gb_v0_by_hand() -> None:
    """vLLM issue #12330's setup (Llama-3-8B shapes, A100-40GB, max_model_len 8192, v0 defaults)."""
    fit = load_memory_fit()
    model, gpu = load_model("llama-3.1-8b"), load_gpu("a100-40gb")
    weights = 8_030_261_248 * 2
    profile = predict_memory(
        model,
        gpu,
        tp=1,
        utilization=0.9,
        max_model_len=8192,
        weight_bytes=weights,
        settings=EngineSettings(engine="vllm-v0"),
    )
    assert (
        profile.total_bytes == 39.50 * GIB
    )  # the driver total the log printed, not the datasheet's 40
    assert profile.usable_bytes == pytest.approx(35.55 * GIB)
    # one layer's widest point per token: residual + normed hidden (2 x 4096) + gate, up, act (3 x
    # 14336)
    assert activation_elements_per_token(model, 1) == 2 * 4096 + 3 * 14336 == 51_200
    forward = fit.activation_scale * 8192 * 51_200 * 2
    sampler = (
        256 * 128_256 * 24
    )  # v0 samples 256 rows; fp32 logits, sorted values + int64 indices, probs, logprobs
    assert (profile.batched_tokens, profile.sampler_rows) == (8192, 256)
    assert profile.activation_bytes == pytest.approx(forward + sampler)
    assert profile.non_torch_bytes == pytest.approx(fit.non_torch_gib * GIB)
    assert profile.cuda_graph_bytes == 0  # v0 captures graphs after sizing the KV cache
    kv = 35.55 * GIB - weights - forward - sampler - fit.non_torch_gib * GIB
    assert profile.kv_bytes == pytest.approx(kv)
    result = plan(
        PlanInputs(model, gpu, context=8192, engine="vllm-v0", kv_format=parse_kv_format("bf16"))
    )
    assert result.num_blocks == math.floor(kv / (16 * 131_072))


@pytest.mark.parametrize(
    ("gpu", "tokens", "seqs"),
    [("a100-80gb", 2048, 256), ("l4", 2048, 256), ("h100-80gb", 8192, 1024), ("h200", 8192, 1024)],
)
def test_v1_batching_defaults_follow_vllm(gpu: str, tokens: int, seqs: int) -> None:
    """vLLM's API server: 8192 tokens / 1024 seqs on >= 70 GiB GPUs other than A100, else 2048 /
    256."""
    profile = predict_memory(
        load_model("qwen3-8b"),
        load_gpu(gpu),
        tp=1,
        utilization=0.9,
        max_model_len=32768,
        weight_bytes=16 * GIB,
    )
    assert (profile.batched_tokens, profile.sampler_rows) == (tokens, seqs)
    assert profile.cuda_graph_bytes == pytest.approx(load_memory_fit().cuda_graph_gib * GIB)


def test_v0_profiles_max_model_len_until_chunked_prefill() -> None:
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-80gb")
    v0 = EngineSettings(engine="vllm-v0")
    short = predict_memory(
        model, gpu, tp=1, utilization=0.9, max_model_len=20000, weight_bytes=0, settings=v0
    )
    long = predict_memory(
        model, gpu, tp=1, utilization=0.9, max_model_len=131072, weight_bytes=0, settings=v0
    )
    # above 32K chunked prefill is on, with SchedulerConfig's 512-token budget (vllm/config.py,
    # 0.5.4-0.6.x)
    assert (short.batched_tokens, long.batched_tokens) == (20000, 512)


def test_settings_overrides_and_eager() -> None:
    model, gpu = load_model("qwen3-8b"), load_gpu("h100-80gb")
    settings = EngineSettings(max_num_batched_tokens=4096, max_num_seqs=64, enforce_eager=True)
    profile = predict_memory(
        model, gpu, tp=1, utilization=0.9, max_model_len=4096, weight_bytes=0, settings=settings
    )
    assert (profile.batched_tokens, profile.sampler_rows, profile.cuda_graph_bytes) == (4096, 64, 0)


def test_sglang_keeps_no_activation_reserve() -> None:
    profile = predict_memory(
        load_model("qwen3-8b"),
        load_gpu("h100-80gb"),
        tp=1,
        utilization=0.88,
        max_model_len=4096,
        weight_bytes=16 * GIB,
        settings=EngineSettings(engine="sglang"),
    )
    assert profile.activation_bytes == profile.cuda_graph_bytes == 0
    # profile_max_num_token: (memory free once NCCL started) x mem_fraction_static - weights
    assert profile.kv_bytes == pytest.approx(
        (79.22 * GIB - profile.non_torch_bytes) * 0.88 - 16 * GIB
    )


def test_bad_engine_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="engine must be one of"):
        EngineSettings(engine="trt-llm")


def test_reserve_and_kv_overrides_still_win() -> None:
    inputs = PlanInputs(
        load_model("llama-3.1-8b"),
        load_gpu("a100-40gb"),
        context=8192,
        reserve_bytes=9.47 * GIB,
        gpu_memory_utilization=0.9,
    )  # the #12330 log's setting
    result = plan(inputs)
    assert result.reserve_bytes == 9.47 * GIB
    assert result.kv_pool_bytes == pytest.approx(35.55 * GIB - 8_030_261_248 * 2 - 9.47 * GIB)
    assert engine_memory(inputs).engine == "vllm-v1"


def test_fit_is_committed_with_residuals() -> None:
    data = tomllib.loads((profiles_dir() / "memory_model.toml").read_text())
    assert set(data["fit"]) >= {"activation_scale", "non_torch_gib", "cuda_graph_gib"}
    assert (
        0.3 < data["fit"]["activation_scale"] < 1.5
    )  # a scale on physical tensor sizes, not a fudge of 10x
    assert data["residuals"], "the fit records its residual on every log"


def test_meta_fp8_recipe_keeps_attention_and_edge_mlps_in_bf16_by_hand() -> None:
    """Llama-3.1-405B-Instruct-FP8's config leaves every self_attn projection, layers 0 and 125's
    MLP and lm_head unconverted; vLLM #6746's log shows 57.75 GiB of weights per worker at TP 8."""
    model = load_model("llama-3.1-405b")
    p = model.params
    attention, mlp, embeddings, norms = (
        71_873_593_344,
        329_772_957_696,
        2 * 2_101_346_304,
        4_145_152,
    )
    assert (p.attention, p.dense_mlp, p.embedding + p.lm_head, p.other) == (
        attention,
        mlp,
        embeddings,
        norms,
    )
    sixteen_bit = attention + mlp * 2 / 126 + embeddings + norms
    expected = sixteen_bit * 2 + mlp * 124 / 126 * 1
    assert model.weight_bytes("fp8-meta") == pytest.approx(expected)
    assert model.weight_bytes("fp8-meta") / 8 / GIB == pytest.approx(
        57.752, rel=0.02
    )  # the logged figure
    # a plain fp8 checkpoint quantizes attention too, but never the embeddings or LM head
    assert model.weight_bytes("fp8") == pytest.approx((embeddings + norms) * 2 + (attention + mlp))


def test_checkpoint_names_pick_the_meta_recipe_only_for_metas_own_fp8() -> None:
    from kvplan.logs.log_setup import weight_dtype_hint

    assert weight_dtype_hint("/models/Meta-Llama-3.1-405B-Instruct-FP8", None) == "fp8-meta"
    assert weight_dtype_hint("meta-llama/Llama-3.1-405B-Instruct-FP8", None) == "fp8-meta"
    assert weight_dtype_hint("neuralmagic/Meta-Llama-3.1-405B-Instruct-FP8", None) == "fp8"
    assert weight_dtype_hint("RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8", None) == "fp8"
    assert weight_dtype_hint("Qwen/Qwen3-235B-A22B-FP8", None) == "fp8"


@pytest.mark.parametrize(
    ("version", "tokens"), [((0, 5, 3), 131_072), ((0, 5, 4), 512), (None, 512)]
)
def test_v0_profiles_the_whole_max_model_len_before_long_context_chunked_prefill(
    version, tokens
) -> None:
    """vLLM PR #6666 (in 0.5.4) turned chunked prefill on above 32K; before it the profile batched
    max_model_len."""
    profile = predict_memory(
        load_model("llama-3.1-8b"),
        load_gpu("h100-80gb"),
        tp=1,
        utilization=0.9,
        max_model_len=131_072,
        weight_bytes=16 * GIB,
        settings=EngineSettings(engine="vllm-v0", version=version),
    )
    assert profile.batched_tokens == tokens


def test_release_from_version_text_or_log_date() -> None:
    from kvplan.engines.engine_releases import parse_version, version_on

    assert parse_version("0.9.1.dev705+g01220ce89") == (0, 9, 1)
    assert parse_version("v0.6.4.post1") == (0, 6, 4)
    assert parse_version("main, Jan 2025") is None
    assert version_on("2024-07-24") == (0, 5, 3)  # Llama-3.1 launch week: before 0.5.4 (2024-08-05)
    assert version_on("2024-08-05") == (0, 5, 4)  # released that day (PyPI upload date)
    assert version_on("2025-10-31") == (0, 11, 0)  # 0.11.1 came on 2025-11-19
    assert version_on("2020-01-01") is None and version_on(None) is None


def _scored_logs() -> list[dict]:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "vllm_logs.py"
    spec = importlib.util.spec_from_file_location("vllm_logs_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    if not bench.LOGS.exists():
        pytest.skip("../shared/data is absent")
    bench.ROWS = [(record, *bench.setup_for(record)) for record in bench.records()]
    return [r for r in bench.evaluate(bench.ROWS, load_memory_fit()) if r["id"] != "issue12330"]


def test_every_shipped_log_is_scored_or_says_why_not() -> None:
    """No log is left out by id: each is scored (full chain from model, GPU and settings, or
    the engine's arithmetic from the KV memory it logged), or its status names what it lacks."""
    results = _scored_logs()
    assert len(results) == 30
    for row in results:
        assert row["status"].startswith(
            ("scored", "not sizeable: ", "no KV capacity figure printed")
        ), row


def test_the_engines_kv_arithmetic_reproduces_dense_logs() -> None:
    """From the KV memory a log printed to the tokens or blocks it printed, for dense
    full-attention models: vLLM's own arithmetic, so exact up to the log's 2-decimal GiB."""
    from kvplan.spec.resolve import load_model

    exact = [
        r
        for r in _scored_logs()
        if r["kv_arith_error"] is not None
        and not load_model(r["model"]).has_windows
        and not load_model(r["model"]).state_bytes_per_seq()
    ]
    assert len(exact) >= 5
    assert sum(abs(r["kv_arith_error"]) <= 0.5 for r in exact) >= 5, [
        (r["id"], r["kv_arith_error"]) for r in exact
    ]


def test_amds_fp8_kv_checkpoint_is_not_metas_recipe() -> None:
    from kvplan.logs.log_setup import weight_dtype_hint

    assert weight_dtype_hint("amd/Llama-3.1-405B-Instruct-FP8-KV", "fp8") == "fp8"
    assert weight_dtype_hint("meta-llama/Llama-3.1-405B-FP8", "fp8") == "fp8-meta"
