"""One point of a `kvplan sweep`: its settings -> one result record, run in a worker
(a process of the local pool, or a Ray task started by execution/ray_driver.py)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from kvplan.bench.config import BenchConfig
from kvplan.bench.workloads import WorkloadSpec
from kvplan.results import ResultRecord, error_record

# Sweep-file names of the workload settings -> WorkloadSpec fields (the rest: BenchConfig's flat
# names)
WORKLOAD_KEYS = {
    "workload": "kind",
    **{f.name: f.name for f in fields(WorkloadSpec) if f.name not in ("kind", "params")},
}


def run_point(point: dict[str, Any]) -> ResultRecord:
    """One grid point -> one result record (or an error record). Runs in a worker.

    The point's settings are read as `kvplan bench`'s options are (BenchConfig.from_flat,
    WorkloadSpec): a setting the point leaves out takes the default bench's option shows, and
    the workload is made as bench makes it (bench.run.prepare)."""
    from kvplan.bench.matrix import run_matrix
    from kvplan.bench.optimizations import parse_optimizations
    from kvplan.bench.run import prepare
    from kvplan.bench.setting_use import check_samples_read

    settings = {k: v for k, v in point.items() if k != "point_id"}
    swept = dict(settings)  # an error record names every setting of its point
    try:
        optimization = settings.pop("optimization", "paged")
        workload = WorkloadSpec(
            **{WORKLOAD_KEYS[k]: settings.pop(k) for k in list(settings) if k in WORKLOAD_KEYS}
        )
        check_samples_read(workload.samples, parse_optimizations([optimization]))
        config, built = prepare(BenchConfig.from_flat(**settings), workload)
        (record,) = run_matrix(config, built.requests, [optimization])
        record.params["point_id"] = point["point_id"]
        record.params["sweep"] = {k: v for k, v in point.items() if k != "point_id"}
        return record
    except Exception as err:  # a failed point is data, not a crash of the sweep
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        return error_record(
            point["point_id"],
            str(point.get("optimization")),
            {"point_id": point["point_id"], "sweep": swept},
            message,
        )
