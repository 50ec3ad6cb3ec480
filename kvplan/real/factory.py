"""Real mode for `kvplan bench`: one transformers model for every optimization of a run, a
torch block pool per optimization, simulated mode's scheduler and block manager, wall-clock
step times."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvplan.core.engine import Engine
from kvplan.core.engine_factory import (
    GIB,
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
from kvplan.plan.engine_releases import default_utilization, parse_version
from kvplan.plan.pool_sizing import max_model_len_for, whole_blocks
from kvplan.real.eviction import RealEviction, check_real_policy
from kvplan.real.kivi_pool import KiviServing, check_kivi_serving
from kvplan.real.model import load_causal_lm, resolve_device
from kvplan.real.runner import RealRunner
from kvplan.real.streaming import SinkCopies
from kvplan.spec import KVFormat, ModelSpec, parse_kv_format
from kvplan.spec.hf_config import model_spec_from_config
from kvplan.spec.setting_error import SettingError

if TYPE_CHECKING:
    import torch

CPU_KV_GIB = 0.25  # default KV pool on CPU; on CUDA: --gpu-memory-utilization (cuda_kv_pool_bytes)
CALIBRATION_TOKENS = 64  # greedy tokens whose K/V calibrate per-tensor scales
ENTROPY_PROBE_TOKENS = (
    200  # greedy tokens whose attention entropy splits entropy-budget (the quality table's)
)
CPU_FLOPS = 50e9  # a rough CPU rate for the reload-or-recompute choice (copies win here anyway)


@dataclass
class LoadedModel:
    model: torch.nn.Module  # a transformers causal LM
    spec: ModelSpec
    device: str
    vocab_size: int


def load_model_for_bench(model: str, real: RealConfig, seed: int) -> LoadedModel:
    device = resolve_device(real.device)
    dtype = (
        real.model_dtype if real.model_dtype != "auto" else ("fp32" if device == "cpu" else "bf16")
    )
    lm, raw = load_causal_lm(model, real.model_path, real.layers, dtype, device, seed)
    label = Path(real.model_path).name if real.model_path else model
    if label == "hf" and real.model_path:
        label = Path(real.model_path).parent.name
    spec = model_spec_from_config(raw, label, real.model_path or model)
    check_real_spec(spec)
    return LoadedModel(lm, spec, device, int(raw.get("vocab_size") or spec.vocab_size))


def check_real_spec(spec: ModelSpec) -> None:
    """Refuse, naming the feature, a model whose KV real mode's one pool shape cannot hold."""
    if any(g.kind not in ("full", "sliding") for g in spec.groups):
        raise ValueError(
            f"real mode supports MHA/GQA/MQA attention models; {spec.name} is {spec.kv_kind}"
        )
    shapes = sorted({(g.num_kv_heads, g.head_dim) for g in spec.token_groups})
    if len(shapes) > 1:
        raise ValueError(
            f"real mode keeps one KV shape for every layer, but {spec.name}'s layers differ "
            f"(KV heads x head_dim: {', '.join(f'{h} x {d}' for h, d in shapes)}; e.g. Gemma-4's "
            "global_head_dim): run it in simulated mode"
        )


def kv_pool_bytes(config: SizingConfig, loaded: LoadedModel) -> tuple[float, float | None]:
    """The real KV pool's bytes and the utilization that sized it (None: fixed or CPU's)."""
    if config.kv_cache_gib is not None:
        return config.kv_cache_gib * GIB, None
    if loaded.device == "cpu":
        if config.gpu_memory_utilization is not None:
            raise SettingError(
                "{gpu_memory_utilization} sizes a CUDA pool; on CPU pass {kv_cache_gib} "
                "(default {default:g} GiB)",
                default=CPU_KV_GIB,
            )
        return CPU_KV_GIB * GIB, None
    import torch

    free, total = torch.cuda.mem_get_info()
    utilization = config.gpu_memory_utilization or default_utilization(
        config.generation, parse_version(config.engine_version), total / GIB
    )
    return cuda_kv_pool_bytes(free, total, utilization), utilization


