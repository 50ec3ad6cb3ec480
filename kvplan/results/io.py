"""JSONL read/write of result records (the schema: kvplan.results.schema).

Writes are atomic and strict (kvplan.results.atomic): the file appears whole or not at all,
a failure (SIGTERM included) leaves no temporary file, and NaN/Infinity are never written.
Readers reject empty files, lines that are not result records and records whose fields
have the wrong shape, naming the file and line.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvplan.results.atomic import atomic_file, strict_json
from kvplan.results.checks import check_record
from kvplan.results.schema import REQUIRED, SCHEMA, ResultRecord


def dumps(record: ResultRecord) -> str:
    """One record as its JSONL line (without the newline): keys sorted, so bytes are stable."""
    return strict_json(record.to_dict(), sort_keys=True)


def write_jsonl(path: str | Path, records: list[ResultRecord]) -> Path:
    path = Path(path)
    with atomic_file(path) as temp, temp.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(dumps(record) + "\n")
    return path


def read_record(line: str, where: str = "record") -> ResultRecord:
    """One JSONL line as a record; ValueError (without the file position) when it is not one."""
    try:
        data = json.loads(line)
    except RecursionError:
        raise ValueError("nested too deeply to be a result record") from None
    except json.JSONDecodeError as err:
        raise ValueError(
            f"not valid JSON ({err.msg}); the file may be truncated, re-run the benchmark"
        ) from None
    missing = [key for key in REQUIRED if not isinstance(data, dict) or key not in data]
    if missing or data.get("schema") != SCHEMA:
        raise ValueError(
            f"not a kvplan result record (missing {', '.join(missing) or 'schema'}); "
            "expected lines written by kvplan bench"
        )
    check_record(data, where)  # field shapes, not only names
    return ResultRecord.from_dict(data)


def read_jsonl(path: str | Path) -> list[ResultRecord]:
    path = Path(path)
    if not path.is_file():
        raise ValueError(
            f"results file '{path}' does not exist; run 'kvplan bench --out {path}' first"
        )
    records = []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(
                    f"{path}:{number}: not UTF-8 text; is this a kvplan results file?"
                ) from None
            try:
                records.append(read_record(line, f"{path}:{number}"))
            except ValueError as err:
                message = str(err)
                raise ValueError(
                    message if message.startswith(f"{path}:") else f"{path}:{number}: {message}"
                ) from None
    if not records:
        raise ValueError(f"results file '{path}' is empty; run 'kvplan bench' to produce results")
    return records
