"""Operator times from a table measured on the device (`kvplan profile`, a `kvplan.perf-table/1`
file: kvplan.sizing.operators.profile_table), the first source the step model asks.

A shape the table does not hold (another model's GEMM, a weight or KV format not measured, an
attention kind not profiled, an all-reduce measured on no multi-GPU machine) is answered
None, so the next source (aiconfigurator's tables, the roofline) times it.

A shape it holds is answered at any size, because the step model tabulates every curve from
1 to the engine's limits (kvplan.sim.ops.step) and a curve timed partly by the device and
partly by the roofline of another device would be neither:

- inside the measured range: linear interpolation in log-log space on one axis (time against
  M, tokens or bytes), bilinear in log space on a grid (decode: batch x context; prefill:
  new tokens x tokens before, that axis as log(before + 1) since a first chunk has none);
- above the largest measured point: linear in the quantity itself, from the last two points,
  never decreasing. Past the few-row knee a GEMM's, an expert layer's and a memory pass's
  time grows in proportion to its rows or bytes; attention's with its batch and context,
  until a window caps the keys (then the last two points are level, and so is the line);
- below the smallest measured point: the time of that point, a kernel's floor.

Times in the table are per layer (attention, experts) or per call (a GEMM, an all-reduce);
an attention group's time is its layer's times its layers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from kvplan.sizing.operators.attention import AttentionOp
from kvplan.sizing.operators.profile_table import (
    AllReduceShape,
    AttentionShape,
    Curve,
    ExpertsShape,
    GemmShape,
    PerfTable,
    Surface,
    read_table,
)
from kvplan.sizing.operators.shapes import Experts, Gemm


def along(x: float, xs: Sequence[float], ys: Sequence[float], shift: float = 0.0) -> float:
    """ys at x: log-log interpolation inside xs (logs of x + shift), linear in x above the
    last point (from the last two, slope at least 0), the first point's value below it."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        slope = max(0.0, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]))
        return ys[-1] + slope * (x - xs[-1])
    high = next(i for i, point in enumerate(xs) if point >= x)
    low = high - 1
    t = math.log((x + shift) / (xs[low] + shift)) / math.log((xs[high] + shift) / (xs[low] + shift))
    return math.exp(math.log(ys[low]) + t * (math.log(ys[high]) - math.log(ys[low])))


def across(a: float, b: float, surface: Surface, b_shift: float = 0.0) -> float:
    """A grid's time at (a, b): along b on every row, then along a over the rows' values,
    which inside the grid is bilinear interpolation of log time in (log a, log b)."""
    column = [along(b, surface.b, row, b_shift) for row in surface.seconds]
    return along(a, surface.a, column)


def curve_at(curve: Curve, x: float) -> float:
    return along(x, curve.x, curve.seconds)


class ProfileSource:
    """The OperatorSource protocol over one measured table."""

    def __init__(self, table: PerfTable, name: str) -> None:
        self.table, self.name = table, name

    @classmethod
    def read(cls, path: str | Path) -> ProfileSource:
        """The file's table (refused as kvplan.sizing.operators.profile_table words it)."""
        path = Path(path)
        table = read_table(path)
        return cls(table, f"profile {table.device.name} ({path.name})")

    def gemm(self, gemm: Gemm, m: int) -> float | None:
        curve = self.table.gemm.get(GemmShape.of(gemm))
        return None if curve is None else curve_at(curve, m)

    def experts(self, experts: Experts, tokens: int) -> float | None:
        curve = self.table.experts.get(ExpertsShape.of(experts))
        if curve is None:
            return None
        return 0.0 if tokens <= 0 else curve_at(curve, tokens)

    def decode_attention(self, op: AttentionOp, batch: int, context: int) -> float | None:
        surface = self.table.decode_attention.get(AttentionShape.of(op))
        if surface is None:
            return None
        return across(batch, context, surface) * op.layers

    def prefill_attention(self, op: AttentionOp, new: int, before: int) -> float | None:
        surface = self.table.prefill_attention.get(AttentionShape.of(op))
        if surface is None:
            return None
        return across(new, before, surface, b_shift=1.0) * op.layers

    def all_reduce(self, hidden: int, tp: int, tokens: int) -> float | None:
        if tp <= 1:
            return 0.0  # one GPU reduces nothing
        curve = self.table.all_reduce.get(AllReduceShape(hidden, tp))
        return None if curve is None else curve_at(curve, tokens)

    def memory(self, nbytes: float) -> float | None:
        memory = self.table.memory
        return None if memory is None else curve_at(memory, nbytes)
