"""A run's summary metrics (RunResult.metrics), one small function per concern; the names
and definitions are docs/metrics.md's, and every field is registered in metric_registry.py
(a field added here needs its entry there). Each reads the allocator through its stats
interface."""

from __future__ import annotations

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
    """Output, total (prompt + output) tokens and requests per second of the makespan;
    parallel samples add output tokens, not requests or prompts."""
    span = makespan or 1.0
    requests = [seq for seq in finished if seq.sample_index == 0]
    output_tokens = sum(seq.request.output_len for seq in finished)
    prompt_tokens = sum(seq.request.prompt_len for seq in requests)
    return {
        "output_tokens_per_s": output_tokens / span,
        "total_tokens_per_s": (output_tokens + prompt_tokens) / span,
        "requests_per_s": len(requests) / span,
    }


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
