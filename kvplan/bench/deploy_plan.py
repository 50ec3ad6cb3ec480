"""`kvplan plan`: the cheapest deployment that serves a request rate within an SLO.

Every candidate (GPU x TP x KV dtype x max_num_seqs) is probed (replica_search.py), then
searched for the fewest replicas by division (one replica meets the SLO at rate / n),
cheapest-looking first (by the burst's drain rate), in waves of the local process pool's
size, each bounded by the cheapest plan found so far: branch and bound, so a candidate that
cannot beat it stops after one trial. The best candidates are then verified by simulating
the whole cluster at the target rate behind the router that suits the workload (kv-aware
when requests share prefixes, else least-loaded), adding replicas until the cluster meets
the SLO: prefix-cache hits and load imbalance move the answer away from the division, and
the plan follows the cluster. A pruned candidate whose bound the verified winner's cost
overtakes is searched again, so pruning never changes the answer.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvplan.bench.pool import run_pool
from kvplan.bench.replica_search import (CapacityResult, Candidate, Demand, probe_item, refine, search_item, settled_run,
                                         trace_rate)
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
    verdict: str = ""  # the same in a few words, for the table

    @property
    def gpus(self) -> int:
        return self.replicas * self.capacity.candidate.tp

    @property
    def headroom_rps(self) -> float:
        """The rate at which the plan stops meeting the SLO, by the per-replica division: at
        least this (replicas x the highest per-replica rate seen to meet it) ..."""
        return self.replicas * self.capacity.capacity_rps if self.feasible else 0.0

    @property
    def headroom_upper_rps(self) -> float:
        """... and below this (replicas x the lowest rate seen to miss it; inf when none did)."""
        return self.replicas * self.capacity.capacity_upper_rps if self.feasible else 0.0

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


Progress = Callable[[str, int], None]  # (what just finished, or "" for nothing; steps to add to the total)


def make_plan(demand: Demand, candidates: list[Candidate], prices: dict[str, float], workers: int = 1,
              max_gpus: int | None = None, progress: Progress | None = None) -> Plan:
    if demand.workload.trace is not None and demand.trace_rps is None:
        demand = dataclasses.replace(demand, trace_rps=trace_rate(demand.workload))
    note = progress or (lambda label, more: None)
    order = {candidate: i for i, candidate in enumerate(candidates)}
    probed = _map(probe_item, [(demand, candidate) for candidate in candidates], workers,
                  lambda r: note(f"probed {r.candidate.label}", 0))
    rows = [PlanRow(result) for result in sorted(probed, key=lambda r: order[r.candidate])]
    router = router_for(demand)
    pending = sorted((row for row in rows if row.capacity.status == "ok"),
                     key=lambda row: _guess_cost(row, prices, demand.rate))
    note("", len(pending))
    verify_runs = 0
    while pending:  # search, verify the best, and search again what the verified winner's cost reopens
        _search(demand, pending, prices, workers, max_gpus, _best_cost(rows, prices), note)
        verify_runs += _verify_best(demand, rows, router, prices, max_gpus, note)
        best = _best_cost(rows, prices)
        pending = [row for row in rows if row.capacity.status == "cost"
                   and (row.capacity.cost_floor or 0.0) < best - 1e-9]
        for row in pending:
            row.capacity = dataclasses.replace(row.capacity, status="ok", reason="", cost_floor=None)
        note("", len(pending))
    winner = rows[0] if rows and rows[0].feasible else None
    if winner is not None:  # the winner's headroom, to within 1/8 of its bracket
        note("", 1)
        refine(demand, winner.capacity)
        note("headroom of the winner", 0)
    _explain_losers(rows, bool(prices))
    return Plan(demand, rows, router, sum(r.capacity.simulations for r in rows) + verify_runs)


def _map(work: Callable[[Any], CapacityResult], items: list[Any], workers: int,
         done: Callable[[CapacityResult], None]) -> list[CapacityResult]:
    """work(item) for every item, on the local process pool when more than one worker is asked
    for; results in completion order."""
    results: list[CapacityResult] = []

    def keep(result: CapacityResult) -> None:
        results.append(result)
        done(result)

    if workers > 1 and len(items) > 1:
        run_pool(work, items, min(workers, len(items)), keep)
    else:
        for item in items:
            keep(work(item))
    return results


def _unit_price(prices: dict[str, float], gpu: str) -> float | None:
    """$/GPU-hour, or 1 per GPU when no prices are given (plans then rank by GPU count);
    None for a GPU the price file leaves out."""
    return prices.get(gpu) if prices else 1.0


def _guess_cost(row: PlanRow, prices: dict[str, float], rate: float) -> float:
    """Cost by the burst's drain rate, to search the cheapest-looking first."""
    unit, result = _unit_price(prices, row.capacity.candidate.gpu), row.capacity
    if unit is None or result.saturation_rps <= 0:
        return math.inf
    return unit * result.candidate.tp * rate / result.saturation_rps


