"""`kvplan plan`: the cheapest deployment that serves a request rate within an SLO.

Every candidate (GPU x TP x KV dtype x max_num_seqs) gets its per-replica capacity
(replica_search.py, on the local process pool); replicas = ceil(rate / capacity). The best
candidates are then verified by simulating the whole cluster at the target rate behind the
router that suits the workload (kv-aware when requests share prefixes, else least-loaded),
adding replicas until the cluster meets the SLO: prefix-cache hits and load imbalance move
the answer away from the division, and the plan follows the cluster.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvplan.bench.pool import run_pool
from kvplan.bench.replica_search import CapacityResult, Candidate, Demand, capacity_item, settled_run, trace_rate
from kvplan.results import ResultRecord, make_record
from kvplan.workload.shared_prefix import SHARED_PREFIX_KINDS

VERIFY_TOP = 3  # candidates verified as a cluster
MAX_EXTRA_REPLICAS = 4  # replicas a failing cluster may add before the plan gives up on it
MAX_CLUSTER_REQUESTS = 3000


@dataclass
class PlanRow:
    capacity: CapacityResult
    replicas: int = 0
    division_replicas: int = 0  # ceil(rate / per-replica capacity), before the cluster is simulated
    verified: bool = False  # the cluster was simulated at the target rate
    cluster_metrics: dict[str, Any] = field(default_factory=dict)
    usd_per_hour: float | None = None
    usd_per_million_output_tokens: float | None = None
    why_not: str = ""  # for every row but the winner

    @property
    def gpus(self) -> int:
        return self.replicas * self.capacity.candidate.tp

    @property
    def headroom_rps(self) -> float:
        """The rate at which the plan stops meeting the SLO, by the per-replica division."""
        return self.replicas * self.capacity.capacity_rps if self.feasible else 0.0

    @property
    def feasible(self) -> bool:
        return self.capacity.status == "ok" and self.replicas > 0


@dataclass
class Plan:
    demand: Demand
    rows: list[PlanRow]  # ranked, the winner first when one is feasible
    router: str
    simulations: int

    @property
    def winner(self) -> PlanRow | None:
        return self.rows[0] if self.rows and self.rows[0].feasible else None


def router_for(demand: Demand) -> str:
    """kv-aware where requests share prefixes (the shared-prefix kinds, and traces, which carry
    their block hashes or sessions), else least-loaded."""
    shared = demand.workload.trace is not None or demand.workload.kind in SHARED_PREFIX_KINDS
    return "kv-aware" if shared else "least-loaded"


def make_plan(demand: Demand, candidates: list[Candidate], prices: dict[str, float], workers: int = 1,
              max_gpus: int | None = None, progress: Callable[[str], None] | None = None) -> Plan:
    if demand.workload.trace is not None and demand.trace_rps is None:
        demand = dataclasses.replace(demand, trace_rps=trace_rate(demand.workload))
    results: list[CapacityResult] = []

    def done(result: CapacityResult) -> None:
        results.append(result)
        if progress:
            progress(result.candidate.label)

    items = [(demand, candidate) for candidate in candidates]
    if workers > 1 and len(items) > 1:
        run_pool(capacity_item, items, min(workers, len(items)), done)
    else:
        for item in items:
            done(capacity_item(item))
    order = {candidate: i for i, candidate in enumerate(candidates)}
    rows = [PlanRow(result) for result in sorted(results, key=lambda r: order[r.candidate])]
    for row in rows:
        if row.capacity.status == "ok":
            row.replicas = row.division_replicas = math.ceil(demand.rate / row.capacity.capacity_rps - 1e-9)
            _price(row, prices, demand.rate)
    router = router_for(demand)
    simulations = sum(r.capacity.simulations for r in rows)
    _cap_gpus(rows, max_gpus)
    while True:  # verify the best until the best are verified (a cluster may need more replicas)
        rows.sort(key=_rank)
        pending = [r for r in rows if r.feasible][:VERIFY_TOP]
        pending = [r for r in pending if not r.verified]
        if not pending:
            break
        for row in pending:
            simulations += _verify(demand, row, router, prices)
            if progress:
                progress(f"cluster of {row.replicas} x {row.capacity.candidate.label}")
        _cap_gpus(rows, max_gpus)
    _explain_losers(rows)
    return Plan(demand, rows, router, simulations)


def _rank(row: PlanRow) -> tuple:
    """Feasible first; then cost, GPUs, and the most capacity per replica."""
    cost = row.usd_per_hour if row.usd_per_hour is not None else math.inf
    return (not row.feasible, cost, row.gpus, -row.capacity.capacity_rps)


def _cap_gpus(rows: list[PlanRow], max_gpus: int | None) -> None:
    for row in rows:
        if max_gpus is not None and row.feasible and row.gpus > max_gpus:
            row.capacity = dataclasses.replace(row.capacity, status="gpus",
                                               reason=f"needs {row.gpus} GPUs, over --max-gpus {max_gpus}")


def _price(row: PlanRow, prices: dict[str, float], rate: float) -> None:
    """$/hour of the row's GPUs, and per million output tokens at the target rate (output
    tokens per request as the row's run produced them)."""
    price = prices.get(row.capacity.candidate.gpu)
    if price is None:
        return
    row.usd_per_hour = price * row.gpus
    metrics = row.cluster_metrics or row.capacity.metrics
    requests_per_s = metrics.get("requests_per_s") or 0
    if requests_per_s > 0:
        output_tokens_per_s = metrics.get("output_tokens_per_s", 0) / requests_per_s * rate
        row.usd_per_million_output_tokens = row.usd_per_hour / (output_tokens_per_s * 3600) * 1e6


