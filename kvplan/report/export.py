"""CSV and Prometheus text exposition of the same facts the page shows.

vLLM's metric names are used where one exists (vllm:kv_cache_usage_perc,
vllm:prefix_cache_queries, vllm:prefix_cache_hits, vllm:num_preemptions; counters carry
the `_total` suffix as Prometheus clients expose them); the rest are kvplan_* gauges.
"""

from __future__ import annotations

import math

import pandas as pd

from kvplan.core.metric_registry import Prometheus, metric

# The metrics the exposition carries, in its order (vLLM's names first); each one's exposed
# name, type and help text are its registry entry's (kvplan.core.metric_registry).
EXPORTED = (
    "kv_cache_usage_mean",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "preemptions",
    "kv_cache_usage_peak",
    "token_states_share",
    "internal_fragmentation_share",
    "external_fragmentation_share",
    "waste",
    "running_mean",
    "waiting_mean",
    "served_output_tokens_per_s",
    "ttft_s_p50",
    "ttft_s_p90",
    "tpot_s_p50",
    "recomputed_tokens",
)


def _exposition(name: str) -> tuple[Prometheus, str]:
    """A registered metric's Prometheus name and kind, and its help text."""
    entry = metric(name)
    if entry.prometheus is None:
        raise ValueError(f"'{name}' has no Prometheus name in kvplan.core.metric_registry")
    return entry.prometheus, entry.description


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def prometheus_text(bench: pd.DataFrame) -> str:
    lines = []
    for name in EXPORTED:
        if name not in bench:
            continue
        exposed, help_text = _exposition(name)
        samples = []
        for _, row in bench.iterrows():
            value = row[name]
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            labels = (
                f'model_name="{_label(row.get("model", ""))}",gpu="{_label(row.get("gpu", ""))}",'
                f'optimization="{_label(row["optimization"])}",run_id="{_label(row["run_id"])}"'
            )
            samples.append(f"{exposed.name}{{{labels}}} {float(value):.10g}")
        if samples:
            kind = "counter" if exposed.counter else "gauge"
            lines += [
                f"# HELP {exposed.name} {help_text}",
                f"# TYPE {exposed.name} {kind}",
                *samples,
            ]
    return "\n".join(lines) + "\n"
