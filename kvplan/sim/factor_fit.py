"""The fit of the step model's factors to replayed measured runs (calibration.py's Replay).

The objective is the sum of squared log errors of output throughput, mean TPOT, batch
latency and (only where TTFT is not queue-dominated) mean TTFT, minimized over log factors
by Nelder-Mead (numpy only).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from kvplan.sim.calibration import Replay, log_errors
from kvplan.sim.measured import MeasuredRun
from kvplan.sim.step_model import DATASHEET, FACTOR_NAMES, StepModelParams

# Search space, log-scaled: (low, high) per factor.
BOUNDS = {
    "bandwidth_factor": (0.05, 1.0),
    "attention_bandwidth_factor": (0.02, 1.0),
    "flops_factor": (0.05, 1.0),
    "overhead_s": (1e-6, 0.05),
    "overhead_per_seq_s": (1e-8, 1e-3),
    "moe_flops_factor": (0.05, 1.0),
}
INTERIOR = StepModelParams(0.6, 0.3, 0.5, 2e-3, 1e-5, 0.7, source="typical interior start")


def fitted_names(replays: list[Replay]) -> tuple[str, ...]:
    """The factors these runs can tell: the MoE factor only where a run has expert GEMMs."""
    if any(np.any(r.costs.expert_flops > 0) for r in replays):
        return FACTOR_NAMES
    return tuple(n for n in FACTOR_NAMES if n != "moe_flops_factor")


def _to_factors(x: np.ndarray, names: tuple[str, ...], held: StepModelParams) -> dict[str, float]:
    out = {n: getattr(held, n) for n in FACTOR_NAMES}
    for value, name in zip(x, names):
        low, high = BOUNDS[name]
        out[name] = float(math.exp(min(max(value, math.log(low)), math.log(high))))
    return out


def nelder_mead(
    f: Callable[[np.ndarray], float], x0: np.ndarray, iterations: int = 250, step: float = 0.5
) -> np.ndarray:
    """Plain Nelder-Mead (reflection 1, expansion 2, contraction 0.5, shrink 0.5)."""
    simplex = [x0] + [x0 + step * np.eye(len(x0))[i] for i in range(len(x0))]
    values = [f(x) for x in simplex]
    for _ in range(iterations):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < 1e-6 * (1.0 + abs(values[0])):
            break
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        fr = f(reflected)
        if fr < values[0]:
            expanded = centroid + 2 * (centroid - simplex[-1])
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centroid + 0.5 * (simplex[-1] - centroid)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                simplex = [simplex[0] + 0.5 * (x - simplex[0]) for x in simplex]
                values = [f(x) for x in simplex]
    return simplex[int(np.argmin(values))]


def fit_replays(replays: list[Replay], start: StepModelParams = DATASHEET) -> dict[str, float]:
    """Factors minimizing the summed squared log errors over the replays' compared figures."""
    if not replays:
        raise ValueError(
            "no measured run to fit: pass at least one result with output throughput, TPOT or latency"
        )

    # Each sweep weighs the same, however many loads it measured: mechanisms, not rows.
    per_sweep: dict[str, int] = {}
    for replay in replays:
        per_sweep[replay.run.sweep] = per_sweep.get(replay.run.sweep, 0) + 1

    names = fitted_names(replays)

    def loss(x: np.ndarray) -> float:
        factors = _to_factors(x, names, start)
        return sum(
            e * e / per_sweep[r.run.sweep]
            for r in replays
            for e in log_errors(r.run, r.predict(factors))
        )

    # Start inside the box (a corner start collapses the simplex on the clipped faces), from
    # the given factors and from a typical interior point; keep the better, then polish.
    starts = []
    for origin in (start, INTERIOR):
        starts.append(
            np.log(
                [min(max(getattr(origin, n), BOUNDS[n][0] * 2), BOUNDS[n][1] * 0.9) for n in names]
            )
        )
    best = min((nelder_mead(loss, x) for x in starts), key=loss)
    return _to_factors(nelder_mead(loss, best, iterations=120, step=0.2), names, start)


def fit(
    runs: list[MeasuredRun],
    label: str,
    rounds: int = 2,
    progress: Callable[[str], None] | None = None,
) -> StepModelParams:
    """Fit the factors to measured runs: simulate, fit on the replays, repeat from the fit."""
    params = DATASHEET
    for _ in range(rounds):
        replays = []
        for run in runs:
            if progress:
                progress(run.run_id)
            replays.append(Replay.record(run, params))
        params = DATASHEET.with_factors(fit_replays(replays, params), f"fitted on {label}")
    return params
