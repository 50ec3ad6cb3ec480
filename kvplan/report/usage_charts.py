"""KV cache usage and the running and waiting requests over time, as small multiples: one
panel per run of a bench comparison (a line per optimization), or per group of a sweep's
settings (a line per value of its first axis, the rate, colored from low to high). Lines
that mean the same in every panel (an optimization, a rate) keep one color throughout.

Sixteen series on one pair of axes read as a tangle, so a panel holds at most MAX_LINES
(the extremes of its axis and evenly spaced values between) and the chart at most
MAX_PANELS; what it leaves out is named in the figure and on the page, with the results
files that hold every series. Registered when charts.py imports this module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from kvplan.report.chart_registry import (
    chart,
    has_series,
    label,
    new_figure,
    series_styles,
)
from kvplan.report.data import ReportData
from kvplan.report.names import clip, described, members, run_names
from kvplan.report.sweep_view import sweep_axes

MAX_PANELS = 6
MAX_LINES = 6
COLUMNS = 2  # panels side by side
Key = tuple[str, str]  # a series: (run id, optimization)


@dataclass
class Panel:
    title: str
    lines: list[tuple[str, Key]] = field(default_factory=list)  # (legend label, series)


@dataclass
class Layout:
    panels: list[Panel]
    numeric: bool  # the lines are values of a numeric sweep axis (colored low to high)
    total: int  # series with data
    left_out: int  # of those, not drawn


def _spread(items: list[Any], count: int) -> list[Any]:
    """`count` of `items`, the first and last among them, the rest evenly spaced."""
    if len(items) <= count:
        return items
    picks = sorted({round(i * (len(items) - 1) / (count - 1)) for i in range(count)})
    return [items[i] for i in picks]


def _sweep_panels(data: ReportData, keys: list[Key]) -> tuple[dict[str, Panel], bool]:
    """A sweep's series by the settings other than its first axis; a line per value of it."""
    runs = list(dict.fromkeys(run for run, _ in keys))
    axes = sweep_axes(data.params, runs)
    line_axis = axes[0] if axes else None
    optimizations = len({optimization for _, optimization in keys}) > 1

    def sweep(run: str) -> dict[str, Any]:
        return data.params[run].get("sweep") or {}

    def line_value(key: Key) -> Any:
        return sweep(key[0]).get(line_axis) if line_axis else key[1]

    numeric = line_axis is not None and all(isinstance(line_value(k), (int, float)) for k in keys)
    ordered = sorted(keys, key=line_value) if numeric else keys
    panels: dict[str, Panel] = {}
    for key in ordered:
        parts = [described(axis, sweep(key[0]).get(axis)) for axis in axes[1:]]
        if optimizations and line_axis:
            parts.append(key[1])
        title = clip(", ".join(parts))
        legend = described(line_axis, line_value(key)) if line_axis else key[1]
        panels.setdefault(title, Panel(title)).lines.append((clip(legend), key))
    return panels, numeric


def layout(data: ReportData) -> Layout:
    """The panels and lines drawn, and how many series are left out."""
    keys = [key for key, series in data.timeseries.items() if series.get("t")]
    swept = [key for key in keys if "sweep" in data.params.get(key[0], {})]
    panels, numeric = _sweep_panels(data, swept) if swept else ({}, False)
    others = [key for key in keys if key not in swept]
    # a run's panel is titled by what sets it apart from every other run drawn (the sweep's
    # points too); beside other panels, by its id where no setting does
    names = run_names(
        data.params, list(dict.fromkeys(run for run, _ in keys)), shortest=True,
        members=members(data.bench),
    )  # fmt: skip
    alone = len({run for run, _ in others}) == 1 and not swept
    for run, optimization in others:
        title = clip(names.get(run) or ("" if alone else f"run {run[:6]}"))
        panels.setdefault(f"run:{run}", Panel(title)).lines.append(
            (clip(optimization), (run, optimization))
        )
    shown = [
        Panel(panel.title, _spread(panel.lines, MAX_LINES))
        for panel in list(panels.values())[:MAX_PANELS]
    ]
    drawn = sum(len(panel.lines) for panel in shown)
    return Layout(shown, numeric and not others, len(keys), len(keys) - drawn)


