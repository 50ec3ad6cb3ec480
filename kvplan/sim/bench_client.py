"""A simulated `vllm bench serve` client driving one engine: open or closed loop.

Open loop: each request is sent at its scheduled time (kvplan.workload.vllm_bench
send_times; rate inf = all at t = 0). Closed loop (--max-concurrency N): at most N requests
are in flight; one that is due while N are in flight waits in the client and goes out the
moment one finishes, as vLLM's semaphore does. Its TTFT and E2E count from that moment, not
from its scheduled time (vLLM starts the request's clock inside the semaphore).

The client drives the engine through its public submit / step / advance calls, as
kvplan.sim.cluster drives pods; the engine loop itself is unchanged. A StepObserver wraps
the engine's runner to see each step's plan: which sequences emit a token (for
inter-token latencies) and, for calibration, each step's raw costs (kvplan.sim.step_model).
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from kvplan.core.engine import Engine
from kvplan.core.scheduler import StepPlan
from kvplan.core.sequence import Sequence
from kvplan.sim.ops.step import COST_FIELDS, OperatorStepRunner
from kvplan.spec.setting_error import SettingError
from kvplan.workload.request import Request


class StepObserver:
    """Runner wrapper: times steps with the wrapped runner and notes what each step emits."""

    def __init__(self, runner: Any, token_times: bool = False, costs: bool = False) -> None:
        self.runner = runner
        self.mode = runner.mode
        self.token_times = token_times
        # only the operator step model's steps can be re-timed under other overheads
        self.record_costs = costs and isinstance(runner, OperatorStepRunner)
        self.emitters: list[Sequence] = []
        self.steps = 0
        # The earliest the next step may start: an idle engine's clock jump or the latest send it
        # admits.
        self.release: float | None = None
        self.cost_rows: list[tuple[float, ...]] = []
        self.admitted: dict[int, int] = {}  # request id -> the first step that scheduled it

    def step_time(self, plan: StepPlan) -> float:
        dt = self.runner.step_time(plan)
        if self.token_times:
            self.emitters = [seq for seq, count in plan.scheduled if count == seq.pending_tokens]
        if self.record_costs:
            for seq, _ in plan.scheduled:
                self.admitted.setdefault(seq.request.request_id, self.steps)
            c = self.runner.costs(plan)
            extra = dt - self.runner.step_time_from(c)  # swaps and transfers
            release = -math.inf if self.release is None else self.release
            self.cost_rows.append((*(getattr(c, name) for name in COST_FIELDS), extra, release))
            self.release = None
        self.steps += 1
        return dt


@dataclass
class ClientRun:
    """What the client saw: requests as sent, their sequences, token gaps, duration."""

    finished: list[Sequence]
    rejected: list[Sequence]
    duration_s: float
    itls: list[float] | None
    max_concurrency: int | None
    request_rate: float
    # For calibration replays: per request (request_id -> values).
    send_step: dict[int, int] = field(
        default_factory=dict
    )  # step whose end freed its slot, -1 if none
    scheduled_s: dict[int, float] = field(default_factory=dict)
    first_step: dict[int, int] = field(default_factory=dict)
    last_step: dict[int, int] = field(default_factory=dict)
    admit_step: dict[int, int] = field(default_factory=dict)  # first step that scheduled it
    step_costs: list[tuple[float, ...]] = field(default_factory=list)
    # whether measured tables timed the run's operators (kvplan.sim.ops.sources.measured);
    # False for a runner without operators
    table_timed: bool = False


def run_client(
    engine: Engine,
    requests: list[Request],
    max_concurrency: int | None = None,
    request_rate: float = math.inf,
    token_times: bool = True,
    record_costs: bool = False,
) -> ClientRun:
    """Send `requests` (arrival_s = scheduled send time) to `engine`; run until all end."""
    if max_concurrency is not None and max_concurrency < 1:
        raise SettingError("{max_concurrency} must be at least 1, got {got}", got=max_concurrency)
    observer = StepObserver(engine.runner, token_times=token_times, costs=record_costs)
    engine.runner = observer
    pending = deque(sorted(requests, key=lambda r: (r.arrival_s, r.request_id)))
    run = ClientRun([], [], 0.0, [] if token_times else None, max_concurrency, request_rate)
    last_token: dict[int, float] = {}
    sent = 0
    freed_at, freed_step = -math.inf, -1  # when the cap last stopped binding

    def after_step() -> None:
        if not token_times:
            return
        now = engine.now
        for seq in observer.emitters:
            rid = seq.request.request_id
            if seq.num_generated == 1 and rid not in last_token:
                run.first_step[rid] = observer.steps - 1
            else:
                run.itls.append(now - last_token[rid])  # type: ignore[union-attr]
            last_token[rid] = now
            if seq.num_generated >= seq.output_len:
                run.last_step[rid] = observer.steps - 1
        observer.emitters = []

    def step_once() -> None:
        nonlocal freed_at, freed_step
        full = max_concurrency is not None and sent - engine.ended >= max_concurrency
        engine.step()
        after_step()
        if full and sent - engine.ended < max_concurrency:  # type: ignore[operator]
            freed_at, freed_step = engine.now, observer.steps - 1

    while pending or engine.busy:
        room = max_concurrency is None or sent - engine.ended < max_concurrency
        if pending and room and pending[0].arrival_s <= engine.now:
            request = pending.popleft()
            send = request.arrival_s
            # A replay under other factors must not start the step that admits this request
            # before its scheduled send (a faster step would otherwise see it early).
            observer.release = send if observer.release is None else max(observer.release, send)
            run.scheduled_s[request.request_id] = send
            run.send_step[request.request_id] = -1
            if max_concurrency is not None and freed_at > send:
                send = freed_at  # it waited in the client for this slot
                run.send_step[request.request_id] = freed_step
            if engine.start is None and not sent:
                engine.now = (
                    0.0  # vLLM's clock starts when the benchmark does, not at the first send
                )
            engine.submit(dataclasses.replace(request, arrival_s=send))
            sent += 1
            continue
        if engine.busy:
            if pending and room:
                # Steps that start before the next send; stop early if nothing changes.
                target = pending[0].arrival_s
                while engine.busy and engine.now < target:
                    step_once()
                if not engine.busy and engine.now < target:
                    engine.now = observer.release = target
            else:
                step_once()
        elif pending:
            engine.now = observer.release = max(engine.now, pending[0].arrival_s)
    run.finished = [s for s in engine.finished if s.sample_index == 0]
    run.rejected = list(engine.rejected)
    run.duration_s = engine.now
    run.step_costs = observer.cost_rows
    run.admit_step = observer.admitted
    runner = observer.runner
    run.table_timed = isinstance(runner, OperatorStepRunner) and runner.sources.measured()
    engine.runner = observer.runner
    return run
