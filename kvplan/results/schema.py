"""The one result schema, `kvplan.result/1`, as a typed record.

A results file holds one JSON object per line with these fields:

    schema          "kvplan.result/1"
    kind            "bench" | "estimate" | "quality" | "error" (a failed sweep point) | "fidelity"
    (simulated vs measured) | "plan" (a kvplan plan candidate)
    run_id          str: a hash of the run's inputs (deterministic)
    kvplan_version  str
    mode            "simulated" | "real" | "analytic"
    optimization    str: the optimization (or variant, e.g. prefix@kv-aware) of this record
    baseline        bool: the run's first optimization, which ratios compare against
    params          {...the run's inputs: model, gpu, tp, workload, seed, ...}
    metrics         {...flat numbers named as in docs/metrics.md; the descriptive ones
                     (DESCRIPTIVE_METRICS) are words or yes/no; lists and records as they are...}
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

# Metrics that describe a run rather than measure it, with their JSON type: words (str) or
# yes/no (bool). Every other metric is a number, or null where nothing was measured; lists
# (per pod, per layer) and nested records (an error band) are taken as they are. A bench
# record's entries are the metric registry's TEXT and FLAG metrics (kvplan.core.metric_registry):
# this lowest layer cannot import the registry, so tests/test_result_checks.py holds the two
# equal. The other kinds add their own words.
DESCRIPTIVE_METRICS: dict[str, type] = {
    "step_model": str,  # bench: which step-model factors timed the run
    "device": str,  # bench (real mode), quality: the device it ran on
    "overloaded": bool,  # bench: whether the backlog grew
    "error": str,  # error: why a sweep point failed
    "verdict": str,  # estimate: fits / does not fit
    "policy": str,  # quality: the eviction policy measured
    "kv_format": str,  # quality
    "kernel_backend": str,  # quality, real mode
    "model_dtype": str,  # quality, real mode
}


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
