"""`kvplan plan`: the cheapest deployment that serves a request rate within an SLO.

Every candidate (GPU x TP x KV dtype x max_num_seqs) is probed (replica_search.py), then
searched for the fewest replicas by division (one replica meets the SLO at rate / n),
cheapest-looking first (by the burst's drain rate), in the executor's waves (the local
pool's size; all at once on Ray), each bounded by the cheapest plan found so far: branch and
bound, so a candidate that cannot beat it stops after one trial. The best candidates are
then verified by simulating the whole cluster at the target rate behind the router that
suits the workload (kv-aware when requests share prefixes, else least-loaded), with as many
replicas as the cluster needs to meet the SLO: prefix-cache hits and load imbalance move the
answer away from the division, and the plan follows the cluster. A pruned candidate whose
bound the verified winner's cost overtakes is searched again, so pruning never changes the
answer.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from kvplan.deploy.demand import Candidate, Demand
from kvplan.deploy.plan_rows import Plan, PlanRow, router_for
from kvplan.deploy.prices import unit_price
from kvplan.deploy.replica_search import (
    CapacityResult,
    SearchStatus,
    check_workload,
    probe_item,
    search_bounds,
    search_item,
)
from kvplan.deploy.trials import trace_rate
from kvplan.execution.executors import Executor, LocalExecutor

VERIFY_TOP = 3  # candidates verified as a cluster


Progress = Callable[
    [str, int], None
]  # (what just finished, or "" for nothing; steps to add to the total)


def make_plan(
    demand: Demand,
    candidates: list[Candidate],
    prices: dict[str, float],
    executor: Executor = LocalExecutor(),
    max_gpus: int | None = None,
    progress: Progress | None = None,
    disagg: bool = False,
    kv_link_gbps: float | None = None,
) -> Plan:
    if demand.workload.trace is not None and demand.trace_rps is None:
        demand = dataclasses.replace(demand, trace_rps=trace_rate(demand.workload))
    # a setting the generator or the engine refuses is the user's error, not every candidate's
    check_workload(demand, candidates)
    note = progress or (lambda label, more: None)
    order = {candidate: i for i, candidate in enumerate(candidates)}
    probed = _map(
        probe_item,
        [(demand, candidate) for candidate in candidates],
        executor,
        lambda r: note(f"probed {r.candidate.label}", 0),
    )
    rows = [PlanRow(result) for result in sorted(probed, key=lambda r: order[r.candidate])]
    router = router_for(demand)
    pending = sorted(
        (row for row in rows if row.capacity.status is SearchStatus.OK),
        key=lambda row: _guess_cost(row, prices, demand.rate),
    )
    note("", len(pending))
    runs = 0  # verification and refinement; the searches' own runs are counted on their results
    while (
        pending
    ):  # search, verify the best, and search again what the verified winner's cost reopens
        _search(demand, pending, prices, executor, max_gpus, _best_cost(rows, prices), note)
        runs += _verify_best(demand, rows, router, prices, max_gpus, note)
        best = _best_cost(rows, prices)
        pending = [
            row
            for row in rows
            if row.capacity.status is SearchStatus.COST
            and (row.capacity.cost_floor or 0.0) < best - 1e-9
        ]
        for row in pending:
            row.capacity = dataclasses.replace(
                row.capacity, status=SearchStatus.OK, reason="", cost_floor=None
            )
        note("", len(pending))
    runs += sum(row.capacity.simulations for row in rows)
    if disagg:
        from kvplan.deploy.disagg_plan import disaggregated_rows

        note("", 2 * len(candidates))
        split, pool_runs = disaggregated_rows(
            demand,
            candidates,
            prices,
            lambda work, items: _map(
                work, items, executor, lambda r: note(f"pool {r.candidate.label}", 0), ordered=True
            ),
            _best_cost(rows, prices),
            max_gpus,
            kv_link_gbps,
        )
        rows.extend(split)
        runs += pool_runs + _verify_best(demand, rows, router, prices, max_gpus, note)
    winner = rows[0] if rows and rows[0].feasible else None
    if winner is not None:  # the winner's headroom, to within 1/8 of its bracket
        note("", 1)
        runs += winner.refine(demand)
        note("headroom of the winner", 0)
    _explain_losers(rows, bool(prices))
    return Plan(demand, rows, router, runs)


def _map(
    work: Callable[[Any], CapacityResult],
    items: list[Any],
    executor: Executor,
    done: Callable[[CapacityResult], None],
    ordered: bool = False,
) -> list[CapacityResult]:
    """work(item) for every item on the executor; results in completion order, or in the items'
    order when `ordered`."""
    results: list[tuple[int, CapacityResult]] = []

    def keep(pair: tuple[int, CapacityResult]) -> None:
        results.append(pair)
        done(pair[1])

    executor.map(_indexed, [(work, pair) for pair in enumerate(items)], keep)
    if ordered:
        results.sort(key=lambda pair: pair[0])
    return [result for _, result in results]


def _indexed(
    job: tuple[Callable[[Any], CapacityResult], tuple[int, Any]],
) -> tuple[int, CapacityResult]:
    work, (index, item) = job
    return index, work(item)


def _guess_cost(row: PlanRow, prices: dict[str, float], rate: float) -> float:
    """Cost by the burst's drain rate, to search the cheapest-looking first."""
    unit, result = unit_price(prices, row.capacity.candidate.gpu), row.capacity
    if unit is None or result.saturation_rps <= 0:
        return math.inf
    return unit * result.candidate.tp * rate / result.saturation_rps


