"""The measured-run side of the step model: replays of published and user runs, the fit,
`kvplan calibrate` with its held-out errors, reading vLLM's result files and the serving
dataset, and the engine-release defaults a replay uses."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from calibration_helpers import VLLM_RESULT, small_run
from typer.testing import CliRunner

from kvplan.cli.app import app
from kvplan.fit.vllm_results import read_result
from kvplan.sim.calibration_file import read_calibration
from kvplan.spec.resolve import load_gpu

runner = CliRunner()


def test_reads_vllm_json_and_printed_block(tmp_path):
    saved = tmp_path / "vllm-infqps-concurrency8.json"
    saved.write_text(json.dumps(VLLM_RESULT))
    run = read_result(saved, {"gpu": "h100-80gb", "tp": 1, "model": "llama-3.1-8b"})
    assert (
        run.max_concurrency == 8
        and run.input_len == 256
        and run.output_len == 64
        and math.isinf(run.request_rate)
    )
    assert run.measured == {"output_throughput": 256.0, "mean_ttft_ms": 60.0, "mean_tpot_ms": 28.0}
    block = tmp_path / "printed.txt"
    block.write_text(
        "============ Serving Benchmark Result ============\n"
        "Successful requests:                     40        \n"
        "Maximum request concurrency:             8         \n"
        "Benchmark duration (s):                  10.00     \n"
        "Total input tokens:                      10240     \n"
        "Total generated tokens:                  2560      \n"
        "Output token throughput (tok/s):         256.00    \n"
        "Mean TTFT (ms):                          60.00     \n"
        "Mean TPOT (ms):                          28.00     \n"
    )
    assert (
        read_result(block, {"gpu": "h100-80gb", "model": "llama-3.1-8b"}).measured == run.measured
    )


def test_calibrate_cli_writes_a_file_bench_uses(tmp_path):
    saved = tmp_path / "result.json"
    saved.write_text(json.dumps(VLLM_RESULT))
    cal = tmp_path / "cal.json"
    result = runner.invoke(
        app,
        ["calibrate", str(saved), "--model", "llama-3.1-8b", "--gpu", "h100", "--out", str(cal)],
    )
    assert result.exit_code == 0, result.output
    assert "output_throughput" in result.output and "%" in result.output
    overhead = read_calibration(cal).overhead
    assert overhead.source.startswith("calibration cal.json: fit on")
    out = tmp_path / "bench.jsonl"
    result = runner.invoke(
        app,
        [
            "bench",
            "--gpu",
            "h100",
            "--workload",
            "random",
            "--input-len",
            "256",
            "--output-len",
            "64",
            "--rate",
            "inf",
            "--num-requests",
            "40",
            "--max-concurrency",
            "8",
            "--optimizations",
            "paged",
            "--calibration",
            str(cal),
            "--format",
            "vllm",
            "--out",
            str(out),
        ],
    )
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
        throughput = 256.0 * concurrency / 8 * 28.0 / tpot
        duration = 2560 / throughput  # every throughput its total over the duration, as vLLM's
        figures = {"output_throughput": throughput, "request_throughput": 40 / duration}
        figures |= {"duration": duration, "total_token_throughput": 12800 / duration}
        saved.write_text(
            json.dumps(
                {**VLLM_RESULT, "max_concurrency": concurrency, "mean_tpot_ms": tpot, **figures}
            )
        )
        files.append(str(saved))
    cal = tmp_path / "cal.json"
    result = runner.invoke(
        app,
        ["calibrate", *files, "--model", "llama-3.1-8b", "--gpu", "h100", "--out", str(cal)],
        env={"COLUMNS": "120"},
    )
    assert result.exit_code == 0, result.output
    assert "held out: each run predicted by a fit without it" in result.output
    held = json.loads(cal.read_text())["held_out"]
    assert held["output_throughput_runs"] == 2 and held["mean_tpot_ms_runs"] == 2
    assert held["mean_tpot_ms_error"] >= 0
    out = tmp_path / "bench.jsonl"
    result = runner.invoke(
        app,
        [
            "bench",
            "--gpu",
            "h100",
            "--num-requests",
            "20",
            "--optimizations",
            "paged",
            "--calibration",
            str(cal),
            "--out",
            str(out),
        ],
        env={"COLUMNS": "160"},
    )
    assert result.exit_code == 0, result.output
    band = json.loads(out.read_text().splitlines()[0])["metrics"]["time_error_band"]
    assert band["basis"].startswith("leave one run out") and band["mean_tpot_ms_runs"] == 2
    assert "leave one run out" in result.output


def test_calibrate_bad_inputs_exit_2(tmp_path):
    junk = tmp_path / "junk.txt"
    junk.write_text("nothing here")
    result = runner.invoke(
        app, ["calibrate", str(junk), "--gpu", "h100", "--out", str(tmp_path / "c.json")]
    )
    assert result.exit_code == 2 and "Serving Benchmark Result" in result.output
    assert not (tmp_path / "c.json").exists()
    result = runner.invoke(
        app,
        [
            "bench",
            "--calibration",
            str(tmp_path / "missing.json"),
            "--num-requests",
            "5",
            "--optimizations",
            "paged",
            "--out",
            str(tmp_path / "b.jsonl"),
        ],
    )
    assert result.exit_code == 2 and "calibration file" in result.output


def test_shipped_dataset_replays(shared_data):
    from kvplan.fit.measured import load_dataset

    runs, skipped = load_dataset(shared_data / "serving" / "serving_benchmarks.jsonl")
    assert len(runs) + len(skipped) == 103 and len(runs) >= 80
    assert {r.gpu for r in runs} == {"h100-80gb", "a100-80gb", "mi300x"}


@pytest.mark.parametrize(
    "gpu, version, kind, max_model_len, expected",
    [
        ("h100", "v0.11.0", "serving", 40960, (1024, 8192, True)),  # V1, >= 70 GiB, not A100
        ("mi300x", "0.10.0", "throughput", 8192, (1024, 16384, True)),  # offline LLM class
        (
            "a100-80gb",
            "v0.11.0",
            "serving",
            40960,
            (256, 2048, True),
        ),  # the A100 exception (vLLM PR #17885)
        ("a100-80gb", "", "latency", 8192, (256, 8192, True)),
        (
            "h100",
            "0.6.3.post2",
            "serving",
            91680,
            (256, 512, True),
        ),  # V0: chunked prefill above 32K
        ("h100", "0.6.0", "serving", 8192, (256, 8192, False)),  # V0 short context: whole prompts
        # benchmark_throughput/latency before vLLM PR #9529 (0.6.4) passed
        # --enable-chunked-prefill's
        # store_true default (False) to LLM(): no chunking even above 32K; a 0.6.4 dev build is
        # before 0.6.4
        ("h100", "0.6.3.post2.dev308+gb489fc3c", "throughput", 91680, (256, 91680, False)),
        ("h100", "0.6.4.dev4+gc9fc1608", "latency", 131072, (256, 131072, False)),
        (
            "h100",
            "0.6.6",
            "throughput",
            131072,
            (256, 512, True),
        ),  # scripts take EngineArgs: auto-enabled
    ],
)
def test_batch_defaults_follow_vllm(gpu, version, kind, max_model_len, expected):
    from kvplan.fit.measured import batch_defaults

    spec = load_gpu(gpu)
    run = small_run(engine_version=version, benchmark=kind)
    assert batch_defaults(run, spec.memory_gib, spec.display_name, max_model_len) == expected


@pytest.mark.parametrize(
    "text, before",
    [
        ("0.6.4.dev4+gc9fc1608", True),
        ("0.6.4rc1", True),
        ("0.6.3.post2", True),
        ("0.6.4", False),
        ("v0.6.4.post1", False),
        ("0.6.4+gab12", False),
        ("", False),
    ],
)
def test_released_before_follows_pep440(text, before):
    from kvplan.engines.versions import released_before

    assert released_before(text, (0, 6, 4)) is before


def test_medians_are_compared_as_medians_and_only_without_a_mean(tmp_path):
    from kvplan.fit.measured import dataset_run
    from kvplan.fit.replay import latency_figures

    figures = latency_figures(np.array([0.1, 0.2, 0.9]), np.array([0.01, 0.03]))
    assert figures["mean_ttft_ms"] == pytest.approx(400.0) and figures[
        "median_ttft_ms"
    ] == pytest.approx(200.0)
    assert figures["mean_tpot_ms"] == pytest.approx(20.0) and figures[
        "median_tpot_ms"
    ] == pytest.approx(20.0)
    record = {
        "record_id": "X",
        "gpu": "NVIDIA A100 80G",
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "benchmark": "serving",
        "dataset": "sharegpt",
        "request_rate": 4,
        "median_ttft_ms": 100.0,
        "median_tpot_ms": 14.0,
    }
    run, _ = dataset_run(record)
    assert run.measured == {"median_ttft_ms": 100.0, "median_tpot_ms": 14.0}
    run, _ = dataset_run({**record, "mean_ttft_ms": 120.0})
    assert run.measured == {"mean_ttft_ms": 120.0, "median_tpot_ms": 14.0}


def test_ttft_above_the_saturation_rate_is_queue_dominated():
    open_loop = {"max_concurrency": None}
    assert small_run(
        request_rate=16.0, saturation_rate=10.2, **open_loop
    ).queue_dominated  # served 10.2 req/s at most
    assert not small_run(
        request_rate=4.0, saturation_rate=3.9, **open_loop
    ).queue_dominated  # the tail allowance
    assert not small_run(
        request_rate=4.0, **open_loop
    ).queue_dominated  # nothing measured: a finite rate counts
    assert small_run(request_rate=math.inf, **open_loop).queue_dominated
    assert not small_run(request_rate=16.0, saturation_rate=10.2, max_concurrency=8).queue_dominated


def test_a_rate_sweep_takes_its_unthrottled_run_as_saturation(tmp_path):
    from kvplan.fit.measured import load_dataset

    base = {
        "gpu": "NVIDIA H100 80GB HBM3",
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "benchmark": "serving",
        "dataset": "sharegpt",
        "sweep_id": "S",
        "mean_ttft_ms": 50.0,
    }
    lines = [
        {**base, "record_id": "A", "request_rate": 4, "request_throughput": 3.95},
        {**base, "record_id": "B", "request_rate": 16, "request_throughput": 9.9},
        {**base, "record_id": "C", "request_rate": "inf", "request_throughput": 10.2},
    ]
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines))
    runs, _ = load_dataset(path)
    assert [r.saturation_rate for r in runs] == [10.2, 10.2, 10.2]
    assert [r.queue_dominated for r in runs] == [False, True, True]


def test_fidelity_records_draw_the_report_chart(tmp_path):
    from kvplan.report import write_report
    from kvplan.results import make_record, write_jsonl

    records = [
        make_record(
            "fidelity",
            "serving-fidelity",
            "simulated",
            f"R{i}:output_throughput",
            {"record": f"R{i}", "metric": "output_throughput", "engine": "vllm"},
            {"measured": 100.0 * i, "zero_overhead": 250.0 * i, "held_out_model": 110.0 * i},
        )
        for i in range(1, 4)
    ]
    path = tmp_path / "fidelity.jsonl"
    write_jsonl(path, records)
    report = write_report([path], tmp_path / "report")
    assert (tmp_path / "report" / "serving_fidelity.png").is_file()
    assert "Simulated vs measured" in report.index.read_text()
