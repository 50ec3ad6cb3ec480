"""One run: an optimization's engine (a cluster of them behind a router, or a disaggregated
pipeline of a prefill and a decode pool) serving a list of requests, and what it measured as a
typed RunMetrics. bench's matrix, sweep points, the plan's trials and its disaggregated
pipelines all run through `simulate`; result records are built only where they are written
(bench/matrix.py, sweep/point.py)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kvplan.bench.config import BenchConfig
from kvplan.bench.mode import Mode
from kvplan.core.engine import Engine
from kvplan.core.engine_factory import EngineFactory, EngineSizing, Optimization
from kvplan.core.hashing import hashes_by_request
from kvplan.core.step_trace import StepTrace
from kvplan.sim.bench_client import run_client
from kvplan.sim.cluster import RouterConfig, run_cluster
from kvplan.sim.factory import SimulatedEngineFactory
from kvplan.sim.vllm_metrics import serving_metrics
from kvplan.spec.resolve import load_gpu
from kvplan.workload.request import Request


def engine_factory(config: BenchConfig) -> EngineFactory:
    """The factory of the config's mode; real mode loads its model here (once per run)."""
    if config.mode is Mode.REAL:
        from kvplan.real.factory import RealEngineFactory  # torch: only in real mode

        return RealEngineFactory(
            config.sizing,
            config.real,
            config.scheduler,
            config.tiers,
            config.seed,
            kv_budget=config.kv_budget,
        )
    return SimulatedEngineFactory(
        config.sizing,
        config.scheduler,
        config.tiers,
        config.kv_budget,
        step_model=config.step_model,
        perf_table=config.perf_table,
    )


def _optional(figures: Mapping[str, Any], name: str) -> float | None:
    value = figures[name]
    return None if value is None else float(value)


@dataclass(frozen=True)
class RunMetrics:
    """What one run measured. The figures a search decides on are typed fields, read from the
    engine's summary by their registry names (a renamed metric fails here, loudly); `figures`
    holds every figure the run recorded, by name, for the record and the tables."""

    requests_finished: int
    requests_rejected: int
    requests_per_s: float
    output_tokens_per_s: float
    # None where no request finished
    ttft_s_p90: float | None
    e2e_s_p90: float | None
    figures: Mapping[str, Any]
    # per-step series (time, running, waiting, ...); empty for a cluster
    series: Mapping[str, list[float]] = field(default_factory=dict)

    @classmethod
    def of(cls, figures: Mapping[str, Any], series: Mapping[str, list[float]]) -> RunMetrics:
        return cls(
            int(figures["requests_finished"]),
            int(figures["requests_rejected"]),
            float(figures["requests_per_s"]),
            float(figures["output_tokens_per_s"]),
            _optional(figures, "ttft_s_p90"),
            _optional(figures, "e2e_s_p90"),
            figures,
            series,
        )


@dataclass(frozen=True)
class Pipeline:
    """A disaggregated deployment: `prefills` engines of the run's config behind its router
    prefill every request, its KV crosses a link to `decodes` engines of `decode` (behind
    least-loaded), which decode it. The link runs at `link_gbps` per GPU (None: the decode GPU's
    interconnect)."""

    prefills: int
    decode: BenchConfig
    decodes: int
    link_gbps: float | None = None


