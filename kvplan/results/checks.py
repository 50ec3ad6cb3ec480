"""Shape checks for one result record, so readers can index fields without surprises.

read_jsonl checks names (REQUIRED) and calls `check_record` for shapes: a record whose
`params` is a string or whose numbers are strings is refused with file:line and the
field, instead of failing deep inside pandas.
"""

from __future__ import annotations

from typing import Any

from kvplan.results.schema import DESCRIPTIVE_METRICS

KINDS = (
    "bench",
    "estimate",
    "quality",
    "error",
    "fidelity",
    "plan",
)  # fidelity: benchmarks/serving_fidelity.py; plan: kvplan plan --out
TYPE_WORDS = {str: "a text", bool: "true or false"}


def _problem(record: dict[str, Any]) -> str | None:
    for key in ("run_id", "optimization", "kind"):
        if not isinstance(record[key], str):
            return f"'{key}' must be a string, got {type(record[key]).__name__}"
    if record["kind"] not in KINDS:
        return f"'kind' must be one of {', '.join(KINDS)}, got {record['kind']!r}"
    for key in ("params", "metrics"):
        if not isinstance(record[key], dict):
            return f"'{key}' must be an object, got {type(record[key]).__name__}"
    if not record["metrics"]:
        return "'metrics' is empty"
    for name, value in record["metrics"].items():
        if value is None or isinstance(value, (dict, list)):
            continue
        described = DESCRIPTIVE_METRICS.get(name)  # the schema's words and flags
        if described is not None:
            if not isinstance(value, described):
                return f"metric '{name}' must be {TYPE_WORDS[described]}, got {value!r}"
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"metric '{name}' must be a number, got {value!r}"
    timeseries = record.get("timeseries")
    if timeseries is not None and not (
        isinstance(timeseries, dict) and all(isinstance(v, list) for v in timeseries.values())
    ):
        return "'timeseries' must be an object of lists"
    return None


def check_record(record: dict[str, Any], where: str) -> None:
    """Raise ValueError at `where` (file:line) when a field has the wrong shape."""
    problem = _problem(record)
    if problem:
        raise ValueError(
            f"{where}: {problem}; the file was not written by this kvplan version or was edited, "
            "re-run the command that wrote it"
        )
