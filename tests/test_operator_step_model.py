"""The operator step model (kvplan/sim/ops): a step as the sum of its operators, each timed by
the first source that covers it, plus the engine's own time by era; figures worked out by
hand from the formulas the modules cite (vLLM's capture sizes, the roofline's constants, the
expected distinct experts of uniform routing)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvplan.core.engine import Engine
from kvplan.core.kv.paged import PagedAllocator
from kvplan.core.scheduler import SchedulerConfig, StepPlan
from kvplan.engines.engine_releases import engine_generation
from kvplan.sim.ops.build import operator_runner
from kvplan.sim.ops.overhead import EngineOverhead, engine_era
from kvplan.sim.ops.shipped import Band, ShippedFit, parse_shipped, shipped_fit, step_kind
from kvplan.sim.ops.sources import (
    GEMM_EFFICIENCY,
    KERNEL_FLOOR_S,
    MEMORY_EFFICIENCY,
    RooflineSource,
)
from kvplan.sim.ops.step import capture_size, grid
from kvplan.sizing.operators.shapes import expected_touched, model_ops
from kvplan.spec import parse_kv_format
from kvplan.spec.resolve import load_gpu, load_model
from kvplan.spec.roofline import Roofline
from kvplan.workload.request import Request


def test_capture_sizes_are_vllms() -> None:
    """1, 2, 4, then multiples of 8 (vLLM's default cudagraph_capture_sizes)."""
    assert [capture_size(t) for t in (1, 2, 3, 4, 5, 8, 9, 17)] == [1, 2, 4, 4, 8, 8, 16, 24]


def test_the_grid_is_exact_to_16_then_geometric() -> None:
    points = grid(1000, 8)
    assert list(points[:16]) == list(range(1, 17)) and points[-1] == 1000
    assert list(grid(5)) == [1, 2, 3, 4, 5]


def test_distinct_experts_of_uniform_routing_by_hand() -> None:
    # 64 experts, top 8, 2 tokens: 64 (1 - (56 / 64)^2) = 15
    assert expected_touched(64, 8, 2) == pytest.approx(15.0)
    assert expected_touched(64, 8, 1) == pytest.approx(8.0)
    assert expected_touched(64, 8, 0) == 0.0


def test_a_roofline_gemm_by_hand() -> None:
    """llama-3.1-8b's down projection (4096 x 14336, bf16) on an H100 at M = 1 is memory-bound:
    its weights over 80% of 3.35 TB/s, plus the launch floor; at M = 8192 compute-bound."""
    h100 = load_gpu("h100-80gb")
    source = RooflineSource(h100)
    ops = model_ops(
        load_model("llama-3.1-8b"), 1, parse_kv_format("auto", load_model("llama-3.1-8b"))
    )
    down = next(g for g in ops.gemms if g.name == "down")
    assert (down.n, down.k) == (4096, 14336)
    weights = 4096 * 14336 * 2
    activations = (4096 + 14336) * 2
    by_hand = (weights + activations) / (3.35e12 * MEMORY_EFFICIENCY) + KERNEL_FLOOR_S
    assert source.gemm(down, 1) == pytest.approx(by_hand, rel=1e-6)
    flops = 2.0 * 8192 * 4096 * 14336
    assert source.gemm(down, 8192) == pytest.approx(
        flops / (989.4e12 * GEMM_EFFICIENCY) + KERNEL_FLOOR_S, rel=1e-3
    )


def test_the_overhead_adds_or_hides_behind_the_gpu() -> None:
    sync = EngineOverhead(base_s=0.002, per_seq_s=1e-4)
    overlapped = EngineOverhead(base_s=0.002, per_seq_s=1e-4, overlapped=True)
    assert sync.step(0.010, 10) == pytest.approx(0.010 + 0.002 + 0.001)
    assert overlapped.step(0.010, 10) == pytest.approx(0.010)
    assert overlapped.step(0.001, 10) == pytest.approx(0.003)  # the CPU is the longer
    assert sync.step(0.010, 10, decision=False) == pytest.approx(0.010)
    arrays = sync.steps(np.array([0.01, 0.02]), np.array([10, 20]), np.array([1.0, 0.0]))
    assert list(arrays) == pytest.approx([0.013, 0.02])


@pytest.mark.parametrize(
    ("engine", "version", "era"),
    [
        ("vllm", "0.6.3.post2.dev308+gb489fc3c", "vllm-v0"),
        ("vllm", "0.8.5", "vllm-v1"),
        ("vllm", "v0.11.0", "vllm-v1"),
        ("vllm", "0.14.0", "vllm-v1-async"),  # async scheduling on by default
        ("vllm", "", "vllm-v1-async"),  # no release: the newest
        ("sglang", "0.3.0", "sglang-sync"),
        ("sglang", "0.5.2", "sglang"),  # the overlap scheduler
    ],
)
def test_the_era_of_an_engine_release(engine: str, version: str, era: str) -> None:
    assert engine_era(engine, version).key == era


@pytest.mark.parametrize(
    ("engine", "version", "generation"),
    [("vllm", "0.6.3", "vllm-v0"), ("vllm", "0.8.0", "vllm-v1"), ("sglang", "0.3.0", "sglang")],
)
def test_engine_generation_from_the_version(engine: str, version: str, generation: str) -> None:
    assert engine_generation(engine, version) == generation


def _runner(model: str = "llama-3.1-8b", overhead: EngineOverhead | None = None):
    spec, gpu = load_model(model), load_gpu("h100-80gb")
    roofline = Roofline(spec, gpu, 1, parse_kv_format("auto", spec), None)
    return operator_runner(roofline, "vllm-v1", overhead or EngineOverhead(), 512, 64, 4096, True)


def _decode_plan(sequences: int, context: int) -> StepPlan:
    plan = StepPlan([(object(), 1)] * sequences, sequences)  # only the count is read
    plan.decodes = plan.samples = sequences
    plan.decode_pairs = sequences * context
    return plan


def test_a_decode_step_is_the_sum_of_its_operators() -> None:
    """On the grid's exact points a decode step is the token-major operators at its padded
    size, the LM head and sampler at its samples, and attention at its batch and context."""
    runner = _runner()
    context = round(math.exp(runner.decode.log_b[10]))  # a point of the context grid
    plan = _decode_plan(3, context)
    tokens = runner._token_ops(4)  # 3 tokens replay the graph captured for 4
    head = runner.head_curve[2]  # 3 sequences sample
    ops, sources = runner.ops, runner.sources
    attention = sum(sources.decode_attention(op, 3, context) for op in ops.attention)
    assert runner.gpu_time(plan) == pytest.approx(tokens + head + attention, rel=1e-9)
    assert runner.step_time(plan) == pytest.approx(runner.gpu_time(plan), rel=1e-12)
    charged = _runner(overhead=EngineOverhead(base_s=0.01, per_seq_s=1e-3)).step_time(plan)
    assert charged - runner.step_time(plan) == pytest.approx(0.01 + 3e-3, rel=1e-9)


def test_multi_step_scheduling_pays_the_engine_overhead_once_per_decision() -> None:
    """vLLM V0 --num-scheduler-steps 4: one scheduling decision runs 4 decode steps, so the
    CPU time is charged on the decided step and not on the 3 that follow."""
    runner = _runner(overhead=EngineOverhead(base_s=0.01, per_seq_s=1e-3))
    plan = _decode_plan(2, 100)
    decided = runner.step_time(plan)
    plan.decision = False
    assert decided - runner.step_time(plan) == pytest.approx(0.012, rel=1e-9)
    seen = []

    class Recorder:
        mode = "simulated"

        def step_time(self, step_plan: StepPlan) -> float:
            seen.append(step_plan.decision)
            return 0.01

    engine = Engine(
        PagedAllocator(num_blocks=64, block_size=16),
        Recorder(),
        SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, scheduler_steps=4),
        max_model_len=64,
    )
    for i in range(2):
        engine.submit(Request(request_id=i, arrival_s=0.0, prompt_len=16, output_len=9))
    while engine.busy:
        engine.step()
    assert seen == [True, False, False, False, True, False, False, False, True]


