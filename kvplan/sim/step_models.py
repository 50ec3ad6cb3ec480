"""How a simulated run's steps are timed, as a user chooses it: a step model by name (fitted,
roofline) or a file `kvplan calibrate` wrote. One check serves bench's --step-model and
--calibration, plan's same two options and a sweep file's step_model and calibration keys, so
each refuses the same values in the same words (a setting named by its config field, worded
by each front end), and one comparison says when a calibration file was fitted on another
model, GPU or engine than the run it times.

Light: no engine or numpy, so the command line checks its options before any work.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvplan.engines.engine_releases import engine_generation, parse_version
from kvplan.sim.calibration_file import FittedOn, read_calibration
from kvplan.sim.ops.overhead import EngineOverhead
from kvplan.spec.resolve import load_gpu, load_model
from kvplan.spec.setting_error import SettingError

FITTED, ROOFLINE = "fitted", "roofline"
STEP_MODELS = (FITTED, ROOFLINE)


def step_model_setting(step_model: Any, calibration: Any) -> str | None:
    """The run's step_model setting from a step model's name and a calibration file (either
    or neither): the name, or the file, read and checked now so a foreign or unreadable one
    fails before any work. SettingError names `step_model` / `calibration`; where the file
    goes is the setting `calibration_file`, which each front end spells as it takes a file
    (--calibration FILE, calibration = "FILE")."""
    if step_model is not None and step_model not in STEP_MODELS:
        raise SettingError(
            "{step_model} must be fitted or roofline, got {got!r}; a file written by "
            "`kvplan calibrate` goes in {calibration_file}",
            got=step_model,
        )
    if calibration is None:
        return step_model
    if not isinstance(calibration, (str, Path)) or not str(calibration).strip():
        raise SettingError(
            "{calibration} must name a file written by `kvplan calibrate`, got {got!r}",
            got=calibration,
        )
    if step_model is not None:
        raise SettingError(
            "{step_model} {got} and {calibration} exclude each other (the file is a step "
            "model); set one",
            got=step_model,
        )
    read_calibration(calibration)  # an unreadable or foreign file is refused now, by its name
    return str(calibration)


def calibration_file_of(step_model: str | None) -> str | None:
    """The calibration file a step_model setting names (None for a step model by name)."""
    return None if step_model in (None, *STEP_MODELS) else step_model


def calibration_mismatch(
    calibration: str | Path,
    model: str,
    gpu: str,
    engine: str | None = None,
    engine_version: str | None = None,
) -> SettingError | None:
    """A warning when a calibration file was fitted on another model, GPU or engine than this
    run's: an engine overhead fitted on one model's batches and one GPU may not transfer. Names
    are compared resolved (an alias or HF id of the same model matches); the engine differs
    by name, by generation (vLLM V0 / V1: engines of different overheads), or by minor
    release where both name one. None for a match, and for a file that does not say (older ones)."""
    fitted = read_calibration(calibration).fitted_on
    if fitted is None:
        return None
    run = FittedOn(
        model=load_model(model).name,
        gpu=load_gpu(gpu).name,
        gpu_family=load_gpu(gpu).family,
        engine=(engine or "vllm").strip().lower(),
        engine_version=engine_version or None,
    )
    if (
        fitted.model == run.model
        and _gpu_name(fitted.gpu) == run.gpu
        and not _engines_differ(fitted, run)
    ):
        return None
    return SettingError(
        "{calibration} file '{path}' was fitted on {fitted}; this run is {run}: its overhead "
        "may not transfer",
        path=str(calibration),
        fitted=fitted.describe(),
        run=run.describe(),
    )


def _gpu_name(name: str) -> str:
    """A file's GPU as the catalog names it today (the file's own name if no longer listed)."""
    try:
        return load_gpu(name).name
    except ValueError:
        return name


def _engines_differ(fitted: FittedOn, run: FittedOn) -> bool:
    if fitted.engine.strip().lower() != run.engine:
        return True
    if fitted.engine_version and run.engine_version:
        # a patch release fixes bugs; the scheduler and kernels the overhead absorbs change with
        # the minor release (0.10 -> 0.11), so only that is a different engine
        fitted_release = parse_version(fitted.engine_version)
        run_release = parse_version(run.engine_version)
        return (fitted_release or ())[:2] != (run_release or ())[:2]
    try:
        return engine_generation(fitted.engine, fitted.engine_version) != engine_generation(
            run.engine, run.engine_version
        )
    except ValueError:  # a file naming an engine kvplan does not know: the names decided
        return False


@dataclass(frozen=True)
class StepTiming:
    """How a simulated engine times its steps, parsed once from the run's step_model setting
    (`step_timing`); the factory chooses by type."""


@dataclass(frozen=True)
class ShippedOverhead(StepTiming):
    """The operator step model at the shipped engine overhead of the run's release (fitted)."""


@dataclass(frozen=True)
class DatasheetRoofline(StepTiming):
    """The bare roofline at datasheet peak: a lower bound (roofline)."""


@dataclass(frozen=True)
class CalibratedOverhead(StepTiming):
    """The operator step model at the overhead a `kvplan calibrate` file holds."""

    path: str


@dataclass(frozen=True)
class GivenOverhead(StepTiming):
    """The operator step model at this overhead (fits replay runs with trial ones)."""

    overhead: EngineOverhead


def step_timing(setting: str | EngineOverhead | None) -> StepTiming:
    """The timing a step_model setting names: None or "fitted", "roofline", an overhead, or
    any other text as a calibration file (step_model_setting checked it)."""
    if isinstance(setting, EngineOverhead):
        return GivenOverhead(setting)
    if setting in (None, FITTED):
        return ShippedOverhead()
    if setting == ROOFLINE:
        return DatasheetRoofline()
    return CalibratedOverhead(str(setting))
