"""What an engine factory needs to set up one engine, shared by simulated (kvplan.sim) and
real (kvplan.real) mode: the engine sizing settings, the offload-tier settings, real-mode
settings, one parsed optimization, the resulting sizing, the tier construction, the
eviction policy an optimization runs, and the factory protocol the bench matrix calls.
The pool's own arithmetic (max_model_len default, whole blocks) is the capacity plan's
(kvplan.sizing.capacity), so the estimator and both modes size it alike. Pure data; no torch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from kvplan import GIB
from kvplan.core.tiers.cache import TIER_POLICIES
from kvplan.engines import sglang_defaults
from kvplan.engines.engine_releases import (
    DEFAULT_ENGINE_NAME,
    engine_generation,
    parse_version,
)
from kvplan.engines.pool_sizing import GPU_BLOCK_SIZE, max_model_len_for
from kvplan.engines.scheduling_rules import SchedulingRules
from kvplan.engines.serving_engine import SERVING_ENGINES, ServingEngine, SGLangEngine
from kvplan.spec import GpuSpec, KVFormat, ModelSpec
from kvplan.spec.resolve import load_gpu, load_model
from kvplan.spec.setting_error import SettingError

if TYPE_CHECKING:  # the CLI reads these settings' defaults, so this module loads no engine
    from kvplan.core.engine import Engine
    from kvplan.core.policies import PolicySpec
    from kvplan.core.scheduler import SchedulerConfig
    from kvplan.core.tiers import TieredCache


class DoesNotFit(ValueError):
    """The engine cannot be built in this memory: the weights leave no room for a KV cache.
    A verdict on a deployment (`kvplan plan` lists the candidate as "does not fit"), where any
    other ValueError while sizing or running it is a setting the user must change (bench words
    both as one error line)."""


@dataclass(frozen=True)
class SizingConfig:
    """Which model on which GPUs, and how its KV pool is sized."""

    model: str = "llama-3.1-8b"
    gpu: str = "l4"  # `kvplan bench` and sweeps read their defaults here
    tp: int = 1
    kv_dtype: str = "auto"
    block_size: int = GPU_BLOCK_SIZE
    gpu_memory_utilization: float | None = None  # the engine's own default if None
    kv_cache_gib: float | None = None
    max_model_len: int | None = None
    weight_dtype: str | None = None
    # CPU swap area per GPU for swap preemption, vLLM's default; a run that recomputes sets
    # none aside (BenchConfig records 0)
    swap_space_gib: float = 4.0
    # The serving engine and release being modeled ("vllm" or "sglang"; no version: the newest
    # release's behaviour): whose startup profile sizes the pool (engines/memory_model.py, with
    # the scheduler's own batch limits), whose batch limits a scheduler that sets none gets,
    # and whose step-model overheads time the steps.
    engine: str | None = DEFAULT_ENGINE_NAME
    engine_version: str | None = None
    # vLLM's --num-gpu-blocks-override: the pool's blocks whatever memory would give (vLLM's
    # null block among them), as a test or a reproduction of a known server sets it
    num_gpu_blocks_override: int | None = None

    @property
    def generation(self) -> str:
        return engine_generation(self.engine, self.engine_version)

    @property
    def serving_engine(self) -> ServingEngine:
        return SERVING_ENGINES[self.generation]

    # The model and GPU the names resolve to, once per config: every engine built from it,
    # its sizing and its scheduler's limits read these, not the names.
    @cached_property
    def model_spec(self) -> ModelSpec:
        return load_model(self.model)

    @cached_property
    def gpu_spec(self) -> GpuSpec:
        return load_gpu(self.gpu)

    def __post_init__(self) -> None:
        self.generation  # validates the engine name
        if self.block_size < 1 or self.block_size & (self.block_size - 1):
            raise SettingError(
                "{block_size} must be a power of two, got {got}", got=self.block_size
            )
        if self.swap_space_gib < 0:
            raise SettingError("{swap_space_gib} must not be negative")


def engine_rules(config: SizingConfig, scheduler: SchedulerConfig) -> SchedulingRules:
    """The rules a simulated engine schedules and pages by: the scheduler's own if set, else
    its engine release's (kvplan.engines.scheduling_rules)."""
    return scheduler.rules or config.serving_engine.scheduling_rules(
        parse_version(config.engine_version)
    )


def engine_scheduler(
    config: SizingConfig, scheduler: SchedulerConfig, pool_slots: int | None = None
) -> SchedulerConfig:
    """The scheduler with the serving engine's own batch limits where it sets none (vLLM's
    defaults for the release, GPU and max_model_len; SGLang's chunked prefill size and, given
    the pool, its max_running_requests: kvplan.engines.serving_engine, engines.sglang_defaults).
    SGLang's steps are scheduled as vLLM's, prefill chunks and decodes in one step: a named
    simplification (SGLang runs a prefill batch before the decodes unless --enable-mixed-chunk;
    on the shipped SGLang runs the mixed schedule predicted as well or better)."""
    sglang = isinstance(config.serving_engine, SGLangEngine)
    version = parse_version(config.engine_version)
    if scheduler.rules is None:
        scheduler = replace(scheduler, rules=engine_rules(config, scheduler))
    if (
        scheduler.max_num_seqs is not None
        and scheduler.max_num_batched_tokens is not None
        and not sglang
    ):
        return scheduler
    gpu = config.gpu_spec
    max_model_len = max_model_len_for(config.model_spec, config.max_model_len)
    defaults = config.serving_engine.batch_defaults(
        version, gpu.usable_memory_bytes / GIB, gpu.name, max_model_len
    )
    seqs = defaults.max_num_seqs
    if sglang and pool_slots is not None:
        seqs = sglang_defaults.max_running_requests(version, pool_slots, max_model_len)
    return scheduler.resolved(seqs, defaults.max_num_batched_tokens)


