"""Engine metrics with the names and definitions fixed in docs/metrics.md.

The pool split (token states / reservation / internal / external fragmentation / free) is
sampled after every step and averaged over time, weighting each step by its duration, as
in the vLLM paper's Fig. 2. Latencies come from per-request timestamps: modeled in
simulated mode, wall-clock in real mode.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

from kvplan import cdiv
from kvplan.core.kv import Allocator
from kvplan.core.scheduler import Scheduler
from kvplan.core.sequence import Sequence

SPLIT = (
    "token_states",
    "reservation",
    "internal_fragmentation",
    "external_fragmentation",
    "cached",
    "free",
)
TIMESERIES_POINTS = 400
WAITING_SCAN = 64  # waiting requests inspected for the smallest reservation need


# Per-step pool figures, averaged over time as shares of the pool: each step's value is
# weighted by its duration and divided by the pool size. ("used" is token states' average.)
POOL_SHARES = (*SPLIT, "logical", "reserved", "evicted")


@dataclass
class StepMetrics:
    """Each step's figures in growable typed arrays (one append per figure); the
    duration-weighted sums are taken once, at the end, in step order."""

    elapsed: float = 0.0
    steps: int = 0
    capacity: int = 0
    columns: dict[str, array] = field(
        default_factory=lambda: {
            key: array("d") for key in ("dt", *POOL_SHARES, "shared_refs", "block_refs")
        }
    )
    trace_t: array = field(default_factory=lambda: array("d"))
    trace_usage: array = field(default_factory=lambda: array("d"))
    trace_running: array = field(default_factory=lambda: array("l"))
    trace_waiting: array = field(default_factory=lambda: array("l"))
    trace_generated: array = field(default_factory=lambda: array("q"))  # output tokens so far
    trace_used: array = field(default_factory=lambda: array("d"))
    trace_cached: array = field(default_factory=lambda: array("d"))
    trace_hit_rate: array = field(default_factory=lambda: array("d"))

    def record(self, dt: float, now: float, allocator: Allocator, scheduler: Scheduler) -> None:
        capacity = self.capacity = allocator.capacity_slots
        used, reservation, internal, external, cached, free = pool_split(allocator, scheduler)
        reserved = used + reservation + internal
        usage = reserved / capacity
        running = len(scheduler.running)
        waiting = len(scheduler.waiting)
        columns = self.columns
        columns["dt"].append(dt)
        columns["token_states"].append(used)
        columns["reservation"].append(reservation)
        columns["internal_fragmentation"].append(internal)
        columns["external_fragmentation"].append(external)
        columns["cached"].append(cached)
        columns["free"].append(free)
        columns["logical"].append(scheduler.used_slots)
        columns["reserved"].append(reserved)
        columns["evicted"].append(allocator.evicted_slots)
        pool = allocator.pool
        if pool is not None:  # the vLLM paper's sharing saving, in blocks
            extra = pool.extra_refs
            columns["shared_refs"].append(extra)
            columns["block_refs"].append(pool.num_allocated + extra)
        self.elapsed += dt
        self.steps += 1
        self.trace_t.append(now)
        self.trace_usage.append(usage)
        self.trace_running.append(running)
        self.trace_waiting.append(waiting)
        self.trace_generated.append(scheduler.generated_tokens)
        self.trace_used.append(used / capacity)
        self.trace_cached.append(cached / capacity)
        stats = allocator.prefix_stats
        if stats is not None:
            self.trace_hit_rate.append(stats.hit_rate)

    @property
    def peak_running(self) -> int:
        return max(self.trace_running, default=0)

    @property
    def peak_kv_cache_usage(self) -> float:
        return max(self.trace_usage, default=0.0)

    def sums(self) -> dict[str, float]:
        """Duration-weighted sums, added in step order from 0.0 (as a running += would)."""
        import numpy as np

        dt = np.frombuffer(self.columns["dt"], dtype=np.float64)

        def weighted(values: np.ndarray, divisor: int | None = None) -> float:
            terms = dt * values if divisor is None else dt * values / divisor
            return float(np.add.accumulate(np.concatenate(([0.0], terms)))[-1])

        column = {
            key: np.frombuffer(values, dtype=np.float64) for key, values in self.columns.items()
        }
        sums = {key: weighted(column[key], self.capacity) for key in POOL_SHARES}
        sums["used"] = sums["token_states"]
        for key in ("shared_refs", "block_refs"):
            sums[key] = weighted(column[key]) if len(column[key]) else 0.0
        sums["running"] = weighted(np.asarray(self.trace_running, dtype=np.float64))
        sums["waiting"] = weighted(np.asarray(self.trace_waiting, dtype=np.float64))
        sums["kv_cache_usage"] = weighted(np.frombuffer(self.trace_usage, dtype=np.float64))
        return sums

    def averages(self) -> dict[str, float]:
        span = self.elapsed or 1.0
        return {key: value / span for key, value in self.sums().items()}

    def timeseries(self, points: int = TIMESERIES_POINTS) -> dict[str, list[float]]:
        """The trace thinned to at most `points` samples (every k-th step)."""
        stride = max(1, cdiv(len(self.trace_t), points))
        series = {
            "t": [round(v, 4) for v in self.trace_t[::stride]],
            "kv_cache_usage": [round(v, 4) for v in self.trace_usage[::stride]],
            "token_state_share": [round(v, 4) for v in self.trace_used[::stride]],
            "cached_share": [round(v, 4) for v in self.trace_cached[::stride]],
            "running": list(self.trace_running[::stride]),
            "waiting": list(self.trace_waiting[::stride]),
        }
        if self.trace_hit_rate:
            series["prefix_hit_rate"] = [round(v, 4) for v in self.trace_hit_rate[::stride]]
        return series


def pool_split(allocator: Allocator, scheduler: Scheduler) -> tuple[int, int, int, int, int, int]:
    """The pool, in slots, split as the vLLM paper's Fig. 2 does (docs/metrics.md): token states,
    reservation, internal fragmentation, external fragmentation, cached, free; the six sum
    to the pool size, and token states + reservation + internal = reserved."""
    used = (
        scheduler.used_slots - allocator.shared_slots
    )  # a block shared by several sequences counts once
    reserved = allocator.reserved_slots
    cached = allocator.cached_free_slots
    if allocator.reserves_ahead:  # held for tokens not generated yet, then over-reserved
        planned = scheduler.running_final_slots
        reservation, internal = planned - used, reserved - planned
    else:  # on demand: only the unfilled tails of last blocks
        reservation, internal = 0, reserved - used
    external = 0
    waiting = scheduler.waiting
    if waiting and allocator.fragments_externally:
        memo = waiting.memo
        if (
            memo is None or memo[0] != waiting.version
        ):  # the head may have changed since the last step
            memo = waiting.memo = (
                waiting.version,
                min(allocator.reservation_size(seq) for seq in _head(waiting)),
            )
        external = allocator.external_fragmentation(memo[1])
    free = allocator.capacity_slots - reserved - external - cached
    return used, reservation, internal, external, cached, free


def _head(waiting: Any) -> list[Sequence]:
    head = []
    for seq in waiting:
        head.append(seq)
        if len(head) >= WAITING_SCAN:
            break
    return head


def percentiles(values: list[float], prefix: str) -> dict[str, float | None]:
    import numpy as np

    if not values:
        return {f"{prefix}_{name}": None for name in ("mean", "p50", "p90", "p99")}
    data = np.asarray(values, dtype=float)
    p50, p90, p99 = np.percentile(data, [50, 90, 99])
    return {
        f"{prefix}_mean": float(data.mean()),
        f"{prefix}_p50": float(p50),
        f"{prefix}_p90": float(p90),
        f"{prefix}_p99": float(p99),
    }


def request_metrics(
    finished: list[Sequence], arrivals: dict[int, float] | None = None
) -> dict[str, float | None]:
    """TTFT, TPOT (= mean inter-token latency per request) and E2E percentiles, in seconds;
    `arrivals` (by request id) replaces the arrival the engine saw (a decode instance sees a
    request when its KV has arrived; its user sent it before the prefill)."""
    ttft, tpot, e2e = [], [], []
    for seq in finished:
        if seq.sample_index:
            continue  # parallel samples share their request's arrival and first token
        arrival = seq.request.arrival_s if arrivals is None else arrivals[seq.request.request_id]
        first, finish = seq.served
        ttft.append(first - arrival)
        e2e.append(finish - arrival)
        if seq.request.output_len > 1:
            tpot.append((finish - first) / (seq.request.output_len - 1))
    return {
        **percentiles(ttft, "ttft_s"),
        **percentiles(tpot, "tpot_s"),
        **percentiles(e2e, "e2e_s"),
    }