def note(data: ReportData) -> str:
    """What the chart leaves out and where it is, for the page and the figure."""
    plan = layout(data)
    if not plan.left_out:
        return ""
    files = ", ".join(data.sources)
    return (
        f"{plan.total - plan.left_out} of {plan.total} runs' series drawn (at most "
        f"{MAX_PANELS} panels of {MAX_LINES} lines, each panel's lowest and highest "
        f"value and evenly spaced ones between); every run's series is in its record's "
        f"timeseries in {files}, and its time-averaged {label('kv_cache_usage_mean')} in "
        "the comparison table and comparison.csv"
    )


def _colors(plan: Layout) -> dict[str, Any]:
    """One color per legend label across the panels: low to high along a numeric axis."""
    legends = list(dict.fromkeys(text for panel in plan.panels for text, _ in panel.lines))
    if plan.numeric:
        ramp = colormaps["viridis"]
        return {text: ramp(0.85 * i / max(1, len(legends) - 1)) for i, text in enumerate(legends)}
    return {text: style["color"] for text, style in zip(legends, series_styles(len(legends)))}


@chart(
    "kv_usage_over_time",
    "KV cache usage, running (solid) and waiting (dashed) requests over time, a panel per "
    "run (or per group of a sweep's settings)",
    has_series("kv_cache_usage"),
    note,
)
def kv_usage_over_time(data: ReportData) -> Figure:
    plan = layout(data)
    count = len(plan.panels)
    columns = min(COLUMNS, count)
    rows = math.ceil(count / columns)
    figure, axes = new_figure(
        width=10 if columns == 1 else 12, height=5.2 if rows == 1 else 4.4 * rows,
        rows=2 * rows, cols=columns,
    )  # fmt: skip
    colors = _colors(plan)
    first_usage, first_queue = axes[0][0], axes[1][0]
    for index in range(rows * columns):
        usage = axes[2 * (index // columns)][index % columns]
        queue = axes[2 * (index // columns) + 1][index % columns]
        if index >= count:
            usage.set_visible(False)
            queue.set_visible(False)
            continue
        panel = plan.panels[index]
        # every panel on the same scales, so panels compare
        queue.sharex(first_usage)
        if index:
            usage.sharex(first_usage)
            queue.sharey(first_queue)
        for text, key in panel.lines:
            series = data.timeseries[key]
            usage.plot(
                series["t"],
                [100 * u for u in series["kv_cache_usage"]],
                linewidth=1,
                color=colors[text],
                label=text,
            )
            for kind, style in (("running", "-"), ("waiting", "--")):
                if series.get(kind):
                    queue.plot(series["t"], series[kind], style, linewidth=1, color=colors[text])
        if panel.title:
            usage.set_title(panel.title, fontsize=9)
        usage.set_ylim(0, 105)
        usage.tick_params(labelbottom=False)
        if index % columns == 0:
            usage.set_ylabel(label("kv_cache_usage_mean", "%"))
            queue.set_ylabel("requests")
        queue.set_xlabel("time (s)")
    handles = [Line2D([], [], color=color, linewidth=1.5) for color in colors.values()]
    kinds = [  # black: no series is drawn in it
        Line2D([], [], color="black", linewidth=1),
        Line2D([], [], color="black", linewidth=1, linestyle="--"),
    ]
    figure.legend(
        [*handles, *kinds],
        [*colors, "running", "waiting"],
        loc="outside right upper",
        fontsize=7,
        frameon=False,
    )
    if plan.left_out:
        figure.suptitle(
            f"{plan.total - plan.left_out} of {plan.total} runs drawn; the page says where "
            "the rest are",
            fontsize=8,
        )
    return figure
