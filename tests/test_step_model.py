"""The calibrated step model: reduces to the roofline at datasheet factors, adds each term
as documented (checked by hand from the model's shape), engine generations and the joint
fit of the shipped table (measured-run replays, calibrate and its files: test_calibration.py)."""

from __future__ import annotations

import pytest
from calibration_helpers import small_run

from kvplan.core.scheduler import StepPlan
from kvplan.core.sequence import Sequence
from kvplan.plan.roofline import Roofline
from kvplan.sim.calibration import Replay, simulate
from kvplan.sim.measured import MeasuredRun
from kvplan.sim.runner import SimulatedRunner
from kvplan.sim.step_model import (
    DATASHEET,
    FACTOR_NAMES,
    StepModelParams,
    StepModelRunner,
    default_params,
)
from kvplan.spec import parse_kv_format
from kvplan.spec.resolve import load_gpu, load_model
from kvplan.workload.request import Request


def decode_plan(context: int, batch: int = 1) -> StepPlan:
    scheduled = []
    for i in range(batch):
        seq = Sequence(Request(request_id=i, arrival_s=0.0, prompt_len=context, output_len=8))
        seq.num_computed = context - 1
        scheduled.append((seq, 1))
    return StepPlan(
        scheduled, batch, context_tokens=batch * context, attention_pairs=batch * context
    )


def roofline(model: str = "llama-3.1-8b", gpu: str = "h100", tp: int = 1) -> Roofline:
    spec = load_model(model)
    return Roofline(spec, load_gpu(gpu), tp, parse_kv_format("auto", spec))


def test_datasheet_factors_reproduce_the_roofline_runner():
    roof = roofline()
    for plan in (decode_plan(1000, 1), decode_plan(3000, 64)):
        assert StepModelRunner(roof, DATASHEET).step_time(plan) == pytest.approx(
            SimulatedRunner(roof).step_time(plan)
        )


def test_each_term_by_hand():
    roof = roofline("llama-3.1-70b", "h100", tp=4)
    model, gpu = roof.model, roof.gpu
    params = StepModelParams(
        bandwidth_factor=0.5,
        attention_bandwidth_factor=0.25,
        flops_factor=0.5,
        overhead_s=0.002,
        overhead_per_seq_s=1e-5,
    )
    plan = decode_plan(2048, 8)
    weights = model.weight_bytes() / 4
    kv = 8 * 2048 * model.kv_bytes_per_token(roof.kv_format, 4)
    memory = weights / (gpu.hbm_tbps * 1e12 * 0.5) + kv / (gpu.hbm_tbps * 1e12 * 0.25)
    # 2 all-reduces per layer, ring over 4 GPUs: latency + 2*3/4 * tokens * hidden * 2 bytes / link
    all_reduce = (
        2
        * model.num_layers
        * (
            gpu.interconnect_latency_us * 1e-6
            + 1.5 * 8 * model.hidden_size * 2 / (gpu.interconnect_gbps * 1e9)
        )
    )
    expected = 0.002 + 8 * 1e-5 + memory + all_reduce  # decode of 8 is memory-bound
    assert StepModelRunner(roof, params).step_time(plan) == pytest.approx(expected, rel=1e-9)


def test_compute_bound_gemms_and_memory_bound_attention_add():
    """A large decode batch: the GEMMs are compute-bound, the attention kernel still streams
    the KV from HBM; separate kernels, so the two times add (no max() hides the attention)."""
    roof = roofline("llama-3.1-8b", "h100")
    model, gpu = roof.model, roof.gpu
    params = StepModelParams(
        bandwidth_factor=0.5,
        attention_bandwidth_factor=0.25,
        flops_factor=0.05,
        overhead_s=0.0,
        overhead_per_seq_s=0.0,
    )
    batch, context = 512, 4096
    plan = decode_plan(context, batch)
    gemm_flops = 2 * model.params.matmul_active * batch
    gemm = gemm_flops / (gpu.peak_flops(False) * 0.05)
    assert gemm > model.weight_bytes() / (gpu.hbm_tbps * 1e12 * 0.5)  # compute-bound, checked
    kv = (
        batch * context * model.kv_bytes_per_token(roof.kv_format, 1) / (gpu.hbm_tbps * 1e12 * 0.25)
    )
    attention_flops = 4 * model.num_layers * model.num_heads * model.head_dim * context * batch
    assert kv > attention_flops / (gpu.peak_flops(False) * 0.05)  # memory-bound, checked
    assert StepModelRunner(roof, params).step_time(plan) == pytest.approx(gemm + kv, rel=1e-9)


