"""`kvplan plan --disagg`: prefill/decode-disaggregated deployments (xPyD), searched as
DistServe places them: each phase's pool is sized on its own, then the pair is verified.

1. pools: for every candidate (GPU, TP, KV dtype, max_num_seqs), the fewest prefill replicas
   that meet the SLO's TTFT targets at the target rate (prompts with one output token, as the
   P/D proxy sends them) and the fewest decode replicas that meet the whole SLO measured from
   the moment the KV arrives (prompts whose KV is transferred), by the same branch-and-bound
   search as aggregated candidates, bounded by the best aggregated plan (a pool that alone
   costs more cannot be part of a cheaper plan);
2. ratio: every prefill TP with every decode TP of the same GPU, KV dtype and max_num_seqs;
   x prefill and y decode replicas from the pools' searches; the cheapest pair per group is
   the group's row;
3. verification: the whole pipeline at the target rate (kvplan.sim.disagg: prefill pool, KV
   transfer over the GPU profile's interconnect or --kv-link-gbps, decode pool); while it
   misses, a replica is added to the pool the miss points at (TPOT, or a TTFT whose decode
   wait outweighs the prefill's, is the decode pool's), and while it meets at the division,
   either pool gives one back if it still meets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from kvplan.bench.workloads import WorkloadSpec
from kvplan.deploy.demand import Candidate, Demand
from kvplan.deploy.plan_rows import MAX_CLUSTER_REQUESTS, MAX_EXTRA_REPLICAS, PlanRow
from kvplan.deploy.prices import unit_price
from kvplan.deploy.replica_search import (
    CapacityResult,
    SearchStatus,
    fewest_replicas,
    probe,
    search_bounds,
)
from kvplan.deploy.slo import Slo
from kvplan.deploy.trials import Run, settled_run
from kvplan.sim.disagg import Phase
from kvplan.spec.setting_error import SettingError

_FURTHEST = (SearchStatus.COST, SearchStatus.GPUS, SearchStatus.LATENCY, SearchStatus.MEMORY)


def pool_demands(demand: Demand) -> tuple[Demand, Demand]:
    """What each pool is held to: the prefill pool to the SLO's TTFT targets, the decode pool
    to the whole SLO from the moment a request's KV has arrived."""
    ttft = Slo(tuple(target for target in demand.slo.targets if target.figure == "ttft"))
    if not ttft.targets:
        raise SettingError(
            "{disagg} sizes the prefill pool by time to first token: add a ttft target to {slo}, "
            "e.g. {slo} ttft_p90=2s,tpot_p90=60ms"
        )
    return (
        dataclasses.replace(demand, phase=Phase.PREFILL, slo=ttft),
        dataclasses.replace(demand, phase=Phase.DECODE),
    )


def pool_item(item: tuple[Demand, Candidate, int | None, int | None, float]) -> CapacityResult:
    """probe, then fewest_replicas, for a process pool (one picklable argument)."""
    demand, candidate, by_cost, by_gpus, unit_cost = item
    return fewest_replicas(demand, probe(demand, candidate), by_cost, by_gpus, unit_cost)


