"""One run, typed: what `simulate` returns, and that bench's records hold exactly its figures."""

from __future__ import annotations

import pytest

from kvplan.bench import BenchConfig, ClusterConfig, SizingConfig, parse_optimization, run_matrix
from kvplan.bench.simulation import RunMetrics, simulate
from kvplan.workload import make_workload

CONFIG = BenchConfig(SizingConfig(model="llama-3.1-8b", gpu="l4", max_model_len=2048))


def _requests(count: int = 24) -> list:
    return make_workload("chat", count, rate=4, seed=0, max_model_len=2048)


def test_simulate_types_the_figures_a_search_reads() -> None:
    requests = _requests()
    run, sizing = simulate(CONFIG, requests, parse_optimization("paged"))
    assert run.requests_finished == len(requests) and run.requests_rejected == 0
    assert run.requests_per_s == run.figures["requests_per_s"] > 0
    assert run.output_tokens_per_s == run.figures["output_tokens_per_s"] > 0
    assert run.e2e_s_p90 == run.figures["e2e_s_p90"] and run.ttft_s_p90 == run.figures["ttft_s_p90"]
    assert run.e2e_s_p90 is not None and run.e2e_s_p90 >= run.ttft_s_p90 > 0
    assert set(run.series) >= {"t", "running", "waiting"}
    assert run.figures["kv_budget_bytes_per_gpu"] == sizing.kv_pool_bytes


def test_a_figure_missing_from_the_summary_fails_loudly() -> None:
    # a metric renamed in the summary must not read as 0 and end a search early
    figures = {"requests_finished": 3, "requests_rejected": 0, "requests_per_s": 1.0}
    with pytest.raises(KeyError, match="output_tokens_per_s"):
        RunMetrics.of(figures, {})


def test_bench_records_hold_the_runs_figures() -> None:
    requests = _requests(16)
    (record,) = run_matrix(CONFIG, requests, ["paged"])
    run, _ = simulate(CONFIG, requests, parse_optimization("paged"))
    assert record.metrics == dict(run.figures)
    assert record.timeseries == dict(run.series)


def test_a_cluster_run_has_no_step_series() -> None:
    config = BenchConfig(CONFIG.sizing, cluster=ClusterConfig(pods=2, routers=("round-robin",)))
    run, _ = simulate(config, _requests(16), parse_optimization("paged"), router="round-robin")
    assert run.series == {} and run.figures["pods"] == 2
    assert run.requests_finished == 16
