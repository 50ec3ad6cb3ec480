"""vLLM's startup profile by release, and the weights as its kernels hold them, against hand
counts."""

from __future__ import annotations

import pytest

from kvplan.engines.engine_releases import (
    in_flight_batches,
    uses_v2_runner,
    v1_sampler_path,
)
from kvplan.engines.engine_weights import loaded_weight_bytes_per_gpu, mxfp4_expert_bytes_per_gpu
from kvplan.engines.memory_model import (
    ACTIVATION_BYTES,
    EngineSettings,
    activation_elements_per_token,
    dequantized_weight_bytes,
    load_memory_fit,
    predict_memory,
)
from kvplan.engines.serving_engine import (
    SGLangEngine,
    VllmV0Engine,
    VllmV1Engine,
    serving_engine,
)
from kvplan.engines.versions import parse_version
from kvplan.spec.resolve import load_gpu, load_model
from kvplan.spec.server_log import parse_server_log

GIB = 2**30


@pytest.mark.parametrize(
    ("model", "version", "path"),
    [
        ("llama-3.1-8b", (0, 7, 3), None),  # the sampler was not profiled before 0.8.0
        ("llama-3.1-8b", (0, 8, 1), "sort-copy"),
        ("llama-3.1-8b", (0, 8, 3), "sort"),
        ("llama-3.1-8b", (0, 10, 1), "flashinfer"),
        ("llama-3.1-8b", (0, 11, 1), "sort"),
        ("llama-3.1-8b", (0, 20, 0), "triton"),
        ("llama-3.1-8b", (0, 23, 0), "v2"),  # Llama dense, unquantized: V2 from 0.23
        ("qwen2.5-7b-instruct", (0, 23, 0), "triton"),  # qwen2 is not in 0.23's V2 list
        ("qwen2.5-7b-instruct", (0, 25, 0), "v2"),  # every dense model from 0.25
        ("gpt-oss-20b", (0, 25, 0), "triton"),  # MoE stays on V1 until 0.29
        ("gpt-oss-20b", (0, 29, 0), "v2"),
        ("gpt-oss-20b", None, "v2"),  # no version: the newest behaviour
    ],
)
def test_sampler_path_by_release(model: str, version, path) -> None:
    assert v1_sampler_path(load_model(model), version) == path


def test_v2_runner_needs_an_unquantized_listed_model_in_023() -> None:
    assert uses_v2_runner(load_model("qwen3-8b"), (0, 23, 0))
    assert not uses_v2_runner(load_model("qwen3-32b-fp8"), (0, 23, 0))  # a quantized checkpoint


def test_defaults_by_release() -> None:
    v1, v0, sglang = VllmV1Engine(), VllmV0Engine(), SGLangEngine()
    assert v1.default_utilization((0, 19, 0)) == 0.9 and v1.default_utilization((0, 20, 0)) == 0.92
    assert v1.default_utilization(None) == 0.92 and v0.default_utilization(None) == 0.9
    assert sglang.default_utilization(None) == 0.88
    assert (
        in_flight_batches((0, 25, 0)),
        in_flight_batches((0, 26, 0)),
        in_flight_batches(None),
    ) == (1, 2, 2)


def test_v1_activation_is_the_larger_of_forward_and_sampler_by_hand() -> None:
    """Llama-3.1-8B on an H100 (8,192 tokens, 1,024 rows), vLLM 0.11.1 (PyTorch sort, 28 B per
    logit)."""
    fit, model, gpu = load_memory_fit(), load_model("llama-3.1-8b"), load_gpu("h100-80gb")
    settings = EngineSettings(version=(0, 11, 1))
    profile = predict_memory(
        model, gpu, tp=1, utilization=0.9, max_model_len=8192, weight_bytes=0, settings=settings
    )
    forward = fit.activation_scale * 8192 * 51_200 * 2  # 2 x 4096 + 3 x 14336 elements per token
    sampler = (
        1024 * 128_256 * 28 + 8192 * 4096 * 2
    )  # rows x vocab x 28 B, plus the hidden states still held
    assert (profile.batched_tokens, profile.sampler_rows, profile.sampler_path) == (
        8192,
        1024,
        "sort",
    )
    assert profile.activation_bytes == pytest.approx(max(forward, sampler)) and sampler > forward
    assert profile.cuda_graph_bytes == 0  # 0.11 captured graphs after sizing the KV cache
    # 0.29 runs this model on Model Runner V2 (2 B per logit): the forward is then the peak
    newest = predict_memory(model, gpu, tp=1, utilization=0.92, max_model_len=8192, weight_bytes=0)
    assert newest.activation_bytes == pytest.approx(
        max(forward, 1024 * 128_256 * 2 + 8192 * 4096 * 2)
    )
    assert newest.cuda_graph_bytes == pytest.approx(fit.cuda_graph_gib * GIB)


