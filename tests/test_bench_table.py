"""The bench table shows each feature's rows and fits the terminal, names whole."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kvplan.bench.comparison import comparison, summarize_reasons
from kvplan.cli.app import app
from kvplan.cli.bench_table import render_comparison
from kvplan.results import read_jsonl

runner = CliRunner()


def _run(tmp_path: Path, *args: str) -> list:
    out = tmp_path / "r.jsonl"
    result = runner.invoke(
        app, ["bench", "--num-requests", "120", "--rate", "4", *args, "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    return read_jsonl(out)


def _text(records: list, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None)
    render_comparison(comparison(records), console)
    return console.file.getvalue()


@pytest.fixture(scope="module")
def default_records(tmp_path_factory: pytest.TempPathFactory) -> list:
    return _run(tmp_path_factory.mktemp("t"), "--workload", "chat")


@pytest.mark.parametrize("width", [80, 120])
def test_table_fits_the_width_and_never_cuts_a_name(default_records: list, width: int) -> None:
    text = _text(default_records, width)
    assert "…" not in text
    # the notes under the table are printed whole, one line each, for the terminal to wrap
    notes = set(comparison(default_records).notes)
    assert max(len(line) for line in text.splitlines() if line not in notes) <= width
    for name in ("contiguous-max", "contiguous-pow2", "contiguous-oracle", "paged", "prefix"):
        assert name in text


def test_prefix_rows_and_a_pool_split_that_adds_to_one(default_records: list) -> None:
    view = comparison(default_records)
    labels = {row.label for row in view.rows}
    assert {
        "prefix hit rate",
        "infinite-cache bound",
        "prefill tokens saved",
        "cached blocks evicted",
        "cached (prefix)",
        "throughput vs base",
    } <= labels
    prefix = default_records[-1].metrics
    split = (
        "token_states_share",
        "reservation_share",
        "internal_fragmentation_share",
        "external_fragmentation_share",
        "cached_share",
        "free_share",
    )
    assert sum(prefix[key] for key in split) == pytest.approx(1.0, abs=2e-3)
    assert prefix["prefix_hit_rate"] > 0  # the chat workload shares prefixes


def test_pods_show_per_pod_rows_and_the_cluster_title(tmp_path: Path) -> None:
    records = _run(
        tmp_path,
        "--workload",
        "chat",
        "--pods",
        "2",
        "--router",
        "round-robin,sticky",
        "--optimizations",
        "prefix",
    )
    view = comparison(records)
    assert "2 pods of 1 x l4" in view.title
    labels = {row.label for row in view.rows}
    assert {"hit rate per pod", "requests per pod", "load imbalance"} <= labels
    text = _text(records, 80)
    assert "prefix@round-robin" in text and "prefix@sticky" in text and "…" not in text


def test_offload_rows_and_rejection_reasons(tmp_path: Path) -> None:
    records = _run(
        tmp_path,
        "--workload",
        "chat",
        "--optimizations",
        "prefix,prefix+offload-cpu",
        "--cpu-cache-gb",
        "0.2",
        "--kv-cache-gib",
        "0.5",
    )
    labels = {row.label for row in comparison(records).rows}
    assert {"CPU tier hit rate", "CPU bytes in / out", "reloads / recomputes"} <= labels
    # 0.3 GiB / 128 KiB per token = 2,432 slots after the watermark: long prompts can never fit
    rejected = _run(
        tmp_path,
        "--optimizations",
        "paged",
        "--kv-cache-gib",
        "0.3",
        "--workload",
        "long-reasoning",
    )
    assert rejected[0].metrics["requests_rejected"] > 0
    notes = [n for n in comparison(rejected).notes if "rejected:" in n]
    assert len(notes) == 1 and "the whole pool admits 2432" in notes[0] and ".." in notes[0]


def test_reasons_differing_only_in_numbers_are_one_line() -> None:
    assert summarize_reasons(["needs 10 slots, pool 5", "needs 30 slots, pool 5", "too long"]) == [
        "needs 10..30 slots, pool 5",
        "too long",
    ]


def test_the_default_workload_shares_prefixes_so_prefix_beats_paged(tmp_path: Path) -> None:
    out = tmp_path / "d.jsonl"
    result = runner.invoke(
        app,
        ["bench", "--num-requests", "300", "--optimizations", "paged,prefix", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    paged, prefix = read_jsonl(out)
    assert paged.params["workload"]["kind"] == "system-prompt"
    assert (
        prefix.metrics["prefix_hit_rate"] >= 0.5
    )  # no PrefixCacheHitRateLow alert on the default run
    # the default rate is a load both serve, so what prefix caching buys is its prefill: the
    # first token sooner and less of the pool in use (at --rate 3 it is throughput, 1.7x)
    assert not paged.metrics["overloaded"] and not prefix.metrics["overloaded"]
    assert prefix.metrics["ttft_s_p50"] < 0.6 * paged.metrics["ttft_s_p50"]
    # the shared prompt is held once; how many requests overlap (and so the pool's use) follows
    # the step times, as the TTFT does
    assert prefix.metrics["kv_cache_usage_mean"] < 0.6 * paged.metrics["kv_cache_usage_mean"]
    page = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "page")])
    assert page.exit_code == 0 and "PrefixCacheHitRateLow" not in page.output


def test_eviction_policies_show_tokens_dropped_not_sharing(tmp_path: Path) -> None:
    """No tokens-dropped row for eviction policies, and their dropped tokens read as
    'shared token share'. One request, prompt 100, output 50: the engine writes KV for
    100 + 50 - 1 = 149 positions (the last sampled token is never fed back); a 32-token
    budget drops 149 - 32 = 117 of them. SnapKV compresses only the prompt (100 -> 32),
    then grows: 68."""
    trace = tmp_path / "one.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_len": 100, "output_len": 50}\n')
    records = _run(
        tmp_path,
        "--trace",
        str(trace),
        "--kv-budget",
        "32",
        "--optimizations",
        "paged,sliding-window,streaming,h2o,snapkv",
    )
    dropped = {r.optimization: r.metrics.get("tokens_dropped") for r in records}
    assert dropped == {
        "paged": None,
        "sliding-window": 117,
        "streaming": 117,
        "h2o": 117,
        "snapkv": 68,
    }
    for record in records:
        assert record.metrics["shared_token_share"] == 0.0  # nothing is shared on one request
        assert (record.metrics["evicted_token_share"] > 0) == (record.optimization != "paged")
    labels = {row.label for row in comparison(records).rows}
    assert {
        "tokens dropped",
        "dropped share of tokens",
    } <= labels and "shared token share" not in labels


def test_a_simulated_entropy_budget_names_its_unprobed_split(tmp_path: Path) -> None:
    """Simulated mode has no weights to probe entropy-budget's layer split: the table says
    every layer is charged the budget (as h2o), and only for that optimization."""
    trace = tmp_path / "one.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_len": 100, "output_len": 50}\n')
    records = _run(
        tmp_path,
        "--trace",
        str(trace),
        "--kv-budget",
        "32",
        "--optimizations",
        "paged,h2o,entropy-budget",
    )
    notes = [n for n in comparison(records).notes if "per-layer split" in n]
    assert len(notes) == 1 and notes[0].startswith("entropy-budget: simulated without weights")
    assert not [n for n in comparison(records[:2]).notes if "per-layer split" in n]
