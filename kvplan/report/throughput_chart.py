"""The throughput chart: each optimization's steady-state output tokens/s (THROUGHPUT, the
figure the bench table's ratios read) with the step model's held-out error band, and above
each bar (over its error bar, never across it) its ratio to its run's baseline where the
run compared several optimizations. Registered when charts.py imports this module."""

from __future__ import annotations

import math
from numbers import Real

import numpy as np
from matplotlib.figure import Figure

from kvplan.report.chart_registry import (
    ABOVE_BAR,
    bar_panels,
    categories,
    chart,
    column,
    has_bench,
    label,
    labels,
    legend_outside,
)
from kvplan.report.data import THROUGHPUT, ReportData

BASELINE_TEXT = "baseline"


def _number(value: object) -> float:
    """A figure as a float; a missing one (None, NaN) as NaN."""
    return float(value) if isinstance(value, Real) else math.nan


def ratio_texts(bench) -> dict[int, str]:
    """Per bench row (its position), the text above its bar: its throughput over its run's
    baseline's, and "baseline" on the baseline itself. A run of one optimization (a sweep
    point) gets none: it is its own baseline, and a ratio to itself says nothing."""
    texts: dict[int, str] = {}
    if THROUGHPUT not in bench:
        return texts
    position = {index: i for i, index in enumerate(bench.index)}
    for _, group in bench.groupby("run_id", sort=False):
        if len(group) < 2:
            continue
        # the baseline the run declares, else its first optimization (as the bench table)
        declared = group.index[group["baseline"].eq(True)] if "baseline" in group else []
        base_index = declared[0] if len(declared) else group.index[0]
        base = _number(bench.at[base_index, THROUGHPUT])
        if not base > 0:  # none recorded (NaN) or nothing served: no ratio to it
            continue
        for index in group.index:
            value = _number(bench.at[index, THROUGHPUT])
            if index == base_index:
                texts[position[index]] = BASELINE_TEXT
            elif value == value:
                texts[position[index]] = f"{value / base:.2f}x"
    return texts


@chart(
    "throughput",
    "Steady-state output throughput per optimization (bars) with the step model's held-out "
    "error band; above each bar, its ratio to its run's baseline where the run compared "
    "several optimizations",
    has_bench,
)
def throughput(data: ReportData) -> Figure:
    bench = data.bench
    names = labels(data)
    figure, axes = bar_panels(len(names), 1, width=8, height=3.6)
    ax = axes[0][0]
    values = np.asarray(column(bench, THROUGHPUT), dtype=float)
    x = np.arange(len(names))
    ax.bar(x, values, color="#1971c2")
    tops = values
    if "throughput_error_band" in bench and bench["throughput_error_band"].notna().any():
        # the step model's held-out error on output tok/s for this GPU family and engine
        error = bench["throughput_error_band"].fillna(0.0).to_numpy() * values
        ax.errorbar(
            x,
            values,
            yerr=error,
            fmt="none",
            ecolor="#495057",
            capsize=3,
            label="held-out error band of the modeled figure",
        )
        tops = values + error
        legend_outside(ax)
    texts = ratio_texts(bench)
    for index, text in texts.items():
        ax.annotate(
            text,
            (x[index], tops[index]),  # above the error bar's cap, never across it
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=8,
            gid=ABOVE_BAR,  # render stands them up where they crowd, and fits them inside
        )
    if not texts:
        ax.set_title(
            "one optimization per run: no ratio to a baseline (each run is its own)",
            fontsize=8,
            loc="left",
        )
    ax.set_ylabel(label(THROUGHPUT))
    categories(ax, names)
    return figure
