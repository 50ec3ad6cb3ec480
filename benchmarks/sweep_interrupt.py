"""How fast `kvplan sweep` stops after Ctrl-C (target: within a second).

Starts a sweep of long points in a subprocess, waits until it is working (Ray: its
"Started a local Ray instance" line, then a few seconds so the tasks run), sends SIGINT
and prints the seconds until the process exited, for the local pool (2 workers),
in-process (1 worker) and Ray. A sweep that finished before the signal is reported as
such, not as a stop time.
Usage: python benchmarks/sweep_interrupt.py [--executor local|ray|all]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Each point is ~10-30 s on one core, so the sweep is still running when the signal arrives
STUDY = (
    '[fixed]\nnum_requests = 20000\nworkload = "sharegpt"\n[axes]\nrate = [1, 2, 3, 4, 5, '
    "6, 7, 8]\n"
)
RAY_READY = "Started a local Ray instance"


def _wait_until_working(
    log: Path,
    process: subprocess.Popen[bytes],
    ready_line: str | None,
    settle_s: float,
    limit_s: float = 120.0,
) -> None:
    deadline = time.monotonic() + limit_s
    while ready_line and ready_line not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            return
        time.sleep(0.1)
    time.sleep(settle_s)


def stop_seconds(
    folder: Path, extra: list[str], ready_line: str | None, settle_s: float
) -> tuple[float | None, int]:
    study = folder / "study.toml"
    study.write_text(STUDY)
    log = folder / "stderr.txt"
    command = [
        sys.executable,
        "-m",
        "kvplan",
        "sweep",
        str(study),
        "--out",
        str(folder / "out"),
        *extra,
    ]
    with log.open("wb") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        _wait_until_working(log, process, ready_line, settle_s)
        if process.poll() is not None:  # finished (or failed) before the signal: no measurement
            return None, process.returncode
        started = time.perf_counter()
        process.send_signal(signal.SIGINT)
        process.wait()
    return time.perf_counter() - started, process.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--executor", default="all", choices=("local", "ray", "all"))
    args = parser.parse_args()
    local = [
        ("local, 2 workers", ["--workers", "2"], None, 6.0),
        ("in-process, 1 worker", ["--workers", "1"], None, 6.0),
    ]
    ray = [("ray", ["--executor", "ray"], RAY_READY, 4.0)]
    cases = {"local": local, "ray": ray, "all": local + ray}[args.executor]
    for label, extra, ready_line, settle_s in cases:
        with tempfile.TemporaryDirectory() as folder:
            seconds, code = stop_seconds(Path(folder), extra, ready_line, settle_s)
        if seconds is None:
            print(f"{label:<22} finished (exit {code}) before the signal; no measurement")
        else:
            print(f"{label:<22} stopped {seconds:5.2f} s after SIGINT (exit {code}; target: < 1 s)")


if __name__ == "__main__":
    main()
