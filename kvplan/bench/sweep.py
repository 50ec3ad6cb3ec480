"""`kvplan sweep`: a grid of bench runs as one study, on a local process pool or Ray.

A sweep file (TOML) names the axes and fixed settings:

    [fixed]                      # any kvplan bench setting, under its flat name (the CLI's)
    workload = "sharegpt"
    num_requests = 300
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
so the local and Ray executors produce the same bytes for the same seed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from kvplan.bench.config import FLAT_NAMES, BenchConfig
from kvplan.bench.workloads import WorkloadSpec
from kvplan.results import ResultRecord, dumps, error_record, read_record, write_jsonl

EXECUTORS = ("local", "ray")
# Sweep-file names of the workload settings -> WorkloadSpec fields (the rest: BenchConfig's flat names)
WORKLOAD_KEYS = {"workload": "kind", **{f.name: f.name for f in fields(WorkloadSpec) if f.name not in ("kind", "params")}}


@dataclass(frozen=True)
class SweepSpec:
    fixed: dict[str, Any]
    axes: dict[str, list[Any]]
    slo_ttft_p90_s: float | None
    prices: dict[str, float]

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
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def load_spec(path: str | Path) -> SweepSpec:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"sweep file '{path}' does not exist; write a TOML file with [fixed] and [axes] tables")
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"malformed sweep file '{path}': {err}; fix the TOML") from None
    axes = data.get("axes") or {}
    if not axes or not all(isinstance(v, list) and v for v in axes.values()):
        raise ValueError(f"sweep file '{path}' needs an [axes] table of non-empty lists, e.g. rate = [1, 2, 4]")
    known = set(FLAT_NAMES) | set(WORKLOAD_KEYS) | {"optimization"}
    unknown = sorted((set(axes) | set(data.get("fixed") or {})) - known)
    if unknown:
        raise ValueError(f"sweep file '{path}': unknown settings {', '.join(unknown)}; use kvplan bench's "
                         f"settings ({', '.join(sorted(known))})")
    slo = (data.get("slo") or {}).get("ttft_p90_s")
    return SweepSpec(dict(data.get("fixed") or {}), dict(axes), float(slo) if slo else None,
                     {str(k): float(v) for k, v in (data.get("prices") or {}).items()})


def run_point(point: dict[str, Any]) -> ResultRecord:
    """One grid point -> one result record (or an error record). Runs in a worker.

    The point's workload is made exactly as `kvplan bench` makes it (bench.run.prepare):
    same defaults, max_model_len from the model for traces."""
    from kvplan.bench.matrix import run_matrix
    from kvplan.bench.run import prepare

    settings = {k: v for k, v in point.items() if k != "point_id"}
    try:
        optimization = settings.pop("optimization", "paged")
        workload = WorkloadSpec(**{WORKLOAD_KEYS[k]: settings.pop(k) for k in list(settings) if k in WORKLOAD_KEYS})
        config, built = prepare(BenchConfig.from_flat(**settings), workload)
        (record,) = run_matrix(config, built.requests, [optimization])
        record.params["point_id"] = point["point_id"]
        record.params["sweep"] = {k: v for k, v in point.items() if k != "point_id"}
        return record
    except Exception as err:  # a failed point is data, not a crash of the sweep
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        return error_record(point["point_id"], str(point.get("optimization")),
                            {"point_id": point["point_id"], "sweep": settings}, message)


def _existing(results: Path) -> dict[str, ResultRecord]:
    """Finished points already in the output; a truncated last line (a kill mid-write) is dropped."""
    done: dict[str, ResultRecord] = {}
    if not results.is_file():
        return done
    for line in results.read_text().splitlines():
        try:
            record = read_record(line)
        except ValueError:
            continue
        if record.kind != "error":
            done[record.params["point_id"]] = record
    return done


def run_sweep(spec: SweepSpec, out_dir: str | Path, executor: str = "local", workers: int | None = None,
              address: str | None = None, progress: Callable[[int, int], None] | None = None) -> list[ResultRecord]:
    """Run every missing point; returns the records in grid order (also written to DIR/results.jsonl)."""
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor '{executor}'; use one of: {', '.join(EXECUTORS)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = out_dir / "results.jsonl"
    points = spec.points()
    done = _existing(results)
    _rewrite(results, [done[p["point_id"]] for p in points if p["point_id"] in done])
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

        if executor == "local":
            _run_local(todo, workers or os.cpu_count() or 1, record)
        else:
            _run_ray(todo, address, record)
    ordered = [done.get(p["point_id"]) or fresh.get(p["point_id"]) for p in points]
    final = [r for r in ordered if r is not None]
    _rewrite(results, final)
    return final


def _rewrite(path: Path, records: list[ResultRecord]) -> None:
    if records or path.exists():
        write_jsonl(path, records) if records else path.write_text("")


def _run_local(todo: list[dict[str, Any]], workers: int, record: Callable[[ResultRecord], None]) -> None:
    if workers <= 1 or len(todo) <= 1:
        for point in todo:
            record(run_point(point))
        return
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(run_point, point) for point in todo]
        try:
            for future in as_completed(futures):
                record(future.result())
        except KeyboardInterrupt:  # what finished is on disk; the rest runs on the next call
            for future in futures:
                future.cancel()
            raise


def _run_ray(todo: list[dict[str, Any]], address: str | None, record: Callable[[ResultRecord], None]) -> None:
    try:
        import ray
    except ImportError:
        raise ValueError("--executor ray needs Ray: pip install 'kvplan[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=None if address in (None, "local") else address, ignore_reinit_error=True,
                 include_dashboard=False, log_to_driver=False)
    remote = ray.remote(run_point)
    pending = [remote.remote(point) for point in todo]
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        record(ray.get(ready[0]))
