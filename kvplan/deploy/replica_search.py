"""How many replicas of one candidate serve the target rate within an SLO, found with
kvplan's own simulated engine (the same memory model, scheduler and step model as
`kvplan bench`).

For one candidate (GPU, TP, KV dtype, max_num_seqs):
1. probe: it is sized as `bench` sizes it; weights or one request that do not fit end it
   ("memory"). Every request alone (a closed loop of one): if the SLO fails with no queue, no
   rate meets it ("latency"). Everything at once: the rate a burst drains at, a first guess
   of the capacity (an underestimate: a burst's drain tail runs a shrinking batch).
2. fewest replicas: the least n for which one replica meets the SLO at rate / n, by galloping
   up from the guess and bisecting on the integer n. Only as many replicas as could still
   beat the best plan found so far are tried (`search_bounds`); a candidate that misses at
   that many is pruned ("cost"), which is a branch-and-bound search: the answer is the same
   as searching every candidate to the end. Trials run until settled (`trials.settled_run`), so a
   growing queue or batch shows in their percentiles.
3. every trial narrows the per-replica capacity's bracket (the highest rate seen to meet the
   SLO, the lowest seen to miss it); `refine` bisects it further for the winner's headroom.
Meeting a tighter SLO implies meeting a looser one run by run, so a tighter SLO never gives
fewer replicas.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvplan.bench.config import BenchConfig
from kvplan.bench.optimizations import parse_optimization
from kvplan.bench.workloads import WorkloadSpec
from kvplan.core.engine_factory import DoesNotFit
from kvplan.deploy.demand import Candidate, Demand
from kvplan.deploy.search_status import SearchStatus
from kvplan.deploy.trials import sent_at, settled_run

if TYPE_CHECKING:
    from kvplan.bench.simulation import RunMetrics

REFINE_BISECTIONS = 3  # the winner's per-replica capacity to within 1/8 of its bracket
EXPANSIONS = 3  # doublings of an open bracket's top while the top still meets the SLO
MAX_REPLICAS = 1024  # a candidate needing more is not a plan
ALONE_REQUESTS = 8  # requests of the no-load probe
UNBOUNDED_RATE = 1e9  # requests/s: with a closed loop of one, each request goes when the last ends


@dataclass
class CapacityResult:
    candidate: Candidate
    status: SearchStatus
    reason: str = ""
    replicas: int = 0  # fewest n for which one replica meets the SLO at rate / n (0 until searched)
    capacity_rps: float = 0.0  # highest per-replica rate seen to meet the SLO
    capacity_upper_rps: float = math.inf  # lowest per-replica rate seen to miss it
    saturation_rps: float = 0.0
    # the figures of the run at capacity_rps (or of the failing probe)
    metrics: Mapping[str, Any] = field(default_factory=dict)
    simulations: int = 0
    e2e_alone_s: float = 0.0  # p90 end-to-end latency of a request alone: sets trial lengths
    cost_floor: float | None = None  # pruned: the least a plan of this candidate could cost

    @property
    def searched(self) -> bool:
        return self.status is SearchStatus.OK and self.replicas > 0


def simulate_run(demand: Demand, config: BenchConfig, workload: WorkloadSpec) -> RunMetrics:
    """One simulated run of the demand's optimization on the workload, under the config's
    router where it has pods."""
    from kvplan.bench.run import prepare
    from kvplan.bench.simulation import simulate

    config, built = prepare(config, workload)
    (router,) = config.cluster.variants()
    optimization = parse_optimization(demand.optimization)
    run, _ = simulate(config, demand.phase.requests(built.requests), optimization, router=router)
    return run


def check_workload(demand: Demand, candidates: list[Candidate]) -> None:
    """Build the workload once and size every candidate, so a setting the generator refuses,
    a request longer than max_model_len (the engine would reject it: model_len.check_admitted)
    or a candidate no engine would start with (a TP that does not divide the heads, a KV format
    the model has not) fails as the user's error (ValueError) before any candidate is probed.
    Only DoesNotFit, the memory a candidate lacks, is left to its probe's verdict."""
    from kvplan.bench.model_len import check_admitted
    from kvplan.bench.run import prepare
    from kvplan.bench.simulation import engine_factory
    from kvplan.spec.resolve import load_model

    if not candidates:
        return
    sent = sent_at(demand.workload, math.inf, min(8, demand.num_requests), demand.trace_rps)
    if sent.trace is not None:  # every request a trial may replay
        sent = dataclasses.replace(sent, num_requests=None)
    _, built = prepare(demand.config(candidates[0]), sent)
    check_admitted(sent, built, load_model(demand.model))
    optimization = parse_optimization(demand.optimization)
    for candidate in candidates:
        sized = demand.config(candidate)
        sized = dataclasses.replace(
            sized,
            sizing=dataclasses.replace(sized.sizing, max_model_len=built.max_model_len),
        )
        try:
            engine_factory(sized).check(optimization)
        except DoesNotFit:
            continue


