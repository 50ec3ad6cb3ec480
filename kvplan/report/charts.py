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
    has_estimate,
    has_metric,
    has_series,
    labels,
    new_figure,
    percentile_dots,
    render,
    slanted,
)
from kvplan.report.data import ReportData

__all__ = ["CHARTS", "Chart", "render"]

GIB = 2**30
# The pool split's parts are the registry's POOL_SPLIT metrics, in its order; their colors:
SPLIT_COLORS = {"token_states_share": "#2b8a3e", "reservation_share": "#74c0fc",
                "internal_fragmentation_share": "#f08c00",
                "external_fragmentation_share": "#e03131", "cached_share": "#b197fc",
                "free_share": "#dee2e6"}
VERDICT_COLORS = {"fits": "#2b8a3e", "kv-does-not-fit": "#f59f00", "weights-do-not-fit": "#c92a2a"}


@chart("pool_split", "KV pool split per optimization (time-averaged, as in the vLLM paper's Fig. 2)", has_bench)
def pool_split(data: ReportData) -> Figure:
    bench = data.bench
    names = labels(data)
    figure, axes = new_figure(height=0.5 * len(names) + 1.8)
    ax = axes[0][0]
    left = [0.0] * len(names)
    for part in by_feature(Feature.POOL_SPLIT):
        values = column(bench, part.name, 100)
        ax.barh(names, values, left=left, label=part.column_label, color=SPLIT_COLORS[part.name],
                edgecolor="white")
        for i, value in enumerate(values):
            if value >= 6:
                ax.text(left[i] + value / 2, i, f"{value:.0f}%", ha="center", va="center", fontsize=8)
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
        ax.errorbar(names, values, yerr=band * np.asarray(values, dtype=float), fmt="none", ecolor="#495057", capsize=3,
                    label="held-out error band of the modeled figure")
        ax.legend(fontsize=8, loc="upper left")
    for run_id, group in bench.groupby("run_id", sort=False):
        base = group[group["baseline"]]["output_tokens_per_s"]
        base_value = float(base.iloc[0]) if len(base) else float(group["output_tokens_per_s"].iloc[0])
        for index in group.index:
            ratio = values[index] / base_value if base_value else 0.0
            ax.annotate(f"{ratio:.2f}x", (bars[index].get_x() + bars[index].get_width() / 2, values[index]),
                        ha="center", va="bottom", fontsize=8)
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


@chart("kv_usage_over_time", "KV cache usage, running and waiting requests over time", has_series("kv_cache_usage"))
def kv_usage_over_time(data: ReportData) -> Figure:
    figure, axes = new_figure(width=10, height=5.5, rows=2)
    usage, queue = axes[0][0], axes[1][0]
    for (run_id, optimization), series in data.timeseries.items():
        if not series.get("t"):
            continue
        label = optimization if data.bench["run_id"].nunique() == 1 else f"{optimization} [{run_id[:6]}]"
        usage.plot(series["t"], [100 * u for u in series["kv_cache_usage"]], label=label, linewidth=1)
        line, = queue.plot(series["t"], series["running"], label=f"{label} running", linewidth=1)
        queue.plot(series["t"], series["waiting"], linestyle="--", color=line.get_color(), linewidth=1,
                   label=f"{label} waiting")
    usage.set_ylabel("KV cache usage (%)")
    usage.set_ylim(0, 105)
    usage.legend(fontsize=7, ncols=3)
    queue.set_ylabel("requests")
    queue.set_xlabel("time (s)")
    queue.legend(fontsize=7, ncols=3)
    return figure


@chart("preemptions", "Preemptions and recomputed tokens per optimization", has_metric("preemptions"))
def preemptions(data: ReportData) -> Figure:
    bench = data.bench
    names = labels(data)
    figure, axes = new_figure(width=10, height=3.4, cols=2)
    for ax, name, color in ((axes[0][0], "preemptions", "#c92a2a"),
                            (axes[0][1], "recomputed_tokens", "#e8590c")):
        ax.bar(names, column(bench, name), color=color)
        ax.set_ylabel(metric(name).label)
    for ax in axes[0]:
        slanted(ax)
    return figure


def _estimate_groups(data: ReportData, keys: list[str], limit: int = 4):
    groups = list(data.estimate.groupby(keys, sort=False))
    return groups[:limit]


