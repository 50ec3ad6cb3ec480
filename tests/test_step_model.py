"""The calibrated step model: reduces to the roofline at datasheet factors, adds each term
as documented (checked by hand from the model's shape), and calibration replays and fits."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from kvplan.cli import app
from kvplan.core.scheduler import StepPlan
from kvplan.core.sequence import Sequence
from kvplan.plan.roofline import Roofline
from kvplan.sim.calibration import Replay, fit, load_calibration, simulate
from kvplan.sim.measured import MeasuredRun, read_result
from kvplan.sim.runner import SimulatedRunner
from kvplan.sim.step_model import DATASHEET, FACTOR_NAMES, StepModelParams, StepModelRunner, default_params
from kvplan.spec import parse_kv_format
from kvplan.spec.resolve import load_gpu, load_model
from kvplan.workload.request import Request

runner = CliRunner()


def decode_plan(context: int, batch: int = 1) -> StepPlan:
    scheduled = []
    for i in range(batch):
        seq = Sequence(Request(request_id=i, arrival_s=0.0, prompt_len=context, output_len=8))
        seq.num_computed = context - 1
        scheduled.append((seq, 1))
    return StepPlan(scheduled, batch, context_tokens=batch * context, attention_pairs=batch * context)


def roofline(model: str = "llama-3.1-8b", gpu: str = "h100", tp: int = 1) -> Roofline:
    spec = load_model(model)
    return Roofline(spec, load_gpu(gpu), tp, parse_kv_format("auto", spec))


def test_datasheet_factors_reproduce_the_roofline_runner():
    roof = roofline()
    for plan in (decode_plan(1000, 1), decode_plan(3000, 64)):
        assert StepModelRunner(roof, DATASHEET).step_time(plan) == pytest.approx(SimulatedRunner(roof).step_time(plan))


def test_each_term_by_hand():
    roof = roofline("llama-3.1-70b", "h100", tp=4)
    model, gpu = roof.model, roof.gpu
    params = StepModelParams(bandwidth_factor=0.5, attention_bandwidth_factor=0.25, flops_factor=0.5,
                             overhead_s=0.002, overhead_per_seq_s=1e-5)
    plan = decode_plan(2048, 8)
    weights = model.weight_bytes() / 4
    kv = 8 * 2048 * model.kv_bytes_per_token(roof.kv_format, 4)
    memory = weights / (gpu.hbm_tbps * 1e12 * 0.5) + kv / (gpu.hbm_tbps * 1e12 * 0.25)
    # 2 all-reduces per layer, ring over 4 GPUs: latency + 2*3/4 * tokens * hidden * 2 bytes / link
    all_reduce = 2 * model.num_layers * (gpu.interconnect_latency_us * 1e-6
                                         + 1.5 * 8 * model.hidden_size * 2 / (gpu.interconnect_gbps * 1e9))
    expected = 0.002 + 8 * 1e-5 + memory + all_reduce  # decode of 8 is memory-bound
    assert StepModelRunner(roof, params).step_time(plan) == pytest.approx(expected, rel=1e-9)


def test_compute_bound_gemms_and_memory_bound_attention_add():
    """A large decode batch: the GEMMs are compute-bound, the attention kernel still streams
    the KV from HBM; separate kernels, so the two times add (no max() hides the attention)."""
    roof = roofline("llama-3.1-8b", "h100")
    model, gpu = roof.model, roof.gpu
    params = StepModelParams(bandwidth_factor=0.5, attention_bandwidth_factor=0.25, flops_factor=0.05,
                             overhead_s=0.0, overhead_per_seq_s=0.0)
    batch, context = 512, 4096
    plan = decode_plan(context, batch)
    gemm_flops = 2 * model.params.matmul_active * batch
    gemm = gemm_flops / (gpu.peak_flops(False) * 0.05)
    assert gemm > model.weight_bytes() / (gpu.hbm_tbps * 1e12 * 0.5)  # compute-bound, checked
    kv = batch * context * model.kv_bytes_per_token(roof.kv_format, 1) / (gpu.hbm_tbps * 1e12 * 0.25)
    attention_flops = 4 * model.num_layers * model.num_heads * model.head_dim * context * batch
    assert kv > attention_flops / (gpu.peak_flops(False) * 0.05)  # memory-bound, checked
    assert StepModelRunner(roof, params).step_time(plan) == pytest.approx(gemm + kv, rel=1e-9)


def test_a_faster_replay_never_starts_a_step_before_its_arrivals():
    """Open loop at a finite rate, recorded at slow factors and replayed at fast ones: the step
    that admits a request starts no earlier than its send, so no TTFT comes out negative."""
    run = small_run(max_concurrency=None, request_rate=4.0, num_prompts=30)
    slow = StepModelParams(0.1, 0.05, 0.1, 0.02, 1e-4)
    replay = Replay.record(run, slow)
    fast = replay.predict({n: getattr(StepModelParams(1.0, 1.0, 1.0, 1e-5, 1e-8), n) for n in FACTOR_NAMES})
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
    charged = StepModelRunner(roof, params).step_time(plan) - StepModelRunner(roof, plain).step_time(plan)
    assert charged == pytest.approx(0.01 + 2 * 1e-3, rel=1e-9)
    plan.decision = False
    assert StepModelRunner(roof, params).step_time(plan) == pytest.approx(StepModelRunner(roof, plain).step_time(plan))

    seen = []

    class Recorder:
        mode = "simulated"

        def step_time(self, step_plan: StepPlan) -> float:
            seen.append((step_plan.num_tokens, step_plan.decision))
            return 0.01

    engine = Engine(PagedAllocator(num_blocks=64, block_size=16), Recorder(),
                    SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, scheduler_steps=4), max_model_len=64)
    for i in range(2):
        engine.submit(Request(request_id=i, arrival_s=0.0, prompt_len=16, output_len=9))
    while engine.busy:
        engine.step()
    # one prefill step (decided), then decode steps decided every 4th
    assert [d for _, d in seen] == [True, False, False, False, True, False, False, False, True]
    assert seen[0][0] == 32


@pytest.mark.parametrize("family, weights, engine, version, key", [
    ("cdna3", "fp8-meta", "vllm", "0.6.3.dev109+gcb3b2b9b", "cdna3/fp8-unfused"),  # dstack's vanilla ROCm build
    ("cdna3", "fp8-meta", "vllm", "0.9.0", "cdna3"),  # rowwise scaled_mm (torch 2.7)
    ("cdna3", "fp8", "vllm", "0.6.4.dev4", "cdna3"),  # AMD's per-tensor checkpoint: fused path
    ("hopper", "fp8-meta", "vllm", "0.6.3", "hopper"),  # CUTLASS takes per-channel scales
    ("cdna3", "fp8-meta", "sglang", "0.3.0", "cdna3"),
    ("cdna3", "fp8-meta", "vllm", "", "cdna3"),  # unknown version = current
])
def test_per_channel_fp8_on_rocm_before_rowwise_gemm_has_its_own_factors(family, weights, engine, version, key):
    from kvplan.sim.factor_table import FactorTable, factor_key

    assert factor_key(family, weights, engine, version) == key
    table = FactorTable({"cdna3": {"bandwidth_factor": 0.3, "attention_bandwidth_factor": 0.5, "flops_factor": 0.2},
                         "all": {"bandwidth_factor": 0.5, "attention_bandwidth_factor": 0.5, "flops_factor": 0.5}}, {})
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
    with pytest.raises(ValueError, match="overheads"):
        StepModelParams(overhead_s=-1.0)


def test_shipped_defaults_exist_for_every_fitted_family_and_engine():
    for family in ("hopper", "ampere", "cdna3"):
        params = default_params(family)
        assert params != DATASHEET and "default for GPU family" in params.source
    assert "all-family fit" in default_params("ada").source
    v0, v1 = default_params("hopper", "vllm-v0"), default_params("hopper", "vllm-v1")
    assert (v0.bandwidth_factor, v0.flops_factor) == (v1.bandwidth_factor, v1.flops_factor)  # one GPU, one efficiency
    assert (v0.overhead_s, v0.overhead_per_seq_s) != (v1.overhead_s, v1.overhead_per_seq_s)  # two engines


@pytest.mark.parametrize(("engine", "version", "generation"), [
    ("vllm", "0.6.3.post2.dev308+gb489fc3c", "vllm-v0"), ("vllm", "v0.11.0", "vllm-v1"), ("vllm", "0.8.0", "vllm-v1"),
    ("vllm", "", "vllm-v1"), ("sglang", "0.3.0", "sglang")])
def test_engine_generation_from_the_version(engine, version, generation):
    from kvplan.sim.factor_table import engine_generation

    assert engine_generation(engine, version) == generation


def test_joint_fit_recovers_hardware_and_engine_factors_from_two_engines():
    """Runs of one GPU under two engine generations, simulated with known factors: the joint
    fit finds one hardware factor set and each engine's overheads."""
    from kvplan.sim.joint_fit import fit_table

    hardware = dict(bandwidth_factor=0.6, attention_bandwidth_factor=0.3, flops_factor=0.5)
    engines = {"0.6.3": dict(overhead_s=0.006, overhead_per_seq_s=1e-4), "0.11.0": dict(overhead_s=0.001, overhead_per_seq_s=1e-5)}
    replays = []
    for version, overheads in engines.items():
        for concurrency, length in ((2, 128), (16, 512), (48, 1024)):
            # one sweep per load: an engine generation needs three sweeps behind it (else it is pooled)
            run = small_run(run_id=f"{version}-{concurrency}", sweep=f"{version}-{concurrency}",
                            max_concurrency=concurrency, input_len=length, engine_version=version)
            predicted, _ = simulate(run, StepModelParams(**hardware, **overheads))
            run = MeasuredRun(**{**run.__dict__, "measured": {k: predicted[k] for k in ("output_throughput", "mean_tpot_ms")}})
            replays.append(Replay.record(run, DATASHEET))
    table = fit_table(replays, lambda run: "hopper", rounds=4)
    for replay in replays:
        predicted = replay.predict(table.factors("hopper", "vllm-v0" if replay.run.engine_version == "0.6.3" else "vllm-v1"))
        for key, value in replay.run.measured.items():
            assert predicted[key] == pytest.approx(value, rel=0.05)
    assert table.engines["vllm-v0"]["overhead_s"] > 2 * table.engines["vllm-v1"]["overhead_s"]


