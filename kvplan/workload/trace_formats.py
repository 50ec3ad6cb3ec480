"""A trace file's lines as rows: the three formats' parsers, their readers and format detection.

The formats, their fields and the rules for bad lines are traces.py's module docstring; every
reader yields (1-based line number, row or BadLine) so the loader decides what a bad line costs.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from kvplan import cdiv

MOONCAKE_BLOCK_TOKENS = 512
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_EPOCH = datetime(1970, 1, 1)
DETECT_LINES = 20


class BadLine(ValueError):
    """One line of a trace is unusable; carries the reason without file context."""


@dataclass(frozen=True)
class TraceRow:
    """A parsed line before sorting; `time` counts ticks of 1/ticks_per_s seconds.

    Keeping the file's own unit (ms, integer ns) until after re-basing keeps arrivals exact:
    (1200 - 1000) / 1000 is 0.2, while 1.2 - 1.0 is not.
    """

    time: float
    ticks_per_s: int
    prompt_len: int
    output_len: int
    prompt_tokens: tuple[int, ...] | None = None
    block_hashes: tuple[int, ...] | None = None
    hash_block_tokens: int = 0
    session_id: str | None = None


# --- field checks ------------------------------------------------------------------------


def _field(obj: dict[str, Any], *names: str) -> Any:
    """The first of `names` present (aliases such as arrival_s / timestamp_ms)."""
    for name in names:
        if name in obj:
            return obj[name]
    raise BadLine(f"missing field {' or '.join(repr(n) for n in names)}")


def _count(value: Any, name: str) -> int:
    """A token count: an integer (or integral float) >= 1."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value != int(value)
    ):
        raise BadLine(f"{name} must be an integer, got {value!r}")
    if value < 1:
        raise BadLine(f"{name} must be >= 1, got {value!r}")
    return int(value)


