"""What the report says, on hand-made results (every figure below is an input, so each
expected sentence is derived by hand): runs named by what differs between them, alerts that
read the right metric and whose printed value justifies them, summaries that quote the hit
rate over every tier, say when a run is overloaded, and drop bullets that report no change;
a policy combined with a KV format keeps its whole name."""

from __future__ import annotations

import pytest

pd = pytest.importorskip("pandas")

from kvplan.report.alerts import alerts  # noqa: E402
from kvplan.report.data import ReportData  # noqa: E402
from kvplan.report.names import page_text, run_names  # noqa: E402
from kvplan.report.summary import overload, summaries  # noqa: E402


def params(rate: float, gpu: str = "l4", **more: object) -> dict[str, object]:
    workload = {"kind": "chat", "rate": rate, "arrival": "poisson"}
    return {"model": "llama-3.1-8b", "gpu": gpu, "workload": workload, "tp": 1, **more}


def test_runs_are_named_by_the_settings_that_differ() -> None:
    runs = {"aaa111": params(4, "h100-80gb"), "bbb222": params(8, "l4"), "ccc333": params(8, "l4")}
    names = run_names(runs)
    # GPU and rate differ; the model, the workload and tp do not; two runs alike add a hash
    assert names == {
        "aaa111": "gpu h100-80gb, rate 4",
        "bbb222": "gpu l4, rate 8, run bbb222",
        "ccc333": "gpu l4, rate 8, run ccc333",
    }
    # a chart needs only what tells the runs apart: the GPU alone does, between these two
    assert run_names(runs, ["aaa111", "bbb222"], shortest=True) == {
        "aaa111": "gpu h100-80gb",
        "bbb222": "gpu l4",
    }
    # a sweep names its points by its axes, the rate first
    swept = {
        run: {**p, "sweep": {"gpu": p["gpu"], "rate": p["workload"]["rate"]}}  # type: ignore[index]
        for run, p in runs.items()
        if run != "ccc333"
    }
    assert run_names(swept) == {"aaa111": "rate 4, gpu h100-80gb", "bbb222": "rate 8, gpu l4"}
    # sweep points alike but for their optimization are told apart by it, not by a hash
    members = {"bbb222": {"paged"}, "ccc333": {"contiguous-oracle"}}
    assert run_names(runs, ["bbb222", "ccc333"], members=members) == {"bbb222": "", "ccc333": ""}
    members["ccc333"] = {"paged"}
    assert run_names(runs, ["bbb222", "ccc333"], members=members) == {
        "bbb222": "run bbb222",
        "ccc333": "run ccc333",
    }
    assert run_names({"only": params(1)}) == {"only": ""}
    assert run_names(runs, ["aaa111", "bbb222"], stated=("gpu",)) == {
        "aaa111": "rate 4",
        "bbb222": "rate 8",
    }


def test_a_huge_name_is_cut_with_a_note() -> None:
    assert page_text("x" * 200_000) == "x" * 200 + "\u2026 (cut: 200,000 characters)"
    assert page_text("paged") == "paged"


def row(**metrics: object) -> dict[str, object]:
    return {"run_id": "r1", "optimization": "prefix", "requests_finished": 100, **metrics}


def found(*rows: dict[str, object]) -> list[tuple[str, str]]:
    return [(a["alert"], a["detail"]) for a in alerts(pd.DataFrame(list(rows)))]


def test_kv_usage_alert_fires_only_when_the_printed_value_is_above_90() -> None:
    # 90.004% prints as 90.0%: not above 90%, no alert; 90.06% prints as 90.1%: an alert
    assert found(row(kv_cache_usage_mean=0.90004)) == []
    assert found(row(kv_cache_usage_mean=0.9006)) == [
        ("KVCacheUsageHigh", "mean KV cache usage 90.1% > 90%: requests queue for memory")
    ]


def test_the_hit_rate_alert_reads_the_rate_over_every_tier() -> None:
    offload = row(prefix_cache_queries=1000, prefix_hit_rate=0.45, total_hit_rate=0.89)
    assert found(offload) == []  # 89% of prompt tokens came from some tier
    device_only = row(prefix_cache_queries=1000, prefix_hit_rate=0.45)
    assert found(device_only) == [("PrefixCacheHitRateLow", "prefix hit rate 45.0% < 50%")]
    # a run that cached nothing is not a low hit rate
    assert found(row(prefix_cache_queries=0, prefix_hit_rate=0.0)) == []


def test_preemptions_and_evictions_are_separate_alerts() -> None:
    assert found(row(preemptions=6)) == [
        (
            "PreemptionRateHigh",
            "6 preemptions for 100 finished requests (6.0% > 5%): the KV pool is too small "
            "for the batch the scheduler admits",
        )
    ]
    assert found(row(preemptions=5)) == []  # 5.0% is not above 5%
    thrashing = row(
        prefix_cache_queries=1000,
        prefix_hit_rate=0.55,
        prefix_hit_rate_upper_bound=0.9,
        cached_blocks_evicted=1234,
    )
    assert found(thrashing) == [
        (
            "EvictionRateHigh",
            "1,234 cached prefix blocks evicted: prefix hit rate 55.0% against 90.0% for a "
            "cache that never evicts (35.0 points > 10 lost to eviction)",
        )
    ]
    # the same gap without an eviction is not the cache's size; a 10.0-point gap is not > 10
    assert found({**thrashing, "cached_blocks_evicted": 0}) == []
    assert found({**thrashing, "prefix_hit_rate": 0.8}) == []


