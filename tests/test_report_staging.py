"""A report killed mid-build (SIGKILL: no `finally` runs) leaves its staging folder beside the
report; the next report into that folder removes the staging folders whose process is gone,
and leaves a running report's, another folder's and foreign ones alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.cli.app import app
from kvplan.results.atomic import swap_folder
from kvplan.results.staging import STAGING_PREFIX, remove_stale_staging, staging_prefix


@pytest.fixture(scope="module")
def gone_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _leftovers(parent: Path, gone_pid: int) -> dict[str, Path]:
    folders = {
        "stale": parent / f"{STAGING_PREFIX}report-{gone_pid}-k1ll3d_x",
        "live": parent / f"{STAGING_PREFIX}report-{os.getpid()}-runn1ng",
        "other folder's": parent / f"{STAGING_PREFIX}other-{gone_pid}-k1ll3d_y",
        "without a pid": parent / f"{STAGING_PREFIX}report-abc12345",
    }
    for folder in folders.values():
        folder.mkdir()
        (folder / "index.html").write_text("half a report")
    return folders


def test_this_process_names_its_staging_folder_by_its_pid(tmp_path: Path) -> None:
    assert staging_prefix(tmp_path / "report") == f".kvplan-staging-report-{os.getpid()}-"


def test_only_a_gone_process_staging_of_the_same_folder_is_removed(
    tmp_path: Path, gone_pid: int
) -> None:
    folders = _leftovers(tmp_path, gone_pid)
    assert remove_stale_staging(tmp_path / "report") == [folders["stale"]]
    assert {name for name, path in folders.items() if path.exists()} == {
        "live",
        "other folder's",
        "without a pid",
    }


def test_a_folder_swap_clears_what_a_killed_one_left(tmp_path: Path, gone_pid: int) -> None:
    folders = _leftovers(tmp_path, gone_pid)
    swap_folder(tmp_path / "report", lambda staging: (staging / "index.html").write_text("new"))
    assert (tmp_path / "report" / "index.html").read_text() == "new"
    assert not folders["stale"].exists()
    assert folders["live"].is_dir() and folders["other folder's"].is_dir()
    staging_left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(STAGING_PREFIX))
    assert staging_left == sorted(
        folders[k].name for k in ("live", "other folder's", "without a pid")
    )


@pytest.mark.slow  # renders a whole report (about 10 s); the swap above is the same path
def test_the_report_command_clears_a_killed_report(tmp_path: Path, gone_pid: int) -> None:
    pytest.importorskip("pandas")
    pytest.importorskip("matplotlib")
    results = tmp_path / "r.jsonl"
    runner = CliRunner()
    bench = ["bench", "--num-requests", "20", "--optimizations", "paged", "--out", str(results)]
    assert runner.invoke(app, bench).exit_code == 0
    folders = _leftovers(tmp_path, gone_pid)
    result = runner.invoke(
        app, ["report", str(results), "--out", str(tmp_path / "report")], env={"COLUMNS": "120"}
    )
    assert result.exit_code == 0, result.output
    assert not folders["stale"].exists()
    assert folders["live"].is_dir() and (folders["live"] / "index.html").is_file()
