"""What the `kvplan bench` table shows: a registry of rows, each tied to the feature it is
about, shown only when a run exercised that feature.

A row names a metric (one home each: core/summary.py and friends), a format and a rule
for when it appears; `comparison()` turns result records into plain strings, so the CLI
only lays them out. To add a feature's rows (an eviction policy's tokens dropped, a new
tier), append Rows to ROWS; nothing else changes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvplan.results import ResultRecord

Metrics = dict[str, Any]
_NUMBER = re.compile(r"\d+")
PERCENTILES = ("p50", "p90", "p99")


def _has(metric: str) -> Callable[[list[Metrics]], bool]:
    return lambda runs: any(m.get(metric) is not None for m in runs)


def _nonzero(metric: str) -> Callable[[list[Metrics]], bool]:
    return lambda runs: any(m.get(metric) for m in runs)


def _always(runs: list[Metrics]) -> bool:
    return True


@dataclass(frozen=True)
class Row:
    section: str
    label: str
    metric: str
    fmt: str  # pct, int, float, rate, bytes, pcts (p50/p90/p99), pod_pcts, ratio, done
    shown: Callable[[list[Metrics]], bool] = _always
    hint: str = ""  # a short why, shown under the table when the row is


POOL = "KV pool split (adds to 100%)"
ROWS: tuple[Row, ...] = (
    Row(POOL, "token states", "token_states_share", "pct"),
    Row(POOL, "reservation", "reservation_share", "pct"),
    Row(POOL, "internal frag.", "internal_fragmentation_share", "pct"),
    Row(POOL, "external frag.", "external_fragmentation_share", "pct"),
    Row(POOL, "cached (prefix)", "cached_share", "pct", _nonzero("cached_share")),
    Row(POOL, "free", "free_share", "pct"),
    Row("KV use", "waste (1 - used/reserved)", "waste", "pct"),
    Row("KV use", "KV cache usage", "kv_cache_usage_mean", "pct"),
    Row("prefix caching", "prefix hit rate", "prefix_hit_rate", "pct", _has("prefix_hit_rate")),
    Row("prefix caching", "infinite-cache bound", "prefix_hit_rate_upper_bound", "pct",
        _has("prefix_hit_rate_upper_bound"), "infinite-cache bound: the hit rate of a cache that never evicts"),
    Row("prefix caching", "prefill tokens saved", "prefill_tokens_saved", "int", _has("prefill_tokens_saved")),
    Row("prefix caching", "cached blocks evicted", "cached_blocks_evicted", "int", _has("cached_blocks_evicted")),
    Row("routing", "hit rate per pod", "pod_prefix_hit_rate", "pod_pcts", _has("pod_prefix_hit_rate")),
    Row("routing", "requests per pod", "pod_requests", "pod_ints", _has("pod_requests")),
    Row("routing", "load imbalance", "load_imbalance", "float", _has("load_imbalance"),
        "load imbalance: max / mean requests per pod (1.00 = even)"),
    Row("offload tiers", "CPU tier hit rate", "cpu_hit_rate", "pct", _has("cpu_hit_rate")),
    Row("offload tiers", "CPU bytes in / out", "cpu_bytes", "bytes_io", _has("cpu_bytes_in")),
    Row("offload tiers", "disk tier hit rate", "disk_hit_rate", "pct", _has("disk_hit_rate")),
    Row("offload tiers", "disk bytes in / out", "disk_bytes", "bytes_io", _has("disk_bytes_in")),
    Row("offload tiers", "reloads / recomputes", "offload", "reloads", _has("offload_reloads")),
    Row("offload tiers", "hit rate, all tiers", "total_hit_rate", "pct", _has("total_hit_rate")),
    Row("eviction policy", "tokens dropped", "tokens_dropped", "int", _has("tokens_dropped")),
    Row("eviction policy", "slots copied", "eviction_copied_slots", "int", _has("eviction_copied_slots"),
        "slots copied: K/V moved inside the pool by eviction (holes refilled; streaming: sinks written into "
        "each window), in slots of every layer; simulated runs charge compaction copies as time"),
    Row("eviction policy", "blocks if holes kept", "eviction_hole_blocks_ratio", "float",
        _has("eviction_hole_blocks_ratio"), "blocks if holes kept: blocks held with holes left in place, per "
        "compacted block (measured on the run)"),
    Row("eviction policy", "budget per layer", "layer_budgets", "pod_ints", _has("layer_budgets"),
        "budget per layer: entropy-budget's split of layers x --kv-budget by attention entropy (real mode: probed "
        "on the model's own 200-token greedy text from BOS, never the requests); one block table serves every "
        "layer, so each sequence holds the largest layer budget in every layer and the smaller layers' unused "
        "tail slots are internal fragmentation (a simplification: per-layer block tables, vLLM v1's KV-cache "
        "groups, would hold each layer's own); simulated runs without a split charge every layer --kv-budget"),
    Row("eviction policy", "dropped share of tokens", "evicted_token_share", "pct", _nonzero("evicted_token_share"),
        "dropped share of tokens: of the running sequences' tokens, the share evicted (time-averaged)"),
    Row("sharing", "shared token share", "shared_token_share", "pct", _nonzero("shared_token_share")),
    Row("sharing", "parallel forks / CoW copies", "forks", "forks", _has("parallel_forks")),
    Row("scheduling", "running (mean)", "running_mean", "float"),
    Row("scheduling", "running (peak)", "running_peak", "int"),
    Row("scheduling", "waiting (mean)", "waiting_mean", "float"),
    Row("scheduling", "preemptions", "preemptions", "int"),
    Row("scheduling", "recomputed tokens", "recomputed_tokens", "int"),
    Row("scheduling", "swapped out (slots)", "swapped_out_slots", "int", _nonzero("swapped_out_slots")),
    Row("throughput", "output tokens/s", "output_tokens_per_s", "rate"),
    Row("throughput", "total tokens/s", "total_tokens_per_s", "rate"),
    Row("throughput", "requests/s", "requests_per_s", "float"),
    Row("throughput", "throughput vs base", "output_tokens_per_s", "ratio"),
    Row("throughput", "concurrency vs base", "running_mean", "ratio",
        hint="concurrency vs base: mean running requests against the baseline's"),
    Row("latency", "TTFT", "ttft_s", "pcts"),
    Row("latency", "TPOT", "tpot_s", "pcts"),
    Row("latency", "E2E", "e2e_s", "pcts"),
    Row("requests", "finished / rejected", "requests_finished", "done"),
)


@dataclass(frozen=True)
class ComparisonRow:
    section: str
    label: str
    cells: tuple[str, ...]  # one per optimization


@dataclass(frozen=True)
class Comparison:
    title: str
    names: tuple[str, ...]  # optimization (or optimization@router) per column, the baseline first
    rows: tuple[ComparisonRow, ...]
    notes: tuple[str, ...]  # rejection reasons, what the bound and ratios mean, modeled vs measured


def comparison(records: list[ResultRecord]) -> Comparison:
    """The bench table of these records (the first one is the baseline)."""
    runs = [record.metrics for record in records]
    base = runs[0]
    rows: list[ComparisonRow] = []
    hints: list[str] = []
    for row in ROWS:
        if not row.shown(runs):
            continue
        if row.fmt == "pcts":  # one row per percentile: short cells keep the table narrow
            rows += [ComparisonRow(row.section, f"{row.label} {p}", tuple(_seconds(m.get(f"{row.metric}_{p}")) for m in runs))
                     for p in PERCENTILES]
        else:
            rows.append(ComparisonRow(row.section, row.label, tuple(_cell(row, m, base) for m in runs)))
        rows = [r for r in rows if any(cell != "-" for cell in r.cells)]  # a metric no run reports
        if row.hint:
            hints.append(row.hint)
    names = tuple(r.optimization for r in records)
    base_note = f"baseline: {names[0]} (the \"vs base\" rows divide by its figures)"
    return Comparison(_title(records[0]), names, tuple(rows),
                      (*_rejections(records), base_note, *hints, *_unsplit_entropy(records), _time_note(records[0])))


def _title(record: ResultRecord) -> str:
    params, metrics = record.params, record.metrics
    if (record.mode or "simulated") == "real":
        where = f"real mode on {metrics.get('device', '?')}"
    else:
        where = f"{params['tp']} x {params['gpu']}"
        if (params.get("pods") or 1) > 1:
            where = f"{params['pods']} pods of {where}"
    workload = params.get("workload", {}).get("kind")
    joint = "in" if where.startswith("real mode") else "on"
    return (f"{params['model']} {joint} {where}, {params['num_requests']:,} requests ({workload}), KV {params['kv_format']}, "
            f"max_model_len {params['max_model_len']:,}")


def _unsplit_entropy(records: list[ResultRecord]) -> list[str]:
    """A simulated entropy-budget run has no weights to probe its layer split (named here)."""
    names = [r.optimization for r in records if "entropy-budget" in r.optimization
             and (r.mode or "simulated") != "real" and "layer_budgets" not in r.metrics]
    if not names:
        return []
    return [f"{', '.join(names)}: simulated without weights to probe the per-layer split, so every layer is "
            "charged --kv-budget, as h2o is (a named simplification); real serving holds its split's largest "
            "layer budget in every layer (1.45x h2o's slots on stories260K at budget 32)"]


def _rejections(records: list[ResultRecord]) -> list[str]:
    notes = []
    for record in records:
        count = record.metrics.get("requests_rejected") or 0
        if count:
            reasons = "; ".join(summarize_reasons(record.metrics.get("reject_reasons") or [])) or "no reason recorded"
            notes.append(f"{record.optimization}: {count:,} rejected: {reasons}")
    return notes


def summarize_reasons(reasons: list[str]) -> list[str]:
    """Reasons that differ only in their numbers as one line with each number's range:
    'needs 2480..4096 KV slots, the whole pool admits 2432'."""
    groups: dict[str, list[list[int]]] = {}
    for reason in reasons:
        groups.setdefault(_NUMBER.sub("#", reason), []).append([int(n) for n in _NUMBER.findall(reason)])
    lines = []
    for template, numbers in groups.items():
        spans = [f"{min(column)}..{max(column)}" if min(column) != max(column) else str(column[0])
                 for column in zip(*numbers)]
        pieces = template.split("#")
        lines.append("".join(piece + (spans[i] if i < len(spans) else "") for i, piece in enumerate(pieces)))
    return lines


def _time_note(record: ResultRecord) -> str:
    if (record.mode or "simulated") == "real":
        return "times are measured wall-clock"
    source = record.metrics.get("step_model")  # set when the calibrated step model timed the run
    if not source:
        return "times are modeled from the GPU roofline at datasheet peak (a lower bound), not measured"
    band = record.metrics.get("time_error_band")
    return f"times are modeled by the step model ({source}), not measured" + (f"; {band_text(band)}" if band else "")


BAND_FIGURES = (("output_throughput", "output tok/s"), ("mean_tpot_ms", "TPOT"), ("mean_ttft_ms", "TTFT"),
                ("latency_avg_s", "batch latency"))


def band_text(band: dict) -> str:
    """A modeled run's error band in words: the held-out median error of each time figure."""
    where = f"{band.get('gpu_family')} under {band.get('engine')}" if band.get("gpu_family") else "its runs"
    parts = [f"{label} ±{100 * band[f'{name}_error']:.0f}% ({int(band[f'{name}_runs'])} runs)"
             for name, label in BAND_FIGURES if f"{name}_error" in band]
    if band.get("unvalidated"):
        if not parts:
            return f"unvalidated: no measured run on {where}"
        return (f"unvalidated: no measured run on {where}; on GPU families the fit never saw "
                f"({band.get('basis')}): " + ", ".join(parts))
    return f"held-out error on {where} ({band.get('basis')}): " + ", ".join(parts)


