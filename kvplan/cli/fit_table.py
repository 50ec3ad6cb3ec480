"""Tables that never cut a name or a figure: the one layout every terminal table uses.

Left to itself, rich shrinks a table that is wider than the terminal by cutting cells
("optimi…", "131,0…"). Here each column is as wide as its longest cell or header word
(headers wrap between words, cells never wrap). When the columns do not all fit the
width they are spread over as many tables as the width needs, each repeating the key
columns a row is read by (its name): the bench table's "optimizations as rows, the
metrics over several tables". Only a key and one column that alone are wider than the
terminal fold onto more lines, as a last resort.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Group
from rich.table import Table
from rich.text import Text


@dataclass(frozen=True)
class Look:
    """How a table is drawn, and the characters that adds to its columns' own widths."""

    border: int  # per column: padding and divider
    edge: int  # once per table: the outer edges (negative where the first and last pad are cut)
    options: dict[str, Any] = field(default_factory=dict)  # rich Table settings
    key_style: str = ""

    def overhead(self, columns: int) -> int:
        return self.border * columns + self.edge


BOXED = Look(3, 1)  # rich's default heavy-headed box
RULED = Look(3, 1, {"box": box.SIMPLE_HEAD}, key_style="cyan")  # one rule under the header
# a catalog listing: one header rule, columns one space apart, no outer edge
COMPACT = Look(
    1, -1, {"box": box.SIMPLE_HEAD, "show_edge": False, "pad_edge": False, "padding": (0, 0)}
)


def fitted_table(
    title: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    left: Sequence[str] = (),
    *,
    key: int = 1,
    wrap: Sequence[str] = (),
    groups: Sequence[str] | None = None,
    look: Look = BOXED,
) -> Group:
    """The title (rich markup: escape user text first) on its own line, then the tables
    (fitted_tables)."""
    tables = fitted_tables(headers, rows, width, left, key=key, wrap=wrap, groups=groups, look=look)
    heading = [Text.from_markup(f"[bold]{title}[/]")] if title else []
    return Group(*heading, *tables)


def fitted_tables(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    left: Sequence[str] = (),
    *,
    key: int = 1,
    wrap: Sequence[str] = (),
    groups: Sequence[str] | None = None,
    look: Look = BOXED,
) -> list[Table]:
    """As many tables as `width` needs, each with the key columns and the next columns that
    fit beside them.

    Cells are rich markup; headers named in `left` are left-aligned, the rest right-aligned.
    The first `key` columns are repeated in every table. Cells of the columns named in
    `wrap` (free text: a GPU's full name, a reason) may wrap between words, never inside
    one, where the width is short; the others keep each cell on one line. `groups` (one per
    column) title each table with the groups of the columns it holds."""
    columns = [[row[i] for row in rows] for i in range(len(headers))]
    full = [_need(header, cells) for header, cells in zip(headers, columns)]
    least = [
        _need(header, cells, words=True) if header in wrap else full[i]
        for i, (header, cells) in enumerate(zip(headers, columns))
    ]
    keys = list(range(min(key, len(headers))))
    chunks: list[list[int]] = []
    for index in range(len(keys), len(headers)):
        chunk = chunks[-1] if chunks else None
        if chunk is None or _width(keys + chunk + [index], least, look) > width:
            chunks.append([index])
        else:
            chunk.append(index)
    tables = []
    for chunk in chunks or [[]]:
        shown = keys + chunk
        widths = _widened(shown, least, full, width - _width(shown, least, look))
        fits = _width(shown, least, look) <= width
        title = " | ".join(dict.fromkeys(groups[i] for i in chunk)) if groups else None
        table = Table(title=title, title_justify="left", header_style="bold", **look.options)
        for i in shown:
            table.add_column(
                headers[i],
                justify="left" if headers[i] in left else "right",
                style=look.key_style if i in keys else "",
                # cells fit their column by construction, headers wrap between words; only a
                # table that cannot fit at all folds (a last resort, never an ellipsis)
                width=widths[i] if fits else None,
                overflow="fold",
            )
        for row in rows:
            table.add_row(*(row[i] for i in shown))
        tables.append(table)
    return tables


def _widened(shown: list[int], least: list[int], full: list[int], spare: int) -> dict[int, int]:
    """Each shown column's width: its least, and the spare characters shared out one at a
    time among the columns that wrap, each up to its longest cell."""
    widths = {i: least[i] for i in shown}
    while spare > 0:
        short = [i for i in shown if widths[i] < full[i]]
        for i in short[:spare]:
            widths[i] += 1
        spare -= len(short[:spare])
        if not short:
            break
    return widths


def _need(header: str, cells: Sequence[str], words: bool = False) -> int:
    """A column's width: its longest cell (words: its cells' longest word), or its header's
    longest word (headers wrap)."""
    texts = [Text.from_markup(cell).plain for cell in cells]
    pieces = [word for text in texts for word in text.split()] if words else texts
    return max(1, *(cell_len(word) for word in header.split()), *map(cell_len, pieces))


def _width(columns: Sequence[int], needs: Sequence[int], look: Look) -> int:
    return sum(needs[i] for i in columns) + look.overhead(len(columns))
