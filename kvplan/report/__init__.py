"""Reports: results files -> PNG charts, one self-contained HTML page, CSV and Prometheus text.

Imports pandas and matplotlib; nothing outside kvplan.report imports this package at
module level, so `import kvplan` stays light.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvplan.report import charts as charts_module
from kvplan.report.alerts import alerts as find_alerts
from kvplan.report.data import comparison_table, load
from kvplan.report.export import prometheus_text
from kvplan.report.html import build_page
from kvplan.results.atomic import swap_folder


@dataclass(frozen=True)
class ReportOutput:
    index: Path
    files: list[Path]
    charts: list[str]
    alerts: list[dict[str, str]]


def write_report(results: list[str | Path], out_dir: str | Path) -> ReportOutput:
    """Render into a staging folder and swap it in place of `out_dir` as a whole only when
    every step succeeded, so a failed or killed report leaves the previous one intact."""
    data = load(list(results))
    out_dir = Path(out_dir)

    def build(staging: Path) -> tuple[list[str], list, list[dict[str, str]]]:
        names: list[str] = []
        comparison = comparison_table(data.bench) if not data.bench.empty else None
        alerts = find_alerts(data.bench, data.params) if not data.bench.empty else []
        if comparison is not None:
            comparison.to_csv(staging / "comparison.csv", index=False)
            data.bench.to_csv(staging / "runs.csv", index=False)
            (staging / "metrics.prom").write_text(prometheus_text(data.bench))
            names += ["comparison.csv", "runs.csv", "metrics.prom"]
        if not data.estimate.empty:
            data.estimate.to_csv(staging / "estimates.csv", index=False)
            names.append("estimates.csv")
        rendered = charts_module.render(data, staging)
        names += [path.name for _, path in rendered]
        page = build_page(data, comparison, alerts, rendered, names)
        (staging / "index.html").write_text(page, encoding="utf-8")
        names.append("index.html")
        return names, rendered, alerts

    # One folder swap (results/atomic.py), not a file-by-file move
    names, rendered, alerts = swap_folder(out_dir, build)
    return ReportOutput(
        out_dir / "index.html",
        [out_dir / n for n in names],
        [item.name for item, _ in rendered],
        alerts,
    )
