"""Hardening for `kvplan sweep`: finished points are never lost, bad sweep files and foreign
results are one-line errors, failed points are named, and interrupts stop the workers."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from ci_helpers import require_in_ci
from hardening_helpers import fails_cleanly, invoke

import kvplan.sweep.grid as sweep_module
from kvplan.sweep.grid import load_spec, run_sweep

STUDY = """
[fixed]
num_requests = 12
model = "llama-3.1-8b"
[axes]
rate = [2, 8, 32]
optimization = ["paged"]
"""


def _study(folder: Path, text: str = STUDY, name: str = "study.toml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def _lines(results: Path) -> list[dict]:
    return [json.loads(line) for line in results.read_text().splitlines()]


def test_a_changed_grid_keeps_every_finished_point(tmp_path: Path) -> None:
    out = tmp_path / "sw"
    run_sweep(load_spec(_study(tmp_path)), out, workers=1)
    notes: list[str] = []
    fewer = load_spec(_study(tmp_path, STUDY.replace("[2, 8, 32]", "[2]"), "fewer.toml"))
    grid = run_sweep(fewer, out, workers=1, notify=notes.append)
    assert len(grid) == 1 and len(_lines(out / "results.jsonl")) == 3
    assert notes and notes[0].startswith("2 finished points") and "new --out" in notes[0]


def test_an_interrupted_rerun_with_a_new_grid_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "sw"
    run_sweep(load_spec(_study(tmp_path)), out, workers=1)
    before = (out / "results.jsonl").read_bytes()

    def interrupted(point: dict) -> dict:
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_module, "run_point", interrupted)
    changed = load_spec(
        _study(tmp_path, STUDY.replace("num_requests = 12", "num_requests = 13"), "new.toml")
    )
    with pytest.raises(KeyboardInterrupt):
        run_sweep(changed, out, workers=1)
    assert (out / "results.jsonl").read_bytes() == before  # all 3 points kept, in the same bytes


@pytest.mark.parametrize(
    ("text", "culprit"),
    [
        ("axes = 3\n", "'axes' must be a table"),
        ("fixed = 'x'\n[axes]\nrate = [1]\n", "'fixed' must be a table"),
        ("slo = 'fast'\n[axes]\nrate = [1]\n", "'slo' must be a table"),
        ("prices = 2\n[axes]\nrate = [1]\n", "'prices' must be a table"),
        ("[axes]\nrate = [1]\n[extra]\na = 1\n", "unknown table(s) extra"),
        ("[axes]\nrate = [1]\n[slo]\nttft_p99_s = 1\n", "unknown [slo] key(s) ttft_p99_s"),
        ("[axes]\nrate = [1]\n[slo]\nttft_p90_s = -1\n", "slo.ttft_p90_s"),
        ("[axes]\nrate = [1]\n[prices]\nl4 = nan\n", "prices.l4"),
        ("[axes]\nrate = [1, 1]\n", "axis 'rate' lists 1 twice"),
        ("[axes]\nrate = [nan]\n", "axes.rate"),
        ("[axes]\ngpu_memory_utilization = [1.5]\n", "axes.gpu_memory_utilization"),
        ("[axes]\nrate = [1]\n[fixed]\nseed = 'abc'\n", "fixed.seed"),
        ("[axes]\nrate = [1]\n[fixed]\nnum_requests = 1e15\n", "fixed.num_requests"),
        (
            "[axes]\nrate = "
            + str(list(range(1, 401)))
            + "\nseed = "
            + str(list(range(400)))
            + "\n",
            "points",
        ),
    ],
)
def test_bad_sweep_files(tmp_path: Path, text: str, culprit: str) -> None:
    fails_cleanly(["sweep", _study(tmp_path, text), "--out", tmp_path / "sw"], tmp_path, culprit)


def test_workers_zero_is_refused(tmp_path: Path) -> None:
    fails_cleanly(
        ["sweep", _study(tmp_path), "--out", tmp_path / "sw", "--workers", "0"],
        tmp_path,
        "--workers",
    )


@pytest.mark.parametrize(
    ("content", "culprit"),
    [
        ("[1, 2]\n", "results.jsonl:1: not a sweep point record"),
        ("not json\n{}\n", "results.jsonl:1: not a JSON line"),
    ],
)
def test_resume_over_foreign_results_is_refused(tmp_path: Path, content: str, culprit: str) -> None:
    (tmp_path / "sw").mkdir()
    (tmp_path / "sw" / "results.jsonl").write_text(content)
    fails_cleanly(
        ["sweep", _study(tmp_path), "--out", tmp_path / "sw"], tmp_path, culprit, "new --out"
    )


def test_resume_over_bench_results_is_refused(tmp_path: Path) -> None:
    (tmp_path / "sw").mkdir()
    assert (
        invoke(
            [
                "bench",
                "--num-requests",
                "5",
                "--optimizations",
                "paged",
                "--out",
                tmp_path / "sw" / "results.jsonl",
            ]
        ).exit_code
        == 0
    )
    fails_cleanly(
        ["sweep", _study(tmp_path), "--out", tmp_path / "sw"], tmp_path, "not a sweep point record"
    )


def test_all_points_failing_is_an_error_naming_the_point(tmp_path: Path) -> None:
    study = _study(tmp_path, STUDY.replace("[axes]", '[axes]\ngpu = ["warp-9000"]'))
    result = invoke(["sweep", study, "--out", tmp_path / "sw", "--workers", "1"])
    assert result.exit_code == 2
    assert "all 3 points failed (first: gpu=warp-9000, rate=2, optimization=paged" in result.stderr
    assert "failed gpu=warp-9000, rate=8, optimization=paged: unknown GPU" in result.output


def test_a_sweep_without_gpu_uses_benchs_default_gpu(tmp_path: Path) -> None:
    import inspect

    from kvplan.cli.bench import bench

    bench_default = inspect.signature(bench).parameters["gpu"].default
    records = run_sweep(
        load_spec(_study(tmp_path, STUDY.replace("[2, 8, 32]", "[2]"))), tmp_path / "sw", workers=1
    )
    assert records[0].params["gpu"] == bench_default == "l4"


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _descendants(pid: int) -> list[int]:
    found, frontier = [], [pid]
    while frontier:
        children = [child for parent in frontier for child in _children(parent)]
        found += children
        frontier = children
    return found


def _running(pids: list[int]) -> list[int]:
    def alive(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    return [pid for pid in pids if alive(pid)]


def _busy_sweep(
    folder: Path,
    num_requests: int,
    options: list[str],
    processes: int,
    find: Callable[[int], list[int]],
) -> tuple[subprocess.Popen[bytes], list[int]]:
    """A sweep of long points, once `find` sees `processes` of its helpers and they have been
    running points for a while; returns it and those helpers."""
    study = _study(
        folder,
        STUDY.replace("num_requests = 12", f"num_requests = {num_requests}").replace(
            "[2, 8, 32]", "[2, 4, 8, 16]"
        ),
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvplan",
            "sweep",
            str(study),
            "--out",
            str(folder / "sw"),
            *options,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 90
    helpers: list[int] = []
    while time.monotonic() < deadline and len(helpers) < processes:
        time.sleep(0.2)
        helpers = find(proc.pid)
    assert len(helpers) >= processes, f"the sweep never started its helpers: {helpers}"
    time.sleep(3.0)  # they are running points now
    return proc, find(proc.pid)


@pytest.mark.slow  # a pool started and killed: 4 s on 2 cores; `pytest -m slow` runs it
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_stops_the_pool_workers(tmp_path: Path) -> None:
    proc, workers = _busy_sweep(tmp_path, 100000, ["--workers", "2"], 2, _children)
    os.kill(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 143, stderr
    assert stderr.decode().strip().splitlines()[-1].startswith("error: terminated (SIGTERM)")
    time.sleep(0.5)
    assert _running(workers) == [], f"orphaned workers: {_running(workers)}"
    assert not [
        p for p in (tmp_path / "sw").iterdir() if p.name.startswith(".")
    ]  # no temp file left


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize(
    "how",
    [pytest.param(how, marks=pytest.mark.slow) for how in (signal.SIGINT, signal.SIGKILL)],
)
def test_a_stopped_ray_sweep_leaves_no_ray_process(tmp_path: Path, how: signal.Signals) -> None:
    """Ctrl-C returns at once (the Ray driver is a child process, execution/ray_driver.py), the
    driver then tears the cluster down without a traceback; a killed sweep's driver does the
    same."""
    require_in_ci(
        importlib.util.find_spec("ray") is not None, "ray", "pip install -e '.[all]' installs it"
    )
    # driver, raylet, GCS, workers...
    proc, ray_processes = _busy_sweep(tmp_path, 100000, ["--executor", "ray"], 4, _descendants)
    if how == signal.SIGINT:  # Ctrl-C in a terminal signals the whole foreground process group
        os.killpg(proc.pid, how)
    else:
        os.kill(proc.pid, how)
    _, stderr = proc.communicate(timeout=60)  # the driver holds stderr until its teardown ends
    if how == signal.SIGINT:
        assert proc.returncode == 130, stderr
        assert stderr.decode().strip().splitlines()[-1].startswith("error: interrupted (Ctrl-C)")
    assert "Traceback" not in stderr.decode()
    # The driver runs Ray's own shutdown; on a loaded machine Ray SIGKILLs a raylet that has not
    # stopped within 1 s, and its agents then exit on their own liveness check (about 60 s)
    deadline = time.monotonic() + 90
    while _running(ray_processes) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _running(ray_processes) == [], f"Ray processes left running: {_running(ray_processes)}"
