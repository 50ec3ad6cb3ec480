"""Results records -> pandas frames, comparison tables and alert checks.

Reports only read results files (DESIGN: results are data). pandas is imported here,
never by `import kvplan`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from kvplan.core.metric_registry import METRICS, metric
from kvplan.results import ResultRecord, read_jsonl

# The comparison table's metrics (comparison.csv's columns, under their registered column
# labels), and the ratio to the run's baseline of each metric the registry names a ratio for.
COMPARISON = (
    "token_states_share",
    "waste",
    "kv_cache_usage_mean",
    "running_mean",
    "preemptions",
    "prefix_hit_rate",
    "sharing_savings",
    "load_imbalance",
    "served_output_tokens_per_s",
    "served_requests_per_s",
    "output_tokens_per_s",
    "requests_per_s",
    "ttft_s_p50",
    "ttft_s_p90",
    "tpot_s_p50",
    "e2e_s_p90",
    "requests_rejected",
)
RATIO_METRICS = tuple(entry.name for entry in METRICS if entry.ratio_label)
# The throughput the report compares runs by: the steady state's output rate
# (docs/metrics.md), the figure the bench table's ratios read
THROUGHPUT = "served_output_tokens_per_s"


def ratio_column(name: str) -> str:
    """comparison.csv's column of a metric's ratio to the baseline."""
    return f"{name} vs base"


@dataclass
class ReportData:
    sources: list[str]
    bench: pd.DataFrame
    estimate: pd.DataFrame
    timeseries: dict[tuple[str, str], dict[str, list[float]]] = field(default_factory=dict)
    params: dict[str, dict[str, Any]] = field(default_factory=dict)  # run_id -> run parameters
    quality: pd.DataFrame = field(default_factory=pd.DataFrame)
    records: list[ResultRecord] = field(default_factory=list)  # bench records as written
    fidelity: pd.DataFrame = field(default_factory=pd.DataFrame)  # simulated vs measured
    plan: pd.DataFrame = field(default_factory=pd.DataFrame)  # `kvplan plan` candidates


def load(paths: list[str | Path]) -> ReportData:
    if not paths:
        raise ValueError(
            "no results files given; pass one or more files written by kvplan bench or estimate "
            "--out"
        )
    bench_rows, estimate_rows, quality_rows, fidelity_rows, plan_rows = [], [], [], [], []
    raw_records: list[ResultRecord] = []
    timeseries: dict[tuple[str, str], dict[str, list[float]]] = {}
    params: dict[str, dict[str, Any]] = {}
    for path in paths:
        for record in read_jsonl(path):
            base = {
                "run_id": record.run_id,
                "optimization": record.optimization,
                "baseline": record.is_baseline,
                "mode": record.mode or "",
                "source": str(path),
            }
            flat_params = {
                k: v for k, v in record.params.items() if not isinstance(v, (dict, list))
            }
            workload = record.params.get("workload")
            if isinstance(workload, dict):
                flat_params["workload"] = workload.get("kind", "")
            if record.kind == "estimate":
                estimate_rows.append({**base, **flat_params, **record.metrics})
                continue
            if record.kind == "error":  # a failed sweep point: nothing to draw
                continue
            if (
                record.kind == "fidelity"
            ):  # benchmarks/serving_fidelity.py: prediction vs measurement
                fidelity_rows.append({**base, **flat_params, **record.metrics})
                continue
            if record.kind == "plan":  # kvplan plan --out: one row per candidate
                plan_rows.append({**base, **flat_params, **record.metrics})
                continue
            if record.kind == "quality":
                quality_rows.append(
                    {
                        **base,
                        **flat_params,
                        **{k: v for k, v in record.metrics.items() if not isinstance(v, list)},
                    }
                )
                continue
            router = record.params.get("router")
            raw_records.append(record)
            band = record.metrics.get("time_error_band") or {}
            bench_rows.append(
                {
                    **base,
                    **flat_params,
                    "router": router,
                    **{k: v for k, v in record.metrics.items() if not isinstance(v, dict)},
                    # a modeled run's held-out error on output tok/s, for the throughput chart
                    "throughput_error_band": band.get("output_throughput_error", math.nan),
                }
            )
            timeseries[(record.run_id, record.optimization)] = record.timeseries or {}
            params.setdefault(
                record.run_id, {**record.params, "kvplan_version": record.kvplan_version}
            )
    return ReportData(
        [str(p) for p in paths],
        pd.DataFrame(bench_rows),
        pd.DataFrame(estimate_rows),
        timeseries,
        params,
        pd.DataFrame(quality_rows),
        raw_records,
        pd.DataFrame(fidelity_rows),
        pd.DataFrame(plan_rows),
    )


def comparison_table(bench: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, optimization): the headline metrics and each one's ratio to the
    run's baseline (the first optimization of that run)."""
    rows = []
    for run_id, group in bench.groupby("run_id", sort=False):
        base = group[group["baseline"]].iloc[0] if group["baseline"].any() else group.iloc[0]
        for _, row in group.iterrows():
            entry: dict[str, Any] = {
                "run": run_id,
                "optimization": row["optimization"],
                "baseline": row["optimization"] == base["optimization"],
            }
            for name in COMPARISON:
                if name in row and not _blank(row[name]):
                    entry[metric(name).column_label] = row[name]
            for name in RATIO_METRICS:
                if name in row and base.get(name):
                    entry[ratio_column(name)] = row[name] / base[name]
            rows.append(entry)
    return pd.DataFrame(rows)


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, float) and pd.isna(value))


def study_rows(data: ReportData) -> tuple[list[dict[str, Any]], float | None]:
    """The sweep study summary, when the records came from `kvplan sweep`."""
    from kvplan.sweep.summary import summarize

    swept = [r for r in data.records if "study" in r.params]
    if not swept:
        return [], None
    study = swept[0].params["study"]
    return summarize(swept, study.get("slo_ttft_p90_s"), study.get("prices") or {}), study.get(
        "slo_ttft_p90_s"
    )
