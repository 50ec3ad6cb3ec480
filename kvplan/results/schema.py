"""The one result schema, `kvplan.result/1`, as a typed record.

A results file holds one JSON object per line with these fields:

    schema          "kvplan.result/1"
    kind            "bench" | "estimate" | "quality" | "error" (a failed sweep point) | "fidelity" (simulated vs measured) | "plan" (a kvplan plan candidate)
    run_id          str: a hash of the run's inputs (deterministic)
    kvplan_version  str
    mode            "simulated" | "real" | "analytic"
    optimization    str: the optimization (or variant, e.g. prefix@kv-aware) of this record
    baseline        bool: the run's first optimization, which ratios compare against
    params          {...the run's inputs: model, gpu, tp, workload, seed, ...}
    metrics         {...flat numbers named as in docs/metrics.md...}
    timeseries      {"t": [...], "<metric>": [...], ...}

`params` and `metrics` stay dicts keyed by their flat names: the metric names are the
schema's vocabulary (docs/architecture.md names the function computing each). Error
records carry only the required fields; optional fields left as None are not written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

SCHEMA = "kvplan.result/1"
REQUIRED = ("schema", "kind", "run_id", "optimization", "params", "metrics")
OPTIONAL = ("kvplan_version", "mode", "baseline", "timeseries")


@dataclass(frozen=True)
class ResultRecord:
    kind: str
    run_id: str
    optimization: str
    params: dict[str, Any]
    metrics: dict[str, Any]
    kvplan_version: str | None = None
    mode: str | None = None
    baseline: bool | None = None
    timeseries: dict[str, list[float]] | None = None
    schema: str = SCHEMA

    @property
    def is_baseline(self) -> bool:
        return bool(self.baseline)

    def to_dict(self) -> dict[str, Any]:
        record = {name: getattr(self, name) for name in ("schema", "kind", "run_id")}
        record.update(
            {
                "kvplan_version": self.kvplan_version,
                "mode": self.mode,
                "optimization": self.optimization,
                "baseline": self.baseline,
                "params": self.params,
                "metrics": self.metrics,
                "timeseries": self.timeseries,
            }
        )
        return {k: v for k, v in record.items() if v is not None or k in REQUIRED}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ResultRecord:
        """From one parsed JSON line; the caller has checked the required fields."""
        return cls(
            schema=data["schema"],
            kind=data["kind"],
            run_id=data["run_id"],
            optimization=data["optimization"],
            params=data["params"],
            metrics=data["metrics"],
            **{name: data.get(name) for name in OPTIONAL},
        )


def make_record(
    kind: str,
    run_id: str,
    mode: str,
    optimization: str,
    params: dict[str, Any],
    metrics: dict[str, Any],
    timeseries: dict[str, list[float]] | None = None,
    baseline: bool = False,
) -> ResultRecord:
    from kvplan import __version__

    return ResultRecord(
        kind,
        run_id,
        optimization,
        params,
        _finite(metrics),
        __version__,
        mode,
        baseline,
        timeseries or {},
    )


def error_record(
    run_id: str, optimization: str, params: dict[str, Any], message: str
) -> ResultRecord:
    """A failed run (a sweep point): kept as data, with the error as its only metric."""
    return ResultRecord("error", run_id, optimization, params, {"error": message})


def _finite(values: dict[str, Any]) -> dict[str, Any]:
    """JSON has no NaN/inf: store them as null so every reader can parse the file."""
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in values.items()
    }
