"""Workloads: the Request record, synthetic generators and real-trace loaders.

Everything the engine runs is a list of `Request`s sorted by arrival; this package is the
only place that makes them, so the engine never cares where a workload came from.
"""

from kvplan.workload.request import Request
from kvplan.workload.arrivals import ARRIVALS
from kvplan.workload.catalog import WORKLOAD_KINDS, make_workload
from kvplan.workload.traces import TRACE_FORMATS, TraceLoad, load_trace

__all__ = ["ARRIVALS", "TRACE_FORMATS", "WORKLOAD_KINDS", "Request", "TraceLoad", "load_trace", "make_workload"]
