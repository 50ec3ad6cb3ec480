"""A rich table whose columns are as wide as their longest cell and header word.

Left to itself, rich shrinks a table that is wider than the terminal by cutting cells
("131,0…", "dee…"). Here each column gets the width of its longest cell or header word
(headers wrap between words), which keeps every name and figure whole whenever the
table can fit at all; when it cannot, cells fold onto more lines instead of being cut.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

BORDER = 3  # a column's padding and divider in rich's default box
EDGE = 1


def fitted_table(
    title: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    left: Sequence[str] = (),
    flexible: Sequence[str] = (),
) -> Table:
    """Cells are rich markup (escape user text first); headers named in `left` are left-aligned.

    If the whole table fits, every column is as wide as its longest cell. If not, the
    `flexible` columns (names, kinds) take what the others leave and wrap or fold, so
    figures stay whole on one line; if even that cannot fit, every cell folds."""

    def header_word(index: int) -> int:
        return max(len(word) for word in headers[index].split())

    full = [
        max(header_word(i), *(Text.from_markup(row[i]).cell_len for row in rows))
        for i in range(len(headers))
    ]
    least = [header_word(i) if h in flexible else full[i] for i, h in enumerate(headers)]
    room = width - BORDER * len(headers) - EDGE
    table = Table(title=title, header_style="bold")
    for index, header in enumerate(headers):
        if sum(full) <= room:
            fixed: int | None = full[index]
        else:
            fixed = None if header in flexible or sum(least) > room else full[index]
        share = (
            1 if fixed is None and header in flexible else None
        )  # flexible columns split what is left
        table.add_column(
            header,
            overflow="fold",
            width=fixed,
            ratio=share,
            justify="left" if header in left else "right",
        )
    for row in rows:
        table.add_row(*row)
    return table
