"""The one result schema, and JSONL read/write.

A results file holds one JSON object per line:

    {"schema": "kvplan.result/1", "kind": "bench" | "estimate", "run_id": str,
     "kvplan_version": str, "mode": "simulated" | "real" | "analytic",
     "optimization": str, "baseline": bool,
     "params": {...the run's inputs: model, gpu, tp, workload, seed, ...},
     "metrics": {...flat numbers named as in DESIGN.md...},
     "timeseries": {"t": [...], "<metric>": [...], ...}}

Writes are atomic (a temporary file renamed into place), so a failed run leaves no
partial file behind. Readers reject empty files and lines that are not result records,
naming the file and line.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from kvplan.results.atomic import atomic_file, strict_json
from kvplan.results.checks import check_record

SCHEMA = "kvplan.result/1"
REQUIRED = ("schema", "kind", "run_id", "optimization", "params", "metrics")


def make_record(kind: str, run_id: str, mode: str, optimization: str, params: dict[str, Any],
                metrics: dict[str, Any], timeseries: dict[str, list[float]] | None = None,
                baseline: bool = False) -> dict[str, Any]:
    from kvplan import __version__

    return {"schema": SCHEMA, "kind": kind, "run_id": run_id, "kvplan_version": __version__, "mode": mode,
            "optimization": optimization, "baseline": baseline, "params": params,
            "metrics": _finite(metrics), "timeseries": timeseries or {}}


def _finite(values: dict[str, Any]) -> dict[str, Any]:
    """JSON has no NaN/inf: store them as null so every reader can parse the file."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in values.items()}


def write_jsonl(path: str | Path, records: list[dict[str, Any]]) -> Path:
    # issue 13: atomic_file cleans its temporary file on any failure (SIGTERM included) and
    # names the user's path in errors; strict_json never writes NaN/Infinity.
    path = Path(path)
    with atomic_file(path) as temp, temp.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(strict_json(record, sort_keys=True) + "\n")
    return path


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"results file '{path}' does not exist; run 'kvplan bench --out {path}' first")
    records = []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
                record = json.loads(line)
            except UnicodeDecodeError:
                raise ValueError(f"{path}:{number}: not UTF-8 text; is this a kvplan results file?") from None
            except RecursionError:
                raise ValueError(f"{path}:{number}: nested too deeply to be a result record") from None
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not valid JSON ({err.msg}); the file may be truncated, "
                                 "re-run the benchmark") from None
            missing = [key for key in REQUIRED if not isinstance(record, dict) or key not in record]
            if missing or record.get("schema") != SCHEMA:
                raise ValueError(f"{path}:{number}: not a kvplan result record (missing {', '.join(missing) or 'schema'}); "
                                 f"expected lines written by kvplan bench")
            check_record(record, f"{path}:{number}")  # issue 13: field shapes, not only names
            records.append(record)
    if not records:
        raise ValueError(f"results file '{path}' is empty; run 'kvplan bench' to produce results")
    return records
