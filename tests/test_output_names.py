"""Default result names never collide, and `latest` points at the newest run."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.cli.app import app
from kvplan.results import read_jsonl
from kvplan.results.latest import read_latest, timestamped_path

runner = CliRunner()
TINY = ["bench", "--num-requests", "10", "--optimizations", "paged"]


def test_two_default_runs_keep_both_files_and_latest_names_the_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for seed in ("1", "2"):
        assert runner.invoke(app, [*TINY, "--seed", seed]).exit_code == 0
    files = sorted((tmp_path / "reports").glob("bench-llama-3.1-8b-l4-*.jsonl"))
    assert len(files) == 2
    newest = read_latest(tmp_path / "reports")
    assert read_jsonl(newest)[0].params["seed"] == 2
    result = runner.invoke(
        app, ["report", "--out", str(tmp_path / "page")]
    )  # no file named: the latest
    assert result.exit_code == 0, result.output
    assert (tmp_path / "page" / "index.html").is_file()


def test_a_failing_run_leaves_the_pointer_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert runner.invoke(app, TINY).exit_code == 0
    pointer = tmp_path / "reports" / "latest"
    before = pointer.read_bytes()
    assert (
        runner.invoke(app, ["bench", "--num-requests", "10", "--optimizations", "nope"]).exit_code
        == 2
    )
    assert pointer.read_bytes() == before


def test_report_without_results_or_pointer_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["report"])
    assert result.exit_code == 2 and "kvplan bench" in result.output


def test_names_taken_within_one_second_get_a_counter(tmp_path: Path) -> None:
    now = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    first = timestamped_path(tmp_path, "bench-x-l4", now)
    assert first.name == "bench-x-l4-20260102-030405.jsonl"
    first.write_text("")
    assert (
        timestamped_path(tmp_path, "bench-x-l4", now).name == "bench-x-l4-20260102-030405-2.jsonl"
    )
