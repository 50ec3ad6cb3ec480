"""The step model's MoE factor: routed experts' GEMMs run at moe_flops_factor x the dense
GEMMs' FLOP/s, dense models never read it, and the fits find it where MoE runs exist."""

from __future__ import annotations

import json
import tomllib

import pytest

from kvplan.core.scheduler import StepPlan
from kvplan.core.sequence import Sequence
from kvplan.plan.roofline import Roofline
from kvplan.sim.calibration import Replay, load_calibration, simulate
from kvplan.sim.factor_fit import fitted_names
from kvplan.sim.factor_table import FactorTable
from kvplan.sim.measured import MeasuredRun
from kvplan.sim.step_model import CALIBRATION_FORMAT, DATASHEET, StepModelParams, StepModelRunner
from kvplan.spec import parse_kv_format
from kvplan.spec.resolve import load_gpu, load_model
from kvplan.workload.request import Request


def roofline(model: str) -> Roofline:
    spec = load_model(model)
    return Roofline(spec, load_gpu("h100"), 1, parse_kv_format("auto", spec))


def prefill_plan(tokens: int) -> StepPlan:
    seq = Sequence(Request(request_id=0, arrival_s=0.0, prompt_len=tokens, output_len=8))
    return StepPlan(
        [(seq, tokens)], tokens, context_tokens=tokens, attention_pairs=tokens * (tokens + 1) // 2
    )


def params(moe: float) -> StepModelParams:
    return StepModelParams(
        bandwidth_factor=0.5, attention_bandwidth_factor=0.3, flops_factor=0.5, moe_flops_factor=moe
    )


def test_expert_flops_of_gpt_oss_20b_by_hand():
    # config.json: 24 layers, 4 of 32 experts per token, hidden 2880, expert width 2880;
    # one expert = gate_up (2 x 2880 x 2880) + down (2880 x 2880) + their biases (2 x 2880 + 2880)
    one_expert = 3 * 2880 * 2880 + 3 * 2880
    assert roofline("gpt-oss-20b").expert_flops(1) == 2 * 24 * 4 * one_expert
    assert roofline("llama-3.1-8b").expert_flops(1) == 0


def test_expert_gemms_run_at_their_own_factor():
    roof = roofline("gpt-oss-20b")
    plan = prefill_plan(8192)
    tokens_flops = roof.linear_flops(8192)
    flops_rate = roof.peak_flops * 0.5
    assert tokens_flops / flops_rate > roof.weight_bytes_read(8192) / (
        roof.bandwidth * 0.5
    )  # compute-bound, checked
    full, half = (
        StepModelRunner(roof, params(1.0)).step_time(plan),
        StepModelRunner(roof, params(0.5)).step_time(plan),
    )
    # expert FLOPs at half the dense rate cost twice: the difference is their time at the dense rate
    assert half - full == pytest.approx(roof.expert_flops(8192) / flops_rate, rel=1e-9)


def test_dense_models_never_read_the_moe_factor():
    roof = roofline("llama-3.1-8b")
    plan = prefill_plan(4096)
    assert StepModelRunner(roof, params(0.2)).step_time(plan) == StepModelRunner(
        roof, params(1.0)
    ).step_time(plan)
    assert StepModelRunner(roof, params(1.0)).costs(plan).expert_flops == 0


def test_factor_table_round_trips_the_moe_factor():
    hardware = {
        "hopper": {"bandwidth_factor": 0.5, "attention_bandwidth_factor": 0.4, "flops_factor": 0.3}
    }
    engines = {"vllm-v1": {"overhead_s": 1e-3, "overhead_per_seq_s": 1e-5}}
    table = FactorTable(hardware, engines, {"moe": "2 MoE runs"}, {"moe_flops_factor": 0.6})
    again = FactorTable.from_toml(tomllib.loads(table.to_toml(["# test"], {})))
    assert again.factors("hopper", "vllm-v1")["moe_flops_factor"] == 0.6
    assert again.notes["moe"] == "2 MoE runs"
    assert FactorTable(hardware, engines).factors("hopper", "vllm-v1")["moe_flops_factor"] == 1.0


def test_calibration_files_written_before_the_moe_factor_read_it_as_one(tmp_path):
    path = tmp_path / "old.json"
    old = {
        "bandwidth_factor": 0.5,
        "attention_bandwidth_factor": 0.4,
        "flops_factor": 0.3,
        "overhead_s": 1e-3,
        "overhead_per_seq_s": 1e-5,
    }
    path.write_text(json.dumps({"format": CALIBRATION_FORMAT, "params": old}))
    assert load_calibration(path).moe_flops_factor == 1.0


def run(model: str, sweep: str, concurrency: int, length: int) -> MeasuredRun:
    return MeasuredRun(
        run_id=f"{sweep}-{concurrency}-{model}",
        sweep=sweep,
        benchmark="serving",
        model=model,
        gpu="h100-80gb",
        tp=1,
        dataset="random",
        input_len=length,
        output_len=32,
        num_prompts=24,
        max_concurrency=concurrency,
        engine_version="0.11.0",
    )


@pytest.mark.slow  # 5-25 s on 2 cores; `pytest -m slow` runs it
def test_joint_fit_finds_the_expert_gemm_rate():
    """MoE runs simulated with known factors beside dense runs on the same GPU: the fit
    recovers the expert GEMMs' achieved rate (flops_factor x moe_flops_factor, what the MoE
    runs measure) and explains the MoE runs; dense-only runs leave the MoE factor alone."""
    from kvplan.sim.joint_fit import fit_table

    truth = StepModelParams(0.6, 0.3, 0.5, 1e-3, 1e-5, moe_flops_factor=0.4)
    replays = []
    for model, sweep in (("llama-3.1-8b", "dense"), ("gpt-oss-20b", "moe")):
        for concurrency, length in ((2, 256), (8, 2048), (24, 4096)):
            measured_run = run(
                model, f"{sweep}-{concurrency}", concurrency, length
            )  # 3 sweeps each: none pooled
            predicted, _ = simulate(measured_run, truth)
            measured_run = MeasuredRun(
                **{
                    **measured_run.__dict__,
                    "measured": {k: predicted[k] for k in ("output_throughput", "mean_tpot_ms")},
                }
            )
            replays.append(Replay.record(measured_run, DATASHEET))
    dense, moe = replays[:3], replays[3:]
    assert "moe_flops_factor" not in fitted_names(dense) and "moe_flops_factor" in fitted_names(moe)
    assert fit_table(dense, lambda r: "hopper", rounds=1).moe == {}
    table = fit_table(replays, lambda r: "hopper", rounds=3)
    expert_rate = table.families["hopper"]["flops_factor"] * table.moe["moe_flops_factor"]
    assert expert_rate == pytest.approx(0.5 * 0.4, rel=0.10)
    assert table.moe["moe_flops_factor"] < 0.7  # the slowdown is put on the experts, not on the GPU
    for replay in moe:
        predicted = replay.predict(table.factors("hopper", "vllm-v1"))
        for key, value in replay.run.measured.items():
            assert predicted[key] == pytest.approx(value, rel=0.05)