def test_a_faster_replay_never_starts_a_step_before_its_arrivals():
    """Open loop at a finite rate, recorded at slow factors and replayed at fast ones: the step
    that admits a request starts no earlier than its send, so no TTFT comes out negative."""
    run = small_run(max_concurrency=None, request_rate=4.0, num_prompts=30)
    slow = StepModelParams(0.1, 0.05, 0.1, 0.02, 1e-4)
    replay = Replay.record(run, slow)
    fast = replay.predict(
        {n: getattr(StepModelParams(1.0, 1.0, 1.0, 1e-5, 1e-8), n) for n in FACTOR_NAMES}
    )
    assert fast["mean_ttft_ms"] > 0 and fast["median_ttft_ms"] > 0
    # The replay at the recorded factors is the simulation itself.
    again = replay.predict({n: getattr(slow, n) for n in FACTOR_NAMES})
    simulated, _ = simulate(run, slow)
    for key in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms"):
        assert again[key] == pytest.approx(simulated[key], rel=1e-9)


def test_multi_step_scheduling_pays_the_engine_overhead_once_per_decision():
    """vLLM V0 --num-scheduler-steps 4: one scheduling decision runs 4 decode steps, so the
    CPU overheads are charged on the decided step and not on the 3 that follow."""
    from kvplan.core.engine import Engine
    from kvplan.core.kv.paged import PagedAllocator
    from kvplan.core.scheduler import SchedulerConfig

    roof = roofline()
    params = StepModelParams(0.5, 0.5, 0.5, overhead_s=0.01, overhead_per_seq_s=1e-3)
    plain = StepModelParams(0.5, 0.5, 0.5, overhead_s=0.0, overhead_per_seq_s=0.0)
    plan = decode_plan(1000, 2)
    charged = StepModelRunner(roof, params).step_time(plan) - StepModelRunner(
        roof, plain
    ).step_time(plan)
    assert charged == pytest.approx(0.01 + 2 * 1e-3, rel=1e-9)
    plan.decision = False
    assert StepModelRunner(roof, params).step_time(plan) == pytest.approx(
        StepModelRunner(roof, plain).step_time(plan)
    )

    seen = []

    class Recorder:
        mode = "simulated"

        def step_time(self, step_plan: StepPlan) -> float:
            seen.append((step_plan.num_tokens, step_plan.decision))
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
    # one prefill step (decided), then decode steps decided every 4th
    assert [d for _, d in seen] == [True, False, False, False, True, False, False, False, True]
    assert seen[0][0] == 32


@pytest.mark.parametrize(
    "family, weights, engine, version, key",
    [
        (
            "cdna3",
            "fp8-meta",
            "vllm",
            "0.6.3.dev109+gcb3b2b9b",
            "cdna3/fp8-unfused",
        ),  # dstack's vanilla ROCm build
        ("cdna3", "fp8-meta", "vllm", "0.9.0", "cdna3"),  # rowwise scaled_mm (torch 2.7)
        ("cdna3", "fp8", "vllm", "0.6.4.dev4", "cdna3"),  # AMD's per-tensor checkpoint: fused path
        ("hopper", "fp8-meta", "vllm", "0.6.3", "hopper"),  # CUTLASS takes per-channel scales
        ("cdna3", "fp8-meta", "sglang", "0.3.0", "cdna3"),
        ("cdna3", "fp8-meta", "vllm", "", "cdna3"),  # unknown version = current
    ],
)
def test_per_channel_fp8_on_rocm_before_rowwise_gemm_has_its_own_factors(
    family, weights, engine, version, key
):
    from kvplan.sim.factor_table import FactorTable, factor_key

    assert factor_key(family, weights, engine, version) == key
    table = FactorTable(
        {
            "cdna3": {
                "bandwidth_factor": 0.3,
                "attention_bandwidth_factor": 0.5,
                "flops_factor": 0.2,
            },
            "all": {
                "bandwidth_factor": 0.5,
                "attention_bandwidth_factor": 0.5,
                "flops_factor": 0.5,
            },
        },
        {},
    )
    # A path with no factors of its own falls back to its family's, then to the pooled ones.
    assert table.factors("cdna3/fp8-unfused", "vllm-v0")["flops_factor"] == 0.2
    assert table.factors("hopper", "vllm-v0")["flops_factor"] == 0.5


