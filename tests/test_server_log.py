"""Parsing real vLLM / SGLang startup logs: every figure a shipped log shows is recovered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.spec.server_log import parse_server_log, unwrap

FIXTURE = Path(__file__).parent / "data" / "vllm_issue_12330.log"


def shipped_logs(shared_data: Path) -> list[dict]:
    path = shared_data / "serving" / "vllm_startup_logs.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_every_shipped_log_recovers_its_reported_figures(shared_data: Path) -> None:
    records = shipped_logs(shared_data)
    assert len(records) == 30
    for record in records:
        log = parse_server_log(record["quote"])
        for name, value in record["reported"].items():
            if value is None or name == "weights_as_printed":
                continue
            if record["id"] == "rec005" and name == "num_gpu_blocks":
                # the quote shows two runs (before / after a fix); both are recovered, the first is
                # kept
                assert log.values[name] == (7449, 7351)
                continue
            assert getattr(log, name) == value, (record["id"], name)


def test_issue_12330_fixture_figures() -> None:
    log = parse_server_log(FIXTURE.read_text())
    assert (log.engine, log.engine_generation) == ("vllm", "v0")
    assert log.total_gpu_memory_gib == 39.50 and log.gpu_memory_utilization == 0.90
    assert log.weights_gib == 14.96  # the profiling line wins over the load line's 14.9595
    assert (log.non_torch_gib, log.peak_activation_gib, log.available_kv_gib) == (0.10, 9.37, 11.12)
    assert (log.num_gpu_blocks, log.num_cpu_blocks) == (5691, 2048)
    assert (log.max_concurrency, log.max_concurrency_tokens, log.max_model_len) == (
        11.12,
        8192,
        8192,
    )


def test_v1_engine_args_and_refusal() -> None:
    text = (
        "(APIServer pid=1) INFO [utils.py:326] non-default args: {'model': 'Qwen/Qwen3-8B', "
        "'max_model_len': "
        "40960, 'tensor_parallel_size': 2, 'kv_cache_dtype': 'fp8', 'block_size': 32, "
        "'enforce_eager': True}\n"
        "(EngineCore_DP0 pid=7) INFO [gpu_worker.py:298] Available KV cache memory: 3.50 GiB\n"
        "ValueError: To serve at least one request with the models's max seq len (40960), (5.00 "
        "GiB KV cache is "
        "needed, which is larger than the available KV cache memory (3.50 GiB). Based on the "
        "available memory, "
        "the estimated maximum model length is 28672."
    )
    log = parse_server_log(text)
    assert (log.model, log.max_model_len, log.tensor_parallel_size) == ("Qwen/Qwen3-8B", 40960, 2)
    assert (log.kv_cache_dtype, log.block_size, log.enforce_eager) == ("fp8", 32, True)
    assert (log.available_kv_gib, log.kv_needed_gib, log.max_tokens_in_kv_from_error) == (
        3.5,
        5.0,
        28672,
    )
    assert log.engine_generation == "v1"


def test_sglang_lines() -> None:
    text = (
        "[2025-03-03 06:49:28 TP0] Memory pool end. avail mem=12.31 GB\n"
        "[2025-03-03 06:49:28 TP0] KV Cache is allocated. #tokens: 120000, KV size: 7.87 GB\n"
        "[2025-03-03 06:49:30 TP0] max_total_num_tokens=120000, chunked_prefill_size=8192, "
        "context_len=32768"
    )
    log = parse_server_log(text)
    assert log.engine == "sglang"
    assert (log.sglang_kv_tokens_allocated, log.sglang_max_total_num_tokens) == (120000, 120000)
    assert (log.sglang_kv_size_gb, log.sglang_available_gpu_mem_gb) == (7.87, 12.31)


def test_rank_zero_is_preferred_for_per_rank_memory() -> None:
    text = (
        "(VllmWorker rank=3 pid=4) INFO [gpu_worker.py:233] Available KV cache memory: 11.33 GiB\n"
        "(VllmWorker rank=0 pid=1) INFO [gpu_worker.py:233] Available KV cache memory: 12.13 GiB\n"
    )
    log = parse_server_log(text)
    assert log.available_kv_gib == 12.13
    assert log.values["available_kv_gib"] == (11.33, 12.13)


def test_hard_wrapped_lines_are_joined() -> None:
    head = (
        "(EngineCore_0 pid=1257) (RayWorkerWrapper pid=374, ip=10.254.6.219) INFO 09-03 "
        "04:42:46 [gpu_worker.py:276] "
    )
    text = head + "Available KV cache me\nmory: 11.03 GiB\n"
    assert "Available KV cache memory: 11.03 GiB" in unwrap(text)
    assert parse_server_log(text).available_kv_gib == 11.03


@pytest.mark.parametrize("text", ["", "hello world\n", "INFO 01-01 starting server\nGPU 0 ready\n"])
def test_nothing_usable_is_an_error_naming_the_lines(text: str) -> None:
    with pytest.raises(ValueError, match="GPU KV cache size"):
        parse_server_log(text)


def test_a_vllm_refusal_beside_an_sglang_pool_is_two_servers() -> None:
    """vLLM's refusal prints the tokens its KV cache holds: beside SGLang's pool line the log
    is two servers' (refused), so no reader has to choose which capacity wins."""
    refusal = (
        "ValueError: To serve at least one request with the models's max seq len (131072), "
        "(16.0 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(4.5 GiB). Based on the available memory, the estimated maximum model length is 36864.\n"
    )
    assert parse_server_log(refusal).max_tokens_in_kv_from_error == 36864
    sglang = "[2025-01-01 00:00:01] KV Cache is allocated. #tokens: 12345, K size: 1.0 GB\n"
    with pytest.raises(ValueError, match="both a vLLM and an SGLang server"):
        parse_server_log(refusal + sglang)
