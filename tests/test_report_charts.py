"""Charts a reader can read when several runs share a report: labels named by what differs
(no hashes), never overlapping (matplotlib's own layout measured), legends outside the
plot area, TPOT in milliseconds on a linear axis, a sweep's coinciding lines each visible,
and names of any length bounded before the renderer sees them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

from typer.testing import CliRunner  # noqa: E402

from kvplan.cli.app import app  # noqa: E402
from kvplan.report.chart_registry import (  # noqa: E402
    CHARTS,
    TEXT_CHARS,
    bound_texts,
    labels,
    overlapping,
    percentile_dots,
    unclutter,
)
from kvplan.report.data import load  # noqa: E402
from kvplan.results import make_record, read_jsonl, write_jsonl  # noqa: E402

OPTIMIZATIONS = "contiguous-max,contiguous-oracle,paged,prefix,prefix+offload-cpu"
RUNS = (("2", "l4"), ("8", "l4"), ("8", "h100-80gb"))


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("charts")
    paths = []
    for rate, gpu in RUNS:
        out = folder / f"{gpu}-{rate}.jsonl"
        done = CliRunner().invoke(
            app,
            ["bench", "--workload", "chat", "--num-requests", "40", "--rate", rate, "--gpu", gpu,
             "--optimizations", OPTIMIZATIONS, "--cpu-cache-gb", "0.2", "--out", str(out)],
        )  # fmt: skip
        assert done.exit_code == 0, done.output
        paths.append(out)
    return paths


def drawn(data, name: str):
    item = next(c for c in CHARTS if c.name == name)
    figure = item.draw(data)
    bound_texts(figure)
    unclutter(figure)
    figure.draw_without_rendering()
    return figure


def test_runs_are_labelled_by_what_differs_not_by_hash(results: list[Path]) -> None:
    data = load(results)
    # the GPU tells the last run from the others, the rate the first two apart
    runs = ("gpu l4, rate 2", "gpu l4, rate 8", "gpu h100-80gb, rate 8")
    assert labels(data) == [f"{o} ({run})" for run in runs for o in OPTIMIZATIONS.split(",")]


def test_no_label_overlaps_and_every_legend_sits_outside_the_plots(results: list[Path]) -> None:
    data = load(results)
    shown = [item.name for item in CHARTS if item.applies(data)]
    assert {"throughput", "latency", "kv_usage_over_time", "sharing", "tiers"} <= set(shown)
    for name in shown:
        figure = drawn(data, name)
        renderer = figure.canvas.get_renderer()
        plots = [ax.get_window_extent(renderer) for ax in figure.axes]
        for ax in figure.axes:
            assert not overlapping(ax.get_xticklabels()), name
            legend = ax.get_legend()
            if legend is not None:
                box = legend.get_window_extent(renderer)
                assert not any(box.overlaps(plot) for plot in plots), (name, legend)


def test_tpot_is_in_milliseconds_on_a_linear_axis(results: list[Path]) -> None:
    data = load(results)
    figure = drawn(data, "latency")
    ttft, tpot = figure.axes[:2]
    assert tpot.get_yscale() == "linear" and tpot.get_ylabel() == "TPOT (ms, modeled)"
    p50 = next(line for line in tpot.get_lines() if line.get_label() == "p50")
    assert list(p50.get_ydata()) == [1e3 * v for v in data.bench["tpot_s_p50"]]
    # TTFT keeps its log axis, labelled with plain numbers (no 10^-2, no 6x10^-2)
    assert ttft.get_yscale() == "log"
    ticks = [t.get_text() for t in ttft.get_yticklabels() + ttft.get_yticklabels(minor=True)]
    assert any(ticks) and not any("10^" in t or "$" in t for t in ticks), ticks


def test_the_tiers_chart_shows_only_runs_where_tiers_ran(results: list[Path], tmp_path) -> None:
    # the second run without its offload row: no tier ran in it
    without = tmp_path / "no-tiers.jsonl"
    write_jsonl(without, [r for r in read_jsonl(results[1]) if "offload" not in r.optimization])
    data = load([results[0], without])
    figure = drawn(data, "tiers")
    names = [t.get_text() for t in figure.axes[0].get_xticklabels()]
    # the first run alone, whole (its optimizations without offload are the comparison),
    # so its names need no run qualifier
    assert names == OPTIMIZATIONS.split(",")
    assert len(labels(data)) == 9


def sweep_point(gpu: str, optimization: str, rate: float, ttft: float):
    sweep = {"gpu": gpu, "optimization": optimization, "rate": rate, "model": "llama-3.1-8b"}
    return make_record(
        "bench",
        f"{gpu}-{optimization}-{rate}",
        "simulated",
        optimization,
        {"gpu": gpu, "tp": 1, "pods": 1, "sweep": sweep, "study": {"slo_ttft_p90_s": 5.0},
         "workload": {"kind": "sharegpt", "rate": rate}},
        {"ttft_s_p90": ttft, "requests_rejected": 0, "output_tokens_per_s": 100.0},
        baseline=True,
    )  # fmt: skip


def test_coinciding_sweep_lines_each_stay_visible(tmp_path: Path) -> None:
    # two allocators that never fill the pool: the same p90 TTFT at every rate
    records = [
        sweep_point(gpu, optimization, rate, 0.2 if gpu == "l4" else 0.03)
        for gpu in ("l4", "h100-80gb")
        for optimization in ("contiguous-oracle", "paged")
        for rate in (1, 2, 4, 8)
    ]
    path = write_jsonl(tmp_path / "results.jsonl", records)
    figure = drawn(load([path]), "study_ttft_vs_rate")
    ax = figure.axes[0]
    lines = [line for line in ax.get_lines() if not line.get_label().startswith("SLO")]
    assert [line.get_label() for line in lines] == [
        "gpu l4, optimization contiguous-oracle",
        "gpu l4, optimization paged",
        "gpu h100-80gb, optimization contiguous-oracle",
        "gpu h100-80gb, optimization paged",
    ]
    # each its own marker and dash, and drawn beside the others at each rate, never on them
    assert len({(line.get_marker(), str(line.get_linestyle())) for line in lines}) == 4
    for index in range(4):
        xs = {float(line.get_xdata()[index]) for line in lines}
        assert len(xs) == 4
    assert ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8"]
    renderer = figure.canvas.get_renderer()
    assert not ax.get_legend().get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))


def test_names_of_any_length_are_bounded(results: list[Path], tmp_path: Path) -> None:
    from kvplan.report import write_report

    records = read_jsonl(results[0])[:2]
    records = [dataclasses.replace(r, params={**r.params, "model": "m" * 200_000}) for r in records]
    records[1] = dataclasses.replace(records[1], optimization="x" * 200_000)
    hostile = write_jsonl(tmp_path / "huge.jsonl", records)
    data = load([hostile])
    for item in CHARTS:
        if item.applies(data):
            figure = item.draw(data)
            bound_texts(figure)
            longest = max(len(line) for t in figure.texts + [
                text for ax in figure.axes for text in ax.get_xticklabels()
            ] for line in t.get_text().split("\n")) if figure.axes else 0  # fmt: skip
            assert longest <= TEXT_CHARS, item.name
    written = write_report([hostile], tmp_path / "report")
    page = written.index.read_text()
    assert "x" * 200 + "\u2026 (cut: 200,000 characters)" in page
    assert "x" * 201 not in page and "m" * 201 not in page
    assert len(written.charts) >= 4


def test_whiskers_join_the_percentiles_a_run_records_when_one_is_missing() -> None:
    """Runs that record p50 and p90 but no p99: each still gets its p50-p90 whisker."""
    import pandas as pd
    from matplotlib.figure import Figure

    bench = pd.DataFrame({"ttft_s_p50": [0.1, 0.2], "ttft_s_p90": [0.4, 0.8]})
    ax = Figure().subplots()
    percentile_dots(ax, bench, ["a", "b"], "ttft_s")
    segments = [
        [tuple(map(float, point)) for point in segment]
        for whiskers in ax.collections
        for segment in whiskers.get_segments()
    ]
    assert segments == [[(0.0, 0.1), (0.0, 0.4)], [(1.0, 0.2), (1.0, 0.8)]]
