"""Report charts, each drawn only when its data exists (registered with
chart_registry.chart, drawn in this file's order).

Later capabilities (prefix caching, routing, compression, offload) add charts by
registering them here.
"""

from __future__ import annotations

import math

from matplotlib.figure import Figure

from kvplan.core.metric_registry import Feature, by_feature
from kvplan.report.alerts import hit_rate
from kvplan.report.chart_registry import (
    CHARTS,
    Chart,
    bar_panels,
    categories,
    chart,
    column,
    has_bench,
    has_column,
    has_metric,
    has_series,
    label,
    labels,
    legend_outside,
    new_figure,
    panels_of,
    percentile_dots,
    render,
    series_labels,
    series_styles,
    time_source,
    ttft_dots,
)
from kvplan.report.data import ReportData

__all__ = ["CHARTS", "Chart", "render"]

# The pool split's parts are the registry's POOL_SPLIT metrics, in its order, under the labels
# the bench table prints; their colors:
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
            range(len(names)),
            values,
            left=left,
            label=part.label,  # the bench table's name of the part
            color=SPLIT_COLORS[part.name],
            edgecolor="white",
        )
        for i, value in enumerate(values):
            if value >= 6:
                ax.text(
                    left[i] + value / 2, i, f"{value:.0f}%", ha="center", va="center", fontsize=8
                )
        left = [a + b for a, b in zip(left, values)]
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the KV pool (%)")
    ax.legend(ncols=6, loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=8, frameon=False)
    return figure


# The throughput chart comes next in the report (registered on import, in order).
# isort: off
from kvplan.report import throughput_chart  # noqa: E402,F401
# isort: on


@chart("latency", "TTFT and TPOT percentiles per optimization", has_bench)
def latency(data: ReportData) -> Figure:
    bench = data.bench
    names = labels(data)
    figure, axes = bar_panels(len(names), 2, width=10, height=3.8)
    ttft, tpot = panels_of(axes)
    mode = time_source(bench)
    # TTFT spans orders of magnitude (a queue): a log axis in seconds; TPOT stays within a
    # few tens of milliseconds of itself: a linear axis in milliseconds
    percentile_dots(ttft, bench, names, "ttft_s")
    ttft.set_ylabel(f"TTFT (s, {mode})")
    percentile_dots(tpot, bench, names, "tpot_s", scale=1e3, log=False)
    tpot.set_ylabel(f"TPOT (ms, {mode})")
    legend_outside(tpot)
    return figure


# KV usage over time comes next in the report (registered on import, in order).
# isort: off
from kvplan.report import usage_charts  # noqa: E402,F401
# isort: on


@chart(
    "preemptions", "Preemptions and recomputed tokens per optimization", has_metric("preemptions")
)
def preemptions(data: ReportData) -> Figure:
    bench = data.bench
    names = labels(data)
    figure, axes = bar_panels(len(names), 2, width=10, height=3.4)
    for ax, name, color in zip(
        panels_of(axes), ("preemptions", "recomputed_tokens"), ("#c92a2a", "#e8590c")
    ):
        ax.bar(range(len(names)), column(bench, name), color=color)
        ax.set_ylabel(label(name))
        categories(ax, names)
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
    # runs without shared prefixes draw a flat 0: left out
    shown = [
        (key, series)
        for key, series in data.timeseries.items()
        if any(v > 0 for v in series.get("prefix_hit_rate") or [])
    ]
    legend = series_labels(data)
    for (key, series), style in zip(shown, series_styles(len(shown))):
        ax.plot(
            series["t"],
            [100 * v for v in series["prefix_hit_rate"]],
            label=f"{legend[key]}: {label('prefix_hit_rate')}",
            linewidth=1.2,
            **style,
        )
        if "cached_share" in series:
            ax.plot(
                series["t"],
                [100 * v for v in series["cached_share"]],
                linestyle=":",
                linewidth=1,
                color=style["color"],
                label=f"{legend[key]}: {label('cached_share')}",
            )
    upper = data.bench.get("prefix_hit_rate_upper_bound")
    if upper is not None and upper.notna().any():
        ax.axhline(
            100 * upper.dropna().iloc[0],
            color="black",
            linestyle="--",
            linewidth=1,
            label=label("prefix_hit_rate_upper_bound"),
        )
    ax.set_ylim(0, 100)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("%")
    legend_outside(ax)
    return figure


