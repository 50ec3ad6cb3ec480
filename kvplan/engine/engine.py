"""The engine loop: admit arrivals, schedule a step, run it, advance the clock, measure.

Every request ends finished or rejected (with a reason): a request that can never fit is
rejected on arrival, and a head-of-line request that cannot be admitted into an idle pool
is rejected rather than left waiting forever.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kvplan.engine.allocator import Allocator
from kvplan.engine.metrics import StepMetrics, request_metrics
from kvplan.engine.scheduler import Scheduler, SchedulerConfig, StepPlan
from kvplan.engine.sequence import Sequence, Status
from kvplan.workload.request import Request

ProgressCallback = Callable[[int], None]  # called with the number of requests just ended


class Runner(Protocol):
    mode: str

    def step_time(self, plan: StepPlan) -> float: ...


@dataclass
class RunResult:
    metrics: dict[str, Any]
    timeseries: dict[str, list[float]]
    finished: list[Sequence] = field(repr=False)
    rejected: list[Sequence] = field(repr=False)


class Engine:
    def __init__(self, allocator: Allocator, runner: Runner, config: SchedulerConfig, max_model_len: int) -> None:
        if not config.chunked_prefill and config.max_num_batched_tokens < max_model_len:
            # A preempted request recomputes prompt + generated tokens in one step without
            # chunking; vLLM refuses this configuration for the same reason.
            raise ValueError(f"without chunked prefill --max-num-batched-tokens ({config.max_num_batched_tokens}) "
                             f"must be at least --max-model-len ({max_model_len})")
        self.allocator = allocator
        self.runner = runner
        self.scheduler = Scheduler(allocator, config)
        self.max_model_len = max_model_len
        self.step_metrics = StepMetrics()

    def _rejection(self, seq: Sequence) -> str | None:
        request = seq.request
        if request.total_len > self.max_model_len:
            return f"needs {request.total_len} tokens, above max_model_len {self.max_model_len}"
        size = self.allocator.reservation_size(seq)
        if size > self.allocator.admissible_slots:
            return f"needs {size} KV slots, the whole pool admits {self.allocator.admissible_slots}"
        return None

    def run(self, requests: list[Request], progress: ProgressCallback | None = None) -> RunResult:
        pending = deque(sorted(requests, key=lambda r: (r.arrival_s, r.request_id)))
        scheduler, metrics = self.scheduler, self.step_metrics
        finished: list[Sequence] = []
        rejected: list[Sequence] = []
        now = pending[0].arrival_s if pending else 0.0
        start = now

        def reject(seq: Sequence, reason: str) -> None:
            seq.status, seq.reject_reason, seq.finish_s = Status.REJECTED, reason, now
            rejected.append(seq)
            if progress:
                progress(1)

        while pending or scheduler.has_work():
            while pending and pending[0].arrival_s <= now:
                seq = Sequence(pending.popleft())
                reason = self._rejection(seq)
                if reason:
                    reject(seq, reason)
                else:
                    scheduler.add(seq)
            if not scheduler.has_work():
                if not pending:
                    break  # the last arrivals were all rejected
                now = pending[0].arrival_s
                continue
            plan = scheduler.schedule()
            if not plan.scheduled:
                if scheduler.running:
                    raise RuntimeError("scheduler made no progress with sequences running")
                if pending and not scheduler.waiting:
                    continue
                # Nothing runs and the head cannot be admitted into an idle pool: it never will.
                reject(scheduler.waiting.popleft(), "cannot be admitted even into an idle KV pool")
                continue
            dt = self.runner.step_time(plan)
            now += dt
            done = scheduler.complete_step(plan, now)
            metrics.record(dt, now, self.allocator, scheduler)
            if done:
                finished.extend(done)
                if progress:
                    progress(len(done))
        return RunResult(self._summary(finished, rejected, now - start), metrics.timeseries(), finished, rejected)

    def _summary(self, finished: list[Sequence], rejected: list[Sequence], makespan: float) -> dict[str, Any]:
        averages = self.step_metrics.averages()
        scheduler = self.scheduler
        output_tokens = sum(seq.request.output_len for seq in finished)
        prompt_tokens = sum(seq.request.prompt_len for seq in finished)
        span = makespan or 1.0
        used, reserved = averages["used"], averages["reserved"]
        summary: dict[str, Any] = {
            "requests_finished": len(finished),
            "requests_rejected": len(rejected),
            "reject_reasons": sorted({seq.reject_reason for seq in rejected if seq.reject_reason}),
            "makespan_s": makespan,
            "engine_steps": self.step_metrics.steps,
            "pool_slots": self.allocator.capacity_slots,
            **{f"{key}_share": averages[key] for key in
               ("token_states", "reservation", "internal_fragmentation", "external_fragmentation", "free")},
            "waste": 1.0 - used / reserved if reserved else 0.0,
            "token_states_of_reserved": used / reserved if reserved else 0.0,
            "kv_cache_usage_mean": averages["kv_cache_usage"],
            "kv_cache_usage_peak": self.step_metrics.peak_kv_cache_usage,
            "running_mean": averages["running"],
            "running_peak": self.step_metrics.peak_running,
            "waiting_mean": averages["waiting"],
            "preemptions": scheduler.preemptions,
            "recomputed_tokens": scheduler.recomputed_tokens,
            "swapped_out_slots": scheduler.swapped_out_slots_total,
            "output_tokens_per_s": output_tokens / span,
            "total_tokens_per_s": (output_tokens + prompt_tokens) / span,
            "requests_per_s": len(finished) / span,
            **request_metrics(finished),
        }
        return summary
