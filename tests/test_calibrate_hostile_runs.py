"""`kvplan calibrate` on measured runs no benchmark produced and on settings no server ran:
each is refused before any fit, in one line naming the file and key (or the flag), exit 2,
with an existing --out file and a user's file beside it byte for byte as they were."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hardening_helpers import fails_cleanly, invoke

# A `vllm bench serve --save-result` file: 40 requests of 256 + 64 tokens in 10 s at
# concurrency 8, every throughput the total over the duration as vLLM computes it.
RESULT: dict[str, Any] = {
    "date": "20250101-000000",
    "backend": "vllm",
    "model_id": "meta-llama/Llama-3.1-8B-Instruct",
    "num_prompts": 40,
    "request_rate": "inf",
    "burstiness": 1.0,
    "max_concurrency": 8,
    "duration": 10.0,
    "completed": 40,
    "total_input_tokens": 10_240,
    "total_output_tokens": 2_560,
    "request_throughput": 4.0,
    "output_throughput": 256.0,
    "total_token_throughput": 1_280.0,
    "mean_ttft_ms": 60.0,
    "median_ttft_ms": 55.0,
    "mean_tpot_ms": 28.0,
    "median_tpot_ms": 28.0,
}
GONE = object()  # a patch value that deletes the key
BLOCK = (
    "============ Serving Benchmark Result ============\n"
    "Successful requests:                     40        \n"
    "Benchmark duration (s):                  10.00     \n"
    "Total input tokens:                      10240     \n"
    "Total generated tokens:                  2560      \n"
    "Output token throughput (tok/s):         fast      \n"
)
# patch of RESULT (or the file's whole text) -> what the one error line must hold
RUNS: dict[str, tuple[dict[str, Any] | str, list[str]]] = {
    "negative throughput": ({"output_throughput": -5}, ["'output_throughput' is -5", "> 0"]),
    "zero duration": ({"duration": 0}, ["'duration' is 0", "> 0"]),
    "NaN TTFT": ({"mean_ttft_ms": float("nan")}, ["'mean_ttft_ms' is nan", "finite"]),
    "null throughput": ({"output_throughput": None}, ["'output_throughput' is null"]),
    "a word for TPOT": ({"mean_tpot_ms": "fast"}, ["'mean_tpot_ms' is 'fast'"]),
    "a list for throughput": ({"output_throughput": []}, ["'output_throughput' is []"]),
    "an empty per-request list": ({"ttfts": []}, ["'ttfts' lists 0 requests", "completed 40"]),
    "a rate of fast": ({"request_rate": "fast"}, ["'request_rate' is 'fast'"]),
    "a rate of 0": ({"request_rate": 0}, ["'request_rate' is 0", "> 0"]),
    "1e9 completed": ({"completed": 10**9}, ["'completed' is 1,000,000,000", "<= 100,000"]),
    "400 digits completed": ({"completed": int("9" * 400)}, ["'completed' is a 400-digit number"]),
    "half a request": ({"completed": 40.5}, ["'completed' is 40.5", "a whole number"]),
    "more completed than sent": (
        {"completed": 50},
        ["'completed' is 50", "at most num_prompts, 40"],
    ),
    "a TTFT longer than the run": (
        {"mean_ttft_ms": 1e7},
        ["'mean_ttft_ms' is 10,000,000", "within the run's duration, 10.00 s"],
    ),
    "throughput against its own totals": (
        {"output_throughput": 2560.0},
        ["'output_throughput' is 2,560", "total_output_tokens / duration = 256.00"],
    ),
    "fewer tokens than requests": (
        {"total_output_tokens": 10, "output_throughput": 1.0, "total_token_throughput": 1025.0},
        ["'total_output_tokens' is 10", "at least one token per completed request, 40"],
    ),
    "concurrency 0": ({"max_concurrency": 0}, ["'max_concurrency' is 0"]),
    "requests longer than the model serves": (
        {"total_input_tokens": 8_000_000, "total_token_throughput": GONE},
        [
            "requests of 200,000 prompt + 64 output tokens",
            "longer than llama-3.1-8b serves (131,072)",
        ],
    ),
    "more tokens than a fit replays": (
        {
            "num_prompts": 100_000,
            "completed": 100_000,
            "total_input_tokens": 100_000,
            "total_output_tokens": 200_000_000,
            "duration": 1e5,
            "request_throughput": 1.0,
            "output_throughput": 2000.0,
            "total_token_throughput": GONE,
            "mean_tpot_ms": 28.0,
        },
        ["100,000 requests of 2,000 output tokens are 200,000,000 tokens to replay"],
    ),
    "a list, not a result": ("[]", ["no 'output_throughput' key"]),
    "nested past any reader": (
        '{"output_throughput": ' + "[" * 100_000 + "]" * 100_000 + "}",
        ["not a readable vLLM result JSON"],
    ),
    "5,000 digits": (
        '{"output_throughput": ' + "9" * 5_000 + "}",
        ["not a readable vLLM result JSON"],
    ),
    "a printed block with a word": (BLOCK, ["'output_throughput' is 'fast'"]),
}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """An existing calibration and a user's file named like a temporary one, beside it."""
    (tmp_path / "cal.json").write_text('{"kept": true}\n')
    (tmp_path / "cal.json.tmp").write_text("the user's own file\n")
    return tmp_path


