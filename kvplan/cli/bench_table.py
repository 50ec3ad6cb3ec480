"""Lay the bench comparison (kvplan.bench.comparison) out for the terminal's width.

Optimizations as columns when every name and cell fits on one line; otherwise
optimizations as rows, the metrics spread over as many tables as the width needs (each
titled with the sections it holds). Names and cells are never cut.
"""

from __future__ import annotations

from itertools import groupby

from rich import box
from rich.console import Console
from rich.table import Table

from kvplan.bench.comparison import Comparison, ComparisonRow
from kvplan.cli.common import escape

BORDER = 3  # a column's padding and divider in a rich table
EDGE = 2


def render_comparison(view: Comparison, console: Console) -> None:
    # the title is a line of its own: as a table title it wrapped at the (often narrow) table's width
    console.print(f"[bold]{escape(view.title)}[/]")
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
    return sum(width + BORDER for width in (label, *cells)) + EDGE


def _wide(view: Comparison) -> Table:
    table = Table(header_style="bold", box=box.SIMPLE_HEAD)
    table.add_column("metric", style="cyan", no_wrap=True)
    for name in view.names:
        table.add_column(escape(name), justify="right", no_wrap=True)
    for section, rows in groupby(view.rows, key=lambda row: row.section):
        table.add_row(f"[bold]{escape(section)}[/]", *([""] * len(view.names)))
        for row in rows:
            table.add_row("  " + escape(row.label), *(escape(cell) for cell in row.cells))
    return table


def _column_width(row: ComparisonRow) -> int:
    """The narrowest a metric column can be: its longest header word or cell."""
    return max(max(len(word) for word in row.label.split()), *(len(cell) for cell in row.cells))


def _narrow(view: Comparison, width: int) -> list[Table]:
    name_width = max(len("optimization"), *(len(name) for name in view.names))
    chunks: list[list[ComparisonRow]] = [[]]
    used = name_width + BORDER + EDGE
    for row in view.rows:
        need = _column_width(row) + BORDER
        if chunks[-1] and used + need > width:
            chunks.append([])
            used = name_width + BORDER + EDGE
        chunks[-1].append(row)
        used += need
    tables = []
    for chunk in chunks:
        sections = " | ".join(dict.fromkeys(row.section for row in chunk))
        table = Table(
            title=escape(sections), title_justify="left", header_style="bold", box=box.SIMPLE_HEAD
        )
        table.add_column("optimization", style="cyan", no_wrap=True, width=name_width)
        for row in chunk:  # a fixed width: headers wrap between words, cells fit by construction
            table.add_column(escape(row.label), justify="right", width=_column_width(row))
        for index, name in enumerate(view.names):
            table.add_row(escape(name), *(escape(row.cells[index]) for row in chunk))
        tables.append(table)
    return tables
