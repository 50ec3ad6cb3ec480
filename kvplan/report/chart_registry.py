"""The chart registry: each chart is a drawing function plus a test of whether its data
exists; `render` draws the applicable ones in registration order. Helpers every chart
uses (labels, a metric column, a figure) live here too.

matplotlib's object API (Figure, no pyplot) renders headless with the Agg backend and
keeps no global state.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from kvplan.bench.mode import Mode
from kvplan.core.metric_registry import metric
from kvplan.report.data import ReportData
from kvplan.report.log_axes import labelled_log
from kvplan.report.names import clip, members, qualified, run_names


@dataclass(frozen=True)
class Chart:
    name: str
    title: str
    applies: Callable[[ReportData], bool]
    draw: Callable[[ReportData], Figure]
    # a line the page shows under the caption (what the chart leaves out and where it is);
    # empty where there is nothing to say
    note: Callable[[ReportData], str] | None = None


CHARTS: list[Chart] = []


def chart(
    name: str,
    title: str,
    applies: Callable[[ReportData], bool],
    note: Callable[[ReportData], str] | None = None,
) -> Callable[[Callable[[ReportData], Figure]], Callable[[ReportData], Figure]]:
    def register(draw: Callable[[ReportData], Figure]) -> Callable[[ReportData], Figure]:
        CHARTS.append(Chart(name, title, applies, draw, note))
        return draw

    return register


def label(name: str, unit: str = "") -> str:
    """A metric's label as the bench table prints it (kvplan.core.metric_registry), with the
    unit the chart draws it in: one name per figure across table, page and charts."""
    text = metric(name).label
    return f"{text} ({unit})" if unit else text


def has_bench(data: ReportData) -> bool:
    return not data.bench.empty


def has_estimate(data: ReportData) -> bool:
    return not data.estimate.empty


def has_metric(metric: str) -> Callable[[ReportData], bool]:
    return lambda data: (
        has_bench(data) and metric in data.bench and data.bench[metric].fillna(0).gt(0).any()
    )


def has_series(series: str) -> Callable[[ReportData], bool]:
    """Some run recorded the series with a value above zero (a flat zero line says nothing)."""
    return lambda data: any(
        any(v > 0 for v in ts.get(series) or []) for ts in data.timeseries.values()
    )


def has_column(metric: str) -> Callable[[ReportData], bool]:
    """Some run reported the metric at all (an offload tier that ran but never hit counts)."""
    return lambda data: (
        has_bench(data) and metric in data.bench and data.bench[metric].notna().any()
    )


def slanted(ax, fontsize: int = 8) -> None:
    """X labels at 30 degrees, anchored at their right end; render() stands them upright (and
    widens the figure) where they would still overlap."""
    for label in ax.get_xticklabels():
        label.set_rotation(30)
        label.set_horizontalalignment("right")
        label.set_rotation_mode("anchor")
        label.set_fontsize(fontsize)


def categories(ax, names: list[str], fontsize: int = 8) -> None:
    """One x tick per name (bars or dots per run), slanted; panels stacked over a shared x
    axis name them once, under the bottom one."""
    ax.set_xticks(range(len(names)), names)
    slanted(ax, fontsize)
    stacked = len(ax.get_shared_x_axes().get_siblings(ax)) > 1
    if stacked and not ax.get_subplotspec().is_last_row():
        ax.tick_params(labelbottom=False)


def legend_outside(ax, handles=None, labels=None, fontsize: int = 7) -> None:
    """The legend right of the plot area, where it hides no data (constrained layout makes
    room for it)."""
    args = () if handles is None else (handles, labels)
    ax.legend(
        *args,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        borderaxespad=0.0,
        fontsize=fontsize,
        frameon=False,
    )


# A bar chart's panels side by side while each category gets this much width; beyond it
# they stack, one full-width panel per row, and the figure grows with the categories.
CATEGORY_INCHES = 0.32
MAX_WIDTH_INCHES = 14.0


def bar_panels(count: int, panels: int, width: float, height: float):
    """A figure of `panels` category panels for `count` categories: side by side in `width`
    inches while each category has CATEGORY_INCHES, else stacked in rows."""
    if panels == 1 or count * CATEGORY_INCHES * panels <= width:
        return new_figure(
            width=max(width, count * CATEGORY_INCHES * panels), height=height, cols=panels
        )
    wide = min(MAX_WIDTH_INCHES, max(8.0, count * CATEGORY_INCHES + 2))
    return new_figure(width=wide, height=height * panels, rows=panels, sharex=True)


def panels_of(axes) -> list:
    """The figure's axes, in drawing order, whether side by side or stacked."""
    return list(axes.flat)


