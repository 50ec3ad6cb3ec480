"""`kvplan calibrate`: fit the step model to a user's own measured runs, say how well it
predicts each of them when that run is left out of the fit, and write the calibration file
`kvplan bench --calibration` reads (with that held-out error, which bench prints as the band
of its modeled time figures)."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kvplan.sim.calibration import compared, simulate
from kvplan.sim.factor_fit import fit
from kvplan.sim.step_model import CALIBRATION_FORMAT, FACTOR_NAMES, StepModelParams

HELD_OUT_FIGURES = (
    "output_throughput",
    "mean_tpot_ms",
    "mean_ttft_ms",
    "median_tpot_ms",
    "median_ttft_ms",
    "latency_avg_s",
)


def write_calibration(
    path: Path,
    params: StepModelParams,
    gpu: str,
    engine: str,
    rows: list[dict[str, Any]],
    held_out: dict[str, float] | None = None,
) -> None:
    data = {
        "format": CALIBRATION_FORMAT,
        "gpu": gpu,
        "engine": engine,
        "params": {name: getattr(params, name) for name in FACTOR_NAMES},
        "source": params.source,
        "fit_errors": rows,
    }
    if held_out is not None:
        data["held_out"] = held_out
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


@dataclass(frozen=True)
class CalibrationResult:
    params: StepModelParams
    rows: list[
        dict[str, Any]
    ]  # per input run and figure: measured, predicted, error (the fit's own runs)
    held_out_rows: list[dict[str, Any]]  # the same, each run predicted by a fit without it
    held_out: dict[str, float] | None  # per figure: median absolute held-out error and runs


def _errors(run_id: str, run, predicted: dict[str, float]) -> list[dict[str, Any]]:
    return [
        {
            "run": run_id,
            "metric": metric,
            "measured": run.measured[metric],
            "predicted": predicted[metric],
            "error": predicted[metric] / run.measured[metric] - 1.0,
        }
        for metric in compared(run)
    ]


def held_out_summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for metric in HELD_OUT_FIGURES:
        errors = [abs(r["error"]) for r in rows if r["metric"] == metric]
        if errors:
            out[f"{metric}_error"] = round(statistics.median(errors), 4)
            out[f"{metric}_runs"] = len(errors)
    return out


def calibrate_results(
    paths: list[Path],
    settings: dict[str, Any],
    out: Path,
    progress: Callable[[str], None] | None = None,
) -> CalibrationResult:
    """Read measured results, fit the factors, refit once per run without it (leave one run
    out: the error a user should expect on a run the fit has not seen), write the file.

    settings carries what result files do not say (model, gpu, tp, engine limits, dataset
    lengths); every run must be on the same GPU. The file is written only after the fits.
    """
    from kvplan.sim.measured import read_result

    if not paths:
        raise ValueError(
            "no result files given; pass one or more `vllm bench serve --save-result` JSONs or pasted blocks"
        )
    runs = [read_result(path, settings) for path in paths]
    runs = [run for run in runs if compared(run)]
    if not runs:
        raise ValueError(
            "none of the results has output throughput, TPOT or a non-queue-dominated TTFT to fit"
        )
    label = (
        f"{len(runs)} run(s) of {runs[0].model} on {runs[0].tp} x {runs[0].gpu} ({runs[0].engine})"
    )
    params = fit(runs, label, progress=progress)
    rows = [row for run in runs for row in _errors(run.run_id, run, simulate(run, params)[0])]
    held_rows: list[dict[str, Any]] = []
    if len(runs) >= 2:
        for index, run in enumerate(runs):
            others = runs[:index] + runs[index + 1 :]
            without = fit(others, f"{len(others)} run(s) without {run.run_id}")
            held_rows += _errors(run.run_id, run, simulate(run, without)[0])
    held = held_out_summary(held_rows) if held_rows else None
    write_calibration(out, params, runs[0].gpu, runs[0].engine, rows, held)
    return CalibrationResult(params, rows, held_rows, held)
