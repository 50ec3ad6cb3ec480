"""The metric registry holds every field a run records, a cluster reports each by its
registered rule, and the table, report and exports name only registered metrics."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kvplan.bench.comparison import ROWS, comparison
from kvplan.cli.app import app
from kvplan.cli.bench_table import render_comparison
from kvplan.core.metric_registry import (
    METRICS,
    REPORTED_BY_CLUSTER,
    ClusterRule,
    Feature,
    Shape,
    by_feature,
    find,
    metric,
)
from kvplan.core.metrics import SPLIT, StepMetrics, percentiles
from kvplan.report.data import COMPARISON
from kvplan.report.export import EXPORTED
from kvplan.report.html import HEADLINE, HEADLINE_RATIOS
from kvplan.results import read_jsonl
from kvplan.sim.cluster import cluster_metrics

runner = CliRunner()
# prefix caching, both offload tiers, eviction policies (one compacting, one per layer),
# parallel samples: every optional summary section of one engine
OPTIMIZATIONS = "paged,prefix,prefix+offload-cpu,offload-disk,h2o,entropy-budget"


def _bench(folder: Path, *args: str) -> list:
    out = folder / "r.jsonl"
    result = runner.invoke(
        app,
        [
            "bench",
            "--workload",
            "chat",
            "--num-requests",
            "40",
            "--rate",
            "4",
            "--kv-cache-gib",
            "0.5",
            "--cpu-cache-gb",
            "0.05",
            "--disk-cache-gb",
            "0.1",
            *args,
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    return read_jsonl(out)


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> list:
    return _bench(
        tmp_path_factory.mktemp("single"),
        "--samples",
        "2",
        "--kv-budget",
        "256",
        "--optimizations",
        OPTIMIZATIONS,
    )


@pytest.fixture(scope="module")
def clustered(tmp_path_factory: pytest.TempPathFactory) -> list:
    return _bench(
        tmp_path_factory.mktemp("cluster"),
        "--pods",
        "2",
        "--router",
        "round-robin",
        "--samples",
        "2",
        "--kv-budget",
        "256",
        "--optimizations",
        "prefix,prefix+offload-cpu,h2o",
    )


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> list:
    return _bench(
        tmp_path_factory.mktemp("client"), "--max-concurrency", "4", "--optimizations", "paged"
    )


def test_every_field_a_run_records_is_registered(
    single: list, clustered: list, client: list
) -> None:
    fields = {name for record in (*single, *clustered, *client) for name in record.metrics}
    assert {
        "cpu_hit_rate",
        "disk_bytes_out",
        "tokens_dropped",
        "eviction_copied_slots",
        "parallel_forks",
        "pod_requests",
        "vllm_mean_ttft_ms",
    } <= fields  # the run exercised every section
    assert sorted(name for name in fields if find(name) is None) == []


def test_a_cluster_reports_every_registered_field_by_its_rule(
    single: list, clustered: list
) -> None:
    cluster = {name for record in clustered for name in record.metrics}
    reported = {entry.name for entry in METRICS if entry.cluster in REPORTED_BY_CLUSTER}
    assert reported <= cluster
    pod_fields = {name for record in single for name in record.metrics}
    left_out = {name for name in pod_fields if metric(name).cluster is ClusterRule.POD_ONLY}
    assert left_out and not left_out & cluster  # a pod's figure the cluster leaves out, by its rule
    run_level = {name for name in cluster - reported if metric(name).cluster is ClusterRule.RUN}
    assert cluster == reported | run_level  # nothing else: every cluster field comes from a rule


def test_cluster_aggregation_by_hand() -> None:
    def pod(
        finished: int, waste: float, running: float, queries: int | None, hits: int
    ) -> SimpleNamespace:
        figures = {
            "requests_finished": finished,
            "requests_rejected": 0,
            "preemptions": 1,
            "running_mean": running,
            "kv_cache_usage_mean": 0.5,
            "waste": waste,
            "sharing_savings": 0.0,
            **{f"{part}_share": 1 / 6 for part in SPLIT},
        }
        if queries is not None:
            figures.update(
                prefix_cache_queries=queries, prefix_cache_hits=hits, prefix_hit_rate=hits / queries
            )
        return SimpleNamespace(
            result=lambda: SimpleNamespace(metrics=figures),
            finished=[],
            rejected=[],
            now=4.0,
            step_metrics=StepMetrics(),
        )

    metrics = cluster_metrics([pod(3, 0.1, 2.0, 100, 50), pod(1, 0.3, 1.0, None, 0)], [3, 1], [])
    assert metrics["requests_finished"] == 4 and metrics["preemptions"] == 2  # SUM
    assert metrics["running_mean"] == 3.0  # SUM: the cluster's mean running requests
    assert metrics["waste"] == pytest.approx(0.2)  # POD_MEAN
    assert metrics["pod_prefix_hit_rate"] == [0.5, None] and metrics["pod_running_mean"] == [
        2.0,
        1.0,
    ]
    assert metrics["prefix_cache_queries"] == 100 and metrics["prefix_hit_rate"] == 0.5  # pooled
    assert (
        metrics["pods"] == 2
        and metrics["pod_requests"] == [3, 1]
        and metrics["load_imbalance"] == 1.5
    )
    assert metrics["makespan_s"] == 4.0 and metrics["ttft_s_p50"] is None
    # no requests: no rate to offer, nothing to overload; a pod without a ceiling, none
    assert metrics["offered_requests_per_s"] is None and metrics["overloaded"] is False
    assert metrics["sustainable_requests_per_s"] is None
    assert list(metrics)[:5] == [
        "pods",
        "requests_finished",
        "requests_rejected",
        "makespan_s",
        "pod_requests",
    ]


def test_registry_entries_are_consistent() -> None:
    names = [entry.name for entry in METRICS]
    assert len(names) == len(set(names))
    for entry in METRICS:
        assert entry.description.endswith(".") and entry.label
        if entry.is_pattern:  # a pattern's fields cannot be listed ahead, so no cluster sums them
            assert entry.cluster in (ClusterRule.POD_ONLY, ClusterRule.RUN)
        assert (entry.cluster is ClusterRule.PER_POD) == bool(entry.per_pod_of)
        if entry.per_pod_of:
            assert entry.shape is Shape.PER_POD and find(entry.per_pod_of) is not None
    assert {entry.name for entry in by_feature(Feature.POOL_SPLIT)} == {
        f"{part}_share" for part in SPLIT
    }
    assert {entry.name for entry in by_feature(Feature.LATENCY)} == {
        name for prefix in ("ttft_s", "tpot_s", "e2e_s") for name in percentiles([1.0], prefix)
    }


def test_patterns_fill_in_and_unknown_fields_are_not_registered() -> None:
    assert metric("cpu_hit_rate").label == "CPU tier hit rate"
    assert metric("disk_bytes_in").label == "disk bytes in"
    assert metric("measured_device_to_cpu_gbps").feature is Feature.REAL_MODE
    assert find("tape_hit_rate") is None and find("prefix_hit_rate").name == "prefix_hit_rate"
    with pytest.raises(KeyError, match="'made_up' is not a registered metric"):
        metric("made_up")


def test_consumers_name_only_registered_metrics() -> None:
    for row in ROWS:
        assert find(row.metric) is not None and (not row.pair or find(row.pair) is not None)
        assert not row.ratio or row.entry.ratio_label
    for name in (*COMPARISON, *HEADLINE, *HEADLINE_RATIOS):
        assert find(name) is not None
    assert set(EXPORTED) == {entry.name for entry in METRICS if entry.prometheus is not None}


def test_a_cluster_of_pods_without_prefix_caching_shows_its_per_pod_rates(tmp_path: Path) -> None:
    records = _bench(
        tmp_path, "--pods", "2", "--router", "round-robin", "--optimizations", "prefix,paged"
    )
    view = comparison(records)
    per_pod = next(row for row in view.rows if row.label == "hit rate per pod")
    assert per_pod.cells[1] == "- -"  # paged pods have no prefix cache: no rate, and no crash
    console = Console(width=100, file=io.StringIO(), color_system=None)
    render_comparison(view, console)
    assert "prefix@round-robin" in console.file.getvalue()
