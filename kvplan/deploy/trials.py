"""A trial of one replica at a rate: the workload sent at that rate (a synthetic one at the
rate, a trace with its arrivals rescaled) and a run long enough to settle, so a growing queue or
batch shows in its percentiles. replica_search.py's probes and trials and the plan's cluster
checks run through these.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from kvplan.bench.workloads import VLLM_DATASETS, WorkloadSpec, arrivals_rate, trace_time_scale
from kvplan.deploy.demand import Demand

if TYPE_CHECKING:
    from kvplan.bench.simulation import RunMetrics

WARM_UP = 10.0  # a trial's arrivals span this many lone-request end-to-end latencies
OVERLOAD = 0.02  # ... and at least the time a rate this far over what the replica serves takes to
# queue up the SLO's TTFT / E2E limit (limit / OVERLOAD): a short trial passes any overload
MAX_TRIAL_REQUESTS = 8000
SETTLE = 3.0  # a passing trial's arrivals must span this many of its own p90 end-to-end latencies
GROWTH = (
    0.10  # a settled run's requests in the system, and a cluster's p90 E2E, grow no more than this
)
ALL_AT_ONCE_SCALE = 1e-9  # a trace's arrivals squeezed to (almost) t = 0


def trace_rate(workload: WorkloadSpec) -> float | None:
    """A trace's own request rate (requests over the span of their arrivals); None for a
    synthetic workload, whose rate is a setting."""
    if workload.trace is None:
        return None
    from kvplan.workload import load_trace

    arrivals = [
        r.arrival_s
        for r in load_trace(
            workload.trace, workload.trace_format, skip_bad_lines=workload.skip_bad_lines
        ).requests
    ]
    native = arrivals_rate(arrivals)
    if native is None:
        raise ValueError(
            f"trace {workload.trace} has no spread of arrival times to rescale to a rate; "
            "give a trace whose requests arrive over time"
        )
    return native


def sent_at(
    workload: WorkloadSpec, rate: float, requests: int, native_rate: float | None
) -> WorkloadSpec:
    """The workload sent at `rate` requests/s: a synthetic one at that rate, a trace with its own
    arrivals rescaled (time_scale = its rate / the wanted one). An infinite rate sends everything
    at t = 0: vLLM's datasets as `vllm bench` sends them, other kinds as a burst, a trace
    squeezed."""
    if native_rate is None:
        if math.isinf(rate) and workload.kind not in VLLM_DATASETS:
            return dataclasses.replace(workload, arrival="burst", num_requests=requests)
        return dataclasses.replace(workload, rate=rate, num_requests=requests)
    scale = trace_time_scale(native_rate, rate)  # 0 for inf: squeezed, load_trace needs > 0
    return dataclasses.replace(
        workload, time_scale=max(scale, ALL_AT_ONCE_SCALE), num_requests=requests
    )


def trial_requests(demand: Demand, rate: float, e2e_alone_s: float) -> int:
    """Requests of a trial at `rate`: enough to arrive over WARM_UP end-to-end latencies of a
    lone request, so a queue that grows shows in the percentiles (a short trial is all ramp),
    and over the time an OVERLOAD of the replica's service rate takes to build a wait of the
    SLO's queue limit: at rate (1 + e) x mu the wait grows by e seconds a second."""
    wanted = math.ceil(rate * max(WARM_UP * e2e_alone_s, demand.slo.queue_limit_s / OVERLOAD))
    return max(demand.num_requests, min(MAX_TRIAL_REQUESTS, wanted))


def growing(series: Mapping[str, list[float]], span_s: float) -> bool | None:
    """Did the requests in the system (running + waiting) grow by more than GROWTH from the
    third quarter of the arrivals to the last? None without a series (a cluster run)."""
    times = series.get("t") or []
    if not times or span_s <= 0:
        return None
    in_system = [r + w for r, w in zip(series["running"], series["waiting"])]

    def mean(low: float, high: float) -> float | None:
        values = [n for t, n in zip(times, in_system) if low <= t < high]
        return sum(values) / len(values) if values else None

    start = times[0]
    third, last = (
        mean(start + 0.5 * span_s, start + 0.75 * span_s),
        mean(start + 0.75 * span_s, start + span_s),
    )
    if third is None or last is None:
        return None
    return last > (1 + GROWTH) * third


# a workload's run
Run = Callable[[WorkloadSpec], "RunMetrics"]


def settled_run(
    demand: Demand, run: Run, rate: float, e2e_alone_s: float, min_requests: int | None = None
) -> tuple[RunMetrics, int]:
    """A run at `rate` long enough to settle, and how many simulations it took. A run that
    meets the SLO is rerun longer (at least twice as long) while its arrivals span less than
    SETTLE of its own p90 end-to-end latencies, or while the requests in the system still grow
    over its last quarter: a batch that keeps growing slows every step, and the queue it ends
    in comes later than any short trial sees. A cluster run, which has no per-step series, is
    settled when doubling it moves its p90 end-to-end latency by GROWTH or less. TPOT-only
    SLOs see the batch, not the queue, and are not rerun."""
    requests = max(min_requests or 0, trial_requests(demand, rate, e2e_alone_s))
    metrics = run(sent_at(demand.workload, rate, requests, demand.trace_rps))
    runs, previous_e2e = 1, None
    while (
        demand.slo.queue_limit_s > 0
        and demand.slo.meets(metrics.figures)
        and requests < MAX_TRIAL_REQUESTS
    ):
        e2e = metrics.e2e_s_p90 or 0.0
        needed = math.ceil(rate * SETTLE * e2e)
        still = growing(metrics.series, requests / rate)
        if still is None:
            still = previous_e2e is None or e2e > (1 + GROWTH) * previous_e2e
        if needed <= requests and not still:
            break
        requests, previous_e2e = min(MAX_TRIAL_REQUESTS, max(needed, 2 * requests)), e2e
        metrics = run(sent_at(demand.workload, rate, requests, demand.trace_rps))
        runs += 1
    return metrics, runs
