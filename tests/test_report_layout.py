"""The report page in headless Chromium at 1400 px and at 900 px (half a laptop screen): no
table scrolls sideways, the page does not either, every chart image loads, and no chart is
empty (each PNG draws data in colour, not only axes and text). Summaries open the page, a
sweep's study right after them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from ci_helpers import require_in_ci
from typer.testing import CliRunner

from kvplan.cli.app import app
from kvplan.report import write_report

runner = CliRunner()
WIDTHS = (1400, 900)
SWEEP = """[fixed]
workload = "sharegpt"
num_requests = 30
model = "llama-3.1-8b"
[axes]
gpu = ["l4", "h100-80gb"]
rate = [1, 4]
optimization = ["contiguous-oracle", "paged"]
[slo]
ttft_p90_s = 5.0
"""
PROBE = """<script>
window.addEventListener("load", () => {
  const boxes = [...document.querySelectorAll("div.scroll")];
  const images = [...document.querySelectorAll("figure img")];
  const wide = boxes.filter(b => b.scrollWidth > b.clientWidth + 1);
  const result = {tables: boxes.length, scrolling: wide.length,
                  which: wide.map(
                    b => (b.previousElementSibling || {}).textContent + ": " + b.scrollWidth),
                  pageScrolls: document.documentElement.scrollWidth > window.innerWidth + 1,
                  images: images.length, unloaded: images.filter(i => !(i.naturalWidth > 0)).length,
                  innerWidth: window.innerWidth};
  const out = document.createElement("pre");
  out.id = "layout-probe";
  out.textContent = JSON.stringify(result);
  document.body.appendChild(out);
});
</script>"""


def _bench(folder: Path, name: str, *args: str) -> Path:
    out = folder / f"{name}.jsonl"
    result = runner.invoke(app, ["bench", "--num-requests", "150", *args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("layout")
    results = [
        _bench(folder, "default", "--rate", "6"),
        _bench(
            folder,
            "pods",
            "--workload",
            "chat",
            "--pods",
            "2",
            "--router",
            "round-robin,kv-aware",
            "--optimizations",
            "prefix",
        ),
        _bench(
            folder,
            "tiers",
            "--workload",
            "chat",
            "--optimizations",
            "prefix,prefix+offload-disk",
            "--kv-cache-gib",
            "0.5",
            "--cpu-cache-gb",
            "0.2",
        ),
    ]
    study = folder / "study.toml"
    study.write_text(SWEEP)
    swept = runner.invoke(
        app, ["sweep", str(study), "--out", str(folder / "sweep"), "--workers", "1"]
    )
    assert swept.exit_code == 0, swept.output
    results.append(folder / "sweep" / "results.jsonl")
    estimate = folder / "estimate.jsonl"
    done = runner.invoke(
        app,
        [
            "estimate",
            "llama-3.1-70b",
            "--sweep",
            "context=1k..128k",
            "--sweep",
            "kv-dtype=bf16,fp8",
            "--sweep",
            "tp=2,4,8",
            "--out",
            str(estimate),
        ],
    )
    assert done.exit_code == 0, done.output
    return write_report([*results, estimate], folder / "report").index


def test_page_opens_with_a_summary_per_study(report: Path) -> None:
    page = report.read_text()
    assert (
        page.index("<h2>Summary</h2>")
        < page.index("<h2>Study</h2>")
        < page.index("<h2>Comparison</h2>")
        < page.index("<h3>Sweep points (8)</h3>")
        < page.index("<h2>Charts</h2>")
    )
    # three bench runs, the estimates and the sweep (its points summarized together)
    assert page.count('class="summary"') == 5
    assert "one row per point, named by the axes that vary: rate, gpu" in page
    assert "(top of the grid: the setup sustained every rate tried)" in page
    assert "of prompt tokens from cache" in page and "holds" in page
    text = re.sub(
        r"data:image/[a-z]+;base64,[A-Za-z0-9+/=]+", "", page
    )  # an embedded chart's bytes are not text
    assert '<a href="estimates.csv">' in text and "True" not in text and "False" not in text


def test_no_chart_is_empty(report: Path) -> None:
    from PIL import Image

    charts = sorted(report.parent.glob("*.png"))
    assert {"pool_split.png", "sharing.png", "routers.png", "tiers.png", "kv_vs_context.png"} <= {
        c.name for c in charts
    }
    for chart in charts:
        pixels = list(Image.open(chart).convert("HSV").get_flattened_data())
        coloured = sum(1 for _, saturation, value in pixels if saturation > 80 and value > 60)
        assert coloured > 0.003 * len(pixels), f"{chart.name} draws no data"


@pytest.mark.parametrize("width", WIDTHS)
def test_nothing_scrolls_sideways_in_headless_chromium(
    report: Path, tmp_path: Path, width: int
) -> None:
    require_in_ci(
        shutil.which("chromium") is not None, "Debian's chromium", "apt-get install chromium"
    )
    probed = report.with_name("probed.html")
    probed.write_text(report.read_text().replace("</body>", PROBE + "</body>"))
    dom = subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--window-size={width},1000",
            "--virtual-time-budget=10000",
            "--dump-dom",
            probed.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=180,
        text=True,
    ).stdout
    found = re.search(r'<pre id="layout-probe">(.*?)</pre>', dom)
    assert found, dom[-500:]
    layout = json.loads(found.group(1).replace("&quot;", '"'))
    assert layout["innerWidth"] == width
    assert layout["tables"] >= 6 and layout["images"] >= 6
    assert layout["scrolling"] == 0 and not layout["pageScrolls"], layout
    assert layout["unloaded"] == 0, layout


def test_quality_summary_reads_the_relative_perplexity_change() -> None:
    import pandas as pd

    from kvplan.report.data import ReportData
    from kvplan.report.summary import summaries

    quality = pd.DataFrame(
        {
            "optimization": ["fp32", "int8", "int4"],
            "perplexity": [3.661, 3.666, 8.591],
            "perplexity_vs_base": [0.0, 0.00144, 1.3466],
            "kv_bytes_vs_base": [1.0, 0.375, 0.25],
        }
    )
    data = ReportData(["q.jsonl"], pd.DataFrame(), pd.DataFrame(), quality=quality)
    ((heading, lines),) = summaries(data)
    assert lines == [
        "int8 keeps perplexity within +0.1% of the full cache with 38% of its KV bytes",
        "the largest quality loss: int4, perplexity 8.591 (+135% over the full cache's)",
    ]