def test_a_log_that_names_its_sampler_overrides_the_release_default() -> None:
    log = parse_server_log(
        "INFO [topk_topp_sampler.py:50] Falling back to the PyTorch-native implementation of "
        "top-p & top-k sampling. For the best performance, please install FlashInfer.\n"
        "INFO Available KV cache memory: 5.01 GiB"
    )
    assert log.sampler_path == "sort"
    log = parse_server_log(
        "INFO Using FlashInfer for top-p & top-k sampling.\nINFO GPU KV cache size: 1,000 tokens"
    )
    assert log.sampler_path == "flashinfer"
    ep = parse_server_log(
        "vllm serve /m/Qwen3-Coder-480B-A35B-Instruct-FP8 -dp=8 --enable-expert-parallel\n"
        "INFO Available KV cache memory: 48.66 GiB"
    )
    assert ep.expert_parallel and ep.data_parallel_size == 8


def test_gpt_oss_mxfp4_experts_as_each_backend_pads_them_by_hand() -> None:
    """gpt-oss-20b: 24 layers x 32 experts, hidden 2880, intermediate 2880, bf16 biases."""
    model = load_model("gpt-oss-20b")
    # Marlin (L4, A100): intermediate -> 2,944 (x 128), hidden -> 3,072 (x 256). Per expert
    # 3 x 3,072 x 2,944 values at 0.5 B + one scale byte per 32 + biases (2 x 2,944 + 3,072) x 2 B.
    values = 3 * 3072 * 2944
    marlin = (values / 2 + values / 32 + (2 * 2944 + 3072) * 2) * 768
    assert mxfp4_expert_bytes_per_gpu(model, load_gpu("l4"), 1) == pytest.approx(marlin)
    # Triton (H100): intermediate 2,880 is already a multiple of 64, hidden kept; biases fp32.
    values = 3 * 2880 * 2880
    triton = (values / 2 + values / 32 + (2 * 2880 + 2880) * 4) * 768
    assert mxfp4_expert_bytes_per_gpu(model, load_gpu("h100-80gb"), 1) == pytest.approx(triton)
    # vLLM logs "Model loading took 13.72 GiB" for gpt-oss-20b with the Marlin backend.
    assert loaded_weight_bytes_per_gpu(
        model, load_gpu("l4"), 1, None, "vllm-v1"
    ) / GIB == pytest.approx(13.72, abs=0.1)
    # SGLang, and an explicit weight dtype, keep the checkpoint's bytes
    assert loaded_weight_bytes_per_gpu(model, load_gpu("l4"), 1, None, "sglang") == pytest.approx(
        model.weight_bytes()
    )
    assert mxfp4_expert_bytes_per_gpu(load_model("llama-3.1-8b"), load_gpu("l4"), 1) is None


def test_expert_parallel_spreads_only_the_experts() -> None:
    model, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100-80gb")
    whole = loaded_weight_bytes_per_gpu(model, gpu, 1, None, "vllm-v1")
    split = loaded_weight_bytes_per_gpu(model, gpu, 1, None, "vllm-v1", expert_split=8)
    experts = whole * model.params.experts_total / model.params.total
    assert split == pytest.approx(whole - experts * 7 / 8)


def test_bitsandbytes_dequantizes_its_widest_matrix_for_prefill() -> None:
    """Qwen2.5-7B: gate+up is 2 x 18,944 x 3,584 weights, wider than q/k/v; at 2 B each in 16
    bit."""
    from dataclasses import replace

    from kvplan.spec.quant_storage import CheckpointQuant

    model = load_model("qwen2.5-7b-instruct")
    bnb = replace(
        model, checkpoint_quant=CheckpointQuant("bitsandbytes", "bnb-nf4", "int4", 4.0, 64, 32.0)
    )
    assert dequantized_weight_bytes(model, 1) == 0
    assert dequantized_weight_bytes(bnb, 1) == pytest.approx(2 * 18944 * 3584 * ACTIVATION_BYTES)
    assert activation_elements_per_token(bnb, 1) == activation_elements_per_token(model, 1)


@pytest.mark.parametrize(
    ("version", "memory", "gpu", "offline", "expected"),
    [
        (
            (0, 8, 3),
            39.5,
            "a100-40gb",
            False,
            (1024, 2048),
        ),  # 1024 sequences everywhere before 0.8.4
        ((0, 8, 4), 39.5, "a100-40gb", False, (256, 2048)),
        ((0, 8, 4), 79.2, "h100-80gb", True, (1024, 16384)),  # by device name: H100 / H200
        (
            (0, 8, 5),
            79.2,
            "a100-80gb",
            False,
            (1024, 8192),
        ),  # by memory: >= 70 GiB, A100 included...
        ((0, 9, 0), 79.2, "a100-80gb", False, (256, 2048)),  # ...until 0.9.0 left A100s out
        ((0, 27, 1), 178.0, "b200", False, (1024, 8192)),
        ((0, 28, 0), 178.0, "b200", False, (1024, 16384)),  # >= 160 GiB from 0.28
    ],
)
def test_v1_batch_defaults_by_release(
    version, memory: float, gpu: str, offline: bool, expected
) -> None:
    got = VllmV1Engine().batch_defaults(version, memory, gpu, 8192, offline)
    assert (got.max_num_seqs, got.max_num_batched_tokens, got.chunked_prefill) == (*expected, True)


