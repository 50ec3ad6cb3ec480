"""Synthetic `kvplan.perf-table/1` tables for the perf-table tests: every operator of a model at
a tensor-parallel degree, with made-up times, so no test needs torch or minutes of profiling."""

from __future__ import annotations

from pathlib import Path

from kvplan.samples import sample_path
from kvplan.sizing.operators.profile_table import (
    AllReduceShape,
    AttentionShape,
    Curve,
    Device,
    ExpertsShape,
    GemmShape,
    PerfTable,
    Surface,
)
from kvplan.sizing.operators.profile_writer import write_table
from kvplan.sizing.operators.shapes import model_ops
from kvplan.spec import parse_kv_format
from kvplan.spec.resolve import load_model

DEVICE = Device("cpu", "Test CPU", "2.0", 1, "2026-01-01T00:00:00Z", "bf16", "AVX2", "torch")
STORIES = str(sample_path("stories260k"))


def line(points: tuple[float, ...], per_point: float, floor: float = 1e-5) -> Curve:
    return Curve(points, tuple(floor + per_point * x for x in points))


def grid(a: tuple[float, ...], b: tuple[float, ...], scale: float) -> Surface:
    return Surface(a, b, tuple(tuple(1e-5 + scale * x * (y + 1) for y in b) for x in a))


def model_table(model: str = STORIES, tp: int = 1, kv_dtype: str = "auto") -> PerfTable:
    """A table covering every operator model_ops lists for the model."""
    spec = load_model(model)
    ops = model_ops(spec, tp, parse_kv_format(kv_dtype, spec))
    tokens = (1.0, 2.0, 16.0, 512.0)
    gemm = {GemmShape.of(g): line(tokens, 1e-9 * g.n * g.k) for g in (*ops.gemms, ops.lm_head)}
    attention = {AttentionShape.of(op) for op in ops.attention}
    experts = {}
    if ops.experts is not None:
        experts[ExpertsShape.of(ops.experts)] = line(tokens, 1e-6)
    return PerfTable(
        DEVICE,
        {"model": spec.name, "tp": tp},
        gemm=gemm,
        experts=experts,
        decode_attention={s: grid((1.0, 8.0, 64.0), (1.0, 64.0, 4096.0), 1e-8) for s in attention},
        prefill_attention={
            s: grid((1.0, 64.0, 512.0), (0.0, 64.0, 4096.0), 1e-9) for s in attention
        },
        all_reduce={AllReduceShape(ops.hidden, tp): line(tokens, 1e-7)} if tp > 1 else {},
        memory=Curve((1024.0, 2**20, 2**30), (1e-6, 2e-5, 2e-2)),
        notes=("made up for a test",),
    )


def write_model_table(path: Path, model: str = STORIES, tp: int = 1) -> Path:
    write_table(model_table(model, tp), path)
    return path