def test_moe_reads_only_routed_experts_at_small_batch():
    roof = roofline("gpt-oss-20b", "h100")
    step = StepModelRunner(roof, DATASHEET)
    one, many = step.weight_bytes(1), step.weight_bytes(4096)
    assert one < 0.5 * many  # 4 of 32 experts per layer for one token
    assert many == pytest.approx(roof.weight_bytes_per_gpu, rel=1e-6)


def test_factors_out_of_range_are_refused():
    with pytest.raises(ValueError, match="bandwidth_factor"):
        StepModelParams(bandwidth_factor=0.0)
    with pytest.raises(ValueError, match="overhead_s"):
        StepModelParams(overhead_s=-1.0)
    with pytest.raises(ValueError, match="overhead_per_seq_s .* got nan"):
        StepModelParams(overhead_per_seq_s=float("nan"))  # every step would last forever


def test_shipped_defaults_exist_for_every_fitted_family_and_engine():
    for family in ("hopper", "ampere", "cdna3"):
        params = default_params(family)
        assert params != DATASHEET and "default for GPU family" in params.source
    assert "all-family fit" in default_params("ada").source
    v0, v1 = default_params("hopper", "vllm-v0"), default_params("hopper", "vllm-v1")
    assert (v0.bandwidth_factor, v0.flops_factor) == (
        v1.bandwidth_factor,
        v1.flops_factor,
    )  # one GPU, one efficiency
    assert (v0.overhead_s, v0.overhead_per_seq_s) != (
        v1.overhead_s,
        v1.overhead_per_seq_s,
    )  # two engines


@pytest.mark.parametrize(
    ("engine", "version", "generation"),
    [
        ("vllm", "0.6.3.post2.dev308+gb489fc3c", "vllm-v0"),
        ("vllm", "v0.11.0", "vllm-v1"),
        ("vllm", "0.8.0", "vllm-v1"),
        ("vllm", "", "vllm-v1"),
        ("sglang", "0.3.0", "sglang"),
    ],
)
def test_engine_generation_from_the_version(engine, version, generation):
    from kvplan.sim.factor_table import engine_generation

    assert engine_generation(engine, version) == generation


@pytest.mark.slow  # 5-25 s on 2 cores; `pytest -m slow` runs it
def test_joint_fit_recovers_hardware_and_engine_factors_from_two_engines():
    """Runs of one GPU under two engine generations, simulated with known factors: the joint
    fit finds one hardware factor set and each engine's overheads."""
    from kvplan.sim.joint_fit import fit_table

    hardware = dict(bandwidth_factor=0.6, attention_bandwidth_factor=0.3, flops_factor=0.5)
    engines = {
        "0.6.3": dict(overhead_s=0.006, overhead_per_seq_s=1e-4),
        "0.11.0": dict(overhead_s=0.001, overhead_per_seq_s=1e-5),
    }
    replays = []
    for version, overheads in engines.items():
        for concurrency, length in ((2, 128), (16, 512), (48, 1024)):
            # one sweep per load: an engine generation needs three sweeps behind it (else it is pooled)
            run = small_run(
                run_id=f"{version}-{concurrency}",
                sweep=f"{version}-{concurrency}",
                max_concurrency=concurrency,
                input_len=length,
                engine_version=version,
            )
            predicted, _ = simulate(run, StepModelParams(**hardware, **overheads))
            run = MeasuredRun(
                **{
                    **run.__dict__,
                    "measured": {k: predicted[k] for k in ("output_throughput", "mean_tpot_ms")},
                }
            )
            replays.append(Replay.record(run, DATASHEET))
    table = fit_table(replays, lambda run: "hopper", rounds=4)
    for replay in replays:
        predicted = replay.predict(
            table.factors(
                "hopper", "vllm-v0" if replay.run.engine_version == "0.6.3" else "vllm-v1"
            )
        )
        for key, value in replay.run.measured.items():
            assert predicted[key] == pytest.approx(value, rel=0.05)
    assert table.engines["vllm-v0"]["overhead_s"] > 2 * table.engines["vllm-v1"]["overhead_s"]
