"""`kvplan report`: headless charts, a valid self-contained page, escaping, exports, errors."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from ci_helpers import require_in_ci
from typer.testing import CliRunner

from kvplan.bench import BenchConfig, ClusterConfig, SizingConfig, run_matrix
from kvplan.cli.app import app
from kvplan.report import write_report
from kvplan.results import read_jsonl, write_jsonl
from kvplan.workload import make_workload

runner = CliRunner()
VOID = {"meta", "img", "br", "hr", "link", "input"}


class StrictParser(HTMLParser):
    """Checks that every non-void element is closed in order; collects text and img sources."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.text: list[str] = []
        self.images: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(f"unexpected </{tag}>")

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> StrictParser:
    parser = StrictParser()
    parser.feed(page)
    parser.close()
    assert not parser.errors and not parser.stack, (parser.errors, parser.stack)
    return parser


@pytest.fixture(scope="module")
def bench_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    requests = make_workload("sharegpt", 120, rate=30, seed=1, max_model_len=2048)
    config = BenchConfig(
        SizingConfig(model="opt-13b", gpu="a100-40gb", kv_cache_gib=2.0, max_model_len=2048)
    )
    records = run_matrix(config, requests, ["contiguous-max", "contiguous-oracle", "paged"])
    path = tmp_path_factory.mktemp("bench") / "bench.jsonl"
    write_jsonl(path, records)
    return path


@pytest.fixture(scope="module")
def estimate_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("estimate") / "estimate.jsonl"
    result = runner.invoke(
        app,
        [
            "estimate",
            "llama-3.1-8b",
            "--sweep",
            "context=1k..32k",
            "--sweep",
            "kv-dtype=bf16,fp8",
            "--sweep",
            "gpu=l4,h100",
            "--out",
            str(path),
        ],
    )
    assert result.exit_code == 0, result.output
    return path


