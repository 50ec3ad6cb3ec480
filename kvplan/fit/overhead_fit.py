"""The fit of the engine overheads (overhead.py), the operator step model's only fitted part,
to replayed measured runs.

A run is simulated once with the operator model at some overheads, recording each step's GPU
time, sequences and whether the scheduler decided it (calibration.Replay); any other
overheads then re-time the same schedule without simulating again. Runs whose batching
depends on step times (open loops at a finite rate) are recorded again at the first round's
fit and fitted once more (two rounds, as the factor fit does).

Per era, Nelder-Mead over the logs of the fixed and per-sequence CPU time (and the era's GPU
factor where its kernels predate the tables) minimizes the summed absolute log errors of the
compared figures, each sweep weighing the same however many loads it measured.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable

import numpy as np

from kvplan.fit.measured import MeasuredRun
from kvplan.fit.minimize import nelder_mead
from kvplan.fit.replay import Replay, log_errors
from kvplan.sim.ops.overhead import ERAS, EngineOverhead, Era, engine_era, for_era

BOUNDS = {"base_s": (1e-5, 0.05), "per_seq_s": (1e-8, 1e-3), "gpu_factor": (0.5, 4.0)}
START = {"base_s": 2e-3, "per_seq_s": 2e-5, "gpu_factor": 1.3}


def era_of(run: MeasuredRun) -> Era:
    return engine_era(run.engine, run.engine_version)


def _names(era: Era) -> tuple[str, ...]:
    return ("base_s", "per_seq_s", "gpu_factor") if era.predates_tables else ("base_s", "per_seq_s")


def _factors(x: np.ndarray, names: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for value, name in zip(x, names):
        low, high = BOUNDS[name]
        out[name] = float(math.exp(min(max(value, math.log(low)), math.log(high))))
    return out


def fit_era(replays: list[Replay], era: Era) -> dict[str, float]:
    """The overheads of one era minimizing the sweep-weighted absolute log errors."""
    per_sweep: dict[str, int] = defaultdict(int)
    for replay in replays:
        per_sweep[replay.run.sweep] += 1
    names = _names(era)

    def loss(x: np.ndarray) -> float:
        factors = _factors(x, names)
        return sum(
            abs(e) / per_sweep[r.run.sweep]
            for r in replays
            for e in log_errors(r.run, r.predict(factors))
        )

    starts = [np.log([START[n] for n in names]), np.log([BOUNDS[n][0] * 3 for n in names])]
    best = min((nelder_mead(loss, x) for x in starts), key=loss)
    return _factors(nelder_mead(loss, best, iterations=120, step=0.2), names)


def record(run: MeasuredRun, overheads: dict[str, EngineOverhead] | None = None) -> Replay:
    return Replay.record(run, overhead_for(overheads or {}, run))


def fit_overheads(
    runs: list[MeasuredRun],
    replays: dict[str, Replay] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, EngineOverhead]:
    """Each era's overheads fitted on its runs (two rounds); eras without runs are absent.
    `replays`: recordings at zero overhead already made (by run id), reused in round one."""
    replays = dict(replays or {})
    for run in runs:
        if run.run_id not in replays:
            if progress:
                progress(run.run_id)
            replays[run.run_id] = record(run)
    fitted = fit_recorded(runs, replays)
    again = {
        r.run_id: record(r, fitted) if replays[r.run_id].timing_dependent else replays[r.run_id]
        for r in runs
    }
    return fit_recorded(runs, again)


def fit_recorded(
    runs: list[MeasuredRun], replays: dict[str, Replay], source: str = "fit"
) -> dict[str, EngineOverhead]:
    """Each era's overheads fitted on its runs' recordings as they are (one round): on the runs
    whose operators measured tables timed where the era has any, so the overhead measures the
    engine and not the roofline's error on a kernel no table holds; else on all of them."""
    by_era: dict[str, list[Replay]] = defaultdict(list)
    for run in runs:
        by_era[era_of(run).fitted_as].append(replays[run.run_id])
    fitted = {}
    for key, mine in by_era.items():
        measured = [replay for replay in mine if replay.table_timed]
        used, what = (measured, "table-timed runs") if measured else (mine, "runs")
        label = f"{source} on {len(used)} {what}"
        fitted[key] = EngineOverhead.of(fit_era(used, ERAS[key]), ERAS[key], label)
    return fitted


def overhead_for(overheads: dict[str, EngineOverhead], run: MeasuredRun) -> EngineOverhead:
    """The overhead a run is timed with: its era's fit (overlapped as the era is), none when
    no run of the era was fitted."""
    return for_era(overheads, era_of(run))
