"""Charts that say something true and can be read, as a first-time user met them: a sweep's
throughput chart claims no ratio of a run to itself, and ratio labels stand clear of the
error bars; KV usage over time never tangles more than a few series on one pair of axes
and the page says where the rest are; every log axis carries several plain-number labels;
and a chart names a metric as the bench table does (the metric registry's label)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
pd = pytest.importorskip("pandas")

from typer.testing import CliRunner  # noqa: E402

from kvplan.cli.app import app  # noqa: E402
from kvplan.core.metric_registry import Feature, by_feature, metric  # noqa: E402
from kvplan.report.alerts import hit_rate  # noqa: E402
from kvplan.report.chart_registry import CHARTS, lay_out, overlapping  # noqa: E402
from kvplan.report.data import ReportData, comparison_table, load  # noqa: E402
from kvplan.report.html import build_page  # noqa: E402
from kvplan.report.policies import policy_tradeoff  # noqa: E402
from kvplan.report.usage_charts import MAX_LINES, MAX_PANELS  # noqa: E402
from kvplan.results import make_record, write_jsonl  # noqa: E402

ENV = {"COLUMNS": "120"}
RATIO = re.compile(r"^\d+\.\d\dx$")


def drawn(data: ReportData, name: str):
    """A chart as render() lays it out before saving."""
    item = next(c for c in CHARTS if c.name == name)
    figure = item.draw(data)
    lay_out(figure)
    figure.draw_without_rendering()
    return figure


def series(rate: float, length: int = 40) -> dict[str, list[float]]:
    """A run's time series: usage and queue growing with the rate."""
    t = [float(i) for i in range(length)]
    return {
        "t": t,
        "kv_cache_usage": [min(1.0, rate * i / (4 * length)) for i in range(length)],
        "running": [rate * 3.0] * length,
        "waiting": [rate * float(i % 3) for i in range(length)],
    }


def sweep_records(gpus: list[str], rates: list[float], optimizations: list[str]) -> list:
    """A sweep as `kvplan sweep` writes it: one run per point, each of one optimization
    (no declared baseline), with the step model's error band and time series."""
    records = []
    for gpu in gpus:
        for rate in rates:
            for optimization in optimizations:
                point = {"gpu": gpu, "rate": rate, "optimization": optimization}
                params = {
                    "model": "llama-3.1-8b", "gpu": gpu, "tp": 1, "pods": 1, "sweep": point,
                    "study": {"slo_ttft_p90_s": None, "prices": {}},
                    "workload": {"kind": "sharegpt", "rate": rate},
                }  # fmt: skip
                metrics = {
                    "served_output_tokens_per_s": 100.0 * rate,
                    "ttft_s_p50": 0.2, "ttft_s_p90": 0.3, "ttft_s_p99": 0.5,
                    "tpot_s_p50": 0.02, "tpot_s_p90": 0.025, "tpot_s_p99": 0.03,
                    "requests_rejected": 0,
                    "time_error_band": {"output_throughput_error": 0.4},
                }  # fmt: skip
                run = f"{gpu}-{rate}-{optimization}"
                records.append(
                    make_record(
                        "bench", run, "simulated", optimization, params, metrics, series(rate)
                    )
                )
    return records