@dataclass
class DisaggRow(PlanRow):
    """x prefill replicas and y decode replicas of one GPU type and KV dtype; `capacity` and
    `replicas` are the decode pool's."""

    parts: ClassVar[int] = 2  # pools to run: at equal cost and GPUs, an aggregated plan ranks first
    prefill: CapacityResult | None = None
    prefill_replicas: int = 0
    link_gbps: float | None = None  # None: the GPU profile's interconnect

    @property
    def gpus(self) -> int:
        prefill_tp = self.prefill.candidate.tp if self.prefill else 0
        return self.replicas * self.capacity.candidate.tp + self.prefill_replicas * prefill_tp

    @property
    def feasible(self) -> bool:
        return (
            super().feasible
            and self.prefill is not None
            and self.prefill.status is SearchStatus.OK
            and self.prefill_replicas > 0
        )

    def division_headroom(self) -> tuple[float, float]:
        """The slower pool's: it stops meeting its share of the SLO first."""
        assert self.prefill is not None
        return (
            min(
                self.replicas * self.capacity.capacity_rps,
                self.prefill_replicas * self.prefill.capacity_rps,
            ),
            min(
                self.replicas * self.capacity.capacity_upper_rps,
                self.prefill_replicas * self.prefill.capacity_upper_rps,
            ),
        )

    @property
    def layout(self) -> str:
        decode = self.capacity.candidate
        if not self.feasible or self.prefill is None:
            return f"{decode.gpu} P/D {decode.kv_dtype}"
        return (
            f"{self.prefill_replicas}P TP{self.prefill.candidate.tp} + {self.replicas}D "
            f"TP{decode.tp} "
            f"{decode.gpu} {decode.kv_dtype}"
        )

    def extra_json(self) -> dict[str, Any]:
        prefill = self.prefill
        metrics = self.cluster_metrics
        return {
            "disaggregated": {
                "prefill_tp": prefill.candidate.tp if prefill else None,
                "prefill_replicas": self.prefill_replicas,
                "prefill_capacity_rps": round(prefill.capacity_rps, 4) if prefill else None,
                "decode_tp": self.capacity.candidate.tp,
                "decode_replicas": self.replicas,
                "decode_capacity_rps": round(self.capacity.capacity_rps, 4),
                "kv_link_gbps": self.link_gbps,
                "kv_transfer_s_mean": metrics.get("kv_transfer_s_mean"),
                "prefill_ttft_s_p90": metrics.get("prefill_ttft_s_p90"),
                "decode_wait_s_p90": metrics.get("decode_wait_s_p90"),
            }
        }

    def refine(self, demand: Demand) -> int:
        """Each pool's capacity bracket stays as its replica search left it (the headroom is the
        slower pool's); no runs."""
        return 0

    def verify(self, demand: Demand, router: str, prices: dict[str, float]) -> int:
        """The pipeline at the target rate: grow the pool the miss points at while it misses,
        let either pool give a replica back while it still meets. Returns the runs made."""
        assert self.prefill is not None
        runs = 0
        e2e_alone = self.prefill.e2e_alone_s + self.capacity.e2e_alone_s

        def attempt(prefills: int, decodes: int) -> Mapping[str, Any]:
            nonlocal runs
            metrics, made = settled_run(
                demand,
                pipeline_run(demand, self, prefills, decodes, router),
                demand.rate,
                e2e_alone,
                min(MAX_CLUSTER_REQUESTS, demand.num_requests * (prefills + decodes)),
            )
            runs += made
            return metrics.figures

        x, y = self.prefill_replicas, self.replicas
        metrics = attempt(x, y)
        added = 0
        while not demand.slo.meets(metrics) and added < MAX_EXTRA_REPLICAS:
            if _decode_is_short(demand.slo, metrics):
                y += 1
            else:
                x += 1
            added += 1
            metrics = attempt(x, y)
        if not demand.slo.meets(metrics):
            self.capacity = dataclasses.replace(
                self.capacity,
                status=SearchStatus.CLUSTER,
                reason=(f"{x} prefill + {y} decode replicas miss the SLO at {demand.rate:g} req/s"),
            )
            return runs
        if not added:  # met at the division: either pool may need fewer, prefill first
            for fewer_x, fewer_y in ((1, 0), (0, 1)):
                while x - fewer_x >= 1 and y - fewer_y >= 1:
                    fewer = attempt(x - fewer_x, y - fewer_y)
                    if not demand.slo.meets(fewer):
                        break
                    x, y, metrics = x - fewer_x, y - fewer_y, fewer
        self.prefill_replicas, self.replicas, self.verified, self.cluster_metrics = (
            x,
            y,
            True,
            metrics,
        )
        self.verified_rps = demand.rate
        self.price(prices, demand.rate)
        return runs