@chart("kv_vs_context", "KV memory per GPU vs context length, per KV dtype, against the GPU's KV budget", has_estimate)
def kv_vs_context(data: ReportData) -> Figure:
    groups = _estimate_groups(data, ["model", "gpu", "tp", "batch"])
    figure, axes = new_figure(width=5 * min(2, len(groups)), height=3.8 * ((len(groups) + 1) // 2),
                           rows=(len(groups) + 1) // 2, cols=min(2, len(groups)))
    for ax, ((model, gpu, tp, batch), frame) in zip(axes.flat, groups):
        for kv_dtype, rows in frame.groupby("kv_dtype", sort=False):
            rows = rows.sort_values("context")
            ax.plot(rows["context"], rows["seq_kv_bytes"] * batch / GIB, marker="o", markersize=3, label=kv_dtype)
        budget = frame["kv_budget_bytes_per_gpu"].iloc[0] / GIB
        ax.axhline(budget, color="black", linestyle="--", linewidth=1, label=f"KV budget {budget:.1f} GiB")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{model} on {tp} x {gpu}, batch {batch}", fontsize=9)
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("KV per GPU (GiB)")
        ax.legend(fontsize=7)
    return figure


@chart("concurrency_vs_context", "Maximum concurrency vs context length per GPU, one panel per KV dtype", has_estimate)
def concurrency_vs_context(data: ReportData) -> Figure:
    dtypes = list(dict.fromkeys(data.estimate["kv_dtype"]))[:3]
    figure, axes = new_figure(width=4.2 * len(dtypes) + 2.2, height=3.8, cols=len(dtypes))
    for ax, kv_dtype in zip(axes[0], dtypes):
        frame = data.estimate[data.estimate["kv_dtype"] == kv_dtype]
        for (model, gpu, tp), rows in list(frame.groupby(["model", "gpu", "tp"], sort=False))[:10]:
            rows = rows.drop_duplicates("context").sort_values("context")
            ax.plot(rows["context"], rows["max_concurrency"].clip(lower=1e-2), marker="o", markersize=3,
                    label=f"{model} {tp}x{gpu}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.axhline(1, color="grey", linewidth=0.8)
        ax.set_title(f"KV {kv_dtype}", fontsize=9)
        ax.set_xlabel("context (tokens)")
    axes[0][0].set_ylabel("max concurrency (requests)")
    axes[0][-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    return figure


@chart("fit_matrix", "Fit matrix: model x GPU x TP at the longest context swept (largest fitting context noted)",
       has_estimate)
def fit_matrix(data: ReportData) -> Figure:
    estimate = data.estimate
    first_dtype = estimate["kv_dtype"].iloc[0]
    frame = estimate[estimate["kv_dtype"] == first_dtype]
    models = list(dict.fromkeys(frame["model"]))
    targets = list(dict.fromkeys(zip(frame["gpu"], frame["tp"])))
    figure, axes = new_figure(width=1.6 * len(targets) + 2.5, height=0.6 * len(models) + 1.5)
    ax = axes[0][0]
    for y, model in enumerate(models):
        for x, (gpu, tp) in enumerate(targets):
            cell = frame[(frame["model"] == model) & (frame["gpu"] == gpu) & (frame["tp"] == tp)]
            if cell.empty:
                continue
            longest = cell.sort_values("context").iloc[-1]
            fitting = cell[cell["verdict"] == "fits"]["context"]
            note = f"{int(fitting.max()):,}" if len(fitting) else "none"
            ax.add_patch(_rect(x, y, VERDICT_COLORS.get(longest["verdict"], "#868e96")))
            ax.text(x + 0.5, y + 0.5, note, ha="center", va="center", fontsize=8, color="white")
    ax.set_xlim(0, len(targets))
    ax.set_ylim(len(models), 0)
    ax.set_xticks([x + 0.5 for x in range(len(targets))], [f"{tp} x {gpu}" for gpu, tp in targets], fontsize=8)
    ax.set_yticks([y + 0.5 for y in range(len(models))], models, fontsize=8)
    ax.set_title(f"KV {first_dtype}; green fits, amber KV does not fit, red weights do not fit", fontsize=9)
    return figure


def _rect(x: int, y: int, color: str):
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), 1, 1, color=color, ec="white")


def _ttft_bars(ax, bench, names: list[str]) -> None:
    """TTFT p50 and p90 per run, as dots on a log axis."""
    percentile_dots(ax, bench, names, "ttft_s", ("p50", "p90"))
    mode = "modeled" if (bench["mode"] == "simulated").all() else "measured"
    ax.set_ylabel(f"TTFT (s, {mode})")
    ax.legend(fontsize=7)


def has_routers(data: ReportData) -> bool:
    return has_bench(data) and "router" in data.bench and data.bench["router"].notna().any()


@chart("prefix_hit_rate_over_time", "Prefix cache hit rate over time (cumulative, in prompt tokens)",
       has_series("prefix_hit_rate"))
def prefix_hit_rate_over_time(data: ReportData) -> Figure:
    figure, axes = new_figure(height=3.6)
    ax = axes[0][0]
    for (run_id, optimization), series in data.timeseries.items():
        if any(v > 0 for v in series.get("prefix_hit_rate") or []):  # runs without shared prefixes: a flat 0
            ax.plot(series["t"], [100 * v for v in series["prefix_hit_rate"]], label=optimization, linewidth=1.2)
            if "cached_share" in series:
                ax.plot(series["t"], [100 * v for v in series["cached_share"]], linestyle=":", linewidth=1,
                        label=f"{optimization}: cached-but-free share of the pool")
    upper = data.bench.get("prefix_hit_rate_upper_bound")
    if upper is not None and upper.notna().any():
        ax.axhline(100 * upper.dropna().iloc[0], color="black", linestyle="--", linewidth=1,
                   label="infinite-cache upper bound")
    ax.set_ylim(0, 100)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("%")
    ax.legend(fontsize=7)
    return figure


@chart("sharing", "What prefix caching and sharing save: hit rate, prefill tokens saved, blocks shared",
       has_metric("prefix_cache_queries"))
def sharing(data: ReportData) -> Figure:
    cached = data.bench["prefix_cache_queries"].fillna(0) > 0  # only the runs that cached prefixes
    bench = data.bench[cached].reset_index(drop=True)
    names = [name for name, keep in zip(labels(data), cached) if keep]
    figure, axes = new_figure(width=10, height=3.4, cols=2)
    hit = column(bench, "prefix_hit_rate", 100)
    savings = column(bench, "sharing_savings", 100)
    x = range(len(names))
    axes[0][0].bar([i - 0.2 for i in x], hit, 0.4, label="prefix hit rate", color="#1971c2")
    axes[0][0].bar([i + 0.2 for i in x], savings, 0.4, label="blocks saved by sharing", color="#2b8a3e")
    axes[0][0].set_xticks(list(x), names)
    axes[0][0].set_ylabel("%")
    axes[0][0].legend(fontsize=7)
    # cluster runs report cache hits, not prefill saved: the same tokens (saved = hits + preempted hits)
    saved = [s if s else h for s, h in zip(column(bench, "prefill_tokens_saved", 1e-6),
                                            column(bench, "prefix_cache_hits", 1e-6))]
    axes[0][1].bar(names, saved, color="#5c940d")
    axes[0][1].set_ylabel("prefill tokens saved (millions)")
    for ax in axes[0]:
        slanted(ax)
    return figure


@chart("routers", "Routing across pods: cluster hit rate, requests per pod, TTFT p50/p90", has_routers)
def routers(data: ReportData) -> Figure:
    bench = data.bench[data.bench["router"].notna()]
    names = [f"{r}" for r in bench["router"]]
    figure, axes = new_figure(width=12, height=3.6, cols=3)
    axes[0][0].bar(names, column(bench, "prefix_hit_rate", 100), color="#1971c2")
    axes[0][0].set_ylabel("cluster prefix hit rate (%)")
    pods = max(len(v) for v in bench["pod_requests"])
    width = 0.8 / pods
    for p in range(pods):
        axes[0][1].bar([i + (p - (pods - 1) / 2) * width for i in range(len(names))],
                       [v[p] if p < len(v) else 0 for v in bench["pod_requests"]], width, label=f"pod {p}")
    axes[0][1].set_xticks(range(len(names)), names)
    axes[0][1].set_ylabel("requests routed")
    axes[0][1].legend(fontsize=7)
    _ttft_bars(axes[0][2], bench, names)
    for ax in axes[0]:
        slanted(ax)
    return figure


def has_quality(data: ReportData) -> bool:
    return not data.quality.empty


@chart("memory_vs_quality", "Memory vs quality: KV bytes per sequence against perplexity (Pareto frontier dashed)",
       has_quality)
def memory_vs_quality(data: ReportData) -> Figure:
    frame = data.quality
    figure, axes = new_figure(width=9, height=4.6)
    ax = axes[0][0]
    kib = [v / 1024 for v in frame["kv_bytes_per_seq"]]
    ax.scatter(kib, frame["perplexity"], color="#1971c2", zorder=3)
    span = (max(kib) - min(kib)) or 1.0
    stacked: dict[int, int] = {}  # labels of points at (nearly) the same memory stack upwards
    for x, y, name in sorted(zip(kib, frame["perplexity"], frame["optimization"]), key=lambda p: (p[0], p[1])):
        slot = stacked[round(50 * x / span)] = stacked.get(round(50 * x / span), -1) + 1
        ax.annotate(str(name), (x, y), textcoords="offset points", xytext=(5, 4 + 11 * slot), fontsize=8)
    points = sorted(zip(kib, frame["perplexity"]))
    frontier, best = [], float("inf")
    for x, y in points:  # lowest perplexity reachable with at most this much memory
        if y < best:
            frontier.append((x, y))
            best = y
    ax.plot([p[0] for p in frontier], [p[1] for p in frontier], linestyle="--", color="grey", zorder=2)
    ax.set_xlabel("KV per sequence (KiB)")
    ax.set_ylabel("perplexity (lower is better)")  # linear: a log axis labelled 4x10^0 read badly
    return figure


@chart("tiers", "Offload tiers: hit rate per tier (stacked), bytes moved, TTFT with and without offload",
       has_column("cpu_bytes_in"))
def tiers(data: ReportData) -> Figure:
    bench = data.bench
    names = labels(data)
    figure, axes = new_figure(width=12, height=3.6, cols=3)
    bottom = [0.0] * len(names)
    for name, label, color in (("prefix_hit_rate", "device", "#1971c2"),
                               ("cpu_hit_rate", "cpu", "#74c0fc"),
                               ("disk_hit_rate", "disk", "#a5d8ff")):
        values = column(bench, name, 100)
        axes[0][0].bar(names, values, bottom=bottom, label=label, color=color)
        bottom = [a + b for a, b in zip(bottom, values)]
    axes[0][0].set_ylabel("prefix hit rate by tier (%)")
    axes[0][0].legend(fontsize=7)
    for offset, tier in enumerate(("cpu", "disk")):
        moved = column(bench, f"{tier}_bytes_out", 1e-9)
        axes[0][1].bar([i + (offset - 0.5) * 0.4 for i in range(len(names))], moved, 0.4, label=f"{tier} -> device")
    axes[0][1].set_xticks(range(len(names)), names)
    axes[0][1].set_ylabel("GB reloaded")
    axes[0][1].legend(fontsize=7)
    _ttft_bars(axes[0][2], bench, names)
    for ax in axes[0]:
        slanted(ax)
    return figure


def has_study(data: ReportData) -> bool:
    return any("study" in r.params for r in data.records)


@chart("study_ttft_vs_rate", "Sweep: p90 TTFT against request rate per setting, with the SLO", has_study)
def study_ttft_vs_rate(data: ReportData) -> Figure:
    from kvplan.report.data import study_rows

    _, slo = study_rows(data)
    groups: dict[str, list[tuple[float, float]]] = {}
    for record in data.records:
        sweep = record.params.get("sweep")
        if sweep is None or "rate" not in sweep:
            continue
        label = ", ".join(f"{v}" for k, v in sorted(sweep.items()) if k not in ("rate", "num_requests", "workload"))
        groups.setdefault(label, []).append((float(sweep["rate"]), record.metrics.get("ttft_s_p90") or 0.0))
    figure, axes = new_figure(width=9, height=4.2)
    ax = axes[0][0]
    for label, points in list(groups.items())[:12]:
        points.sort()
        ax.plot([p[0] for p in points], [max(p[1], 1e-3) for p in points], marker="o", markersize=3, label=label)
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