@chart(
    "sharing",
    "What prefix caching and sharing save: hit rate, prefill tokens saved, blocks shared",
    has_metric("prefix_cache_queries"),
)
def sharing(data: ReportData) -> Figure:
    cached = data.bench["prefix_cache_queries"].fillna(0) > 0  # only the runs that cached prefixes
    bench = data.bench[cached].reset_index(drop=True)
    names = labels(data, cached)
    figure, axes = bar_panels(len(names), 2, width=10, height=3.4)
    rates, tokens = panels_of(axes)
    # over every tier where offload ran: the share of prompt tokens the run did not prefill
    rates_of = [hit_rate(row) for _, row in bench.iterrows()]
    hit = [math.nan if rate is None else 100 * rate for rate, _ in rates_of]
    hit_names = " / ".join(dict.fromkeys(name for _, name in rates_of))
    savings = column(bench, "sharing_savings", 100)
    x = range(len(names))
    rates.bar([i - 0.2 for i in x], hit, 0.4, label=hit_names, color="#1971c2")
    rates.bar([i + 0.2 for i in x], savings, 0.4, label=label("sharing_savings"), color="#2b8a3e")
    rates.set_ylabel("%")
    legend_outside(rates)
    # cluster runs report cache hits, not prefill saved: the same tokens (saved = hits + preempted
    # hits)
    saved = [
        s if s else h
        for s, h in zip(
            column(bench, "prefill_tokens_saved", 1e-6), column(bench, "prefix_cache_hits", 1e-6)
        )
    ]
    tokens.bar(list(x), saved, color="#5c940d")
    tokens.set_ylabel(label("prefill_tokens_saved", "millions"))
    for ax in (rates, tokens):
        categories(ax, names)
    return figure


@chart(
    "routers", "Routing across pods: cluster hit rate, requests per pod, TTFT p50/p90", has_routers
)
def routers(data: ReportData) -> Figure:
    routed = data.bench["router"].notna()
    bench = data.bench[routed].reset_index(drop=True)
    names = labels(data, routed)
    figure, axes = bar_panels(len(names), 3, width=12, height=3.6)
    hits, spread, latency = panels_of(axes)
    hits.bar(range(len(names)), column(bench, "prefix_hit_rate", 100), color="#1971c2")
    hits.set_ylabel(label("prefix_hit_rate", "%"))
    pods = max(len(v) for v in bench["pod_requests"])
    width = 0.8 / pods
    for p in range(pods):
        spread.bar(
            [i + (p - (pods - 1) / 2) * width for i in range(len(names))],
            [v[p] if p < len(v) else 0 for v in bench["pod_requests"]],
            width,
            label=f"pod {p}",
        )
    spread.set_ylabel(label("pod_requests"))
    legend_outside(spread)
    ttft_dots(latency, bench, names)
    for ax in (hits, spread):
        categories(ax, names)
    return figure


# Memory against quality comes before the offload tiers in the report.
# isort: off
from kvplan.report import quality_charts  # noqa: E402,F401
# isort: on


def with_tiers(data: ReportData):
    """The rows of the runs where an offload tier ran (their other optimizations included,
    the comparison without offload), and their labels."""
    bench = data.bench
    runs = set(bench.loc[bench["cpu_bytes_in"].notna(), "run_id"])
    keep = bench["run_id"].isin(runs)
    return bench[keep].reset_index(drop=True), labels(data, keep)


@chart(
    "tiers",
    "Offload tiers: hit rate per tier (stacked), bytes moved, TTFT with and without offload",
    has_column("cpu_bytes_in"),
)
def tiers(data: ReportData) -> Figure:
    bench, names = with_tiers(data)
    figure, axes = bar_panels(len(names), 3, width=12, height=3.6)
    rates, moved, latency = panels_of(axes)
    bottom = [0.0] * len(names)
    # the device's share, then each tier's: together the hit rate over all tiers
    for name, color in (
        ("prefix_hit_rate", "#1971c2"),
        ("cpu_hit_rate", "#74c0fc"),
        ("disk_hit_rate", "#a5d8ff"),
    ):
        values = column(bench, name, 100)
        rates.bar(range(len(names)), values, bottom=bottom, label=label(name), color=color)
        bottom = [a + b for a, b in zip(bottom, values)]
    rates.set_ylabel(label("total_hit_rate", "%"))
    legend_outside(rates)
    for offset, tier in enumerate(("cpu", "disk")):
        moved.bar(
            [i + (offset - 0.5) * 0.4 for i in range(len(names))],
            column(bench, f"{tier}_bytes_out", 1e-9),
            0.4,
            label=label(f"{tier}_bytes_out"),
        )
    moved.set_ylabel("GB read back to the device")
    legend_outside(moved)
    ttft_dots(latency, bench, names)
    for ax in (rates, moved):
        categories(ax, names)
    return figure


# Charts registered by their own modules, after the ones above and in this order (the
# report shows charts in registration order).
# isort: off
from kvplan.report import study_charts  # noqa: E402,F401  (a sweep's TTFT against the rate)
from kvplan.report import fidelity_charts  # noqa: E402,F401  (simulated against measured serving runs)
from kvplan.report import policy_charts  # noqa: E402,F401  (the eviction-policy trade-off)
from kvplan.report import plan_charts  # noqa: E402,F401  (the plan's cost against capacity)
# isort: on
