"""The chart registry: each chart is a drawing function plus a test of whether its data
exists; `render` draws the applicable ones in registration order. Helpers every chart
uses (labels, a metric column, a figure) live here too.

matplotlib's object API (Figure, no pyplot) renders headless with the Agg backend and
keeps no global state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure

from kvplan.report.data import ReportData


@dataclass(frozen=True)
class Chart:
    name: str
    title: str
    applies: Callable[[ReportData], bool]
    draw: Callable[[ReportData], Figure]


CHARTS: list[Chart] = []


def chart(
    name: str, title: str, applies: Callable[[ReportData], bool]
) -> Callable[[Callable[[ReportData], Figure]], Callable[[ReportData], Figure]]:
    def register(draw: Callable[[ReportData], Figure]) -> Callable[[ReportData], Figure]:
        CHARTS.append(Chart(name, title, applies, draw))
        return draw

    return register


def has_bench(data: ReportData) -> bool:
    return not data.bench.empty


def has_estimate(data: ReportData) -> bool:
    return not data.estimate.empty


def has_metric(metric: str) -> Callable[[ReportData], bool]:
    return lambda data: (
        has_bench(data) and metric in data.bench and data.bench[metric].fillna(0).gt(0).any()
    )


def has_series(series: str) -> Callable[[ReportData], bool]:
    """Some run recorded the series with a value above zero (a flat zero line says nothing)."""
    return lambda data: any(
        any(v > 0 for v in ts.get(series) or []) for ts in data.timeseries.values()
    )


def has_column(metric: str) -> Callable[[ReportData], bool]:
    """Some run reported the metric at all (an offload tier that ran but never hit counts)."""
    return lambda data: (
        has_bench(data) and metric in data.bench and data.bench[metric].notna().any()
    )


def slanted(ax, fontsize: int = 8) -> None:
    """X labels at 30 degrees, anchored at their right end, so long names never overlap."""
    for label in ax.get_xticklabels():
        label.set_rotation(30)
        label.set_horizontalalignment("right")
        label.set_rotation_mode("anchor")
        label.set_fontsize(fontsize)


def percentile_dots(
    ax, bench, names: list[str], prefix: str, pcts: tuple[str, ...] = ("p50", "p90", "p99")
) -> None:
    """Percentiles as dots joined per run on a log axis: no bar whose baseline the log scale cuts."""
    markers = {"p50": "o", "p90": "s", "p99": "^"}
    for pct in pcts:
        values = [v if v and v > 0 else float("nan") for v in bench.get(f"{prefix}_{pct}", [])]
        ax.plot(range(len(names)), values, linestyle="none", marker=markers[pct], label=pct)
    for i in range(len(names)):
        points = [bench[f"{prefix}_{p}"].iloc[i] for p in pcts if f"{prefix}_{p}" in bench]
        points = [v for v in points if v and v > 0]
        if points:
            ax.vlines(i, min(points), max(points), color="#adb5bd", linewidth=1, zorder=0)
    ax.set_xticks(range(len(names)), names)
    ax.set_yscale("log")
    slanted(ax)


def column(bench, name: str, scale: float = 1.0) -> list[float]:
    """A metric per run, scaled; runs without it (missing column, None, NaN) read as 0."""
    if name not in bench:
        return [0.0] * len(bench)
    return [0.0 if v is None or v != v else v * scale for v in bench[name]]


def labels(data: ReportData) -> list[str]:
    """Optimization names, qualified by run when several runs share a report."""
    many = data.bench["run_id"].nunique() > 1
    return [
        f"{o} [{r[:6]}]" if many else o
        for o, r in zip(data.bench["optimization"], data.bench["run_id"])
    ]


def render(data: ReportData, out_dir: Path) -> list[tuple[Chart, Path]]:
    rendered = []
    for item in CHARTS:
        if not item.applies(data):
            continue
        figure = item.draw(data)
        path = out_dir / f"{item.name}.png"
        figure.savefig(path, dpi=110, bbox_inches="tight")
        rendered.append((item, path))
    return rendered


def new_figure(width: float = 8.0, height: float = 4.2, rows: int = 1, cols: int = 1):
    figure = Figure(figsize=(width, height), layout="constrained")
    axes = figure.subplots(rows, cols, squeeze=False)
    return figure, axes


def ttft_dots(ax, bench, names: list[str]) -> None:
    """TTFT p50 and p90 per run, as dots on a log axis."""
    percentile_dots(ax, bench, names, "ttft_s", ("p50", "p90"))
    mode = "modeled" if (bench["mode"] == "simulated").all() else "measured"
    ax.set_ylabel(f"TTFT (s, {mode})")
    ax.legend(fontsize=7)
