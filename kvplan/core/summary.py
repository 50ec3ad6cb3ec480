"""A run's summary metrics (RunResult.metrics), one small function per concern; the names
and definitions are docs/metrics.md's, and every field is registered in metric_registry.py
(a field added here needs its entry there). Each reads the allocator through its stats
interface."""

from __future__ import annotations

import math
from typing import Any

from kvplan.core.kv import Allocator, hit_rate
from kvplan.core.metrics import SPLIT, StepMetrics, request_metrics
from kvplan.core.scheduler import Scheduler
from kvplan.core.sequence import Sequence


def run_summary(
    allocator: Allocator,
    scheduler: Scheduler,
    step_metrics: StepMetrics,
    finished: list[Sequence],
    rejected: list[Sequence],
    makespan: float,
) -> dict[str, Any]:
    requests = [seq for seq in finished if seq.sample_index == 0]
    return {
        "requests_finished": len(requests),
        "requests_rejected": len(rejected),
        "reject_reasons": sorted({seq.reject_reason for seq in rejected if seq.reject_reason}),
        "makespan_s": makespan,
        "engine_steps": step_metrics.steps,
        "pool_slots": allocator.capacity_slots,
        **pool_summary(step_metrics),
        **preemption_summary(scheduler),
        **throughput(finished, makespan),
        **load_summary(finished, rejected, step_metrics),
        **request_metrics(finished),
        **prefix_summary(allocator),
        **tier_summary(allocator),
        **fork_summary(allocator),
        **eviction_summary(allocator),
    }


def pool_summary(step_metrics: StepMetrics) -> dict[str, float]:
    """The time-averaged pool split, waste, sharing, usage and batch sizes."""
    averages = step_metrics.averages()
    used, reserved, logical = averages["used"], averages["reserved"], averages["logical"]
    evicted = averages["evicted"]  # tokens the sequences have that an eviction policy dropped
    return {
        **{f"{key}_share": averages[key] for key in SPLIT},
        "waste": 1.0 - used / reserved if reserved else 0.0,
        "token_states_of_reserved": used / reserved if reserved else 0.0,
        # Blocks a sequence-by-sequence count would need but sharing avoids (vLLM paper §6.3).
        "sharing_savings": averages["shared_refs"] / averages["block_refs"]
        if averages["block_refs"]
        else 0.0,
        # Tokens held once for several sequences (shared blocks); evicted tokens are held by none
        "shared_token_share": _share(logical - used - evicted, logical),
        "evicted_token_share": evicted / logical if logical else 0.0,
        "kv_cache_usage_mean": averages["kv_cache_usage"],
        "kv_cache_usage_peak": step_metrics.peak_kv_cache_usage,
        "running_mean": averages["running"],
        "running_peak": step_metrics.peak_running,
        "waiting_mean": averages["waiting"],
    }


def _share(part: float, whole: float) -> float:
    """part / whole, with the rounding residue of time-weighted sums (|x| < 1e-9) read as 0."""
    share = part / whole if whole else 0.0
    return share if abs(share) >= 1e-9 else 0.0


def eviction_summary(allocator: Allocator) -> dict[str, int]:
    """Tokens an eviction policy dropped over the run (only runs with a policy report it)."""
    return (
        {} if allocator.retained_cap is None else {"tokens_dropped": allocator.evicted_tokens_total}
    )


def preemption_summary(scheduler: Scheduler) -> dict[str, int]:
    return {
        "preemptions": scheduler.preemptions,
        "recomputed_tokens": scheduler.recomputed_tokens,
        "swapped_out_slots": scheduler.swapped_out_slots_total,
    }


def throughput(finished: list[Sequence], makespan: float) -> dict[str, float]:
    """Output, total (prompt + output) tokens and requests per second of the makespan, as
    `vllm bench serve` reports its throughput (its duration is the makespan); parallel
    samples add output tokens, not requests or prompts."""
    span = makespan or 1.0
    requests = [seq for seq in finished if seq.sample_index == 0]
    output_tokens = sum(seq.request.output_len for seq in finished)
    prompt_tokens = sum(seq.request.prompt_len for seq in requests)
    return {
        "output_tokens_per_s": output_tokens / span,
        "total_tokens_per_s": (output_tokens + prompt_tokens) / span,
        "requests_per_s": len(requests) / span,
    }


