"""Tables a reader can scan: units, percentages, ratios as 1.23x, the important columns
first. The CSV files keep the raw numbers; these are for the HTML page only."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pandas as pd

from kvplan import GIB, MIB
from kvplan.core.metric_registry import METRICS, Shape, Unit
from kvplan.report.names import page_text


def pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def ratio(value: float) -> str:
    return f"{value:.2f}x"


def seconds(value: float) -> str:
    if value < 1:  # a no-break space: a value never wraps away from its unit
        return f"{value * 1e3:,.0f}\u00a0ms"
    return f"{value:,.1f}\u00a0s"


def count(value: float) -> str:
    return f"{value:,.0f}"


def number(value: float) -> str:
    return f"{value:,.2f}" if abs(value) < 1000 else f"{value:,.0f}"


def size(value: float) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", 2**10)):
        if abs(value) >= scale:
            return f"{value / scale:,.2f}\u00a0{unit}"
    return f"{value:,.0f}\u00a0B"


def check(value: Any) -> str:
    return "yes" if value is True else ""


# How the page formats each unit of a registered metric (kvplan.core.metric_registry).
BY_UNIT: dict[Unit, Callable[[Any], str]] = {
    Unit.SHARE: pct,
    Unit.COUNT: count,
    Unit.TOKENS_PER_S: count,
    Unit.REQUESTS_PER_S: number,
    Unit.NUMBER: number,
    Unit.SECONDS: seconds,
    Unit.BYTES: size,
    Unit.GB_PER_S: number,
}

# Formatter by column label; the first matching rule wins (exact name, then suffix). Registered
# metrics are formatted by unit under their column labels; the rest are other tables' columns.
EXACT: dict[str, Callable[[Any], str]] = {
    **{
        entry.column_label: BY_UNIT[entry.unit]
        for entry in METRICS
        if entry.unit in BY_UNIT and entry.shape is Shape.SCALAR and not entry.is_pattern
    },
    "baseline": check,
    "kv_budget": count,
    "greedy_agreement": pct,
    "perplexity": lambda v: f"{v:.3f}",
    "kl_mean": lambda v: f"{v:.4f}",
    "max_concurrency": number,
    "kv_bytes_per_seq": size,
    "context": count,
    "batch": count,
    "tp": count,
    "seq_kv_bytes": size,
    "kv_budget_bytes_per_gpu": size,
    "kv_cache_tokens": count,
    "max_batch_at_context": count,
    "gpu_memory_utilization": pct,
    "block_size": count,
    "num_requests": count,
    "max_model_len": count,
    "kv_cache_gib": number,
    "kv_bytes_per_token": count,
    "weight_bytes_per_gpu": size,
    "num_blocks": count,
    "perplexity change": lambda v: f"{100 * v:+.1f}%",
    # eviction policies by budget (report/policies.py)
    "budget share": lambda v: f"{100 * v:.0f}%",
    "budget (sim)": count,
    "budget (quality)": count,
    "KV GiB held": lambda v: f"{v:.2f}",
    "KV MiB / seq": lambda v: f"{v:,.0f}",
    "KV bytes / seq": size,
    "KL": lambda v: f"{v:.4f}",
    "agreement": pct,
}


def _formatter(column: str) -> Callable[[Any], str] | None:
    if column in EXACT:
        return EXACT[column]
    if column.endswith("vs base"):
        return ratio
    return None


def formatted(
    frame: pd.DataFrame, first: tuple[str, ...] = (), drop: tuple[str, ...] = ()
) -> pd.DataFrame:
    """A copy of `frame` as display strings: `first` columns lead (those present), `drop` go,
    empty columns go, each cell formatted by its column's rule; blanks stay blank."""
    kept = [c for c in frame.columns if c not in drop and frame[c].notna().any()]
    order = [c for c in first if c in kept] + [c for c in kept if c not in first]
    shown = frame[order].copy()
    for column in order:
        rule = _formatter(column)
        shown[column] = [_apply(rule, value) for value in shown[column]]
    # headers wrap between words: scheduler_max_num_seqs would be one unbreakable word
    return shown.rename(columns={c: c.replace("_", " ") for c in order})


def cell(column: str, value: Any) -> str:
    """One value as its column shows it."""
    return _apply(_formatter(column), value)


def _apply(rule: Callable[[Any], str] | None, value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if rule is not None and (isinstance(value, (int, float)) or rule is check):
        return rule(value)
    if isinstance(value, bool):
        return "yes" if value else ""
    if isinstance(value, float):
        return number(value)
    return page_text(value)  # a name from a results file: cut with a note past PAGE_CHARS
