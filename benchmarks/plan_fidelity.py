"""How well kvplan finds the highest load a server holds within a latency target, on the
published sweeps that vary the load (`../shared/data/serving`).

`kvplan plan` answers "the highest rate within the SLO" from simulated runs. Here the same
question is asked of every published sweep whose runs differ only in load: request rate
(`vllm bench serve --request-rate`) or batch size (`benchmark_latency.py --batch-size`).
For each such sweep, each latency figure it publishes (mean / median TPOT, median TTFT,
batch latency) and each target T taken from the sweep's own measured values, the measured
answer is the highest load whose measured figure is <= T, and kvplan's is the highest load
whose predicted figure is <= T. A prediction is "within one step" when the two answers are
at most one grid point apart (no load meeting T counts as the point below the grid); the
exact share (the same grid point) is printed beside it, because on a three-point sweep one
step of slack is most of the grid.

Predictions are read from `benchmarks/serving_fidelity.jsonl`, which
`benchmarks/serving_fidelity.py` writes: the operator step model at the shipped overheads
(in-sample), the same with the run's model left out of the overheads' fit (from scratch),
and the operators alone with no engine overhead. Target: at least 70% within one step.

Run: python benchmarks/plan_fidelity.py   (seconds; needs ../shared/data/serving)
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path

from kvplan.fit.measured import MeasuredRun, load_dataset

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data" / "serving" / "serving_benchmarks.jsonl"
PREDICTIONS = ROOT / "benchmarks" / "serving_fidelity.jsonl"
FIGURES = ("mean_tpot_ms", "median_tpot_ms", "median_ttft_ms", "latency_avg_s")
COLUMNS = ("in_sample", "held_out_model", "zero_overhead")
TARGET = 0.70


def load_of(run: MeasuredRun) -> float | None:
    """The load a sweep varies: the batch of a latency run, else a finite request rate."""
    if run.benchmark == "latency":
        return float(run.num_prompts)
    if (
        run.benchmark == "serving"
        and run.max_concurrency is None
        and math.isfinite(run.request_rate)
    ):
        return run.request_rate
    return None


def highest(points: list[tuple[float, float]], target: float) -> int:
    """Index of the highest load whose figure is within the target; -1 when none is."""
    return max((i for i, (_, value) in enumerate(points) if value <= target), default=-1)


def main() -> int:
    if not DATA.is_file() or not PREDICTIONS.is_file():
        print(
            f"needs {DATA} and {PREDICTIONS} (python benchmarks/serving_fidelity.py writes the "
            "latter)"
        )
        return 0
    runs = {run.run_id: run for run in load_dataset(DATA)[0]}
    sweeps: dict[tuple[str, str], list[tuple[float, dict[str, float]]]] = defaultdict(list)
    for line in PREDICTIONS.read_text().splitlines():
        record = json.loads(line)
        run, figure = runs.get(record["params"]["record"]), record["params"]["metric"]
        if run is None or figure not in FIGURES or (load := load_of(run)) is None:
            continue
        sweeps[(run.sweep, figure)].append((load, record["metrics"]))
    hits: dict[str, int] = defaultdict(int)
    exact: dict[str, int] = defaultdict(int)
    cases = 0
    print("| sweep | figure | loads | " + " | ".join(COLUMNS) + " |")
    print("|---|---|---|" + "---|" * len(COLUMNS))
    for (sweep, figure), points in sorted(sweeps.items()):
        points.sort(key=lambda p: p[0])
        if len({load for load, _ in points}) < 3:
            continue  # fewer than three loads: nothing to find a highest one among
        measured = [(load, metrics["measured"]) for load, metrics in points]
        row = {}
        for column in COLUMNS:
            predicted = [(load, metrics[column]) for load, metrics in points]
            steps = [
                abs(highest(predicted, target) - highest(measured, target))
                for _, target in measured
            ]
            ok = sum(step <= 1 for step in steps)
            hits[column] += ok
            exact[column] += sum(step == 0 for step in steps)
            row[column] = f"{ok}/{len(measured)}"
        cases += len(measured)
        loads = ", ".join(f"{load:g}" for load, _ in points)
        print(f"| {sweep} | {figure} | {loads} | " + " | ".join(row[c] for c in COLUMNS) + " |")
    print(
        f"\n{cases} (sweep, figure, target) cases from "
        f"{sum(1 for k, p in sweeps.items() if len({load for load, _ in p}) >= 3)}"
        " load sweeps; share whose predicted highest load within the target is within one step of "
        "the measured:"
    )
    for column in COLUMNS:
        share = hits[column] / cases if cases else float("nan")
        verdict = "met" if share >= TARGET else "missed"
        print(
            f"  {column:22s} {hits[column]}/{cases} = {100 * share:.0f}%  (target >= "
            f"{100 * TARGET:.0f}%: {verdict}); "
            f"the same load exactly: {exact[column]}/{cases}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
