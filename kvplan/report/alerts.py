"""Warnings a dashboard would raise on these runs (thresholds in the README).

Each check compares the figure it prints, rounded as printed (one decimal of a percent), so
the printed value always justifies the alert: "90.0% > 90%" cannot happen. The prefix
check reads the hit rate over every offload tier where tiers ran (a request served from
the CPU tier did not prefill); preemptions and evictions are separate alerts, as they are
separate causes (a pool too small for the batch, a cache too small for the reuse).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from kvplan.core.metric_registry import metric
from kvplan.report.names import members, qualified, run_names

USAGE_ALERT = 90.0  # mean KV cache usage, percent
HIT_RATE_ALERT = 50.0  # prefix hit rate (all tiers), percent, where prefix caching ran
PREEMPTION_ALERT = 5.0  # preemptions per finished request, percent
# Cached prefix blocks were evicted and the hit rate lost this many points to it: the hit rate
# a cache that never evicts reaches on the same requests, less the measured one.
EVICTION_ALERT = 10.0


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _percent(value: float) -> float:
    """As printed: a percent with one decimal."""
    return round(100 * value, 1)


# hit_rate's names of the two rates, the bench table's labels of them
ALL_TIERS = metric("total_hit_rate").label
DEVICE = metric("prefix_hit_rate").label


def hit_rate(row: pd.Series | dict[str, Any]) -> tuple[float | None, str]:
    """The share of prompt tokens served from cache: over every tier where offload ran,
    else the device cache's; and its name."""
    total = _number(row.get("total_hit_rate"))
    if total is not None:
        return total, ALL_TIERS
    return _number(row.get("prefix_hit_rate")), DEVICE


def alerts(
    bench: pd.DataFrame, params: dict[str, dict[str, Any]] | None = None
) -> list[dict[str, str]]:
    """KV usage above 90%, prefix hit rate below 50% where caching ran, preemptions on more
    than 5% of finished requests, and cached prefix blocks evicted at a cost of more than 10
    points of hit rate."""
    names = run_names(params or {}, list(bench["run_id"]), shortest=True, members=members(bench))
    found = []
    for _, row in bench.iterrows():
        name = qualified(row["optimization"], names.get(row["run_id"]))
        for alert, detail in _checks(row):
            found.append({"run": name, "alert": alert, "detail": detail})
    return found


def _checks(row: pd.Series) -> list[tuple[str, str]]:
    found = []
    usage = _number(row.get("kv_cache_usage_mean"))
    if usage is not None and _percent(usage) > USAGE_ALERT:
        found.append(
            (
                "KVCacheUsageHigh",
                f"mean KV cache usage {_percent(usage):.1f}% > {USAGE_ALERT:.0f}%: "
                "requests queue for memory",
            )
        )
    rate, rate_name = hit_rate(row)
    cached = (_number(row.get("prefix_cache_queries")) or 0) > 0
    if cached and rate is not None and _percent(rate) < HIT_RATE_ALERT:
        found.append(
            (
                "PrefixCacheHitRateLow",
                f"{rate_name} {_percent(rate):.1f}% < {HIT_RATE_ALERT:.0f}%",
            )
        )
    finished = _number(row.get("requests_finished")) or 0
    preemptions = _number(row.get("preemptions")) or 0
    if finished and _percent(preemptions / finished) > PREEMPTION_ALERT:
        found.append(
            (
                "PreemptionRateHigh",
                f"{preemptions:,.0f} preemptions for {finished:,.0f} finished requests "
                f"({_percent(preemptions / finished):.1f}% > {PREEMPTION_ALERT:.0f}%): the KV "
                "pool is too small for the batch the scheduler admits",
            )
        )
    evicted = _number(row.get("cached_blocks_evicted")) or 0
    bound = _number(row.get("prefix_hit_rate_upper_bound"))
    if cached and evicted and bound is not None and rate is not None:
        lost = round(_percent(bound) - _percent(rate), 1)
        if lost > EVICTION_ALERT:
            found.append(
                (
                    "EvictionRateHigh",
                    f"{evicted:,.0f} cached prefix blocks evicted: {rate_name} "
                    f"{_percent(rate):.1f}% against {_percent(bound):.1f}% for a cache that never "
                    f"evicts ({lost:.1f} points > {EVICTION_ALERT:.0f} lost to eviction)",
                )
            )
    return found
