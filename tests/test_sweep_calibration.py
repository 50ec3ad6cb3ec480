"""A sweep file's `calibration = "FILE"` is bench's --calibration FILE: its points are timed by
the file's step model, and a file the flag would refuse (or a step model set beside it) is
refused before any point runs, in one line naming the sweep file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from calibration_helpers import VLLM_RESULT
from typer.testing import CliRunner

from kvplan.bench.config import BenchConfig
from kvplan.cli.app import app
from kvplan.spec.setting_error import SettingError

runner = CliRunner()


@pytest.fixture
def calibration(tmp_path: Path) -> Path:
    measured = tmp_path / "measured.json"
    measured.write_text(json.dumps(VLLM_RESULT))
    path = tmp_path / "h100.json"
    args = ["--model", "llama-3.1-8b", "--gpu", "h100", "--out", str(path)]
    result = runner.invoke(app, ["calibrate", str(measured), *args])
    assert result.exit_code == 0, result.output
    return path


def _sweep(tmp_path: Path, fixed: str):
    study = tmp_path / "study.toml"
    study.write_text(f'[fixed]\nnum_requests = 10\ngpu = "h100"\n{fixed}\n[axes]\nrate = [1, 4]\n')
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        ["sweep", str(study), "--out", str(out), "--workers", "1"],
        env={"COLUMNS": "120"},
    )
    return result, out


def test_a_sweep_is_timed_by_its_calibration_file(tmp_path: Path, calibration: Path) -> None:
    result, out = _sweep(tmp_path, f"calibration = {json.dumps(str(calibration))}")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["params"]["sweep"]["rate"] for r in records] == [1, 4]
    for record in records:
        assert record["params"]["step_model"] == str(calibration)  # as a --calibration run
        assert record["params"]["sweep"]["calibration"] == str(calibration)
        assert "(calibration h100.json: fit on 1 run" in record["metrics"]["step_model"]


@pytest.mark.parametrize(
    ("fixed", "problem"),
    [
        ('calibration = "{missing}"', "calibration file '{missing}' cannot be read"),
        ("calibration = 3", "calibration must name a file written by `kvplan calibrate`, got 3"),
        ('calibration = "{study}"', "calibration file '{study}' cannot be read"),
        ('calibration = "{measured}"', "'{measured}' is not a kvplan calibration file"),
        (
            'calibration = "{calibration}"\nstep_model = "roofline"',
            "step_model roofline and calibration exclude each other",
        ),
        (
            'step_model = "{calibration}"',
            "step_model must be fitted or roofline, got '{calibration}'; a file written by "
            '`kvplan calibrate` goes in calibration = "FILE"',
        ),
    ],
)
def test_a_calibration_the_flag_refuses_is_refused_before_any_point(
    fixed: str, problem: str, tmp_path: Path, calibration: Path
) -> None:
    names = {
        "missing": tmp_path / "absent.json",
        "study": tmp_path / "study.toml",
        "measured": tmp_path / "measured.json",
        "calibration": calibration,
    }
    result, out = _sweep(tmp_path, fixed.format(**names))
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    study = tmp_path / "study.toml"
    assert lines[0].startswith(f"error: sweep file '{study}': {problem.format(**names)}")
    assert not out.exists()


def test_bench_config_reads_calibration_as_its_step_model(calibration: Path) -> None:
    assert BenchConfig.from_flat(calibration=str(calibration)).step_model == str(calibration)
    assert BenchConfig.from_flat(calibration=None).step_model is None
    with pytest.raises(SettingError) as caught:
        BenchConfig.from_flat(calibration=str(calibration), step_model="fitted")
    assert caught.value.settings == ("step_model", "calibration")
