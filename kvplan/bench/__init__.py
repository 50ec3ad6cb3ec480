"""Benchmarks of KV optimizations: the optimization parser, run configs, the matrix runner,
sweeps and study summaries."""

from kvplan.bench.matrix import (DEFAULT_OPTIMIZATIONS, KV_FORMAT_PARTS, BenchConfig, EngineSizing, Optimization,
                                 build_engine, make_tiers, parse_optimization, run_matrix, size_engine,
                                 variant_names)

__all__ = ["DEFAULT_OPTIMIZATIONS", "KV_FORMAT_PARTS", "BenchConfig", "EngineSizing", "Optimization", "build_engine",
           "make_tiers", "parse_optimization", "run_matrix", "size_engine", "variant_names"]
