"""The answer first: a few sentences per study that open the report page, e.g.
"paged holds 2.0x the running requests of contiguous-oracle at equal memory; prefix
caching saves 38% of prefill on this workload". Each sentence reads figures the results
already hold (no new metric is computed here beyond ratios of recorded ones)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from kvplan.bench.mode import Mode, record_mode
from kvplan.report.alerts import ALL_TIERS, hit_rate
from kvplan.report.data import THROUGHPUT, ReportData
from kvplan.report.names import page_text, run_names
from kvplan.report.sweep_view import study, study_sentences, sweep_axes, sweep_runs


def summaries(data: ReportData) -> list[tuple[str, list[str]]]:
    """(heading, sentences) per study: each bench run, the quality table, the estimates, a
    sweep (its points are summarized together, not one box each)."""
    found: list[tuple[str, list[str]]] = []
    rows, slo, at_top = study(data)
    swept = set(sweep_runs(data)) if rows else set()
    if not data.bench.empty:
        names = run_names(
            data.params, [r for r in data.params if r not in swept], stated=HEADING_SETTINGS
        )
        for run_id, group in data.bench.groupby("run_id", sort=False):
            if run_id in swept:
                continue
            found.append(
                _bench(
                    run_id,
                    group.reset_index(drop=True),
                    data.params.get(run_id, {}),
                    names.get(run_id, ""),
                )
            )
    if not data.quality.empty:
        found.append(("Memory and quality", _quality(data.quality)))
    if not data.estimate.empty:
        found.append(("Estimates", _estimates(data.estimate)))
    if rows:
        found.append(("Sweep", study_sentences(rows, slo, at_top) + _overloaded_points(data)))
    return [(heading, lines) for heading, lines in found if lines]


def _base(group: pd.DataFrame) -> pd.Series:
    marked = group[group["baseline"]]
    return marked.iloc[0] if len(marked) else group.iloc[0]


def _rate(value: float) -> str:
    return f"{value:,.2f}" if abs(value) < 10 else f"{value:,.1f}"


def overload(row: pd.Series | dict[str, Any]) -> str | None:
    """ "overloaded: served X req/s of Y offered; this setup sustains about Z req/s" for a run
    whose arrivals outpace what it serves (the figures bench records for it)."""
    if row.get("overloaded") is not True:
        return None
    served, offered = (
        _known(row.get("served_requests_per_s")),
        _known(row.get("offered_requests_per_s")),
    )
    sustained = _known(row.get("sustainable_requests_per_s"))
    if served is None or offered is None:
        return "overloaded: requests arrive faster than this setup serves them"
    text = f"overloaded: served {_rate(served)} req/s of {_rate(offered)} offered"
    if sustained is not None:
        text += f"; this setup sustains about {_rate(sustained)} req/s"
    return text


def _known(value: Any) -> float | None:
    """A recorded number; None where the run recorded none (null, NaN, missing)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        return float(value)
    return None


def _overloaded_points(data: ReportData) -> list[str]:
    """The sweep points whose arrivals outpaced their service, named by their axes."""
    runs = sweep_runs(data)
    axes = sweep_axes(data.params, runs)
    lines = []
    for _, row in data.bench[data.bench["run_id"].isin(runs)].iterrows():
        said = overload(row)
        if said:
            sweep = data.params[row["run_id"]].get("sweep") or {}
            where = ", ".join(f"{k} {page_text(sweep.get(k))}" for k in axes)
            lines.append(f"{where or row['optimization']}: {said}")
    if len(lines) > SHOWN_POINTS:
        lines = lines[:SHOWN_POINTS] + [f"{len(lines) - SHOWN_POINTS} more points overloaded"]
    return lines


SHOWN_POINTS = 5
HEADING_SETTINGS = ("model", "gpu", "workload", "num_requests")  # a run heading names them


def _bench(
    run_id: str, group: pd.DataFrame, params: dict[str, Any], name: str
) -> tuple[str, list[str]]:
    base = _base(group)
    workload = params.get("workload", {})
    kind = workload.get("kind", "") if isinstance(workload, dict) else workload
    mode = "measured" if record_mode(base.get("mode")) is Mode.REAL else "modeled"
    heading = (
        f"{params.get('model', '?')} on {params.get('gpu', '?')}: "
        f"{int(params.get('num_requests') or 0):,} "
        f"requests ({kind}){f', {name}' if name else ''} (run {run_id})"
    )
    lines: list[str] = []
    others = group[group["optimization"] != base["optimization"]]
    if len(others) and base.get("running_mean"):
        best = others.loc[others["running_mean"].idxmax()]
        ratio = best["running_mean"] / base["running_mean"]
        if f"{ratio:.1f}" != "1.0":  # no change is no news
            lines.append(
                f"{best['optimization']} holds {ratio:.1f}x the running requests of "
                f"{base['optimization']} at equal memory"
            )
    lines += _throughput(group, base, others, mode)
    lines += _prefix(group)
    if "load_imbalance" in group and group["load_imbalance"].notna().any():
        routed = group[group["load_imbalance"].notna()]
        best = (
            routed.loc[routed["prefix_hit_rate"].idxmax()]
            if "prefix_hit_rate" in routed
            else routed.iloc[0]
        )
        lines.append(
            f"best routed hit rate: {best['optimization']} at "
            f"{best.get('prefix_hit_rate', 0):.0%}, "
            f"load imbalance {best['load_imbalance']:.2f} (max / mean requests per pod)"
        )
    rejected = (
        group[group["requests_rejected"].fillna(0) > 0]
        if "requests_rejected" in group
        else group.iloc[0:0]
    )
    for _, row in rejected.iterrows():
        lines.append(f"{row['optimization']} rejected {int(row['requests_rejected']):,} requests")
    for _, row in group.iterrows():
        said = overload(row)
        if said:
            lines.append(f"{row['optimization']}, {said}")
    return heading, lines


