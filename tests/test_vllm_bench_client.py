"""The simulated `vllm bench` client: vLLM's random lengths and send schedule, open and
closed loop, and vLLM's figures, checked against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvplan.core.engine import Engine
from kvplan.core.kv import make_allocator
from kvplan.core.scheduler import SchedulerConfig
from kvplan.sim.bench_client import run_client
from kvplan.sim.vllm_metrics import format_serving_block, offline_metrics, serving_metrics
from kvplan.workload.request import Request
from kvplan.workload.vllm_bench import BenchLoad, bench_requests, random_lengths, send_times

STEP_S = 0.01


class ConstantRunner:
    mode = "simulated"

    def step_time(self, plan) -> float:
        return STEP_S


def engine(max_num_seqs: int = 8) -> Engine:
    allocator = make_allocator("paged", 4096, 16, 512)
    return Engine(
        allocator,
        ConstantRunner(),
        SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=512),
        512,
    )


def requests(n: int, prompt: int = 4, output: int = 3, at: float = 0.0) -> list[Request]:
    return [
        Request(request_id=i, arrival_s=at, prompt_len=prompt, output_len=output) for i in range(n)
    ]


def test_random_lengths_follow_current_vllm_bounds():
    rng = np.random.default_rng(0)
    fixed_in, fixed_out = random_lengths(rng, 100, 1000, 100, 0.0)
    assert set(fixed_in) == {1000} and set(fixed_out) == {100}
    ins, outs = random_lengths(rng, 20000, 100, 10, 0.5)
    # [floor(100 * 0.5), ceil(100 * 1.5)] = [50, 150]; output [5, 15]; both ends drawn.
    assert ins.min() == 50 and ins.max() == 150
    assert outs.min() == 5 and outs.max() == 15
    _, tiny = random_lengths(rng, 1000, 10, 1, 0.9)
    assert tiny.min() >= 1  # vLLM keeps the output's lower bound at 1


def test_range_ratio_outside_current_vllm_domain_is_refused():
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        BenchLoad(range_ratio=1.0)


def test_send_times_rate_inf_and_vllm_normalization():
    rng = np.random.default_rng(1)
    assert not send_times(rng, 5, math.inf).any()
    times = send_times(rng, 100, 4.0)
    assert np.all(np.diff(times) >= 0) and times[-1] == pytest.approx(
        100 / 4.0
    )  # rescaled to N / rate
    even = send_times(rng, 4, 2.0, burstiness=math.inf)
    assert even.tolist() == pytest.approx([0.5, 1.0, 1.5, 2.0])


def test_closed_loop_sends_the_next_request_when_one_finishes():
    # Cap 1: prefill step emits token 1, two decode steps emit tokens 2 and 3 -> 3 steps
    # of 10 ms per request, strictly one after another.
    run = run_client(engine(), requests(3), max_concurrency=1)
    sends = sorted(s.request.arrival_s for s in run.finished)
    assert sends == pytest.approx([0.0, 0.03, 0.06])
    assert run.duration_s == pytest.approx(0.09)
    figures = serving_metrics(run)
    assert figures["mean_ttft_ms"] == pytest.approx(10.0)
    assert figures["mean_tpot_ms"] == pytest.approx(10.0)
    assert figures["mean_itl_ms"] == pytest.approx(10.0) and figures["p99_itl_ms"] == pytest.approx(
        10.0
    )
    assert figures["mean_e2el_ms"] == pytest.approx(30.0)
    assert figures["request_throughput"] == pytest.approx(3 / 0.09)
    assert figures["output_throughput"] == pytest.approx(9 / 0.09)
    assert figures["total_token_throughput"] == pytest.approx(21 / 0.09)


def test_open_loop_rate_inf_sends_everything_at_zero():
    run = run_client(engine(), requests(3), max_concurrency=None)
    assert {s.request.arrival_s for s in run.finished} == {0.0}
    assert run.duration_s == pytest.approx(0.03)  # one batch: prefill together, decode together
    assert serving_metrics(run)["mean_ttft_ms"] == pytest.approx(10.0)
    assert offline_metrics(run)["output_tokens_per_second"] == pytest.approx(9 / 0.03)


def test_cap_never_exceeded_and_clock_starts_at_benchmark_start():
    stream = [
        Request(request_id=i, arrival_s=0.5 + 0.001 * i, prompt_len=8, output_len=5)
        for i in range(20)
    ]
    run = run_client(engine(), stream, max_concurrency=4)
    spans = [(s.request.arrival_s, s.finish_s) for s in run.finished]
    for t, _ in spans:
        assert sum(1 for a, b in spans if a <= t < b) <= 4
    assert min(a for a, _ in spans) == pytest.approx(0.5)
    assert run.duration_s > 0.5  # duration counts from t = 0, as vLLM's does


def test_printed_block_uses_vllm_labels():
    figures = serving_metrics(run_client(engine(), requests(2), max_concurrency=1))
    block = format_serving_block(figures)
    for label in (
        "Serving Benchmark Result",
        "Successful requests:",
        "Maximum request concurrency:",
        "Output token throughput (tok/s):",
        "Mean TTFT (ms):",
        "P99 ITL (ms):",
        "Median E2EL (ms):",
    ):
        assert label in block


def test_sharegpt_lengths_respect_vllm_filter():
    reqs = bench_requests(BenchLoad(dataset="sharegpt", num_prompts=500, seed=3))
    assert len(reqs) == 500
    assert all(
        4 <= r.prompt_len <= 1024 and r.output_len >= 4 and r.prompt_len + r.output_len <= 2048
        for r in reqs
    )
