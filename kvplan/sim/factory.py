"""Simulated engines for `kvplan bench`: the KV pool sized from the capacity plan of the
target GPU, the allocator of the optimization, and the step-time runner: the operator step
model (kvplan.sim.ops) at the engine overhead of the shipped fit, of a `kvplan calibrate`
file or given; or, asked for by name, the bare roofline at datasheet peak."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kvplan import GIB
from kvplan.core.engine import Engine
from kvplan.core.engine_factory import (
    DoesNotFit,
    EngineSizing,
    Optimization,
    SizingConfig,
    TierConfig,
    engine_scheduler,
    eviction_policy,
    make_tiers,
)
from kvplan.core.kv import make_allocator
from kvplan.core.scheduler import SchedulerConfig
from kvplan.engines.engine_releases import parse_version
from kvplan.engines.pool_sizing import max_model_len_for, whole_blocks
from kvplan.sim.calibration_file import calibration_band, read_calibration
from kvplan.sim.ops.build import operator_runner
from kvplan.sim.ops.overhead import EngineOverhead, engine_era
from kvplan.sim.ops.shipped import shipped_fit, step_kind
from kvplan.sim.ops.step import OperatorStepRunner
from kvplan.sim.runner import SimulatedRunner
from kvplan.sim.step_models import (
    CalibratedOverhead,
    DatasheetRoofline,
    GivenOverhead,
    ShippedOverhead,
    StepTiming,
    step_timing,
)
from kvplan.sizing.capacity import PlanInputs, plan
from kvplan.spec import parse_kv_format
from kvplan.spec.roofline import Roofline


def size_engine(
    config: SizingConfig, scheduler: SchedulerConfig, optimization: Optimization
) -> EngineSizing:
    """The KV pool per GPU from the capacity plan, in slots of the optimization's format.

    Linear-attention state (hybrids) is set aside for max_num_seqs sequences up front.
    """
    model = config.model_spec
    kv_format = parse_kv_format(optimization.kv_dtype or config.kv_dtype, model)
    max_model_len = max_model_len_for(model, config.max_model_len)
    scheduler = engine_scheduler(config, scheduler)
    inputs = PlanInputs(
        model=model,
        gpu=config.gpu_spec,
        tp=config.tp,
        kv_format=kv_format,
        context=max_model_len,
        block_size=config.block_size,
        gpu_memory_utilization=config.gpu_memory_utilization,
        kv_cache_bytes=None if config.kv_cache_gib is None else config.kv_cache_gib * GIB,
        weight_dtype=config.weight_dtype,
        engine=config.generation,
        engine_version=parse_version(config.engine_version),
        max_num_batched_tokens=scheduler.max_num_batched_tokens,
        max_num_seqs=scheduler.max_num_seqs,
    )
    capacity = plan(inputs, suggest=False)
    kv_pool_bytes = capacity.kv_pool_bytes - model.state_bytes_per_seq(config.tp) * (
        scheduler.max_num_seqs or 0
    )
    slot_bytes = model.kv_bytes_per_token(kv_format, config.tp)
    blocks = whole_blocks(kv_pool_bytes, slot_bytes, config.block_size)
    if config.num_gpu_blocks_override is not None:
        blocks = config.num_gpu_blocks_override
        kv_pool_bytes = blocks * config.block_size * slot_bytes
    if blocks < 1:
        raise DoesNotFit(
            f"no room for a KV cache: {model.name} on {config.tp} x {config.gpu} leaves "
            f"{kv_pool_bytes / GIB:.2f} GiB per GPU; use more GPUs (--tp), FP8 KV or --kv-cache-gib"
        )
    return EngineSizing(
        model, kv_format, kv_pool_bytes, slot_bytes, blocks * config.block_size, max_model_len
    )


@dataclass(frozen=True)
class SimulatedEngineFactory:
    """Engines with no KV tensors whose steps take the time the step model (or the roofline)
    says."""

    sizing: SizingConfig
    scheduler: SchedulerConfig = SchedulerConfig(
        max_num_seqs=None, max_num_batched_tokens=None
    )  # the engine's
    tiers: TierConfig = TierConfig()
    kv_budget: int | None = None  # tokens per layer an eviction policy keeps
    # entropy-budget's per-layer split (e.g. a real run's probe); None: every layer the budget
    layer_budgets: tuple[int, ...] | None = None
    mode: str = "simulated"
    # As kvplan.sim.step_models checks it. None or "fitted": the operator step model at the
    # shipped engine overhead of the run's engine release; "roofline": the bare roofline at
    # datasheet peak (a lower bound); any other text is a `kvplan calibrate` file (its fitted
    # overhead); an EngineOverhead: that one (fits replay runs with trial ones).
    step_model: str | EngineOverhead | None = None
    # A table `kvplan profile` measured (kvplan.sim.ops.profile_source): the operators it
    # covers are timed from it before any other source.
    perf_table: str | None = None
    # how this factory's engines time their steps: the step_model setting, parsed once
    timing: StepTiming = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "timing", step_timing(self.step_model))

    def check(self, optimization: Optimization) -> None:
        size_engine(self.sizing, self.scheduler, optimization)

    def build(self, optimization: Optimization) -> tuple[Engine, EngineSizing]:
        config = self.sizing
        sizing = size_engine(config, self.scheduler, optimization)
        policy = eviction_policy(
            optimization, self.kv_budget, config.block_size, lambda: self.layer_budgets
        )
        roofline = Roofline(
            sizing.model, config.gpu_spec, config.tp, sizing.kv_format, config.weight_dtype
        )
        swap_slots = int(config.swap_space_gib * GIB / sizing.slot_bytes)
        scheduler = replace(
            engine_scheduler(config, self.scheduler, sizing.capacity_slots), swap_slots=swap_slots
        )
        # The policy's memory model (kvplan.core.policies) decides the blocks each sequence
        # holds; compaction copies (h2o, snapkv, ...) read and write a slot over HBM. The
        # engine release's rules (scheduler.rules) page as that release does.
        allocator = make_allocator(
            optimization.allocator,
            sizing.capacity_slots,
            config.block_size,
            sizing.max_model_len,
            prefix_caching=optimization.prefix_caching,
            policy=policy,
            tiers=make_tiers(config, self.tiers, optimization, sizing),
            recompute_s_per_token=roofline.linear_flops(1) / roofline.peak_flops,
            copy_s_per_slot=2 * sizing.slot_bytes / roofline.bandwidth,
            rules=scheduler.engine_rules,
        )
        runner: SimulatedRunner = SimulatedRunner(roofline)  # datasheet peak, a lower bound
        if not isinstance(self.timing, DatasheetRoofline):
            runner = operator_runner(
                roofline,
                config.generation,
                self.engine_overhead(),
                scheduler.max_num_batched_tokens or 8192,
                scheduler.max_num_seqs or 256,
                sizing.max_model_len,
                graphs=config.serving_engine.captures_cuda_graphs,
                perf_table=Path(self.perf_table) if self.perf_table else None,
            )
        return Engine(allocator, runner, scheduler, sizing.max_model_len), sizing

    def engine_overhead(self) -> EngineOverhead:
        """The engine's own time per step: given, a calibration file's (overlapped as this
        run's release is), or the shipped fit for the run's engine release."""
        config = self.sizing
        timing = self.timing
        if isinstance(timing, GivenOverhead):
            return timing.overhead
        if isinstance(timing, CalibratedOverhead):
            era = engine_era(config.engine, config.engine_version)
            fitted = read_calibration(timing.path).overhead
            return replace(fitted, overlapped=era.overlapped)
        return shipped_fit().overhead(config.engine, config.engine_version)

    def run_metrics(self, engine: Engine) -> dict[str, Any]:
        metrics: dict[str, Any] = {}
        # under the bench client's StepObserver
        runner = getattr(engine.runner, "runner", engine.runner)
        if isinstance(runner, OperatorStepRunner):  # what timed this run, and how well
            metrics["step_model"] = runner.describe()
            timing = self.timing
            if isinstance(timing, ShippedOverhead):
                model = runner.roofline.model
                band = shipped_fit().band(step_kind(model), runner.roofline.gpu.family)
                if band is not None:
                    metrics["time_error_band"] = {"engine": self.sizing.generation, **band}
            elif isinstance(timing, CalibratedOverhead):
                band = calibration_band(timing.path)
                if band is not None:
                    metrics["time_error_band"] = band
        budget = getattr(engine.allocator, "budget", None)
        if budget is not None and not budget.windowed:  # compaction copies, charged as time
            metrics["eviction_copied_slots"] = round(
                budget.copied_total
            )  # entropy-budget: a mean over layers
        if budget is not None and budget.spec.layer_budgets:
            metrics["layer_budgets"] = list(budget.spec.layer_budgets)
        return metrics
