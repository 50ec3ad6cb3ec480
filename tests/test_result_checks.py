"""A result record's metrics are numbers except the schema's descriptive ones (words, yes/no),
which are the metric registry's TEXT and FLAG metrics for a bench record: a run made with the
step model or a calibration file reads back and draws its report; a number written as text,
or text where a number belongs, is refused naming the metric."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from calibration_helpers import VLLM_RESULT
from typer.testing import CliRunner

from kvplan.cli.app import app
from kvplan.core.metric_registry import METRICS, Shape, Unit
from kvplan.results import read_jsonl, read_record
from kvplan.results.schema import DESCRIPTIVE_METRICS, SCHEMA

runner = CliRunner()
DESCRIBED_BY = {Unit.TEXT: str, Unit.FLAG: bool}  # the registry's units that are not numbers


def _line(**metrics: object) -> str:
    record = {
        "schema": SCHEMA,
        "kind": "bench",
        "run_id": "r",
        "optimization": "paged",
        "params": {},
        "metrics": metrics,
    }
    return json.dumps(record)


def test_the_schema_describes_what_the_registry_does() -> None:
    for entry in METRICS:
        if entry.is_pattern or entry.shape is not Shape.SCALAR:
            continue
        assert DESCRIPTIVE_METRICS.get(entry.name) is DESCRIBED_BY.get(entry.unit), entry.name


def test_every_registered_metric_reads_back_in_its_own_kind() -> None:
    values = {
        Shape.PER_POD: [1.0, 2.0],
        Shape.PER_LAYER: [3, 4],
        Shape.LIST: ["no room"],
        Shape.RECORD: {"basis": "leave one run out"},
    }
    scalars = {str: "calibration h100.json", bool: True}
    metrics = {
        entry.name: values.get(entry.shape, scalars.get(DESCRIBED_BY.get(entry.unit), 1.5))
        for entry in METRICS
        if not entry.is_pattern
    }
    assert read_record(_line(**metrics)).metrics == metrics


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("ttft_p50_s", "12", "metric 'ttft_p50_s' must be a number, got '12'"),
        ("ttft_p50_s", True, "metric 'ttft_p50_s' must be a number, got True"),
        ("step_model", 3, "metric 'step_model' must be a text, got 3"),
        ("overloaded", 1, "metric 'overloaded' must be true or false, got 1"),
        ("overloaded", "yes", "metric 'overloaded' must be true or false, got 'yes'"),
    ],
)
def test_a_value_of_the_wrong_kind_is_refused(name: str, value: object, problem: str) -> None:
    with pytest.raises(ValueError) as caught:
        read_record(_line(**{name: value}), "r.jsonl:1")
    assert str(caught.value).startswith(f"r.jsonl:1: {problem}; ")


def _calibrated_bench(tmp_path: Path, *options: str):
    measured = tmp_path / "measured.json"
    measured.write_text(json.dumps(VLLM_RESULT))
    calibration = tmp_path / "h100.json"
    args = ["--model", "llama-3.1-8b", "--gpu", "h100", "--out", str(calibration)]
    assert runner.invoke(app, ["calibrate", str(measured), *args]).exit_code == 0
    out = tmp_path / "r.jsonl"
    result = runner.invoke(
        app,
        ["bench", "--gpu", "h100", "--num-requests", "20", "--optimizations", "paged"]
        + ["--calibration", str(calibration), "--out", str(out), *options],
        env={"COLUMNS": "120"},
    )
    assert result.exit_code == 0, result.output
    return out


def test_a_calibrated_run_reads_back(tmp_path: Path) -> None:
    (record,) = read_jsonl(_calibrated_bench(tmp_path))  # what `kvplan report` reads first
    assert "(calibration h100.json: fit on 1 run(s)" in record.metrics["step_model"]


@pytest.mark.slow  # draws the report's charts (about 10 s)
def test_a_calibrated_run_draws_its_report(tmp_path: Path) -> None:
    _calibrated_bench(tmp_path, "--report")
    assert (tmp_path / "r" / "index.html").is_file()
