"""The engine loop: admit arrivals, schedule a step, run it, advance the clock, measure.

Every request ends finished or rejected (with a reason): a request that can never fit is
rejected on arrival, and a head-of-line request that cannot be admitted into an idle pool
is rejected rather than left waiting forever.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kvplan.core.kv import Allocator
from kvplan.core.metrics import StepMetrics
from kvplan.core.scheduler import Scheduler, SchedulerConfig, StepPlan
from kvplan.core.sequence import Sequence, Status
from kvplan.core.step_trace import StepTrace
from kvplan.core.summary import run_summary
from kvplan.spec.setting_error import SettingError
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
    def __init__(
        self, allocator: Allocator, runner: Runner, config: SchedulerConfig, max_model_len: int
    ) -> None:
        self.scheduler = Scheduler(allocator, config)  # refuses batch limits left unresolved
        tokens = self.scheduler.max_num_batched_tokens
        if not config.chunked_prefill and tokens < max_model_len:
            # A preempted request recomputes prompt + generated tokens in one step without
            # chunking; vLLM refuses this configuration for the same reason.
            raise SettingError(
                "without chunked prefill {max_num_batched_tokens} ({tokens}) must be at least "
                "{max_model_len} ({limit})",
                tokens=tokens,
                limit=max_model_len,
            )
        self.allocator = allocator
        self.runner = runner
        self.max_model_len = max_model_len
        self.step_metrics = StepMetrics()
        self.now = 0.0
        self.start: float | None = None  # the first arrival
        self.finished: list[Sequence] = []
        self.rejected: list[Sequence] = []
        self.ended = (
            0  # requests finished or rejected (parallel samples count once), kept as they end
        )
        self.progress: ProgressCallback | None = None
        self.trace: StepTrace | None = None  # writes each step's decisions when set

    def _rejection(self, seq: Sequence) -> str | None:
        request = seq.request
        if request.total_len > self.max_model_len:
            return f"needs {request.total_len} tokens, above max_model_len {self.max_model_len}"
        size = self.allocator.reservation_size(seq)
        if size > self.allocator.admissible_slots:
            return f"needs {size} KV slots, the whole pool admits {self.allocator.admissible_slots}"
        return None

    def submit(self, request: Request) -> None:
        """A request arrives now (the caller has advanced the clock to its arrival)."""
        if self.start is None:
            self.start = self.now = max(self.now, request.arrival_s)
        seq = Sequence(request)
        reason = self._rejection(seq)
        if reason:
            self._reject(seq, reason)
        else:
            self.scheduler.add(seq)

    def _reject(self, seq: Sequence, reason: str) -> None:
        seq.status, seq.reject_reason, seq.finish_s = Status.REJECTED, reason, self.now
        self.rejected.append(seq)
        self.ended += 1
        if self.progress:
            self.progress(1)

    @property
    def busy(self) -> bool:
        return self.scheduler.has_work()

    def step(self) -> None:
        """Schedule, run and complete one step (the caller checks `busy` first)."""
        scheduler = self.scheduler
        plan = scheduler.schedule()
        if not plan.scheduled:
            if scheduler.running:
                raise RuntimeError("scheduler made no progress with sequences running")
            # Nothing runs and the head cannot be admitted into an idle pool: it never will.
            self._reject(
                scheduler.waiting.popleft(), "cannot be admitted even into an idle KV pool"
            )
            return
        dt = self.runner.step_time(plan)
        self.now += dt
        done = scheduler.complete_step(plan, self.now)
        self.step_metrics.record(dt, self.now, self.allocator, scheduler)
        if self.trace is not None:
            self.trace.record(plan, scheduler, done, self.now)
        if done:
            self.finished.extend(done)
            ended = sum(1 for seq in done if seq.sample_index == 0)
            self.ended += ended
            if self.progress:
                self.progress(ended)

    def advance(self, until: float) -> None:
        """Run the steps that start before `until`; an idle engine's clock jumps to it."""
        while self.scheduler.has_work() and self.now < until:
            self.step()
        if until != math.inf and not self.scheduler.has_work() and self.now < until:
            self.now = until

    def run(self, requests: list[Request], progress: ProgressCallback | None = None) -> RunResult:
        self.progress = progress
        for request in sorted(requests, key=lambda r: (r.arrival_s, r.request_id)):
            self.advance(request.arrival_s)
            self.submit(request)
        self.advance(math.inf)
        return self.result()

    def result(self) -> RunResult:
        makespan = self.now - (self.start or 0.0)
        metrics = run_summary(
            self.allocator,
            self.scheduler,
            self.step_metrics,
            self.finished,
            self.rejected,
            makespan,
        )
        return RunResult(metrics, self.step_metrics.timeseries(), self.finished, self.rejected)
