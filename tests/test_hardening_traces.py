"""Traces that fail to load say which line and why, in one line, exit 2, and change no
file; the loaders read what they can (a BOM, a first line without hash ids)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hardening_helpers import fails_cleanly, invoke


@pytest.fixture
def mooncake_lines() -> list[str]:
    return [
        json.dumps(
            {"timestamp": i * 100, "input_length": 600, "output_length": 5, "hash_ids": [i, i + 1]}
        )
        for i in range(6)
    ]


def test_non_utf8_trace_line_is_named_and_skippable(ws: Path, mooncake_lines: list[str]) -> None:
    trace = ws / "t.jsonl"
    trace.write_bytes(
        "\n".join(mooncake_lines[:2]).encode()
        + b'\n{"timestamp": 5\xff}\n'
        + "\n".join(mooncake_lines[2:]).encode()
        + b"\n"
    )
    fails_cleanly(
        ["bench", "--trace", trace, "--optimizations", "paged", "--out", ws / "keep.jsonl"],
        ws,
        "t.jsonl:3",
        "UTF-8",
        "--skip-bad-lines",
    )
    result = invoke(
        [
            "bench",
            "--trace",
            trace,
            "--optimizations",
            "paged",
            "--skip-bad-lines",
            "--out",
            ws / "new.jsonl",
        ]
    )
    assert result.exit_code == 0 and "skipped 1 malformed lines" in result.stderr


def test_mooncake_detected_when_the_first_line_lacks_hash_ids(
    tmp_path: Path, mooncake_lines: list[str]
) -> None:
    from kvplan.workload import load_trace

    trace = tmp_path / "t.jsonl"
    trace.write_text(
        json.dumps({"timestamp": 0, "input_length": 600, "output_length": 5})
        + "\n"
        + "\n".join(mooncake_lines)
        + "\n"
    )
    loaded = load_trace(trace, skip_bad_lines=True)
    assert loaded.fmt == "mooncake" and loaded.skipped == 1 and len(loaded.requests) == 6


def test_csv_with_a_utf8_bom_loads(tmp_path: Path) -> None:
    from kvplan.workload import load_trace

    trace = tmp_path / "t.csv"
    trace.write_bytes(
        b"\xef\xbb\xbfTIMESTAMP,ContextTokens,GeneratedTokens\n"
        b"2023-11-16 18:15:46.6805900,100,10\n2023-11-16 18:15:47.0000000,50,5\n"
    )
    assert [r.prompt_len for r in load_trace(trace).requests] == [100, 50]


@pytest.mark.parametrize(
    "outlier", ['{"timestamp": 1e300, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}']
)
def test_outlier_timestamps_are_named(ws: Path, mooncake_lines: list[str], outlier: str) -> None:
    trace = ws / "t.jsonl"
    trace.write_text("\n".join([*mooncake_lines, outlier]) + "\n")
    fails_cleanly(
        ["bench", "--trace", trace, "--optimizations", "paged", "--out", ws / "keep.jsonl"],
        ws,
        "t.jsonl:7",
        "more than a year",
    )


def test_deeply_nested_trace_line_is_named(ws: Path, mooncake_lines: list[str]) -> None:
    trace = ws / "t.jsonl"
    trace.write_text("\n".join([*mooncake_lines, "[" * 100_000 + "]" * 100_000]) + "\n")
    fails_cleanly(
        ["bench", "--trace", trace, "--optimizations", "paged", "--out", ws / "keep.jsonl"],
        ws,
        "t.jsonl:7",
        "nested too deeply",
    )


def test_year_one_in_an_azure_trace_is_named(ws: Path) -> None:
    trace = ws / "t.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,100,10\n"
        "2023-11-16 18:15:47.00,50,5\n0001-01-01 00:00:00,50,5\n"
    )
    fails_cleanly(
        ["bench", "--trace", trace, "--optimizations", "paged", "--out", ws / "keep.jsonl"],
        ws,
        "t.csv:4",
        "more than a year",
    )
