"""Every terminal table fits 80, 100 and 120 columns and cuts no name: no '…', no line
wider than the terminal, and every optimization, model, GPU and run name whole on a line
(kvplan.cli.fit_table lays each one out). Each case sets its own width."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kvplan.bench.caption import table_caption
from kvplan.bench.comparison import comparison
from kvplan.cli import plan_table, quality
from kvplan.cli.app import app
from kvplan.cli.bench_table import render_comparison
from kvplan.results import read_jsonl
from kvplan.samples import sample_path

WIDTHS = (80, 100, 120)
QUALITY_NAMES = (
    "fp32",
    "int8",
    "int4",
    "kivi-int4",
    "kivi-int2",
    "streaming",
    "streaming+fp8",
    "streaming-abspos",
    "h2o-holes",
    "snapkv",
    "entropy-budget",
    "paged-eviction",
)
BENCH_NAMES = ("contiguous-max", "contiguous-pow2", "contiguous-oracle", "paged", "prefix")
runner = CliRunner()


def _console(width: int) -> Console:
    return Console(width=width, file=io.StringIO(), color_system=None)


def _quality(width: int, _: Path) -> str:
    rows = [
        {
            "optimization": name,
            "kv_bytes_per_seq": 123_456.0,
            "kv_bytes_vs_base": 0.25,
            "max_concurrency": 12_345,
            "perplexity": 12.345,
            "perplexity_vs_base": 0.0123,
            "kl_mean": 0.01234,
            "greedy_agreement": 0.987,
            "served_perplexity": 12.3,
            "served_kl_mean": 0.0123,
        }
        for name in QUALITY_NAMES
    ]
    console = _console(width)
    quality.console = console  # the renderer prints to the CLI's console
    quality.render(rows, "stories260K (hf)", 349, 32)
    return console.file.getvalue()


def _plan(width: int, _: Path) -> str:
    def candidate(layout: str, gpu: str, verdict: str | None) -> dict:
        return {
            "gpu": gpu,
            "gpus": 5,
            "status": "ok" if verdict is None else "slo-miss",
            "verified": True,
            "layout": layout,
            "usd_per_hour": 8.0,
            "usd_per_million_output_tokens": 0.17,
            "predicted": {"tpot_s_p90": 0.0747, "ttft_s_p90": 0.626, "kv_cache_usage_mean": 0.47},
            "headroom_rps": 32.0,
            "headroom_upper_rps": 40.0,
            "verdict": verdict,
            "disaggregated": None,
            "replica_capacity_rps": 32.0,
            "replicas": 5,
        }

    data = {
        "model": "llama-3.1-70b",
        "rate_rps": 4.0,
        "workload": "sharegpt",
        "slo": "tpot_p90=200ms",
        "router": "least-loaded",
        "simulations": 16,
        "winner": 0,
        "candidates": [
            candidate("5x a100-80gb TP4 fp8", "a100-80gb", None),
            candidate(
                "2x h100-80gb TP4 fp8 prefill + 3x h100-80gb TP2 fp8 decode",
                "h100-80gb",
                "misses the SLO at every replica count: p90 TPOT 412 ms at 4 req/s",
            ),
        ],
    }
    console = _console(width)
    plan_table.console = console
    plan_table.render_plan(data, ["tpot_s_p90"])
    return console.file.getvalue()


def _cli(*args: str) -> Callable[[int, Path], str]:
    def run(width: int, folder: Path) -> str:
        filled = [str(folder / a[1:]) if a.startswith("@") else a for a in args]
        result = runner.invoke(app, filled, env={"COLUMNS": str(width)})
        assert result.exit_code == 0, result.output
        return result.output

    return run


LOG = str(sample_path("vllm-startup-log"))
BENCH_RESULT = sample_path("vllm-bench-result")
CASES: dict[str, tuple[Callable[[int, Path], str], tuple[str, ...]]] = {
    "quality": (_quality, QUALITY_NAMES),
    "plan": (_plan, ("a100-80gb", "h100-80gb", "llama-3.1-70b")),
    "estimate": (
        _cli("estimate", "llama-3.1-70b", "--gpu", "h100-80gb", "--tp", "2", "--batch", "16"),
        ("llama-3.1-70b", "320.00 GiB", "131,072"),
    ),
    "estimate sweep": (
        _cli("estimate", "gpt-oss-120b", "--sweep", "gpu=l4,h100-80gb,mi300x", "--sweep", "tp=1,2"),
        ("gpt-oss-120b", "l4", "h100-80gb", "mi300x"),
    ),
    "profiles models": (_cli("profiles", "models"), ("qwen3-coder-480b-a35b-instruct",)),
    "profiles gpus": (_cli("profiles", "gpus"), ("h100-80gb", "mi300x", "l4")),
    "profiles show": (
        _cli("profiles", "show", "llama-4-maverick"),
        ("llama-4-maverick", "meta-llama/Llama-4-Maverick-17B-128E-Instruct"),
    ),
    "explain": (_cli("explain", LOG), ("--tensor-parallel-size", "--kv-cache-dtype")),
    "calibrate": (
        _cli("calibrate", str(BENCH_RESULT), "--out", "@fit.toml"),
        (BENCH_RESULT.name, "output_throughput"),
    ),
}


def _whole(name: str, text: str) -> bool:
    """The name on one line, not as part of a longer name."""
    return re.search(rf"(?<![\w.+/-]){re.escape(name)}(?![\w.+/-])", text) is not None


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_table_fits_and_cuts_no_name(case: str, width: int, tmp_path: Path) -> None:
    render, names = CASES[case]
    text = render(width, tmp_path)
    assert "…" not in text
    too_wide = [line for line in text.splitlines() if len(line) > width]
    assert too_wide == []
    missing = [name for name in names if not _whole(name, text)]
    assert missing == []


@pytest.fixture(scope="module")
def bench_records(tmp_path_factory: pytest.TempPathFactory) -> list:
    out = tmp_path_factory.mktemp("bench") / "r.jsonl"
    args = ["bench", "--num-requests", "30", "--workload", "chat", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return read_jsonl(out)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_bench_table_fits_and_cuts_no_name(bench_records: list, width: int) -> None:
    console = _console(width)
    render_comparison(comparison(bench_records), console, table_caption(bench_records))
    text = console.file.getvalue()
    assert "…" not in text
    notes = set(comparison(bench_records).notes)  # said in full, for the terminal to wrap
    too_wide = [line for line in text.splitlines() if len(line) > width and line not in notes]
    assert too_wide == []
    assert [name for name in BENCH_NAMES if not _whole(name, text)] == []
