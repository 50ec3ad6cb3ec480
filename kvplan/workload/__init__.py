"""Workloads: the Request record, synthetic generators and real-trace loaders.

Everything the engine runs is a list of `Request`s sorted by arrival; this package is the
only place that makes them, so the engine never cares where a workload came from. The
names below load on first use (PEP 562): the engine needs `Request`, not the generators'
numpy.
"""

from __future__ import annotations

from typing import Any

from kvplan import lazy_attribute

_HOMES = {
    "Request": "kvplan.workload.request",
    "ARRIVALS": "kvplan.workload.arrivals",
    "WORKLOAD_KINDS": "kvplan.workload.kinds",
    "make_workload": "kvplan.workload.catalog",
    "TRACE_FORMATS": "kvplan.workload.traces",
    "TraceLoad": "kvplan.workload.traces",
    "load_trace": "kvplan.workload.traces",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _HOMES, name)