def test_moe_weight_traffic_follows_the_experts_a_step_touches() -> None:
    """A MoE decode of one token reads top-k experts, of two tokens the distinct experts the two
    touch: the roofline reads each touched expert's weights once (by hand)."""
    spec = load_model("qwen3-30b-a3b")
    ops = model_ops(spec, 1, parse_kv_format("auto", spec))
    experts = ops.experts
    assert experts is not None and experts.fmt.label == "bf16"
    source = RooflineSource(load_gpu("h100-80gb"))
    h, inter, k = experts.hidden, experts.inter, experts.topk
    assert (h, inter, experts.experts, k) == (2048, 768, 128, 8)  # its config.json
    for tokens, touched in ((1, 8.0), (2, 128 * (1 - (120 / 128) ** 2))):
        weights = touched * 3 * h * inter * 2
        activations = tokens * k * (3 * h + 3 * inter) * 2
        by_hand = (weights + activations) / (3.35e12 * MEMORY_EFFICIENCY) + KERNEL_FLOOR_S
        assert source.experts(experts, tokens) == pytest.approx(by_hand, rel=1e-9)


@pytest.mark.parametrize(
    ("model", "kind"),
    [
        ("llama-3.1-8b", "dense"),
        ("qwen3-30b-a3b", "moe"),
        ("deepseek-v3", "mla"),
        ("qwen3-next-80b-a3b-thinking", "hybrid"),
    ],  # fmt: skip
)
def test_the_kind_a_band_is_taken_by(model: str, kind: str) -> None:
    assert step_kind(load_model(model)) == kind