def _row_cost(row: PlanRow, prices: dict[str, float]) -> float:
    unit = _unit_price(prices, row.capacity.candidate.gpu)
    return unit * row.gpus if unit is not None and row.feasible else math.inf


def _best_cost(rows: list[PlanRow], prices: dict[str, float]) -> float:
    return min((_row_cost(row, prices) for row in rows), default=math.inf)


def _search(demand: Demand, rows: list[PlanRow], prices: dict[str, float], workers: int, max_gpus: int | None,
            best: float, note: Progress) -> None:
    """fewest_replicas for every row, in waves of `workers`, each bounded by the best cost so far."""
    by_candidate = {row.capacity.candidate: row for row in rows}
    for start in range(0, len(rows), max(workers, 1)):
        items = []
        for row in rows[start:start + max(workers, 1)]:
            tp, unit = row.capacity.candidate.tp, _unit_price(prices, row.capacity.candidate.gpu)
            by_cost = None if unit is None or math.isinf(best) else math.floor(best / (unit * tp) + 1e-9)
            by_gpus = None if max_gpus is None else max_gpus // tp
            items.append((demand, row.capacity, by_cost, by_gpus, (unit or 1.0) * tp))

        def done(result: CapacityResult) -> None:
            nonlocal best
            row = by_candidate[result.candidate]
            row.capacity = result
            if result.searched:
                row.replicas = row.division_replicas = result.replicas
                _price(row, prices, demand.rate)
                best = min(best, _row_cost(row, prices))
            note(result.candidate.label, 0)

        _map(search_item, items, workers, done)


def _verify_best(demand: Demand, rows: list[PlanRow], router: str, prices: dict[str, float],
                 max_gpus: int | None, note: Progress) -> int:
    """Verify the best until the best are verified (a cluster may need more replicas); the runs made."""
    runs = 0
    while True:
        rows.sort(key=_rank)
        pending = [r for r in rows if r.feasible][:VERIFY_TOP]
        pending = [r for r in pending if not r.verified]
        if not pending:
            return runs
        note("", len(pending))
        for row in pending:
            runs += _verify(demand, row, router, prices)
            note(f"cluster of {row.replicas} x {row.capacity.candidate.label}", 0)
            if max_gpus is not None and row.feasible and row.gpus > max_gpus:
                row.capacity = dataclasses.replace(row.capacity, status="gpus", reason=(
                    f"the cluster needs {row.gpus} GPUs, over --max-gpus {max_gpus}"))


def _rank(row: PlanRow) -> tuple:
    """Feasible first; then cost, GPUs, and the most capacity per replica."""
    cost = row.usd_per_hour if row.usd_per_hour is not None else math.inf
    return (not row.feasible, cost, row.gpus, -row.capacity.capacity_rps)


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


