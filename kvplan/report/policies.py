"""Eviction policies by budget: memory and speed from simulated bench runs, quality from
real quality runs, joined per policy at the same share of the full cache.

A bench run's budget is a share of its workload's mean sequence (`mean_sequence_tokens`,
prompt + output); a quality run's a share of its text. Shares are rounded to 5% so runs
made at 25/50/75% of each (benchmarks/policy_tradeoff.py) meet in one row.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from kvplan import GIB, MIB
from kvplan.bench.mode import Mode
from kvplan.core.metric_registry import metric
from kvplan.report.data import THROUGHPUT, ReportData

# (the throughput the report compares runs by: the steady state's)
USAGE, RUNNING, SPEED = (
    metric(name).column_label for name in ("kv_cache_usage_mean", "running_mean", THROUGHPUT)
)
COLUMNS = (
    "policy",
    "budget share",
    "budget (sim)",
    "KV GiB held",
    "KV MiB / seq",
    USAGE,
    RUNNING,
    SPEED,
    "budget (quality)",
    "KV bytes / seq",
    "perplexity",
    "KL",
    "agreement",
)


def _share(budget: Any, full: Any) -> float | None:
    if budget is None or full is None or pd.isna(budget) or pd.isna(full) or not full:
        return None
    return round(float(budget) / float(full) * 20) / 20


def _simulated(bench: pd.DataFrame) -> pd.DataFrame:
    from kvplan.bench import parse_optimization

    needed = {"kv_budget", "mean_sequence_tokens", "optimization"}
    if bench.empty or not needed <= set(bench.columns):
        return pd.DataFrame()
    rows = []
    for _, row in bench[bench["mode"] == Mode.SIMULATED].iterrows():
        share = _share(row["kv_budget"], row["mean_sequence_tokens"])
        if share is None:
            continue
        try:
            parsed = parse_optimization(row["optimization"])
        except (
            ValueError
        ):  # a results file from elsewhere: names kvplan does not know are no policy
            continue
        if not parsed.policy:
            continue
        # the policy alone joins the quality runs of that policy; combined with a KV format
        # or prefix caching (streaming+fp8) it is another row, under its whole name
        alone = parsed.kv_dtype is None and not parsed.prefix_caching
        policy = parsed.policy if alone else str(row["optimization"])
        held = (
            row.get("kv_cache_usage_mean", 0)
            * row.get("pool_slots", 0)
            * row.get("kv_bytes_per_token_per_gpu", 0)
        )
        running = row.get("running_mean") or 0
        rows.append(
            {
                "policy": policy,
                "budget share": share,
                "budget (sim)": int(row["kv_budget"]),
                "KV GiB held": held / GIB,
                "KV MiB / seq": held / running / MIB if running else None,
                USAGE: row.get("kv_cache_usage_mean"),
                RUNNING: row.get("running_mean"),
                SPEED: row.get(THROUGHPUT),
            }
        )
    return pd.DataFrame(rows)


def _quality(quality: pd.DataFrame) -> pd.DataFrame:
    if quality.empty or not {"policy", "kv_budget", "text_tokens"} <= set(quality.columns):
        return pd.DataFrame()
    rows = []
    for _, row in quality.iterrows():
        share = _share(row["kv_budget"], row["text_tokens"])
        fmt = row.get("kv_format")
        if (
            row["policy"] == "full" or share is None or (isinstance(fmt, str) and fmt)
        ):  # a policy on its own
            continue
        rows.append(
            {
                "policy": row["policy"],
                "budget share": share,
                "budget (quality)": int(row["kv_budget"]),
                "KV bytes / seq": row.get("kv_bytes_per_seq"),
                "perplexity": row.get("perplexity"),
                "KL": row.get("kl_mean"),
                "agreement": row.get("greedy_agreement"),
            }
        )
    return pd.DataFrame(rows)


def policy_tradeoff(data: ReportData) -> pd.DataFrame:
    """One row per (policy, budget share); columns a side did not measure stay blank."""
    simulated, quality = _simulated(data.bench), _quality(data.quality)
    if simulated.empty and quality.empty:
        return pd.DataFrame()
    keys = ["policy", "budget share"]
    if simulated.empty or quality.empty:
        frame = simulated if quality.empty else quality
    else:
        frame = simulated.drop_duplicates(keys, keep="last").merge(
            quality.drop_duplicates(keys, keep="last"), on=keys, how="outer"
        )
    frame = frame.sort_values(["budget share", "policy"]).reset_index(drop=True)
    return frame[[c for c in COLUMNS if c in frame]]