def _decode_is_short(slo: Slo, metrics: Mapping[str, Any]) -> bool:
    """Does a miss point at the decode pool: a TPOT target missed, or a first token held up
    more by the decode side's wait than by the prefill pool?"""
    missed = {target.figure for target in slo.targets if not Slo((target,)).meets(metrics)}
    if "tpot" in missed:
        return True
    return float(metrics.get("decode_wait_s_p90") or 0.0) > float(
        metrics.get("prefill_ttft_s_p90") or 0.0
    )


def pipeline_run(demand: Demand, row: DisaggRow, prefills: int, decodes: int, router: str) -> Run:
    """A Run (trials.settled_run) of the whole pipeline: x prefill pods behind the
    plan's router, the link, y decode pods behind least-loaded."""
    from kvplan.bench.optimizations import parse_optimization
    from kvplan.bench.run import configured, prepare
    from kvplan.bench.simulation import Pipeline, RunMetrics, simulate

    assert row.prefill is not None
    prefill_candidate, decode_candidate = row.prefill.candidate, row.capacity.candidate
    optimization = parse_optimization(demand.optimization)

    def run(workload: WorkloadSpec) -> RunMetrics:
        # one workload, both pools
        prefill_config, built = prepare(demand.config(prefill_candidate), workload)
        decode_config = configured(demand.config(decode_candidate), built)
        pipeline = Pipeline(prefills, decode_config, decodes, row.link_gbps)
        metrics, _ = simulate(
            prefill_config, built.requests, optimization, router=router, pipeline=pipeline
        )
        return metrics

    return run


def disaggregated_rows(
    demand: Demand,
    candidates: list[Candidate],
    prices: dict[str, float],
    search: Callable[[Callable[[Any], CapacityResult], list[Any]], list[CapacityResult]],
    best_cost: float,
    max_gpus: int | None,
    link_gbps: float | None,
) -> tuple[list[DisaggRow], int]:
    """One row per (GPU, KV dtype, max_num_seqs): its cheapest prefill TP x decode TP pair by the
    pools' replica counts, or why none serves; and the simulations the pools' searches ran.
    `search` maps pool_item over items (the plan's process pool), results in the items' order."""
    prefill_demand, decode_demand = pool_demands(demand)
    items = [
        (
            pool_demand,
            candidate,
            *search_bounds(candidate, unit_price(prices, candidate.gpu), best_cost, max_gpus),
        )
        for pool_demand in (prefill_demand, decode_demand)
        for candidate in candidates
    ]
    results = search(pool_item, items)
    prefills = {r.candidate: r for r in results[: len(candidates)]}
    decodes = {r.candidate: r for r in results[len(candidates) :]}
    groups: dict[tuple, list[Candidate]] = {}
    for candidate in candidates:
        groups.setdefault((candidate.gpu, candidate.kv_dtype, candidate.max_num_seqs), []).append(
            candidate
        )
    rows = []
    for members in groups.values():
        pairs = [
            DisaggRow(
                decodes[d],
                replicas=decodes[d].replicas,
                division_replicas=decodes[d].replicas,
                prefill=prefills[p],
                prefill_replicas=prefills[p].replicas,
                link_gbps=link_gbps,
            )
            for p in members
            for d in members
            if prefills[p].searched and decodes[d].searched
        ]
        if pairs:
            rows.append(
                min(
                    pairs,
                    key=lambda row: (
                        row.gpus * (unit_price(prices, row.capacity.candidate.gpu) or 1.0),
                        row.gpus,
                    ),
                )
            )
            continue
        failed = [
            (side, pool[c])
            for side, pool in (("prefill", prefills), ("decode", decodes))
            for c in members
            if not pool[c].searched
        ]
        # the pool that got furthest says why: pruned for cost before over --max-gpus, before
        # missing the SLO, before not fitting
        side, worst = min(
            failed,
            key=lambda pair: (
                _FURTHEST.index(pair[1].status) if pair[1].status in _FURTHEST else len(_FURTHEST)
            ),
        )
        rows.append(
            DisaggRow(
                dataclasses.replace(worst, reason=f"{side} pool: {worst.reason}"),
                link_gbps=link_gbps,
            )
        )
    for row in rows:
        if row.feasible:
            row.price(prices, demand.rate)
    return rows, sum(r.simulations for r in results)
