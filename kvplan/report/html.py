"""One self-contained HTML page: charts embedded as base64 PNGs, tables, run parameters,
alerts. Every string from a results file is HTML-escaped (a model named `<script>` is text).
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path
from typing import Any

import pandas as pd

from kvplan.core.metric_registry import metric
from kvplan.report.chart_registry import Chart
from kvplan.report.data import RATIO_METRICS, ReportData, ratio_column
from kvplan.report.names import PAGE_CHARS, page_text, run_names, setting
from kvplan.report.summary import HEADING_SETTINGS, summaries
from kvplan.report.sweep_view import points_table, study_table, sweep_runs
from kvplan.report.sweep_view import study as sweep_study
from kvplan.report.tables import cell, formatted

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1320px;
       color: #212529; padding: 0 1rem; overflow-wrap: anywhere; }
.summary { background: #f8f9fa; border-left: 4px solid #1971c2; padding: 0.5rem 1rem; margin: 0.5rem 0; }
.summary h3 { font-size: 1rem; margin: 0.3rem 0; } .summary ul { margin: 0.2rem 0; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2rem; border-bottom: 1px solid #dee2e6; }
h3 .muted { font-weight: normal; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.8rem; margin: 0.5rem 0 1rem; max-width: 100%; }
th, td { border: 1px solid #dee2e6; padding: 0.25rem 0.5rem; text-align: right; overflow-wrap: normal; }
th { vertical-align: bottom; }
td { overflow-wrap: break-word; } td:first-child { overflow-wrap: anywhere; }
th { background: #f1f3f5; } td:first-child, th:first-child { text-align: left; }
figure { margin: 1rem 0 2rem; } figure img { max-width: 100%; border: 1px solid #e9ecef; }
figcaption { color: #495057; font-size: 0.9rem; margin-bottom: 0.3rem; }
.alert { background: #fff4e6; border-left: 4px solid #f08c00; padding: 0.4rem 0.8rem; margin: 0.3rem 0; }
.ok { background: #ebfbee; border-left: 4px solid #2b8a3e; padding: 0.4rem 0.8rem; }
.muted { color: #868e96; font-size: 0.85rem; }
/* a narrow window (a laptop's half screen): smaller table text and padding, so a table of
   14 headline columns fits without scrolling sideways */
@media (max-width: 1100px) {
  body { margin: 1rem auto; padding: 0 0.5rem; }
  table { font-size: 0.64rem; }
  th, td { padding: 0.15rem 0.2rem; }
}
"""  # noqa: E501 (the page's CSS, byte for byte as the report writes it)

RUN_PARAMS = (
    "model",
    "gpu",
    "tp",
    "kv_format",
    "kv_dtype",
    "workload",
    "num_requests",
    "max_model_len",
    "block_size",
    "gpu_memory_utilization",
    "kv_cache_gib",
    "scheduler_max_num_seqs",
    "scheduler_max_num_batched_tokens",
    "scheduler_preemption",
    "seed",
    "kvplan_version",
)


def _esc(value: Any) -> str:
    """Escaped for HTML; a word (a name) longer than PAGE_CHARS cut with a note of its
    length, and the whole text past TEXT_CHARS."""
    text = LONG_WORD.sub(lambda word: page_text(word.group(0)), str(value))
    return html.escape(page_text(text, TEXT_CHARS), quote=True)


TEXT_CHARS = 4000  # a heading, sentence or alert; a table cell is cut at PAGE_CHARS
LONG_WORD = re.compile(rf"\S{{{PAGE_CHARS + 1},}}")


def _table(frame: pd.DataFrame, first: tuple[str, ...] = (), drop: tuple[str, ...] = ()) -> str:
    """A formatted table (units, percentages, ratios; the important columns first)."""
    table = formatted(frame, first, drop).to_html(index=False, escape=True, border=0, na_rep="")
    return f'<div class="scroll">{table}</div>'