def percentile_dots(
    ax,
    bench,
    names: list[str],
    prefix: str,
    pcts: tuple[str, ...] = ("p50", "p90", "p99"),
    scale: float = 1.0,
    log: bool = True,
) -> None:
    """Percentiles as dots joined per run, values times `scale`; on a log axis (plain tick
    numbers, several per axis: log_axes) unless `log` is False: no bar whose baseline the
    log scale cuts."""
    markers = {"p50": "o", "p90": "s", "p99": "^"}
    rows = []  # the percentiles the runs record: a missing one leaves the others' whiskers
    for pct in pcts:
        values = [
            v * scale if v and v > 0 else float("nan") for v in bench.get(f"{prefix}_{pct}", [])
        ]
        ax.plot(range(len(values)), values, linestyle="none", marker=markers[pct], label=pct)
        if values:
            rows.append(values)
    for i, points in enumerate(zip(*rows)):
        shown = [v for v in points if v == v]
        if shown:
            ax.vlines(i, min(shown), max(shown), color="#adb5bd", linewidth=1, zorder=0)
    if log:
        labelled_log(ax)
    else:
        ax.set_ylim(bottom=0)
    categories(ax, names)


def column(bench, name: str, scale: float = 1.0) -> list[float]:
    """A metric per run, scaled; runs without it (missing column, None, NaN) read as 0."""
    if name not in bench:
        return [0.0] * len(bench)
    return [0.0 if v is None or v != v else v * scale for v in bench[name]]


def labels(data: ReportData, rows=None) -> list[str]:
    """Optimization names of the bench rows (a boolean mask; default all), qualified by what
    sets their run apart from the other runs among those rows ("paged (rate 4, gpu l4)"):
    the fewest settings that tell them apart; bounded for the chart."""
    bench = data.bench if rows is None else data.bench[rows]
    names = run_names(data.params, list(bench["run_id"]), shortest=True, members=members(bench))
    return [
        clip(qualified(o, names.get(r))) for o, r in zip(bench["optimization"], bench["run_id"])
    ]


