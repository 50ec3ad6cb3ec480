"""Trace loaders: tiny exact fixtures per format, bad-line handling, and the real traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.samples import sample_path
from kvplan.workload import TRACE_FORMATS, Request, TraceLoad, load_trace
from kvplan.workload.trace_formats import detect_format, parse_azure_timestamp

MOONCAKE = "mooncake_fast25_synthetic_trace.jsonl"
AZURE = "AzureLLMInferenceTrace_conv.csv"


def _write(tmp_path: Path, name: str, lines: list[str | dict]) -> Path:
    path = tmp_path / name
    path.write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines))
    return path


def _mooncake(ts: int, n_in: int, n_out: int, hashes: list[int]) -> dict:
    return {"timestamp": ts, "input_length": n_in, "output_length": n_out, "hash_ids": hashes}


# --- formats -----------------------------------------------------------------------------


def test_mooncake_fixture_sorted_rebased_hashed(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "t.jsonl",
        [
            _mooncake(1000, 600, 5, [0, 1]),
            _mooncake(1500, 512, 2, [0]),
            _mooncake(1200, 10, 1, [7]),
        ],
    )
    load = load_trace(path)
    assert load == TraceLoad(
        requests=[
            Request(0, 0.0, 600, 5, block_hashes=(0, 1), hash_block_tokens=512),
            Request(1, 0.2, 10, 1, block_hashes=(7,), hash_block_tokens=512),
            Request(2, 0.5, 512, 2, block_hashes=(0,), hash_block_tokens=512),
        ],
        skipped=0,
        path=str(path),
        fmt="mooncake",
    )
    assert [r.arrival_s for r in load_trace(path, time_scale=2.0).requests] == [0.0, 0.4, 1.0]
    assert [r.prompt_len for r in load_trace(path, max_requests=2).requests] == [600, 10]


def test_mooncake_hash_count_must_cover_prompt(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.jsonl", [_mooncake(0, 600, 5, [0])])
    with pytest.raises(
        ValueError, match=r"t\.jsonl:1: hash_ids has 1 ids but a 600-token prompt has 2 blocks"
    ):
        load_trace(path)


def test_azure_fixture_seven_fractional_digits(tmp_path: Path) -> None:
    path = tmp_path / "az.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "\n"
        "2023-11-17 00:00:00,1,1\n"
    )
    load = load_trace(path)
    assert load.fmt == "azure" and load.skipped == 0
    assert [(r.request_id, r.prompt_len, r.output_len) for r in load.requests] == [
        (0, 374, 44),
        (1, 396, 109),
        (2, 1, 1),
    ]
    arrivals = [r.arrival_s for r in load.requests]
    assert arrivals[0] == 0.0
    assert arrivals[1] == pytest.approx(4.314579, abs=1e-9)
    assert arrivals[2] == pytest.approx(5 * 3600 + 44 * 60 + 13.31941, abs=1e-9)


def test_parse_azure_timestamp_exact_nanoseconds() -> None:
    whole = parse_azure_timestamp("2023-11-16 18:15:46")
    assert parse_azure_timestamp("2023-11-16 18:15:46.6805900") - whole == 680_590_000
    assert parse_azure_timestamp("2023-11-16 18:15:46.5") - whole == 500_000_000
    assert parse_azure_timestamp("2023-11-16T18:15:46.123456789") - whole == 123_456_789
    with pytest.raises(ValueError, match="bad TIMESTAMP"):
        parse_azure_timestamp("2023-11-16 18:15:46.x")


def test_generic_fixture(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "g.jsonl",
        [
            {"arrival_s": 3.5, "prompt_len": 4, "output_len": 2, "session_id": "a"},
            {"arrival_s": 1.5, "prompt_tokens": [5, 6, 7], "output_len": 1, "session_id": 9},
            {
                "arrival_s": 2.0,
                "prompt_len": 40,
                "output_len": 3,
                "block_hashes": [11, 12, 13],
                "hash_block_tokens": 16,
            },
        ],
    )
    assert load_trace(path).requests == [
        Request(0, 0.0, 3, 1, prompt_tokens=(5, 6, 7), session_id="9"),
        Request(1, 0.5, 40, 3, block_hashes=(11, 12, 13), hash_block_tokens=16),
        Request(2, 2.0, 4, 2, session_id="a"),
    ]
    ms = _write(
        tmp_path,
        "ms.jsonl",
        [
            {"timestamp_ms": 2500, "prompt_len": 1, "output_len": 1},
            {"timestamp_ms": 1000, "prompt_len": 2, "output_len": 1},
        ],
    )
    assert [(r.arrival_s, r.prompt_len) for r in load_trace(ms).requests] == [(0.0, 2), (1.5, 1)]
    mixed = _write(
        tmp_path,
        "mix.jsonl",
        [
            {"timestamp_ms": 2500, "prompt_len": 1, "output_len": 1},
            {"arrival_s": 1.0, "prompt_len": 2, "output_len": 1},
        ],
    )
    assert [(r.arrival_s, r.prompt_len) for r in load_trace(mixed).requests] == [(0.0, 2), (1.5, 1)]


def test_detection_and_explicit_format(tmp_path: Path) -> None:
    mc = _write(tmp_path, "a.jsonl", ["", _mooncake(0, 1, 1, [0])])
    gen = _write(tmp_path, "b.jsonl", [{"arrival_s": 0, "prompt_len": 1, "output_len": 1}])
    az = tmp_path / "c.txt"
    az.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,1,1\n")
    assert [detect_format(p) for p in (mc, gen, az, tmp_path / "x.csv")] == [
        "mooncake",
        "generic",
        "azure",
        "azure",
    ]
    assert load_trace(az).fmt == "azure"
    assert load_trace(gen, fmt="generic").fmt == "generic"
    assert TRACE_FORMATS == ("mooncake", "azure", "generic")
    with pytest.raises(ValueError, match="unknown trace format 'sharegpt'"):
        load_trace(gen, fmt="sharegpt")


# --- bad lines ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("{not json", "bad JSON"),
        ({"arrival_s": 1.0, "output_len": 3}, "missing field 'prompt_len' or 'prompt_tokens'"),
        ({"prompt_len": 2, "output_len": 3}, "missing field 'arrival_s' or 'timestamp_ms'"),
        (
            {"arrival_s": 1.0, "prompt_len": "many", "output_len": 3},
            "prompt_len must be an integer",
        ),
        ({"arrival_s": -1.0, "prompt_len": 2, "output_len": 3}, "arrival_s must be >= 0"),
        ({"arrival_s": 1.0, "prompt_len": 2, "output_len": 0}, "output_len must be >= 1"),
        (
            {"arrival_s": 1.0, "prompt_len": 2, "prompt_tokens": [1], "output_len": 1},
            "prompt_len 2 but 1 prompt_tokens",
        ),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_bad_generic_line_names_file_and_line(tmp_path: Path, bad: str | dict, reason: str) -> None:
    good = {"arrival_s": 0.0, "prompt_len": 2, "output_len": 3}
    path = _write(tmp_path, "g.jsonl", [good, "", bad, good])
    with pytest.raises(ValueError) as info:
        load_trace(path, fmt="generic")
    message = str(info.value)
    assert message.startswith(f"{path}:3: {reason}")  # the blank line still counts
    assert (
        "pass skip_bad_lines to skip it" in message and "\n" not in message
    )  # the command line: --skip-bad-lines
    load = load_trace(path, fmt="generic", skip_bad_lines=True)
    assert (len(load.requests), load.skipped) == (2, 1)


def test_bad_mooncake_and_azure_lines(tmp_path: Path) -> None:
    mc = _write(
        tmp_path,
        "m.jsonl",
        [_mooncake(0, 5, 1, [0]), _mooncake(5, 0, 1, []), _mooncake(9, 5, 1, "x")],
    )
    with pytest.raises(ValueError, match=r"m\.jsonl:2: input_length must be >= 1"):
        load_trace(mc)
    assert load_trace(mc, skip_bad_lines=True).skipped == 2
    az = tmp_path / "a.csv"
    az.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,5,1\n"
        "2023-11-16 18:15:47.1,5,0\n2023-11-16 18:15:48.1,5\nyesterday,5,5\n2023-11-16 "
        "18:15:49.1,7,2\n"
    )
    with pytest.raises(
        ValueError, match=r"a\.csv:3: GeneratedTokens must be >= 1, got 0 \(azure trace\)"
    ):
        load_trace(az)
    load = load_trace(az, skip_bad_lines=True)
    assert load.skipped == 3
    assert [(r.arrival_s, r.prompt_len) for r in load.requests] == [
        (0.0, 5),
        (pytest.approx(3.0), 7),
    ]


def test_empty_missing_and_all_bad(tmp_path: Path) -> None:
    empty = _write(tmp_path, "e.jsonl", ["", "  "])
    with pytest.raises(ValueError, match="no valid requests"):
        load_trace(empty)
    with pytest.raises(ValueError, match="empty trace file"):
        load_trace(_write(tmp_path, "e.csv", []))
    with pytest.raises(ValueError, match="no valid requests"):
        load_trace(_write(tmp_path, "h.csv", ["TIMESTAMP,ContextTokens,GeneratedTokens"]))
    with pytest.raises(ValueError, match=r"no valid requests .*\(1 bad lines skipped\)"):
        load_trace(_write(tmp_path, "b.jsonl", ["{"]), skip_bad_lines=True)
    with pytest.raises(ValueError, match="trace file /no/such/trace.jsonl not found"):
        load_trace("/no/such/trace.jsonl")
    with pytest.raises(ValueError, match="expected the header"):
        load_trace(_write(tmp_path, "w.csv", ["a,b,c", "1,2,3"]))
    with pytest.raises(ValueError, match="time_scale"):
        load_trace(empty, time_scale=0)


# --- the real traces (figures measured on the files in ../shared/data/traces) --------------


def test_mooncake_real_trace(shared_data: Path) -> None:
    load = load_trace(shared_data / "traces" / MOONCAKE)
    reqs = load.requests
    assert (load.fmt, load.skipped, len(reqs)) == ("mooncake", 0, 3_993)
    assert sum(r.prompt_len for r in reqs) == 61_194_628  # mean 15,325.5
    assert sum(r.prompt_len for r in reqs) / len(reqs) == pytest.approx(15_325, rel=0.005)
    assert sum(r.output_len for r in reqs) == 595_432  # mean 149.1
    assert reqs[-1].arrival_s == pytest.approx(1022.025)  # about 17 minutes, 3.91 req/s
    blocks = [h for r in reqs for h in r.block_hashes]
    assert (len(blocks), len(set(blocks))) == (121_877, 43_924)
    assert round(1 - len(set(blocks)) / len(blocks), 3) == 0.640  # infinite-cache block hit bound
    assert all(r.hash_block_tokens == 512 for r in reqs)


def test_azure_real_trace(shared_data: Path) -> None:
    load = load_trace(shared_data / "traces" / AZURE)
    reqs = load.requests
    assert (load.fmt, load.skipped, len(reqs)) == ("azure", 0, 19_366)  # every row is valid
    assert sum(r.prompt_len for r in reqs) == 22_361_870  # mean 1,154.7
    assert sum(r.output_len for r in reqs) == 4_088_665  # mean 211.1
    assert reqs[1].arrival_s == pytest.approx(4.314579, abs=1e-9)
    assert reqs[-1].arrival_s == pytest.approx(3501.721937, abs=1e-6)  # about 58 minutes


def test_real_trace_scaling_and_truncation() -> None:
    trace = sample_path("mooncake-trace")  # the real trace's first 200 lines, shipped
    load = load_trace(trace, max_requests=100, time_scale=0.5)
    assert len(load.requests) == 100
    full = load_trace(trace).requests[:100]
    assert [r.arrival_s for r in load.requests] == pytest.approx([r.arrival_s / 2 for r in full])
