"""The matrix runner: every optimization on the identical request stream, each through an
engine from one factory (simulated: kvplan.sim.factory, real: kvplan.real.factory), so
every engine is sized the same way and runs the same scheduler and metrics code."""

from __future__ import annotations

from collections.abc import Callable

from kvplan.bench.config import BenchConfig, record_params, run_id
from kvplan.bench.mode import Mode
from kvplan.bench.optimizations import parse_optimization
from kvplan.bench.simulation import engine_factory, simulate
from kvplan.core.engine_factory import EngineFactory
from kvplan.core.hashing import hashes_by_request, infinite_cache_hit_tokens, trace_block_bound
from kvplan.core.kv import hit_rate
from kvplan.results import ResultRecord, make_record
from kvplan.workload.request import Request


def run_matrix(
    config: BenchConfig,
    requests: list[Request],
    optimizations: list[str],
    progress: Callable[[str, int], None] | None = None,
    factory: EngineFactory | None = None,
    trace: Callable[[str], object] | None = None,
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
    trace: Callable[[str], object] | None = None,
) -> None:
    """Run each (optimization, router) in turn, appending its record as soon as it ends."""
    for index, (optimization, router) in enumerate(variants):
        name = f"{optimization.name}@{router}" if router else optimization.name
        report = (lambda n, name=name: progress(name, n)) if progress else None
        run, sizing = simulate(
            config,
            requests,
            optimization,
            router=router,
            factory=factory,
            hashes=hashes,
            progress=report,
            trace=trace,
            name=name,
        )
        figures = dict(run.figures)
        if optimization.prefix_caching:
            figures.update(bounds)
        params = record_params(config, optimization, sizing, len(requests), router)
        records.append(
            make_record(
                "bench",
                identity,
                config.mode,
                name,
                params,
                figures,
                dict(run.series),
                baseline=index == 0,
            )
        )


def variant_names(config: BenchConfig, optimizations: list[str]) -> list[str]:
    """The record names run_matrix will produce, in order (for progress bars)."""
    return [
        f"{o.name}@{r}" if r else o.name
        for o in (parse_optimization(n) for n in optimizations)
        for r in config.cluster.variants()
    ]
