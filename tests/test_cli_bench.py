"""`kvplan bench` end to end: results file, determinism, traces, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.cli.app import app
from kvplan.results import read_jsonl
from kvplan.samples import sample_path

runner = CliRunner()
SMALL = [
    "bench",
    "--num-requests",
    "60",
    "--optimizations",
    "contiguous-max,paged,paged+fp8",
    "--rate",
    "5",
]


def test_bench_writes_one_record_per_optimization(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    result = runner.invoke(app, [*SMALL, "--out", str(out)])
    assert result.exit_code == 0, result.output
    records = read_jsonl(out)
    assert [r.optimization for r in records] == ["contiguous-max", "paged", "paged+fp8"]
    assert [r.baseline for r in records] == [True, False, False]
    assert all(r.metrics["requests_finished"] == 60 for r in records)
    assert records[2].params["kv_format"] == "fp8-e4m3"
    # FP8 halves bytes per token, so the same budget holds twice the slots.
    assert records[2].metrics["pool_slots"] == pytest.approx(
        2 * records[1].metrics["pool_slots"], abs=16
    )
    assert records[1].timeseries["kv_cache_usage"]
    assert "token states" in result.output and "throughput vs base" in result.output


def test_same_seed_gives_the_same_results_file(tmp_path: Path) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for out in (first, second):
        assert runner.invoke(app, [*SMALL, "--out", str(out), "--seed", "7"]).exit_code == 0
    assert first.read_bytes() == second.read_bytes()


def test_bench_replays_a_mooncake_trace(tmp_path: Path) -> None:
    out = tmp_path / "m.jsonl"
    trace = sample_path("mooncake-trace")  # its first 200 lines, shipped in kvplan/samples
    result = runner.invoke(
        app,
        [
            "bench",
            "--trace",
            str(trace),
            "--num-requests",
            "100",
            "--gpu",
            "h100-80gb",
            "--optimizations",
            "paged",
            "--out",
            str(out),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    (record,) = read_jsonl(out)
    assert record.params["workload"]["format"] == "mooncake"
    assert record.metrics["requests_finished"] + record.metrics["requests_rejected"] == 100


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--optimizations", "paged,warp-drive"], "unknown optimization 'warp-drive'"),
        (["--rate", "0"], "rate"),
        (["--block-size", "3"], "power of two"),
        (["--workload", "tweets"], "unknown workload"),
        (["--model", "llama-3.1-70b"], "no room for a KV cache"),
        (["--num-requests", "0"], "--num-requests"),
        (["--preemption", "teleport"], "--preemption"),
    ],
)
def test_bad_bench_input_is_one_line_and_leaves_no_file(
    args: list[str], message: str, tmp_path: Path
) -> None:
    out = tmp_path / "r.jsonl"
    result = runner.invoke(app, ["bench", "--num-requests", "20", *args, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_malformed_trace_line_names_file_and_line(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    good = {"arrival_s": 0.0, "prompt_len": 10, "output_len": 5}
    trace.write_text(json.dumps(good) + "\n" + '{"arrival_s": 1.0, "prompt_len": "ten"}\n')
    result = runner.invoke(
        app,
        [
            "bench",
            "--trace",
            str(trace),
            "--optimizations",
            "paged",
            "--out",
            str(tmp_path / "r.jsonl"),
        ],
    )
    assert result.exit_code == 2
    assert f"{trace}:2" in result.stderr and "--skip-bad-lines" in result.stderr
    result = runner.invoke(
        app,
        [
            "bench",
            "--trace",
            str(trace),
            "--optimizations",
            "paged",
            "--skip-bad-lines",
            "--out",
            str(tmp_path / "r.jsonl"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "skipped 1 malformed" in result.stderr


def test_results_reader_rejects_empty_and_truncated_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match="is empty"):
        read_jsonl(empty)
    truncated = tmp_path / "cut.jsonl"
    truncated.write_text('{"schema": "kvplan.result/1", "kind": "bench"')
    with pytest.raises(ValueError, match="cut.jsonl:1"):
        read_jsonl(truncated)


def test_a_run_that_serves_nothing_is_exit_2_and_writes_nothing(tmp_path: Path) -> None:
    """Every 4,000-token request against a 0.05 GiB pool (22 blocks of 16 slots of Qwen3-8B's
    147,456 B, 21 after vLLM's null block: 336 slots): no 0 tok/s and NaN results file, one
    line naming the pool, the request and the flags."""
    out = tmp_path / "r.jsonl"
    out.write_text("previous\n")
    result = runner.invoke(
        app,
        [
            "bench",
            "--model",
            "qwen3-8b",
            "--gpu",
            "l4",
            "--kv-cache-gib",
            "0.05",
            "--num-requests",
            "5",
            "--workload",
            "random",
            "--input-len",
            "4000",
            "--optimizations",
            "paged",
            "--out",
            str(out),
        ],
        env={"COLUMNS": "100"},
    )
    assert result.exit_code == 2
    line = result.output.strip().splitlines()[-1]
    assert (
        "all 5 requests were rejected" in line
        and "336 token slots" in line
        and "--kv-cache-gib" in line
    )
    assert out.read_text() == "previous\n"