def _time(value: Any, name: str) -> float:
    """A timestamp: any finite number >= 0 (re-based to the earliest request later)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadLine(f"{name} must be a number, got {value!r}")
    if value < 0:
        raise BadLine(f"{name} must be >= 0, got {value!r}")
    return float(value)


def _ints(value: Any, name: str) -> tuple[int, ...]:
    if not isinstance(value, list) or any(
        isinstance(v, bool) or not isinstance(v, int) for v in value
    ):
        raise BadLine(f"{name} must be a list of integers")
    return tuple(value)


def _check_hashes(
    hashes: tuple[int, ...], prompt_len: int, block: int, name: str, tail: bool
) -> None:
    """Hashes must cover the prompt: one per full block, plus one for a partial tail block
    (always when `tail`, as Mooncake does; optionally otherwise)."""
    lowest = cdiv(prompt_len, block) if tail else prompt_len // block
    if not lowest <= len(hashes) <= cdiv(prompt_len, block):
        raise BadLine(
            f"{name} has {len(hashes)} ids but a {prompt_len}-token prompt has "
            f"{cdiv(prompt_len, block)} blocks of {block} tokens"
        )


# --- per-format line parsers -------------------------------------------------------------


def _json_object(line: str) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise BadLine(f"bad JSON ({e.msg})") from None
    except RecursionError:
        raise BadLine("JSON nested too deeply") from None
    if not isinstance(obj, dict):
        raise BadLine("expected a JSON object")
    return obj


def _parse_mooncake(line: str) -> TraceRow:
    obj = _json_object(line)
    prompt_len = _count(_field(obj, "input_length"), "input_length")
    hashes = _ints(_field(obj, "hash_ids"), "hash_ids")
    _check_hashes(hashes, prompt_len, MOONCAKE_BLOCK_TOKENS, "hash_ids", tail=True)
    return TraceRow(
        time=_time(_field(obj, "timestamp"), "timestamp"),
        ticks_per_s=1000,
        prompt_len=prompt_len,
        output_len=_count(_field(obj, "output_length"), "output_length"),
        block_hashes=hashes,
        hash_block_tokens=MOONCAKE_BLOCK_TOKENS,
    )


def _parse_generic(line: str) -> TraceRow:
    obj = _json_object(line)
    if "arrival_s" in obj:
        time, ticks_per_s = _time(obj["arrival_s"], "arrival_s"), 1
    else:
        time, ticks_per_s = _time(_field(obj, "arrival_s", "timestamp_ms"), "timestamp_ms"), 1000
    tokens = _ints(obj["prompt_tokens"], "prompt_tokens") if "prompt_tokens" in obj else None
    if "prompt_len" in obj:
        prompt_len = _count(obj["prompt_len"], "prompt_len")
        if tokens is not None and len(tokens) != prompt_len:
            raise BadLine(f"prompt_len {prompt_len} but {len(tokens)} prompt_tokens")
    elif tokens is not None:
        prompt_len = _count(len(tokens), "len(prompt_tokens)")
    else:
        raise BadLine("missing field 'prompt_len' or 'prompt_tokens'")
    hashes, block = None, 0
    if "block_hashes" in obj:
        hashes = _ints(obj["block_hashes"], "block_hashes")
        block = _count(_field(obj, "hash_block_tokens"), "hash_block_tokens")
        _check_hashes(hashes, prompt_len, block, "block_hashes", tail=False)
    session = obj.get("session_id")
    if session is not None and (isinstance(session, bool) or not isinstance(session, (str, int))):
        raise BadLine(f"session_id must be a string or integer, got {session!r}")
    output_len = _count(_field(obj, "output_len"), "output_len")
    return TraceRow(
        time=time,
        ticks_per_s=ticks_per_s,
        prompt_len=prompt_len,
        output_len=output_len,
        prompt_tokens=tokens,
        block_hashes=hashes,
        hash_block_tokens=block,
        session_id=None if session is None else str(session),
    )


def parse_azure_timestamp(text: str) -> int:
    """Nanoseconds since 1970 of a naive datetime with any number of fractional digits.

    Integer nanoseconds keep 7-digit fractions exact (a float of epoch seconds would not).
    """
    base, dot, frac = text.strip().partition(".")
    if dot and not frac.isdigit():
        raise BadLine(f"bad TIMESTAMP {text!r}")
    try:
        delta = datetime.fromisoformat(base) - _EPOCH
    except (ValueError, TypeError):
        raise BadLine(
            f"bad TIMESTAMP {text!r}; expected e.g. 2023-11-16 18:15:46.6805900"
        ) from None
    whole_s = delta.days * 86_400 + delta.seconds
    return (
        whole_s * 1_000_000_000 + int((frac + "000000000")[:9]) if dot else whole_s * 1_000_000_000
    )


def _azure_row(cells: list[str]) -> tuple[int, int, int]:
    """(time_ns, prompt_len, output_len) from one CSV row; kept lean, it runs per row."""
    if len(cells) != len(AZURE_COLUMNS):
        raise BadLine(f"expected {len(AZURE_COLUMNS)} columns, got {len(cells)}")
    counts = []
    for name, cell in zip(AZURE_COLUMNS[1:], cells[1:]):
        try:
            value = int(cell)
        except ValueError:
            raise BadLine(f"{name} must be an integer, got {cell!r}") from None
        if value < 1:
            raise BadLine(f"{name} must be >= 1, got {value}")
        counts.append(value)
    return parse_azure_timestamp(cells[0]), counts[0], counts[1]


# --- readers: yield (line number, row or BadLine) ----------------------------------------


def _open_text(path: Path, **options: Any) -> Any:
    """Text with an optional UTF-8 BOM dropped; undecodable bytes kept as surrogates so the
    line that holds them can be named (and skipped) instead of failing the whole file."""
    return path.open(encoding="utf-8-sig", errors="surrogateescape", **options)


def _check_utf8(text: str) -> None:
    if not text.isascii():  # the fast path: almost every trace line is ASCII
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise BadLine(
                f"not UTF-8 text (byte {ord(text[e.start]) - 0xDC00:#04x} at column {e.start + 1})"
            ) from None


def _read_jsonl(
    path: Path, parse: Callable[[str], TraceRow]
) -> Iterator[tuple[int, TraceRow | BadLine]]:
    with _open_text(path) as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                try:
                    _check_utf8(line)
                    yield lineno, parse(line)
                except BadLine as e:
                    yield lineno, e


def _read_azure(path: Path) -> Iterator[tuple[int, TraceRow | BadLine]]:
    """Azure rows; times are nanoseconds since 1970 here and re-based after sorting."""
    with _open_text(path, newline="") as f:
        reader = csv.reader(f)
        header = next((row for row in reader if row), None)
        if header is None:
            raise ValueError(f"{path}: empty trace file (no header, no requests); check the path")
        if [h.strip() for h in header] != list(AZURE_COLUMNS):
            raise ValueError(
                f"{path}: expected the header {','.join(AZURE_COLUMNS)}, got "
                f"{','.join(header)!r}; is this an Azure LLM inference trace?"
            )
        for cells in reader:
            if not cells or (len(cells) == 1 and not cells[0].strip()):
                continue
            try:
                _check_utf8("".join(cells))
                ns, prompt_len, output_len = _azure_row(cells)
            except BadLine as e:
                yield reader.line_num, e
                continue
            yield (
                reader.line_num,
                TraceRow(
                    time=ns, ticks_per_s=1_000_000_000, prompt_len=prompt_len, output_len=output_len
                ),
            )


def detect_format(path: Path) -> str:
    """Guess the trace format from the extension, then from the first non-blank line."""
    if path.suffix.lower() == ".csv":
        return "azure"
    with _open_text(path) as f:
        lines = [
            line.strip()
            for line in itertools.islice((line for line in f if line.strip()), DETECT_LINES)
        ]
    if lines and lines[0].startswith("TIMESTAMP,"):
        return "azure"
    # A vote over the first lines, so one bad first line does not decide the format
    mooncake = generic = 0
    for line in lines:
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(obj, dict):
            mooncake += "hash_ids" in obj or "input_length" in obj
            generic += any(
                key in obj for key in ("prompt_len", "prompt_tokens", "arrival_s", "timestamp_ms")
            )
    return "mooncake" if mooncake > generic else "generic"


def read_rows(path: Path, fmt: str) -> Iterator[tuple[int, TraceRow | BadLine]]:
    """Every non-blank line of a `fmt` trace as (line number, row or BadLine), in file order."""
    if fmt == "azure":
        return _read_azure(path)
    return _read_jsonl(path, _parse_mooncake if fmt == "mooncake" else _parse_generic)
