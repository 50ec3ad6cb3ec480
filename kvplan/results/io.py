"""JSONL read/write of result records (the schema: kvplan.results.schema).

Writes are atomic (a temporary file renamed into place), so a failed run leaves no
partial file behind. Readers reject empty files and lines that are not result records,
naming the file and line.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from kvplan.results.schema import REQUIRED, SCHEMA, ResultRecord


def dumps(record: ResultRecord) -> str:
    """One record as its JSONL line (without the newline): keys sorted, so bytes are stable."""
    return json.dumps(record.to_dict(), sort_keys=True)


def write_jsonl(path: str | Path, records: list[ResultRecord]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:
            for record in records:
                out.write(dumps(record) + "\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)  # mkstemp creates 0600; results are ordinary files
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path


def read_record(line: str) -> ResultRecord:
    """One JSONL line as a record; ValueError (without the file position) when it is not one."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"not valid JSON ({err.msg}); the file may be truncated, re-run the benchmark") from None
    missing = [key for key in REQUIRED if not isinstance(data, dict) or key not in data]
    if missing or data.get("schema") != SCHEMA:
        raise ValueError(f"not a kvplan result record (missing {', '.join(missing) or 'schema'}); "
                         "expected lines written by kvplan bench")
    return ResultRecord.from_dict(data)


def read_jsonl(path: str | Path) -> list[ResultRecord]:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"results file '{path}' does not exist; run 'kvplan bench --out {path}' first")
    records = []
    with path.open() as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                records.append(read_record(line))
            except ValueError as err:
                raise ValueError(f"{path}:{number}: {err}") from None
    if not records:
        raise ValueError(f"results file '{path}' is empty; run 'kvplan bench' to produce results")
    return records