def _result(folder: Path, content: dict[str, Any] | str, name: str = "run.json") -> Path:
    if isinstance(content, dict):
        data = {k: v for k, v in {**RESULT, **content}.items() if v is not GONE}
        content = json.dumps(data)  # NaN as NaN: what a careless writer leaves
    path = folder / name
    path.write_text(content)
    return path


def _calibrate(files: list[Path], out: Path, *flags: str) -> list[Any]:
    return ["calibrate", *files, "--model", "llama-3.1-8b", "--gpu", "h100", "--out", out, *flags]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_run_no_benchmark_produced_is_refused(ws: Path, name: str) -> None:
    content, culprits = RUNS[name]
    run = _result(ws, content)
    line = fails_cleanly(_calibrate([run], ws / "cal.json"), ws, *culprits)
    if culprits[0].startswith("'"):
        assert line.startswith(f"error: {run}: "), line


@pytest.mark.parametrize(
    ("flags", "culprits"),
    [
        (["--tp", "0"], ["--tp must be a whole number >= 1", "got 0"]),
        (["--input-len", "0"], ["--input-len must be a whole number >= 1"]),
        (["--max-concurrency", "0"], ["--max-concurrency must be a whole number >= 1"]),
        (["--max-num-seqs", "0"], ["--max-num-seqs must be a whole number >= 1"]),
        (["--max-num-batched-tokens", "-1"], ["--max-num-batched-tokens must be"]),
        (["--random-range-ratio", "2"], ["--random-range-ratio must be a finite number >= 0"]),
        (["--engine", "tgi"], ["--engine must be vllm or sglang, got 'tgi'"]),
        (["--dataset", "alpaca"], ["--dataset must be random or sharegpt, got 'alpaca'"]),
        (["--engine-version", "latest"], ["--engine-version must be a version", "'latest'"]),
        (["--kv-dtype", "fp7"], ["unknown KV dtype 'fp7'"]),
        (
            ["--input-len", "4096"],
            [
                "--input-len 4096 applies to every result file",
                "10,240 input tokens over 40 requests are 256",
            ],
        ),
        (
            ["--output-len", "8"],
            ["--output-len 8 applies to every result file", "are 64 per request"],
        ),
    ],
)
def test_settings_no_server_ran_are_refused(
    ws: Path, flags: list[str], culprits: list[str]
) -> None:
    run = _result(ws, {})
    fails_cleanly(_calibrate([run], ws / "cal.json", *flags), ws, *culprits)


def test_out_may_not_be_an_input(ws: Path) -> None:
    run = _result(ws, {})
    fails_cleanly(_calibrate([run], run), ws, f"--out '{run}' is one of the result files")


def test_out_may_not_be_a_folder(ws: Path) -> None:
    run = _result(ws, {})
    (ws / "folder").mkdir()
    fails_cleanly(_calibrate([run], ws / "folder"), ws, f"--out '{ws / 'folder'}' is a folder")


def test_a_fit_writes_its_file_whole_and_leaves_a_users_tmp_file_alone(ws: Path) -> None:
    """The file is written through a unique temporary name: `cal.json.tmp` is the user's. One
    --input-len / --output-len for every file is said once, in a note."""
    run = _result(ws, {})
    result = invoke(_calibrate([run], ws / "cal.json", "--input-len", "256", "--output-len", "64"))
    assert result.exit_code == 0, result.output
    assert (ws / "cal.json.tmp").read_text() == "the user's own file\n"
    assert sorted(p.name for p in ws.iterdir()) == ["cal.json", "cal.json.tmp", "run.json"]
    assert json.loads((ws / "cal.json").read_text())["format"] == "kvplan-step-model-calibration/2"
    assert "note: --input-len 256 and --output-len 64 applied to all 1 run(s)" in " ".join(
        result.stdout.split()
    )
