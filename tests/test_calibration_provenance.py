"""A calibration file says what it was fitted on (model, GPU and its family, engine and
release), and bench, plan and a sweep warn in one line when they use it on another model,
GPU or engine; names are compared resolved, so an alias of the same model or GPU matches.
Files written before the record existed load with no warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from kvplan.cli.app import app
from kvplan.samples import sample_path
from kvplan.sim.calibration_file import FittedOn, read_calibration
from kvplan.sim.step_models import calibration_mismatch

runner = CliRunner()
FITTED = "qwen3-14b / h100-80gb / vllm 0.11.0"


def _run(args: list[str]) -> Result:
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "120"})


@pytest.fixture(scope="module")
def calibration(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's calibration: the shipped `vllm bench serve` result (Qwen3-14B, H100)."""
    out = tmp_path_factory.mktemp("calibration") / "qwen3-h100.json"
    result = _run(
        ["calibrate", sample_path("vllm-bench-result"), "--model", "qwen3-14b", "--gpu", "h100"]
        + ["--engine-version", "0.11.0", "--out", out]
    )
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def older(calibration: Path, tmp_path: Path) -> Path:
    """The same file as kvplan wrote it before it recorded `fitted_on`."""
    data = json.loads(calibration.read_text())
    del data["fitted_on"]
    path = tmp_path / "older.json"
    path.write_text(json.dumps(data))
    return path


def _warnings(result: Result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("warning:")]


def test_calibrate_writes_what_the_fit_ran_on(calibration: Path) -> None:
    data = json.loads(calibration.read_text())
    assert data["fitted_on"] == {
        "model": "qwen3-14b",
        "gpu": "h100-80gb",  # resolved: --gpu h100
        "gpu_family": "hopper",
        "engine": "vllm",
        "engine_version": "0.11.0",
    }
    fitted = read_calibration(calibration).fitted_on
    assert fitted == FittedOn("qwen3-14b", "h100-80gb", "hopper", "vllm", "0.11.0")
    assert fitted.describe() == FITTED


def test_an_older_file_loads_and_is_never_warned_about(older: Path) -> None:
    assert read_calibration(older).fitted_on is None
    assert calibration_mismatch(older, "llama-3.1-8b", "l4") is None


def test_bench_warns_once_naming_both_setups(
    calibration: Path, older: Path, tmp_path: Path
) -> None:
    quick = ["bench", "--num-requests", "5", "--optimizations", "paged"]
    result = _run([*quick, "--calibration", calibration, "--out", tmp_path / "a.jsonl"])
    assert result.exit_code == 0, result.output
    assert _warnings(result) == [
        f"warning: --calibration file '{calibration}' was fitted on {FITTED}; this run is "
        "llama-3.1-8b / l4 / vllm: its overhead may not transfer"
    ]
    # the same model and GPU under other names (an HF id, the name nvidia-smi prints): no warning
    same = ["--model", "Qwen/Qwen3-14B", "--gpu", "NVIDIA H100 80GB HBM3"]
    result = _run([*quick, *same, "--calibration", calibration, "--out", tmp_path / "b.jsonl"])
    assert result.exit_code == 0, result.output
    assert _warnings(result) == []
    result = _run([*quick, "--calibration", older, "--out", tmp_path / "c.jsonl"])
    assert result.exit_code == 0 and _warnings(result) == [], result.output


def test_plan_warns_for_each_gpu_the_file_was_not_fitted_on(calibration: Path) -> None:
    result = _run(
        ["plan", "qwen3-14b", "--rate", "1", "--gpu", "h100,l4", "--tp", "1", "--json"]
        + ["--calibration", calibration, "--num-requests", "10", "--workers", "1"]
        + ["--workload", "random", "--input-len", "100", "--output-len", "10"]
    )
    assert result.exit_code == 0, result.output
    assert _warnings(result) == [
        f"warning: --calibration file '{calibration}' was fitted on {FITTED}; this run is "
        "qwen3-14b / l4 / vllm: its overhead may not transfer"
    ]


def test_a_sweep_warns_in_its_own_words(calibration: Path, tmp_path: Path) -> None:
    study = tmp_path / "study.toml"
    study.write_text(
        f'[fixed]\nnum_requests = 5\ncalibration = "{calibration}"\nmodel = "qwen3-14b"\n'
        'engine_version = "0.11.0"\n[axes]\ngpu = ["h100", "l4"]\n'
    )
    result = _run(["sweep", study, "--out", tmp_path / "out", "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert _warnings(result) == [
        f"warning: calibration file '{calibration}' was fitted on {FITTED}; this run is "
        "qwen3-14b / l4 / vllm 0.11.0: its overhead may not transfer"
    ]


@pytest.mark.parametrize(
    ("engine", "version", "differs"),
    [
        ("vllm", None, False),  # the newest release: V1, as 0.11.0 is
        ("vllm", "0.11", False),  # the same release, written shorter
        ("vllm", "0.11.1", False),  # a patch release: the same scheduler and kernels
        ("vllm", "0.12.0", True),  # another minor release
        ("vllm", "0.6.3", True),  # V0: other overheads
        ("sglang", None, True),
    ],
)
def test_the_engine_differs_by_name_generation_or_minor_release(
    calibration: Path, engine: str, version: str | None, differs: bool
) -> None:
    found = calibration_mismatch(calibration, "qwen3-14b", "h100", engine, version)
    assert (found is not None) == differs


@pytest.mark.parametrize(
    "fitted_on",
    [
        "h100",
        {"model": "qwen3-14b", "gpu": 3, "gpu_family": "hopper", "engine": "vllm"},
        {"model": "qwen3-14b", "gpu": "h100", "gpu_family": "hopper", "engine": "vllm", "x": 1},
    ],
)
def test_a_malformed_record_is_refused_naming_the_key(
    calibration: Path, tmp_path: Path, fitted_on: object
) -> None:
    data = json.loads(calibration.read_text())
    data["fitted_on"] = fitted_on
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=rf"calibration file '{path}': fitted_on"):
        read_calibration(path)
