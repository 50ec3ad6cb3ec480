"""Benchmarks of KV optimizations: the optimization parser, run configs by concern, the
matrix runner (given an engine factory from kvplan.sim or kvplan.real), workloads with the
defaults `bench` and `sweep` share, sweeps and study summaries."""

from kvplan.bench.config import BenchConfig, ClusterConfig, flat_settings
from kvplan.bench.matrix import engine_factory, run_matrix, variant_names
from kvplan.bench.optimizations import DEFAULT_OPTIMIZATIONS, KV_FORMAT_PARTS, parse_optimization, parse_optimizations
from kvplan.core.setup import EngineSizing, Optimization, RealConfig, SizingConfig, TierConfig

__all__ = ["DEFAULT_OPTIMIZATIONS", "KV_FORMAT_PARTS", "BenchConfig", "ClusterConfig", "EngineSizing", "Optimization",
           "RealConfig", "SizingConfig", "TierConfig", "engine_factory", "flat_settings", "parse_optimization",
           "parse_optimizations", "run_matrix", "variant_names"]