def _throughput(group: pd.DataFrame, base: pd.Series, others: pd.DataFrame, mode: str) -> list[str]:
    """Which optimization delivers the most: only where some run was overloaded, since a load
    every run serves is delivered at the offered rate by all, and their steady figures then
    differ by the window's noise, not by what the optimizations buy."""
    if not len(others) or THROUGHPUT not in group or not _known(base.get(THROUGHPUT)):
        return []
    if "overloaded" not in group or not group["overloaded"].eq(True).any():
        return [
            f"every optimization served the offered load ({base[THROUGHPUT]:,.0f} output "
            f"tokens/s in the steady state; {mode}): at this rate they differ in memory and "
            "latency, not throughput"
        ]
    best = group.loc[group[THROUGHPUT].idxmax()]
    ratio = best[THROUGHPUT] / base[THROUGHPUT]
    if f"{ratio:.2f}" == "1.00":
        return [
            f"every optimization gives {base['optimization']}'s throughput "
            f"({base[THROUGHPUT]:,.0f} output tokens/s in the steady state; {mode})"
        ]
    return [
        f"the most throughput: {best['optimization']}, {best[THROUGHPUT]:,.0f} output tokens/s "
        f"in the steady state ({ratio:.2f}x {base['optimization']}; {mode})"
    ]


def _prefix(group: pd.DataFrame) -> list[str]:
    """What prefix caching served: over every offload tier where tiers ran (the device's
    share noted), else the device cache's hit rate."""
    if "prefix_cache_queries" not in group:
        return []
    cached = group[group["prefix_cache_queries"].fillna(0) > 0]
    if not len(cached):
        return []
    rates = [hit_rate(row)[0] or 0.0 for _, row in cached.iterrows()]
    best = cached.iloc[max(range(len(rates)), key=rates.__getitem__)]
    rate = max(rates)
    bound = best.get("prefix_hit_rate_upper_bound")
    bound_text = (
        f" (a cache that never evicts: {bound:.0%})" if bound is not None and bound == bound else ""
    )
    if rate <= 0:
        return [
            "prefix caching found no shared prefix to reuse on this workload (hit rate 0%); "
            "a workload with shared prompts (system-prompt, chat, rag) shows its effect"
        ]
    if hit_rate(best)[1] == ALL_TIERS:
        tiers = ", ".join(
            f"{tier} {best[column]:.0%}"
            for tier, column in (("cpu", "cpu_hit_rate"), ("disk", "disk_hit_rate"))
            if column in best and best[column] == best[column]
        )
        return [
            f"prefix caching with offload ({best['optimization']}) serves {rate:.0%} of prompt "
            f"tokens from cache over all tiers (device {best['prefix_hit_rate']:.0%}, {tiers}), "
            f"prefill it need not compute{bound_text}"
        ]
    return [
        f"prefix caching ({best['optimization']}) serves {rate:.0%} of prompt tokens from cache, "
        f"prefill it need not compute{bound_text}"
    ]


def _quality(frame: pd.DataFrame) -> list[str]:
    """perplexity_vs_base is the relative change (ppl / full - 1); kv_bytes_vs_base a ratio."""
    lines: list[str] = []
    if "perplexity_vs_base" not in frame or "kv_bytes_vs_base" not in frame:
        return lines
    close = frame[(frame["perplexity_vs_base"] <= 0.01) & (frame["kv_bytes_vs_base"] < 1)]
    if len(close):
        best = close.loc[close["kv_bytes_vs_base"].idxmin()]
        lines.append(
            f"{best['optimization']} keeps perplexity within "
            f"{100 * best['perplexity_vs_base']:+.1f}% "
            f"of the full cache with {best['kv_bytes_vs_base']:.0%} of its KV bytes"
        )
    worst = frame.loc[frame["perplexity_vs_base"].idxmax()]
    if worst["perplexity_vs_base"] > 0.01:
        lines.append(
            f"the largest quality loss: {worst['optimization']}, perplexity "
            f"{worst['perplexity']:.3f} "
            f"({100 * worst['perplexity_vs_base']:+.0f}% over the full cache's)"
        )
    return lines


def _estimates(frame: pd.DataFrame) -> list[str]:
    fits = frame[frame["verdict"] == "fits"]
    lines = [
        f"{len(frame):,} configurations ({frame['model'].nunique()} model(s), "
        f"{frame['gpu'].nunique()} GPU(s), "
        f"KV {', '.join(map(str, dict.fromkeys(frame['kv_dtype'])))}): {len(fits):,} fit"
    ]
    if len(fits):
        longest = fits.sort_values(["context", "max_concurrency"], ascending=False).iloc[0]
        lines.append(
            f"the longest context that fits: {int(longest['context']):,} tokens on "
            f"{int(longest['tp'])} x "
            f"{longest['gpu']} with KV {longest['kv_dtype']} ({longest['max_concurrency']:.1f}x "
            "concurrency)"
        )
    return lines