def _cell(row: Row, metrics: Metrics, base: Metrics) -> str:
    if row.fmt == "done":
        return f"{metrics.get('requests_finished', 0):,} / {metrics.get('requests_rejected', 0):,}"
    if row.fmt == "bytes_io":
        into, out = metrics.get(f"{row.metric}_in"), metrics.get(f"{row.metric}_out")
        return "-" if into is None else f"{_bytes(into)} / {_bytes(out or 0)}"
    if row.fmt == "reloads":
        reloads = metrics.get("offload_reloads")
        return "-" if reloads is None else f"{reloads:,} / {metrics.get('offload_recomputes', 0):,}"
    if row.fmt == "forks":
        forks = metrics.get("parallel_forks")
        return "-" if forks is None else f"{forks:,} / {metrics.get('cow_copies', 0):,}"
    value = metrics.get(row.metric)
    if row.fmt == "ratio":
        reference = base.get(row.metric)
        return f"{value / reference:.2f}x" if value is not None and reference else "-"
    if value is None:
        return "-"
    if row.fmt == "pod_pcts":
        return " ".join(f"{100 * v:.0f}%" for v in value)
    if row.fmt == "pod_ints":
        return " ".join(f"{v:,}" for v in value)
    return {"pct": lambda: f"{100 * value:.1f}%", "float": lambda: f"{value:,.2f}", "int": lambda: f"{value:,}",
            "rate": lambda: f"{value:,.0f}"}[row.fmt]()


def _bytes(value: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1e3:.0f}ms" if value < 1 else f"{value:.1f}s"
