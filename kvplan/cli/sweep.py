"""`kvplan sweep`: many bench runs as one study."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from kvplan.cli.common import cli_errors, console, error_console, escape, progress_bars
from kvplan.cli.fit_table import fitted_table
from kvplan.execution.executors import DEFAULT_EXECUTOR
from kvplan.results import ResultRecord
from kvplan.results.latest import DEFAULT_FOLDER


@cli_errors()
def sweep(
    study: Annotated[
        Path,
        typer.Argument(
            help="Sweep file (TOML) with \\[fixed], \\[axes], optional \\[slo] and \\[prices]."
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            metavar="DIR", help="Output folder: results.jsonl (one record per point) and study.csv."
        ),
    ] = DEFAULT_FOLDER / "sweep",
    executor: Annotated[
        str,
        typer.Option(
            metavar="NAME",
            help="local (a process pool over this machine's cores) or ray (pip install "
            "'kvplan\\[ray]').",
        ),
    ] = DEFAULT_EXECUTOR,
    address: Annotated[
        Optional[str],
        typer.Option(
            metavar="ADDRESS", help="Ray cluster: auto, HOST:PORT, or local (start one here)."
        ),
    ] = None,
    workers: Annotated[
        Optional[int],
        typer.Option(metavar="N", help="Local executor processes (default: the CPU count)."),
    ] = None,
) -> None:
    """Expand the grid, run every point not already in the output, and summarize the study."""
    from kvplan.bench.setting_use import calibration_warnings
    from kvplan.results.atomic import write_text
    from kvplan.spec.numbers import check_numbers
    from kvplan.sweep.grid import load_spec, run_sweep
    from kvplan.sweep.summary import DEFAULT_SLO_S, summarize, varying

    check_numbers({"workers": workers})  # --workers 0 is not a pool
    spec = load_spec(study)
    for warning in calibration_warnings(spec.calibration_setups()):  # worded with its keys
        error_console.print(f"[yellow]warning:[/] {escape(str(warning))}", soft_wrap=True)
    total = len(spec.points())
    with progress_bars(
        TextColumn("sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    ) as progress:
        task = progress.add_task("points", total=total)
        records = run_sweep(
            spec,
            out,
            executor,
            workers,
            address,
            lambda n, _: progress.advance(task, n),
            notify=lambda text: error_console.print(f"[yellow]note:[/] {escape(text)}"),
        )
    failed = [r for r in records if r.kind == "error"]
    rows = summarize(records, spec.slo_ttft_p90_s, spec.prices)
    if rows:
        text = io.StringIO(newline="")
        writer = csv.DictWriter(
            text, fieldnames=list(dict.fromkeys(k for row in rows for k in row))
        )
        writer.writeheader()
        writer.writerows(rows)
        write_text(out / "study.csv", text.getvalue())  # atomic
        slo = spec.slo_ttft_p90_s or DEFAULT_SLO_S
        shown = varying(rows)
        headers = [column.replace("_", " ") for column in shown]
        console.print(
            f"[bold]{total} points; sustained: p90 TTFT <= {slo:g} s (modeled in simulated mode)[/]"
        )
        # names whole at any width (at 80 columns rich cut 'contiguous-or…')
        console.print(
            fitted_table(
                "",
                headers,
                [[_cell(row.get(c)) for c in shown] for row in rows],
                console.width,
                left=headers,
            )
        )
    for (
        record
    ) in failed:  # name the point by its axis values (the fixed settings are the same for all)
        console.print(
            f"[red]failed[/] {escape(_point_label(record, spec.axes))}: "
            f"{escape(str(record.metrics['error']))}"
        )
    console.print(
        f"[dim]results: {escape(str(out / 'results.jsonl'))} ({len(records) - len(failed)} ok, "
        f"{len(failed)} failed); "
        f"kvplan report {escape(str(out / 'results.jsonl'))} draws them[/]"
    )
    if records and len(failed) == len(records):
        raise ValueError(
            f"all {len(records)} points failed (first: {_point_label(failed[0], spec.axes)}: "
            f"{failed[0].metrics['error']}); fix the sweep file"
        )


def _point_label(record: ResultRecord, axes: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in record.params["sweep"].items() if k in axes)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:,.3g}" if isinstance(value, float) else escape(str(value))
