"""Checks of a parsed sweep file: its tables, their shapes, and every number in them.

Numbers follow kvplan.spec.numbers, the rules `kvplan bench` applies to the same flags,
so `rate = [nan]` or `gpu_memory_utilization = [1.5]` is refused here as it is on the
command line.
"""

from __future__ import annotations

import math
from typing import Any

from kvplan.bench.config import CALIBRATION, check_perf_table_mode
from kvplan.bench.setting_use import check_sweep_budgets
from kvplan.sim.step_models import step_model_setting
from kvplan.sizing.operators.profile_table import perf_table_setting
from kvplan.spec.numbers import MAX_SWEEP_POINTS, check_grid_size, check_number, rule_for
from kvplan.spec.setting_error import SettingError

TABLES = ("fixed", "axes", "slo", "prices")
SLO_KEYS = ("ttft_p90_s",)


def check_sweep_data(data: dict[str, Any], path: str, known: set[str]) -> None:
    """Raise ValueError naming the file, table and key of the first problem."""
    where = f"sweep file '{path}'"
    unknown = sorted(set(data) - set(TABLES))
    if unknown:
        raise ValueError(
            f"{where}: unknown table(s) {', '.join(unknown)}; use "
            f"{', '.join(f'[{t}]' for t in TABLES)}"
        )
    for table in TABLES:
        if table in data and not isinstance(data[table], dict):
            raise ValueError(
                f"{where}: '{table}' must be a table ([{table}] with key = value lines), "
                f"got {type(data[table]).__name__}"
            )
    axes = data.get("axes") or {}
    if not axes or not all(isinstance(v, list) and v for v in axes.values()):
        raise ValueError(f"{where} needs an [axes] table of non-empty lists, e.g. rate = [1, 2, 4]")
    names = sorted((set(axes) | set(data.get("fixed") or {})) - known)
    if names:
        raise ValueError(
            f"{where}: unknown settings {', '.join(names)}; use kvplan bench's "
            f"settings ({', '.join(sorted(known))})"
        )
    for name, values in axes.items():
        seen: list[Any] = []
        for value in values:
            if value in seen:
                raise ValueError(
                    f"{where}: axis '{name}' lists {value!r} twice; every value is one point, "
                    "list it once"
                )
            seen.append(value)
            _check_value(name, value, f"{where}: axes.{name}")
    for name, value in (data.get("fixed") or {}).items():
        _check_value(name, value, f"{where}: fixed.{name}")
    check_grid_size(
        [len(v) for v in axes.values()],
        MAX_SWEEP_POINTS,
        where,
        "split the study into smaller sweeps",
    )
    slo = data.get("slo") or {}
    bad = sorted(set(slo) - set(SLO_KEYS))
    if bad:
        raise ValueError(
            f"{where}: unknown [slo] key(s) {', '.join(bad)}; known: {', '.join(SLO_KEYS)}"
        )
    for key, value in slo.items():
        _positive(value, f"{where}: slo.{key}")
    for gpu, price in (data.get("prices") or {}).items():
        _positive(price, f"{where}: prices.{gpu}")
    _check_step_models(data, where)
    _check_perf_tables(data, where)
    # a KV budget needs an eviction policy among the optimizations, as bench's flag does
    check_sweep_budgets(data.get("fixed") or {}, data.get("axes") or {}, where)


def _check_step_models(data: dict[str, Any], where: str) -> None:
    """step_model and calibration as bench's --step-model and --calibration take them
    (kvplan.sim.step_models: a step model by name, or a file `kvplan calibrate` wrote, read
    now, once per file, not per point), worded with the sweep file's keys."""
    fixed, axes = data.get("fixed") or {}, data.get("axes") or {}

    def values(name: str) -> list[Any]:
        return [fixed[name]] if name in fixed else list(axes.get(name, []))

    step_models = values("step_model")
    try:
        for step_model in step_models:
            step_model_setting(step_model, None)
        for calibration in values(CALIBRATION):
            step_model_setting(next(iter(step_models), None), calibration)
    except ValueError as err:  # a SettingError, or the file's own refusal naming it
        named = err.named(_sweep_spelling) if isinstance(err, SettingError) else str(err)
        raise ValueError(f"{where}: {named}") from None


def _check_perf_tables(data: dict[str, Any], where: str) -> None:
    """perf_table as bench's --perf-table takes it: each file read now, once, and refused with
    mode = "real" (kvplan.sizing.operators.profile_table, kvplan.bench.config)."""
    fixed, axes = data.get("fixed") or {}, data.get("axes") or {}

    def values(name: str) -> list[Any]:
        return [fixed[name]] if name in fixed else list(axes.get(name, []))

    try:
        tables = [perf_table_setting(value) for value in values("perf_table")]  # listed once each
        for mode in values("mode"):
            for table in tables:
                check_perf_table_mode(table, str(mode))
    except ValueError as err:  # a SettingError naming perf_table (and mode)
        named = err.named(_sweep_spelling) if isinstance(err, SettingError) else str(err)
        raise ValueError(f"{where}: {named}") from None


def _sweep_spelling(setting: str) -> str:
    """A setting as a sweep file writes it: its key, and a calibration file's key with its value."""
    return f'{CALIBRATION} = "FILE"' if setting == "calibration_file" else setting


def _check_value(name: str, value: Any, label: str) -> None:
    if rule_for(name) is not None:
        check_number(name, value, label)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{label} must be a finite number, got {value}")


def _positive(value: Any, label: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{label} must be a finite number > 0, got {value!r}")
    return float(value)
