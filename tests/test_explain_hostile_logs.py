"""`kvplan explain` on logs no server printed: each figure a log claims keeps the rule of what
it is (kvplan/spec/log_claims.py over kvplan/spec/numbers.py), and a refusal is one line that
names the log, the line and the figure, quotes the line, exits 2 and changes no file. The
names a user types (--model, --gpu) must resolve; a log's own unknown name need not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hardening_helpers import fails_cleanly, invoke

import kvplan.spec.log_file as log_file

FIXTURE = Path(__file__).parent / "data" / "vllm_issue_12330.log"  # vLLM 0.6.6 (V0), A100-40GB
V0 = FIXTURE.read_text()
# A vLLM V1 log as kv_cache_utils.py and gpu_worker.py print it (vllm issue #20047's figures).
V1 = (
    "INFO 06-23 14:21:48 [gpu_worker.py:232] Available KV cache memory: 51.63 GiB\n"
    "INFO 06-23 14:21:48 [kv_cache_utils.py:716] GPU KV cache size: 410,128 tokens\n"
    "INFO 06-23 14:21:48 [kv_cache_utils.py:720] Maximum concurrency for 8,192 tokens per "
    "request: 50.06x\n"
)
ARGS = (
    "INFO 06-23 14:21:40 [utils.py:326] non-default args: {'model': "
    "'meta-llama/Llama-3.1-8B-Instruct', 'max_model_len': 8192, 'tensor_parallel_size': 1, "
    "'block_size': 16, 'gpu_memory_utilization': 0.9}\n"
)


def _swap(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


# (log text, what the one error line must hold: the log's line number, the figure, a quote)
CASES = {
    "negative blocks": (
        _swap(V0, "# GPU blocks: 5691", "# GPU blocks: -5691"),
        ["line 5", "num_gpu_blocks -5691", "# GPU blocks: -5691"],
    ),
    "negative weights": (
        _swap(V0, "took 14.9595 GB", "took -14.9595 GB"),
        ["line 1", "weights_gib -14.9595", "weights took -14.9595 GB"],
    ),
    "utilization 7.0": (
        _swap(V0, "(0.90)", "(7.0)"),
        ["line 3", "gpu_memory_utilization 7.0", "> 0 and <= 1", "gpu_memory_utilization (7.0)"],
    ),
    "utilization 0": (
        _swap(V0, "(0.90)", "(0)"),
        ["gpu_memory_utilization 0", "gpu_memory_utilization (0)"],
    ),
    "KV memory 1e30 GiB": (
        _swap(V0, "KV Cache is 11.12GiB", "KV Cache is 1e30GiB"),
        ["line 4", "available_kv_gib 1e30", "KV Cache is 1e30GiB"],
    ),
    "KV memory beyond the logged total": (
        _swap(V0, "KV Cache is 11.12GiB", "KV Cache is 500GiB"),
        ["available_kv_gib 500", "39.5 GiB", "KV Cache is 500GiB"],
    ),
    "a 400-digit block count": (
        _swap(V0, "# GPU blocks: 5691", "# GPU blocks: " + "9" * 400),
        ["line 5", "num_gpu_blocks 999999999999… (400 characters)", "# GPU blocks: 9999"],
    ),
    "nan activation": (
        _swap(V0, "memory takes 9.37GiB", "memory takes nanGiB"),
        ["peak_activation_gib nan", "memory takes nanGiB"],
    ),
    "negative tokens": (
        _swap(V1, "410,128 tokens", "-410,128 tokens"),
        ["line 2", "gpu_kv_cache_tokens -410,128", "GPU KV cache size: -410,128 tokens"],
    ),
    "tokens beyond TOKENS_MAX": (
        _swap(V1, "410,128 tokens", "99,999,999,999 tokens"),
        ["gpu_kv_cache_tokens 99,999,999,999", "<= 1,073,741,824"],
    ),
    "negative concurrency": (
        _swap(V1, "50.06x", "-50.06x"),
        ["line 3", "max_concurrency -50.06", "per request: -50.06x"],
    ),
    "fractional length": (
        _swap(V1, "8,192 tokens per", "8.5 tokens per"),
        ["max_concurrency_tokens 8.5", "a whole number"],
    ),
    "negative KV beside a token count": (
        _swap(V1, "51.63 GiB", "-5.00 GiB"),
        ["line 1", "available_kv_gib -5.00", "line 2 reports gpu_kv_cache_tokens 410,128"],
    ),
    "tp 0 in the engine's arguments": (
        _swap(ARGS, "'tensor_parallel_size': 1", "'tensor_parallel_size': 0") + V1,
        ["line 1", "tensor_parallel_size 0", "non-default args"],
    ),
    "block size 0 in the engine's arguments": (
        _swap(ARGS, "'block_size': 16", "'block_size': 0") + V1,
        ["block_size 0", ">= 1 and <= 65,536"],
    ),
    "a long list for a length": (
        _swap(ARGS, "'max_model_len': 8192", f"'max_model_len': {list(range(100))}") + V1,
        ["max_model_len [0, 1, 2, 3,… (390 characters)"],  # the list's whole length
    ),
    "a word for a length": (
        _swap(ARGS, "'max_model_len': 8192", "'max_model_len': 'long'") + V1,
        ["max_model_len long", "a whole number"],
    ),
    "a 400-digit length": (
        _swap(ARGS, "'max_model_len': 8192", "'max_model_len': " + "9" * 400) + V1,
        ["max_model_len a 400-digit number"],
    ),
    "True for a length": (
        _swap(ARGS, "'max_model_len': 8192", "'max_model_len': True") + V1,
        ["max_model_len True"],
    ),
    "a number for the model": (
        _swap(ARGS, "'meta-llama/Llama-3.1-8B-Instruct'", "5") + V1,
        ["model 5", "must be text"],
    ),
    "tp 0 on the command line": (
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 0\n" + V1,
        ["line 1", "tensor_parallel_size 0", "--tensor-parallel-size 0"],
    ),
    "utilization 1.5 on the command line": (
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --gpu-memory-utilization 1.5\n" + V1,
        ["gpu_memory_utilization 1.5", "--gpu-memory-utilization 1.5"],
    ),
    "a control character in the quoted line": (
        _swap(V1, "14:21:48 [kv_cache_utils.py:716] GPU", "14:21:48\x1b[31m GPU").replace(
            "410,128 tokens", "-410,128 tokens"
        ),
        ["gpu_kv_cache_tokens -410,128", "14:21:48?[31m GPU KV cache size"],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_log_claiming_what_no_server_prints_is_refused(tmp_path: Path, name: str) -> None:
    text, culprits = CASES[name]
    log = tmp_path / "server.log"
    log.write_text(text)
    line = fails_cleanly(["explain", log, "--model", "llama-3.1-8b"], tmp_path, *culprits)
    assert line.startswith(f"error: log '{log}' line ") and "Traceback" not in line


def test_a_long_line_is_quoted_shortened_around_its_figure(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(("x" * 500) + " GPU KV cache size: -7 tokens " + ("y" * 500) + "\n")
    line = fails_cleanly(["explain", log], tmp_path, "gpu_kv_cache_tokens -7")
    quoted = line.split('("', 1)[1].split('")', 1)[0]
    assert quoted.startswith("…") and quoted.endswith("…") and "size: -7 tokens" in quoted
    assert len(quoted) == 100 + 2  # QUOTE_CHARS and the two marks


def test_memory_beyond_the_named_gpu_is_refused(tmp_path: Path) -> None:
    """No total in the log: the GPU the user names bounds it. 14.96 + 9.37 + 0.10 + 11.12 GiB
    were printed, 35.55 GiB, more than a 16 GB T4 holds."""
    log = tmp_path / "server.log"
    log.write_text("".join(line for line in V0.splitlines(True) if "total_gpu_memory" not in line))
    fails_cleanly(
        ["explain", log, "--gpu", "t4", "--model", "llama-3.1-8b"],
        tmp_path,
        "(35.55 GiB)",
        "available_kv_gib 11.12",
        "pass the GPU the server ran on with --gpu",
    )


@pytest.mark.parametrize(
    ("option", "name", "culprit"),
    [
        ("--model", "no-such-model-xyz", "unknown model 'no-such-model-xyz'"),
        ("--gpu", "zz9", "unknown GPU 'zz9'"),
    ],
)
def test_an_unknown_typed_name_is_the_resolvers_error(
    tmp_path: Path, option: str, name: str, culprit: str
) -> None:
    log = tmp_path / "server.log"
    log.write_text(V0)
    fails_cleanly(["explain", log, option, name], tmp_path, culprit)


def test_a_file_above_the_cap_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_file, "MAX_LOG_BYTES", 1024)
    log = tmp_path / "big.log"
    log.write_text(V0 + "x" * 1024)
    fails_cleanly(["explain", log], tmp_path, f"log '{log}' is larger than", "head -n 5000")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_dev_zero_is_refused(tmp_path: Path) -> None:
    fails_cleanly(["explain", "/dev/zero"], tmp_path, "log '/dev/zero' is larger than 4 MiB")


@pytest.mark.parametrize("path", ["folder", "missing.log"])
def test_an_unreadable_path_names_itself(tmp_path: Path, path: str) -> None:
    (tmp_path / "folder").mkdir()
    fails_cleanly(["explain", tmp_path / path], tmp_path, f"cannot read log '{tmp_path / path}'")


def test_the_longest_request_what_if_stops_at_the_models_maximum(tmp_path: Path) -> None:
    """410,128 tokens fit, more than Llama-3.1-8B's 131,072: vLLM refuses a longer
    --max-model-len, so the what-if offers 131,072, 410,128 / 131,072 = 3.13 requests."""
    log = tmp_path / "server.log"
    log.write_text(V1)
    result = invoke(["explain", log, "--model", "llama-3.1-8b", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["change"]: row for row in json.loads(result.stdout)["what_ifs"]}
    longest = rows["--max-model-len 131072"]
    assert (longest["kv_cache_tokens"], longest["max_concurrency"]) == (410_128, 3.13)
    assert longest["note"].startswith("the model's maximum")
    assert not any("410128" in change for change in rows)


def test_a_server_at_the_models_maximum_gets_no_length_what_if(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(
        _swap(V1, "8,192 tokens per request: 50.06x", "131,072 tokens per request: 3.13x")
    )
    result = invoke(["explain", log, "--model", "llama-3.1-8b", "--json"])
    assert result.exit_code == 0, result.output
    changes = [row["change"] for row in json.loads(result.stdout)["what_ifs"]]
    assert changes == ["--kv-cache-dtype fp8"]


def test_a_negative_kv_budget_is_a_real_failure_explained(tmp_path: Path) -> None:
    """vLLM prints a negative KV budget when the weights leave no room, then stops: a real log,
    explained; the what-ifs that keep KV memory fixed (fp8, a shorter length) are left out."""
    log = tmp_path / "server.log"
    log.write_text(_swap(V0, "KV Cache is 11.12GiB", "KV Cache is -1.05GiB").replace("5691", "0"))
    result = invoke(["explain", log, "--model", "llama-3.1-8b", "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["memory_gib"]["kv"] == -1.05
    assert record["kv"]["note"].startswith("no memory was left for the KV cache (-1.05 GiB)")
    changes = [row["change"] for row in record["what_ifs"]]
    assert changes == ["--gpu-memory-utilization 0.95", "--tensor-parallel-size 2"]
