"""The highest request rate one replica sustains within an SLO, found by bisection on the
rate with kvplan's own simulated engine (the same memory model, scheduler and step model as
`kvplan bench`).

For one candidate (GPU, TP, KV dtype, max_num_seqs):
1. it is sized as `bench` sizes it; weights or one request that do not fit end it ("memory");
2. every request alone (a closed loop of one): if the SLO fails with no queue, no rate meets
   it ("latency");
3. everything at once: the rate a burst drains at, the first top of the bracket (doubled while
   a steady stream at that rate still meets the SLO: a burst's drain tail understates it);
4. bisection on the Poisson rate within the bracket, keeping the highest rate whose run meets
   the SLO. Each trial's arrivals span WARM_UP lone-request latencies, so a growing queue
   shows in its percentiles. Meeting a tighter SLO implies meeting a looser one run by run,
   so a tighter SLO never gives a higher capacity.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from kvplan.bench.config import BenchConfig, ClusterConfig
from kvplan.bench.optimizations import parse_optimization
from kvplan.bench.slo import Slo
from kvplan.bench.workloads import VLLM_DATASETS, WorkloadSpec
from kvplan.core.scheduler import SchedulerConfig
from kvplan.core.setup import SizingConfig
from kvplan.spec.kv_format import parse_kv_format
from kvplan.spec.numbers import check_number
from kvplan.workload import WORKLOAD_KINDS

BISECTIONS = 6  # capacity to within 1/64 of the bracket
EXPANSIONS = 3  # doublings of the bracket's top while the top still meets the SLO
ALONE_REQUESTS = 8  # requests of the no-load probe
UNBOUNDED_RATE = 1e9  # requests/s: with a closed loop of one, each request goes when the last ends
WARM_UP = 10.0  # a trial's arrivals span this many lone-request end-to-end latencies
MAX_TRIAL_REQUESTS = 8000
SETTLE = 3.0  # a passing trial's arrivals must span this many of its own p90 end-to-end latencies
ALL_AT_ONCE_SCALE = 1e-9  # a trace's arrivals squeezed to (almost) t = 0


@dataclass(frozen=True)
class Candidate:
    gpu: str
    tp: int = 1
    kv_dtype: str = "auto"
    max_num_seqs: int | None = None  # the engine's default

    def __post_init__(self) -> None:
        # bad settings are the user's error, not a candidate that failed
        parse_kv_format(self.kv_dtype)
        check_number("tp", self.tp)
        if self.max_num_seqs is not None:
            check_number("max-num-seqs", self.max_num_seqs)

    @property
    def label(self) -> str:
        seqs = f", max_num_seqs {self.max_num_seqs}" if self.max_num_seqs else ""
        return f"{self.gpu} x{self.tp} TP, KV {self.kv_dtype}{seqs}"


@dataclass(frozen=True)
class Demand:
    """What is to be served: the model, the traffic and its SLO, and how it is simulated."""

    model: str
    rate: float  # requests per second, the whole deployment
    slo: Slo
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)  # its rate is set per trial
    optimization: str = "prefix"  # vLLM V1 and SGLang cache prefixes by default
    num_requests: int = 300  # per replica and trial
    engine: str | None = None
    engine_version: str | None = None
    step_model: str | None = None
    seed: int = 0
    trace_rps: float | None = None  # a trace's own request rate (trace_rate), which trials rescale

    def __post_init__(self) -> None:
        # settings every candidate shares fail here, once, rather than as every candidate's failure
        SizingConfig(model=self.model, engine=self.engine, engine_version=self.engine_version)
        if self.workload.trace is None and self.workload.kind not in (*WORKLOAD_KINDS, *VLLM_DATASETS):
            raise ValueError(f"unknown workload '{self.workload.kind}'; use one of "
                             f"{', '.join(dict.fromkeys((*WORKLOAD_KINDS, *VLLM_DATASETS)))} or --trace FILE")
        parse_optimization(self.optimization)

    def config(self, candidate: Candidate, pods: int = 1, router: str | None = None,
               max_concurrency: int | None = None) -> BenchConfig:
        sizing = SizingConfig(model=self.model, gpu=candidate.gpu, tp=candidate.tp, kv_dtype=candidate.kv_dtype,
                              engine=self.engine, engine_version=self.engine_version)
        scheduler = SchedulerConfig(max_num_seqs=candidate.max_num_seqs, max_num_batched_tokens=None)
        cluster = ClusterConfig(pods=pods, routers=(router,) if router else ())
        return BenchConfig(sizing=sizing, scheduler=scheduler, cluster=cluster, seed=self.seed,
                           step_model=self.step_model, max_concurrency=max_concurrency)


@dataclass
class CapacityResult:
    candidate: Candidate
    status: str  # ok, memory (does not fit), latency (misses the SLO with no queue)
    reason: str = ""
    capacity_rps: float = 0.0  # highest rate found within the SLO (0 unless ok)
    saturation_rps: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)  # the run at capacity (or the failing probe)
    simulations: int = 0
    e2e_alone_s: float = 0.0  # p90 end-to-end latency of a request alone: sets trial lengths


def simulate(demand: Demand, config: BenchConfig, workload: WorkloadSpec) -> dict[str, Any]:
    """One simulated run; its metrics."""
    from kvplan.bench.matrix import run_matrix
    from kvplan.bench.run import prepare

    config, built = prepare(config, workload)
    (record,) = run_matrix(config, built.requests, [demand.optimization])
    return record.metrics


def trace_rate(workload: WorkloadSpec) -> float | None:
    """A trace's own request rate (requests over the span of their arrivals); None for a
    synthetic workload, whose rate is a setting."""
    if workload.trace is None:
        return None
    from kvplan.workload import load_trace

    arrivals = [r.arrival_s for r in load_trace(workload.trace, workload.trace_format,
                                                skip_bad_lines=workload.skip_bad_lines).requests]
    span = max(arrivals) - min(arrivals) if len(arrivals) > 1 else 0.0
    if span <= 0:
        raise ValueError(f"trace {workload.trace} has no spread of arrival times to rescale to a rate; "
                         "give a trace whose requests arrive over time")
    return (len(arrivals) - 1) / span


def sent_at(workload: WorkloadSpec, rate: float, requests: int, native_rate: float | None) -> WorkloadSpec:
    """The workload sent at `rate` requests/s: a synthetic one at that rate, a trace with its own
    arrivals rescaled (time_scale = its rate / the wanted one). An infinite rate sends everything
    at t = 0: vLLM's datasets as `vllm bench` sends them, other kinds as a burst, a trace squeezed."""
    if native_rate is None:
        if math.isinf(rate) and workload.kind not in VLLM_DATASETS:
            return dataclasses.replace(workload, arrival="burst", num_requests=requests)
        return dataclasses.replace(workload, rate=rate, num_requests=requests)
    scale = native_rate / rate if math.isfinite(rate) else ALL_AT_ONCE_SCALE
    return dataclasses.replace(workload, time_scale=max(scale, ALL_AT_ONCE_SCALE), num_requests=requests)


