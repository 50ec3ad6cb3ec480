"""Log axes a reader can read values off: labelled with plain numbers (0.05, 0.1, 0.2, 0.5,
1 ...; never 10^-1 or 2x10^-1) and with several labels, however narrow the range.

matplotlib's default log locator labels only powers of ten: a range inside one decade (TTFT
between 0.2 and 0.6 s) carries one label or none, and one of three or four decades leaves
the values between powers of ten to guesswork. The locator here labels 1, 2 and 5 of each
decade wherever the labels have room on the axis as drawn, else 1 and 3, else only the
powers of ten, and finer series where fewer than MIN_LABELS would show. It decides at draw
time from the axis's own limits and length, so a later change of limits (an SLO line, a
shared axis, a figure the report widens) relabels too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from matplotlib import rcParams
from matplotlib.axis import XAxis, YAxis
from matplotlib.font_manager import FontProperties
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

MIN_LABELS = 4
USUAL = 3  # MANTISSAS' usual series
DEFAULT_LABELS = 12  # labels an axis of unknown length holds
# labelled values per decade, coarsest first; the first three are the usual ones (the
# finest that has room), the finer ones only make up MIN_LABELS on a narrow range
MANTISSAS: tuple[tuple[float, ...], ...] = (
    (1.0,),
    (1.0, 3.0),
    (1.0, 2.0, 5.0),
    (1.0, 2.0, 3.0, 5.0, 7.0),
    (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0),
)
# neighbouring labels' anchors at least this many font sizes apart (y: a label's height
# of space between two; x: a four-character label's width), so they never crowd
SPACING = {"y": 2.0, "x": 3.2}


def _gap(mantissas: tuple[float, ...]) -> float:
    """The narrowest step between neighbouring labels of a series, in decades."""
    steps = [*mantissas, 10.0]
    return min(math.log10(b / a) for a, b in zip(steps, steps[1:]))


def _within(values: Sequence[float], low: float, high: float) -> list[float]:
    """The values inside [low, high], rounded to 12 digits (3 * 0.1 is 0.30000000000000004)."""
    rounded = [float(f"{v:.12g}") for v in values]
    slack = 1e-9 * high
    return [v for v in rounded if low - slack <= v <= high + slack]


def log_ticks(low: float, high: float, room: float | None = None) -> list[float]:
    """Labelled values between `low` and `high` (> 0), where `room` is how many labels one
    decade of the axis holds without them touching (unknown: DEFAULT_LABELS on the axis)."""
    low, high = sorted((low, high))
    if not (math.isfinite(low) and math.isfinite(high)) or high <= 0:
        return []
    if low <= 0:
        low = high / 10
    if high <= low * (1 + 1e-9):  # one value: one label
        return [high]
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    if room is None:
        room = DEFAULT_LABELS / math.log10(high / low)
    if room < 1:  # not even every power of ten has room: every second (third ...) one
        stride = math.ceil(1 / room)
        return _within([10.0**e for e in range(first, last + 1) if e % stride == 0], low, high)
    usual = max(i for i in range(USUAL) if _gap(MANTISSAS[i]) * room >= 1)
    ticks: list[float] = []
    for mantissas in MANTISSAS[usual:]:
        ticks = _within([m * 10.0**e for e in range(first, last + 1) for m in mantissas], low, high)
        if len(ticks) >= MIN_LABELS:
            return ticks
    # narrower than the finest series can label: evenly spaced round numbers
    even = MaxNLocator(nbins=MIN_LABELS, steps=[1, 2, 2.5, 5, 10]).tick_values(low, high)
    spaced = _within([float(v) for v in even if v > 0], low, high)
    return spaced if len(spaced) > len(ticks) else ticks


class LabelledLogLocator(LogLocator):
    """LogLocator's limits handling (nonsingular, view_limits), log_ticks' choice of ticks
    for the axis's length as drawn."""

    def tick_values(self, vmin: float, vmax: float) -> Sequence[float]:
        return log_ticks(vmin, vmax, self._room(vmin, vmax))

    def _room(self, vmin: float, vmax: float) -> float | None:
        axis = self.axis
        if not isinstance(axis, (XAxis, YAxis)) or vmin <= 0 or vmax <= 0 or vmin == vmax:
            return None
        vertical = isinstance(axis, YAxis)
        box = axis.axes.bbox  # not get_window_extent: that would lay out, and call this again
        size = rcParams["ytick.labelsize" if vertical else "xtick.labelsize"]
        points = FontProperties(size=size).get_size_in_points()
        label_px = points * axis.axes.figure.dpi / 72 * SPACING["y" if vertical else "x"]
        length = box.height if vertical else box.width
        return length / abs(math.log10(vmax / vmin)) / label_px


def plain_number(value: float, _position: object = None) -> str:
    return f"{value:,.10g}"


def labelled_log(ax, which: str = "y") -> None:
    """Set `which` ("x", "y" or "xy") of `ax` to a log scale labelled by LabelledLogLocator
    with plain numbers; unlabelled minor ticks stay at every unit of each decade."""
    for name in which:
        axis = ax.yaxis if name == "y" else ax.xaxis
        if axis.get_scale() != "log":
            (ax.set_yscale if name == "y" else ax.set_xscale)("log")
        axis.set_major_locator(LabelledLogLocator())
        axis.set_major_formatter(FuncFormatter(plain_number))
        axis.set_minor_formatter(NullFormatter())


def tokens(value: float, _position: object = None) -> str:
    """A token count as context lengths are written: 512, 4k, 128k, 1M (k = 1024)."""
    for unit, scale in (("M", 2**20), ("k", 2**10)):
        if value >= scale and value % (scale / 4) == 0:
            return f"{value / scale:g}{unit}"
    return plain_number(value)


def context_axis(ax) -> None:
    """A context-length x axis: log base 2 (a doubling per step), labelled 1k, 2k ... 128k."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(tokens))
    ax.xaxis.set_minor_formatter(NullFormatter())
