"""`kvplan plan`'s candidates: what each deployment costs against the rate it holds within
the SLO, with the Pareto front (no other candidate both cheaper and holding more) drawn and
the winner marked. Registered when charts.py imports this module."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from kvplan.report.chart_registry import chart, new_figure
from kvplan.report.data import ReportData


def has_plan(data: ReportData) -> bool:
    return (
        not data.plan.empty and (data.plan.get("gpus", pd.Series(dtype=float)).fillna(0) > 0).any()
    )


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (cost, capacity) points no other point beats on both: cheaper or as cheap, and
    holding more or as much. Sorted by cost."""
    front: list[tuple[float, float]] = []
    for cost, capacity in sorted(points, key=lambda p: (p[0], -p[1])):
        if not front or capacity > front[-1][1]:
            front.append((cost, capacity))
    return front


@chart(
    "plan_pareto",
    "Deployments: cost against the rate each holds within the SLO (Pareto front)",
    has_plan,
)
def plan_pareto(data: ReportData) -> Figure:
    frame = data.plan[data.plan["gpus"].fillna(0) > 0]
    priced = "usd_per_hour" in frame and frame["usd_per_hour"].notna().all()
    x_column, x_label = ("usd_per_hour", "$ per hour") if priced else ("gpus", "GPUs")
    figure, axes = new_figure(width=7.5, height=4.5)
    ax = axes[0][0]
    for gpu, rows in frame.groupby("gpu"):
        ax.scatter(rows[x_column], rows["headroom_rps"], s=24, label=str(gpu))
    front = pareto_front(
        list(zip(frame[x_column].astype(float), frame["headroom_rps"].astype(float)))
    )
    ax.plot(
        [p[0] for p in front],
        [p[1] for p in front],
        color="black",
        linewidth=1,
        label="Pareto front",
    )
    winner = frame[frame.get("winner", 0) == 1]
    if not winner.empty:
        ax.scatter(
            winner[x_column],
            winner["headroom_rps"],
            s=120,
            facecolors="none",
            edgecolors="red",
            linewidths=1.5,
            label="winner",
        )
    rate = float(frame["rate_rps"].iloc[0]) if "rate_rps" in frame else None
    if rate:
        ax.axhline(
            rate, color="#868e96", linestyle="--", linewidth=1, label=f"target {rate:g} req/s"
        )
    ax.set_xlabel(x_label)
    ax.set_ylabel("rate held within the SLO (req/s)")
    ax.legend(fontsize=7)
    return figure