def small_run(**changes) -> MeasuredRun:
    base = dict(run_id="t", sweep="t", benchmark="serving", model="llama-3.1-8b", gpu="h100-80gb", tp=1,
                dataset="random", input_len=256, output_len=64, num_prompts=40, max_concurrency=8)
    base.update(changes)
    return MeasuredRun(**base)


def test_replay_reproduces_the_simulation_and_other_factors():
    run = small_run()
    truth = StepModelParams(0.6, 0.3, 0.5, 0.003, 2e-5)
    replay = Replay.record(run, DATASHEET)
    predicted, _ = simulate(run, truth)
    replayed = replay.predict({n: getattr(truth, n) for n in FACTOR_NAMES})
    for key in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms"):
        # a concurrency cap makes the schedule timing-independent: the replay is exact
        assert replayed[key] == pytest.approx(predicted[key], rel=1e-9)


def test_fit_recovers_runs_simulated_with_known_factors():
    truth = StepModelParams(0.6, 0.3, 0.5, 0.003, 2e-5)
    runs = []
    for concurrency, length in ((4, 128), (16, 512), (32, 1024)):
        run = small_run(run_id=f"c{concurrency}", max_concurrency=concurrency, input_len=length)
        predicted, _ = simulate(run, truth)
        runs.append(MeasuredRun(**{**run.__dict__, "measured": {k: predicted[k] for k in
                                                                ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")}}))
    params = fit(runs, "synthetic")
    for run in runs:
        predicted, _ = simulate(run, params)
        for key, value in run.measured.items():
            assert predicted[key] == pytest.approx(value, rel=0.03)


VLLM_RESULT = {"date": "20250101-000000", "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B", "num_prompts": 40,
               "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 8, "duration": 10.0, "completed": 40,
               "failed": 0, "total_input_tokens": 10240, "total_output_tokens": 2560, "request_throughput": 4.0,
               "output_throughput": 256.0, "total_token_throughput": 1280.0, "mean_ttft_ms": 60.0,
               "median_ttft_ms": 55.0, "p99_ttft_ms": 90.0, "mean_tpot_ms": 28.0, "median_tpot_ms": 28.0,
               "p99_tpot_ms": 30.0, "mean_itl_ms": 28.0, "median_itl_ms": 28.0, "p99_itl_ms": 40.0}


def test_reads_vllm_json_and_printed_block(tmp_path):
    saved = tmp_path / "vllm-infqps-concurrency8.json"
    saved.write_text(json.dumps(VLLM_RESULT))
    run = read_result(saved, {"gpu": "h100-80gb", "tp": 1, "model": "llama-3.1-8b"})
    assert run.max_concurrency == 8 and run.input_len == 256 and run.output_len == 64 and math.isinf(run.request_rate)
    assert run.measured == {"output_throughput": 256.0, "mean_ttft_ms": 60.0, "mean_tpot_ms": 28.0}
    block = tmp_path / "printed.txt"
    block.write_text("============ Serving Benchmark Result ============\n"
                     "Successful requests:                     40        \n"
                     "Maximum request concurrency:             8         \n"
                     "Benchmark duration (s):                  10.00     \n"
                     "Total input tokens:                      10240     \n"
                     "Total generated tokens:                  2560      \n"
                     "Output token throughput (tok/s):         256.00    \n"
                     "Mean TTFT (ms):                          60.00     \n"
                     "Mean TPOT (ms):                          28.00     \n")
    assert read_result(block, {"gpu": "h100-80gb", "model": "llama-3.1-8b"}).measured == run.measured


def test_calibrate_cli_writes_a_file_bench_uses(tmp_path):
    saved = tmp_path / "result.json"
    saved.write_text(json.dumps(VLLM_RESULT))
    cal = tmp_path / "cal.json"
    result = runner.invoke(app, ["calibrate", str(saved), "--model", "llama-3.1-8b", "--gpu", "h100", "--out", str(cal)])
    assert result.exit_code == 0, result.output
    assert "output_throughput" in result.output and "%" in result.output
    params = load_calibration(cal)
    assert params.source.startswith("calibration cal.json")
    out = tmp_path / "bench.jsonl"
    result = runner.invoke(app, ["bench", "--gpu", "h100", "--workload", "random", "--input-len", "256", "--output-len",
                                 "64", "--rate", "inf", "--num-requests", "40", "--max-concurrency", "8", "--optimizations",
                                 "paged", "--calibration", str(cal), "--format", "vllm", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "Serving Benchmark Result" in result.output and "calibration cal.json" in result.output
    record = json.loads(out.read_text().splitlines()[0])
    assert record["metrics"]["vllm_max_concurrency"] == 8


def test_calibrate_holds_each_run_out_and_bench_prints_that_band(tmp_path):
    """Two runs: each is predicted by a fit on the other alone; the file keeps the median held-out
    error per figure and `kvplan bench --calibration` prints it beside its modeled times."""
    files = []
    for concurrency, tpot in ((8, 28.0), (2, 22.0)):
        saved = tmp_path / f"c{concurrency}.json"
        saved.write_text(json.dumps({**VLLM_RESULT, "max_concurrency": concurrency, "mean_tpot_ms": tpot,
                                     "output_throughput": 256.0 * concurrency / 8 * 28.0 / tpot}))
        files.append(str(saved))
    cal = tmp_path / "cal.json"
    result = runner.invoke(app, ["calibrate", *files, "--model", "llama-3.1-8b", "--gpu", "h100", "--out", str(cal)],
                           env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "held out: each run predicted by a fit without it" in result.output
    held = json.loads(cal.read_text())["held_out"]
    assert held["output_throughput_runs"] == 2 and held["mean_tpot_ms_runs"] == 2
    assert held["mean_tpot_ms_error"] >= 0
    out = tmp_path / "bench.jsonl"
    result = runner.invoke(app, ["bench", "--gpu", "h100", "--num-requests", "20", "--optimizations", "paged",
                                 "--calibration", str(cal), "--out", str(out)], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    band = json.loads(out.read_text().splitlines()[0])["metrics"]["time_error_band"]
    assert band["basis"].startswith("leave one run out") and band["mean_tpot_ms_runs"] == 2
    assert "leave one run out" in result.output


def test_calibrate_bad_inputs_exit_2(tmp_path):
    junk = tmp_path / "junk.txt"
    junk.write_text("nothing here")
    result = runner.invoke(app, ["calibrate", str(junk), "--gpu", "h100", "--out", str(tmp_path / "c.json")])
    assert result.exit_code == 2 and "Serving Benchmark Result" in result.output
    assert not (tmp_path / "c.json").exists()
    result = runner.invoke(app, ["bench", "--calibration", str(tmp_path / "missing.json"), "--num-requests", "5",
                                 "--optimizations", "paged", "--out", str(tmp_path / "b.jsonl")])
    assert result.exit_code == 2 and "calibration file" in result.output


def test_shipped_dataset_replays(shared_data):
    from kvplan.sim.measured import load_dataset

    runs, skipped = load_dataset(shared_data / "serving" / "serving_benchmarks.jsonl")
    assert len(runs) + len(skipped) == 103 and len(runs) >= 80
    assert {r.gpu for r in runs} == {"h100-80gb", "a100-80gb", "mi300x"}


@pytest.mark.parametrize("gpu, version, kind, max_model_len, expected", [
    ("h100", "v0.11.0", "serving", 40960, (1024, 8192, True)),  # V1, >= 70 GiB, not A100
    ("mi300x", "0.10.0", "throughput", 8192, (1024, 16384, True)),  # offline LLM class
    ("a100-80gb", "v0.11.0", "serving", 40960, (256, 2048, True)),  # the A100 exception (vLLM PR #17885)
    ("a100-80gb", "", "latency", 8192, (256, 8192, True)),
    ("h100", "0.6.3.post2", "serving", 91680, (256, 512, True)),  # V0: chunked prefill above 32K
    ("h100", "0.6.0", "serving", 8192, (256, 8192, False)),  # V0 short context: whole prompts
    # benchmark_throughput/latency before vLLM PR #9529 (0.6.4) passed --enable-chunked-prefill's
    # store_true default (False) to LLM(): no chunking even above 32K; a 0.6.4 dev build is before 0.6.4
    ("h100", "0.6.3.post2.dev308+gb489fc3c", "throughput", 91680, (256, 91680, False)),
    ("h100", "0.6.4.dev4+gc9fc1608", "latency", 131072, (256, 131072, False)),
    ("h100", "0.6.6", "throughput", 131072, (256, 512, True)),  # scripts take EngineArgs: auto-enabled
])
def test_batch_defaults_follow_vllm(gpu, version, kind, max_model_len, expected):
    from kvplan.sim.measured import batch_defaults

    spec = load_gpu(gpu)
    run = small_run(engine_version=version, benchmark=kind)
    assert batch_defaults(run, spec.memory_gib, spec.display_name, max_model_len) == expected


@pytest.mark.parametrize("text, before", [("0.6.4.dev4+gc9fc1608", True), ("0.6.4rc1", True), ("0.6.3.post2", True),
                                          ("0.6.4", False), ("v0.6.4.post1", False), ("0.6.4+gab12", False), ("", False)])
def test_released_before_follows_pep440(text, before):
    from kvplan.plan.versions import released_before

    assert released_before(text, (0, 6, 4)) is before


def test_medians_are_compared_as_medians_and_only_without_a_mean(tmp_path):
    from kvplan.sim.calibration import latency_figures
    from kvplan.sim.measured import dataset_run

    figures = latency_figures(np.array([0.1, 0.2, 0.9]), np.array([0.01, 0.03]))
    assert figures["mean_ttft_ms"] == pytest.approx(400.0) and figures["median_ttft_ms"] == pytest.approx(200.0)
    assert figures["mean_tpot_ms"] == pytest.approx(20.0) and figures["median_tpot_ms"] == pytest.approx(20.0)
    record = {"record_id": "X", "gpu": "NVIDIA A100 80G", "model": "meta-llama/Llama-3.1-8B-Instruct",
              "benchmark": "serving", "dataset": "sharegpt", "request_rate": 4, "median_ttft_ms": 100.0,
              "median_tpot_ms": 14.0}
    run, _ = dataset_run(record)
    assert run.measured == {"median_ttft_ms": 100.0, "median_tpot_ms": 14.0}
    run, _ = dataset_run({**record, "mean_ttft_ms": 120.0})
    assert run.measured == {"mean_ttft_ms": 120.0, "median_tpot_ms": 14.0}


def test_ttft_above_the_saturation_rate_is_queue_dominated():
    open_loop = {"max_concurrency": None}
    assert small_run(request_rate=16.0, saturation_rate=10.2, **open_loop).queue_dominated  # served 10.2 req/s at most
    assert not small_run(request_rate=4.0, saturation_rate=3.9, **open_loop).queue_dominated  # the tail allowance
    assert not small_run(request_rate=4.0, **open_loop).queue_dominated  # nothing measured: a finite rate counts
    assert small_run(request_rate=math.inf, **open_loop).queue_dominated
    assert not small_run(request_rate=16.0, saturation_rate=10.2, max_concurrency=8).queue_dominated


def test_a_rate_sweep_takes_its_unthrottled_run_as_saturation(tmp_path):
    from kvplan.sim.measured import load_dataset

    base = {"gpu": "NVIDIA H100 80GB HBM3", "model": "meta-llama/Llama-3.1-8B-Instruct", "benchmark": "serving",
            "dataset": "sharegpt", "sweep_id": "S", "mean_ttft_ms": 50.0}
    lines = [{**base, "record_id": "A", "request_rate": 4, "request_throughput": 3.95},
             {**base, "record_id": "B", "request_rate": 16, "request_throughput": 9.9},
             {**base, "record_id": "C", "request_rate": "inf", "request_throughput": 10.2}]
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines))
    runs, _ = load_dataset(path)
    assert [r.saturation_rate for r in runs] == [10.2, 10.2, 10.2]
    assert [r.queue_dominated for r in runs] == [False, True, True]


def test_fidelity_records_draw_the_report_chart(tmp_path):
    from kvplan.report import write_report
    from kvplan.results import make_record, write_jsonl

    records = [make_record("fidelity", "serving-fidelity", "simulated", f"R{i}:output_throughput",
                           {"record": f"R{i}", "metric": "output_throughput", "engine": "vllm"},
                           {"measured": 100.0 * i, "datasheet": 250.0 * i, "loso": 110.0 * i})
               for i in range(1, 4)]
    path = tmp_path / "fidelity.jsonl"
    write_jsonl(path, records)
    report = write_report([path], tmp_path / "report")
    assert (tmp_path / "report" / "serving_fidelity.png").is_file()
    assert "Simulated vs measured" in report.index.read_text()
