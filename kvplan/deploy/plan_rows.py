"""The rows of a plan: one deployment each, with its replica count, cost and cluster check.

An aggregated row is replicas of one candidate (GPU, TP, KV dtype, max_num_seqs) behind a
router; `verify` simulates that whole cluster at the target rate, adding replicas while it
misses the SLO and, if it meets at once, finding the fewest that still meet, because
prefix-cache hits and load imbalance move the answer away from the per-replica division.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kvplan.deploy.demand import Demand
from kvplan.deploy.replica_search import CapacityResult, SearchStatus, refine, simulate_run
from kvplan.deploy.trials import settled_run
from kvplan.workload.shared_prefix import SHARED_PREFIX_KINDS

MAX_EXTRA_REPLICAS = 4  # replicas a failing cluster may add before the plan gives up on it
MAX_CLUSTER_REQUESTS = 3000


@dataclass
class PlanRow:
    parts: ClassVar[int] = 1  # kinds of server to run: a tie-breaker for the simpler deployment
    capacity: CapacityResult
    replicas: int = 0
    division_replicas: int = 0  # ceil(rate / per-replica capacity), before the cluster is simulated
    verified: bool = False  # the cluster was simulated at the target rate
    verified_rps: float = 0.0  # the rate the cluster check met (the target rate, once verified)
    cluster_metrics: Mapping[str, Any] = field(default_factory=dict)
    usd_per_hour: float | None = None
    usd_per_million_output_tokens: float | None = None
    why_not: str = ""  # for every row but the winner
    verdict: str = ""  # the same in a few words, for the table

    @property
    def gpus(self) -> int:
        return self.replicas * self.capacity.candidate.tp

    def division_headroom(self) -> tuple[float, float]:
        """The rate at which the plan stops meeting the SLO by the per-replica division: above
        replicas x the highest per-replica rate seen to meet it, below replicas x the lowest seen
        to miss it."""
        return (
            self.replicas * self.capacity.capacity_rps,
            self.replicas * self.capacity.capacity_upper_rps,
        )

    @property
    def headroom_rps(self) -> float:
        """At least the division's lower bound, and the rate the cluster check met ..."""
        if not self.feasible:
            return 0.0
        return max(self.division_headroom()[0], self.verified_rps)

    @property
    def headroom_upper_rps(self) -> float:
        """... and below the division's upper bound, unless the cluster check met more (inf)."""
        if not self.feasible:
            return 0.0
        upper = self.division_headroom()[1]
        return upper if upper > self.headroom_rps else math.inf

    @property
    def feasible(self) -> bool:
        return self.capacity.status is SearchStatus.OK and self.replicas > 0

    @property
    def layout(self) -> str:
        """How the GPUs are laid out, e.g. '2x h100-80gb TP4 fp8'."""
        candidate = self.capacity.candidate
        count = f"{self.replicas}x " if self.feasible else ""
        return f"{count}{candidate.gpu} TP{candidate.tp} {candidate.kv_dtype}"

    def price(self, prices: dict[str, float], rate: float) -> None:
        """$/hour of the row's GPUs, and per million output tokens at the target rate (output
        tokens per request as the row's run produced them)."""
        price = prices.get(self.capacity.candidate.gpu)
        if price is None:
            return
        self.usd_per_hour = price * self.gpus
        metrics = self.cluster_metrics or self.capacity.metrics
        requests_per_s = metrics.get("requests_per_s") or 0
        if requests_per_s > 0:
            output_tokens_per_s = metrics.get("output_tokens_per_s", 0) / requests_per_s * rate
            self.usd_per_million_output_tokens = (
                self.usd_per_hour / (output_tokens_per_s * 3600) * 1e6
            )

    def extra_json(self) -> dict[str, Any]:
        """Fields a kind of row adds to its kvplan.plan/1 entry."""
        return {"disaggregated": None}

    def refine(self, demand: Demand) -> int:
        """Narrow the per-replica capacity bracket (the headroom's); the runs made."""
        before = self.capacity.simulations
        refine(demand, self.capacity)
        return self.capacity.simulations - before

    def verify(self, demand: Demand, router: str, prices: dict[str, float]) -> int:
        """Simulate the cluster at the target rate from the division's replica count: add replicas
        while it misses the SLO; if it meets at once, the fewest that still meet. Returns the runs
        made."""
        candidate, runs = self.capacity.candidate, 0

        def meets(replicas: int) -> Mapping[str, Any] | None:
            nonlocal runs
            config = demand.config(
                candidate, pods=replicas, router=router if replicas > 1 else None
            )
            metrics, made = settled_run(
                demand,
                lambda workload: simulate_run(demand, config, workload),
                demand.rate,
                self.capacity.e2e_alone_s,
                min(MAX_CLUSTER_REQUESTS, demand.num_requests * replicas),
            )
            runs += made
            return metrics.figures if demand.slo.meets(metrics.figures) else None

        replicas, metrics = self.replicas, None
        while (
            replicas <= self.replicas + MAX_EXTRA_REPLICAS and (metrics := meets(replicas)) is None
        ):
            replicas += 1
        if metrics is None:
            self.capacity = dataclasses.replace(
                self.capacity,
                status=SearchStatus.CLUSTER,
                reason=(
                    f"a cluster of up to {self.replicas + MAX_EXTRA_REPLICAS} replicas misses the "
                    "SLO "
                    f"at {demand.rate:g} req/s"
                ),
            )
            return runs
        if (
            replicas == self.replicas
        ):  # met at the division: the cluster may need fewer (shared prefixes,
            missing = 0  # or a per-replica trial that missed by noise), found by bisection
            while replicas - missing > 1:
                middle = (missing + replicas) // 2
                if (fewer := meets(middle)) is not None:
                    replicas, metrics = middle, fewer
                else:
                    missing = middle
        self.replicas, self.verified, self.cluster_metrics, self.verified_rps = (
            replicas,
            True,
            metrics,
            demand.rate,
        )
        self.price(prices, demand.rate)
        return runs


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
