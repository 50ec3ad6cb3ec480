"""Benchmarks of KV optimizations: the optimization parser, run configs by concern, one run
(`simulate`, with an engine factory from kvplan.sim or kvplan.real) and the matrix of them,
and the workloads with the defaults `bench` and `sweep` share.

The names below load on first use (PEP 562), so a command that only needs, say, the
optimization names for its help text does not import the engine behind them."""

from __future__ import annotations

from typing import Any

from kvplan import lazy_attribute

_HOMES = {
    "BenchConfig": "kvplan.bench.config",
    "ClusterConfig": "kvplan.bench.config",
    "flat_settings": "kvplan.bench.config",
    "engine_factory": "kvplan.bench.simulation",
    "simulate": "kvplan.bench.simulation",
    "RunMetrics": "kvplan.bench.simulation",
    "run_matrix": "kvplan.bench.matrix",
    "variant_names": "kvplan.bench.matrix",
    "DEFAULT_OPTIMIZATIONS": "kvplan.bench.optimizations",
    "KV_FORMAT_PARTS": "kvplan.bench.optimizations",
    "parse_optimization": "kvplan.bench.optimizations",
    "parse_optimizations": "kvplan.bench.optimizations",
    "EngineSizing": "kvplan.core.engine_factory",
    "Optimization": "kvplan.core.engine_factory",
    "RealConfig": "kvplan.core.engine_factory",
    "SizingConfig": "kvplan.core.engine_factory",
    "TierConfig": "kvplan.core.engine_factory",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _HOMES, name)