def series_styles(count: int) -> list[dict[str, object]]:
    """A color per series (20 distinct ones), then a line style per cycle of them."""
    palette = (
        [f"C{i}" for i in range(10)] if count <= 10 else [colormaps["tab20"](i) for i in range(20)]
    )
    dashes = ["-", (0, (5, 1.5)), (0, (1, 1)), (0, (3, 1, 1, 1))]
    return [
        {"color": palette[i % len(palette)], "linestyle": dashes[(i // len(palette)) % len(dashes)]}
        for i in range(count)
    ]


def series_labels(data: ReportData) -> dict[tuple[str, str], str]:
    """Each time series' legend label, (run, optimization) -> 'paged (rate 4)', bounded; the
    run names worked out once per chart (they compare every run with every other)."""
    names = run_names(data.params, shortest=True, members=members(data.bench))
    return {
        (run_id, optimization): clip(qualified(optimization, names.get(run_id)))
        for run_id, optimization in data.timeseries
    }


DPI = 110
# slanted labels closer than this many lines apart read as a wall of text: stand them up
SLANT_SPACING = 1.6
TEXT_CHARS = 120  # any one line of text in a chart (names are cut shorter, at CHART_CHARS)


def render(data: ReportData, out_dir: Path) -> list[tuple[Chart, Path]]:
    rendered = []
    for item in CHARTS:
        if not item.applies(data):
            continue
        figure = item.draw(data)
        lay_out(figure)
        path = out_dir / f"{item.name}.png"
        figure.savefig(path, dpi=DPI, bbox_inches="tight")
        rendered.append((item, path))
    return rendered


def lay_out(figure: Figure) -> None:
    """What render does to a drawn chart before saving it: every text bounded, crowded
    category labels stood up, then (the figure at its final size) texts above bars fitted."""
    bound_texts(figure)
    unclutter(figure)
    fit_above_bars(figure)


# A text a chart stands on a bar (a ratio to the baseline) carries this gid: render keeps it
# clear of its neighbours and inside the plot.
ABOVE_BAR = "above-bar"


def fit_above_bars(figure: Figure) -> None:
    """Texts above bars upright where level ones would touch, and the y axis raised until
    each lies inside its plot: matplotlib does not scale an axis to its annotations, and
    only now, after unclutter, is the plot's height in pixels final."""
    for ax in figure.axes:
        texts = [t for t in ax.texts if t.get_gid() == ABOVE_BAR and t.get_text()]
        if not texts:
            continue
        figure.draw_without_rendering()
        if _crowded(texts):
            for text in texts:
                text.set_rotation(90)
                text.set_fontsize(7)
        for _ in range(4):
            figure.draw_without_rendering()
            renderer = figure.canvas.get_renderer()
            plot = ax.get_window_extent(renderer)
            over = max(t.get_window_extent(renderer).y1 for t in texts) - plot.y1
            if over <= 0:
                break
            low, high = ax.get_ylim()
            ax.set_ylim(low, high + (high - low) * (over + 4) / max(plot.height - over, 1.0))


def _crowded(texts: list) -> bool:
    """Whether two level texts side by side stand closer than half a character: "baseline"
    and "1.01x" that touch read as one."""
    renderer = texts[0].figure.canvas.get_renderer()
    boxes = sorted((t.get_window_extent(renderer) for t in texts), key=lambda b: b.x0)
    gap = 0.5 * texts[0].get_fontsize() * texts[0].figure.dpi / 72
    return any(b.x0 - a.x1 < gap for a, b in zip(boxes, boxes[1:]))


def bound_texts(figure: Figure) -> None:
    """Every text in the figure (labels, ticks, legends, notes) cut to TEXT_CHARS per line:
    one chart must never try to lay out a name of any length."""
    from matplotlib.text import Text

    for text in figure.findobj(Text):
        lines = text.get_text().split("\n")
        if any(len(line) > TEXT_CHARS for line in lines):
            text.set_text("\n".join(clip(line, TEXT_CHARS) for line in lines))


def overlapping(labels: list) -> bool:
    """Whether any two neighbouring visible tick labels overlap, the figure laid out.
    Upright or level labels overlap where their boxes do; slanted ones are parallel strips
    one line high, apart by their anchors' spacing times the sine of the slant."""
    shown = [label for label in labels if label.get_visible() and label.get_text()]
    if len(shown) < 2:
        return False
    renderer = shown[0].figure.canvas.get_renderer()
    angle = shown[0].get_rotation() % 180
    if angle not in (0, 90):
        anchors = sorted(
            label.get_transform().transform(label.get_position())[0] for label in shown
        )
        line = max(label.get_fontsize() for label in shown) * shown[0].figure.dpi / 72
        gap = min(b - a for a, b in zip(anchors, anchors[1:]))
        return gap * math.sin(math.radians(angle)) < SLANT_SPACING * line
    boxes = sorted((label.get_window_extent(renderer) for label in shown), key=lambda b: b.x0)
    return any(a.overlaps(b) for a, b in zip(boxes, boxes[1:]))


def unclutter(figure: Figure) -> None:
    """Category labels that overlap at 30 degrees stand upright (the figure grows by their
    height); if they still overlap, the figure widens until they do not (up to
    MAX_WIDTH_INCHES, then stays)."""
    slanted_axes = [
        ax for ax in figure.axes if any(t.get_rotation() == 30 for t in ax.get_xticklabels())
    ]
    if not slanted_axes:  # no category axis: nothing to lay out (and no layout pass to pay)
        return
    figure.draw_without_rendering()
    crowded = [ax for ax in slanted_axes if overlapping(ax.get_xticklabels())]
    if not crowded:
        return
    before = {ax: _label_height(ax.get_xticklabels()) for ax in crowded}
    for ax in crowded:
        for label in ax.get_xticklabels():
            label.set_rotation(90)
            label.set_horizontalalignment("center")
            label.set_rotation_mode("default")
    figure.draw_without_rendering()
    raised = max(_label_height(ax.get_xticklabels()) - before[ax] for ax in crowded)
    if raised > 0:
        width, height = figure.get_size_inches()
        figure.set_size_inches(width, height + raised / figure.dpi)
    for _ in range(4):
        figure.draw_without_rendering()
        crowded = [ax for ax in crowded if overlapping(ax.get_xticklabels())]
        width, height = figure.get_size_inches()
        if not crowded or width >= MAX_WIDTH_INCHES:
            return
        figure.set_size_inches(min(MAX_WIDTH_INCHES, width * 1.4), height)


def _label_height(labels: list) -> float:
    """The tallest visible label's height in pixels."""
    renderer = labels[0].figure.canvas.get_renderer()
    return max(
        (t.get_window_extent(renderer).height for t in labels if t.get_visible() and t.get_text()),
        default=0.0,
    )


def new_figure(
    width: float = 8.0, height: float = 4.2, rows: int = 1, cols: int = 1, sharex: bool = False
):
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)  # a renderer to lay out and measure labels before saving
    axes = figure.subplots(rows, cols, squeeze=False, sharex=sharex)
    return figure, axes


def ttft_dots(ax, bench, names: list[str]) -> None:
    """TTFT p50 and p90 per run, as dots on a log axis in seconds."""
    percentile_dots(ax, bench, names, "ttft_s", ("p50", "p90"))
    ax.set_ylabel(f"TTFT (s, {time_source(bench)})")
    legend_outside(ax)


def time_source(bench) -> str:
    return "modeled" if (bench["mode"] == Mode.SIMULATED).all() else "measured"
