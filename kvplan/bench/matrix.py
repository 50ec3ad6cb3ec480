"""Optimization presets and the matrix runner: every optimization on the identical request
stream, through the same engine, sized from the same capacity plan."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from kvplan.plan.capacity import PlanInputs, plan
from kvplan.sim.cluster import RouterConfig, run_cluster
from kvplan.core.kv import ALLOCATORS, make_allocator
from kvplan.core.engine import Engine
from kvplan.core.hashing import hashes_by_request, infinite_cache_hit_tokens, trace_block_bound
from kvplan.sim.bench_client import run_client
from kvplan.sim.step_model import StepModelRunner, step_model_params
from kvplan.sim.vllm_metrics import serving_metrics
from kvplan.core.scheduler import SchedulerConfig
from kvplan.core.tiers import Tier, TieredCache
from kvplan.spec.profiles import load_gpu, load_model
from kvplan.quality.policies import POLICIES
from kvplan.results import make_record
from kvplan.plan.roofline import Roofline
from kvplan.spec import KVFormat, ModelSpec, parse_kv_format
from kvplan.workload.request import Request

GIB = 2**30
DEFAULT_OPTIMIZATIONS = ("contiguous-max", "contiguous-pow2", "contiguous-oracle", "paged", "prefix")
KV_FORMAT_PARTS = ("fp32", "fp16", "bf16", "fp8", "fp8-e4m3", "fp8-e5m2", "int8", "int4")


@dataclass(frozen=True)
class Optimization:
    """One composed optimization, e.g. `paged+fp8`: an allocator plus a KV format."""

    name: str
    allocator: str = "paged"
    kv_dtype: str | None = None  # None: the run's --kv-dtype
    prefix_caching: bool = False
    policy: str | None = None  # an eviction policy, applied in simulated mode as a token budget
    offload: tuple[str, ...] = ()  # lower tiers for prefix blocks: ("cpu",) or ("cpu", "disk")


def parse_optimization(text: str) -> Optimization:
    parts = [p.strip().lower() for p in text.split("+") if p.strip()]
    if not parts:
        raise ValueError("empty optimization name; use e.g. paged, contiguous-max or paged+fp8")
    allocator, kv_dtype, prefix, policy, offload = None, None, False, None, ()
    for part in parts:
        if part == "prefix":
            prefix = True
        elif part in ("offload-cpu", "offload-disk"):
            prefix = True  # the tiers hold prefix-cache blocks
            offload = ("cpu",) if part == "offload-cpu" else ("cpu", "disk")
        elif part in POLICIES:
            policy = part
        elif part in ALLOCATORS:
            if allocator:
                raise ValueError(f"'{text}' names two allocators; compose one allocator with other parts")
            allocator = part
        elif part in KV_FORMAT_PARTS or part.startswith(("int4-g", "int8-g", "int2-g", "kivi-int")):
            parse_kv_format(part)
            kv_dtype = part
        else:
            known = ", ".join((*ALLOCATORS, "prefix", "offload-cpu", "offload-disk", *POLICIES, *KV_FORMAT_PARTS))
            raise ValueError(f"unknown optimization '{part}' in '{text}'; known: {known}")
    if prefix and allocator not in (None, "paged"):
        raise ValueError(f"'{text}': prefix caching needs the paged allocator")
    if policy and allocator not in (None, "paged"):
        raise ValueError(f"'{text}': eviction policies need the paged allocator")
    return Optimization("+".join(parts), allocator or "paged", kv_dtype, prefix, policy, offload)


@dataclass(frozen=True)
class BenchConfig:
    model: str = "llama-3.1-8b"
    gpu: str = "a100-80gb"
    tp: int = 1
    kv_dtype: str = "auto"
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    kv_cache_gib: float | None = None
    max_model_len: int | None = None
    weight_dtype: str | None = None
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    swap_space_gib: float = 0.0
    seed: int = 0
    workload: dict[str, Any] = field(default_factory=dict)
    pods: int = 1
    routers: tuple[str, ...] = ()
    kv_budget: int | None = None
    cpu_cache_gb: float = 64.0
    disk_cache_gb: float = 512.0
    tier_policy: str = "lru"
    host_link_gbps: float | None = None  # default: the GPU profile's
    nvme_gbps: float | None = None
    disk_dir: str | None = None  # real mode's disk tier (default: a temporary folder)
    mode: str = "simulated"
    device: str = "auto"
    model_path: str | None = None
    layers: int | None = None
    model_dtype: str = "auto"
    kernel_backend: str | None = None
    w_hit: float = 0.8
    w_load: float = 0.2
    # Issue 15 (port onto the split configs): the step model's calibration file (None: the
    # GPU family's shipped defaults), and the vLLM-bench client's concurrency cap / figures.
    calibration: str | None = None
    max_concurrency: int | None = None
    vllm_figures: bool = False

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.block_size & (self.block_size - 1):
            raise ValueError(f"--block-size must be a power of two, got {self.block_size}")
        if self.swap_space_gib < 0:
            raise ValueError("--swap-space-gib must not be negative")
        if self.pods < 1:
            raise ValueError(f"--pods must be at least 1, got {self.pods}")
        for router in self.routers:
            RouterConfig(router)  # validates the name
        if self.mode not in ("simulated", "real"):
            raise ValueError(f"--mode must be simulated or real, got '{self.mode}'")
        if self.mode == "real" and self.pods > 1:
            raise ValueError("--pods needs simulated mode; real mode runs one engine")


@dataclass(frozen=True)
class EngineSizing:
    model: ModelSpec
    kv_format: KVFormat
    kv_budget_bytes: float
    slot_bytes: float
    capacity_slots: int
    max_model_len: int


def size_engine(config: BenchConfig, optimization: Optimization) -> EngineSizing:
    """The KV budget per GPU from the capacity plan, in slots of the optimization's format.

    Linear-attention state (hybrids) is set aside for max_num_seqs sequences up front.
    """
    model = load_model(config.model)
    kv_format = parse_kv_format(optimization.kv_dtype or config.kv_dtype, model)
    max_model_len = config.max_model_len or model.max_position_embeddings or 4096
    inputs = PlanInputs(model=model, gpu=load_gpu(config.gpu), tp=config.tp, kv_format=kv_format,
                        context=max_model_len, block_size=config.block_size,
                        gpu_memory_utilization=config.gpu_memory_utilization,
                        kv_cache_bytes=None if config.kv_cache_gib is None else config.kv_cache_gib * GIB,
                        weight_dtype=config.weight_dtype)
    capacity = plan(inputs, suggest=False)
    budget = capacity.kv_budget_bytes - model.state_bytes_per_seq(config.tp) * config.scheduler.max_num_seqs
    slot_bytes = model.kv_bytes_per_token(kv_format, config.tp)
    blocks = math.floor(budget / (slot_bytes * config.block_size)) if budget > 0 else 0
    if blocks < 1:
        raise ValueError(f"no room for a KV cache: {model.name} on {config.tp} x {config.gpu} leaves "
                         f"{budget / GIB:.2f} GiB per GPU; use more GPUs (--tp), FP8 KV or --kv-cache-gib")
    return EngineSizing(model, kv_format, budget, slot_bytes, blocks * config.block_size, max_model_len)


def make_tiers(config: BenchConfig, optimization: Optimization, sizing: EngineSizing) -> TieredCache | None:
    """CPU (and disk) tiers sized in blocks of this optimization's format; bandwidths from
    the GPU profile (host link, NVMe) unless overridden."""
    if not optimization.offload:
        return None
    gpu = load_gpu(config.gpu)
    block_bytes = sizing.slot_bytes * config.block_size
    sizes = {"cpu": (config.cpu_cache_gb, config.host_link_gbps or gpu.host_link_gbps),
             "disk": (config.disk_cache_gb, config.nvme_gbps or gpu.nvme_gbps)}
    tiers = []
    for name in optimization.offload:
        gigabytes, bandwidth = sizes[name]
        if gigabytes < 0 or bandwidth <= 0:
            raise ValueError(f"--{name}-cache-gb must not be negative and its bandwidth must be positive")
        tiers.append(Tier(name, int(gigabytes * 1e9 // block_bytes), bandwidth * 1e9, config.tier_policy))
    return TieredCache(tiers, block_bytes)


def build_engine(config: BenchConfig, optimization: Optimization) -> tuple[Engine, EngineSizing]:
    sizing = size_engine(config, optimization)
    budget = None
    if optimization.policy:
        if config.kv_budget is None or config.kv_budget <= config.block_size:
            raise ValueError(f"'{optimization.name}' needs --kv-budget larger than one block ({config.block_size} tokens)")
        budget = config.kv_budget
    roofline = Roofline(sizing.model, load_gpu(config.gpu), config.tp, sizing.kv_format, config.weight_dtype)
    # StreamingLLM keeps its attention sinks: the first block is never released.
    allocator = make_allocator(optimization.allocator, sizing.capacity_slots, config.block_size,
                               sizing.max_model_len, prefix_caching=optimization.prefix_caching,
                               token_budget=budget, sink_blocks=1 if optimization.policy == "streaming" else 0,
                               tiers=make_tiers(config, optimization, sizing),
                               recompute_s_per_token=roofline.linear_flops(1) / roofline.peak_flops)
    swap_slots = int(config.swap_space_gib * GIB / sizing.slot_bytes)
    scheduler = replace(config.scheduler, swap_slots=swap_slots)
    # Issue 15: the calibrated step model replaces the bare roofline runner.
    runner = StepModelRunner(roofline, step_model_params(config.calibration, roofline.gpu.family))
    return Engine(allocator, runner, scheduler, sizing.max_model_len), sizing


def run_matrix(config: BenchConfig, requests: list[Request], optimizations: list[str],
               progress: Callable[[str, int], None] | None = None) -> list[dict[str, Any]]:
    """Run each optimization on the same requests; one result record per optimization.

    progress(optimization, n) is called as requests end; records come back in the order
    given, the first one marked as the baseline.
    """
    parsed = [parse_optimization(name) for name in optimizations]
    # Deterministic: the same inputs give the same run id and the same results file, so
    # nothing wall-clock goes into a simulated record.
    identity = json.dumps([asdict(config), optimizations, len(requests)], sort_keys=True, default=str)
    run_id = hashlib.sha256(identity.encode()).hexdigest()[:12]
    bounds: dict[str, float | None] = {}
    hashes: dict[int, list[int]] = {}
    if any(o.prefix_caching for o in parsed):
        hashes = hashes_by_request(requests, config.block_size)
        hits, queried = infinite_cache_hit_tokens(requests, config.block_size, hashes)
        bounds = {"prefix_hit_rate_upper_bound": hits / queried if queried else 0.0,
                  "trace_block_hit_bound": trace_block_bound(requests)}
    loaded = None
    if config.mode == "real":
        from kvplan.real.factory import build_real_engine, load_for_bench

        loaded = load_for_bench(config)
    records = []
    variants = [(o, r) for o in parsed for r in (config.routers or ("round-robin",))] if config.pods > 1 \
        else [(o, None) for o in parsed]
    for index, (optimization, router) in enumerate(variants):
        name = f"{optimization.name}@{router}" if router else optimization.name
        report = (lambda n, name=name: progress(name, n)) if progress else None
        engines = []
        for _ in range(config.pods):
            engine, sizing = (build_real_engine(config, optimization, loaded) if loaded
                              else build_engine(config, optimization))
            if optimization.prefix_caching:
                engine.allocator.known_hashes = hashes  # type: ignore[attr-defined]
            engines.append(engine)
        if router:
            metrics = run_cluster(engines, requests, RouterConfig(router, config.w_hit, config.w_load),
                                  config.block_size, report)
            timeseries: dict[str, list[float]] = {}
        elif config.mode == "simulated" and (config.max_concurrency is not None or config.vllm_figures):
            # Issue 15: the simulated `vllm bench serve` client (closed loop under a cap).
            engines[0].progress = report
            client = run_client(engines[0], requests, config.max_concurrency,
                                float(config.workload.get("rate", math.inf)))
            result = engines[0].result()
            metrics, timeseries = dict(result.metrics), result.timeseries
            metrics.update({f"vllm_{key}": value for key, value in serving_metrics(client).items()})
        else:
            result = engines[0].run(requests, report)
            metrics, timeseries = dict(result.metrics), result.timeseries
        if loaded:
            metrics["kv_bytes_allocated"] = engines[0].runner.kv_bytes  # type: ignore[attr-defined]
            metrics["device"] = loaded.device
            storage = getattr(getattr(engines[0].allocator, "tiers", None), "storage", None)
            for direction, moved in (storage.stats.items() if storage is not None else ()):
                metrics[f"measured_{direction.replace('->', '_to_')}_gbps"] = moved.gb_per_s
                metrics[f"measured_{direction.replace('->', '_to_')}_bytes"] = moved.bytes
        if not loaded:  # issue 15: which step-model factors timed this run
            metrics["step_model"] = engines[0].runner.params.source  # type: ignore[attr-defined]
        metrics["kv_budget_bytes_per_gpu"] = sizing.kv_budget_bytes
        metrics["kv_bytes_per_token_per_gpu"] = sizing.slot_bytes
        if optimization.prefix_caching:
            metrics.update(bounds)
        params = {**{k: v for k, v in asdict(config).items() if k != "scheduler"},
                  **{f"scheduler_{k}": v for k, v in asdict(config.scheduler).items()},
                  "allocator": optimization.allocator, "kv_format": sizing.kv_format.name,
                  "max_model_len": sizing.max_model_len, "num_requests": len(requests), "router": router}
        records.append(make_record("bench", run_id, config.mode, name, params, metrics, timeseries,
                                   baseline=index == 0))
    return records


def variant_names(config: BenchConfig, optimizations: list[str]) -> list[str]:
    """The record names run_matrix will produce, in order (for progress bars)."""
    names = [parse_optimization(n).name for n in optimizations]
    if config.pods > 1:
        return [f"{n}@{r}" for n in names for r in (config.routers or ("round-robin",))]
    return names