def _row_cost(row: PlanRow, prices: dict[str, float]) -> float:
    unit = unit_price(prices, row.capacity.candidate.gpu)
    return unit * row.gpus if unit is not None and row.feasible else math.inf


def _best_cost(rows: list[PlanRow], prices: dict[str, float]) -> float:
    return min((_row_cost(row, prices) for row in rows), default=math.inf)


def _search(
    demand: Demand,
    rows: list[PlanRow],
    prices: dict[str, float],
    executor: Executor,
    max_gpus: int | None,
    best: float,
    note: Progress,
) -> None:
    """fewest_replicas for every row, in the executor's waves, each bounded by the best cost so
    far."""
    wave = executor.wave or len(rows)
    by_candidate = {row.capacity.candidate: row for row in rows}
    for start in range(0, len(rows), max(wave, 1)):
        items = [
            (
                demand,
                row.capacity,
                *search_bounds(
                    row.capacity.candidate,
                    unit_price(prices, row.capacity.candidate.gpu),
                    best,
                    max_gpus,
                ),
            )
            for row in rows[start : start + max(wave, 1)]
        ]

        def done(result: CapacityResult) -> None:
            nonlocal best
            row = by_candidate[result.candidate]
            row.capacity = result
            if result.searched:
                row.replicas = row.division_replicas = result.replicas
                row.price(prices, demand.rate)
                best = min(best, _row_cost(row, prices))
            note(result.candidate.label, 0)

        _map(search_item, items, executor, done)


def _verify_best(
    demand: Demand,
    rows: list[PlanRow],
    router: str,
    prices: dict[str, float],
    max_gpus: int | None,
    note: Progress,
) -> int:
    """Verify the best until the best are verified (a cluster may need more replicas); the runs
    made."""
    runs = 0
    while True:
        rows.sort(key=_rank)
        pending = [r for r in rows if r.feasible][:VERIFY_TOP]
        pending = [r for r in pending if not r.verified]
        if not pending:
            return runs
        note("", len(pending))
        for row in pending:
            runs += row.verify(demand, router, prices)
            note(f"cluster of {row.replicas} x {row.capacity.candidate.label}", 0)
            if max_gpus is not None and row.feasible and row.gpus > max_gpus:
                row.capacity = dataclasses.replace(
                    row.capacity,
                    status=SearchStatus.GPUS,
                    reason=(f"the cluster needs {row.gpus} GPUs, over --max-gpus {max_gpus}"),
                )


def _rank(row: PlanRow) -> tuple:
    """Feasible first; then cost, GPUs, the simpler deployment, and the most capacity per
    replica."""
    cost = row.usd_per_hour if row.usd_per_hour is not None else math.inf
    return (not row.feasible, cost, row.gpus, row.parts, -row.capacity.capacity_rps)


_VERDICTS = {
    SearchStatus.MEMORY: "does not fit",
    SearchStatus.LATENCY: "misses the SLO",
    SearchStatus.GPUS: "over --max-gpus",
    SearchStatus.CLUSTER: "cluster misses the SLO",
}


def _explain_losers(rows: list[PlanRow], priced: bool) -> None:
    best = rows[0] if rows and rows[0].feasible else None
    for row in rows[1:] if best else rows:
        cap = row.capacity
        if cap.status is SearchStatus.COST:
            floor = f"${cap.cost_floor:,.2f}/h" if priced else f"{cap.cost_floor:g} GPUs"
            row.why_not, row.verdict = f"cost: {cap.reason} (at least {floor})", f"cost >= {floor}"
        elif not row.feasible:
            row.why_not, row.verdict = (
                f"{cap.status}: {cap.reason}",
                _VERDICTS.get(cap.status, cap.status),
            )
        elif (
            best is not None
            and best.usd_per_hour is not None
            and row.usd_per_hour is not None
            and row.usd_per_hour > best.usd_per_hour
        ):
            row.why_not = row.verdict = f"cost: +${row.usd_per_hour - best.usd_per_hour:,.2f}/h"
        elif best is not None and best.usd_per_hour is not None and row.usd_per_hour is None:
            row.why_not, row.verdict = "no price for this GPU in the price file", "no price"
        elif best is not None and row.gpus > best.gpus:
            row.why_not = row.verdict = f"GPUs: +{row.gpus - best.gpus}"
        elif not row.verified:
            row.why_not, row.verdict = (
                "not verified as a cluster (only the best candidates are)",
                "unverified",
            )
        else:
            row.why_not, row.verdict = (
                "ties the winner; less per-replica capacity",
                "ties the winner",
            )
