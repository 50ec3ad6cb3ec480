"""`kvplan estimate` and `kvplan profiles` end to end through the CLI."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.cli.app import app

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


def test_default_estimate_prints_tables_and_verdict() -> None:
    result = run("estimate", "llama-3.1-70b")
    assert result.exit_code == 0, result.output
    assert "327,680 B" in result.output
    assert (
        "2,621,440 B" in result.output and "8.0x" in result.output
    )  # naive formula beside the correct one
    assert "DOES NOT FIT" in result.output


def test_issue_example_json_is_stable() -> None:
    result = run(
        "estimate",
        "llama-3.1-70b",
        "--gpu",
        "h100-80gb",
        "--tp",
        "2",
        "--kv-dtype",
        "fp8",
        "--context",
        "32768",
        "--batch",
        "16",
        "--json",
    )
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["schema"] == "kvplan.estimate/1"
    assert record["kv_bytes_per_token"] == 163_840
    assert record["kv_bytes_per_token_per_gpu"] == 81_920
    assert record["verdict"] == "kv-does-not-fit"
    assert record["suggestions"]


def test_local_config_path_and_model_dir(tmp_path: Path) -> None:
    config = {
        "model_type": "llama",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "intermediate_size": 14336,
        "max_position_embeddings": 8192,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    for target in (tmp_path / "config.json", tmp_path):
        result = run("estimate", str(target), "--gpu", "h200", "--json")
        assert result.exit_code == 0, result.output
        record = json.loads(result.stdout)
        assert record["kv_bytes_per_token"] == 131_072 and record["verdict"] == "fits"


def test_sweep_writes_csv(tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    result = run(
        "estimate",
        "deepseek-v3",
        "--sweep",
        "context=1k..128k",
        "--sweep",
        "kv-dtype=fp16,fp8,int4",
        "--csv",
        str(out),
        "--tp",
        "8",
        "--gpu",
        "h200",
    )
    assert result.exit_code == 0, result.output
    with out.open() as handle:
        table = list(csv.DictReader(handle))
    assert len(table) == 24
    assert {r["kv_dtype"] for r in table} == {"fp16", "fp8-e4m3", "int4"}
    first = table[0]
    assert int(first["context"]) == 1024 and float(first["kv_bytes_per_token"]) == 70_272


@pytest.mark.parametrize("width", [80, 120])
def test_sweep_table_cuts_nothing_and_titles_the_shared_settings(width: int) -> None:
    """The README's sweep at 80 columns showed 'dee…', '1,0…', '68.…'."""
    result = runner.invoke(
        app,
        [
            "estimate",
            "deepseek-v3",
            "--tp",
            "8",
            "--gpu",
            "h200",
            "--sweep",
            "context=1k..128k",
            "--sweep",
            "kv-dtype=fp16,fp8,int4",
        ],
        env={"COLUMNS": str(width)},
    )
    assert result.exit_code == 0, result.output
    text = result.output
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    assert "model deepseek-v3, gpu h200, tp 8, batch 1: 24 configurations" in text
    rows = [line for line in text.splitlines() if "fp8-e4m3" in line]
    assert (
        len(rows) == 8 and "131,072" in rows[-1] and "4.29 GiB" in rows[-1] and "11.39x" in rows[-1]
    )
    # settings that vary stay columns; a narrow terminal folds long cells instead of cutting them
    narrow = runner.invoke(
        app,
        [
            "estimate",
            "llama-3.1-8b",
            "--sweep",
            "gpu=h100,l4",
            "--sweep",
            "model=llama-3.1-8b,qwen3-32b",
        ],
        env={"COLUMNS": "60"},
    ).output
    assert (
        "…" not in narrow and "0.30x" in narrow and "463,0" in narrow
    )  # 463,056 folded over two lines


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["estimate", "llama-3.1-7b"], "did you mean"),
        (["estimate", "llama-3.1-8b", "--gpu", "h900"], "unknown GPU"),
        (["estimate", "llama-3.1-8b", "--batch", "-3"], "--batch"),
        (["estimate", "llama-3.1-8b", "--tp", "3"], "must divide"),
        (["estimate", "llama-3.1-8b", "--kv-dtype", "fp6"], "unknown KV dtype"),
        (["estimate", "llama-3.1-8b", "--sweep", "context=8k..1k"], "backwards"),
        (["estimate", "./missing/config.json"], "no config.json"),
        (["estimate", "llama-3.1-8b", "--context", "99999999999"], "--context"),
        (
            ["estimate", "llama-3.1-405b", "--gpu", "l4", "--gpu-mem-gib", "8"],
            "cannot fit on l4 at any TP",
        ),
        (["profiles", "show", "nothing-like-this"], "unknown model"),
    ],
)
def test_bad_input_is_one_line_exit_2(args: list[str], message: str) -> None:
    result = run(*args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_malformed_config_leaves_no_csv(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{"hidden_size": 64, ')
    out = tmp_path / "out.csv"
    result = run("estimate", str(bad), "--csv", str(out))
    assert result.exit_code == 2 and "malformed config" in result.stderr
    assert not out.exists()


def test_profiles_commands() -> None:
    models = run("profiles", "models", "--json")
    assert models.exit_code == 0
    assert {"llama-3.1-70b", "deepseek-v3"} <= {m["name"] for m in json.loads(models.stdout)}
    gpus = json.loads(run("profiles", "gpus", "--json").stdout)
    assert len(gpus) >= 8 and all(g["source"] for g in gpus)
    shown = json.loads(run("profiles", "show", "mixtral-8x7b", "--json").stdout)
    assert shown["published_params_b"] == 46.7
    assert json.loads(run("profiles", "show", "h200", "--json").stdout)["hbm_tbps"] == 4.8


def test_console_script_exit_code_is_2_without_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kvplan", "estimate", "nope-model"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: unknown model 'nope-model'")
    assert "Traceback" not in proc.stderr


def test_estimate_names_the_engine_it_models() -> None:
    result = run(
        "estimate", "llama-3.1-8b", "--gpu", "a100-40gb", "--context", "8192", "--engine", "vllm-v0"
    )
    assert result.exit_code == 0, result.output
    assert "memory model: vLLM V0" in result.output and "activation peak" in result.output
    record = json.loads(run("estimate", "llama-3.1-8b", "--json").stdout)
    assert record["engine"] == "vllm-v1"
    old = run(
        "estimate",
        "llama-3.1-8b",
        "--gpu",
        "a100-40gb",
        "--engine",
        "vllm",
        "--engine-version",
        "0.7.3",
    )
    assert (
        old.exit_code == 0 and "memory model: vLLM V0" in old.output
    )  # V1 became the default in 0.8
    bad = run("estimate", "llama-3.1-8b", "--engine", "tgi")
    assert bad.exit_code == 2 and "--engine must be vllm or sglang" in bad.output


# The estimate defects a new user met.
def test_kv_budget_sizes_both_and_largest_context_stops_at_the_model_maximum() -> None:
    result = run("estimate", "llama-3.1-8b", "--context", "32768", "--kv-budget", "2048", "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    # 32 layers x 8 KV heads x 128 x 2 x 2 B = 131,072 B/token; 32,768 tokens = 4 GiB, 2,048 kept =
    # 256 MiB
    assert record["seq_kv_bytes_without_budget"] == 32768 * 131072
    assert record["seq_kv_bytes_full"] == 2048 * 131072
    assert record["max_batch_at_context"] == record["kv_budget_bytes_per_gpu"] // (2048 * 131072)
    assert (
        record["max_context_at_batch"] == 131072
    )  # the model's max_position_embeddings, not 2**40
    text = run("estimate", "llama-3.1-8b", "--context", "32768", "--kv-budget", "2048").output
    assert "1,099,511,627,776" not in text and "4.00 GiB" in text and "256.00 MiB" in text


def test_largest_context_never_exceeds_the_model_maximum() -> None:
    record = json.loads(
        run("estimate", "llama-3.1-8b", "--context", "1024", "--gpu", "h200", "--json").stdout
    )
    assert record["max_context_at_batch"] == 131072


def test_context_accepts_the_suffixes_sweeps_accept() -> None:
    short = json.loads(
        run("estimate", "llama-3.1-8b", "--context", "32k", "--kv-budget", "2k", "--json").stdout
    )
    assert short["context"] == 32768 and short["kv_budget"] == 2048
    bad = run("estimate", "llama-3.1-8b", "--context", "32q")
    assert bad.exit_code == 2 and "--context" in bad.output and "32k" in bad.output


def test_json_byte_fields_are_whole_numbers() -> None:
    record = json.loads(run("estimate", "llama-3.1-70b", "--tp", "2", "--json").stdout)
    for key, value in record.items():
        if "bytes" in key:
            assert isinstance(value, int), (key, value)


def test_gpt_oss_weights_are_labelled_as_sized() -> None:
    record = json.loads(run("estimate", "gpt-oss-120b", "--json").stdout)
    assert record["weight_dtype"] == "mxfp4-experts+bf16"
    assert "mxfp4-experts+bf16" in run("estimate", "gpt-oss-120b").output


@pytest.mark.parametrize("width", [80, 100, 120])
def test_profiles_table_keeps_every_figure_whole(width: int) -> None:
    """At 80 columns neither a name nor a figure may break: every profile's name, parameter count
    and KV per token sit whole on its own line."""
    from kvplan.spec.profiles import model_profiles

    result = runner.invoke(app, ["profiles", "models"], env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    assert (
        "…" not in result.output and max(len(line) for line in result.output.splitlines()) <= width
    )
    lines = result.output.splitlines()
    for name in model_profiles():
        assert any(line.split() and line.split()[0] == name for line in lines), name
    assert any(
        line.split()[:1] == ["llama-3.1-405b"]
        and "406B" in line
        and "504.0" in line
        and "128k" in line
        for line in lines
    )  # 516,096 B/token = 504.0 KiB; 131,072 tokens = 128k
