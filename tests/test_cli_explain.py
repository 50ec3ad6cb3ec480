"""`kvplan explain` end to end: a file, stdin, --json, and garbage."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from kvplan.cli.app import app
from kvplan.logs.explain import explain

runner = CliRunner()
FIXTURE = Path(__file__).parent / "data" / "vllm_issue_12330.log"
# Dense full-attention logs whose model the resolver sizes.
DENSE = ("rec001", "rec015", "rec017", "rec019", "rec035", "rec037", "rec051")


def test_explain_file_shows_memory_and_what_ifs() -> None:
    result = runner.invoke(
        app, ["explain", str(FIXTURE), "--model", "llama-3.1-8b", "--gpu", "a100-40gb"]
    )
    assert result.exit_code == 0, result.output
    for text in (
        "Where the memory went",
        "9.37",
        "11.12",
        "131,072",
        "agrees",
        "--kv-cache-dtype fp8",
        "--tensor-parallel-size 2",
        "--max-model-len 91056",
    ):
        assert text in result.output, text


def test_explain_stdin_json_schema() -> None:
    result = runner.invoke(
        app,
        ["explain", "-", "--json", "--model", "llama-3.1-8b", "--gpu", "a100-40gb"],
        input=FIXTURE.read_text(),
    )
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["schema"] == "kvplan.explain/1"
    assert set(record) >= {
        "engine",
        "engine_generation",
        "version",
        "inputs",
        "assumed",
        "memory_gib",
        "kv",
        "prediction",
        "what_ifs",
        "recovered",
    }
    assert (
        record["memory_gib"]["activation_peak"] == 9.37
        and record["memory_gib"]["unaccounted"] == 0.0
    )
    assert record["kv"]["tokens"] == 5691 * 16 and record["kv"]["agrees"] is True
    fp8 = next(w for w in record["what_ifs"] if w["change"] == "--kv-cache-dtype fp8")
    assert fp8["kv_cache_tokens"] == 2 * 5693 * 16  # 11.12 GiB at 64 KiB per token, whole blocks
    assert record["prediction"]["engine"] == "vllm-v0"


def test_garbage_is_one_line_exit_2() -> None:
    process = subprocess.run(
        [sys.executable, "-m", "kvplan", "explain", "-"],
        input="nothing to see\n",
        capture_output=True,
        text=True,
    )
    assert process.returncode == 2
    assert process.stderr.count("\n") == 1 and "Traceback" not in process.stderr
    assert "GPU KV cache size" in process.stderr


def test_missing_file_is_exit_2() -> None:
    result = runner.invoke(app, ["explain", "/no/such/log.txt"])
    assert result.exit_code == 2


def test_dense_logs_imply_kvplans_bytes_per_token(shared_data: Path) -> None:
    """For dense full-attention models, KV memory / tokens equals kvplan's size within block
    rounding."""
    records = {
        r["id"]: r
        for r in map(
            json.loads,
            (shared_data / "serving" / "vllm_startup_logs.jsonl").read_text().splitlines(),
        )
    }
    for rid in DENSE:
        record = explain(records[rid]["quote"])
        assert record["kv"]["agrees"] is True, (rid, record["kv"])


def test_explain_names_what_it_cannot_size(shared_data: Path) -> None:
    records = {
        r["id"]: r
        for r in map(
            json.loads,
            (shared_data / "serving" / "vllm_startup_logs.jsonl").read_text().splitlines(),
        )
    }
    # rec015's real log with its model renamed to one no catalog, cache or hub holds
    quote = re.sub(r"Qwe\s*n2-7B-Instruct", "Unheard-Of-7B", records["rec015"]["quote"])
    record = explain(quote)
    assert (
        record["kv"]["kvplan_bytes_per_token"] is None
        and record["kv"]["implied_bytes_per_token_per_gpu"] > 0
    )


def test_every_shipped_log_explains(shared_data: Path) -> None:
    for line in (shared_data / "serving" / "vllm_startup_logs.jsonl").read_text().splitlines():
        record = explain(json.loads(line)["quote"])
        assert record["schema"] == "kvplan.explain/1"


def test_a_log_that_names_only_its_world_size_is_read_as_that_tp() -> None:
    """vLLM's parallel_state prints 'rank R in world size W is assigned as DP rank, PP rank,
    TP rank' on every rank; with no TP printed and no PP or DP, the world is the TP degree,
    said as read from the log rather than assumed, and the weights split over it."""
    ranks = "".join(
        f"INFO 01-13 11:35:20 [parallel_state.py:2350] rank {r} in world size 2 is assigned as "
        f"DP rank 0, PP rank 0, TP rank {r}, EP rank N/A\n"
        for r in range(2)
    )
    args = ["explain", "-", "--json", "--model", "llama-3.1-8b", "--gpu", "a100-40gb"]
    alone = json.loads(runner.invoke(app, args, input=FIXTURE.read_text()).stdout)
    result = runner.invoke(app, args, input=ranks + FIXTURE.read_text())
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["inputs"]["world_size"] == 2
    assert record["derived"] == {"tensor_parallel_size": "2, from 'world size 2'"}
    assert "tensor_parallel_size" not in record["assumed"]
    assert alone["assumed"]["tensor_parallel_size"] == 1
    # Llama-3.1-8B's 16-bit weights over two GPUs: half of the one-GPU figure, less the
    # replicated parts
    assert record["prediction"]["weights_gib"] < 0.6 * alone["prediction"]["weights_gib"]
    shown = runner.invoke(app, args[:2] + args[3:], input=ranks + FIXTURE.read_text())
    assert "2, from 'world size 2'" in shown.stdout


def test_a_name_the_user_gives_that_the_log_contradicts_is_a_warning_naming_both() -> None:
    """--model and --gpu fill in what a log does not show; where the log shows another one,
    the run sizes what the user named and says, in one line each, what the log said."""
    from kvplan.samples import sample_path

    text = "GPU 0: NVIDIA A100-SXM4-80GB\n" + sample_path("vllm-startup-log").read_text()
    args = ["explain", "-", "--model", "llama-3.1-8b", "--gpu", "h100"]
    result = runner.invoke(app, args, input=text)
    assert result.exit_code == 0, result.output
    assert (
        "warning: --model llama-3.1-8b (llama-3.1-8b) contradicts the log's model "
        "'Qwen2-7B-Instruct' (qwen2-7b-instruct); sizing llama-3.1-8b as given"
    ) in " ".join(result.stderr.split())
    assert "--gpu h100 (h100-80gb) contradicts the log's GPU 'NVIDIA A100-SXM4-80GB'" in (
        " ".join(result.stderr.split())
    )
    record = json.loads(runner.invoke(app, [*args, "--json"], input=text).stdout)
    assert len(record["warnings"]) == 2 and record["inputs"]["gpu_profile"] == "h100-80gb"
    agreeing = json.loads(
        runner.invoke(app, ["explain", "-", "--json", "--gpu", "a100-80gb"], input=text).stdout
    )
    assert agreeing["warnings"] == []


def test_a_log_of_two_servers_is_refused_and_disagreeing_kv_lines_are_warned() -> None:
    """Never averaged: a log whose KV lines disagree is explained with the first and says so;
    one holding both a vLLM and an SGLang server's KV figures is refused in one line."""
    from kvplan.samples import sample_path

    text = sample_path("vllm-startup-log").read_text()
    extra = "INFO 01-01 00:00:00 [kv_cache_utils.py:1] GPU KV cache size: 999,999 tokens\n"
    result = runner.invoke(app, ["explain", "-", "--json"], input=text + extra)
    assert result.exit_code == 0, result.output
    (warning,) = json.loads(result.stdout)["warnings"]
    assert warning == (
        "the log prints 2 different gpu_kv_cache_tokens (93,872, 999,999): two servers, or "
        "ranks that differ; explaining the first (93,872)"
    )
    sglang = "[2025-01-01 00:00:01] KV Cache is allocated. #tokens: 12345, K size: 1.0 GB\n"
    mixed = runner.invoke(app, ["explain", "-"], input=text + sglang)
    assert mixed.exit_code == 2
    (line,) = mixed.output.strip().splitlines()
    assert line.startswith("error: ") and "vLLM and an SGLang server" in line
