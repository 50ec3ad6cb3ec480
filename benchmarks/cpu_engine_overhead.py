"""vLLM 0.32's own time per engine step on this CPU, one thread: the engine overhead of
kvplan's operator step model (kvplan/sim/ops/overhead.py), the one part of a CPU step's
time no operator table holds.

Each proof model (tests/data/step_proof/<name>/config.json) has a tiny twin: the same
architecture, layers, experts and top-k with every width shrunk (benchmarks/cpu_steps.py
TINY_WIDTHS), so its operators cost next to nothing and a step's time is the engine's:
scheduling, input preparation, each layer's Python and op dispatch, sampling and outputs.
The twin runs through vLLM's real CPU engine (tests/vllm_driver.py --engine real --timing)
on `--requests` short prompts whose outputs end one after another, so the decode batch
sweeps every size from `--requests` down to 1; the decode-only steps are fitted as

    step_s = base_s + per_seq_s x scheduled sequences    (least squares)

pooled over `--repeats` runs, each also fitted alone to show the run-to-run spread. One
short warm-up run comes first in the driver process and is discarded: the first engine a
process builds runs its steps slower (allocator and kernel first use).

Run (one command; ~1 minute): python benchmarks/cpu_engine_overhead.py [--out FILE]
The result JSON (default benchmarks/cpu_engine_overhead.json) is what cpu_step_proof.py
--overhead reads. Timings are wall clock on a shared machine: rerun when it is quiet.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from cpu_steps import (
    CLOCKS,
    DRIVER,
    MODELS,
    decode_points,
    fit_overhead,
    overhead_scenario,
    proof_config,
    run_driver,
    tiny_twin,
    vllm_python,
)
from rich.console import Console
from rich.table import Table

DEFAULT_OUT = Path(__file__).resolve().parent / "cpu_engine_overhead.json"


def overhead_jobs(
    models: tuple[str, ...], requests: int, repeats: int, folder: Path
) -> tuple[list[tuple[dict[str, Any], Path]], dict[str, list[Path]]]:
    """The driver jobs: a warm-up (discarded), then each model's twin `repeats` times."""
    jobs = [(overhead_scenario(models[0], 8), folder / "warmup.jsonl")]
    traces: dict[str, list[Path]] = {name: [] for name in models}
    for repeat in range(repeats):
        for name in models:
            trace = folder / f"overhead-{name}-{repeat}.jsonl"
            jobs.append((overhead_scenario(name, requests, seed=repeat), trace))
            traces[name].append(trace)
    return jobs, traces


def fit_model(traces: list[Path], clock: str) -> dict[str, Any]:
    """One model's fit over the decode-only steps of all its runs, and each run's alone."""
    per_run = []
    for trace in traces:
        one = fit_overhead(*decode_points([trace], clock))
        per_run.append({"base_s": one.base_s, "per_seq_s": one.per_seq_s})
    sequences, seconds = decode_points(traces, clock)
    fit = fit_overhead(sequences, seconds)
    return {
        "base_s": fit.base_s,
        "per_seq_s": fit.per_seq_s,
        "scatter_s": fit.scatter_s,
        "base_se_s": fit.base_se_s,
        "per_seq_se_s": fit.per_seq_se_s,
        "runs": per_run,
        "points": [[n, round(t, 6)] for n, t in zip(sequences, seconds)],
    }


def measure(
    models: tuple[str, ...], requests: int, repeats: int, folder: Path, clock: str = "wall"
) -> dict[str, Any]:
    jobs, traces = overhead_jobs(models, requests, repeats, folder)
    summaries = run_driver(jobs, folder)[1:]  # the warm-up's is dropped with it
    cpu_per_wall = [float(s["cpu_per_wall"]) for s in summaries]
    return {
        "what": "vLLM CPU engine time per step, tiny twin of each model, one thread",
        "vllm": summaries[0]["vllm"],
        "driver": str(DRIVER.relative_to(DRIVER.parents[1])),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "threads": {
            "torch": int(summaries[0]["torch_threads"]),
            "cpu_per_wall_max": max(cpu_per_wall),
        },
        "requests": requests,
        "repeats": repeats,
        "clock": clock,
        "models": {
            name: {"tiny_config": tiny_twin(proof_config(name)), **fit_model(traces[name], clock)}
            for name in models
        },
    }


def show(result: dict[str, Any], console: Console) -> None:
    clock = result["clock"]
    table = Table(title=f"vLLM {result['vllm']} CPU engine time per step (tiny twins, {clock})")
    for column in ("model", "base (ms)", "per seq (us)", "scatter (ms)", "runs: base (ms)"):
        table.add_column(column, justify="left" if column == "model" else "right")
    table.add_column("points", justify="right")
    for name, fit in result["models"].items():
        runs = ", ".join(f"{r['base_s'] * 1e3:.2f}" for r in fit["runs"])
        table.add_row(
            name,
            f"{fit['base_s'] * 1e3:.2f} +- {fit['base_se_s'] * 1e3:.2f}",
            f"{fit['per_seq_s'] * 1e6:.1f} +- {fit['per_seq_se_s'] * 1e6:.1f}",
            f"{fit['scatter_s'] * 1e3:.2f}",
            runs,
            str(len(fit["points"])),
        )
    console.print(table)
    threads = result["threads"]
    console.print(
        f"torch threads {threads['torch']}, process CPU / wall at most "
        f"{threads['cpu_per_wall_max']:.2f} (1.00: one thread ran)"
    )
    for name, fit in result["models"].items():  # the points behind the fit, by batch size
        by_size: dict[int, list[float]] = {}
        for n, t in fit["points"]:
            by_size.setdefault(n, []).append(t)
        sizes = sorted(by_size)
        picked = sizes[:: max(1, len(sizes) // 8)]
        medians = ", ".join(f"{n}: {statistics.median(by_size[n]) * 1e3:.2f}" for n in picked)
        console.print(f"{name}: median step (ms) by scheduled sequences: {medians}")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help="proof models (comma list)")
    ap.add_argument("--requests", type=int, default=32, help="largest decode batch")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument(
        "--clock", choices=sorted(CLOCKS), default="wall", help="cpu: on a busy machine"
    )
    args = ap.parse_args()
    console = Console()
    console.print(f"vLLM python: {vllm_python()}")
    models = tuple(m for m in args.models.split(",") if m)
    with tempfile.TemporaryDirectory(prefix="kvplan-overhead-") as folder:
        result = measure(models, args.requests, args.repeats, Path(folder), args.clock)
    show(result, console)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