@pytest.fixture(scope="module")
def sweep16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sweep") / "results.jsonl"
    return write_jsonl(
        path, sweep_records(["l4", "a100-80gb"], [0.5, 1, 2, 4], ["contiguous-oracle", "paged"])
    )


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One simulated bench run comparing optimizations, prefix caching and a CPU tier among
    them (the step model's error band comes with it)."""
    out = tmp_path_factory.mktemp("bench") / "bench.jsonl"
    done = CliRunner().invoke(
        app,
        ["bench", "--workload", "chat", "--num-requests", "60", "--rate", "4", "--gpu", "l4",
         "--optimizations", "contiguous-max,paged,prefix,prefix+offload-cpu",
         "--cpu-cache-gb", "0.2", "--out", str(out)],
        env=ENV,
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    return out


def ratio_texts(figure) -> list:
    return [t for t in figure.axes[0].texts if RATIO.match(t.get_text())]


def test_a_sweep_throughput_chart_claims_no_ratio_of_a_run_to_itself(sweep16: Path) -> None:
    figure = drawn(load([sweep16]), "throughput")
    ax = figure.axes[0]
    # sixteen runs of one optimization each: sixteen bars, and no "1.00x" over any
    assert len(ax.patches) == 16
    assert ratio_texts(figure) == []
    assert [t.get_text() for t in ax.texts] == []
    assert "no ratio" in ax.get_title(loc="left")
    assert ax.get_ylabel() == metric("served_output_tokens_per_s").label


def test_ratio_labels_stand_above_the_error_bars(bench_run: Path) -> None:
    data = load([bench_run])
    assert data.bench["throughput_error_band"].notna().all()
    figure = drawn(data, "throughput")
    ax = figure.axes[0]
    renderer = figure.canvas.get_renderer()
    texts = [t for t in ax.texts if t.get_text()]
    # the baseline says so; each other bar its ratio to it
    assert [t.get_text() for t in texts][0] == "baseline"
    assert all(RATIO.match(t.get_text()) for t in texts[1:]) and len(texts) == len(data.bench)
    bars = [line for line in ax.collections if len(line.get_segments()) == len(texts)]
    assert bars, "the error bars are drawn"
    plot = ax.get_window_extent(renderer)
    for text, segment in zip(texts, bars[0].get_segments()):
        box = text.get_window_extent(renderer)
        (_, low), (_, high) = ax.transData.transform(segment)
        assert box.y0 > max(low, high), text.get_text()  # above the error bar's top
        assert plot.y0 <= box.y0 and box.y1 <= plot.y1, text.get_text()  # inside the plot
    for cap in ax.lines:  # the caps too
        for x, y in ax.transData.transform(cap.get_xydata()):
            assert not any(t.get_window_extent(renderer).contains(x, y) for t in texts)
    assert not overlapping(texts)


def test_crowded_ratio_labels_stand_up_clear_of_each_other_inside_the_plot() -> None:
    # one run of fourteen optimizations, the tallest bars side by side
    rows = [
        {"run_id": "r", "optimization": f"optimization-{i}", "baseline": i == 0,
         "mode": "simulated", "served_output_tokens_per_s": 400.0 + (i % 3) * 5,
         "throughput_error_band": 0.45}
        for i in range(14)
    ]  # fmt: skip
    data = ReportData(["b.jsonl"], pd.DataFrame(rows), pd.DataFrame(), params={"r": {}})
    figure = drawn(data, "throughput")
    ax = figure.axes[0]
    renderer = figure.canvas.get_renderer()
    texts = [t for t in ax.texts if t.get_text()]
    assert len(texts) == 14 and texts[0].get_text() == "baseline"
    assert not overlapping(texts)
    plot = ax.get_window_extent(renderer)
    for text in texts:
        box = text.get_window_extent(renderer)
        assert plot.y0 <= box.y0 and box.y1 <= plot.y1, text.get_text()


def usage_axes(figure) -> list:
    return [ax for ax in figure.axes if ax.get_visible() and "usage" in ax.get_ylabel().lower()]


def test_a_sweep_usage_chart_is_small_multiples_of_a_few_lines(sweep16: Path) -> None:
    data = load([sweep16])
    figure = drawn(data, "kv_usage_over_time")
    shown = [ax for ax in figure.axes if ax.get_visible() and ax.get_lines()]
    # a panel per GPU and optimization: usage above, running and waiting below
    assert len(shown) == 8
    titles = [ax.get_title() for ax in shown if ax.get_title()]
    assert titles == [
        "gpu l4, contiguous-oracle",
        "gpu l4, paged",
        "gpu a100-80gb, contiguous-oracle",
        "gpu a100-80gb, paged",
    ]
    for ax in shown:
        assert len(ax.get_lines()) <= 2 * MAX_LINES  # running and waiting per line below
    usage = [ax for ax in shown if ax.get_title()]
    assert all(len(ax.get_lines()) == 4 for ax in usage)
    # one legend for the figure: the rates, low to high, then what the line styles mean
    (legend,) = figure.legends
    assert [t.get_text() for t in legend.get_texts()] == [
        "rate 0.5", "rate 1", "rate 2", "rate 4", "running", "waiting",
    ]  # fmt: skip
    # each rate one color in every panel
    for index in range(4):
        assert len({str(ax.get_lines()[index].get_color()) for ax in usage}) == 1
    assert next(c for c in CHARTS if c.name == "kv_usage_over_time").note(data) == ""


def test_a_large_sweep_draws_a_capped_subset_and_the_page_says_where_the_rest_is(
    tmp_path: Path,
) -> None:
    gpus = ["l4", "a100-80gb", "h100-80gb", "h200"]
    rates = [0.5, 1, 2, 3, 4, 6, 8, 12, 16]
    path = write_jsonl(
        tmp_path / "results.jsonl",
        sweep_records(gpus, rates, ["contiguous-oracle", "paged"]),
    )
    data = load([path])
    figure = drawn(data, "kv_usage_over_time")
    panels = [ax for ax in figure.axes if ax.get_visible() and ax.get_title()]
    assert len(panels) == MAX_PANELS
    for ax in panels:
        assert len(ax.get_lines()) == MAX_LINES
    # each panel keeps its lowest and highest rate
    (legend,) = figure.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels[0] == "rate 0.5" and "rate 16" in labels
    drawn_count = MAX_PANELS * MAX_LINES
    assert f"{drawn_count} of 72 runs drawn" in figure.get_suptitle()
    # the page, with this chart alone rendered (the others' layout of 72 runs is no matter here)
    item = next(c for c in CHARTS if c.name == "kv_usage_over_time")
    png = tmp_path / "usage.png"
    figure.savefig(png)
    page = build_page(data, comparison_table(data.bench), [], [(item, png)], [])
    figure_html = page[page.index('<figure id="kv_usage_over_time">') :]
    figure_html = figure_html[: figure_html.index("</figure>")]
    assert f"{drawn_count} of 72 runs" in figure_html
    assert str(path) in figure_html and "comparison.csv" in figure_html


def log_labels(ax, which: str = "y") -> list[str]:
    """The labels a drawn log axis shows inside its limits."""
    axis = ax.yaxis if which == "y" else ax.xaxis
    assert axis.get_scale() == "log"
    low, high = sorted(axis.get_view_interval())
    return [
        label.get_text()
        for tick, label in zip(axis.get_majorticklocs(), axis.get_majorticklabels())
        if label.get_text() and low * 0.999 <= tick <= high * 1.001
    ]


def assert_readable_log_axis(ax, which: str = "y") -> None:
    figure = ax.figure
    labels = log_labels(ax, which)
    assert len(labels) >= 4, labels
    # plain numbers, not 10^k
    assert all(re.fullmatch(r"[\d,.]+k?M?", label) for label in labels), labels
    renderer = figure.canvas.get_renderer()
    axis = ax.yaxis if which == "y" else ax.xaxis
    boxes = [
        t.get_window_extent(renderer)
        for t in axis.get_majorticklabels()
        if t.get_text() and t.get_visible()
    ]
    boxes.sort(key=lambda b: b.y0 if which == "y" else b.x0)
    assert not any(a.overlaps(b) for a, b in zip(boxes, boxes[1:])), labels


def latency_frame(ttft: list[tuple[float, float, float]]) -> ReportData:
    rows = [
        {"run_id": f"r{i}", "optimization": f"opt{i}", "baseline": i == 0, "mode": "simulated",
         "ttft_s_p50": p50, "ttft_s_p90": p90, "ttft_s_p99": p99,
         "tpot_s_p50": 0.02, "tpot_s_p90": 0.021, "tpot_s_p99": 0.022}
        for i, (p50, p90, p99) in enumerate(ttft)
    ]  # fmt: skip
    params = {f"r{i}": {"model": "m", "gpu": "l4", "seed": i} for i in range(len(rows))}
    return ReportData(["b.jsonl"], pd.DataFrame(rows), pd.DataFrame(), params=params)


@pytest.mark.parametrize(
    "ttft",
    [
        [(0.2, 0.3, 0.5), (0.22, 0.35, 0.6)],  # inside one decade: matplotlib labels one value
        [(0.02, 0.05, 0.09), (8.0, 60.0, 120.0)],  # four decades
    ],
)
def test_the_ttft_axis_carries_several_plain_labels(ttft: list) -> None:
    figure = drawn(latency_frame(ttft), "latency")
    assert_readable_log_axis(figure.axes[0])
    # labels between the powers of ten too: no value is read off a decade's blank stretch
    values = [float(label) for label in log_labels(figure.axes[0])]
    assert max(b / a for a, b in zip(values, values[1:])) <= 10 / 3 + 1e-9, values


def test_every_log_axis_of_the_report_carries_several_plain_labels(
    sweep16: Path, tmp_path: Path
) -> None:
    estimate = tmp_path / "estimate.jsonl"
    done = CliRunner().invoke(
        app,
        ["estimate", "llama-3.1-8b", "--sweep", "context=1k..32k", "--sweep",
         "kv-dtype=bf16,fp8", "--sweep", "gpu=l4,h100", "--out", str(estimate)],
        env=ENV,
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    data = load([sweep16, estimate])
    checked = []
    for item in CHARTS:
        if not item.applies(data):
            continue
        figure = drawn(data, item.name)
        for ax in figure.axes:
            for which in "xy":
                axis = ax.yaxis if which == "y" else ax.xaxis
                if ax.get_visible() and axis.get_scale() == "log":
                    assert_readable_log_axis(ax, which)
                    checked.append((item.name, which))
    assert {
        ("latency", "y"),
        ("study_ttft_vs_rate", "y"),
        ("kv_vs_context", "y"),
        ("kv_vs_context", "x"),
        ("concurrency_vs_context", "y"),
        ("concurrency_vs_context", "x"),
    } <= set(checked)
    # a context axis reads as context lengths are written
    figure = drawn(data, "kv_vs_context")
    assert log_labels(figure.axes[0], "x")[:3] == ["1k", "2k", "4k"]
    # the serving-fidelity chart, on its own records' frame
    fidelity = pd.DataFrame(
        {"metric": ["output_throughput"] * 3, "measured": [120.0, 900.0, 4000.0],
         "zero_overhead": [150.0, 700.0, 5000.0], "held_out_model": [110.0, 950.0, 3800.0]}
    )  # fmt: skip
    data = ReportData(["f.jsonl"], pd.DataFrame(), pd.DataFrame(), fidelity=fidelity)
    figure = drawn(data, "serving_fidelity")
    assert_readable_log_axis(figure.axes[0], "x")
    assert_readable_log_axis(figure.axes[0], "y")
    # vllm bench's output throughput is the makespan's, named as the registry names that
    assert figure.axes[0].get_xlabel() == f"measured {metric('output_tokens_per_s').label}"


def legend_texts(figure) -> list[str]:
    legends = [ax.get_legend() for ax in figure.axes if ax.get_legend()] + figure.legends
    return [t.get_text() for legend in legends for t in legend.get_texts()]


def test_charts_name_each_metric_as_the_bench_table_does(bench_run: Path) -> None:
    data = load([bench_run])
    pool = legend_texts(drawn(data, "pool_split"))
    assert pool == [part.label for part in by_feature(Feature.POOL_SPLIT)]
    assert metric("cached_share").label in pool and "cached (free)" not in pool
    prefix = legend_texts(drawn(data, "prefix_hit_rate_over_time"))
    assert any(t.endswith(f": {metric('cached_share').label}") for t in prefix), prefix
    assert any(t.endswith(f": {metric('prefix_hit_rate').label}") for t in prefix), prefix
    assert metric("prefix_hit_rate_upper_bound").label in prefix
    assert not any("cached-but-free" in t or "upper bound" in t for t in prefix)
    tiers = drawn(data, "tiers")
    rates, moved = tiers.axes[0], tiers.axes[1]
    assert legend_texts(tiers)[:3] == [
        metric(name).label for name in ("prefix_hit_rate", "cpu_hit_rate", "disk_hit_rate")
    ]
    assert rates.get_ylabel() == f"{metric('total_hit_rate').label} (%)"
    assert [t.get_text() for t in moved.get_legend().get_texts()] == [
        metric("cpu_bytes_out").label,
        metric("disk_bytes_out").label,
    ]
    sharing = drawn(data, "sharing")
    shared = legend_texts(sharing)
    # each run's hit rate over every tier where a tier ran, else the device cache's
    assert shared[0] == f"{metric('prefix_hit_rate').label} / {metric('total_hit_rate').label}"
    assert metric("sharing_savings").label in shared
    assert sharing.axes[1].get_ylabel() == f"{metric('prefill_tokens_saved').label} (millions)"
    usage = drawn(data, "kv_usage_over_time")
    assert usage.axes[0].get_ylabel() == f"{metric('kv_cache_usage_mean').label} (%)"
    # the alerts and summaries name the hit rate over every tier by the registry's label too
    assert hit_rate({"total_hit_rate": 0.4})[1] == metric("total_hit_rate").label
    assert hit_rate({"prefix_hit_rate": 0.4})[1] == metric("prefix_hit_rate").label


def test_the_policy_table_reads_the_throughput_its_label_names() -> None:
    # the policy table's throughput column is the steady state's, under its registered label,
    # not the makespan's figure
    bench = pd.DataFrame(
        [{"run_id": "r", "optimization": "h2o", "baseline": True, "mode": "simulated",
          "kv_budget": 256, "mean_sequence_tokens": 512, "kv_cache_usage_mean": 0.5,
          "pool_slots": 1000, "kv_bytes_per_token_per_gpu": 1024, "running_mean": 4.0,
          "served_output_tokens_per_s": 150.0, "output_tokens_per_s": 100.0}]
    )  # fmt: skip
    frame = policy_tradeoff(ReportData(["b.jsonl"], bench, pd.DataFrame()))
    assert frame.loc[0, metric("served_output_tokens_per_s").column_label] == 150.0
    assert frame.loc[0, metric("running_mean").column_label] == 4.0
    assert frame.loc[0, metric("kv_cache_usage_mean").column_label] == 0.5
    assert metric("output_tokens_per_s").column_label not in frame
