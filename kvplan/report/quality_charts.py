"""Memory against quality (KV formats and eviction policies on a real model), registered
when charts.py imports this module."""

from __future__ import annotations

from matplotlib.figure import Figure

from kvplan.report.chart_registry import chart, new_figure
from kvplan.report.data import ReportData


def has_quality(data: ReportData) -> bool:
    return not data.quality.empty


@chart(
    "memory_vs_quality",
    "Memory vs quality: KV bytes per sequence against perplexity (Pareto frontier dashed)",
    has_quality,
)
def memory_vs_quality(data: ReportData) -> Figure:
    frame = data.quality
    figure, axes = new_figure(width=9, height=4.6)
    ax = axes[0][0]
    kib = [v / 1024 for v in frame["kv_bytes_per_seq"]]
    ax.scatter(kib, frame["perplexity"], color="#1971c2", zorder=3)
    span = (max(kib) - min(kib)) or 1.0
    stacked: dict[int, int] = {}  # labels of points at (nearly) the same memory stack upwards
    for x, y, name in sorted(
        zip(kib, frame["perplexity"], frame["optimization"]), key=lambda p: (p[0], p[1])
    ):
        slot = stacked[round(50 * x / span)] = stacked.get(round(50 * x / span), -1) + 1
        ax.annotate(
            str(name), (x, y), textcoords="offset points", xytext=(5, 4 + 11 * slot), fontsize=8
        )
    points = sorted(zip(kib, frame["perplexity"]))
    frontier, best = [], float("inf")
    for x, y in points:  # lowest perplexity reachable with at most this much memory
        if y < best:
            frontier.append((x, y))
            best = y
    ax.plot(
        [p[0] for p in frontier], [p[1] for p in frontier], linestyle="--", color="grey", zorder=2
    )
    ax.set_xlabel("KV per sequence (KiB)")
    ax.set_ylabel("perplexity (lower is better)")  # linear: a log axis labelled 4x10^0 read badly
    return figure
