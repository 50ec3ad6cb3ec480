"""Writing a `kvplan.perf-table/1` file (kvplan.sizing.operators.profile_table): one line per field
and per curve, so a diff of two profiles shows what changed, written whole or not at all, and
never a table its reader would refuse."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kvplan.results.atomic import atomic_file, strict_json
from kvplan.sizing.operators.profile_table import FORMAT, SECTIONS, PerfTable, Surface, read_dict


def table_dict(table: PerfTable) -> dict[str, Any]:
    """The table as the file holds it."""
    data: dict[str, Any] = {
        "format": FORMAT,
        "device": asdict(table.device),
        "measured_for": dict(table.measured_for),
    }
    for name, section in SECTIONS.items():
        entries = []
        for key, curve in getattr(table, name).items():
            entry = asdict(key)
            if isinstance(curve, Surface):
                (a, _), (b, _) = section.axes
                entry |= {a: _points(curve.a), b: _points(curve.b)}
                entry["seconds"] = [list(row) for row in curve.seconds]
            else:
                entry |= {section.axes[0][0]: _points(curve.x), "seconds": list(curve.seconds)}
            entries.append(entry)
        data[name] = entries
    memory = table.memory
    data["memory"] = (
        None if memory is None else {"bytes": _points(memory.x), "seconds": list(memory.seconds)}
    )
    data["notes"] = list(table.notes)
    return data


def _points(axis: tuple[float, ...]) -> list[float | int]:
    """An axis as written: whole numbers without a decimal point (M = 16, not 16.0)."""
    return [int(x) if float(x).is_integer() else x for x in axis]


def table_text(table: PerfTable) -> str:
    """The file's text: one line per field and per curve, so a diff shows what changed."""
    items = list(table_dict(table).items())
    lines = []
    for index, (key, value) in enumerate(items):
        comma = "," if index < len(items) - 1 else ""
        if key in SECTIONS and value:
            curves = ",\n".join(f"  {strict_json(entry)}" for entry in value)
            lines.append(f" {json.dumps(key)}: [\n{curves}\n ]{comma}")
        else:
            lines.append(f" {json.dumps(key)}: {strict_json(value)}{comma}")
    return "{\n" + "\n".join(lines) + "\n}\n"


def write_table(table: PerfTable, path: str | Path) -> None:
    """Written whole or not at all: an existing file is replaced only once the new one is."""
    text = table_text(table)
    read_dict(json.loads(text), Path(path))  # never write a file the reader would refuse
    with atomic_file(path) as temp:
        temp.write_text(text)
