"""Real mode for `kvplan bench`: one transformers model for every optimization of a run, a
torch block pool per optimization, simulated mode's scheduler and block manager, wall-clock
step times."""

from __future__ import annotations

import math
import shutil
import tempfile
import time
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kvplan import GIB, cdiv
from kvplan.core.engine import Engine, Runner
from kvplan.core.engine_factory import (
    EngineSizing,
    Optimization,
    RealConfig,
    SizingConfig,
    TierConfig,
    eviction_policy,
    make_tiers,
)
from kvplan.core.kv import make_allocator
from kvplan.core.kv.base import Allocator
from kvplan.core.kv.paged import PagedAllocator
from kvplan.core.policies import PolicySpec
from kvplan.core.scheduler import SchedulerConfig
from kvplan.engines.pool_sizing import max_model_len_for, whole_blocks
from kvplan.real.eviction import RealEviction, check_real_policy
from kvplan.real.kivi_pool import KiviServing, check_kivi_serving
from kvplan.real.loaded import CPU_KV_GIB, kv_pool_bytes, load_model_for_bench
from kvplan.real.run_metrics import engine_metrics
from kvplan.real.runner import RealRunner
from kvplan.real.streaming import SinkCopies
from kvplan.spec import KVFormat, parse_kv_format
from kvplan.spec.setting_error import SettingError

CALIBRATION_TOKENS = 64  # greedy tokens whose K/V calibrate per-tensor scales
ENTROPY_PROBE_TOKENS = (
    200  # greedy tokens whose attention entropy splits entropy-budget (the quality table's)
)
CPU_FLOPS = 50e9  # a rough CPU rate for the reload-or-recompute choice (copies win here anyway)


@dataclass(frozen=True)
class EngineParts:
    """An engine but its tensors and runner."""

    sizing: EngineSizing
    policy: PolicySpec | None
    allocator: Allocator
    scheduler: SchedulerConfig