def simulate(
    config: BenchConfig,
    requests: list[Request],
    optimization: Optimization,
    *,
    router: str | None = None,
    pipeline: Pipeline | None = None,
    factory: EngineFactory | None = None,
    hashes: dict[int, list[int]] | None = None,
    progress: Callable[[int], None] | None = None,
    trace: Callable[[str], object] | None = None,
    name: str | None = None,
) -> tuple[RunMetrics, EngineSizing]:
    """Serve `requests` with the optimization's engine (one per pod behind `router` when the
    config has pods) and measure the run; the sizing the engines were built with.

    hashes: each request's block hashes where the optimization caches prefixes (computed here
    when not given); progress(n): requests finished; trace(line): every step's decisions as a
    JSON line labelled with `name` and the pod. The factory defaults to the config's mode's."""
    factory = factory or engine_factory(config)
    cluster = config.cluster
    if optimization.prefix_caching and hashes is None:
        hashes = hashes_by_request(
            requests, config.sizing.block_size, stable=config.mode is Mode.REAL
        )
    if pipeline is not None:
        return _pipelined(config, requests, optimization, router, pipeline, factory, hashes)
    report_tokens = None
    # real steps are slow: progress in tokens
    if progress is not None and config.mode is Mode.REAL:
        report_tokens, progress = progress, None
    engines, sizing = _engines(factory, optimization, cluster.pods if router else 1, hashes)
    for pod, engine in enumerate(engines):
        if trace is not None:
            engine.trace = StepTrace(trace, {"optimization": name or optimization.name, "pod": pod})
        if report_tokens is not None:
            engine.runner = TokenCountingRunner(engine.runner, report_tokens)
    series: dict[str, list[float]] = {}
    if router:
        figures = run_cluster(
            engines,
            requests,
            RouterConfig(router, cluster.w_hit, cluster.w_load),
            config.sizing.block_size,
            progress,
        )
    elif config.max_concurrency is not None or config.vllm_figures:
        # The simulated `vllm bench serve` client (closed loop under a cap).
        engines[0].progress = progress
        client = run_client(
            engines[0],
            requests,
            config.max_concurrency,
            float(config.workload.get("rate", math.inf)),
        )
        result = engines[0].result()
        figures, series = dict(result.metrics), result.timeseries
        figures.update({f"vllm_{key}": value for key, value in serving_metrics(client).items()})
    else:
        result = engines[0].run(requests, progress)
        figures, series = dict(result.metrics), result.timeseries
    figures.update(factory.run_metrics(engines[0]))
    figures["kv_budget_bytes_per_gpu"] = sizing.kv_pool_bytes
    if sizing.gpu_memory_utilization is not None:
        figures["gpu_memory_utilization_used"] = sizing.gpu_memory_utilization
    figures["kv_bytes_per_token_per_gpu"] = sizing.slot_bytes
    if requests:  # the full cache an eviction budget is a share of (report: policy trade-off)
        figures["mean_sequence_tokens"] = sum(r.prompt_len + r.output_len for r in requests) / len(
            requests
        )
    return RunMetrics.of(figures, series), sizing


def _engines(
    factory: EngineFactory,
    optimization: Optimization,
    count: int,
    hashes: dict[int, list[int]] | None,
) -> tuple[list[Engine], EngineSizing]:
    """`count` engines of one pool, knowing the requests' block hashes where they cache
    prefixes; the pool's sizing."""
    engines, sizing = [], None
    for _ in range(count):
        engine, sizing = factory.build(optimization)
        if hashes is not None and optimization.prefix_caching:
            engine.allocator.use_known_hashes(hashes)
        engines.append(engine)
    assert sizing is not None
    return engines, sizing


def _pipelined(
    config: BenchConfig,
    requests: list[Request],
    optimization: Optimization,
    router: str | None,
    pipeline: Pipeline,
    factory: EngineFactory,
    hashes: dict[int, list[int]] | None,
) -> tuple[RunMetrics, EngineSizing]:
    """The disaggregated run: the prefill pool, the link, the decode pool (sim/disagg.py)."""
    from kvplan.sim.disagg import KvLink, run_disaggregated

    prefill_pods, prefill_sizing = _engines(factory, optimization, pipeline.prefills, hashes)
    decode_factory = engine_factory(pipeline.decode)
    decode_pods, decode_sizing = _engines(decode_factory, optimization, pipeline.decodes, hashes)
    gpu = load_gpu(pipeline.decode.sizing.gpu)
    link = KvLink(
        max(prefill_sizing.slot_bytes, decode_sizing.slot_bytes),
        pipeline.link_gbps or gpu.interconnect_gbps,
        gpu.interconnect_latency_us * 1e-6,
    )
    cluster = config.cluster
    figures = run_disaggregated(
        prefill_pods,
        decode_pods,
        requests,
        link,
        RouterConfig(router or RouterConfig.name, cluster.w_hit, cluster.w_load),
        config.sizing.block_size,
    )
    figures.update(decode_factory.run_metrics(decode_pods[0]))
    return RunMetrics.of(figures, {}), decode_sizing


class TokenCountingRunner:
    """A runner that reports each step's computed tokens (progress in tokens, not requests)."""

    def __init__(self, runner: Any, report: Callable[[int], None]) -> None:
        self._runner, self._report = runner, report

    def step_time(self, plan: Any) -> float:
        seconds = self._runner.step_time(plan)
        self._report(plan.num_tokens)
        return seconds

    def __getattr__(self, name: str) -> Any:  # everything else is the wrapped runner's
        return getattr(self._runner, name)
