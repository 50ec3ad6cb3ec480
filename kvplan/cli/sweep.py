"""`kvplan sweep`: many bench runs as one study."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from kvplan.cli.common import cli_errors, console, error_console, escape


@cli_errors()
def sweep(
    study: Annotated[Path, typer.Argument(help="Sweep file (TOML) with \\[fixed], \\[axes], optional \\[slo] and \\[prices].")],
    out: Annotated[Path, typer.Option(help="Output folder: results.jsonl (one record per point) and study.csv.")] = Path("reports/sweep"),
    executor: Annotated[str, typer.Option(help="local (a process pool over this machine's cores) or ray.")] = "local",
    address: Annotated[Optional[str], typer.Option(help="Ray cluster: auto, HOST:PORT, or local (start one here).")] = None,
    workers: Annotated[Optional[int], typer.Option(help="Local executor processes (default: the CPU count).")] = None,
) -> None:
    """Expand the grid, run every point not already in the output, and summarize the study."""
    from kvplan.bench.study import DEFAULT_SLO_S, summarize, varying
    from kvplan.bench.sweep import load_spec, run_sweep

    spec = load_spec(study)
    total = len(spec.points())
    with Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"),
                  TimeRemainingColumn(), console=error_console, transient=True) as progress:
        task = progress.add_task("points", total=total)
        records = run_sweep(spec, out, executor, workers, address, lambda n, _: progress.advance(task, n))
    failed = [r for r in records if r.get("kind") == "error"]
    rows = summarize(records, spec.slo_ttft_p90_s, spec.prices)
    if rows:
        with (out / "study.csv").open("w", newline="") as handle:
            columns = list(dict.fromkeys(k for row in rows for k in row))
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
        slo = spec.slo_ttft_p90_s or DEFAULT_SLO_S
        table = Table(title=f"{total} points; sustained: p90 TTFT <= {slo:g} s (modeled in simulated mode)",
                      header_style="bold", title_justify="left")
        shown = varying(rows)
        for column in shown:
            table.add_column(column.replace("_", " "))
        for row in rows:
            table.add_row(*(_cell(row.get(c)) for c in shown))
        console.print(table)
    for record in failed:
        console.print(f"[red]failed[/] {escape(str(record['params']['sweep']))}: {escape(str(record['metrics']['error']))}")
    console.print(f"[dim]results: {escape(str(out / 'results.jsonl'))} ({len(records) - len(failed)} ok, {len(failed)} failed); "
                  f"kvplan report {escape(str(out / 'results.jsonl'))} draws them[/]")


def _cell(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:,.3g}" if isinstance(value, float) else escape(str(value))
