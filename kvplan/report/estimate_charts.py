"""The capacity estimate's charts: KV memory and concurrency against context length, and
which model x GPU x dtype setups fit. Registered when charts.py imports this module, at
their place in the report's order."""

from __future__ import annotations

from matplotlib.figure import Figure

from kvplan import GIB
from kvplan.report.chart_registry import chart, has_estimate, new_figure
from kvplan.report.data import ReportData
from kvplan.report.log_axes import context_axis, labelled_log

VERDICT_COLORS = {"fits": "#2b8a3e", "kv-does-not-fit": "#f59f00", "weights-do-not-fit": "#c92a2a"}


def _estimate_groups(data: ReportData, keys: list[str], limit: int = 4):
    groups = list(data.estimate.groupby(keys, sort=False))
    return groups[:limit]


@chart(
    "kv_vs_context",
    "KV memory per GPU vs context length, per KV dtype, against the GPU's KV budget",
    has_estimate,
)
def kv_vs_context(data: ReportData) -> Figure:
    groups = _estimate_groups(data, ["model", "gpu", "tp", "batch"])
    figure, axes = new_figure(
        width=5 * min(2, len(groups)),
        height=3.8 * ((len(groups) + 1) // 2),
        rows=(len(groups) + 1) // 2,
        cols=min(2, len(groups)),
    )
    for ax, ((model, gpu, tp, batch), frame) in zip(axes.flat, groups):
        for kv_dtype, rows in frame.groupby("kv_dtype", sort=False):
            rows = rows.sort_values("context")
            ax.plot(
                rows["context"],
                rows["seq_kv_bytes"] * batch / GIB,
                marker="o",
                markersize=3,
                label=kv_dtype,
            )
        budget = frame["kv_budget_bytes_per_gpu"].iloc[0] / GIB
        ax.axhline(
            budget, color="black", linestyle="--", linewidth=1, label=f"KV budget {budget:.1f} GiB"
        )
        context_axis(ax)
        labelled_log(ax)
        ax.set_title(f"{model} on {tp} x {gpu}, batch {batch}", fontsize=9)
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("KV per GPU (GiB)")
        ax.legend(fontsize=7)
    return figure


@chart(
    "concurrency_vs_context",
    "Maximum concurrency vs context length per GPU, one panel per KV dtype",
    has_estimate,
)
def concurrency_vs_context(data: ReportData) -> Figure:
    dtypes = list(dict.fromkeys(data.estimate["kv_dtype"]))[:3]
    figure, axes = new_figure(width=4.2 * len(dtypes) + 2.2, height=3.8, cols=len(dtypes))
    for ax, kv_dtype in zip(axes[0], dtypes):
        frame = data.estimate[data.estimate["kv_dtype"] == kv_dtype]
        for (model, gpu, tp), rows in list(frame.groupby(["model", "gpu", "tp"], sort=False))[:10]:
            rows = rows.drop_duplicates("context").sort_values("context")
            ax.plot(
                rows["context"],
                rows["max_concurrency"].clip(lower=1e-2),
                marker="o",
                markersize=3,
                label=f"{model} {tp}x{gpu}",
            )
        context_axis(ax)
        labelled_log(ax)
        ax.axhline(1, color="grey", linewidth=0.8)
        ax.set_title(f"KV {kv_dtype}", fontsize=9)
        ax.set_xlabel("context (tokens)")
    axes[0][0].set_ylabel("max concurrency (requests)")
    axes[0][-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    return figure


@chart(
    "fit_matrix",
    "Fit matrix: model x GPU x TP at the longest context swept (largest fitting context noted)",
    has_estimate,
)
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
    ax.set_xticks(
        [x + 0.5 for x in range(len(targets))], [f"{tp} x {gpu}" for gpu, tp in targets], fontsize=8
    )
    ax.set_yticks([y + 0.5 for y in range(len(models))], models, fontsize=8)
    ax.set_title(
        f"KV {first_dtype}; green fits, amber KV does not fit, red weights do not fit", fontsize=9
    )
    return figure


def _rect(x: int, y: int, color: str):
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), 1, 1, color=color, ec="white")
