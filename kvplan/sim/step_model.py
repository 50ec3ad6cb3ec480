"""The calibrated step-time model: what one engine step costs on a real server.

The plain roofline (kvplan.plan.roofline) charges a step max(bytes / HBM peak, FLOPs /
tensor peak). Real engines pay more, and this model adds each cost as a mechanism with
few parameters, so a fit on published runs carries over to other models and loads:

    t = overhead_s + overhead_per_seq_s x sequences
        + max(weight bytes / (bandwidth_factor x HBM peak),
              dense linear FLOPs / (flops_factor x tensor peak)
              + expert FLOPs / (moe_flops_factor x flops_factor x tensor peak))
        + max(KV bytes / (attention_bandwidth_factor x HBM peak), attention FLOPs / (flops_factor x tensor peak))
        + all_reduce

- weight bytes: what one forward pass reads (every dense weight; for MoE only the experts
  the batch's tokens route to, uniform routing: E(1 - (1 - k/E)^tokens)); KV bytes: what
  each scheduled sequence's attention reads at its own context (sliding windows read only
  the window). They get separate factors because paged-attention kernels reach a lower
  share of HBM bandwidth than the weight GEMMs do. A chunked-prefill step mixing prefill
  chunks and decodes reads the weights once for all of them and pays each sequence's
  attention separately.
- linear FLOPs: 2 x active parameters per token; attention FLOPs: QK^T and PV per (query,
  key) pair.
- expert FLOPs (MoE only): the part of the linear FLOPs in the routed experts. Engines run
  them as a grouped GEMM over tokens sorted by expert (vLLM's fused_moe: each expert's rows
  padded to the kernel's tile, weight-only formats such as MXFP4 dequantized in the loop),
  which reaches a smaller share of the tensor peak than the dense GEMMs do. One factor,
  moe_flops_factor, scales the dense GEMMs' achieved FLOP/s for them; it is fitted on every
  MoE run pooled, and dense models never read it.
- The GEMMs and the attention are separate kernels, each bound by its own resource: a large
  decode batch is compute-bound in the GEMMs while its attention still streams the KV from
  HBM, so the two terms add rather than hide behind one max().
- all_reduce (tensor parallel only): 2 per layer (after attention and after the MLP), each
  of tokens x hidden x 2 bytes (bf16 activations), ring algorithm: latency +
  2 (tp - 1) / tp x message / link bandwidth, with the link's bandwidth and latency from the
  GPU profile (NVLink, Infinity Fabric or PCIe).
- overhead_s: fixed per-step cost (scheduling, input preparation, kernel launches and
  sampling the GPU does not hide); overhead_per_seq_s: the part that grows with the batch.
  Under vLLM V0's multi-step scheduling (--num-scheduler-steps N) the CPU work of one
  scheduling decision serves N steps (vLLM RFC #6854), so both are charged on the steps the
  scheduler decided and not on the N - 1 steps that follow.

bandwidth_factor and flops_factor are achieved / datasheet peak. Defaults per GPU family, per
engine generation and for MoE are fitted on the published runs of the project's serving dataset
(benchmarks/serving_fidelity.py) and ship in profiles/step_model_defaults.toml with the
fit's residuals; `kvplan calibrate` fits them to a user's own measured runs. Named
simplifications: uniform MoE routing, one MoE factor for every GPU family, no pipeline
parallelism, no speculative decoding, no CPU-GPU overlap beyond what the fitted overhead
absorbs, one all-reduce algorithm (ring) for every message size.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from kvplan.core.scheduler import StepPlan
from kvplan.plan.roofline import Roofline
from kvplan.sim.calibration_file import (  # noqa: F401 (the file's names, re-exported)
    CALIBRATION_FORMAT,
    FACTOR_NAMES,
    calibration_band,
    check_factors,
    read_calibration,
)
from kvplan.sim.factor_table import DEFAULT_GENERATION, shipped_table
from kvplan.sim.runner import SimulatedRunner

ACTIVATION_BYTES = 2.0  # bf16 activations cross the all-reduce even with FP8 weights
ALL_REDUCES_PER_LAYER = 2


@dataclass(frozen=True)
class StepModelParams:
    """The fitted factors; `source` says where they came from (a fit, a file, datasheet-only)."""

    bandwidth_factor: float = 1.0
    attention_bandwidth_factor: float = 1.0
    flops_factor: float = 1.0
    overhead_s: float = 0.0
    overhead_per_seq_s: float = 0.0
    moe_flops_factor: float = 1.0
    source: str = "datasheet only (roofline at peak, no overhead)"

    def __post_init__(self) -> None:
        check_factors({name: getattr(self, name) for name in FACTOR_NAMES})  # finite, in range

    def with_factors(self, values: dict[str, float], source: str) -> StepModelParams:
        return replace(self, **values, source=source)


DATASHEET = StepModelParams()


class StepCosts(NamedTuple):
    """One step's raw costs before any factor: the calibration replays these. A named tuple:
    the simulator builds one per step, and a tuple is built several times faster than a
    frozen dataclass."""

    weight_bytes: float
    kv_bytes: float
    linear_flops: float  # the dense GEMMs (the routed experts are expert_flops)
    attention_flops: float
    sequences: int
    all_reduce_s: float
    decisions: float = 1.0  # 1 on a step the scheduler decided, 0 inside a multi-step run
    expert_flops: float = 0.0  # the routed experts' GEMMs (MoE only)
    gpu_s: float = 0.0  # the operator step model's GPU time (kvplan.sim.ops), no factor scales it


COST_FIELDS = StepCosts._fields  # the order a recorded step's row keeps them in


def step_seconds(
    costs: StepCosts | Any,
    bandwidth: float,
    attention_bandwidth: float,
    flops_rate: float,
    overhead_s: float,
    overhead_per_seq_s: float,
    expert_flops_rate: float,
) -> Any:
    """The step time formula (module docstring) for one step's costs, or for arrays of many
    steps' costs (kvplan.sim.calibration's replays): the one home of the formula."""
    top = np.maximum if isinstance(costs.weight_bytes, np.ndarray) else max
    return (
        (overhead_s + overhead_per_seq_s * costs.sequences) * costs.decisions
        + top(
            costs.weight_bytes / bandwidth,
            costs.linear_flops / flops_rate + costs.expert_flops / expert_flops_rate,
        )
        + top(costs.kv_bytes / attention_bandwidth, costs.attention_flops / flops_rate)
        + costs.all_reduce_s
        + costs.gpu_s
    )


class StepModelRunner(SimulatedRunner):
    """SimulatedRunner with the calibrated terms above (same StepPlan interface)."""

    def __init__(
        self,
        roofline: Roofline,
        params: StepModelParams = DATASHEET,
        host_link_bytes_per_s: float | None = None,
    ) -> None:
        super().__init__(roofline, host_link_bytes_per_s)
        self.params = params
        gpu, model, tp = roofline.gpu, roofline.model, roofline.tp
        self.bandwidth = roofline.bandwidth * params.bandwidth_factor
        self.attention_bandwidth = roofline.bandwidth * params.attention_bandwidth_factor
        self.flops_rate = roofline.peak_flops * params.flops_factor
        self.expert_flops_rate = self.flops_rate * params.moe_flops_factor
        self.overhead_s = params.overhead_s
        self.overhead_per_seq_s = params.overhead_per_seq_s
        self.expert_flops_per_token = roofline.expert_flops(1)
        self.dense_flops_per_token = roofline.linear_flops(1) - self.expert_flops_per_token
        # All-reduce per step: a fixed latency part and a part per token of activations.
        if tp > 1:
            calls = ALL_REDUCES_PER_LAYER * model.num_layers
            ring = 2.0 * (tp - 1) / tp
            self.all_reduce_fixed_s = calls * gpu.interconnect_latency_us * 1e-6
            self.all_reduce_per_token_s = (
                calls * ring * model.hidden_size * ACTIVATION_BYTES / (gpu.interconnect_gbps * 1e9)
            )
        else:
            self.all_reduce_fixed_s = self.all_reduce_per_token_s = 0.0
        dense = roofline.weight_bytes_per_gpu - roofline.expert_bytes_per_gpu
        self.dense_bytes = dense
        self.moe = roofline.expert_bytes_per_gpu > 0
        self._weights_cache: dict[int, float] = {}

    def weight_bytes(self, tokens: int) -> float:
        if not self.moe:
            return self.dense_bytes
        cached = self._weights_cache.get(tokens)
        if cached is None:
            cached = self._weights_cache[tokens] = self.roofline.weight_bytes_read(tokens)
        return cached

    def costs(self, plan: StepPlan) -> StepCosts:
        kv_bytes, attention = self.attention_costs(plan)
        tokens = plan.num_tokens
        return StepCosts(
            self.weight_bytes(tokens),
            kv_bytes,
            self.dense_flops_per_token * tokens,
            attention,
            len(plan.scheduled),
            self.all_reduce_fixed_s + self.all_reduce_per_token_s * tokens,
            1.0 if plan.decision else 0.0,
            self.expert_flops_per_token * tokens,
        )

    def step_time_from(self, c: StepCosts) -> float:
        return step_seconds(
            c,
            self.bandwidth,
            self.attention_bandwidth,
            self.flops_rate,
            self.overhead_s,
            self.overhead_per_seq_s,
            self.expert_flops_rate,
        )

    def step_time(self, plan: StepPlan) -> float:
        seconds = self.step_time_from(self.costs(plan))
        swapped = plan.swapped_in_slots + plan.swapped_out_slots
        if swapped:
            seconds += swapped * self.slot_bytes / self.host_link
        return seconds + plan.transfer_s


# --- shipped defaults ------------------------------------------------------------------


def default_params(family: str, generation: str = DEFAULT_GENERATION) -> StepModelParams:
    """The shipped factors: the GPU family's hardware factors and the engine's overheads
    (kvplan/sim/factor_table.py); the datasheet when nothing is shipped."""
    table = shipped_table()
    if not table.families and not table.engines:
        return DATASHEET
    values = table.factors(family, generation)
    return StepModelParams(**values, source=table.describe(family, generation))


def load_calibration(path: str | Path) -> StepModelParams:
    """A calibration file's factors, checked on load (kvplan/sim/calibration_file.py)."""
    read = read_calibration(path)
    return StepModelParams(**read.factors, source=f"calibration {Path(path).name} ({read.source})")


def step_model_params(
    calibration: str | None, family: str, generation: str = DEFAULT_GENERATION
) -> StepModelParams:
    """A calibration file's factors if one is given, else the shipped defaults."""
    return load_calibration(calibration) if calibration else default_params(family, generation)
