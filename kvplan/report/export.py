"""CSV and Prometheus text exposition of the same facts the page shows.

vLLM's metric names are used where one exists (vllm:kv_cache_usage_perc,
vllm:prefix_cache_queries, vllm:prefix_cache_hits, vllm:num_preemptions; counters carry
the `_total` suffix as Prometheus clients expose them); the rest are kvplan_* gauges.
"""

from __future__ import annotations

import math

import pandas as pd

# (metric in results, exposed name, type, help)
PROMETHEUS: tuple[tuple[str, str, str, str], ...] = (
    ("kv_cache_usage_mean", "vllm:kv_cache_usage_perc", "gauge",
     "KV-cache usage (allocated blocks / total), time-averaged. 1 means 100 percent usage."),
    ("prefix_cache_queries", "vllm:prefix_cache_queries_total", "counter",
     "Prefix cache queries, in prompt tokens."),
    ("prefix_cache_hits", "vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in prompt tokens."),
    ("preemptions", "vllm:num_preemptions_total", "counter", "Cumulative number of preemptions."),
    ("kv_cache_usage_peak", "kvplan_kv_cache_usage_peak", "gauge", "Peak KV-cache usage."),
    ("token_states_share", "kvplan_token_states_share", "gauge", "Time-averaged share of the KV pool holding tokens."),
    ("internal_fragmentation_share", "kvplan_internal_fragmentation_share", "gauge",
     "Time-averaged share of the KV pool reserved but never used."),
    ("external_fragmentation_share", "kvplan_external_fragmentation_share", "gauge",
     "Time-averaged share of free KV slots no waiting request can use."),
    ("waste", "kvplan_kv_waste_ratio", "gauge", "1 - used / reserved KV slots."),
    ("running_mean", "kvplan_num_requests_running_mean", "gauge", "Mean number of running requests."),
    ("waiting_mean", "kvplan_num_requests_waiting_mean", "gauge", "Mean number of waiting requests."),
    ("output_tokens_per_s", "kvplan_output_tokens_per_second", "gauge", "Output token throughput."),
    ("ttft_s_p50", "kvplan_time_to_first_token_seconds_p50", "gauge", "Median time to first token."),
    ("ttft_s_p90", "kvplan_time_to_first_token_seconds_p90", "gauge", "p90 time to first token."),
    ("tpot_s_p50", "kvplan_time_per_output_token_seconds_p50", "gauge", "Median time per output token."),
    ("recomputed_tokens", "kvplan_recomputed_tokens_total", "counter", "Tokens recomputed after preemption."),
)


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def prometheus_text(bench: pd.DataFrame) -> str:
    lines = []
    for metric, name, kind, help_text in PROMETHEUS:
        if metric not in bench:
            continue
        samples = []
        for _, row in bench.iterrows():
            value = row[metric]
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            labels = (f'model_name="{_label(row.get("model", ""))}",gpu="{_label(row.get("gpu", ""))}",'
                      f'optimization="{_label(row["optimization"])}",run_id="{_label(row["run_id"])}"')
            samples.append(f"{name}{{{labels}}} {float(value):.10g}")
        if samples:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]
    return "\n".join(lines) + "\n"
