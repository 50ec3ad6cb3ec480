"""How fast `kvplan sweep` stops after Ctrl-C (issue 18 target: within a second).

Starts a sweep of long points in a subprocess, sends SIGINT once it is running, and prints
the seconds until the process exited, for the local pool (2 workers) and in-process (1).
Usage: python benchmarks/sweep_interrupt.py [--executor ray]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STUDY = '[fixed]\nnum_requests = 3000\nworkload = "sharegpt"\n[axes]\nrate = [1, 2, 3, 4, 5, 6, 7, 8]\n'


def stop_seconds(folder: Path, extra: list[str], warmup_s: float) -> tuple[float, int]:
    study = folder / "study.toml"
    study.write_text(STUDY)
    command = [sys.executable, "-m", "kvplan", "sweep", str(study), "--out", str(folder / "out"), *extra]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(warmup_s)
    started = time.perf_counter()
    process.send_signal(signal.SIGINT)
    process.wait()
    return time.perf_counter() - started, process.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--executor", default="local", choices=("local", "ray"))
    args = parser.parse_args()
    cases = ([("ray", ["--executor", "ray"], 25.0)] if args.executor == "ray" else
             [("local, 2 workers", ["--workers", "2"], 6.0), ("in-process, 1 worker", ["--workers", "1"], 6.0)])
    for label, extra, warmup in cases:
        with tempfile.TemporaryDirectory() as folder:
            seconds, code = stop_seconds(Path(folder), extra, warmup)
        print(f"{label:<22} stopped {seconds:5.2f} s after SIGINT (exit {code}; target: < 1 s)")


if __name__ == "__main__":
    main()
