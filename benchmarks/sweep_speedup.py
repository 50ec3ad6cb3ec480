"""The local executor's speed-up on this machine, and the Ray path with 2 workers, on the
same 16-point grid in one run (results are byte-identical across all three).

Run: python benchmarks/sweep_speedup.py   (Ray is measured when it is installed)
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from kvplan.sweep.grid import SweepSpec, run_sweep

SPEC = SweepSpec(
    fixed={"workload": "sharegpt", "num_requests": 400, "model": "llama-3.1-8b"},
    axes={
        "gpu": ["l4", "a100-80gb"],
        "rate": [1, 2, 4, 8],
        "optimization": ["contiguous-oracle", "paged"],
    },
    slo_ttft_p90_s=5.0,
    prices={},
)


def timed(label: str, out: Path, **kwargs: object) -> tuple[float, bytes]:
    started = time.perf_counter()
    run_sweep(SPEC, out, **kwargs)
    seconds = time.perf_counter() - started
    print(f"{label:<34} {seconds:6.2f} s")
    return seconds, (out / "results.jsonl").read_bytes()


def main() -> None:
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp)
        print(f"{len(SPEC.points())} points, 400 requests each")
        one, reference = timed("local, 1 process", root / "one", workers=1)
        two, pooled = timed("local, 2 processes", root / "two", workers=2)
        print(
            f"local speed-up with 2 processes: {one / two:.2f}x; identical results: "
            f"{pooled == reference}"
        )
        try:
            import ray
        except ImportError:
            print("Ray is not installed (pip install 'kvplan[ray]'): Ray path not measured")
            return
        started = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        startup = time.perf_counter() - started
        try:
            seconds, via_ray = timed(
                "ray, 2 workers (after start-up)", root / "ray", executor="ray"
            )
        finally:
            ray.shutdown()
        print(
            f"ray start-up {startup:.1f} s; ray / 1 process: {one / seconds:.2f}x; identical "
            "results: "
            f"{via_ray == reference}"
        )
        print(
            "Ray scales by adding workers or nodes (--address HOST:PORT); each point is one task, "
            "so a grid "
            "of N points runs in about N / workers point-times plus start-up."
        )


if __name__ == "__main__":
    main()
