"""A plan as `kvplan plan --json` prints it (schema kvplan.plan/1, README) and as result
records of kind "plan" for `kvplan report`."""

from __future__ import annotations

import math
from typing import Any

from kvplan.deploy.plan_rows import Plan
from kvplan.results import ResultRecord, make_record

PLAN_SCHEMA = "kvplan.plan/1"
_FIGURES = (
    "ttft_s_p50",
    "ttft_s_p90",
    "ttft_s_p99",
    "tpot_s_p50",
    "tpot_s_p90",
    "tpot_s_p99",
    "e2e_s_p50",
    "e2e_s_p90",
    "e2e_s_p99",
    "kv_cache_usage_mean",
    "output_tokens_per_s",
)


def plan_json(plan: Plan) -> dict[str, Any]:
    """The plan as `kvplan plan --json` prints it (schema kvplan.plan/1, README)."""
    demand = plan.demand
    rows = []
    for row in plan.rows:
        cap, metrics = row.capacity, row.cluster_metrics or row.capacity.metrics
        rows.append(
            {
                "gpu": cap.candidate.gpu,
                "tp": cap.candidate.tp,
                "kv_dtype": cap.candidate.kv_dtype,
                "max_num_seqs": cap.candidate.max_num_seqs,
                "status": cap.status,
                "reason": cap.reason or None,
                "replica_capacity_rps": round(cap.capacity_rps, 4),
                "replica_capacity_upper_rps": _finite(cap.capacity_upper_rps),
                "saturation_rps": round(cap.saturation_rps, 4),
                "replicas": row.replicas,
                "replicas_by_division": row.division_replicas,
                "gpus": row.gpus,
                "verified": row.verified,
                "headroom_rps": round(row.headroom_rps, 4),
                "headroom_upper_rps": _finite(row.headroom_upper_rps),
                "usd_per_hour": row.usd_per_hour,
                "usd_per_million_output_tokens": row.usd_per_million_output_tokens,
                "predicted": {name: metrics.get(name) for name in _FIGURES},
                "predicted_from": "cluster at the target rate"
                if row.verified
                else "one replica at its capacity",
                "time_error_band": metrics.get("time_error_band"),
                "why_not": row.why_not or None,
                "verdict": row.verdict or None,
                "layout": row.layout,
                **row.extra_json(),
            }
        )
    winner = plan.winner
    return {
        "schema": PLAN_SCHEMA,
        "model": demand.model,
        "rate_rps": demand.rate,
        "slo": str(demand.slo),
        "workload": str(demand.workload.trace or demand.workload.kind),
        "optimization": demand.optimization,
        "engine": demand.engine,
        "engine_version": demand.engine_version,
        "router": plan.router,
        "simulations": plan.simulations,
        "winner": 0 if winner else None,
        "candidates": rows,
    }


def _finite(value: float) -> float | None:
    """JSON has no infinity: an open bracket's top is null."""
    return round(value, 4) if math.isfinite(value) else None


def plan_records(plan: Plan) -> list[ResultRecord]:
    """One kvplan.result/1 record (kind "plan") per candidate, for `kvplan report`'s cost
    against capacity chart."""
    data = plan_json(plan)
    run_id = f"plan-{data['model']}-{data['rate_rps']:g}".replace("/", "--")
    records = []
    for index, row in enumerate(data["candidates"]):
        params = {
            name: row[name]
            for name in ("gpu", "tp", "kv_dtype", "max_num_seqs", "status", "verified")
        }
        params.update(
            model=data["model"],
            rate_rps=data["rate_rps"],
            slo=data["slo"],
            workload=data["workload"],
        )
        metrics = {
            name: row[name]
            for name in (
                "replicas",
                "gpus",
                "replica_capacity_rps",
                "headroom_rps",
                "usd_per_hour",
                "usd_per_million_output_tokens",
            )
        }
        metrics["winner"] = 1 if data["winner"] == index else 0
        label = row["layout"]
        records.append(make_record("plan", run_id, "simulated", label, params, metrics))
    return records