def trial_requests(demand: Demand, rate: float, e2e_alone_s: float) -> int:
    """Requests of a trial at `rate`: enough to arrive over WARM_UP end-to-end latencies of a
    lone request, so a queue that grows shows in the percentiles (a short trial is all ramp)."""
    wanted = math.ceil(rate * WARM_UP * e2e_alone_s)
    return max(demand.num_requests, min(MAX_TRIAL_REQUESTS, wanted))


def settled_run(demand: Demand, config: BenchConfig, workload: WorkloadSpec, rate: float,
                e2e_alone_s: float, min_requests: int | None = None,
                native_rate: float | None = None) -> tuple[dict[str, Any], int]:
    """A run at `rate` long enough to settle, and how many simulations it took: one that meets
    the SLO is rerun longer while its arrivals span less than SETTLE of its own p90 end-to-end
    latencies (under load a request lasts far longer than alone, and a queue needs that long
    to show). TPOT-only SLOs see the batch, not the queue, and are not rerun."""
    queue_sensitive = any(target.figure in ("ttft", "e2e") for target in demand.slo.targets)
    requests = max(min_requests or 0, trial_requests(demand, rate, e2e_alone_s))
    metrics, runs = simulate(demand, config, sent_at(workload, rate, requests, native_rate)), 1
    while queue_sensitive and demand.slo.meets(metrics) and requests < MAX_TRIAL_REQUESTS:
        needed = math.ceil(rate * SETTLE * float(metrics.get("e2e_s_p90") or 0.0))
        if needed <= requests:
            break
        requests = min(MAX_TRIAL_REQUESTS, needed)
        metrics, runs = simulate(demand, config, sent_at(workload, rate, requests, native_rate)), runs + 1
    return metrics, runs


def replica_capacity(demand: Demand, candidate: Candidate) -> CapacityResult:
    result = CapacityResult(candidate, "ok")
    base = dataclasses.replace(demand.workload, num_requests=demand.num_requests)

    def run(workload: WorkloadSpec, **options: Any) -> dict[str, Any]:
        result.simulations += 1
        return simulate(demand, demand.config(candidate, **options), workload)

    native = demand.trace_rps
    try:  # every request alone: a closed loop of one, sent as fast as it goes
        alone = run(sent_at(base, UNBOUNDED_RATE if native is None else math.inf,
                            min(ALONE_REQUESTS, demand.num_requests), native), max_concurrency=1)
    except ValueError as err:  # sizing: the weights, or one request, do not fit
        result.status, result.reason = "memory", str(err).splitlines()[0]
        return result
    missed = demand.slo.misses(alone)
    if missed:
        result.status, result.metrics = "latency", alone
        result.reason = "misses the SLO with no queue: " + "; ".join(missed)
        return result
    e2e_alone = result.e2e_alone_s = float(alone.get("e2e_s_p90") or 0.0)

    def trial(rate: float) -> dict[str, Any]:
        metrics, runs = settled_run(demand, demand.config(candidate), base, rate, e2e_alone, native_rate=native)
        result.simulations += runs
        return metrics

    saturated = run(sent_at(base, math.inf, demand.num_requests, native))
    result.saturation_rps = float(saturated.get("requests_per_s") or 0.0)
    low, high = 0.0, result.saturation_rps
    for _ in range(EXPANSIONS):  # a burst's drain tail understates what a steady stream sustains
        metrics = trial(high)
        if not demand.slo.meets(metrics):
            break
        low, result.metrics, high = high, metrics, 2 * high
    for _ in range(BISECTIONS):
        middle = (low + high) / 2
        metrics = trial(middle)
        if demand.slo.meets(metrics):
            low, result.metrics = middle, metrics
        else:
            high = middle
    if low == 0.0:
        result.status = "latency"
        result.reason = (f"misses the SLO at every rate tried down to {high:.3g} req/s "
                         f"(a burst drains at {result.saturation_rps:.3g} req/s)")
    result.capacity_rps = low
    return result


def capacity_item(item: tuple[Demand, Candidate]) -> CapacityResult:
    """replica_capacity for a process pool (one picklable argument)."""
    return replica_capacity(*item)
