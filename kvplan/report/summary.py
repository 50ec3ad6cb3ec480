"""The answer first: a few sentences per study that open the report page, e.g.
"paged holds 2.0x the running requests of contiguous-oracle at equal memory; prefix
caching saves 38% of prefill on this workload". Each sentence reads figures the results
already hold (no new metric is computed here beyond ratios of recorded ones)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from kvplan.report.data import ReportData, study_rows


def summaries(data: ReportData) -> list[tuple[str, list[str]]]:
    """(heading, sentences) per study: each bench run, the quality table, the estimates, a sweep."""
    found: list[tuple[str, list[str]]] = []
    if not data.bench.empty:
        for run_id, group in data.bench.groupby("run_id", sort=False):
            found.append(_bench(run_id, group.reset_index(drop=True), data.params.get(run_id, {})))
    if not data.quality.empty:
        found.append(("Memory and quality", _quality(data.quality)))
    if not data.estimate.empty:
        found.append(("Estimates", _estimates(data.estimate)))
    study, slo = study_rows(data)
    if study:
        found.append(("Sweep", _study(study, slo)))
    return [(heading, lines) for heading, lines in found if lines]


def _base(group: pd.DataFrame) -> pd.Series:
    marked = group[group["baseline"]]
    return marked.iloc[0] if len(marked) else group.iloc[0]


def _bench(run_id: str, group: pd.DataFrame, params: dict[str, Any]) -> tuple[str, list[str]]:
    base = _base(group)
    workload = params.get("workload", {})
    kind = workload.get("kind", "") if isinstance(workload, dict) else workload
    mode = "measured" if base.get("mode") == "real" else "modeled"
    heading = (
        f"{params.get('model', '?')} on {params.get('gpu', '?')}: {int(params.get('num_requests') or 0):,} "
        f"requests ({kind}), run {run_id}"
    )
    lines: list[str] = []
    others = group[group["optimization"] != base["optimization"]]
    if len(others) and base.get("running_mean"):
        best = others.loc[others["running_mean"].idxmax()]
        lines.append(
            f"{best['optimization']} holds {best['running_mean'] / base['running_mean']:.1f}x the running "
            f"requests of {base['optimization']} at equal memory"
        )
    if len(others) and base.get("output_tokens_per_s"):
        best = group.loc[group["output_tokens_per_s"].idxmax()]
        lines.append(
            f"the most throughput: {best['optimization']}, {best['output_tokens_per_s']:,.0f} output "
            f"tokens/s ({best['output_tokens_per_s'] / base['output_tokens_per_s']:.2f}x "
            f"{base['optimization']}; {mode})"
        )
    if "prefix_cache_queries" in group:
        cached = group[group["prefix_cache_queries"].fillna(0) > 0]
        if len(cached):
            best = cached.loc[cached["prefix_hit_rate"].idxmax()]
            bound = best.get("prefix_hit_rate_upper_bound")
            bound_text = (
                f" (a cache that never evicts: {bound:.0%})"
                if bound is not None and bound == bound
                else ""
            )
            if best["prefix_hit_rate"] > 0:
                lines.append(
                    f"prefix caching ({best['optimization']}) serves {best['prefix_hit_rate']:.0%} of "
                    f"prompt tokens from cache, prefill it need not compute{bound_text}"
                )
            else:
                lines.append(
                    "prefix caching found no shared prefix to reuse on this workload (hit rate 0%); "
                    "a workload with shared prompts (system-prompt, chat, rag) shows its effect"
                )
    if "load_imbalance" in group and group["load_imbalance"].notna().any():
        routed = group[group["load_imbalance"].notna()]
        best = (
            routed.loc[routed["prefix_hit_rate"].idxmax()]
            if "prefix_hit_rate" in routed
            else routed.iloc[0]
        )
        lines.append(
            f"best routed hit rate: {best['optimization']} at {best.get('prefix_hit_rate', 0):.0%}, "
            f"load imbalance {best['load_imbalance']:.2f} (max / mean requests per pod)"
        )
    rejected = (
        group[group["requests_rejected"].fillna(0) > 0]
        if "requests_rejected" in group
        else group.iloc[0:0]
    )
    for _, row in rejected.iterrows():
        lines.append(f"{row['optimization']} rejected {int(row['requests_rejected']):,} requests")
    return heading, lines


def _quality(frame: pd.DataFrame) -> list[str]:
    """perplexity_vs_base is the relative change (ppl / full - 1); kv_bytes_vs_base a ratio."""
    lines: list[str] = []
    if "perplexity_vs_base" not in frame or "kv_bytes_vs_base" not in frame:
        return lines
    close = frame[(frame["perplexity_vs_base"] <= 0.01) & (frame["kv_bytes_vs_base"] < 1)]
    if len(close):
        best = close.loc[close["kv_bytes_vs_base"].idxmin()]
        lines.append(
            f"{best['optimization']} keeps perplexity within {100 * best['perplexity_vs_base']:+.1f}% "
            f"of the full cache with {best['kv_bytes_vs_base']:.0%} of its KV bytes"
        )
    worst = frame.loc[frame["perplexity_vs_base"].idxmax()]
    if worst["perplexity_vs_base"] > 0.01:
        lines.append(
            f"the largest quality loss: {worst['optimization']}, perplexity {worst['perplexity']:.3f} "
            f"({100 * worst['perplexity_vs_base']:+.0f}% over the full cache's)"
        )
    return lines


def _estimates(frame: pd.DataFrame) -> list[str]:
    fits = frame[frame["verdict"] == "fits"]
    lines = [
        f"{len(frame):,} configurations ({frame['model'].nunique()} model(s), {frame['gpu'].nunique()} GPU(s), "
        f"KV {', '.join(map(str, dict.fromkeys(frame['kv_dtype'])))}): {len(fits):,} fit"
    ]
    if len(fits):
        longest = fits.sort_values(["context", "max_concurrency"], ascending=False).iloc[0]
        lines.append(
            f"the longest context that fits: {int(longest['context']):,} tokens on {int(longest['tp'])} x "
            f"{longest['gpu']} with KV {longest['kv_dtype']} ({longest['max_concurrency']:.1f}x concurrency)"
        )
    return lines


def _study(rows: list[dict[str, Any]], slo: float | None) -> list[str]:
    best = max(rows, key=lambda row: row.get("max_sustained_rate") or 0)
    settings = ", ".join(
        f"{k}={v}"
        for k, v in best.items()
        if k not in ("max_sustained_rate", "slo_crossing_rate", "usd_per_million_output_tokens")
    )
    return [
        f"{len(rows)} setting(s); the highest rate within the p90 TTFT SLO ({slo or 10:g} s): "
        f"{best.get('max_sustained_rate') or 0:g} req/s ({settings})"
    ]
