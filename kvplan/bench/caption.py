"""The lines a bench table opens with, under its title: the load each optimization was
given and whether it kept up (a queue that grows without bound makes every latency a
figure of the run's length, not of the optimization), and what timed the steps, in words.

Read from the records' load figures (kvplan.core.summary.load_summary) and step-model
fields; plain strings, so the CLI only prints them.
"""

from __future__ import annotations

import math
from typing import Any

from kvplan.bench.mode import Mode, record_mode
from kvplan.results import ResultRecord
from kvplan.workload.kinds import rate_unit


def table_caption(records: list[ResultRecord]) -> tuple[str, ...]:
    """The load lines, then the timing line."""
    return (*load_lines(records), timing_line(records[0]))


def rate(value: float) -> str:
    """Requests per second to three significant figures (0.0117, 0.184, 3.07)."""
    return f"{value:.3g}"


def load_lines(records: list[ResultRecord]) -> list[str]:
    """'load: 0.15 req/s offered, served by every optimization', or one 'overloaded' line
    per optimization whose queue grew, with the rate it sustains. Nothing for records that
    carry no load figures (a cluster of pods, files from older versions)."""
    loads = [r for r in records if "overloaded" in r.metrics]
    if not loads:
        return []
    offered = loads[0].metrics.get("offered_requests_per_s")
    if offered is None:
        return [
            "load: every request sent at t = 0, a batch the engine drains (nothing to keep up with)"
        ]
    drawn = _drawn(loads[0], offered)
    overloaded = [r for r in loads if r.metrics["overloaded"]]
    if not overloaded:
        return [
            f"load: {rate(offered)} req/s offered, served by every optimization (no queue grows)",
            *drawn,
        ]
    lines = [_overloaded(record.optimization, record.metrics) for record in overloaded]
    lines.extend(drawn)
    kept = [r.optimization for r in loads if not r.metrics["overloaded"]]
    if kept:
        lines.append(f"served at {rate(offered)} req/s: {', '.join(kept)}")
    advice = (
        "an overloaded run's queue grows without bound, so its latencies grow with the run's length"
    )
    sustained = [
        r.metrics["sustainable_requests_per_s"]
        for r in overloaded
        if r.metrics.get("sustainable_requests_per_s")
    ]
    if sustained:
        advice += (
            f"; a --rate below {rate(min(sustained))} compares every optimization at a "
            "load all serve"
        )
    else:
        advice += "; a lower --rate, or more requests to measure the ceiling"
    lines.append(advice)
    return lines


def _drawn(record: ResultRecord, offered: float) -> list[str]:
    """Why the offered rate is not the --rate asked for, where the two differ: random arrivals
    come at the asked rate on average, and a finite draw comes at its own."""
    workload = record.params.get("workload") or {}
    asked = workload.get("rate")
    kind = str(workload.get("kind"))
    if not isinstance(asked, (int, float)) or not 0 < asked < math.inf:
        return []
    if rate_unit(kind) != "requests" or abs(offered - asked) <= 0.01 * asked:
        return []
    count = record.params.get("num_requests")
    these = f"these {count:,} arrivals" if isinstance(count, int) else "these arrivals"
    return [
        f"offered: the rate {these} came at; --rate {asked:g} is the mean of the process that "
        "drew them"
    ]


def _overloaded(name: str, metrics: dict[str, Any]) -> str:
    served, offered = metrics["served_requests_per_s"], metrics["offered_requests_per_s"]
    line = f"{name} overloaded: served {rate(served)} req/s of {rate(offered)} offered"
    sustainable = metrics.get("sustainable_requests_per_s")
    if sustainable:
        return line + f"; sustains about {rate(sustainable)} req/s"
    return line + "; its ceiling is not measured: the run ends before its batch settles"


def timing_line(record: ResultRecord) -> str:
    """Which model produced the times, in words (the note under the table gives its error)."""
    metrics = record.metrics
    if record_mode(record.mode) is Mode.REAL:
        return f"times: measured wall-clock on {metrics.get('device', 'this machine')}"
    source = metrics.get("step_model")
    if not source:
        return (
            "times: modeled by the bare GPU roofline at datasheet peak (--step-model "
            "roofline), a lower bound no server reaches; not measured"
        )
    band = metrics.get("time_error_band") or {}
    error = band.get("output_throughput_error") or band.get("mean_tpot_ms_error")
    which = "output tok/s" if band.get("output_throughput_error") else "TPOT"
    said = ""
    if error:
        kind = f"{band['kind']} models" if band.get("kind") else "runs"
        family = band.get("gpu_family", "this GPU family")
        group = f"{kind} on {family} GPUs"
        if band.get("unvalidated"):
            group = f"{kind} on other GPU families, unvalidated on {family}"
        said = f"; held-out error ±{100 * error:.0f}% {which} for {group}"
    return f"times: modeled as the sum of each step's operators ({source}){said}; not measured"