def test_a_band_falls_back_to_its_kind_on_other_families_marked_unvalidated() -> None:
    fit = ShippedFit(
        {"vllm-v1": EngineOverhead(0.001, 1e-4, False, 1.0, "fit on 3 runs")},
        (
            Band("dense", "hopper", {"mean_tpot_ms": 0.1}, {"mean_tpot_ms": 7}),
            Band("dense", "*", {"mean_tpot_ms": 0.2}, {"mean_tpot_ms": 20}),
        ),
        "leave one model out",
        "3 runs",
    )
    assert fit.band("dense", "hopper") == {
        "basis": "leave one model out", "kind": "dense", "gpu_family": "hopper",
        "mean_tpot_ms_error": 0.1, "mean_tpot_ms_runs": 7,
    }  # fmt: skip
    assert fit.band("dense", "ada")["unvalidated"] is True  # type: ignore[index]
    assert fit.band("dense", "ada")["mean_tpot_ms_error"] == 0.2  # type: ignore[index]
    assert fit.band("mla", "hopper") is None
    # V1 with async scheduling takes V1's fit, overlapped; an era nothing fitted runs none
    assert (
        fit.overhead("vllm", "0.14.0").overlapped and fit.overhead("vllm", "0.14.0").base_s == 0.001
    )
    assert fit.overhead("sglang", "0.5.0").base_s == 0.0


def test_the_shipped_fit_reads_and_covers_the_current_engines() -> None:
    fit = shipped_fit()
    for engine, version in (("vllm", "0.11.0"), ("vllm", ""), ("sglang", "0.5.2")):
        overhead = fit.overhead(engine, version)
        assert overhead.base_s > 0 and overhead.source.startswith("fit on")
    assert fit.band("dense", "hopper") is not None
    with pytest.raises(ValueError, match="format must be"):
        parse_shipped({"format": "other"})


class _Table:
    """A measured source that knows one GEMM shape and nothing else."""

    name = "a table"

    def __init__(self, n: int) -> None:
        self.n = n

    def gemm(self, gemm, m):  # type: ignore[no-untyped-def]
        return 1e-5 if gemm.n == self.n else None

    def __getattr__(self, _name: str):  # every other operator: not in the table
        return lambda *args: None


def test_a_run_is_table_timed_only_when_no_operator_fell_to_the_roofline() -> None:
    """The overheads are fitted on runs whose operators measured tables timed (the roofline's
    error on a kernel no table holds must not be read as engine time); memory passes do not
    count, as aiconfigurator too computes them from bandwidth."""
    from kvplan.sim.ops.sources import Sources

    spec = load_model("llama-3.1-8b")
    ops = model_ops(spec, 1, parse_kv_format("auto", spec))
    roofline = RooflineSource(load_gpu("h100-80gb"))
    down = next(g for g in ops.gemms if g.name == "down")
    sources = Sources((_Table(down.n), roofline))
    sources.gemm(down, 8)
    sources.memory(1e6)
    assert sources.measured()
    assert sources.describe() == "gemm: a table; elementwise: roofline"
    qkv = next(g for g in ops.gemms if g.name == "qkv")
    sources.gemm(qkv, 8)  # a shape the table lacks
    assert not sources.measured()
    assert sources.describe() == "gemm: a table + roofline; elementwise: roofline"