# The page's comparison table: the throughput and concurrency ratios, then the headline
# metrics, under their registered labels (comparison.csv keeps every column).
HEADLINE_RATIOS = ("served_output_tokens_per_s", "running_mean")
HEADLINE = (
    "served_output_tokens_per_s",
    "token_states_share",
    "waste",
    "kv_cache_usage_mean",
    "prefix_hit_rate",
    "load_imbalance",
    "ttft_s_p50",
    "ttft_s_p90",
    "tpot_s_p50",
    "e2e_s_p90",
    "preemptions",
    "requests_rejected",
)
COMPARISON_FIRST = (
    "optimization",
    *(metric(name).ratio_label for name in HEADLINE_RATIOS),
    *(metric(name).column_label for name in HEADLINE),
)
VIEW_NAMES = {ratio_column(name): metric(name).ratio_label for name in RATIO_METRICS}
ESTIMATE_FIRST = (
    "model",
    "gpu",
    "tp",
    "kv_dtype",
    "context",
    "batch",
    "verdict",
    "max_concurrency",
    "seq_kv_bytes",
    "kv_budget_bytes_per_gpu",
    "kv_cache_tokens",
    "max_batch_at_context",
)
ESTIMATE_ROWS = 20


def _summary(data: ReportData) -> list[str]:
    parts = ["<h2>Summary</h2>"]
    for heading, lines in summaries(data):
        items = "".join(f"<li>{_esc(line)}</li>" for line in lines)
        parts.append(f'<div class="summary"><h3>{_esc(heading)}</h3><ul>{items}</ul></div>')
    return parts if len(parts) > 1 else []


def _comparison(comparison: pd.DataFrame, data: ReportData) -> list[str]:
    """The sweep's points as one table (a column per axis that varies), then one table per
    other run, titled by its model, GPU, workload and what sets it apart from the other
    runs; the headline columns only (comparison.csv has every column)."""
    view = comparison.rename(columns=VIEW_NAMES)
    parts = []
    swept = set(sweep_runs(data))
    if swept:
        table = points_table(view, data, COMPARISON_FIRST)
        axes = [c for c in table if c not in COMPARISON_FIRST]
        parts += [
            f"<h3>Sweep points ({view['run'].isin(swept).sum()})</h3>",
            f'<p class="muted">one row per point, named by the axes that vary: '
            f"{_esc(', '.join(axes) or 'none')}</p>",
            _table(table, (*axes, *COMPARISON_FIRST)),
        ]
    others = [run for run in dict.fromkeys(view["run"]) if run not in swept]
    names = run_names(data.params, others, stated=HEADING_SETTINGS)
    for run_id, rows in view[view["run"].isin(others)].groupby("run", sort=False):
        params = data.params.get(run_id, {})
        name = names.get(run_id)
        parts.append(
            f"<h3>{_esc(params.get('model', ''))} on {_esc(params.get('gpu', ''))}, "
            f"{_esc(setting(params, 'workload') or '')}{_esc(f', {name}') if name else ''} "
            f'<span class="muted">run {_esc(run_id)}</span></h3>'
        )
        columns = [c for c in COMPARISON_FIRST if c in rows]
        shown = rows[columns].copy()
        # the baseline is named in its row, not given a column of its own (a narrow page)
        shown["optimization"] = [
            f"{name} (baseline)" if base else name
            for name, base in zip(rows["optimization"], rows["baseline"])
        ]
        parts.append(_table(shown, COMPARISON_FIRST))
    return parts


def _estimates(data: ReportData) -> list[str]:
    shown = data.estimate.drop(
        columns=["run_id", "baseline", "mode", "source", "optimization"], errors="ignore"
    )
    fits = shown[shown["verdict"] == "fits"] if "verdict" in shown else shown
    sample = (
        fits.sort_values("context", ascending=False).head(ESTIMATE_ROWS)
        if "context" in fits
        else fits.head(ESTIMATE_ROWS)
    )
    return [
        "<h2>Estimates</h2>",
        f'<p class="muted">{len(shown):,} configurations; below, the {len(sample)} '
        "longest-context ones that fit; "
        'every row is in <a href="estimates.csv">estimates.csv</a></p>',
        _table(sample[[c for c in ESTIMATE_FIRST if c in sample]], ESTIMATE_FIRST),
    ]


def _run_parameters(data: ReportData) -> list[str]:
    """The settings every run shares, once; then a table of those that differ per run."""
    rows = []
    for run_id, params in data.params.items():
        workload = params.get("workload")
        described = dict(params)
        if isinstance(workload, dict):
            described["workload"] = ", ".join(f"{k}={v}" for k, v in workload.items())
        rows.append({key: described.get(key) for key in RUN_PARAMS})
    if not rows:
        return []
    frame = pd.DataFrame(rows, index=list(data.params)).dropna(axis=1, how="all")
    shared = [c for c in frame if frame[c].astype(str).nunique() == 1]
    common = ", ".join(f"{c.replace('_', ' ')} {cell(c, frame[c].iloc[0])}" for c in shared)
    parts = [f'<p class="muted">every run: {_esc(common)}</p>'] if common else []
    differing = frame.drop(columns=shared)
    if len(frame) > 1 and not differing.empty:
        differing.insert(0, "run", list(differing.index))
        parts.append(_table(differing.reset_index(drop=True)))
    elif len(frame) > 1:
        parts.append(f'<p class="muted">runs: {_esc(", ".join(frame.index))}</p>')
    return parts


