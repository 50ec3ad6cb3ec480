"""`kvplan sweep`: a grid of bench runs as one study, on a local process pool or Ray.

A sweep file (TOML) names the axes and fixed settings:

    [fixed]                      # any kvplan bench setting, under its flat name (the CLI's)
    workload = "sharegpt"
    num_requests = 300
    calibration = "h100.json"    # as --calibration FILE: `kvplan calibrate`'s step model
    [axes]                       # every combination is one point
    gpu = ["l4", "a100-80gb"]
    rate = [1, 2, 4, 8]
    optimization = ["contiguous-oracle", "paged"]
    [slo]
    ttft_p90_s = 5.0             # the study reports where p90 TTFT crosses this
    [prices]                     # optional: $/GPU-hour, for cost per million tokens
    l4 = 0.8

Each point gets a stable id (a hash of its settings). Finished points are appended to
DIR/results.jsonl as they complete, one whole line each, so an interrupted sweep leaves a
consistent file and a re-run skips the points it holds (failed points are recorded with
their error and retried). When the grid is complete the file is rewritten in grid order,
so the local and Ray executors produce the same bytes for the same seed. Finished points
that are not in the current grid (the file changed) are kept after the grid's points
(store.py); a sweep never deletes a finished point.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvplan.bench.config import CALIBRATION, FLAT_NAMES
from kvplan.bench.mode import Mode, record_mode
from kvplan.bench.setting_use import Setup
from kvplan.core.engine_factory import SizingConfig
from kvplan.execution.executors import DEFAULT_EXECUTOR, EXECUTORS, make_executor
from kvplan.results import ResultRecord, dumps
from kvplan.spec.extras import require_extra
from kvplan.sweep.checks import check_sweep_data
from kvplan.sweep.point import WORKLOAD_KEYS, run_point
from kvplan.sweep.store import finished_records, rewrite

__all__ = [
    "DEFAULT_EXECUTOR",
    "EXECUTORS",
    "SweepSpec",
    "load_spec",
    "point_id",
    "run_point",
    "run_sweep",
]


@dataclass(frozen=True)
class SweepSpec:
    fixed: dict[str, Any]
    axes: dict[str, list[Any]]
    slo_ttft_p90_s: float | None
    prices: dict[str, float]

    def calibration_setups(self) -> list[Setup]:
        """Each simulated point's calibration file (or step model) with the model, GPU and
        engine it times, bench's defaults where the point sets none (for their warnings,
        kvplan.bench.setting_use.calibration_warnings)."""
        sizing = SizingConfig()
        keys = ("model", "gpu", "engine", "engine_version")
        setups: list[Setup] = []
        for point in self.points():
            given = point.get(CALIBRATION) or point.get("step_model")
            model, gpu, engine, version = (point.get(key, getattr(sizing, key)) for key in keys)
            texts = (isinstance(value, str) for value in (given, model, gpu))
            if record_mode(point.get("mode")) is not Mode.SIMULATED or not all(texts):
                continue  # a real point refuses a calibration; a bad value fails its point
            engine, version = (v if isinstance(v, str) else None for v in (engine, version))
            setups.append((given, model, gpu, engine, version))
        return setups

    def points(self) -> list[dict[str, Any]]:
        names = list(self.axes)
        grid = []
        for values in itertools.product(*(self.axes[n] for n in names)):
            point = {**self.fixed, **dict(zip(names, values))}
            point["point_id"] = point_id(point)
            grid.append(point)
        return grid


def point_id(point: dict[str, Any]) -> str:
    settings = {k: v for k, v in point.items() if k != "point_id"}
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[
        :16
    ]


def load_spec(path: str | Path) -> SweepSpec:
    path = Path(path)
    if not path.is_file():
        raise ValueError(
            f"sweep file '{path}' does not exist; write a TOML file with [fixed] and [axes] tables"
        )
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"malformed sweep file '{path}': {err}; fix the TOML") from None
    except RecursionError:
        raise ValueError(
            f"malformed sweep file '{path}': nested too deeply; fix the TOML"
        ) from None
    known = set(FLAT_NAMES) | set(WORKLOAD_KEYS) | {"optimization", CALIBRATION}
    check_sweep_data(data, str(path), known)  # tables, shapes, numbers (as bench's flags)
    axes = data["axes"]
    slo = (data.get("slo") or {}).get("ttft_p90_s")
    return SweepSpec(
        dict(data.get("fixed") or {}),
        dict(axes),
        float(slo) if slo else None,
        {str(k): float(v) for k, v in (data.get("prices") or {}).items()},
    )


def run_sweep(
    spec: SweepSpec,
    out_dir: str | Path,
    executor: str = DEFAULT_EXECUTOR,
    workers: int | None = None,
    address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    notify: Callable[[str], None] | None = None,
) -> list[ResultRecord]:
    """Run every missing point; returns the records in grid order (also written to
    DIR/results.jsonl)."""
    points = spec.points()
    # A missing optional package is one error before the output folder is touched, not an
    # import error recorded for every point
    if executor == "ray":
        require_extra("ray", "the ray executor")
    if any(record_mode(point.get("mode")) is Mode.REAL for point in points):
        require_extra("real", "a sweep point with mode = 'real'")
    runner = make_executor(
        executor, workers, address
    )  # an unknown one fails before any output is touched
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = out_dir / "results.jsonl"
    # Finished points outside this grid are kept, never dropped (store.py)
    grid_ids = {p["point_id"] for p in points}
    finished = finished_records(results)
    done = {r.params["point_id"]: r for r in finished if r.params["point_id"] in grid_ids}
    outside = [r for r in finished if r.params["point_id"] not in grid_ids]
    if outside and notify:
        notify(
            f"{len(outside)} finished points in {results} are not in this grid; they stay in the "
            "file "
            "(use a new --out folder to keep studies apart)"
        )
    rewrite(results, [done[p["point_id"]] for p in points if p["point_id"] in done] + outside)
    todo = [p for p in points if p["point_id"] not in done]
    if progress:
        progress(len(points) - len(todo), len(points))
    fresh: dict[str, ResultRecord] = {}
    with results.open("a") as handle:
        study = {"slo_ttft_p90_s": spec.slo_ttft_p90_s, "prices": spec.prices}

        def record(result: ResultRecord) -> None:
            result.params["study"] = study  # lets `kvplan report` summarize the study
            handle.write(dumps(result) + "\n")  # one whole line per point
            handle.flush()
            fresh[result.params["point_id"]] = result
            if progress:
                progress(1, len(points))

        # What finished is on disk; an interrupt terminates the local workers (execution/pool.py),
        # and a child process drives Ray (execution/ray_driver.py)
        runner.map(run_point, todo, record)
    ordered = [done.get(p["point_id"]) or fresh.get(p["point_id"]) for p in points]
    final = [r for r in ordered if r is not None]
    rewrite(results, final + outside)
    return final
