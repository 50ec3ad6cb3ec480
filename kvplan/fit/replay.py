"""Replay measured benchmark runs in the simulator, for the fit of the engine overheads
(kvplan/fit/overhead_fit.py) and the fidelity checks.

simulate(): one MeasuredRun through a paged engine (vLLM's defaults: block size 16,
chunked prefill, recompute preemption) with the operator step model at some engine overhead,
driven by the simulated `vllm bench` client; returns the predicted figures.

Fitting without re-simulating: with rate inf, a concurrency cap or an offline batch, which
sequences run in which step does not depend on how long steps take, only on token budgets
and pool size. So one simulation records each step's GPU time, sequences and decision, and
each request's first and last step; any overheads then give step times t_i(theta) and, by a
cumulative sum (with the idle gaps of open-loop runs kept as release times), every request's
TTFT, TPOT and the run's throughput in microseconds. For finite-rate open-loop runs batching
does depend on timing, so the fit is repeated from a fresh simulation at the first round's
overheads (fit.fit_overheads does two rounds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from kvplan import GIB
from kvplan.core.engine import Engine
from kvplan.core.engine_factory import Optimization, SizingConfig
from kvplan.core.scheduler import SchedulerConfig
from kvplan.engines.serving_engine import SGLangEngine, VllmV0Engine, serving_engine
from kvplan.engines.versions import parse_version
from kvplan.fit.measured import MeasuredRun, batch_defaults
from kvplan.sim.bench_client import ClientRun, run_client
from kvplan.sim.factory import SimulatedEngineFactory
from kvplan.sim.ops.overhead import EngineOverhead, Era, engine_era
from kvplan.sim.ops.step import COST_FIELDS, StepCosts
from kvplan.spec.resolve import load_gpu, load_model
from kvplan.workload.request import Request
from kvplan.workload.vllm_bench import BenchLoad, bench_requests

VLLM_BLOCK_SIZE = 16


# --- one run through the simulator ------------------------------------------------------


def _requests(run: MeasuredRun) -> list[Request]:
    n = run.num_prompts
    out_len = run.output_len or 128
    in_len = run.input_len or 1024
    if run.total_output_tokens and run.dataset == "random":
        out_len = max(
            1, round(run.total_output_tokens / n)
        )  # the run's actual outputs (EOS could stop early)
    offline = run.benchmark in ("throughput", "latency")
    load = BenchLoad(
        dataset=run.dataset,
        num_prompts=n,
        input_len=in_len,
        output_len=out_len,
        range_ratio=run.range_ratio or 0.0,
        range_below=run.range_ratio is not None
        and serving_engine(run.engine, run.engine_version).range_ratio_is_floor(
            parse_version(run.engine_version)
        ),
        request_rate=math.inf if offline else run.request_rate,
        max_concurrency=None if offline else run.max_concurrency,
    )
    if run.dataset != "sharegpt":
        return bench_requests(load)
    plain = bench_requests(load)
    prompt_scale = output_scale = 1.0
    if run.total_input_tokens:
        prompt_scale = run.total_input_tokens / sum(r.prompt_len for r in plain)
    if run.total_output_tokens:
        output_scale = run.total_output_tokens / sum(r.output_len for r in plain)
    return bench_requests(load, prompt_scale, output_scale)


def build_engine(run: MeasuredRun, overhead: EngineOverhead, requests: list[Request]) -> Engine:
    """A paged engine sized as the run's server sized its pool (model, GPU, TP, the engine and
    version's memory profile and default utilization unless the run states one), with that
    engine's batch limits, built by the same factory as `kvplan bench`'s simulated engines.
    SGLang runs take SGLang's own limits (chunked prefill size, max_running_requests from the
    pool, prefill batches first) unless the run states them."""
    model, gpu = load_model(run.model), load_gpu(run.gpu)
    longest = max(r.prompt_len + r.output_len for r in requests)
    max_model_len = run.max_model_len or max(longest, model.max_position_embeddings or 8192)
    seqs, tokens, chunked = batch_defaults(
        run, gpu.usable_memory_bytes / GIB, gpu.name, max_model_len
    )
    if not chunked:
        tokens = max(tokens, max_model_len)
    sizing = SizingConfig(
        model=run.model,
        gpu=run.gpu,
        tp=run.tp,
        kv_dtype=run.kv_dtype,
        block_size=VLLM_BLOCK_SIZE,
        max_model_len=max_model_len,
        weight_dtype=run.weight_dtype,
        gpu_memory_utilization=run.gpu_memory_utilization,
        engine=run.engine,
        engine_version=run.engine_version or None,
    )
    served_by = serving_engine(run.engine, run.engine_version)
    v0 = isinstance(served_by, VllmV0Engine)
    # the factory fills in SGLang's own limits (core.engine_factory.engine_scheduler)
    if isinstance(served_by, SGLangEngine):
        scheduler = SchedulerConfig(
            max_num_seqs=run.max_num_seqs, max_num_batched_tokens=run.max_num_batched_tokens
        )
    else:
        scheduler = SchedulerConfig(
            max_num_seqs=seqs,
            max_num_batched_tokens=tokens,
            chunked_prefill=chunked,
            prefill_first=v0 and not chunked,
            scheduler_steps=run.num_scheduler_steps if v0 else 1,
        )
    try:
        engine, _ = SimulatedEngineFactory(sizing, scheduler, step_model=overhead).build(
            Optimization("paged")
        )
    except ValueError as err:
        raise ValueError(f"{run.run_id}: {err}") from None
    return engine


def simulate(
    run: MeasuredRun, overhead: EngineOverhead, record: bool = False
) -> tuple[dict[str, float], ClientRun]:
    """Predicted figures (the keys of MeasuredRun.measured) for the run with the operator step
    model at this engine overhead."""
    requests = _requests(run)
    engine = build_engine(run, overhead, requests)
    offline = run.benchmark in ("throughput", "latency")
    client = run_client(
        engine,
        requests,
        None if offline else run.max_concurrency,
        math.inf if offline else run.request_rate,
        token_times=record,
        record_costs=record,
    )
    return figures(client), client


def figures(client: ClientRun) -> dict[str, float]:
    done = client.finished
    duration = client.duration_s or 1e-12
    ttft = np.array([s.served[0] - s.request.arrival_s for s in done])
    tpot = np.array(
        [
            (s.served[1] - s.served[0]) / (s.request.output_len - 1)
            for s in done
            if s.request.output_len > 1
        ]
    )
    return {
        "output_throughput": sum(s.request.output_len for s in done) / duration,
        **latency_figures(ttft, tpot),
        "latency_avg_s": client.duration_s,
    }


def latency_figures(ttft_s: np.ndarray, tpot_s: np.ndarray) -> dict[str, float]:
    """Mean and median TTFT and TPOT in ms, as `vllm bench serve` reports them (NaN when empty)."""
    out = {}
    for name, values in (("ttft", ttft_s), ("tpot", tpot_s)):
        out[f"mean_{name}_ms"] = 1000 * float(values.mean()) if len(values) else math.nan
        out[f"median_{name}_ms"] = 1000 * float(np.median(values)) if len(values) else math.nan
    return out


# --- replay: the same schedule under other factors ------------------------------------


@dataclass(frozen=True)
class Replay:
    run: MeasuredRun
    costs: StepCosts  # every step's GPU time, sequences and decision, one array per field
    extra_s: np.ndarray  # each step's swap and transfer seconds, which no overhead scales
    recorded_dt: np.ndarray  # each step's seconds in the recorded simulation
    release: np.ndarray
    scheduled: np.ndarray
    send_step: np.ndarray
    admit: np.ndarray
    first: np.ndarray
    last: np.ndarray
    outputs: np.ndarray
    table_timed: bool  # measured tables timed every operator (not the roofline)

    @classmethod
    def record(cls, run: MeasuredRun, overhead: EngineOverhead) -> Replay:
        _, client = simulate(run, overhead, record=True)
        width = len(COST_FIELDS)  # each row: the StepCosts fields, the extra seconds, the release
        rows = np.asarray(client.step_costs, dtype=float).reshape(-1, width + 2)
        ids = sorted(client.first_step)
        lengths = {s.request.request_id: s.request.output_len for s in client.finished}
        costs = StepCosts(*rows[:, :width].T)
        extra = rows[:, width]
        return cls(
            run,
            costs,
            extra,
            overhead.steps(*costs) + extra,
            rows[:, width + 1],
            np.array([client.scheduled_s[i] for i in ids]),
            np.array([client.send_step[i] for i in ids], dtype=np.int64),
            np.array([client.admit_step[i] for i in ids], dtype=np.int64),
            np.array([client.first_step[i] for i in ids], dtype=np.int64),
            np.array([client.last_step.get(i, client.first_step[i]) for i in ids], dtype=np.int64),
            np.array([lengths[i] for i in ids], dtype=float),
            client.table_timed,
        )

    @cached_property
    def era(self) -> Era:
        return engine_era(self.run.engine, self.run.engine_version)

    @property
    def timing_dependent(self) -> bool:
        """An open loop at a finite rate: which requests share a step depends on step times."""
        return (
            self.run.benchmark == "serving"
            and math.isfinite(self.run.request_rate)
            and self.run.max_concurrency is None
        )

    def step_times(self, factors: dict[str, float]) -> np.ndarray:
        """Every step's seconds under the run's era at these overheads (EngineOverhead.of)."""
        return EngineOverhead.of(factors, self.era).steps(*self.costs) + self.extra_s

    def _ends(self, dt: np.ndarray) -> np.ndarray:
        """Each step's end on one clock: steps run back to back, none before its release."""
        total = np.cumsum(dt)
        return total + np.maximum(0.0, np.maximum.accumulate(self.release - (total - dt)))

    def predict(self, factors: dict[str, float]) -> dict[str, float]:
        dt = self.step_times(factors)
        multi = self.outputs > 1
        if self.timing_dependent:
            ttft, finish, tpot = self._local_timeline(dt)
            duration = float(finish.max()) if len(finish) else 1e-12
        else:
            end = self._ends(dt)
            send = np.where(
                self.send_step >= 0,
                np.maximum(self.scheduled, end[np.maximum(self.send_step, 0)]),
                self.scheduled,
            )
            ttft = end[self.first] - send
            tpot = (end[self.last] - end[self.first])[multi] / (self.outputs[multi] - 1)
            duration = float(end[-1]) if len(end) else 1e-12
        return {
            "output_throughput": float(self.outputs.sum()) / duration,
            **latency_figures(ttft, tpot),
            "latency_avg_s": duration,
        }

    def _local_timeline(self, dt: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """TTFT, finish time and TPOT per request when the schedule depends on timing.

        One clock for the whole recorded schedule would carry every step's slowdown into all
        later arrivals: at slower factors a queue builds that the real server, batching more,
        never has (and at faster ones steps would wait for arrivals). So each request is timed
        along its own steps only, from the step that admitted it: its wait before that step
        (recorded, scaled as the step it waited on) plus the steps it ran in, each at the new
        factors. At the recorded factors this is the simulation itself.
        """
        cum = np.cumsum(dt)
        admitted_at = cum[self.admit] - dt[self.admit]  # on the request's own clock
        recorded_start = self._ends(self.recorded_dt)[self.admit] - self.recorded_dt[self.admit]
        before = np.maximum(self.admit - 1, 0)
        scale = np.where(
            self.admit > 0, dt[before] / np.maximum(self.recorded_dt[before], 1e-15), 1.0
        )
        wait = np.maximum(0.0, recorded_start - self.scheduled) * scale
        multi = self.outputs > 1
        tpot = (cum[self.last] - cum[self.first])[multi] / (self.outputs[multi] - 1)
        return (
            wait + cum[self.first] - admitted_at,
            self.scheduled + wait + cum[self.last] - admitted_at,
            tpot,
        )


def compared(run: MeasuredRun) -> list[str]:
    """Which measured figures a fit or a fidelity check compares for this run."""
    return [k for k in run.measured if not (k.endswith("_ttft_ms") and run.queue_dominated)]


def log_errors(run: MeasuredRun, predicted: dict[str, float]) -> list[float]:
    return [
        math.log(max(predicted[k], 1e-12) / run.measured[k])
        for k in compared(run)
        if math.isfinite(predicted.get(k, math.nan))
    ]