# The stream overloads the engine when the backlog (requests arrived and not yet finished or
# rejected) grows over the second half of the arrival window (the first half lets it fill to
# its steady level) by more than OVERLOAD_SHARE of that half's arrivals and by more than
# NOISE_SIGMAS standard deviations of their count (a Poisson count of n has sd sqrt(n)): a
# stable queue's backlog ends the window about where it began; an overloaded one gains
# (offered - served) x the half's length, which no fluctuation of a stable queue explains.
OVERLOAD_SHARE = 0.05
NOISE_SIGMAS = 2.0
# The saturated steps' rate is reported when they generate the output of this many requests
# (1/sqrt(30): about an 18% sampling error) and take this share of the engine's busy time: a
# queue that forms only in brief bursts meets a batch that has not settled at the ceiling.
MIN_SATURATED_REQUESTS = 30
MIN_SATURATED_SHARE = 0.25
# ... and the output of this many running batches: the batch in flight when the queue empties
# has had its prompts computed in saturated steps but samples its output after them, so the
# rate misses up to one batch's output; four batches bound that at about a quarter.
SATURATED_TURNOVER = 4


def load_summary(
    finished: list[Sequence], rejected: list[Sequence], step_metrics: StepMetrics
) -> dict[str, Any]:
    """The request rate offered, served and sustainable, and whether the stream overloads the
    engine (docs/metrics.md, "Throughput and load"): `stream_load`'s figures and the engine's
    ceiling, `saturated_rate`."""
    figures = stream_load(finished, rejected, [step_metrics])
    ceiling = saturated_rate(finished, step_metrics) if figures["overloaded"] else None
    return {**figures, "sustainable_requests_per_s": ceiling}


def finish_times(finished: list[Sequence]) -> list[float]:
    """When each request (its first sample: parallel samples are one request) finished."""
    return [seq.served[1] for seq in finished if seq.sample_index == 0]


def output_per_request(finished: list[Sequence]) -> float:
    """Mean output tokens per finished request, its parallel samples' included: what turns a
    token rate into a request rate."""
    requests = sum(1 for seq in finished if seq.sample_index == 0)
    return sum(seq.request.output_len for seq in finished) / requests if requests else 0.0


def generated_between(step_metrics: StepMetrics, start: float, end: float) -> int:
    """Output tokens sampled by the steps that ended in (start, end]."""
    import numpy as np

    ends = np.frombuffer(step_metrics.trace_t, dtype=np.float64)
    totals = np.frombuffer(step_metrics.trace_generated, dtype=np.int64)
    first, last = np.searchsorted(ends, [start, end], side="right")
    before = int(totals[first - 1]) if first else 0
    return (int(totals[last - 1]) if last else 0) - before


def steady_window(arrivals: list[float], finishes: list[float]) -> tuple[float, float] | None:
    """The steady state's window: the second half of the arrival window (the first half lets
    the queue and the batch fill; after the last arrival the engine only drains). A stream
    sent all at once has no arrival window: its steady state is the whole drain, first
    arrival to last finish, as an offline throughput benchmark measures it."""
    if not arrivals:
        return None
    span = arrivals[-1] - arrivals[0]
    if span > 0.0:
        return arrivals[0] + span / 2, arrivals[-1]
    end = max(finishes, default=arrivals[0])
    return (arrivals[0], end) if end > arrivals[0] else None


def stream_load(
    finished: list[Sequence], rejected: list[Sequence], steps: list[StepMetrics]
) -> dict[str, Any]:
    """offered: (requests - 1) / arrival span, the arrivals after the first over the time
    they took; served: output tokens sampled per second over the steady window (the steps
    of every engine in `steps`, a cluster's pods), and in requests per second the same
    divided by the mean output per request; overloaded: the backlog grew over the steady
    window (OVERLOAD_SHARE, NOISE_SIGMAS). A stream sent all at once has no offered rate and
    cannot overload; its served rate is its drain's. A cluster passes every pod's requests."""
    requests = [seq for seq in finished if seq.sample_index == 0]
    arrivals = sorted(seq.request.arrival_s for seq in (*requests, *rejected))
    finishes = finish_times(requests)
    figures: dict[str, Any] = {
        "offered_requests_per_s": None,
        "served_output_tokens_per_s": None,
        "served_requests_per_s": None,
        "overloaded": False,
    }
    window = steady_window(arrivals, finishes)
    per_request = output_per_request(finished)
    if window is None or not per_request:
        return figures
    start, end = window
    tokens = sum(generated_between(metrics, start, end) for metrics in steps) / (end - start)
    figures.update(served_output_tokens_per_s=tokens, served_requests_per_s=tokens / per_request)
    span = arrivals[-1] - arrivals[0]
    if span <= 0.0:
        return figures

    def within(times: list[float]) -> int:  # how many fall in the window (start, end]
        return sum(1 for t in times if start < t <= end)

    arrived = within(arrivals)
    left = within(finishes) + within([seq.finish_s for seq in rejected if seq.finish_s is not None])
    growth = arrived - left  # the backlog at the window's end over its level at its start
    figures.update(
        offered_requests_per_s=(len(arrivals) - 1) / span,
        overloaded=growth > max(OVERLOAD_SHARE * arrived, NOISE_SIGMAS * math.sqrt(arrived)),
    )
    return figures


