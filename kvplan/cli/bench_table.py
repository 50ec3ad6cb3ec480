"""Lay the bench comparison (kvplan.bench.comparison) out for the terminal's width.

Optimizations as columns when every name and cell fits on one line; otherwise
optimizations as rows, the metrics spread over as many tables as the width needs (each
titled with the sections it holds). Names and cells are never cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby

from rich.console import Console
from rich.table import Table

from kvplan.bench.comparison import Comparison
from kvplan.cli.common import escape
from kvplan.cli.fit_table import RULED, fitted_tables


def render_comparison(view: Comparison, console: Console, caption: Sequence[str] = ()) -> None:
    """caption: lines said under the title, before the table (kvplan.bench.caption: the
    load and whether each optimization kept up, what timed the steps)."""
    # the title is a line of its own: as a table title it wrapped at the (often narrow) table's
    # width
    console.print(f"[bold]{escape(view.title)}[/]")
    for line in caption:
        style = "bold yellow" if "overloaded" in line else "dim"
        console.print(f"[{style}]{escape(line)}[/]")  # wrapped between words at the width
    if _wide_width(view) <= console.width:
        console.print(_wide(view))
    else:
        for table in _narrow(view, console.width):
            console.print(table)
    for note in view.notes:
        console.print(f"[dim]{escape(note)}[/]", soft_wrap=True)


def _wide_width(view: Comparison) -> int:
    """Characters the optimizations-as-columns table needs with nothing cut or wrapped."""
    label = max(max(len(row.section), len(row.label) + 2) for row in view.rows)
    cells = [
        max(len(name), *(len(row.cells[i]) for row in view.rows))
        for i, name in enumerate(view.names)
    ]
    return label + sum(cells) + RULED.overhead(1 + len(cells))


def _wide(view: Comparison) -> Table:
    table = Table(header_style="bold", **RULED.options)
    table.add_column("metric", style="cyan", no_wrap=True)
    for name in view.names:
        table.add_column(escape(name), justify="right", no_wrap=True)
    for section, rows in groupby(view.rows, key=lambda row: row.section):
        table.add_row(f"[bold]{escape(section)}[/]", *([""] * len(view.names)))
        for row in rows:
            table.add_row("  " + escape(row.label), *(escape(cell) for cell in row.cells))
    return table


def _narrow(view: Comparison, width: int) -> list[Table]:
    """Optimizations as rows, the metrics spread over the tables the width needs, each titled
    with the sections it holds (kvplan.cli.fit_table, the layout every table shares)."""
    headers = ["optimization", *(row.label for row in view.rows)]
    cells = [
        [escape(name), *(escape(row.cells[index]) for row in view.rows)]
        for index, name in enumerate(view.names)
    ]
    groups = ["", *(escape(row.section) for row in view.rows)]
    return fitted_tables(
        [escape(header) for header in headers],
        cells,
        width,
        left=("optimization",),
        groups=groups,
        look=RULED,
    )
