"""Fit the shipped factor table (hardware per GPU family, overheads per engine generation,
one MoE factor) jointly on many measured runs, by coordinate descent over the kinds of factors.

Each round fits every family's three hardware factors on that family's runs (engine
overheads held), then the pooled 'all' hardware factors on every run (for GPU families with
no runs), then the one MoE factor on every MoE run, then each engine generation's two
overheads on that generation's runs (hardware held). The loss is the per-sweep-weighted sum
of absolute log errors: every sweep counts the same however many loads it measured, and an
absolute (not squared) error keeps one sweep that no factor set explains from dragging the
factors of all the others.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Callable

import numpy as np

from kvplan.sim.calibration import BOUNDS, INTERIOR, Replay, fitted_names, log_errors, nelder_mead
from kvplan.sim.factor_table import (ENGINE_FACTORS, HARDWARE_FACTORS, MOE_FACTORS, MOE_KEY, FactorTable,
                                     engine_generation)
from kvplan.sim.measured import MeasuredRun


GRID_POINTS = 6  # per factor: 6**3 = 216 starts for the hardware block, 36 for the engine block


def generation_of(run: MeasuredRun) -> str:
    return engine_generation(run.engine, run.engine_version)


def sweep_loss(replays: list[Replay], factors_of: Callable[[Replay], dict[str, float]]) -> float:
    per_sweep: dict[str, int] = defaultdict(int)
    for replay in replays:
        per_sweep[replay.run.sweep] += 1
    return sum(abs(e) / per_sweep[r.run.sweep] for r in replays for e in log_errors(r.run, r.predict(factors_of(r))))


def _clip(name: str, value: float) -> float:
    low, high = BOUNDS[name]
    return min(max(value, low), high)


def _fit_block(names: tuple[str, ...], start: dict[str, float], objective: Callable[[dict[str, float]], float],
               iterations: int) -> dict[str, float]:
    def loss(x: np.ndarray) -> float:
        return objective({n: _clip(n, math.exp(v)) for n, v in zip(names, x)})

    # A coarse log grid first: the loss has flat faces where a factor stops mattering (a
    # compute-bound family ignores bandwidth), on which a simplex started there stalls.
    axes = [np.linspace(math.log(BOUNDS[n][0]), math.log(BOUNDS[n][1]), GRID_POINTS) for n in names]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, len(names))
    x0 = np.log([_clip(n, start[n]) * (0.9 if start[n] >= BOUNDS[n][1] else 1.0) for n in names])
    candidates = [x0, *grid]
    scores = [loss(x) for x in candidates]
    best = nelder_mead(loss, candidates[int(np.argmin(scores))], iterations=iterations, step=0.3)
    return {n: _clip(n, math.exp(v)) for n, v in zip(names, best)}


def _fit_groups(replays: list[Replay], key_of: Callable[[MeasuredRun], str], names: tuple[str, ...],
                store: dict[str, dict[str, float]], factors: Callable[[Replay], dict[str, float]], iterations: int) -> None:
    """Fit `names` of each group's entry in `store` on that group's runs, the rest held."""
    for key in sorted({key_of(r.run) for r in replays}):
        mine = [r for r in replays if key_of(r.run) == key]

        def objective(values: dict[str, float], mine=mine, key=key) -> float:
            store[key] = values
            return sweep_loss(mine, factors)
        store[key] = _fit_block(names, store[key], objective, iterations)


def _counts(replays: list[Replay], key_of: Callable[[MeasuredRun], str]) -> dict[str, str]:
    out = {}
    for key in sorted({key_of(r.run) for r in replays}):
        mine = [r for r in replays if key_of(r.run) == key]
        out[key] = f"{len(mine)} runs from {len({r.run.sweep for r in mine})} sweeps"
    return out


def fit_table(replays: list[Replay], family_of: Callable[[MeasuredRun], str], start: FactorTable | None = None,
              rounds: int = 3, iterations: int = 120) -> FactorTable:
    """The factor table that best explains `replays` (see the module docstring)."""
    if not replays:
        raise ValueError("no measured run to fit")
    interior = {n: getattr(INTERIOR, n) for n in HARDWARE_FACTORS + ENGINE_FACTORS + MOE_FACTORS}
    families = sorted({family_of(r.run) for r in replays})
    generations = sorted({generation_of(r.run) for r in replays})
    start = start or FactorTable({}, {})
    hardware = {f: {n: start.families.get(f, {}).get(n, interior[n]) for n in HARDWARE_FACTORS} for f in families + ["all"]}
    engines = {g: {n: start.engines.get(g, {}).get(n, interior[n]) for n in ENGINE_FACTORS} for g in generations}
    moe_runs = [r for r in replays if "moe_flops_factor" in fitted_names([r])]
    moe = {n: start.moe.get(n, interior[n]) for n in MOE_FACTORS} if moe_runs else {}

    def factors(replay: Replay) -> dict[str, float]:
        return {**hardware[family_of(replay.run)], **engines[generation_of(replay.run)], "moe_flops_factor": 1.0, **moe}

    for _ in range(rounds):
        _fit_groups(replays, family_of, HARDWARE_FACTORS, hardware, factors, iterations)
        hardware["all"] = _fit_block(HARDWARE_FACTORS, hardware["all"],
                                     lambda values: sweep_loss(replays, lambda r: {**factors(r), **values}), iterations)
        if moe_runs:
            moe = _fit_block(MOE_FACTORS, moe, lambda values: sweep_loss(moe_runs, lambda r: {**factors(r), **values}),
                             iterations)
        _fit_groups(replays, generation_of, ENGINE_FACTORS, engines, factors, iterations)
    notes = {**_counts(replays, family_of), **_counts(replays, generation_of)}
    notes["all"] = f"{len(replays)} runs from {len({r.run.sweep for r in replays})} sweeps, every family pooled"
    if moe_runs:
        notes[MOE_KEY] = f"{len(moe_runs)} MoE runs from {len({r.run.sweep for r in moe_runs})} sweeps, every family pooled"
    return FactorTable(hardware, engines, notes, moe)
