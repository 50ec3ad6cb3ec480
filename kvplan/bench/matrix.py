"""The matrix runner: every optimization on the identical request stream, each through an
engine from one factory (simulated: kvplan.sim.factory, real: kvplan.real.factory), so
every engine is sized the same way and runs the same scheduler and metrics code."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from kvplan.bench.config import BenchConfig, record_params, run_id
from kvplan.bench.mode import Mode
from kvplan.bench.optimizations import parse_optimization
from kvplan.core.engine_factory import EngineFactory
from kvplan.core.hashing import hashes_by_request, infinite_cache_hit_tokens, trace_block_bound
from kvplan.core.kv import hit_rate
from kvplan.core.step_trace import StepTrace
from kvplan.results import ResultRecord, make_record
from kvplan.sim.bench_client import run_client
from kvplan.sim.cluster import RouterConfig, run_cluster
from kvplan.sim.factory import SimulatedEngineFactory
from kvplan.sim.vllm_metrics import serving_metrics
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


def run_matrix(
    config: BenchConfig,
    requests: list[Request],
    optimizations: list[str],
    progress: Callable[[str, int], None] | None = None,
    factory: EngineFactory | None = None,
    trace: Callable[[str], None] | None = None,
) -> list[ResultRecord]:
    """Run each optimization on the same requests; one result record per optimization (and
    per router with pods > 1). trace(line): every engine step's decisions as a JSON line
    (kvplan.core.step_trace), labelled with its optimization and pod.

    progress(variant, n) is called as requests end; records come back in the order given,
    the first one marked as the baseline. `factory` defaults to the config's mode's.
    """
    parsed = [parse_optimization(name) for name in optimizations]
    block_size = config.sizing.block_size
    identity = run_id(config, optimizations, len(requests))
    bounds: dict[str, float | None] = {}
    hashes: dict[int, list[int]] = {}
    if any(o.prefix_caching for o in parsed):
        hashes = hashes_by_request(requests, block_size, stable=config.mode is Mode.REAL)
        hits, queried = infinite_cache_hit_tokens(requests, block_size, hashes)
        bounds = {
            "prefix_hit_rate_upper_bound": hit_rate(hits, queried),
            "trace_block_hit_bound": trace_block_bound(requests),
        }
    factory = factory or engine_factory(config)
    cluster = config.cluster
    records: list[ResultRecord] = []
    variants = [(o, r) for o in parsed for r in cluster.variants()]
    try:
        _run_variants(
            config, requests, variants, factory, hashes, bounds, identity, progress, records, trace
        )
    except KeyboardInterrupt as interrupt:  # Ctrl-C / SIGTERM: the finished variants are kept
        interrupt.partial_records = records  # type: ignore[attr-defined]
        raise
    return records


def _run_variants(
    config: BenchConfig,
    requests: list[Request],
    variants: list,
    factory: EngineFactory,
    hashes: dict[int, list[int]],
    bounds: dict[str, float | None],
    identity: str,
    progress: Callable[[str, int], None] | None,
    records: list[ResultRecord],
    trace: Callable[[str], None] | None = None,
) -> None:
    """Run each (optimization, router) in turn, appending its record as soon as it ends."""
    cluster, block_size = config.cluster, config.sizing.block_size
    for index, (optimization, router) in enumerate(variants):
        name = f"{optimization.name}@{router}" if router else optimization.name
        report = (lambda n, name=name: progress(name, n)) if progress else None
        engines = []
        if (
            report is not None and config.mode is Mode.REAL
        ):  # real steps are slow: progress in tokens
            report_tokens, report = report, None
        else:
            report_tokens = None
        for pod in range(cluster.pods):
            engine, sizing = factory.build(optimization)
            if trace is not None:
                engine.trace = StepTrace(trace, {"optimization": name, "pod": pod})
            if report_tokens is not None:
                engine.runner = TokenCountingRunner(engine.runner, report_tokens)
            if optimization.prefix_caching:
                engine.allocator.use_known_hashes(hashes)
            engines.append(engine)
        if router:
            metrics = run_cluster(
                engines,
                requests,
                RouterConfig(router, cluster.w_hit, cluster.w_load),
                block_size,
                report,
            )
            timeseries: dict[str, list[float]] = {}
        elif config.max_concurrency is not None or config.vllm_figures:
            # The simulated `vllm bench serve` client (closed loop under a cap).
            engines[0].progress = report
            client = run_client(
                engines[0],
                requests,
                config.max_concurrency,
                float(config.workload.get("rate", math.inf)),
            )
            result = engines[0].result()
            metrics, timeseries = dict(result.metrics), result.timeseries
            metrics.update({f"vllm_{key}": value for key, value in serving_metrics(client).items()})
        else:
            result = engines[0].run(requests, report)
            metrics, timeseries = dict(result.metrics), result.timeseries
        metrics.update(factory.run_metrics(engines[0]))
        metrics["kv_budget_bytes_per_gpu"] = sizing.kv_pool_bytes
        if sizing.gpu_memory_utilization is not None:
            metrics["gpu_memory_utilization_used"] = sizing.gpu_memory_utilization
        metrics["kv_bytes_per_token_per_gpu"] = sizing.slot_bytes
        if requests:  # the full cache an eviction budget is a share of (report: policy trade-off)
            metrics["mean_sequence_tokens"] = sum(
                r.prompt_len + r.output_len for r in requests
            ) / len(requests)
        if optimization.prefix_caching:
            metrics.update(bounds)
        params = record_params(config, optimization, sizing, len(requests), router)
        records.append(
            make_record(
                "bench",
                identity,
                config.mode,
                name,
                params,
                metrics,
                timeseries,
                baseline=index == 0,
            )
        )


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


def variant_names(config: BenchConfig, optimizations: list[str]) -> list[str]:
    """The record names run_matrix will produce, in order (for progress bars)."""
    return [
        f"{o.name}@{r}" if r else o.name
        for o in (parse_optimization(n) for n in optimizations)
        for r in config.cluster.variants()
    ]
