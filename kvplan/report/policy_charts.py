"""The eviction-policy trade-off chart: per policy, against the budget's share of the full
cache, the panels that have data among mean concurrency and steady output tok/s (simulated)
and perplexity and KL (real). Registered when charts.py imports this module."""

from __future__ import annotations

from matplotlib.figure import Figure

from kvplan.report.chart_registry import chart, legend_outside, new_figure
from kvplan.report.data import ReportData
from kvplan.report.policies import RUNNING, SPEED, policy_tradeoff

PANELS = (
    (RUNNING, f"{RUNNING} (simulated)"),
    (SPEED, f"{SPEED} (simulated)"),
    ("perplexity", "perplexity (real)"),
    ("KL", "KL(full || policy) (real)"),
)


def _panels(frame) -> list[tuple[str, str]]:
    """Panels with a value at two shares or more for some policy (a line needs two points)."""
    shown = []
    for column, label in PANELS:
        if column in frame:
            counts = frame.dropna(subset=[column]).groupby("policy")["budget share"].nunique()
            if (counts >= 2).any():
                shown.append((column, label))
    return shown


def has_tradeoff(data: ReportData) -> bool:
    frame = policy_tradeoff(data)
    return not frame.empty and bool(_panels(frame))


@chart(
    "policy_tradeoff",
    "Eviction policies by budget: concurrency and speed (simulated), quality (real)",
    has_tradeoff,
)
def policy_tradeoff_chart(data: ReportData) -> Figure:
    frame = policy_tradeoff(data)
    panels = _panels(frame)
    figure, axes = new_figure(width=3.6 * len(panels), height=3.6, cols=len(panels))
    palette = [f"C{i}" for i in range(10)]
    # one color per policy in every panel (panels lack different policies)
    colors = {p: palette[i % len(palette)] for i, p in enumerate(sorted(frame["policy"].unique()))}
    for ax, (column, label) in zip(axes[0], panels):
        for policy, rows in frame.dropna(subset=[column]).groupby("policy", sort=True):
            rows = rows.sort_values("budget share")
            ax.plot(
                100 * rows["budget share"],
                rows[column],
                marker="o",
                label=policy,
                color=colors[policy],
            )
        ax.set_xlabel("budget, % of the full cache")
        ax.set_title(label, fontsize=9)
        ax.grid(alpha=0.3)
    handles = {line.get_label(): line for ax in axes[0] for line in ax.get_lines()}
    legend_outside(axes[0][-1], list(handles.values()), list(handles))
    return figure
