"""Fit the shipped factor table (hardware per GPU family, overheads per engine generation,
one MoE factor) jointly on many measured runs, by coordinate descent over the kinds of factors.

Each round fits every family's three hardware factors on that family's runs (engine
overheads held), then the pooled 'all' hardware factors on every run (for GPU families with
no runs), then the one MoE factor on every MoE run, then each engine generation's two
overheads on that generation's runs (hardware held), then the pooled 'all' overheads. The
loss is the per-sweep-weighted sum of absolute log errors: every sweep counts the same however
many loads it measured, and an absolute (not squared) error keeps one sweep that no factor set
explains from dragging the factors of all the others.

No entry rests on one or two sweeps: a GPU family (or GEMM path) or an engine generation that
fewer than MIN_SWEEPS sweeps inform is fitted into, and predicted by, the pooled 'all' entry; a
GEMM path of a family's own ('cdna3/fp8-unfused'), or an engine generation's MoE runs, with too
few sweeps is unconstrained: those runs are left out of the fit and predicted with the factors
the other runs give. The pooled entries are fitted on
every run, so they stand for a GPU family or engine the runs do not cover.

No start is borrowed from an earlier fit: the coordinate descent runs from START_QUANTILES
fixed points of the search box (every factor at that quantile of its log range), and the
lowest final loss wins, so the result does not depend on where a caller starts it. Each
block's own search is global within the block (a log grid, then a simplex from its best point).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Callable

import numpy as np

from kvplan.sim.calibration import Replay, log_errors
from kvplan.sim.factor_fit import BOUNDS, INTERIOR, fitted_names, nelder_mead
from kvplan.sim.factor_table import (
    ENGINE_FACTORS,
    HARDWARE_FACTORS,
    MOE_FACTORS,
    MOE_KEY,
    POOLED,
    FactorTable,
    engine_generation,
)
from kvplan.sim.measured import MeasuredRun

GRID_POINTS = 6  # per factor: 6**3 = 216 starts for the hardware block, 36 for the engine block
MIN_SWEEPS = 3  # an entry needs this many sweeps behind it, else it is pooled
START_QUANTILES = (
    0.3,
    0.5,
    0.7,
)  # the descent's starts: each factor at this point of its log range


def generation_of(run: MeasuredRun) -> str:
    return engine_generation(run.engine, run.engine_version)


def sweep_loss(replays: list[Replay], factors_of: Callable[[Replay], dict[str, float]]) -> float:
    per_sweep: dict[str, int] = defaultdict(int)
    for replay in replays:
        per_sweep[replay.run.sweep] += 1
    return sum(
        abs(e) / per_sweep[r.run.sweep]
        for r in replays
        for e in log_errors(r.run, r.predict(factors_of(r)))
    )


def _clip(name: str, value: float) -> float:
    low, high = BOUNDS[name]
    return min(max(value, low), high)


# A weak prior, fixed before any data: each factor is pulled toward PRIOR (the typical point
# kvplan's earlier fits started from: 0.6 of peak HBM bandwidth for the weight GEMMs, 0.3 for
# paged attention, 0.5 of peak FLOP/s, 2 ms + 10 us per sequence per step, MoE GEMMs at 0.7 of
# the dense rate) by PRIOR_WEIGHT x (log ratio)^2. It costs next to nothing where the runs pin
# a factor, and decides the factors the runs leave free (a family whose runs trade FLOP/s for
# attention bandwidth along a ridge), which a fit on one sweep fewer would otherwise throw to a
# bound: held out, such ridge factors mispredicted the held sweep by 30-60%.
PRIOR = {n: getattr(INTERIOR, n) for n in BOUNDS}
PRIOR_WEIGHT = 0.01


def prior_penalty(values: dict[str, float]) -> float:
    return PRIOR_WEIGHT * sum(math.log(v / PRIOR[n]) ** 2 for n, v in values.items())


def _fit_block(
    names: tuple[str, ...],
    start: dict[str, float],
    objective: Callable[[dict[str, float]], float],
    iterations: int,
) -> dict[str, float]:
    def loss(x: np.ndarray) -> float:
        values = {n: _clip(n, math.exp(v)) for n, v in zip(names, x)}
        return objective(values) + prior_penalty(values)

    # A coarse log grid first: the loss has flat faces where a factor stops mattering (a
    # compute-bound family ignores bandwidth), on which a simplex started there stalls.
    axes = [np.linspace(math.log(BOUNDS[n][0]), math.log(BOUNDS[n][1]), GRID_POINTS) for n in names]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, len(names))
    x0 = np.log([_clip(n, start[n]) * (0.9 if start[n] >= BOUNDS[n][1] else 1.0) for n in names])
    candidates = [x0, *grid]
    scores = [loss(x) for x in candidates]
    best = nelder_mead(loss, candidates[int(np.argmin(scores))], iterations=iterations, step=0.3)
    return {n: _clip(n, math.exp(v)) for n, v in zip(names, best)}


def _fit_groups(
    replays: list[Replay],
    key_of: Callable[[MeasuredRun], str],
    names: tuple[str, ...],
    store: dict[str, dict[str, float]],
    factors: Callable[[Replay], dict[str, float]],
    iterations: int,
) -> None:
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


def pooled(
    replays: list[Replay], key_of: Callable[[MeasuredRun], str], minimum: int = MIN_SWEEPS
) -> Callable[[MeasuredRun], str]:
    """key_of where at least `minimum` of these replays' sweeps share the key, else POOLED."""
    sweeps: dict[str, set[str]] = defaultdict(set)
    for replay in replays:
        key = key_of(replay.run)
        sweeps[key].add(replay.run.sweep)
        if "/" in key:  # a GEMM path of a family ('cdna3/fp8-unfused') also counts for the family
            sweeps[key.split("/")[0]].add(replay.run.sweep)
    own = {key for key, names in sweeps.items() if len(names) >= minimum}

    def pooled_key(run: MeasuredRun) -> str:
        value = key_of(run)
        if value in own:
            return value
        parent = value.split("/")[0]
        return parent if parent in own else POOLED

    return pooled_key


