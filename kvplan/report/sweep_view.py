"""A sweep on the page: its study (per group of settings, the highest rate within the SLO,
saying so where that is only the top of the grid), its points as one table with a column
per axis that varies, and its summary sentence. The study's figures are
kvplan.sweep.summary's; this module only lays them out."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from kvplan.report.data import ReportData, study_rows
from kvplan.report.names import axis_order, page_text
from kvplan.sweep.summary import DEFAULT_SLO_S, varying

RESULTS = ("max_sustained_rate", "slo_crossing_rate", "usd_per_million_output_tokens")
TOP_NOTE = "(top of the grid: the setup sustained every rate tried)"
SHOWN_SETTINGS = 4  # settings named in a summary sentence


def _key(settings: dict[str, Any]) -> tuple:
    """A group of sweep points: every setting but the rate (kvplan.sweep.summary's grouping)."""
    return tuple(sorted((k, str(v)) for k, v in settings.items() if k not in ("rate", *RESULTS)))


def study(data: ReportData) -> tuple[list[dict[str, Any]], float | None, list[bool]]:
    """The study rows, the SLO, and per row whether its max sustained rate is the highest rate
    its group tried with no rate crossing the SLO (the grid ends before the setup's limit)."""
    rows, slo = study_rows(data)
    tops: dict[tuple, float] = {}
    for record in data.records:
        sweep = record.params.get("sweep") or {}
        if "study" in record.params and record.kind == "bench" and "rate" in sweep:
            key = _key(sweep)
            tops[key] = max(tops.get(key, -math.inf), float(sweep["rate"]))
    at_top = [
        row.get("max_sustained_rate") is not None
        and row.get("slo_crossing_rate") is None
        and row["max_sustained_rate"] == tops.get(_key(row))
        for row in rows
    ]
    return rows, slo, at_top


def study_table(rows: list[dict[str, Any]], at_top: list[bool]) -> pd.DataFrame:
    """The study as the page shows it: varying settings, then the results; a sustained rate
    at the top of the grid says so, and none sustained says none."""
    frame = pd.DataFrame(rows)[varying(rows)].astype(object)
    if "max_sustained_rate" in frame:
        frame["max_sustained_rate"] = [
            "none"
            if rate is None or rate != rate
            else f"{rate:g} (top of the grid)"
            if top
            else f"{rate:g}"
            for rate, top in zip(frame["max_sustained_rate"], at_top)
        ]
    return frame


def _described(row: dict[str, Any], shown: list[str]) -> str:
    return ", ".join(f"{k} {page_text(row.get(k))}" for k in shown)


def study_sentences(rows: list[dict[str, Any]], slo: float | None, at_top: list[bool]) -> list[str]:
    slo_text = f"the p90 TTFT SLO ({slo or DEFAULT_SLO_S:g} s)"
    shown = [c for c in varying(rows) if c not in RESULTS]
    rates = [row.get("max_sustained_rate") for row in rows]
    sustained = [r for r in rates if r is not None]
    if not sustained:
        return [f"{len(rows)} setting(s); none stays within {slo_text} at the lowest rate tried"]
    best = max(sustained)
    leaders = [i for i, rate in enumerate(rates) if rate == best]
    line = f"{len(rows)} setting(s); the highest rate within {slo_text}: {best:g} req/s"
    if all(at_top[i] for i in leaders):
        line += f" {TOP_NOTE}"
    if shown and len(leaders) < len(rows):
        named = "; ".join(_described(rows[i], shown) for i in leaders[:SHOWN_SETTINGS])
        more = f" and {len(leaders) - SHOWN_SETTINGS} more" if len(leaders) > SHOWN_SETTINGS else ""
        line += f", reached by {named}{more}"
    elif len(rows) > 1:
        line += ", reached by every setting"
    lines = [line]
    if len(leaders) < len(rows):
        worst = min((r if r is not None else -1.0, i) for i, r in enumerate(rates))
        low = "none" if worst[0] < 0 else f"{worst[0]:g} req/s"
        lines.append(f"the lowest: {low} ({_described(rows[worst[1]], shown)})")
    return lines


def sweep_axes(params: dict[str, dict[str, Any]], runs: list[str]) -> list[str]:
    """The sweep axes whose values differ between these runs, in run-name order (rate first)."""
    keys = list(dict.fromkeys(k for run in runs for k in (params[run].get("sweep") or {})))
    keys = [k for k in keys if k not in ("optimization", "optimizations")]
    keys.sort(key=axis_order)
    return [
        k for k in keys if len({str((params[run].get("sweep") or {}).get(k)) for run in runs}) > 1
    ]


def sweep_runs(data: ReportData) -> list[str]:
    return [run for run, params in data.params.items() if "sweep" in params]


def points_table(
    comparison: pd.DataFrame, data: ReportData, first: tuple[str, ...]
) -> pd.DataFrame:
    """One row per sweep point (and optimization): a column per axis that varies, then the
    headline columns; ratios to a baseline only where a point ran several optimizations."""
    runs = sweep_runs(data)
    rows = comparison[comparison["run"].isin(runs)].reset_index(drop=True)
    axes = sweep_axes(data.params, runs)
    for axis in reversed(axes):
        rows.insert(
            0, axis, [(data.params[run].get("sweep") or {}).get(axis) for run in rows["run"]]
        )
    single = rows.groupby("run").size().max() == 1
    dropped = {"baseline", *(c for c in rows if c.endswith("vs base"))} if single else set()
    columns = [*axes, *(c for c in first if c in rows and c not in dropped)]
    return rows[columns]