def test_report_renders_every_run_and_chart(
    bench_results: Path, estimate_results: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report"
    result = runner.invoke(
        app, ["report", str(bench_results), str(estimate_results), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text()
    parser = parse(page)
    text = " ".join(parser.text)
    for name in ("contiguous-max", "contiguous-oracle", "paged", "opt-13b", "llama-3.1-8b"):
        assert name in text
    expected = {
        "pool_split",
        "throughput",
        "latency",
        "kv_usage_over_time",
        "preemptions",
        "kv_vs_context",
        "concurrency_vs_context",
        "fit_matrix",
    }
    assert {p.stem for p in out.glob("*.png")} == expected
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Self-contained: every chart is embedded, nothing is fetched.
    assert len(parser.images) == len(expected)
    assert all(src.startswith("data:image/png;base64,") for src in parser.images)
    assert "http://" not in page and "https://" not in page
    assert "script" not in parser.tags


def test_comparison_ratios_and_exports(bench_results: Path, tmp_path: Path) -> None:
    write_report([bench_results], tmp_path)
    records = read_jsonl(bench_results)
    base = records[0].metrics["served_output_tokens_per_s"]
    paged = records[2].metrics["served_output_tokens_per_s"]
    rows = (tmp_path / "comparison.csv").read_text().splitlines()
    header = rows[0].split(",")
    paged_row = dict(zip(header, rows[3].split(",")))
    assert paged_row["optimization"] == "paged"
    assert float(paged_row["served_output_tokens_per_s vs base"]) == pytest.approx(paged / base)
    prom = (tmp_path / "metrics.prom").read_text()
    assert "# TYPE vllm:kv_cache_usage_perc gauge" in prom
    assert "# TYPE vllm:num_preemptions_total counter" in prom
    sample = re.compile(
        r'^[a-zA-Z_:][a-zA-Z0-9_:]*\{(?:[a-z_]+="(?:[^"\\]|\\.)*",?)+\} -?[0-9.e+-]+$'
    )
    for line in prom.splitlines():
        assert line.startswith("# ") or sample.match(line), line
    usage = records[2].metrics["kv_cache_usage_mean"]
    exposed = re.search(r'vllm:kv_cache_usage_perc\{[^}]*optimization="paged"[^}]*\} (\S+)', prom)
    assert exposed and float(exposed.group(1)) == pytest.approx(usage, rel=1e-9)


def test_names_are_escaped(bench_results: Path, tmp_path: Path) -> None:
    records = read_jsonl(bench_results)
    for record in records:
        record.params["model"] = "<script>alert('x')</script>"
    records[1] = dataclasses.replace(records[1], optimization="<img src=x onerror=alert(1)>")
    hostile = tmp_path / "hostile.jsonl"
    write_jsonl(hostile, records)
    page = write_report([hostile], tmp_path / "out").index.read_text()
    parser = parse(page)
    assert "script" not in parser.tags and len(parser.images) == len(
        list((tmp_path / "out").glob("*.png"))
    )
    assert "&lt;script&gt;alert(" in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<script>alert" not in page and "<img src=x" not in page


def test_alert_checks(bench_results: Path, tmp_path: Path) -> None:
    records = read_jsonl(bench_results)
    records[0].metrics.update(
        kv_cache_usage_mean=0.95,
        prefix_cache_queries=1000,
        prefix_hit_rate=0.2,
        preemptions=50,
        requests_finished=100,
        cached_blocks_evicted=300,
        prefix_hit_rate_upper_bound=0.9,
    )
    path = tmp_path / "alerts.jsonl"
    write_jsonl(path, records)
    found = {
        a["alert"]
        for a in write_report([path], tmp_path / "out").alerts
        if "contiguous-max" in a["run"]
    }
    assert found == {
        "KVCacheUsageHigh",
        "PrefixCacheHitRateLow",
        "PreemptionRateHigh",
        "EvictionRateHigh",
    }


@pytest.mark.parametrize("content", ["", '{"schema": "kvplan.result/1", "kind": "bench", "run_id"'])
def test_empty_or_partial_results_fail_cleanly(content: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    out = tmp_path / "report"
    result = runner.invoke(app, ["report", str(bad), "--out", str(out)])
    assert result.exit_code == 2
    assert "bad.jsonl" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists() or not any(out.iterdir())


def test_missing_results_file_is_a_clear_error(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["report", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "r")]
    )
    assert result.exit_code == 2 and "does not exist" in result.stderr


@pytest.mark.slow  # 5-25 s on 2 cores; `pytest -m slow` runs it
def test_page_renders_in_headless_chromium(
    bench_results: Path, estimate_results: Path, tmp_path: Path
) -> None:
    require_in_ci(
        shutil.which("chromium") is not None, "Debian's chromium", "apt-get install chromium"
    )
    from PIL import Image

    index = write_report([bench_results, estimate_results], tmp_path / "r").index
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1280,2400",
            f"--screenshot={shot}",
            index.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    image = Image.open(shot).convert("L")
    low, high = image.getextrema()
    assert image.size == (1280, 2400) and high - low > 100  # not a blank page
    histogram = image.histogram()
    assert sum(histogram[:200]) > 0.02 * image.size[0] * image.size[1]  # charts and text drawn


def test_prefix_and_router_charts(tmp_path: Path) -> None:
    requests = make_workload("chat", 150, rate=4, seed=0, max_model_len=4096)
    sizing = SizingConfig(model="llama-3.1-8b", gpu="l4", max_model_len=4096)
    single = BenchConfig(sizing)
    cluster = BenchConfig(
        sizing, cluster=ClusterConfig(pods=2, routers=("round-robin", "kv-aware"))
    )
    write_jsonl(tmp_path / "single.jsonl", run_matrix(single, requests, ["paged", "prefix"]))
    write_jsonl(tmp_path / "cluster.jsonl", run_matrix(cluster, requests, ["prefix"]))
    written = write_report(
        [tmp_path / "single.jsonl", tmp_path / "cluster.jsonl"], tmp_path / "out"
    )
    assert {"prefix_hit_rate_over_time", "sharing", "routers"} <= set(written.charts)
    page = written.index.read_text()
    parse(page)
    assert "prefix@kv-aware" in page and "prefix hit rate" in page