def unconstrained(
    replays: list[Replay], family_of: Callable[[MeasuredRun], str], minimum: int = MIN_SWEEPS
) -> Callable[[MeasuredRun], bool]:
    """Runs of a GEMM path of its own ('cdna3/fp8-unfused'), and MoE runs of an engine
    generation, that fewer than `minimum` sweeps inform: their path is unconstrained, so they
    are left out of the fit (and predicted with their family's factors and the MoE factor the
    other engines' runs give) rather than bending factors other runs share toward a path those
    runs do not take (SGLang's gpt-oss runs, 3-17x slower than vLLM's on the same GPUs, would
    otherwise set the one MoE factor every engine reads)."""
    sweeps: dict[str, set[str]] = defaultdict(set)
    moe_sweeps: dict[str, set[str]] = defaultdict(set)
    moe_runs = {r.run.run_id for r in replays if "moe_flops_factor" in fitted_names([r])}
    for replay in replays:
        sweeps[family_of(replay.run)].add(replay.run.sweep)
        if replay.run.run_id in moe_runs:
            moe_sweeps[generation_of(replay.run)].add(replay.run.sweep)
    thin = {key for key, names in sweeps.items() if "/" in key and len(names) < minimum}
    thin_moe = {key for key, names in moe_sweeps.items() if len(names) < minimum}
    return lambda run: (
        family_of(run) in thin or (run.run_id in moe_runs and generation_of(run) in thin_moe)
    )


def _start(quantile: float) -> dict[str, float]:
    return {
        n: math.exp(math.log(low) + quantile * (math.log(high) - math.log(low)))
        for n, (low, high) in BOUNDS.items()
    }


def fit_table(
    replays: list[Replay],
    family_of: Callable[[MeasuredRun], str],
    rounds: int = 3,
    iterations: int = 80,
    quantiles: tuple[float, ...] = (0.5,),
) -> FactorTable:
    """The factor table that best explains `replays` (module docstring): the best fit over the
    start quantiles (fit_from_starts)."""
    return min(
        fit_from_starts(replays, family_of, rounds, iterations, quantiles), key=lambda fit: fit[1]
    )[0]


def refit(
    replays: list[Replay],
    family_of: Callable[[MeasuredRun], str],
    table: FactorTable,
    passes: tuple[tuple[int, float], ...] = ((600, 0.15), (400, 0.08)),
) -> FactorTable:
    """`table`, polished on `replays` (the same runs' replays recorded again at `table`'s speed:
    an open loop at a finite rate batches differently at other step times). A second round of
    the same fit, so it starts from that fit and from nothing else."""
    replays = [r for r in replays if not unconstrained(replays, family_of)(r.run)]
    family_key, generation_key = pooled(replays, family_of), pooled(replays, generation_of)
    families = {r.run.run_id: family_key(r.run) for r in replays}
    generations = {r.run.run_id: generation_key(r.run) for r in replays}
    polished, _ = _polish(
        replays,
        table,
        lambda run: families[run.run_id],
        lambda run: generations[run.run_id],
        passes,
    )
    return polished


def fit_from_starts(
    replays: list[Replay],
    family_of: Callable[[MeasuredRun], str],
    rounds: int = 3,
    iterations: int = 80,
    quantiles: tuple[float, ...] = START_QUANTILES,
) -> list[tuple[FactorTable, float]]:
    """One fit per start quantile, each a coordinate descent then a simplex over every factor
    of the table at once (the descent alone stalls where two blocks trade off: its starts end
    5-10% apart in loss; the joint simplex brings them within 0.1%), with its final loss."""
    replays = [r for r in replays if not unconstrained(replays, family_of)(r.run)]
    if not replays:
        raise ValueError("no measured run to fit")
    # Each run's keys once: reading a GPU name is far slower than one replay's prediction.
    family_key, generation_key = pooled(replays, family_of), pooled(replays, generation_of)
    families = {r.run.run_id: family_key(r.run) for r in replays}
    generations = {r.run.run_id: generation_key(r.run) for r in replays}

    def fam(run: MeasuredRun) -> str:
        return families[run.run_id]

    def gen(run: MeasuredRun) -> str:
        return generations[run.run_id]

    fits = []
    for quantile in quantiles:
        table, _ = _descend(replays, fam, gen, _start(quantile), rounds, iterations)
        fits.append(_polish(replays, table, fam, gen))
    return fits


