"""The serving-fidelity chart: simulated against measured vLLM / SGLang runs, the operators
alone (no engine overhead) beside the operator step model held out (leave one model out);
benchmarks/serving_fidelity.py writes the records. Registered when charts.py imports this
module."""

from __future__ import annotations

from matplotlib.figure import Figure

from kvplan.report.chart_registry import chart, label, new_figure
from kvplan.report.data import ReportData
from kvplan.report.log_axes import labelled_log


def has_fidelity(data: ReportData) -> bool:
    return not data.fidelity.empty


# vllm bench's figures under the labels of the run metrics they measure (its output
# throughput is tokens over the makespan); `vllm bench latency`'s batch time is no run metric
FIDELITY_METRICS = (
    ("output_throughput", label("output_tokens_per_s")),
    ("mean_tpot_ms", label("tpot_s_mean", "ms")),
    ("mean_ttft_ms", label("ttft_s_mean", "ms")),
    ("median_tpot_ms", label("tpot_s_p50", "ms")),
    ("median_ttft_ms", label("ttft_s_p50", "ms")),
    ("latency_avg_s", "batch latency (s)"),
)


@chart(
    "serving_fidelity",
    "Simulated vs measured vLLM / SGLang runs: the operators alone and the operator step "
    "model held out (leave one model out, fitted from scratch)",
    has_fidelity,
)
def serving_fidelity(data: ReportData) -> Figure:
    frame = data.fidelity
    shown = [
        (m, figure_name) for m, figure_name in FIDELITY_METRICS if (frame["metric"] == m).any()
    ]
    figure, axes = new_figure(width=4.0 * len(shown), height=4.0, cols=len(shown))
    for ax, (metric, figure_name) in zip(axes[0], shown):
        rows = frame[frame["metric"] == metric]
        for predicted, color, name in (
            ("zero_overhead", "#adb5bd", "operators, no engine overhead"),
            ("held_out_model", "#1c7ed6", "step model, model held out"),
        ):
            ax.scatter(rows["measured"], rows[predicted], s=12, color=color, label=name)
        low = float(
            min(rows["measured"].min(), rows[["zero_overhead", "held_out_model"]].min().min())
        )
        high = float(
            max(rows["measured"].max(), rows[["zero_overhead", "held_out_model"]].max().max())
        )
        ax.plot([low, high], [low, high], color="black", linewidth=1)
        labelled_log(ax, "xy")
        ax.set_xlabel(f"measured {figure_name}")
        ax.set_ylabel(f"kvplan {figure_name}")
        ax.legend(fontsize=7)
    return figure
