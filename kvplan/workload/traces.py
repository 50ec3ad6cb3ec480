"""Trace loaders: replay real request logs as Request lists.

One entry point, ``load_trace(path, fmt=None)``. Three formats:

- ``mooncake`` (JSONL, Mooncake FAST'25 traces): ``timestamp`` (ms), ``input_length``,
  ``output_length``, ``hash_ids`` (one id per 512-token prompt block, the last block may
  be partial; equal ids mean equal prefixes). The ids become ``block_hashes`` with
  ``hash_block_tokens=512`` so prefix caching can be measured without token ids.
- ``azure`` (CSV, Azure LLM inference traces / Splitwise): header
  ``TIMESTAMP,ContextTokens,GeneratedTokens``; TIMESTAMP is a naive datetime such as
  ``2023-11-16 18:15:46.6805900`` (7 fractional digits, more than ``fromisoformat``
  takes, so the fraction is parsed separately, exactly, in integer nanoseconds).
- ``generic`` (JSONL, kvplan's own): one object per line with
  ``arrival_s`` (seconds) or ``timestamp_ms``; ``prompt_len`` or ``prompt_tokens`` (a list
  of token ids; if both are given they must agree); ``output_len``; optional
  ``session_id`` (string or integer); optional ``block_hashes`` (list of ints) with
  ``hash_block_tokens`` (> 0), one hash per full block plus optionally one for the tail.

In every format arrivals are made relative to the earliest request (so a trace always
starts at t = 0) and multiplied by ``time_scale`` (0.5 replays twice as fast). Requests
are sorted by arrival (stable, so ties keep file order) and numbered in that order.

Detection (fmt=None): ``.csv`` -> azure; a first line starting ``TIMESTAMP,`` -> azure;
otherwise the first 20 non-blank lines vote: objects with Mooncake's fields (``hash_ids``,
``input_length``) against objects with generic ones; mooncake wins only with more votes.

Files may start with a UTF-8 BOM. A line that is not UTF-8 is a bad line (named, skippable).
A timestamp more than a year away from the trace's median arrival (1e300 ms, year 0001)
is a bad line too: replayed, it would stretch the trace to ages and report 0 tokens/s.

Bad lines (bad JSON, a missing, non-numeric, negative or zero field: a request needs at
least one prompt and one output token) raise ValueError naming the file and 1-based line;
with ``skip_bad_lines=True`` they are skipped and counted in ``TraceLoad.skipped``.
Blank lines are ignored everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from kvplan.spec.setting_error import SettingError
from kvplan.workload.request import Request
from kvplan.workload.trace_formats import BadLine, TraceRow, detect_format, read_rows

TRACE_FORMATS: tuple[str, ...] = ("mooncake", "azure", "generic")
OUTLIER_S = 366 * 86_400  # arrivals further than this from the median are typos, not traffic


@dataclass(frozen=True)
class TraceLoad:
    """A loaded trace: the requests plus how many bad lines were skipped to get them."""

    requests: list[Request]
    skipped: int
    path: str
    fmt: str


def _outliers(numbered: list[tuple[int, TraceRow]]) -> list[tuple[int, TraceRow]]:
    """Rows whose arrival lies more than OUTLIER_S from the median arrival, in file order."""
    if len(numbered) < 2:
        return []
    seconds = sorted(row.time / row.ticks_per_s for _, row in numbered)
    median = seconds[len(seconds) // 2]
    if seconds[-1] - seconds[0] <= OUTLIER_S:  # the fast path: nothing can be an outlier
        return []
    return [(n, row) for n, row in numbered if abs(row.time / row.ticks_per_s - median) > OUTLIER_S]


def _to_requests(
    rows: list[TraceRow], time_scale: float, max_requests: int | None
) -> list[Request]:
    """Sort (stable) by time, re-base to the earliest, scale, number in arrival order."""
    if len({r.ticks_per_s for r in rows}) > 1:  # a generic trace mixing arrival_s and timestamp_ms
        rows = [replace(r, time=r.time / r.ticks_per_s, ticks_per_s=1) for r in rows]
    rows = sorted(rows, key=lambda r: r.time)[:max_requests]
    t0 = rows[0].time
    return [
        Request(
            request_id=i,
            arrival_s=(r.time - t0) / r.ticks_per_s * time_scale,
            prompt_len=r.prompt_len,
            output_len=r.output_len,
            prompt_tokens=r.prompt_tokens,
            block_hashes=r.block_hashes,
            hash_block_tokens=r.hash_block_tokens,
            session_id=r.session_id,
        )
        for i, r in enumerate(rows)
    ]


def load_trace(
    path: str | Path,
    fmt: str | None = None,
    *,
    skip_bad_lines: bool = False,
    max_requests: int | None = None,
    time_scale: float = 1.0,
) -> TraceLoad:
    """Load a request trace (see the module docstring for formats and rules).

    max_requests keeps the earliest N requests; time_scale multiplies every arrival time.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"trace file {path} not found; check the path")
    if fmt is not None and fmt not in TRACE_FORMATS:
        raise ValueError(
            f"unknown trace format {fmt!r}; use one of {', '.join(TRACE_FORMATS)} or omit it to "
            "detect"
        )
    if not (0 < time_scale < math.inf):
        raise ValueError(f"time_scale must be a finite number > 0, got {time_scale!r}")
    if max_requests is not None and (isinstance(max_requests, bool) or max_requests < 1):
        raise ValueError(f"max_requests must be >= 1 or None, got {max_requests!r}")
    fmt = fmt or detect_format(path)
    rows: list[TraceRow] = []
    skipped = 0

    def bad(lineno: int, problem: BadLine) -> None:
        nonlocal skipped
        if not skip_bad_lines:
            raise SettingError(
                "{where}: {problem} ({fmt} trace); fix the line or pass {skip_bad_lines} to skip "
                "it",
                where=f"{path}:{lineno}",
                problem=problem,
                fmt=fmt,
            )
        skipped += 1

    numbered: list[tuple[int, TraceRow]] = []
    for lineno, row in read_rows(path, fmt):
        if isinstance(row, BadLine):
            bad(lineno, row)
        else:
            numbered.append((lineno, row))
    outliers = _outliers(numbered)
    for lineno, row in outliers:
        bad(
            lineno,
            BadLine(
                f"arrival time {row.time / row.ticks_per_s:.6g} s is more than a year away from "
                "the trace's median arrival"
            ),
        )
    dropped = {lineno for lineno, _ in outliers}
    rows = [row for lineno, row in numbered if lineno not in dropped]
    if not rows:
        raise ValueError(
            f"{path}: no valid requests in this {fmt} trace ({skipped} bad lines skipped); "
            "check the file and its format"
        )
    return TraceLoad(
        requests=_to_requests(rows, time_scale, max_requests),
        skipped=skipped,
        path=str(path),
        fmt=fmt,
    )
