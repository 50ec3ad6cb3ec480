"""How well the step model predicts runs it was not fitted on: held-out protocols, their
tables, and the error bands `kvplan bench` prints beside every modeled time figure.

A protocol groups the measured runs (by sweep, by model, by GPU family); each group in turn is
held out, the whole factor table is fitted from scratch on the other groups' runs
(two_round_fit: fixed starts, nothing borrowed from a fit that saw the held-out group), and
the held-out runs are simulated end to end at that fold's factors. A fold's first round fits
replays recorded at datasheet speed; its second re-records its own open-loop runs at the
first round's speed and polishes that fit.

Folds run in parallel worker processes (fork), one fold per task.
"""

from __future__ import annotations

import math
import os
import statistics
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Callable

from kvplan.sim.calibration import Replay, compared, simulate
from kvplan.sim.factor_table import UNSEEN_FAMILY, FactorTable, factor_key
from kvplan.sim.joint_fit import fit_table, generation_of, refit
from kvplan.sim.measured import MeasuredRun
from kvplan.sim.step_model import StepModelParams
from kvplan.spec.resolve import load_gpu, load_model

TIME_FIGURES = ("output_throughput", "mean_tpot_ms", "mean_ttft_ms", "latency_avg_s")


def family(run: MeasuredRun) -> str:
    """The run's hardware-factor key: its GPU family, or a GEMM path of its own (factor_key)."""
    return factor_key(load_gpu(run.gpu).family, run.weight_dtype, run.engine, run.engine_version)


def gpu_family(run: MeasuredRun) -> str:
    return load_gpu(run.gpu).family


def model_name(run: MeasuredRun) -> str:
    return load_model(run.model).name


PROTOCOLS: dict[str, Callable[[MeasuredRun], str]] = {
    "sweep": lambda run: run.sweep,
    "model": model_name,
    "GPU family": gpu_family,
}


def params_for(table: FactorTable, run: MeasuredRun) -> StepModelParams:
    return StepModelParams(**table.factors(family(run), generation_of(run)), source="fit")


# The fold workers read these through fork instead of pickling the replays per task.
_RUNS: list[MeasuredRun] = []
_REPLAYS: dict[str, Replay] = {}


def two_round_fit(runs: list[MeasuredRun], replays: dict[str, Replay]) -> FactorTable:
    """The fit on datasheet-speed replays, then once more on the open-loop finite-rate runs'
    replays recorded again at that fit's speed (their batching depends on step times), polished
    from the first round: nothing enters but these runs."""
    table = fit_table([replays[r.run_id] for r in runs], family)
    again = [
        Replay.record(r, params_for(table, r))
        if replays[r.run_id].timing_dependent
        else replays[r.run_id]
        for r in runs
    ]
    return refit(again, family, table)


def _fold(protocol: str, held: str) -> dict[str, dict[str, float]]:
    key_of = PROTOCOLS[protocol]
    table = two_round_fit([r for r in _RUNS if key_of(r) != held], _REPLAYS)
    return {
        run.run_id: simulate(run, params_for(table, run))[0] for run in _RUNS if key_of(run) == held
    }


def held_out_predictions(
    runs: list[MeasuredRun],
    replays: dict[str, Replay],
    protocol: str,
    workers: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, dict[str, float]]:
    """Every run's figures predicted with the group it belongs to held out (see the module docstring)."""
    global _RUNS, _REPLAYS
    _RUNS, _REPLAYS = runs, replays
    groups = sorted({PROTOCOLS[protocol](run) for run in runs})
    out: dict[str, dict[str, float]] = {}
    workers = workers or os.cpu_count() or 1
    if workers == 1:
        for held in groups:
            out.update(_fold(protocol, held))
            if progress:
                progress(held)
        return out
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("fork")) as pool:
        futures = {held: pool.submit(_fold, protocol, held) for held in groups}
        for held, future in futures.items():
            out.update(future.result())
            if progress:
                progress(held)
    return out


@dataclass(frozen=True)
class Scored:
    """One measured figure of one run beside a prediction of it."""

    run: MeasuredRun
    metric: str
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0 if math.isfinite(self.predicted) else math.inf


def scored(runs: list[MeasuredRun], predictions: dict[str, dict[str, float]]) -> list[Scored]:
    """The compared figures (compared(): TTFT only where it is not queue-dominated)."""
    return [
        Scored(run, metric, run.measured[metric], predictions[run.run_id].get(metric, math.nan))
        for run in runs
        if run.run_id in predictions
        for metric in compared(run)
    ]


def median_abs(rows: list[Scored]) -> float | None:
    errors = [abs(r.error) for r in rows if math.isfinite(r.error)]
    return statistics.median(errors) if errors else None


def by_group(rows: list[Scored], key: Callable[[Scored], str]) -> dict[str, list[Scored]]:
    groups: dict[str, list[Scored]] = defaultdict(list)
    for row in rows:
        groups[key(row)].append(row)
    return dict(groups)


def band_key(run: MeasuredRun) -> str:
    """Which error band a run's figures fall under: its GPU family and engine generation."""
    return f"{gpu_family(run)}/{generation_of(run)}"


def bands(
    rows: list[Scored], key_of: Callable[[MeasuredRun], str] = band_key
) -> dict[str, dict[str, float]]:
    """Per GPU family and engine generation (or another grouping): the median absolute
    held-out error of each time figure and how many runs it rests on (`<figure>_runs`)."""
    out: dict[str, dict[str, float]] = {}
    for key, mine in sorted(by_group(rows, lambda r: key_of(r.run)).items()):
        entry: dict[str, float] = {}
        for metric in TIME_FIGURES:
            of_metric = [r for r in mine if r.metric == metric]
            value = median_abs(of_metric)
            if value is not None:
                entry[f"{metric}_error"] = round(value, 4)
                entry[f"{metric}_runs"] = len({r.run.run_id for r in of_metric})
        out[key] = entry
    return out


def unseen_family_bands(rows: list[Scored]) -> dict[str, dict[str, float]]:
    """Leave-one-GPU-family-out errors per engine generation: the band for a GPU family no
    measured run covers ('unseen-family/<engine>')."""
    return bands(rows, lambda run: f"{UNSEEN_FAMILY}/{generation_of(run)}")