def cuda_kv_pool_bytes(free: float, total: float, utilization: float) -> float:
    """vLLM's rule, simplified: the engine may use `utilization` of the card, and what is in
    use once the model is loaded (weights, the CUDA context, other processes) comes off it.
    vLLM also profiles a forward pass for activation memory; real mode does not (named in
    the README), so its pool is somewhat larger than vLLM's at the same setting."""
    in_use = total - free
    pool_bytes = utilization * total - in_use
    if pool_bytes <= 0:
        raise SettingError(
            "{gpu_memory_utilization} {utilization:g} leaves no KV memory: {in_use:.2f} GiB of "
            "{total:.2f} GiB is in use after loading the model; raise it or pass {kv_cache_gib}",
            utilization=utilization,
            in_use=in_use / GIB,
            total=total / GIB,
        )
    return pool_bytes


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

    def __post_init__(self) -> None:
        self.loaded = load_model_for_bench(self.sizing.model, self.real, self.seed)
        self._greedy: dict[int, list[int]] = {}

    def check(self, optimization: Optimization) -> None:
        """What real mode refuses, said before any work (the warm-up, the progress bars); the
        pool size itself depends on the device's free memory and is checked on building."""
        self._policy(optimization)
        kv_format = parse_kv_format(optimization.kv_dtype or self.sizing.kv_dtype, self.loaded.spec)
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

        config, loaded = self.sizing, self.loaded
        spec = loaded.spec
        self.check(optimization)
        policy = self._policy(optimization)
        kv_format = parse_kv_format(optimization.kv_dtype or config.kv_dtype, spec)
        max_model_len = max_model_len_for(spec, config.max_model_len)
        slot_bytes = spec.kv_bytes_per_token(kv_format)
        pool_bytes, utilization = kv_pool_bytes(config, loaded)
        blocks = whole_blocks(pool_bytes, slot_bytes, config.block_size)
        if blocks * config.block_size < max_model_len:
            raise ValueError(
                f"the KV pool ({blocks * config.block_size:,} tokens in {pool_bytes / GIB:.4f} GiB) is "
                f"too small for one request of max_model_len {max_model_len} on {spec.name}; "
                "raise --kv-cache-gib"
            )
        pool = self._allocate_pool(kv_format, blocks)
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
        kivi = (
            KiviServing(pool, config.block_size, kv_format.name)
            if kv_format.scale == "kivi"
            else None
        )
        runner = RealRunner(
            loaded.model,
            pool,
            config.block_size,
            loaded.vocab_size,
            loaded.device,
            backend=self.real.kernel_backend,
            seed=self.seed,
            eviction=self._eviction(policy, allocator),
            kivi=kivi,
        )
        if tiers is not None:  # real bytes: pinned host memory and files, timed
            disk = (
                Path(self.tiers.disk_dir)
                if self.tiers.disk_dir
                else Path(tempfile.mkdtemp(prefix="kvplan-offload-"))
            )
            tiers.storage = TensorTierStorage(pool, disk, on_restore=runner.forget_block)
        # Real mode recomputes (swapping needs real host copies); unset limits are kvplan's own,
        # not the --gpu profile's vLLM defaults: a real run serves on this machine.
        plain = SchedulerConfig()
        scheduler = replace(
            self.scheduler.resolved(plain.max_num_seqs, plain.max_num_batched_tokens),
            preemption="recompute",
            swap_slots=0,
        )
        return Engine(allocator, runner, scheduler, max_model_len), sizing

    def _allocate_pool(self, kv_format: KVFormat, blocks: int) -> list[Any]:
        """One cache per layer of `blocks` blocks in the format, on the model's device and dtype:
        KIVI's quantized blocks (the residual lives beside them: real/kivi_pool.py) or paged
        blocks, whose per-tensor scales (fp8 / intB-tensor) are calibrated, not vLLM's default 1.0."""
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

        return calibrate(
            self.loaded.model, self.greedy_text(CALIBRATION_TOKENS), PolicySpec("full"), fmt
        )[1]

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
                f"entropy-budget needs one budget per layer ({layers}), got {len(self.layer_budgets)}"
            )
        return self.layer_budgets

    def run_metrics(self, engine: Engine) -> dict[str, Any]:
        """Bytes the pool holds, the device, and the measured tier copies (bandwidth, bytes)."""
        metrics: dict[str, Any] = {
            "kv_bytes_allocated": engine.runner.kv_bytes,  # type: ignore[attr-defined]
            "device": self.loaded.device,
        }
        eviction = getattr(engine.runner, "eviction", None)
        if (
            eviction is not None
        ):  # slots moved inside the pool by evictions (holes refilled, prefill compaction)
            # in the simulator's unit, a slot of every layer and KV head (moves are per head and layer)
            spec = self.loaded.spec
            per_slot = spec.num_layers * spec.token_groups[0].num_kv_heads
            sink_copies = (
                eviction.sinks.copies * spec.token_groups[0].num_kv_heads if eviction.sinks else 0
            )
            metrics["eviction_copied_slots"] = round(
                (eviction.copied_slots + sink_copies) / per_slot
            )
            if eviction.spec.layer_budgets:
                metrics["layer_budgets"] = list(eviction.spec.layer_budgets)
            if eviction.compact_blocks:  # blocks held with holes left in place, per compacted block
                metrics["eviction_hole_blocks_ratio"] = (
                    eviction.hole_blocks / eviction.compact_blocks
                )
        kivi = getattr(engine.runner, "kivi", None)
        if (
            kivi is not None and kivi.measured
        ):  # at each sequence's last step: the pool's tensors vs the estimator
            spec, group = self.loaded.spec, self.loaded.spec.token_groups[0]
            full = next(self.loaded.model.parameters()).element_size()
            fmt = parse_kv_format(kivi.format_name, spec)
            finished = list(kivi.measured.values())
            metrics["kivi_bytes_per_seq_measured"] = sum(b for _, b in finished) / len(finished)
            metrics["kivi_bytes_per_seq_estimated"] = sum(
                spec.num_layers
                * group.num_kv_heads
                * fmt.kivi_sequence_bytes(tokens, group.head_dim, full)
                for tokens, _ in finished
            ) / len(finished)
        storage = engine.allocator.tiers.storage if engine.allocator.tiers is not None else None
        for direction, moved in storage.stats.items() if storage is not None else ():
            metrics[f"measured_{direction.replace('->', '_to_')}_gbps"] = moved.gb_per_s
            metrics[f"measured_{direction.replace('->', '_to_')}_bytes"] = moved.bytes
        return metrics
