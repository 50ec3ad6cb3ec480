"""`kvplan sweep`: grid expansion, identical results across executors, resume, failures."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from ci_helpers import require_in_ci
from typer.testing import CliRunner

import kvplan.sweep.grid as sweep_module
from kvplan.cli.app import app
from kvplan.sweep.grid import load_spec, run_sweep

STUDY = """
[fixed]
workload = "sharegpt"
num_requests = 40
model = "llama-3.1-8b"
[axes]
gpu = ["l4", "a100-80gb"]
rate = [2, 8]
optimization = ["contiguous-oracle", "paged"]
[slo]
ttft_p90_s = 5.0
[prices]
l4 = 0.8
"""


@pytest.fixture
def study(tmp_path: Path) -> Path:
    path = tmp_path / "study.toml"
    path.write_text(STUDY)
    return path


def test_grid_expansion_and_stable_ids(study: Path) -> None:
    points = load_spec(study).points()
    assert len(points) == 8
    assert len({p["point_id"] for p in points}) == 8
    assert points[0] == {
        **points[0],
        "gpu": "l4",
        "rate": 2,
        "optimization": "contiguous-oracle",
        "num_requests": 40,
    }
    assert load_spec(study).points() == points


def test_process_pool_and_sequential_runs_write_the_same_bytes(study: Path, tmp_path: Path) -> None:
    spec = load_spec(study)
    run_sweep(spec, tmp_path / "one", workers=1)
    run_sweep(spec, tmp_path / "pool", workers=2)
    first = (tmp_path / "one" / "results.jsonl").read_bytes()
    assert first == (tmp_path / "pool" / "results.jsonl").read_bytes()
    assert len(first.splitlines()) == 8


@pytest.mark.slow  # 5-25 s on 2 cores; `pytest -m slow` runs it
def test_ray_gives_the_same_bytes(study: Path, tmp_path: Path) -> None:
    require_in_ci(
        importlib.util.find_spec("ray") is not None, "ray", "pip install -e '.[all]' installs it"
    )
    spec = load_spec(study)
    run_sweep(spec, tmp_path / "local", workers=2)
    run_sweep(
        spec, tmp_path / "ray", executor="ray"
    )  # a child process starts and stops the cluster
    assert (tmp_path / "local" / "results.jsonl").read_bytes() == (
        tmp_path / "ray" / "results.jsonl"
    ).read_bytes()


def test_resume_recomputes_nothing_it_had(
    study: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load_spec(study)
    out = tmp_path / "sweep"
    run_sweep(spec, out, workers=1)
    complete = (out / "results.jsonl").read_bytes()
    lines = complete.decode().splitlines(keepends=True)
    # An interrupted run: five points on disk, the last line cut mid-write.
    (out / "results.jsonl").write_text("".join(lines[:5]) + lines[5][:40])
    calls = []
    original = sweep_module.run_point
    monkeypatch.setattr(
        sweep_module, "run_point", lambda point: calls.append(point["point_id"]) or original(point)
    )
    run_sweep(spec, out, workers=1)
    assert len(calls) == 3
    assert (out / "results.jsonl").read_bytes() == complete
    calls.clear()
    run_sweep(spec, out, workers=1)
    assert calls == []


def test_failed_points_are_recorded_and_the_sweep_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    study = tmp_path / "bad.toml"
    study.write_text(STUDY.replace('gpu = ["l4", "a100-80gb"]', 'gpu = ["l4", "warp-9000"]'))
    result = CliRunner().invoke(
        app, ["sweep", str(study), "--out", str(tmp_path / "out"), "--workers", "1"]
    )
    assert result.exit_code == 0, result.output
    # the summary line wraps between words wherever the temporary folder's length puts it
    text = " ".join(result.output.split())
    assert "4 ok, 4 failed" in text and "unknown GPU 'warp-9000'" in text
    assert (tmp_path / "out" / "study.csv").is_file()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[axes\nrate = [1]", "malformed sweep file"),
        ("[axes]\nrate = []", "non-empty lists"),
        ("[axes]\nrate = [1]\n[fixed]\ncolour = 'red'", "unknown settings colour"),
    ],
)
def test_bad_sweep_files_are_one_line_errors(content: str, message: str, tmp_path: Path) -> None:
    study = tmp_path / "s.toml"
    study.write_text(content)
    result = CliRunner().invoke(app, ["sweep", str(study), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and message in result.stderr


def test_report_turns_a_sweep_into_a_study(study: Path, tmp_path: Path) -> None:
    from kvplan.report import write_report
    from kvplan.sweep.summary import summarize

    spec = load_spec(study)
    records = run_sweep(spec, tmp_path / "sweep", workers=1)
    rows = summarize(records, spec.slo_ttft_p90_s, spec.prices)
    l4_oracle = next(
        r for r in rows if r["gpu"] == "l4" and r["optimization"] == "contiguous-oracle"
    )
    p90 = {
        r.params["sweep"]["rate"]: r.metrics["ttft_s_p90"]
        for r in records
        if r.params["sweep"]["gpu"] == "l4"
        and r.params["sweep"]["optimization"] == "contiguous-oracle"
    }
    expected = [rate for rate in sorted(p90) if p90[rate] <= 5.0]
    assert l4_oracle["max_sustained_rate"] == (expected[-1] if expected else None)
    assert ("usd_per_million_output_tokens" in l4_oracle) == (
        l4_oracle["max_sustained_rate"] is not None
    )
    written = write_report([tmp_path / "sweep" / "results.jsonl"], tmp_path / "report")
    assert "study_ttft_vs_rate" in written.charts and "<h2>Study</h2>" in written.index.read_text()


def test_a_sweep_over_a_trace_uses_bench_defaults(tmp_path: Path) -> None:
    """A trace replayed by a sweep point gets `bench --trace`'s max_model_len (the model's
    maximum), so requests longer than 4096 tokens run instead of being rejected, and the
    point's metrics equal the bench run's."""
    import json

    from kvplan.results import read_jsonl

    trace = tmp_path / "long.jsonl"
    lengths = [6000, 300, 9000, 120, 5000, 700]
    trace.write_text(
        "".join(
            json.dumps({"arrival_s": 0.5 * i, "prompt_len": n, "output_len": 16}) + "\n"
            for i, n in enumerate(lengths)
        )
    )
    study = tmp_path / "trace.toml"
    study.write_text(
        f'[fixed]\ntrace = "{trace}"\nmodel = "llama-3.1-8b"\n[axes]\ngpu = ["h100-80gb"]\n'
        'optimization = ["paged"]\n'
    )
    (point,) = run_sweep(load_spec(study), tmp_path / "sweep", workers=1)
    assert point.kind == "bench", point.metrics
    out = tmp_path / "bench.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--trace",
            str(trace),
            "--model",
            "llama-3.1-8b",
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
    (bench,) = read_jsonl(out)
    assert point.params["max_model_len"] == bench.params["max_model_len"] == 131072
    assert point.metrics["requests_rejected"] == 0 and point.metrics["requests_finished"] == len(
        lengths
    )
    assert point.metrics == bench.metrics
    assert point.params["workload"] == bench.params["workload"]


def test_study_table_keeps_names_whole_at_80_columns(study: Path, tmp_path: Path) -> None:
    """The README's study printed 'contiguous-or…' at 80 columns."""
    result = CliRunner().invoke(
        app,
        ["sweep", str(study), "--out", str(tmp_path / "out"), "--workers", "1"],
        env={"COLUMNS": "80"},
    )
    assert result.exit_code == 0, result.output
    assert "…" not in result.output
    rows = [line for line in result.output.splitlines() if "contiguous-oracle" in line]
    assert {row.split()[1] for row in rows} == {"l4", "a100-80gb"}  # one whole line per GPU's group