@dataclass
class RealEngineFactory:
    """Engines over one loaded transformers model: a torch block pool per engine in the
    optimization's KV format, measured step times. The model loads once, on construction."""

    sizing: SizingConfig
    real: RealConfig
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    tiers: TierConfig = field(default_factory=TierConfig)
    seed: int = 0
    kv_budget: int | None = None  # tokens per KV head an eviction policy keeps (real/eviction.py)
    # a layer split (entropy-budget) of layers x kv_budget; None: probed on the model's greedy text
    layer_budgets: tuple[int, ...] | None = None
    mode: str = "real"
    # seconds the pre-run estimate (bench/real_cost.py) gives each optimization, recorded
    # beside the measured wall_s
    estimated_wall_s: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.loaded = load_model_for_bench(self.sizing.model, self.real, self.seed)
        self._greedy: dict[int, list[int]] = {}
        self._scales: dict[str, Any] = {}  # per-tensor format: its per-layer (K, V) scales
        self._started: dict[
            int, tuple[str, float]
        ] = {}  # id(engine): its optimization, build start

    def _kv_format(self, optimization: Optimization) -> KVFormat:
        """The optimization's KV format, else the run's, for the loaded model."""
        return parse_kv_format(optimization.kv_dtype or self.sizing.kv_dtype, self.loaded.spec)

    def check(self, optimization: Optimization) -> None:
        """What real mode refuses, said before any work (the warm-up, the progress bars); the
        pool size itself depends on the device's free memory and is checked on building."""
        self._policy(optimization)
        kv_format = self._kv_format(optimization)
        if kv_format.scale == "kivi":
            check_kivi_serving(
                self.sizing.block_size,
                optimization.allocator,
                optimization.prefix_caching,
                optimization.offload,
                optimization.policy,
                kv_format.name,
            )

    def _policy(self, optimization: Optimization) -> PolicySpec | None:
        policy = eviction_policy(
            optimization, self.kv_budget, self.sizing.block_size, self.entropy_split
        )
        if policy is None:
            return None
        check_real_policy(policy)
        if policy.reindexes_positions:
            from kvplan.quality.layer_cache import rope_inv_freq

            rope_inv_freq(self.loaded.model)  # refuses RoPE variants the re-rotation cannot compose
        return policy

    def build(self, optimization: Optimization) -> tuple[Engine, EngineSizing]:
        from kvplan.real.tier_storage import TensorTierStorage

        started = time.perf_counter()
        parts = self._parts(optimization)
        sizing, allocator, block_size = parts.sizing, parts.allocator, self.sizing.block_size
        pool = self._allocate_pool(sizing.kv_format, sizing.capacity_slots // block_size)
        kivi = (
            KiviServing(pool, block_size, sizing.kv_format.name)
            if sizing.kv_format.scale == "kivi"
            else None
        )
        loaded = self.loaded
        runner = RealRunner(
            loaded.model,
            pool,
            block_size,
            loaded.vocab_size,
            loaded.device,
            backend=self.real.kernel_backend,
            seed=self.seed,
            eviction=self._eviction(parts.policy, allocator),
            kivi=kivi,
        )
        if allocator.tiers is not None:  # real bytes: pinned host memory and files, timed
            given = self.tiers.disk_dir
            disk = Path(given) if given else Path(tempfile.mkdtemp(prefix="kvplan-offload-"))
            storage = TensorTierStorage(pool, disk, on_restore=runner.forget_block)
            if not given:  # a folder of kvplan's own goes with the engine (or at exit)
                weakref.finalize(storage, shutil.rmtree, disk, ignore_errors=True)
            allocator.tiers.storage = storage
        engine = Engine(allocator, runner, parts.scheduler, sizing.max_model_len)
        self._started[id(engine)] = (optimization.name, started)
        return engine, sizing

    def scheduling_engine(
        self, optimization: Optimization, runner: Runner, pool: tuple[float, float | None]
    ) -> tuple[Engine, EngineSizing]:
        """The optimization's scheduler and block manager around another runner, with a pool
        of `pool` (bytes, the utilization that sized them) and no tensors: the cost estimate
        replays a run's steps on it."""
        parts = self._parts(optimization, pool)
        engine = Engine(parts.allocator, runner, parts.scheduler, parts.sizing.max_model_len)
        return engine, parts.sizing

    def prepare(self, optimization: Optimization) -> None:
        """Learn now what building the optimization's engine learns from the model first (a
        per-tensor format's scales), kept for its build: the cost estimate's warm-up pays it."""
        kv_format = self._kv_format(optimization)
        if kv_format.scale == "tensor":
            self._tensor_scales(kv_format.name)

    def _parts(
        self, optimization: Optimization, pool: tuple[float, float | None] | None = None
    ) -> EngineParts:
        """The engine but its tensors: the pool's sizing (`pool`: bytes and the utilization
        that sized them; None: sized now), the policy, the block manager and the scheduler."""
        config, loaded = self.sizing, self.loaded
        spec = loaded.spec
        self.check(optimization)
        policy = self._policy(optimization)
        kv_format = self._kv_format(optimization)
        max_model_len = max_model_len_for(spec, config.max_model_len)
        slot_bytes = spec.kv_bytes_per_token(kv_format)
        pool_bytes, utilization = pool or kv_pool_bytes(config, loaded)
        blocks = whole_blocks(pool_bytes, slot_bytes, config.block_size)
        if config.num_gpu_blocks_override is not None:
            blocks = config.num_gpu_blocks_override
        if blocks * config.block_size < max_model_len:
            self._refuse_small_pool(blocks, pool_bytes, slot_bytes, max_model_len, utilization)
        sizing = EngineSizing(
            spec,
            kv_format,
            pool_bytes,
            slot_bytes,
            blocks * config.block_size,
            max_model_len,
            gpu_memory_utilization=utilization,
        )
        tiers = make_tiers(config, self.tiers, optimization, sizing)
        recompute_s = 0.0
        if tiers is not None and loaded.device == "cpu":
            recompute_s = 2.0 * sum(p.numel() for p in loaded.model.parameters()) / CPU_FLOPS
        allocator = make_allocator(
            optimization.allocator,
            blocks * config.block_size,
            config.block_size,
            max_model_len,
            prefix_caching=optimization.prefix_caching,
            tiers=tiers,
            recompute_s_per_token=recompute_s,
            policy=policy,
        )
        # Real mode recomputes (swapping needs real host copies); unset limits are kvplan's own,
        # not the --gpu profile's vLLM defaults: a real run serves on this machine.
        plain = SchedulerConfig()
        scheduler = replace(
            self.scheduler.resolved(plain.max_num_seqs, plain.max_num_batched_tokens),
            preemption="recompute",
            swap_slots=0,
        )
        return EngineParts(sizing, policy, allocator, scheduler)

    def _refuse_small_pool(
        self,
        blocks: int,
        pool_bytes: float,
        slot_bytes: float,
        max_model_len: int,
        utilization: float | None,
    ) -> None:
        """One request of max_model_len must fit the pool: say what would make it fit, from
        the settings given (a larger pool than the one given, or a shorter max_model_len)."""
        block_size = self.sizing.block_size
        need_gib = cdiv(max_model_len, block_size) * block_size * slot_bytes / GIB
        digits = 2 - math.floor(math.log10(need_gib))  # three significant, rounded up: enough
        need = f"{math.ceil(need_gib * 10**digits) / 10**digits:g}"
        if utilization is not None:  # sized from the card's free memory
            grow = "raise {gpu_memory_utilization} (" + f"{utilization:g} now) or pass "
            grow += "{kv_cache_gib} " + need
        elif self.sizing.kv_cache_gib is not None:
            grow = "raise {kv_cache_gib} from " + f"{self.sizing.kv_cache_gib:g} to {need}"
        else:
            grow = "pass {kv_cache_gib} " + need + f" (default {CPU_KV_GIB:g})"
        fits = blocks * block_size
        shorten = " or lower {max_model_len} to " + f"{fits:,}" if fits >= 2 else ""
        raise SettingError(
            "the KV pool ({tokens} tokens in {gib:.4f} GiB) is too small for one request of "
            "{max_model_len} {limit} on {model}; " + grow + shorten,
            tokens=f"{fits:,}",
            gib=pool_bytes / GIB,
            limit=max_model_len,
            model=self.loaded.spec.name,
        )

    def _allocate_pool(self, kv_format: KVFormat, blocks: int) -> list[Any]:
        """One cache per layer of `blocks` blocks in the format, on the model's device and dtype:
        KIVI's quantized blocks (the residual lives beside them: real/kivi_pool.py) or paged
        blocks, whose per-tensor scales (fp8 / intB-tensor) are calibrated, not vLLM's default
        1.0."""
        from kvplan.kernels.quant import allocate_kv_cache

        spec, device = self.loaded.spec, self.loaded.device
        group = spec.token_groups[0]
        if kv_format.scale == "kivi":
            from kvplan.kernels.kivi import allocate_kivi_cache

            return [
                allocate_kivi_cache(
                    kv_format.bits, blocks, group.num_kv_heads, group.head_dim, device=device
                )
                for _ in range(spec.num_layers)
            ]
        store_dtype = next(p.dtype for p in self.loaded.model.parameters())
        pool = [
            allocate_kv_cache(
                kv_format.name,
                blocks,
                self.sizing.block_size,
                group.num_kv_heads,
                group.head_dim,
                dtype=store_dtype,
                device=device,
            )
            for _ in range(spec.num_layers)
        ]
        if kv_format.scale == "tensor":
            for cache, (k_scale, v_scale) in zip(pool, self._tensor_scales(kv_format.name)):
                cache.k_scale.fill_(k_scale)
                cache.v_scale.fill_(v_scale)
        return pool

    def _eviction(self, policy: PolicySpec | None, allocator: Allocator) -> RealEviction | None:
        """The eviction policy working on the pool's tensors, which follow the slots the block
        manager's memory model (`allocator.budget`) holds."""
        if policy is None:
            return None
        assert isinstance(allocator, PagedAllocator)  # make_allocator's only allocator for a policy
        from kvplan.quality.layer_cache import rope_inv_freq

        sinks = None
        if policy.policy.sinks:
            sinks = SinkCopies(
                policy.budget,
                self.sizing.block_size,
                rope_inv_freq(self.loaded.model) if policy.reindexes_positions else None,
            )
        return RealEviction(policy, allocator.budget, self.sizing.block_size, sinks=sinks)

    def greedy_text(self, tokens: int) -> list[int]:
        """The model's own greedy text from BOS (`tokens` generated): what real mode calibrates
        on, never the workload's prompts."""
        import torch

        if tokens not in self._greedy:
            model = self.loaded.model
            bos = getattr(model.config, "bos_token_id", None) or 1
            previous = (
                model.config._attn_implementation
            )  # kvplan's paged attention needs a step context
            model.set_attn_implementation("eager")
            try:
                with torch.inference_mode():
                    self._greedy[tokens] = model.generate(
                        torch.tensor([[bos]], device=model.device),
                        max_new_tokens=tokens,
                        min_new_tokens=tokens,
                        do_sample=False,
                    )[0].tolist()
            finally:
                model.set_attn_implementation(previous)
        return self._greedy[tokens]

    def _tensor_scales(self, fmt: str) -> list[tuple[float, float]]:
        """Per layer (K, V) scales: absmax / the format's largest value over K/V the model
        writes for its own greedy text from BOS (as vLLM's calculated scales take the first
        batch's)."""
        from kvplan.quality.evaluate import calibrate

        if fmt not in self._scales:
            self._scales[fmt] = calibrate(
                self.loaded.model, self.greedy_text(CALIBRATION_TOKENS), PolicySpec("full"), fmt
            )[1]
        return self._scales[fmt]

    def entropy_split(self) -> tuple[int, ...]:
        """entropy-budget's per-layer budgets: layers x kv_budget split by each layer's mean
        attention entropy over the model's own greedy text from BOS (the quality evaluator's
        calibrate), unless given (`layer_budgets`)."""
        from kvplan.quality.evaluate import calibrate

        layers = self.loaded.spec.num_layers
        if self.layer_budgets is None:
            budgets, _ = calibrate(
                self.loaded.model,
                self.greedy_text(ENTROPY_PROBE_TOKENS),
                PolicySpec("entropy-budget", self.kv_budget),
                None,
            )
            self.layer_budgets = tuple(budgets or ())
        if len(self.layer_budgets) != layers:
            raise ValueError(
                f"entropy-budget needs one budget per layer ({layers}), got "
                f"{len(self.layer_budgets)}"
            )
        return self.layer_budgets

    def run_metrics(self, engine: Engine) -> dict[str, Any]:
        """The engine's figures (real/run_metrics.py), and the wall-clock seconds from its
        build to now beside the seconds the pre-run estimate gave it."""
        metrics = engine_metrics(engine, self.loaded)
        name, started = self._started.pop(id(engine), (None, None))
        if started is not None:
            metrics["wall_s"] = time.perf_counter() - started
            if name in self.estimated_wall_s:
                metrics["estimated_wall_s"] = self.estimated_wall_s[name]
        return metrics
