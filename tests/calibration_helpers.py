"""Measured runs for the step model's calibration tests: a small run's settings and a
vLLM benchmark result file's contents."""

from __future__ import annotations

from kvplan.fit.measured import MeasuredRun

# A measured run calibrate reads: vllm bench serve's result file.
VLLM_RESULT = {
    "date": "20250101-000000",
    "backend": "vllm",
    "model_id": "meta-llama/Llama-3.1-8B",
    "num_prompts": 40,
    "request_rate": "inf",
    "burstiness": 1.0,
    "max_concurrency": 8,
    "duration": 10.0,
    "completed": 40,
    "failed": 0,
    "total_input_tokens": 10240,
    "total_output_tokens": 2560,
    "request_throughput": 4.0,
    "output_throughput": 256.0,
    "total_token_throughput": 1280.0,
    "mean_ttft_ms": 60.0,
    "median_ttft_ms": 55.0,
    "p99_ttft_ms": 90.0,
    "mean_tpot_ms": 28.0,
    "median_tpot_ms": 28.0,
    "p99_tpot_ms": 30.0,
    "mean_itl_ms": 28.0,
    "median_itl_ms": 28.0,
    "p99_itl_ms": 40.0,
}


def small_run(**changes) -> MeasuredRun:
    base = dict(
        run_id="t",
        sweep="t",
        benchmark="serving",
        model="llama-3.1-8b",
        gpu="h100-80gb",
        tp=1,
        dataset="random",
        input_len=256,
        output_len=64,
        num_prompts=40,
        max_concurrency=8,
    )
    base.update(changes)
    return MeasuredRun(**base)
