"""A sweep's p90 TTFT against the request rate, one line per group of the other settings,
registered when charts.py imports this module. Groups often coincide (two allocators that
never fill the pool give the same TTFT): each line has its own marker and dash pattern and
a small sideways offset, so a line drawn over another stays visible."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from kvplan.report.chart_registry import chart, legend_outside, new_figure
from kvplan.report.data import ReportData
from kvplan.report.log_axes import labelled_log
from kvplan.report.names import clip

MAX_LINES = 12
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*", "h", "p")
DASHES = ("-", "--", "-.", ":")
# each line's rates are moved by up to this share of the rate, centred on the true one
SPREAD = 0.08


def has_study(data: ReportData) -> bool:
    return any("study" in r.params for r in data.records)


def study_lines(data: ReportData) -> dict[str, list[tuple[float, float]]]:
    """(rate, p90 TTFT) per group of the sweep settings other than the rate, each group
    named by the settings that vary between groups ("gpu l4, optimization paged")."""
    points = [
        (record.params["sweep"], record.metrics.get("ttft_s_p90") or 0.0)
        for record in data.records
        if "rate" in (record.params.get("sweep") or {})
    ]
    keys = list(dict.fromkeys(k for sweep, _ in points for k in sweep if k != "rate"))
    varying = [k for k in keys if len({str(sweep.get(k)) for sweep, _ in points}) > 1]
    groups: dict[str, list[tuple[float, float]]] = {}
    for sweep, ttft in points:
        label = ", ".join(f"{k} {sweep.get(k)}" for k in varying) or "every setting"
        groups.setdefault(clip(label), []).append((float(sweep["rate"]), ttft))
    return groups


@chart(
    "study_ttft_vs_rate",
    "Sweep: p90 TTFT against request rate per setting, with the SLO",
    has_study,
)
def study_ttft_vs_rate(data: ReportData) -> Figure:
    from kvplan.report.data import study_rows

    _, slo = study_rows(data)
    groups = list(study_lines(data).items())[:MAX_LINES]
    figure, axes = new_figure(width=9, height=4.2)
    ax = axes[0][0]
    for index, (label, points) in enumerate(groups):
        points.sort()
        shift = 1 + SPREAD * (index / max(1, len(groups) - 1) - 0.5) if len(groups) > 1 else 1
        ax.plot(
            [rate * shift for rate, _ in points],
            [max(ttft, 1e-3) for _, ttft in points],
            marker=MARKERS[index % len(MARKERS)],
            markersize=5,
            markerfacecolor="none",
            linestyle=DASHES[index % len(DASHES)],
            linewidth=1.2,
            label=label,
        )
    if slo:
        ax.axhline(slo, color="black", linestyle="--", linewidth=1, label=f"SLO {slo:g} s")
    rates = sorted({rate for _, points in groups for rate, _ in points})
    if rates and rates[0] > 0 and rates[-1] >= 4 * rates[0]:  # a geometric grid: even steps
        ax.set_xscale("log", base=2)
        ax.set_xticks(rates, [f"{rate:g}" for rate in rates])
        ax.xaxis.set_minor_formatter(NullFormatter())
    labelled_log(ax)
    ax.set_xlabel("request rate (req/s; lines offset slightly sideways to stay visible)")
    ax.set_ylabel("p90 TTFT (s)")
    legend_outside(ax)
    return figure