_VERDICTS = {"memory": "does not fit", "latency": "misses the SLO", "gpus": "over --max-gpus",
             "cluster": "cluster misses the SLO"}


def _explain_losers(rows: list[PlanRow], priced: bool) -> None:
    best = rows[0] if rows and rows[0].feasible else None
    for row in rows[1:] if best else rows:
        cap = row.capacity
        if cap.status == "cost":
            floor = f"${cap.cost_floor:,.2f}/h" if priced else f"{cap.cost_floor:g} GPUs"
            row.why_not, row.verdict = f"cost: {cap.reason} (at least {floor})", f"cost >= {floor}"
        elif not row.feasible:
            row.why_not, row.verdict = f"{cap.status}: {cap.reason}", _VERDICTS.get(cap.status, cap.status)
        elif best is not None and best.usd_per_hour is not None and row.usd_per_hour is not None \
                and row.usd_per_hour > best.usd_per_hour:
            row.why_not = row.verdict = f"cost: +${row.usd_per_hour - best.usd_per_hour:,.2f}/h"
        elif best is not None and best.usd_per_hour is not None and row.usd_per_hour is None:
            row.why_not, row.verdict = "no price for this GPU in the price file", "no price"
        elif best is not None and row.gpus > best.gpus:
            row.why_not = row.verdict = f"GPUs: +{row.gpus - best.gpus}"
        elif not row.verified:
            row.why_not, row.verdict = "not verified as a cluster (only the best candidates are)", "unverified"
        else:
            row.why_not, row.verdict = "ties the winner; less per-replica capacity", "ties the winner"


PLAN_SCHEMA = "kvplan.plan/1"
_FIGURES = ("ttft_s_p50", "ttft_s_p90", "ttft_s_p99", "tpot_s_p50", "tpot_s_p90", "tpot_s_p99", "e2e_s_p50", "e2e_s_p90",
            "e2e_s_p99",
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
            "replica_capacity_rps": round(cap.capacity_rps, 4), "replica_capacity_upper_rps": _finite(cap.capacity_upper_rps),
            "saturation_rps": round(cap.saturation_rps, 4),
            "replicas": row.replicas, "replicas_by_division": row.division_replicas, "gpus": row.gpus, "verified": row.verified,
            "headroom_rps": round(row.headroom_rps, 4), "headroom_upper_rps": _finite(row.headroom_upper_rps),
            "usd_per_hour": row.usd_per_hour, "usd_per_million_output_tokens": row.usd_per_million_output_tokens,
            "predicted": {name: metrics.get(name) for name in _FIGURES},
            "predicted_from": "cluster at the target rate" if row.verified else "one replica at its capacity",
            "time_error_band": metrics.get("time_error_band"), "why_not": row.why_not or None,
            "verdict": row.verdict or None})
    winner = plan.winner
    return {"schema": PLAN_SCHEMA, "model": demand.model, "rate_rps": demand.rate, "slo": str(demand.slo),
            "workload": str(demand.workload.trace or demand.workload.kind), "optimization": demand.optimization,
            "engine": demand.engine,
            "engine_version": demand.engine_version, "router": plan.router, "simulations": plan.simulations,
            "winner": 0 if winner else None, "candidates": rows}


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
        params = {name: row[name] for name in ("gpu", "tp", "kv_dtype", "max_num_seqs", "status", "verified")}
        params.update(model=data["model"], rate_rps=data["rate_rps"], slo=data["slo"], workload=data["workload"])
        metrics = {name: row[name] for name in ("replicas", "gpus", "replica_capacity_rps", "headroom_rps",
                                                "usd_per_hour", "usd_per_million_output_tokens")}
        metrics["winner"] = 1 if data["winner"] == index else 0
        label = f"{row['replicas']}x {row['gpu']} TP{row['tp']} {row['kv_dtype']}"
        records.append(make_record("plan", run_id, "simulated", label, params, metrics))
    return records