@dataclass(frozen=True)
class TierConfig:
    """The offload tiers of `offload-cpu` / `offload-disk`."""

    cpu_cache_gb: float = 64.0
    disk_cache_gb: float = 512.0
    tier_policy: str = TIER_POLICIES[0]
    host_link_gbps: float | None = None  # default: the GPU profile's
    nvme_gbps: float | None = None
    disk_dir: str | None = None  # real mode's disk tier (default: a temporary folder)


@dataclass(frozen=True)
class RealConfig:
    """Real mode only: where the transformers model comes from and where it runs."""

    device: str = "auto"
    model_path: str | None = None
    layers: int | None = None
    model_dtype: str = "auto"
    kernel_backend: str | None = None


@dataclass(frozen=True)
class Optimization:
    """One composed optimization, e.g. `paged+fp8`: an allocator plus a KV format."""

    name: str
    allocator: str = "paged"
    kv_dtype: str | None = None  # None: the run's --kv-dtype
    prefix_caching: bool = False
    policy: str | None = None  # an eviction policy, applied in simulated mode as a token budget
    offload: tuple[str, ...] = ()  # lower tiers for prefix blocks: ("cpu",) or ("cpu", "disk")


@dataclass(frozen=True)
class EngineSizing:
    model: ModelSpec
    kv_format: KVFormat
    kv_pool_bytes: float  # the KV pool per GPU (records: kv_budget_bytes_per_gpu)
    slot_bytes: float
    capacity_slots: int
    max_model_len: int
    gpu_memory_utilization: float | None = None  # what sized the pool (None: a fixed size)


def make_tiers(
    sizing_config: SizingConfig,
    tier_config: TierConfig,
    optimization: Optimization,
    sizing: EngineSizing,
) -> TieredCache | None:
    """CPU (and disk) tiers sized in blocks of this optimization's format; bandwidths from
    the GPU profile (host link, NVMe) unless overridden."""
    from kvplan.core.tiers import Tier, TieredCache

    if not optimization.offload:
        return None
    gpu = sizing_config.gpu_spec
    block_bytes = sizing.slot_bytes * sizing_config.block_size
    sizes = {
        "cpu": (tier_config.cpu_cache_gb, tier_config.host_link_gbps or gpu.host_link_gbps),
        "disk": (tier_config.disk_cache_gb, tier_config.nvme_gbps or gpu.nvme_gbps),
    }
    tiers = []
    for name in optimization.offload:
        gigabytes, bandwidth = sizes[name]
        if gigabytes < 0 or bandwidth <= 0:
            raise ValueError(
                f"--{name}-cache-gb must not be negative and its bandwidth must be positive"
            )
        tiers.append(
            Tier(
                name, int(gigabytes * 1e9 // block_bytes), bandwidth * 1e9, tier_config.tier_policy
            )
        )
    return TieredCache(tiers, block_bytes)


def eviction_policy(
    optimization: Optimization,
    kv_budget: int | None,
    block_size: int,
    layer_budgets: Callable[[], tuple[int, ...] | None],
) -> PolicySpec | None:
    """The eviction policy the optimization runs, keeping `kv_budget` tokens in pages of one
    pool block (None: the optimization has none). `layer_budgets` gives the per-layer split
    of a policy that splits its budget across layers (entropy-budget) and is asked only for
    such a policy (real mode probes it on the model)."""
    from kvplan.core.policies import PolicySpec
    from kvplan.core.policies.registry import lookup

    if not optimization.policy:
        return None
    if kv_budget is None or kv_budget <= block_size:
        raise SettingError(
            "'{name}' needs {kv_budget} larger than one block ({block} tokens)",
            name=optimization.name,
            block=block_size,
        )
    split = layer_budgets() if lookup(optimization.policy).splits_layers else None
    return PolicySpec(optimization.policy, kv_budget, block=block_size, layer_budgets=split)


class EngineFactory(Protocol):
    """Builds one engine per optimization (and per pod); simulated and real mode provide one."""

    @property
    def mode(self) -> str:
        """simulated or real (the records' mode)."""

    def check(self, optimization: Optimization) -> None:
        """Fail on an impossible setup before anything runs."""

    def build(self, optimization: Optimization) -> tuple[Engine, EngineSizing]:
        """A fresh engine for this optimization, and how its KV pool was sized."""

    def run_metrics(self, engine: Engine) -> dict[str, Any]:
        """Metrics this mode adds to a finished run (real mode: bytes allocated, device, copies)."""
