"""Settings a bench run would not read, found before it runs.

A user reads results as if every setting given acted on them. Where a setting changes
nothing the results would then be misread (a KV budget that no optimization keeps: the
table shows full caches under a budget's name), the run is refused with the reason; where
nothing is lost (routers named for one pod: one engine needs no router), a warning says
so and the run goes on, as it does for a calibration file fitted on another model, GPU or
engine than the run's (its factors are read, but may not hold here). The workload's own
settings (--workload-param, vLLM's random lengths) are checked by WorkloadSpec itself. Library
errors name settings by their config names (kvplan.spec.setting_error); the command line
spells them as its flags.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from kvplan.core.policies.registry import policy_names
from kvplan.spec.setting_error import SettingError

if TYPE_CHECKING:
    from kvplan.bench.config import BenchConfig
    from kvplan.core.engine_factory import Optimization

# What a run's step model was fitted for: its step_model setting (a name, or a calibration
# file), model, GPU, engine and release, as the run names them
Setup = tuple[str | None, str, str, str | None, str | None]


def check_budget_read(kv_budget: Any, optimizations: Iterable[Optimization]) -> None:
    """Refuse a KV budget when no optimization has an eviction policy to keep it."""
    if kv_budget is None or any(o.policy for o in optimizations):
        return
    raise SettingError(
        "{kv_budget} {got} is kept only by an eviction policy ({policies}) and no optimization "
        "has one: add one to {optimizations} (e.g. h2o) or drop {kv_budget}",
        got=kv_budget,
        policies=", ".join(policy_names()),
    )


def check_samples_read(samples: int, optimizations: Iterable[Optimization]) -> None:
    """Refuse parallel samples under a policy that cannot model them (its fork_refusal)."""
    if samples <= 1:
        return
    from kvplan.core.policies.registry import lookup

    for optimization in optimizations:
        refusal = lookup(optimization.policy).fork_refusal if optimization.policy else None
        if refusal is not None:
            raise SettingError(
                "{samples} {got} cannot run with '{name}': {why}",
                got=samples,
                name=optimization.policy,
                why=refusal,
            )


def ignored_settings(
    config: BenchConfig, optimizations: Sequence[Optimization]
) -> list[SettingError]:
    """Refuses (SettingError) a setting whose results would be misread; returns a warning
    for each harmless one, and for a calibration file fitted on another setup."""
    check_budget_read(config.kv_budget, optimizations)
    sizing = config.sizing
    warnings = calibration_warnings(
        [(config.step_model, sizing.model, sizing.gpu, sizing.engine, sizing.engine_version)]
    )
    cluster = config.cluster
    if cluster.pods == 1 and cluster.routers:
        warnings.append(
            SettingError(
                "{routers} {names} not used: one pod needs no router; routers spread requests "
                "over {pods} N > 1",
                names=",".join(cluster.routers),
            )
        )
    return warnings


def calibration_warnings(setups: Iterable[Setup]) -> list[SettingError]:
    """A warning for each calibration file used on another model, GPU or engine than it was
    fitted on (kvplan.sim.step_models), once per distinct pair. A setup whose names do not
    resolve is left to its run, which refuses it (a sweep records it as a failed point)."""
    from kvplan.sim.step_models import calibration_file_of, calibration_mismatch

    warnings: dict[str, SettingError] = {}
    for step_model, model, gpu, engine, version in dict.fromkeys(setups):
        path = calibration_file_of(step_model)
        if path is None:
            continue
        try:
            mismatch = calibration_mismatch(path, model, gpu, engine, version)
        except ValueError:
            continue
        if mismatch is not None:
            warnings.setdefault(str(mismatch), mismatch)
    return list(warnings.values())


def check_sweep_budgets(fixed: dict[str, Any], axes: dict[str, list[Any]], label: str) -> None:
    """A sweep's KV budget (fixed, or any value of its axis) needs an eviction policy among
    the sweep's optimizations, as bench's --kv-budget needs one among --optimizations (a
    budget beside a baseline without one is fine: both are compared). Names that do not
    parse are left to their points, which record the error."""
    from kvplan.bench.optimizations import parse_optimization

    budgets = [fixed["kv_budget"]] if "kv_budget" in fixed else axes.get("kv_budget", [])
    budget = next((value for value in budgets if value is not None), None)
    names = [fixed["optimization"]] if "optimization" in fixed else axes.get("optimization")
    parsed = []
    for name in names or ["paged"]:  # a point without one runs paged
        try:
            parsed.append(parse_optimization(str(name)))
        except ValueError:
            continue
    try:
        check_budget_read(budget, parsed)
    except SettingError as err:
        raise ValueError(f"{label}: {err.named(_sweep_key)}") from None


def _sweep_key(setting: str) -> str:
    """A setting as a sweep file names it: kv_budget, and optimization for the list."""
    return "optimization" if setting == "optimizations" else setting