def test_v0_batch_defaults() -> None:
    from kvplan.engines.engine_releases import BatchDefaults

    v0 = VllmV0Engine()
    assert v0.batch_defaults((0, 6, 4), 79.2, "h100", 8192) == BatchDefaults(256, 8192, False)
    assert v0.batch_defaults((0, 6, 4), 79.2, "h100", 131072) == BatchDefaults(256, 512, True)
    assert v0.batch_defaults((0, 5, 3), 79.2, "h100", 131072) == BatchDefaults(256, 131072, False)


def test_sglang_defaults_by_release_by_hand() -> None:
    from kvplan.engines import sglang_defaults as sg

    # 0.3: by TP only; 0.4 lowers TP 8 to 0.81
    assert (
        sg.mem_fraction_static((0, 3, 0), 79.2, 1),
        sg.mem_fraction_static((0, 3, 0), 79.2, 8),
    ) == (0.88, 0.83)
    assert sg.mem_fraction_static((0, 4, 0), 79.2, 8) == 0.81
    # 0.5.0: an 80 GB card reserves 9.5 + 1/2 GiB at TP 1: (79.2 - 10) / 79.2
    assert sg.mem_fraction_static((0, 5, 0), 79.2, 1) == round(69.2 / 79.2, 3)
    # 0.5.4 on an 80 GB card: 512 + 8192 x 1.5 + 256 x 2 + 128 = 13,440 MiB (above the 10 GiB floor)
    reserved = 512 + 8192 * 1.5 + 256 * 2 + 1 / 8 * 1024
    assert sg.mem_fraction_static((0, 5, 4), 79.2, 1) == round(
        (79.2 * 1024 - reserved) / (79.2 * 1024), 3
    )
    assert [sg.chunked_prefill_size((0, 5, 4), m) for m in (22.0, 44.0, 79.2, 178.0)] == [
        2048,
        4096,
        8192,
        16384,
    ]
    # a 400,000-token pool at 8,192 tokens: min(200,000, clamp(25,000, 2048, 4096)) = 4096
    assert sg.max_running_requests((0, 5, 4), 400_000, 8192) == 4096
    assert sg.max_running_requests((0, 5, 4), 3_000, 8192) == 1500  # pool // 2 binds


def test_sglang_bench_takes_its_own_limits() -> None:
    from kvplan.core.engine_factory import SizingConfig, engine_scheduler
    from kvplan.core.scheduler import SchedulerConfig

    sizing = SizingConfig(
        model="llama-3.1-8b", gpu="h100-80gb", engine="sglang", engine_version="0.5.4"
    )
    unset = SchedulerConfig(max_num_seqs=None, max_num_batched_tokens=None)
    resolved = engine_scheduler(sizing, unset, pool_slots=400_000)
    # context 131,072: the request pool is clamp(400,000 / 131,072 x 512 = 1,562, 2,048, 4,096) =
    # 2,048
    assert (resolved.max_num_seqs, resolved.max_num_batched_tokens) == (2048, 8192)
    vllm = engine_scheduler(SizingConfig(model="llama-3.1-8b", gpu="h100-80gb"), unset)
    assert (vllm.max_num_seqs, vllm.max_num_batched_tokens, vllm.prefill_first) == (
        1024,
        8192,
        False,
    )


def test_random_range_ratio_by_client_release() -> None:
    """vLLM's benchmark before 0.8.4 sampled lengths in [len x r, len] (1.0 = fixed); since,
    [len x (1 - r), len x (1 + r)] (benchmarks/benchmark_dataset.py on both sides of 0.8.4)."""
    import numpy as np

    def range_ratio_below(engine: str, version: str | None) -> bool:
        return serving_engine(engine, version).range_ratio_is_floor(parse_version(version))

    from kvplan.workload.vllm_bench import BenchLoad, random_lengths

    assert range_ratio_below("vllm", "0.6.4") and not range_ratio_below("vllm", "0.8.4")
    assert not range_ratio_below("vllm", None) and not range_ratio_below("sglang", "0.3.0")
    old_in, old_out = random_lengths(np.random.default_rng(0), 2000, 1000, 100, 0.5, below=True)
    assert (
        old_in.min() >= 500
        and old_in.max() <= 1000
        and old_out.min() >= 50
        and old_out.max() <= 100
    )
    new_in, _ = random_lengths(np.random.default_rng(0), 2000, 1000, 100, 0.5)
    assert new_in.min() >= 500 and new_in.max() <= 1500 and new_in.max() > 1000
    fixed, _ = random_lengths(np.random.default_rng(0), 10, 1000, 100, 1.0, below=True)
    assert set(fixed.tolist()) == {1000}
    with pytest.raises(ValueError, match="give engine_version"):
        BenchLoad(range_ratio=1.0)
    BenchLoad(range_ratio=1.0, range_below=True)
