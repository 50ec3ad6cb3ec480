"""`kvplan calibrate`: fit the operator step model's engine overhead (kvplan/fit/overhead_fit.py)
to a user's own measured runs, say how well it predicts each of them when that run is left
out of the fit, and write the calibration file `kvplan bench --calibration` reads (with that
held-out error, which bench prints as the band of its modeled time figures)."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from kvplan.fit.measured import MeasuredRun
from kvplan.fit.overhead_fit import era_of, fit_overheads, overhead_for
from kvplan.fit.replay import compared, simulate
from kvplan.fit.run_checks import check_settings
from kvplan.sim.calibration_file import FittedOn, write_calibration
from kvplan.sim.ops.overhead import EngineOverhead
from kvplan.spec.resolve import load_gpu
from kvplan.spec.setting_error import SettingError

HELD_OUT_FIGURES = (
    "output_throughput",
    "mean_tpot_ms",
    "mean_ttft_ms",
    "median_tpot_ms",
    "median_ttft_ms",
    "latency_avg_s",
)


@dataclass(frozen=True)
class CalibrationResult:
    overhead: EngineOverhead
    rows: list[
        dict[str, Any]
    ]  # per input run and figure: measured, predicted, error (the fit's own runs)
    held_out_rows: list[dict[str, Any]]  # the same, each run predicted by a fit without it
    held_out: dict[str, float] | None  # per figure: median absolute held-out error and runs
    notes: list[str] = field(default_factory=list)  # what applied to every run, said once


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
    from kvplan.fit.vllm_results import read_result

    if not paths:
        raise ValueError(
            "no result files given; pass one or more `vllm bench serve --save-result` JSONs or "
            "pasted blocks"
        )
    check_settings(settings)
    check_out(out, paths)
    runs = [read_result(path, settings) for path in paths]
    runs = [run for run in runs if compared(run)]
    if not runs:
        raise ValueError(
            "none of the results has output throughput, TPOT or a non-queue-dominated TTFT to fit"
        )
    label = (
        f"{len(runs)} run(s) of {runs[0].model} on {runs[0].tp} x {runs[0].gpu} ({runs[0].engine})"
    )
    fitted = fit_overheads(runs, progress=progress)
    overhead = _with_source(fitted[era_of(runs[0]).fitted_as], label)
    rows = [row for run in runs for row in _errors(run.run_id, run, _predict(fitted, run))]
    held_rows: list[dict[str, Any]] = []
    if len(runs) >= 2:
        for index, run in enumerate(runs):
            without = fit_overheads(runs[:index] + runs[index + 1 :])
            held_rows += _errors(run.run_id, run, _predict(without, run))
    held = held_out_summary(held_rows) if held_rows else None
    write_calibration(out, overhead, overhead.source, fitted_on(runs[0]), rows, held)
    return CalibrationResult(overhead, rows, held_rows, held, lengths_note(settings, len(runs)))


def _with_source(overhead: EngineOverhead, label: str) -> EngineOverhead:
    return replace(overhead, source=f"fit on {label}")


def _predict(fitted: dict[str, EngineOverhead], run: MeasuredRun) -> dict[str, float]:
    return simulate(run, overhead_for(fitted, run))[0]


def fitted_on(run: MeasuredRun) -> FittedOn:
    """What the runs ran on (one model, GPU and engine for every file: the settings say them),
    by the names the resolvers gave them, so a run elsewhere can be told apart."""
    return FittedOn(
        model=run.model,
        gpu=run.gpu,
        gpu_family=load_gpu(run.gpu).family,
        engine=run.engine,
        engine_version=run.engine_version or None,
    )


def check_out(out: Path, inputs: list[Path]) -> None:
    """--out names a file to write, not a folder and not one of the results read."""
    if out.is_dir():
        raise SettingError(
            "{out} '{path}' is a folder; pass a file name such as calibration.json", path=out
        )
    for path in inputs:
        same = out.exists() and path.exists() and os.path.samefile(out, path)
        if same or out.resolve() == path.resolve():
            raise SettingError(
                "{out} '{path}' is one of the result files; pass another file name for the "
                "calibration",
                path=out,
            )


def lengths_note(settings: dict[str, Any], runs: int) -> list[str]:
    """--input-len / --output-len are the run's own (vLLM's --random-input-len): one value for
    every file given, checked against each file's token totals; the note says so."""
    given = [
        f"{flag} {settings[key]:,}"
        for key, flag in (("input_len", "--input-len"), ("output_len", "--output-len"))
        if settings.get(key) is not None
    ]
    if not given:
        return []
    return [
        f"{' and '.join(given)} applied to all {runs} run(s) (a file whose own token totals "
        "disagree is refused); leave them out to read each file's own totals"
    ]