def _verify(demand: Demand, row: PlanRow, router: str, prices: dict[str, float]) -> int:
    """Simulate the cluster at the target rate from the division's replica count: add replicas
    while it misses the SLO, remove them while it still meets it. Returns the runs made."""
    candidate, runs = row.capacity.candidate, 0

    def meets(replicas: int) -> dict[str, Any] | None:
        nonlocal runs
        config = demand.config(candidate, pods=replicas, router=router if replicas > 1 else None)
        metrics, made = settled_run(demand, config, demand.workload, demand.rate, row.capacity.e2e_alone_s,
                                    min(MAX_CLUSTER_REQUESTS, demand.num_requests * replicas), demand.trace_rps)
        runs += made
        return metrics if demand.slo.meets(metrics) else None

    replicas, metrics = row.replicas, None
    while replicas <= row.replicas + MAX_EXTRA_REPLICAS and (metrics := meets(replicas)) is None:
        replicas += 1
    if metrics is None:
        row.capacity = dataclasses.replace(row.capacity, status="cluster", reason=(
            f"a cluster of up to {row.replicas + MAX_EXTRA_REPLICAS} replicas misses the SLO at {demand.rate:g} req/s"))
        return runs
    if replicas == row.replicas:  # met at the division: the cluster may need fewer (shared prefixes)
        while replicas > 1 and (fewer := meets(replicas - 1)) is not None:
            replicas, metrics = replicas - 1, fewer
    row.replicas, row.verified, row.cluster_metrics = replicas, True, metrics
    _price(row, prices, demand.rate)
    return runs


def _explain_losers(rows: list[PlanRow]) -> None:
    best = rows[0] if rows and rows[0].feasible else None
    for row in rows[1:] if best else rows:
        if not row.feasible:
            row.why_not = f"{row.capacity.status}: {row.capacity.reason}"
        elif best is not None and best.usd_per_hour is not None and row.usd_per_hour is not None \
                and row.usd_per_hour > best.usd_per_hour:
            row.why_not = f"cost: ${row.usd_per_hour - best.usd_per_hour:,.2f}/h more"
        elif best is not None and row.gpus > best.gpus:
            row.why_not = f"GPUs: {row.gpus - best.gpus} more"
        elif not row.verified:
            row.why_not = "not verified as a cluster (only the best candidates are)"
        else:
            row.why_not = "ties the winner; less per-replica capacity"


PLAN_SCHEMA = "kvplan.plan/1"
_FIGURES = ("ttft_s_p50", "ttft_s_p90", "ttft_s_p99", "tpot_s_p50", "tpot_s_p90", "tpot_s_p99", "e2e_s_p90",
            "kv_cache_usage_mean", "output_tokens_per_s")


def plan_json(plan: Plan) -> dict[str, Any]:
    """The plan as `kvplan plan --json` prints it (schema kvplan.plan/1, README)."""
    demand = plan.demand
    rows = []
    for row in plan.rows:
        cap, metrics = row.capacity, row.cluster_metrics or row.capacity.metrics
        rows.append({
            "gpu": cap.candidate.gpu, "tp": cap.candidate.tp, "kv_dtype": cap.candidate.kv_dtype,
            "max_num_seqs": cap.candidate.max_num_seqs, "status": cap.status, "reason": cap.reason or None,
            "replica_capacity_rps": round(cap.capacity_rps, 4), "saturation_rps": round(cap.saturation_rps, 4),
            "replicas": row.replicas, "replicas_by_division": row.division_replicas, "gpus": row.gpus, "verified": row.verified,
            "headroom_rps": round(row.headroom_rps, 4),
            "usd_per_hour": row.usd_per_hour, "usd_per_million_output_tokens": row.usd_per_million_output_tokens,
            "predicted": {name: metrics.get(name) for name in _FIGURES},
            "predicted_from": "cluster at the target rate" if row.verified else "one replica at its capacity",
            "time_error_band": metrics.get("time_error_band"), "why_not": row.why_not or None})
    winner = plan.winner
    return {"schema": PLAN_SCHEMA, "model": demand.model, "rate_rps": demand.rate, "slo": str(demand.slo),
            "workload": str(demand.workload.trace or demand.workload.kind), "optimization": demand.optimization,
            "engine": demand.engine,
            "engine_version": demand.engine_version, "router": plan.router, "simulations": plan.simulations,
            "winner": 0 if winner else None, "candidates": rows}


def plan_records(plan: Plan) -> list[ResultRecord]:
    """One kvplan.result/1 record (kind "plan") per candidate, for `kvplan report`'s cost
    against capacity chart."""
    data = plan_json(plan)
    run_id = f"plan-{data['model']}-{data['rate_rps']:g}".replace("/", "--")
    records = []
    for index, row in enumerate(data["candidates"]):
        params = {name: row[name] for name in ("gpu", "tp", "kv_dtype", "max_num_seqs", "status", "verified")}
        params.update(model=data["model"], rate_rps=data["rate_rps"], slo=data["slo"], workload=data["workload"])
        metrics = {name: row[name] for name in ("replicas", "gpus", "replica_capacity_rps", "headroom_rps",
                                                "usd_per_hour", "usd_per_million_output_tokens")}
        metrics["winner"] = 1 if data["winner"] == index else 0
        label = f"{row['replicas']}x {row['gpu']} TP{row['tp']} {row['kv_dtype']}"
        records.append(make_record("plan", run_id, "simulated", label, params, metrics))
    return records
