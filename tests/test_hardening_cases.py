"""One hand-made case per reported symptom: every command fails with one line
naming the culprit, exit 2, no traceback, and no existing file changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hardening_helpers import QUICK, assert_clean_failure, digests, fails_cleanly, invoke

from kvplan.spec.profiles import model_profiles

LLAMA = model_profiles()["llama-3.1-8b"].path


def _config(ws: Path, **fields: Any) -> Path:
    config = json.loads(LLAMA.read_text())
    config.update(fields)
    path = ws / "cfg.json"
    path.write_text(json.dumps(config, allow_nan=True))
    return path


# --- configs: type, finite, range, consistency -------------------------------------------


@pytest.mark.parametrize(
    ("fields", "culprit"),
    [
        ({"num_hidden_layers": float("inf")}, "'num_hidden_layers'"),
        ({"head_dim": 1e30}, "'head_dim'"),
        ({"head_dim": [128]}, "'head_dim'"),
        ({"num_key_value_heads": "8"}, "'num_key_value_heads'"),
        ({"kv_lora_rank": [512]}, "'kv_lora_rank'"),
        ({"quantization_config": "fp8"}, "'quantization_config'"),
        ({"quantization_config": {"quant_method": 8}}, "'quantization_config.quant_method'"),
        ({"layer_types": [["full_attention"]] * 32}, "'layer_types'"),
        ({"intermediate_size": -5}, "'intermediate_size'"),
        ({"num_local_experts": 8, "num_experts_per_tok": 9}, "'num_experts_per_tok' = 9 exceeds"),
        ({"num_key_value_heads": 0}, "'num_key_value_heads' = 0"),
        ({"num_key_value_heads": 5}, "must divide"),
        ({"tie_word_embeddings": "no"}, "'tie_word_embeddings'"),
        ({"tie_word_embeddings": 1}, "'tie_word_embeddings'"),
        ({"head_dim": 127.5}, "'head_dim' = 127.5"),
        ({"max_position_embeddings": 1.5}, "'max_position_embeddings'"),
        ({"max_position_embeddings": -5}, "'max_position_embeddings' = -5"),
        ({"num_attention_heads": True}, "'num_attention_heads'"),
        ({"sliding_window": "4k"}, "'sliding_window'"),
        ({"num_attention_heads": 8192, "num_key_value_heads": 8}, "head dimension"),
    ],
)
def test_bad_config_fields_are_named(ws: Path, fields: dict[str, Any], culprit: str) -> None:
    path = _config(ws, **fields)
    fails_cleanly(["estimate", path, "--out", ws / "keep.jsonl"], ws, culprit, "cfg.json")


def test_deeply_nested_config_is_one_line(ws: Path) -> None:
    (ws / "deep.json").write_text('{"a":' * 50_000 + "1" + "}" * 50_000)
    fails_cleanly(["estimate", ws / "deep.json"], ws, "nested too deeply")


# --- numbers: the same rules for flags and sweep axes -------------------------------------


@pytest.mark.parametrize(
    ("args", "culprit"),
    [
        (["--kv-cache-gib", "inf"], "--kv-cache-gib"),
        (["--reserve-gib", "1e300"], "--reserve-gib"),
        (["--gpu-mem-gib", "inf"], "--gpu-mem-gib"),
        (["--params-b", "inf"], "--params-b"),
        (["--gpu-memory-utilization", "nan"], "--gpu-memory-utilization"),
        (["--block-size", "100000000000000000"], "--block-size"),
        (["--kv-dtype", "int4-g3"], "int4-g3"),
        (["--sweep", "context=inf"], "--sweep context"),
        (["--sweep", "batch=1e15"], "--sweep batch"),
        (["--sweep", "batch=2.5"], "--sweep batch"),
        (["--sweep", "gpu-memory-utilization=nan"], "--sweep gpu-memory-utilization"),
        (["--sweep", "gpu-memory-utilization=inf"], "--sweep gpu-memory-utilization"),
        (["--sweep", "gpu-memory-utilization=1.5"], "--sweep gpu-memory-utilization"),
        (["--sweep", "context=1..1000000:1", "--sweep", "batch=1..1000:1"], "points"),
        (["--sweep", "context=1..100000000:1"], "--sweep context"),
    ],
)
def test_estimate_numbers(ws: Path, args: list[str], culprit: str) -> None:
    fails_cleanly(
        ["estimate", "llama-3.1-8b", *args, "--out", ws / "keep.jsonl", "--csv", ws / "keep.csv"],
        ws,
        culprit,
    )


@pytest.mark.parametrize(
    ("args", "culprit"),
    [
        (["--swap-space-gib", "inf", "--preemption", "swap"], "--swap-space-gib"),
        (["--rate", "nan"], "--rate"),
        (["--block-size", "100000000000000000"], "--block-size"),
        (["--kv-dtype", "int4-g3"], "int4-g3"),
        (["--optimizations", ","], "--optimizations"),
        (["--optimizations", ""], "--optimizations"),
        (["--workload-param", "doc_len=nan"], "--workload-param"),
        (["--w-hit", "inf"], "--w-hit"),
    ],
)
def test_bench_numbers_leave_out_untouched(ws: Path, args: list[str], culprit: str) -> None:
    fails_cleanly(["bench", *QUICK, *args, "--out", ws / "keep.jsonl"], ws, culprit)


# --- rich markup in user text ---------------------------------------------------------------


def test_markup_in_model_name_and_path_is_printed_verbatim(ws: Path) -> None:
    fails_cleanly(["estimate", "m[/]odel"], ws, "'m[/]odel'")
    fails_cleanly(["report", ws / "a[/]b" / "r.jsonl"], ws, "a[/]b")
    fails_cleanly(
        ["bench", "--optimizations", "pag[/]ed", "--out", ws / "keep.jsonl"], ws, "'pag[/]ed'"
    )


def test_markup_in_a_run_name_survives_the_report(ws: Path, bench_record: dict[str, Any]) -> None:
    record = {
        **bench_record,
        "optimization": "pag[/]ed",
        "metrics": {**bench_record["metrics"], "kv_cache_usage_mean": 0.99},
    }
    (ws / "runs.jsonl").write_text(json.dumps(record) + "\n")
    result = invoke(["report", ws / "runs.jsonl", "--out", ws / "rep[/]x"])
    assert result.exit_code == 0, result.output
    # the alert names the run by its optimization; both user texts reach the terminal as typed
    assert "pag[/]ed" in result.output and "rep[/]x" in result.output


def test_help_keeps_square_brackets() -> None:
    import os

    os.environ["COLUMNS"] = "300"
    try:
        assert "[fixed], [axes], optional [slo] and [prices]" in invoke(["sweep", "--help"]).output
        assert "fp8[-e4m3|-e5m2]" in invoke(["estimate", "--help"]).output
    finally:
        del os.environ["COLUMNS"]


def test_sweep_file_error_keeps_brackets(ws: Path) -> None:
    fails_cleanly(["sweep", ws / "missing.toml", "--out", ws / "sw"], ws, "[fixed] and [axes]")


# --- report on records with the right schema but wrong shapes -------------------------------


@pytest.mark.parametrize(
    ("field", "value", "culprit"),
    [
        ("params", "x", "'params'"),
        ("metrics", {}, "'metrics' is empty"),
        ("metrics", "x", "'metrics'"),
        ("metrics", {"output_tokens_per_s": "fast"}, "'output_tokens_per_s'"),
        ("run_id", {"a": 1}, "'run_id'"),
    ],
)
def test_report_names_file_line_and_field(
    ws: Path, bench_record: dict[str, Any], field: str, value: Any, culprit: str
) -> None:
    (ws / "bad.jsonl").write_text(
        json.dumps(bench_record) + "\n" + json.dumps({**bench_record, field: value}) + "\n"
    )
    fails_cleanly(["report", ws / "bad.jsonl", "--out", ws / "rep"], ws, "bad.jsonl:2", culprit)


def test_report_on_non_utf8_names_the_line(ws: Path) -> None:
    (ws / "bin.jsonl").write_bytes(b"\n\xff\xfe\n")
    fails_cleanly(["report", ws / "bin.jsonl", "--out", ws / "rep"], ws, "bin.jsonl:2")


# --- outputs are replaced only by complete, successful work ---------------------------------


def test_bench_report_folder_that_is_a_file_keeps_the_results(ws: Path) -> None:
    (ws / "keep").write_text("a file where the report folder would go")
    fails_cleanly(
        ["bench", *QUICK, "--optimizations", "paged", "--out", ws / "keep.jsonl", "--report"],
        ws,
        "'" + str(ws / "keep") + "'",
        "exists as a file",
    )


def test_report_refuses_a_folder_with_other_files(ws: Path) -> None:
    (ws / "rep").mkdir()
    (ws / "rep" / "notes.txt").write_text("mine")
    fails_cleanly(
        ["report", ws / "keep.jsonl", "--out", ws / "rep"], ws, "notes.txt", "new or empty --out"
    )


def test_output_path_errors_name_the_users_path(ws: Path) -> None:
    (ws / "adir").mkdir()
    line = fails_cleanly(["estimate", "llama-3.1-8b", "--out", ws / "adir"], ws, str(ws / "adir"))
    assert ".tmp" not in line


def test_report_is_swapped_in_whole(ws: Path, bench_record: dict[str, Any]) -> None:
    first = invoke(["report", ws / "keep.jsonl", "--out", ws / "rep"])
    assert first.exit_code == 0, first.output
    second_results = ws / "two.jsonl"
    second_results.write_text(json.dumps({**bench_record, "run_id": "second"}) + "\n")
    assert invoke(["report", second_results, "--out", ws / "rep"]).exit_code == 0
    assert "second" in (ws / "rep" / "runs.csv").read_text()
    assert not [p for p in ws.iterdir() if p.name.startswith(".")]  # no staging folder left


def test_no_nan_or_infinity_is_ever_written(tmp_path: Path) -> None:
    from kvplan.results import make_record, write_jsonl

    record = make_record(
        "bench",
        "r",
        "simulated",
        "paged",
        {"w_hit": float("nan")},
        {"x": float("inf")},
        {"t": [float("inf")]},
    )
    write_jsonl(tmp_path / "r.jsonl", [record])
    text = (tmp_path / "r.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text
    written = json.loads(text)
    assert (written["params"], written["metrics"], written["timeseries"]) == (
        {"w_hit": None},
        {"x": None},
        {"t": [None]},
    )


def test_a_failed_write_leaves_no_temp_file_and_keeps_the_old_one(tmp_path: Path) -> None:
    from kvplan.results import make_record, write_jsonl

    target = tmp_path / "r.jsonl"
    target.write_text("old\n")

    def records():  # the writer fails half-way, as a Ctrl-C or SIGTERM would
        yield make_record("bench", "r", "simulated", "paged", {}, {})
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_jsonl(target, records())  # type: ignore[arg-type]
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["r.jsonl"]


def test_a_later_failure_gives_earlier_outputs_their_old_content(tmp_path: Path) -> None:
    from kvplan.results.atomic import restore_on_failure, write_text

    first, second = tmp_path / "a.jsonl", tmp_path / "b.csv"
    first.write_text("old a\n")
    with pytest.raises(ValueError), restore_on_failure(first, second):
        write_text(first, "new a\n")
        write_text(second, "new b\n")
        raise ValueError("the report failed")
    assert first.read_text() == "old a\n" and [p.name for p in tmp_path.iterdir()] == ["a.jsonl"]


def test_real_mode_refuses_a_model_larger_than_memory(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    import kvplan.real.footprint as footprint

    monkeypatch.setattr(footprint, "available_bytes", lambda: 4 * 2**30)
    fails_cleanly(
        [
            "bench",
            "--mode",
            "real",
            "--device",
            "cpu",
            "--optimizations",
            "paged",
            "--out",
            ws / "keep.jsonl",
        ],
        ws,
        "GiB of weights",
        "--layers 2",
    )


def test_real_mode_footprint_counts_kept_layers() -> None:
    from kvplan.real.footprint import model_footprint
    from kvplan.spec.resolve import load_model

    spec = load_model("llama-3.1-8b")
    full = model_footprint(spec, None, "fp32").weight_bytes
    assert full == pytest.approx(spec.params.total * 4)
    two = model_footprint(spec, 2, "bf16").weight_bytes
    embeddings = spec.params.embedding + spec.params.lm_head
    assert two == pytest.approx((embeddings + (spec.params.total - embeddings) * 2 / 32) * 2)


def test_interrupt_is_one_line_and_keeps_results(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kvplan.sizing.capacity_sweep as capacity_sweep
    from kvplan.cli.interrupts import Terminated

    def stop(*_: Any, **__: Any) -> None:
        raise Terminated("signal 15")

    monkeypatch.setattr(capacity_sweep, "sweep", stop)
    before = digests(ws)
    result = invoke(["estimate", "llama-3.1-8b", "--out", ws / "keep.jsonl"])
    assert result.exit_code == 143 and result.stderr.count("\n") == 1 and "SIGTERM" in result.stderr
    assert digests(ws) == before


def test_shared_dir_untouched_copy(tmp_path: Path) -> None:
    """The helper itself fails when a command changes a file (the contract can fail)."""
    (tmp_path / "f").write_text("x")
    with pytest.raises(AssertionError):
        fails_cleanly(["estimate", "llama-3.1-8b", "--out", tmp_path / "f"], tmp_path)
    shutil.rmtree(tmp_path)


def test_one_line_contract_rejects_tracebacks() -> None:
    result = invoke(["estimate", "llama-3.1-8b"])
    with pytest.raises(AssertionError):
        assert_clean_failure(result)