def _image(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def build_page(
    data: ReportData,
    comparison: pd.DataFrame,
    alerts: list[dict[str, str]],
    charts: list[tuple[Chart, Path]],
    files: list[str],
) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>kvplan report</title>",
        f"<style>{STYLE}</style>",
        "</head>",
        "<body>",
        "<h1>kvplan report</h1>",
        f'<p class="muted">from {", ".join(_esc(s) for s in data.sources)}</p>',
    ]
    parts += _summary(data)
    study, _, at_top = sweep_study(data)
    if study:  # a sweep's answer comes first: its points follow in the comparison
        parts += [
            "<h2>Study</h2>",
            '<p class="muted">per group of sweep settings: the highest request rate whose '
            "p90 TTFT stays within the SLO, the first rate that crosses it, and the cost per "
            "million output "
            "tokens where the sweep gave a GPU price; a rate marked top of the grid is the highest "
            "the sweep tried: the setup's limit lies above it</p>",
            _table(study_table(study, at_top)),
        ]
    if not data.bench.empty:
        parts += [
            "<h2>Comparison</h2>",
            '<p class="muted">ratios are to each run\'s baseline (its first optimization); '
            "shares are time-averaged fractions of the KV pool; latencies are modeled in "
            "simulated mode "
            "and measured in real mode</p>",
            *_comparison(comparison, data),
        ]
        parts.append("<h2>Alerts</h2>")
        if alerts:
            parts += [
                f'<div class="alert"><b>{_esc(a["alert"])}</b> {_esc(a["run"])}: '
                f"{_esc(a['detail'])}</div>"
                for a in alerts
            ]
        else:
            parts.append(
                '<div class="ok">no alerts: KV usage, prefix hit rate, preemptions and '
                "prefix-cache "
                "evictions are within the usual thresholds</div>"
            )
    if not data.quality.empty:
        columns = [
            c
            for c in (
                "optimization",
                "policy",
                "kv_format",
                "kv_budget",
                "kv_bytes_per_seq",
                "kv_bytes_vs_base",
                "max_concurrency",
                "perplexity",
                "perplexity_vs_base",
                "kl_mean",
                "greedy_agreement",
            )
            if c in data.quality
        ]
        parts += [
            "<h2>Memory and quality</h2>",
            '<p class="muted">measured on a real model: perplexity of the text, KL(full || '
            "optimized), "
            "greedy agreement with the full cache</p>",
            _table(
                data.quality[columns].rename(
                    columns={
                        "kv_bytes_vs_base": "KV bytes vs base",
                        "perplexity_vs_base": "perplexity change",
                    }
                )
            ),
        ]
    from kvplan.report.policies import COLUMNS, policy_tradeoff

    tradeoff = policy_tradeoff(data)
    if not tradeoff.empty:
        parts += [
            "<h2>Eviction policies by budget</h2>",
            '<p class="muted">the budget as a share of the full cache: of the workload\'s mean '
            "sequence "
            "(simulated: KV held, time-averaged, and speed at the target GPU) and of the quality "
            "text "
            "(real: perplexity, KL(full || policy), greedy agreement)</p>",
            _table(tradeoff, COLUMNS),
        ]
    if charts:
        parts.append("<h2>Charts</h2>")
        for item, path in charts:
            note = item.note(data) if item.note else ""
            parts.append(
                f'<figure id="{_esc(item.name)}"><figcaption>{_esc(item.title)}</figcaption>'
                + (f'<p class="muted">{_esc(note)}</p>' if note else "")
                + f'<img src="{_image(path)}" alt="{_esc(item.title)}"></figure>'
            )
    if not data.estimate.empty:
        parts += _estimates(data)
    if not data.bench.empty:
        parts += ["<h2>Runs</h2>", *_run_parameters(data)]
    parts += (
        ["<h2>Files</h2>", "<ul>"]
        + [f'<li><a href="{_esc(f)}">{_esc(f)}</a></li>' for f in files]
        + ["</ul>"]
    )
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"
