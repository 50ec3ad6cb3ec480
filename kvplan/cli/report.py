"""`kvplan report`: results files -> charts, one HTML page, CSV and Prometheus text."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kvplan.cli.common import cli_errors, console, escape
from kvplan.results.latest import read_latest
from kvplan.spec.extras import require_extra


@cli_errors()
def report(
    results: Annotated[
        Optional[list[Path]],
        typer.Argument(
            help="Results files written by kvplan bench or estimate --out; default: the newest "
            "bench run (reports/latest).",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path,
        typer.Option(
            metavar="DIR", help="Output folder for index.html, PNGs, CSV and metrics.prom."
        ),
    ] = Path("reports/report"),
) -> None:
    """Turn results files into PNG charts and one self-contained HTML page."""
    require_extra("report", "kvplan report")  # before pandas and matplotlib are imported
    with console.status("rendering report"):
        from kvplan.report import write_report

        written = write_report(results or [read_latest()], out)
    console.print(
        f"wrote {escape(str(written.index))} ({len(written.charts)} charts, {len(written.files)} "
        "files)"
    )
    for alert in written.alerts:
        console.print(
            f"[yellow]alert[/] {escape(alert['alert'])}: {escape(alert['run'])}: "
            f"{escape(alert['detail'])}"
        )