# The joint simplex: the first pass, then a restart at a smaller step (a simplex that has
# collapsed in one direction recovers only from a fresh one).
POLISH = ((1500, 0.2), (1000, 0.1))


def _polish(
    replays: list[Replay],
    table: FactorTable,
    family_of: Callable[[MeasuredRun], str],
    generation_of_run: Callable[[MeasuredRun], str],
    passes: tuple[tuple[int, float], ...] = POLISH,
) -> tuple[FactorTable, float]:
    # The pooled entries stand for GPUs and engines outside the runs: they keep the descent's fit
    # over every run rather than being bent to the few runs that use them.
    slots = (
        [
            ("family", key, name)
            for key in sorted(table.families)
            if key != POOLED
            for name in HARDWARE_FACTORS
        ]
        + [
            ("engine", key, name)
            for key in sorted(table.engines)
            if key != POOLED
            for name in ENGINE_FACTORS
        ]
        + [("moe", MOE_KEY, name) for name in table.moe]
    )

    def unpack(x: np.ndarray) -> FactorTable:
        families = {k: dict(v) for k, v in table.families.items()}
        engines = {k: dict(v) for k, v in table.engines.items()}
        moe = dict(table.moe)
        for (kind, key, name), value in zip(slots, x):
            target = (
                families[key] if kind == "family" else engines[key] if kind == "engine" else moe
            )
            target[name] = _clip(name, math.exp(value))
        return FactorTable(families, engines, table.notes, moe)

    def loss(x: np.ndarray) -> float:
        trial = unpack(x)
        penalty = sum(
            prior_penalty({name: _clip(name, math.exp(v))}) for (_, _, name), v in zip(slots, x)
        )
        return penalty + sweep_loss(
            replays,
            lambda r: {
                **trial.families[family_of(r.run)],
                **trial.engines[generation_of_run(r.run)],
                "moe_flops_factor": 1.0,
                **trial.moe,
            },
        )

    source = {"family": table.families, "engine": table.engines, "moe": {MOE_KEY: table.moe}}
    x = np.log([source[kind][key][name] for kind, key, name in slots])
    for iterations, step in passes:
        x = nelder_mead(loss, x, iterations=iterations, step=step)
    return unpack(x), loss(x)


def _descend(
    replays: list[Replay],
    family_of: Callable[[MeasuredRun], str],
    generation_of_run: Callable[[MeasuredRun], str],
    start: dict[str, float],
    rounds: int,
    iterations: int,
) -> tuple[FactorTable, float]:
    families = sorted({family_of(r.run) for r in replays} | {POOLED})
    generations = sorted({generation_of_run(r.run) for r in replays} | {POOLED})
    hardware = {f: {n: start[n] for n in HARDWARE_FACTORS} for f in families}
    engines = {g: {n: start[n] for n in ENGINE_FACTORS} for g in generations}
    moe_runs = [r for r in replays if "moe_flops_factor" in fitted_names([r])]
    moe = {n: start[n] for n in MOE_FACTORS} if moe_runs else {}

    def factors(replay: Replay) -> dict[str, float]:
        return {
            **hardware[family_of(replay.run)],
            **engines[generation_of_run(replay.run)],
            "moe_flops_factor": 1.0,
            **moe,
        }

    for _ in range(rounds):
        _fit_groups(replays, family_of, HARDWARE_FACTORS, hardware, factors, iterations)
        if any(
            family_of(r.run) != POOLED for r in replays
        ):  # the pooled entry also serves unseen families
            hardware[POOLED] = _fit_block(
                HARDWARE_FACTORS,
                hardware[POOLED],
                lambda values: sweep_loss(replays, lambda r: {**factors(r), **values}),
                iterations,
            )
        if moe_runs:
            moe = _fit_block(
                MOE_FACTORS,
                moe,
                lambda values: sweep_loss(moe_runs, lambda r: {**factors(r), **values}),
                iterations,
            )
        _fit_groups(replays, generation_of_run, ENGINE_FACTORS, engines, factors, iterations)
        if any(generation_of_run(r.run) != POOLED for r in replays):
            engines[POOLED] = _fit_block(
                ENGINE_FACTORS,
                engines[POOLED],
                lambda values: sweep_loss(replays, lambda r: {**factors(r), **values}),
                iterations,
            )
    notes = {**_counts(replays, family_of), **_counts(replays, generation_of_run)}
    notes[POOLED] = (
        f"{len(replays)} runs from {len({r.run.sweep for r in replays})} sweeps, every family pooled"
    )
    if moe_runs:
        notes[MOE_KEY] = (
            f"{len(moe_runs)} MoE runs from {len({r.run.sweep for r in moe_runs})} sweeps, every family pooled"
        )
    table = FactorTable(hardware, engines, notes, moe)
    return table, sweep_loss(replays, factors)
