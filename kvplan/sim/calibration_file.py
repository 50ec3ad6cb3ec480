"""The calibration file: `kvplan calibrate` writes it, `kvplan bench --calibration` reads it.
It holds the engine overhead (kvplan/sim/ops/overhead.py) fitted on a user's own runs, the one
fitted part of the operator step model; a file of the older factor step model (format /1) is
refused with the command that rewrites it.

The file says what it was fitted on (`fitted_on`: model, GPU and its family, engine and
release, resolved names as the fit read them), so a run on another one can be warned
(kvplan/sim/step_models.py); files written before it existed load without it.

Each figure keeps its rule in kvplan/spec/numbers.py: a finite number in a sane range (a NaN
or infinite per-step overhead would make every simulated step last forever). A file is read
up to MAX_FILE_BYTES and checked whole on load, before any run uses it; a refusal names the
file and the key. The file is written in one piece (kvplan/results/atomic.py) as strict JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvplan import MIB
from kvplan.results.atomic import strict_json, write_text
from kvplan.sim.ops.overhead import EngineOverhead
from kvplan.spec.capped_read import read_capped
from kvplan.spec.numbers import check_number

CALIBRATION_FORMAT = "kvplan-step-model-calibration/2"
OLDER_FORMATS = ("kvplan-step-model-calibration/1",)  # the factor step model's
OVERHEAD_NAMES = ("base_s", "per_seq_s", "gpu_factor")
DEFAULT_OVERHEAD = {"gpu_factor": 1.0}
MAX_FILE_BYTES = 16 * MIB  # a calibration file holds a few factors and a row per run figure
SOURCE_CHARS = 200  # the fit's description, carried into every result the file times
REWRITE = "rewrite it with `kvplan calibrate`"
FITTED_ON_KEYS = ("model", "gpu", "gpu_family", "engine", "engine_version")
NAME_CHARS = 200  # a model id or a path; longer is not one kvplan wrote


def check_overhead(values: Mapping[str, Any], where: str = "overhead") -> dict[str, float]:
    """Every figure in OVERHEAD_NAMES by its rule, refused after `where` (ValueError)."""
    return {
        name: float(check_number(name, values[name], label=f"{where} {name}"))
        for name in OVERHEAD_NAMES
    }


@dataclass(frozen=True)
class FittedOn:
    """What a calibration's runs ran on: the model and GPU by their resolved names, the GPU's
    family (whose shipped factors the fit replaced), the engine and its release (None: the
    newest)."""

    model: str
    gpu: str
    gpu_family: str
    engine: str
    engine_version: str | None = None

    def describe(self) -> str:
        """'llama-3.1-70b / h100-80gb / vllm 0.11.0'."""
        engine = f"{self.engine} {self.engine_version}" if self.engine_version else self.engine
        return f"{self.model} / {self.gpu} / {engine}"

    def as_dict(self) -> dict[str, str | None]:
        return {key: getattr(self, key) for key in FITTED_ON_KEYS}


@dataclass(frozen=True)
class CalibrationFile:
    overhead: EngineOverhead
    source: str  # what the fit was made on, as the file says
    held_out: dict[str, float] | None  # per figure: median held-out error and its runs
    fitted_on: FittedOn | None = None  # None: a file written before kvplan recorded it


def _refused(path: Path, problem: str) -> ValueError:
    return ValueError(f"calibration file '{path}': {problem}; {REWRITE}")


def _load(path: Path) -> Any:
    try:
        data = read_capped(path, MAX_FILE_BYTES)
    except OSError as err:
        raise ValueError(
            f"calibration file '{path}' cannot be read ({err.strerror or err}); "
            "write one with `kvplan calibrate`"
        ) from None
    if len(data) > MAX_FILE_BYTES:
        raise _refused(path, f"larger than {MAX_FILE_BYTES // MIB} MiB, not one kvplan wrote")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, bad UTF-8, 5,000-digit numbers
        raise ValueError(
            f"calibration file '{path}' cannot be read as JSON ({str(err).splitlines()[0][:120]}); "
            "write one with `kvplan calibrate`"
        ) from None


def _held_out(path: Path, band: Any) -> dict[str, float] | None:
    """The held-out errors: `<figure>_error` (a fraction) and `<figure>_runs` (a count) only,
    since bench copies them into every result it times with the file."""
    if band is None:
        return None
    if not isinstance(band, dict):
        raise _refused(path, f"held_out must be a table of errors, got {type(band).__name__}")
    checked: dict[str, float] = {}
    for key, value in band.items():
        rule = "fit_error" if str(key).endswith("_error") else "fit_runs"
        if not str(key).endswith(("_error", "_runs")):
            raise _refused(path, f"held_out has an unknown key {str(key)[:40]!r}")
        try:
            checked[key] = check_number(rule, value, label=f"held_out {key}")
        except ValueError as err:
            raise _refused(path, str(err)) from None
    return checked


def _fitted_on(path: Path, table: Any) -> FittedOn | None:
    """The fit's model, GPU and engine: text each (the release may be null), none longer than
    NAME_CHARS."""
    if table is None:
        return None
    if not isinstance(table, dict):
        raise _refused(path, f"fitted_on must be a table, got {type(table).__name__}")
    unknown = sorted(str(key) for key in set(table) - set(FITTED_ON_KEYS))
    if unknown:
        raise _refused(path, f"fitted_on has an unknown key {unknown[0][:40]!r}")
    names: dict[str, str] = {}
    for key in FITTED_ON_KEYS:
        value = table.get(key)
        if value is None and key == "engine_version":  # the newest release
            continue
        if not isinstance(value, str) or not value.strip() or len(value) > NAME_CHARS:
            shown = "nothing" if value is None else repr(value)[:40]
            raise _refused(path, f"fitted_on.{key} must be a name, got {shown}")
        names[key] = value
    return FittedOn(**names)


def read_calibration(path: str | Path) -> CalibrationFile:
    """The checked content of a calibration file (ValueError naming the file and the key)."""
    path = Path(path)
    data = _load(path)
    if isinstance(data, dict) and data.get("format") in OLDER_FORMATS:
        raise _refused(path, "it holds the factors of kvplan's older step model")
    if not isinstance(data, dict) or data.get("format") != CALIBRATION_FORMAT:
        raise ValueError(
            f"'{path}' is not a kvplan calibration file; write one with `kvplan calibrate`"
        )
    table = data.get("overhead")
    if not isinstance(table, dict):
        raise _refused(path, "no overhead table")
    values = {**DEFAULT_OVERHEAD, **table}
    missing = [name for name in OVERHEAD_NAMES if name not in values]
    if missing:
        raise _refused(path, f"misses overhead '{missing[0]}'")
    try:
        checked = check_overhead(values)
    except ValueError as err:
        raise _refused(path, str(err)) from None
    source = data.get("source", "")
    if not isinstance(source, str):
        raise _refused(path, f"source must be text, got {type(source).__name__}")
    if len(source) > SOURCE_CHARS:
        source = source[: SOURCE_CHARS - 1] + "…"
    overhead = EngineOverhead(
        checked["base_s"],
        checked["per_seq_s"],
        False,
        checked["gpu_factor"],
        f"calibration {path.name}: {source}",
    )
    return CalibrationFile(
        overhead,
        source,
        _held_out(path, data.get("held_out")),
        _fitted_on(path, data.get("fitted_on")),
    )


def calibration_band(path: str | Path) -> dict[str, Any] | None:
    """A calibration file's own held-out errors (`kvplan calibrate`: each run left out of the fit
    in turn), as time_error_band writes them; None for files written without them."""
    band = read_calibration(path).held_out
    return (
        None
        if band is None
        else {"basis": "leave one run out (the calibration's own runs)", **band}
    )


def write_calibration(
    path: Path,
    overhead: EngineOverhead,
    source: str,
    fitted_on: FittedOn,
    rows: list[dict[str, Any]],
    held_out: dict[str, float] | None = None,
) -> None:
    """The file, written whole or not at all (a unique temporary name beside it: a user's file
    named like `<out>.tmp` is never touched). `gpu` and `engine` stay at the top for readers of
    files older than `fitted_on`."""
    data: dict[str, Any] = {
        "format": CALIBRATION_FORMAT,
        "gpu": fitted_on.gpu,
        "engine": fitted_on.engine,
        "fitted_on": fitted_on.as_dict(),
        "overhead": {name: getattr(overhead, name) for name in OVERHEAD_NAMES},
        "source": source,
        "fit_errors": rows,
    }
    if held_out is not None:
        data["held_out"] = held_out
    write_text(path, strict_json(data, indent=2) + "\n")