def bench(rows: list[dict[str, object]], run_params: dict[str, object]) -> ReportData:
    frame = pd.DataFrame([{"run_id": "r1", "mode": "simulated", **r} for r in rows])
    return ReportData(["b.jsonl"], frame, pd.DataFrame(), params={"r1": run_params})


def bench_lines(rows: list[dict[str, object]]) -> list[str]:
    ((heading, lines),) = summaries(bench(rows, {**params(3), "num_requests": 600}))
    assert heading == "llama-3.1-8b on l4: 600 requests (chat) (run r1)"
    return lines


def test_the_offload_summary_quotes_the_hit_rate_over_every_tier() -> None:
    lines = bench_lines(
        [
            {"optimization": "prefix", "baseline": True, "prefix_cache_queries": 9,
             "prefix_hit_rate": 0.45, "prefix_hit_rate_upper_bound": 0.93},
            {"optimization": "offload-disk", "baseline": False, "prefix_cache_queries": 9,
             "prefix_hit_rate": 0.45, "cpu_hit_rate": 0.03, "disk_hit_rate": 0.41,
             "total_hit_rate": 0.89, "prefix_hit_rate_upper_bound": 0.93},
        ]
    )  # fmt: skip
    assert lines == [
        "prefix caching with offload (offload-disk) serves 89% of prompt tokens from cache over "
        "all tiers (device 45%, cpu 3%, disk 41%), prefill it need not compute (a cache that "
        "never evicts: 93%)"
    ]


def test_bullets_that_report_no_change_are_dropped_or_reworded() -> None:
    same = {"running_mean": 10.0, "served_output_tokens_per_s": 500.0, "overloaded": True}
    lines = bench_lines(
        [
            {"optimization": "prefix@round-robin", "baseline": True, **same},
            {"optimization": "prefix@kv-aware", "baseline": False, **same, "running_mean": 10.4},
        ]
    )
    # 10.4 / 10 = 1.04x prints as 1.0x: no "holds" bullet; equal throughput said as such
    assert lines[0] == (
        "every optimization gives prefix@round-robin's throughput (500 output tokens/s in the "
        "steady state; modeled)"
    )


def test_a_load_every_run_serves_names_no_most_throughput() -> None:
    # every run served the offered load: a 1.06x between their steady figures is the window's
    # noise, not something an optimization bought
    served = {"running_mean": 10.0, "overloaded": False}
    lines = bench_lines(
        [
            {
                "optimization": "paged",
                "baseline": True,
                **served,
                "served_output_tokens_per_s": 500.0,
            },
            {
                "optimization": "prefix",
                "baseline": False,
                **served,
                "served_output_tokens_per_s": 530.0,
            },
        ]
    )
    assert not any("the most throughput" in line for line in lines)
    assert lines == [
        "every optimization served the offered load (500 output tokens/s in the steady state; "
        "modeled): at this rate they differ in memory and latency, not throughput"
    ]
    overloaded = bench_lines(
        [
            {"optimization": "paged", "baseline": True, **served,
             "served_output_tokens_per_s": 500.0},
            {"optimization": "prefix", "baseline": False, **served, "overloaded": True,
             "served_output_tokens_per_s": 530.0},
        ]
    )  # fmt: skip
    assert overloaded[0] == (
        "the most throughput: prefix, 530 output tokens/s in the steady state (1.06x paged; "
        "modeled)"
    )


def test_an_overloaded_run_says_what_it_served_of_what_was_offered() -> None:
    load = {
        "overloaded": True,
        "offered_requests_per_s": 3.0,
        "served_requests_per_s": 1.234,
        "sustainable_requests_per_s": 1.3,
    }
    assert overload(load) == (
        "overloaded: served 1.23 req/s of 3.00 offered; this setup sustains about 1.30 req/s"
    )
    assert overload({**load, "overloaded": False}) is None
    assert overload({**load, "sustainable_requests_per_s": None}) == (
        "overloaded: served 1.23 req/s of 3.00 offered"
    )
    lines = bench_lines([{"optimization": "paged", "baseline": True, **load}])
    assert lines == [
        "paged, overloaded: served 1.23 req/s of 3.00 offered; this setup sustains about 1.30 req/s"
    ]


def test_a_policy_with_a_kv_format_keeps_its_whole_name() -> None:
    from kvplan.report.policies import policy_tradeoff

    common = {"mode": "simulated", "kv_budget": 128, "mean_sequence_tokens": 512,
              "kv_cache_usage_mean": 0.5, "pool_slots": 1000, "kv_bytes_per_token_per_gpu": 2,
              "running_mean": 4.0, "output_tokens_per_s": 100.0}  # fmt: skip
    data = ReportData(
        ["b.jsonl"],
        pd.DataFrame(
            [
                {"run_id": "r1", "optimization": "streaming", **common},
                {"run_id": "r1", "optimization": "streaming+fp8", **common},
                {"run_id": "r1", "optimization": "paged+h2o", **common},
            ]
        ),
        pd.DataFrame(),
    )
    assert sorted(policy_tradeoff(data)["policy"]) == ["h2o", "streaming", "streaming+fp8"]