def probe(demand: Demand, candidate: Candidate) -> CapacityResult:
    """Does one replica fit, meet the SLO with no queue, and how fast does a burst drain?"""
    from kvplan.bench.run import unserved

    result = CapacityResult(candidate, SearchStatus.OK)
    base = dataclasses.replace(demand.workload, num_requests=demand.num_requests)
    native = demand.trace_rps

    def run(workload: WorkloadSpec, **options: Any) -> RunMetrics:
        result.simulations += 1
        return simulate_run(demand, demand.config(candidate, **options), workload)

    try:  # every request alone: a closed loop of one, sent as fast as it goes
        alone = run(
            sent_at(
                base,
                UNBOUNDED_RATE if native is None else math.inf,
                min(ALONE_REQUESTS, demand.num_requests),
                native,
            ),
            max_concurrency=1,
        )
    except DoesNotFit as err:  # the weights leave no room for a KV cache; any other refusal
        # is a setting (check_workload found those first), an error rather than a verdict
        result.status, result.reason = SearchStatus.MEMORY, str(err).splitlines()[0]
        return result
    rejected = unserved(alone.figures)
    if rejected:
        result.status, result.reason = SearchStatus.MEMORY, rejected
        return result
    missed = demand.slo.misses(alone.figures)
    if missed:
        result.status, result.metrics = SearchStatus.LATENCY, alone.figures
        result.reason = "misses the SLO with no queue: " + "; ".join(missed)
        return result
    result.e2e_alone_s = alone.e2e_s_p90 or 0.0
    saturated = run(sent_at(base, math.inf, demand.num_requests, native))
    result.saturation_rps = saturated.requests_per_s
    return result


def trial(demand: Demand, result: CapacityResult, rate: float) -> bool:
    """One replica at `rate` req/s, run until settled; narrows result's capacity bracket and
    says whether the SLO was met."""
    config = demand.config(result.candidate)
    metrics, runs = settled_run(
        demand,
        lambda workload: simulate_run(demand, config, workload),
        rate,
        result.e2e_alone_s,
        min_requests=demand.num_requests,
    )
    result.simulations += runs
    if demand.slo.meets(metrics.figures):
        if rate >= result.capacity_rps:
            result.capacity_rps, result.metrics = rate, metrics.figures
        return True
    result.capacity_upper_rps = min(result.capacity_upper_rps, rate)
    return False


def search_bounds(
    candidate: Candidate, unit_price: float | None, best_cost: float, max_gpus: int | None
) -> tuple[int | None, int | None, float]:
    """fewest_replicas' bounds for a candidate: the most replicas that cost no more than the
    best plan so far (None: no bound, when the GPU has no price or nothing was found yet), the
    most --max-gpus allows, and what one replica costs."""
    tp = candidate.tp
    by_cost = (
        None
        if unit_price is None or math.isinf(best_cost)
        else math.floor(best_cost / (unit_price * tp) + 1e-9)
    )
    by_gpus = None if max_gpus is None else max_gpus // tp
    return by_cost, by_gpus, (unit_price or 1.0) * tp


def fewest_replicas(
    demand: Demand,
    result: CapacityResult,
    by_cost: int | None = None,
    by_gpus: int | None = None,
    unit_cost: float = 1.0,
) -> CapacityResult:
    """The least n for which one replica meets the SLO at rate / n: gallop up from the burst's
    guess, then bisect on n. n is bounded by what could still beat the best plan (`by_cost`
    replicas, each costing `unit_cost`) and by --max-gpus (`by_gpus` replicas); a candidate that
    misses at its bound is pruned and says which bound it hit."""
    if result.status is not SearchStatus.OK:
        return result
    limit = min(
        by_cost if by_cost is not None else MAX_REPLICAS,
        by_gpus if by_gpus is not None else MAX_REPLICAS,
        MAX_REPLICAS,
    )
    # what earlier trials showed: n <= rate / upper misses, n >= rate / capacity meets
    failing = math.floor(demand.rate / result.capacity_upper_rps + 1e-9)
    known = math.ceil(demand.rate / result.capacity_rps - 1e-9) if result.capacity_rps > 0 else 0
    meeting = known if known <= limit else 0
    guess = (
        math.ceil(demand.rate / result.saturation_rps - 1e-9) if result.saturation_rps > 0 else 1
    )
    n = min(max(guess, failing + 1, 1), limit)
    while not meeting and failing < limit:
        if trial(demand, result, demand.rate / n):
            meeting = n
        elif n >= limit:
            break
        else:
            failing, n = n, min(2 * n, limit)
    if not meeting:
        if by_cost is not None and limit == by_cost:
            result.status, result.cost_floor = SearchStatus.COST, (limit + 1) * unit_cost
            result.reason = (
                f"one replica misses the SLO at rate / {limit}, and {limit + 1} replicas cost more "
                "than the best plan"
                if limit
                else "one replica costs more than the best plan"
            )
        elif by_gpus is not None and limit == by_gpus:
            result.status = SearchStatus.GPUS
            result.reason = (
                f"one replica misses the SLO at rate / {limit}: more GPUs than --max-gpus"
            )
        else:
            result.status, result.reason = (
                SearchStatus.LATENCY,
                f"one replica misses the SLO at rate / {limit}",
            )
        return result
    while meeting - failing > 1:
        middle = (failing + meeting) // 2
        if trial(demand, result, demand.rate / middle):
            meeting = middle
        else:
            failing = middle
    result.replicas = meeting
    return result


def refine(demand: Demand, result: CapacityResult, bisections: int = REFINE_BISECTIONS) -> None:
    """Narrow the per-replica capacity bracket: double an open top while it still meets the SLO
    (at most EXPANSIONS times), then bisect."""
    for _ in range(EXPANSIONS):
        if math.isfinite(result.capacity_upper_rps):
            break
        trial(demand, result, 2 * result.capacity_rps)
    for _ in range(bisections if math.isfinite(result.capacity_upper_rps) else 0):
        trial(demand, result, (result.capacity_rps + result.capacity_upper_rps) / 2)


def search_item(
    item: tuple[Demand, CapacityResult, int | None, int | None, float],
) -> CapacityResult:
    """fewest_replicas for a process pool (one picklable argument)."""
    return fewest_replicas(*item)


def probe_item(item: tuple[Demand, Candidate]) -> CapacityResult:
    """probe for a process pool (one picklable argument)."""
    return probe(*item)
