"""A sweep's results.jsonl: what it already holds, and rewriting it without losing a point.

Finished points are never dropped: points that are not in the current grid (the sweep
file changed since) stay in the file after the grid's own points, and the caller is
told how many there are. Error records are dropped on resume because their points are
run again. A cut last line (a kill mid-write) is dropped; any other line that is not a
sweep record means the folder belongs to something else, and the sweep refuses to touch it.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvplan.results import ResultRecord, write_jsonl
from kvplan.results.atomic import write_text
from kvplan.spec.setting_error import SettingError

SWEEP_KINDS = ("bench", "error")


def _foreign(results: Path, number: int, what: str) -> ValueError:
    return SettingError(
        "{where}: {what}; this results.jsonl was not written by kvplan sweep (or was edited), "
        "so it is left as it is: pass a new {out} folder",
        where=f"{results}:{number}",
        what=what,
    )


def finished_records(results: Path) -> list[ResultRecord]:
    """The finished (non-error) records in results.jsonl, one per point id, in file order."""
    if not results.is_file():
        return []
    lines = results.read_bytes().split(b"\n")
    by_id: dict[str, ResultRecord] = {}
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        cut = number == len(lines)  # the file does not end with a newline: a write was cut short
        try:
            record = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            if cut:
                continue
            raise _foreign(results, number, "not a JSON line") from None
        params = record.get("params") if isinstance(record, dict) else None
        if (
            not isinstance(params, dict)
            or not isinstance(params.get("point_id"), str)
            or record.get("kind") not in SWEEP_KINDS
        ):
            raise _foreign(results, number, "not a sweep point record")
        if record["kind"] != "error":
            try:
                by_id[params["point_id"]] = ResultRecord.from_dict(record)
            except (KeyError, TypeError, ValueError):
                raise _foreign(results, number, "not a sweep point record") from None
    return list(by_id.values())


def rewrite(results: Path, records: list[ResultRecord]) -> None:
    """Replace results.jsonl atomically (an empty file when there is nothing yet)."""
    if records:
        write_jsonl(results, records)
    elif results.exists():
        write_text(results, "")
