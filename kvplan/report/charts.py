"""Report charts, each drawn only when its data exists (registered with
chart_registry.chart, drawn in this file's order).

Later capabilities (prefix caching, routing, compression, offload) add charts by
registering them here.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from kvplan.core.metric_registry import Feature, by_feature, metric
from kvplan.report.chart_registry import (
    CHARTS,
    Chart,
    chart,
    column,
    has_bench,
    has_column,
    has_metric,
    has_series,
    labels,
    new_figure,
    percentile_dots,
    render,
    slanted,
    ttft_dots,
)
from kvplan.report.data import ReportData

__all__ = ["CHARTS", "Chart", "render"]

# The pool split's parts are the registry's POOL_SPLIT metrics, in its order; their colors:
SPLIT_COLORS = {
    "token_states_share": "#2b8a3e",
    "reservation_share": "#74c0fc",
    "internal_fragmentation_share": "#f08c00",
    "external_fragmentation_share": "#e03131",
    "cached_share": "#b197fc",
    "free_share": "#dee2e6",
}


@chart(
    "pool_split",
    "KV pool split per optimization (time-averaged, as in the vLLM paper's Fig. 2)",
    has_bench,
)
def pool_split(data: ReportData) -> Figure:
    bench = data.bench
    names = labels(data)
    figure, axes = new_figure(height=0.5 * len(names) + 1.8)
    ax = axes[0][0]
    left = [0.0] * len(names)
    for part in by_feature(Feature.POOL_SPLIT):
        values = column(bench, part.name, 100)
        ax.barh(
            names,
            values,
            left=left,
            label=part.column_label,
            color=SPLIT_COLORS[part.name],
            edgecolor="white",
        )
        for i, value in enumerate(values):
            if value >= 6:
                ax.text(
                    left[i] + value / 2, i, f"{value:.0f}%", ha="center", va="center", fontsize=8
                )
        left = [a + b for a, b in zip(left, values)]
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the KV pool (%)")
    ax.legend(ncols=6, loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=8, frameon=False)
    return figure


@chart("throughput", "Throughput per optimization (bars) and ratio to the baseline", has_bench)
def throughput(data: ReportData) -> Figure:
    bench = data.bench
    names = labels(data)
    figure, axes = new_figure(height=3.6)
    ax = axes[0][0]
    values = column(bench, "output_tokens_per_s")
    bars = ax.bar(names, values, color="#1971c2")
    if "throughput_error_band" in bench and bench["throughput_error_band"].notna().any():
        # the step model's held-out error on output tok/s for this GPU family and engine
        band = bench["throughput_error_band"].fillna(0.0).to_numpy()
        ax.errorbar(
            names,
            values,
            yerr=band * np.asarray(values, dtype=float),
            fmt="none",
            ecolor="#495057",
            capsize=3,
            label="held-out error band of the modeled figure",
        )
        ax.legend(fontsize=8, loc="upper left")
    for run_id, group in bench.groupby("run_id", sort=False):
        base = group[group["baseline"]]["output_tokens_per_s"]
        base_value = (
            float(base.iloc[0]) if len(base) else float(group["output_tokens_per_s"].iloc[0])
        )
        for index in group.index:
            ratio = values[index] / base_value if base_value else 0.0
            ax.annotate(
                f"{ratio:.2f}x",
                (bars[index].get_x() + bars[index].get_width() / 2, values[index]),
                ha="center",
                va="bottom",
                fontsize=8,
            )
    ax.set_ylabel(metric("output_tokens_per_s").label)
    slanted(ax)
    return figure


@chart("latency", "TTFT and TPOT percentiles per optimization", has_bench)
def latency(data: ReportData) -> Figure:
    bench = data.bench
    names = labels(data)
    figure, axes = new_figure(width=10, height=3.8, cols=2)
    for ax, prefix, title in ((axes[0][0], "ttft_s", "TTFT"), (axes[0][1], "tpot_s", "TPOT")):
        percentile_dots(ax, bench, names, prefix)
        mode = "modeled" if (bench["mode"] == "simulated").all() else "measured"
        ax.set_ylabel(f"{title} (s, {mode})")
        ax.legend(fontsize=8)
    return figure


@chart(
    "kv_usage_over_time",
    "KV cache usage, running and waiting requests over time",
    has_series("kv_cache_usage"),
)
def kv_usage_over_time(data: ReportData) -> Figure:
    figure, axes = new_figure(width=10, height=5.5, rows=2)
    usage, queue = axes[0][0], axes[1][0]
    for (run_id, optimization), series in data.timeseries.items():
        if not series.get("t"):
            continue
        label = (
            optimization
            if data.bench["run_id"].nunique() == 1
            else f"{optimization} [{run_id[:6]}]"
        )
        usage.plot(
            series["t"], [100 * u for u in series["kv_cache_usage"]], label=label, linewidth=1
        )
        (line,) = queue.plot(series["t"], series["running"], label=f"{label} running", linewidth=1)
        queue.plot(
            series["t"],
            series["waiting"],
            linestyle="--",
            color=line.get_color(),
            linewidth=1,
            label=f"{label} waiting",
        )
    usage.set_ylabel("KV cache usage (%)")
    usage.set_ylim(0, 105)
    usage.legend(fontsize=7, ncols=3)
    queue.set_ylabel("requests")
    queue.set_xlabel("time (s)")
    queue.legend(fontsize=7, ncols=3)
    return figure


@chart(
    "preemptions", "Preemptions and recomputed tokens per optimization", has_metric("preemptions")
)
def preemptions(data: ReportData) -> Figure:
    bench = data.bench
    names = labels(data)
    figure, axes = new_figure(width=10, height=3.4, cols=2)
    for ax, name, color in (
        (axes[0][0], "preemptions", "#c92a2a"),
        (axes[0][1], "recomputed_tokens", "#e8590c"),
    ):
        ax.bar(names, column(bench, name), color=color)
        ax.set_ylabel(metric(name).label)
    for ax in axes[0]:
        slanted(ax)
    return figure


# The capacity estimate's charts come next in the report (registered on import, in order).
# isort: off
from kvplan.report import estimate_charts  # noqa: E402,F401
# isort: on


def has_routers(data: ReportData) -> bool:
    return has_bench(data) and "router" in data.bench and data.bench["router"].notna().any()


@chart(
    "prefix_hit_rate_over_time",
    "Prefix cache hit rate over time (cumulative, in prompt tokens)",
    has_series("prefix_hit_rate"),
)
def prefix_hit_rate_over_time(data: ReportData) -> Figure:
    figure, axes = new_figure(height=3.6)
    ax = axes[0][0]
    for (run_id, optimization), series in data.timeseries.items():
        if any(
            v > 0 for v in series.get("prefix_hit_rate") or []
        ):  # runs without shared prefixes: a flat 0
            ax.plot(
                series["t"],
                [100 * v for v in series["prefix_hit_rate"]],
                label=optimization,
                linewidth=1.2,
            )
            if "cached_share" in series:
                ax.plot(
                    series["t"],
                    [100 * v for v in series["cached_share"]],
                    linestyle=":",
                    linewidth=1,
                    label=f"{optimization}: cached-but-free share of the pool",
                )
    upper = data.bench.get("prefix_hit_rate_upper_bound")
    if upper is not None and upper.notna().any():
        ax.axhline(
            100 * upper.dropna().iloc[0],
            color="black",
            linestyle="--",
            linewidth=1,
            label="infinite-cache upper bound",
        )
    ax.set_ylim(0, 100)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("%")
    ax.legend(fontsize=7)
    return figure


@chart(
    "sharing",
    "What prefix caching and sharing save: hit rate, prefill tokens saved, blocks shared",
    has_metric("prefix_cache_queries"),
)
def sharing(data: ReportData) -> Figure:
    cached = data.bench["prefix_cache_queries"].fillna(0) > 0  # only the runs that cached prefixes
    bench = data.bench[cached].reset_index(drop=True)
    names = [name for name, keep in zip(labels(data), cached) if keep]
    figure, axes = new_figure(width=10, height=3.4, cols=2)
    hit = column(bench, "prefix_hit_rate", 100)
    savings = column(bench, "sharing_savings", 100)
    x = range(len(names))
    axes[0][0].bar([i - 0.2 for i in x], hit, 0.4, label="prefix hit rate", color="#1971c2")
    axes[0][0].bar(
        [i + 0.2 for i in x], savings, 0.4, label="blocks saved by sharing", color="#2b8a3e"
    )
    axes[0][0].set_xticks(list(x), names)
    axes[0][0].set_ylabel("%")
    axes[0][0].legend(fontsize=7)
    # cluster runs report cache hits, not prefill saved: the same tokens (saved = hits + preempted hits)
    saved = [
        s if s else h
        for s, h in zip(
            column(bench, "prefill_tokens_saved", 1e-6), column(bench, "prefix_cache_hits", 1e-6)
        )
    ]
    axes[0][1].bar(names, saved, color="#5c940d")
    axes[0][1].set_ylabel("prefill tokens saved (millions)")
    for ax in axes[0]:
        slanted(ax)
    return figure


@chart(
    "routers", "Routing across pods: cluster hit rate, requests per pod, TTFT p50/p90", has_routers
)
def routers(data: ReportData) -> Figure:
    bench = data.bench[data.bench["router"].notna()]
    names = [f"{r}" for r in bench["router"]]
    figure, axes = new_figure(width=12, height=3.6, cols=3)
    axes[0][0].bar(names, column(bench, "prefix_hit_rate", 100), color="#1971c2")
    axes[0][0].set_ylabel("cluster prefix hit rate (%)")
    pods = max(len(v) for v in bench["pod_requests"])
    width = 0.8 / pods
    for p in range(pods):
        axes[0][1].bar(
            [i + (p - (pods - 1) / 2) * width for i in range(len(names))],
            [v[p] if p < len(v) else 0 for v in bench["pod_requests"]],
            width,
            label=f"pod {p}",
        )
    axes[0][1].set_xticks(range(len(names)), names)
    axes[0][1].set_ylabel("requests routed")
    axes[0][1].legend(fontsize=7)
    ttft_dots(axes[0][2], bench, names)
    for ax in axes[0]:
        slanted(ax)
    return figure


# Memory against quality comes before the offload tiers in the report.
# isort: off
from kvplan.report import quality_charts  # noqa: E402,F401
# isort: on


@chart(
    "tiers",
    "Offload tiers: hit rate per tier (stacked), bytes moved, TTFT with and without offload",
    has_column("cpu_bytes_in"),
)
def tiers(data: ReportData) -> Figure:
    bench = data.bench
    names = labels(data)
    figure, axes = new_figure(width=12, height=3.6, cols=3)
    bottom = [0.0] * len(names)
    for name, label, color in (
        ("prefix_hit_rate", "device", "#1971c2"),
        ("cpu_hit_rate", "cpu", "#74c0fc"),
        ("disk_hit_rate", "disk", "#a5d8ff"),
    ):
        values = column(bench, name, 100)
        axes[0][0].bar(names, values, bottom=bottom, label=label, color=color)
        bottom = [a + b for a, b in zip(bottom, values)]
    axes[0][0].set_ylabel("prefix hit rate by tier (%)")
    axes[0][0].legend(fontsize=7)
    for offset, tier in enumerate(("cpu", "disk")):
        moved = column(bench, f"{tier}_bytes_out", 1e-9)
        axes[0][1].bar(
            [i + (offset - 0.5) * 0.4 for i in range(len(names))],
            moved,
            0.4,
            label=f"{tier} -> device",
        )
    axes[0][1].set_xticks(range(len(names)), names)
    axes[0][1].set_ylabel("GB reloaded")
    axes[0][1].legend(fontsize=7)
    ttft_dots(axes[0][2], bench, names)
    for ax in axes[0]:
        slanted(ax)
    return figure


def has_study(data: ReportData) -> bool:
    return any("study" in r.params for r in data.records)


@chart(
    "study_ttft_vs_rate",
    "Sweep: p90 TTFT against request rate per setting, with the SLO",
    has_study,
)
def study_ttft_vs_rate(data: ReportData) -> Figure:
    from kvplan.report.data import study_rows

    _, slo = study_rows(data)
    groups: dict[str, list[tuple[float, float]]] = {}
    for record in data.records:
        sweep = record.params.get("sweep")
        if sweep is None or "rate" not in sweep:
            continue
        label = ", ".join(
            f"{v}"
            for k, v in sorted(sweep.items())
            if k not in ("rate", "num_requests", "workload")
        )
        groups.setdefault(label, []).append(
            (float(sweep["rate"]), record.metrics.get("ttft_s_p90") or 0.0)
        )
    figure, axes = new_figure(width=9, height=4.2)
    ax = axes[0][0]
    for label, points in list(groups.items())[:12]:
        points.sort()
        ax.plot(
            [p[0] for p in points],
            [max(p[1], 1e-3) for p in points],
            marker="o",
            markersize=3,
            label=label,
        )
    if slo:
        ax.axhline(slo, color="black", linestyle="--", linewidth=1, label=f"SLO {slo:g} s")
    ax.set_yscale("log")
    ax.set_xlabel("request rate (req/s)")
    ax.set_ylabel("p90 TTFT (s)")
    ax.legend(fontsize=7)
    return figure


# Charts registered by their own modules, after the ones above and in this order (the
# report shows charts in registration order).
# isort: off
from kvplan.report import fidelity_charts  # noqa: E402,F401  (simulated against measured serving runs)
from kvplan.report import policy_charts  # noqa: E402,F401  (the eviction-policy trade-off)
from kvplan.report import plan_charts  # noqa: E402,F401  (the plan's cost against capacity)
# isort: on
