"""`kvplan profile` end to end on CPU (a tiny model, a tiny grid), and --perf-table on bench,
plan and sweep files: used where given, refused in one line where it cannot be."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from profile_helpers import STORIES, write_model_table
from typer.testing import CliRunner

from kvplan.cli.app import app
from kvplan.results import read_jsonl
from kvplan.sizing.operators.profile_table import AttentionShape, GemmShape, read_table
from kvplan.sizing.operators.shapes import model_ops
from kvplan.spec import parse_kv_format
from kvplan.spec.resolve import load_model

runner = CliRunner()
ENV = {"COLUMNS": "120"}
TINY = ["--max-tokens", "4", "--max-seqs", "2", "--max-context", "8", "--points", "2"]


def _invoke(*args: str):
    return runner.invoke(app, list(args), env=ENV)


def _one_line_error(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    return lines[0]


def test_profile_measures_every_operator_of_a_tiny_model(tmp_path: Path) -> None:
    out = tmp_path / "perf.json"
    result = _invoke("profile", STORIES, *TINY, "--repeats", "1", "--output", str(out))
    assert result.exit_code == 0, result.output
    table = read_table(out)
    spec = load_model(STORIES)
    ops = model_ops(spec, 1, parse_kv_format("auto", spec))
    assert set(table.gemm) == {GemmShape.of(g) for g in (*ops.gemms, ops.lm_head)}
    shapes = {AttentionShape.of(op) for op in ops.attention}
    assert set(table.decode_attention) == set(table.prefill_attention) == shapes
    assert table.memory is not None and not table.all_reduce
    assert table.device.kind == "cpu" and table.device.threads == 1
    assert table.device.dtype == "bf16" and table.device.attention == "torch"
    gemm = table.gemm[GemmShape.of(ops.gemms[0])]
    assert gemm.x == (1.0, 2.0, 3.0, 4.0)  # 1 .. 16 exactly, cut at --max-tokens
    assert table.measured_for["model"] == spec.name
    assert "decode attention" in result.output and "perf table:" in result.output


def test_a_refused_profile_leaves_the_existing_table(tmp_path: Path) -> None:
    out = tmp_path / "perf.json"
    out.write_text("kept")
    for args, problem in [
        (["--max-tokens", "1"], "--max-tokens must be a whole number from 2"),
        (["--dtype", "int8"], "--dtype must be bf16, fp16 or fp32, got 'int8'"),
        (["--device", "tpu"], "unknown device 'tpu'"),
        (["--repeats", "0"], "--repeats must be 1 to 1,000"),
        (["--kv-dtype", "fp7"], "fp7"),
    ]:
        result = _invoke("profile", STORIES, *args, "--output", str(out))
        assert result.exit_code == 2, result.output
        assert problem in _one_line_error(result.output), result.output
    assert out.read_text() == "kept"


def test_profile_without_torch_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kvplan.spec.extras.missing_modules", lambda extra: ["torch"])
    result = _invoke("profile", STORIES)
    assert result.exit_code == 2
    line = _one_line_error(result.output)
    assert line.startswith("error: kvplan profile needs torch") and "kvplan[real]" in line


def test_profile_on_cuda_without_a_gpu_is_refused() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here")
    result = _invoke("profile", STORIES, "--device", "cuda")
    assert result.exit_code == 2
    assert "--device cuda was asked but no CUDA GPU is available" in result.output


BENCH = ["bench", "--model", STORIES, "--gpu", "h100", "--num-requests", "12", "--rate", "4",
         "--optimizations", "paged", "--max-model-len", "256"]  # fmt: skip


def test_bench_runs_with_a_perf_table_and_records_it(tmp_path: Path) -> None:
    table = write_model_table(tmp_path / "perf.json")
    out = tmp_path / "r.jsonl"
    result = _invoke(*BENCH, "--perf-table", str(table), "--out", str(out))
    assert result.exit_code == 0, result.output
    (record,) = read_jsonl(out)
    assert record.params["perf_table"] == str(table)
    assert record.metrics["requests_finished"] == 12


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        (["--mode", "real"], "--perf-table times simulated steps from measured operators; drop it "
                             "with --mode real"),
        ([], "--perf-table file '{bad}': gemm[0].n must be a whole number >= 1"),
    ],
)  # fmt: skip
def test_bench_refuses_a_perf_table_it_cannot_use(
    tmp_path: Path, extra: list[str], problem: str
) -> None:
    good = write_model_table(tmp_path / "perf.json")
    bad = tmp_path / "bad.json"
    data = json.loads(good.read_text())
    data["gemm"][0]["n"] = -3
    bad.write_text(json.dumps(data))
    table = good if extra else bad
    result = _invoke(*BENCH, "--perf-table", str(table), *extra, "--out", str(tmp_path / "r.jsonl"))
    assert result.exit_code == 2, result.output
    assert problem.format(bad=bad) in _one_line_error(result.output)
    assert not (tmp_path / "r.jsonl").exists()


def test_plan_refuses_an_unreadable_perf_table(tmp_path: Path) -> None:
    result = _invoke(
        "plan", STORIES, "--gpu", "h100", "--rate", "1", "--slo", "ttft_p90=2s",
        "--perf-table", str(tmp_path / "absent.json"),
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "--perf-table file '" in _one_line_error(result.output)
    assert "absent.json' cannot be read" in result.output


@pytest.mark.parametrize(
    ("fixed", "problem"),
    [
        ('perf_table = "{absent}"', "perf_table file '{absent}' cannot be read"),
        ("perf_table = 3", "perf_table must name a file written by `kvplan profile`, got 3"),
        ('perf_table = "{good}"\nmode = "real"', "perf_table times simulated steps"),
    ],
)
def test_a_sweep_refuses_a_perf_table_before_any_point(
    tmp_path: Path, fixed: str, problem: str
) -> None:
    names = {"absent": tmp_path / "absent.json", "good": write_model_table(tmp_path / "p.json")}
    study = tmp_path / "study.toml"
    study.write_text(
        f'[fixed]\nnum_requests = 10\nmodel = "{STORIES}"\n{fixed.format(**names)}\n'
        "[axes]\nrate = [1, 4]\n"
    )
    result = _invoke("sweep", str(study), "--out", str(tmp_path / "out"), "--workers", "1")
    assert result.exit_code == 2, result.output
    assert problem.format(**names) in result.output
    assert not (tmp_path / "out").exists()


def test_plan_and_bench_hand_the_table_to_the_engine_factory(tmp_path: Path) -> None:
    from kvplan.bench.config import BenchConfig
    from kvplan.bench.simulation import engine_factory
    from kvplan.deploy.demand import Candidate, Demand
    from kvplan.deploy.slo import parse_slo

    table = str(write_model_table(tmp_path / "perf.json"))
    demand = Demand(model=STORIES, rate=1.0, slo=parse_slo("ttft_p90=2s"), perf_table=table)
    config = demand.config(Candidate("h100"))
    assert config.perf_table == table
    assert engine_factory(config).perf_table == table  # type: ignore[attr-defined]
    flat = BenchConfig.from_flat(model=STORIES, perf_table=table)
    assert engine_factory(flat).perf_table == table  # type: ignore[attr-defined]
