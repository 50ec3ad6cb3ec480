"""Study summaries over sweep results: per group of settings (all axes but the rate), the
highest request rate the group sustains (p90 TTFT within the SLO: the queue does not
grow), the first rate at which p90 TTFT crosses the SLO, and the cost per million output
tokens at the sustained rate where the sweep file gives a GPU price."""

from __future__ import annotations

from typing import Any

from kvplan.results import ResultRecord

DEFAULT_SLO_S = 10.0  # p90 TTFT, when the sweep file sets none


def summarize(
    records: list[ResultRecord], slo_ttft_p90_s: float | None, prices: dict[str, float]
) -> list[dict[str, Any]]:
    groups: dict[tuple, list[ResultRecord]] = {}
    for record in records:
        if record.kind != "bench":
            continue
        sweep = record.params.get("sweep", {})
        key = tuple(sorted((k, str(v)) for k, v in sweep.items() if k != "rate"))
        groups.setdefault(key, []).append(record)
    slo = slo_ttft_p90_s or DEFAULT_SLO_S
    rows = []
    for key, members in groups.items():
        members.sort(key=lambda r: float(r.params["sweep"].get("rate", 0)))
        settings = dict(key)
        sustained, crossing, best = None, None, None
        for record in members:
            rate = float(record.params["sweep"].get("rate", 0))
            m = record.metrics
            within = (m.get("ttft_s_p90") or 0) <= slo and not m["requests_rejected"]
            if within and crossing is None:
                sustained, best = rate, record
            if not within and crossing is None:
                crossing = rate
        row: dict[str, Any] = {
            **settings,
            "max_sustained_rate": sustained,
            "slo_crossing_rate": crossing,
        }
        gpu = settings.get("gpu") or members[0].params.get("gpu")
        # the steady state's output rate: the makespan's would count the drain after the last
        # arrival, an idle tail a deployment serving this rate never has
        served = best.metrics.get("served_output_tokens_per_s") if best is not None else None
        if best is not None and served and gpu in prices:
            tokens_per_hour = served * 3600
            gpus = int(best.params.get("tp", 1)) * int(best.params.get("pods", 1))
            row["usd_per_million_output_tokens"] = prices[gpu] * gpus / tokens_per_hour * 1e6
        rows.append(row)
    return rows


def varying(rows: list[dict[str, Any]]) -> list[str]:
    """Columns worth showing: settings that differ between rows, and every result."""
    results = ("max_sustained_rate", "slo_crossing_rate", "usd_per_million_output_tokens")
    settings = [c for c in dict.fromkeys(k for row in rows for k in row) if c not in results]
    shown = [c for c in settings if len({str(row.get(c)) for row in rows}) > 1] or settings[:1]
    return shown + [c for c in results if any(c in row for row in rows)]