def saturated_rate(finished: list[Sequence], step_metrics: StepMetrics) -> float | None:
    """The engine's ceiling in requests per second: output tokens sampled per second of the
    steps after which requests still waited, divided by the mean output per request. Tokens,
    not completions: requests finish in bursts as batches drain, and a larger batch leaves
    more of its completions to the drain after the queue empties, which a count of
    completions would miss. None unless those steps sample the output of at least
    MIN_SATURATED_REQUESTS requests and SATURATED_TURNOVER running batches and take
    MIN_SATURATED_SHARE of the time the engine ran steps: a short run ends before its batch
    settles at the ceiling (load_summary reports it for overloaded runs only)."""
    import numpy as np

    per_request = output_per_request(finished)
    dt = np.frombuffer(step_metrics.columns["dt"], dtype=np.float64)
    if not len(dt) or not per_request:
        return None
    saturated = np.asarray(step_metrics.trace_waiting, dtype=np.int64) > 0
    totals = np.frombuffer(step_metrics.trace_generated, dtype=np.int64)
    sampled = np.diff(totals, prepend=0)[saturated].sum()
    seconds = float(dt[saturated].sum())
    if not seconds or seconds < MIN_SATURATED_SHARE * step_metrics.elapsed:
        return None
    running = np.asarray(step_metrics.trace_running, dtype=np.float64)
    batch = float((running[saturated] * dt[saturated]).sum()) / seconds
    if sampled < max(MIN_SATURATED_REQUESTS, SATURATED_TURNOVER * batch) * per_request:
        return None
    return float(sampled) / seconds / per_request


def prefix_summary(allocator: Allocator) -> dict[str, Any]:
    """vLLM's prefix-cache counters (tokens) and the hit rate, when prefix caching is on."""
    stats, pool = allocator.prefix_stats, allocator.pool
    if stats is None or pool is None:
        return {}
    return {
        "prefix_cache_queries": stats.queries,
        "prefix_cache_hits": stats.hits,
        "prefix_hit_rate": stats.hit_rate,
        "preempted_prefix_queries": stats.preempted_queries,
        "preempted_prefix_hits": stats.preempted_hits,
        "prefill_tokens_saved": stats.hits + stats.preempted_hits,
        "cached_blocks_evicted": pool.cached_evictions,
    }


def tier_summary(allocator: Allocator) -> dict[str, Any]:
    """Per offload tier: hits (as a share of the device cache's queries), bytes, evictions;
    then reload/recompute decisions and the hit rate over all tiers together."""
    tiers, stats = allocator.tiers, allocator.prefix_stats
    if tiers is None or stats is None:
        return {}
    summary: dict[str, Any] = {}
    tier_hits = 0
    for tier in tiers.tiers:
        tier_hits += tier.stats.hits_tokens
        summary.update(
            {
                f"{tier.name}_hit_tokens": tier.stats.hits_tokens,
                f"{tier.name}_bytes_in": tier.stats.bytes_in,
                f"{tier.name}_bytes_out": tier.stats.bytes_out,
                f"{tier.name}_evictions": tier.stats.evictions,
                f"{tier.name}_hit_rate": hit_rate(tier.stats.hits_tokens, stats.queries),
            }
        )
    summary.update(
        offload_reloads=tiers.reloads,
        offload_recomputes=tiers.recomputes,
        total_hit_rate=hit_rate(stats.hits + tier_hits, stats.queries),
    )
    return summary


def fork_summary(allocator: Allocator) -> dict[str, int]:
    stats = allocator.fork_stats
    if stats is None or not stats.forks:
        return {}
    return {"parallel_forks": stats.forks, "cow_copies": stats.cow_copies}
