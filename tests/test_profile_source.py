"""ProfileSource: a measured table's times, interpolated in log space inside the grid,
extended linearly above it, held at the floor below it; None for any shape it does not hold,
so the next source times it; and the simulated engine asks it first when given a table."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from profile_helpers import DEVICE, STORIES, write_model_table

from kvplan.core.engine_factory import Optimization, SizingConfig
from kvplan.sim.factory import SimulatedEngineFactory
from kvplan.sim.ops.overhead import EngineOverhead
from kvplan.sim.ops.profile_source import ProfileSource, across, along
from kvplan.sizing.operators.attention import FullAttention, SlidingAttention
from kvplan.sizing.operators.profile_table import (
    AllReduceShape,
    AttentionShape,
    Curve,
    ExpertsShape,
    GemmShape,
    PerfTable,
    Surface,
)
from kvplan.sizing.operators.profile_writer import write_table
from kvplan.sizing.operators.shapes import BF16, Experts, Gemm, WeightFormat
from kvplan.spec import parse_kv_format
from kvplan.spec.attention_group import FullAttentionSpec, SlidingWindowSpec

MS = 1e-3
BF16_KV = parse_kv_format("bf16")


def _attention(kind: type = FullAttention, window: int | None = None, kv: str = "bf16"):
    spec = SlidingWindowSpec if window else FullAttentionSpec
    group = spec(num_layers=3, num_kv_heads=2, head_dim=8, window=window)
    return kind(group, 4.0, 2, 32.0, 0.0, 1.0, 1.0, 0.0, parse_kv_format(kv))


GEMM = Gemm("qkv", 64, 32, 5, BF16)
EXPERTS = Experts(32, 16, 8, 2, 5, 1, BF16)
SQUARE = Surface((1.0, 4.0), (1.0, 4.0), ((1 * MS, 2 * MS), (4 * MS, 8 * MS)))
TABLE = PerfTable(
    DEVICE,
    gemm={GemmShape.of(GEMM): Curve((1.0, 4.0), (1 * MS, 4 * MS))},
    experts={ExpertsShape.of(EXPERTS): Curve((1.0, 4.0), (1 * MS, 2 * MS))},
    decode_attention={AttentionShape.of(_attention()): SQUARE},
    prefill_attention={
        AttentionShape.of(_attention()): Surface((1.0, 4.0), (0.0, 3.0), ((1 * MS, 4 * MS),) * 2)
    },
    all_reduce={AllReduceShape(32, 2): Curve((1.0, 4.0), (1 * MS, 4 * MS))},
    memory=Curve((1024.0, 4096.0), (1 * MS, 4 * MS)),
)
SOURCE = ProfileSource(TABLE, "test")


def test_one_axis_is_log_log_inside_linear_above_and_floored_below() -> None:
    xs, ys = (1.0, 4.0), (1 * MS, 4 * MS)
    assert along(2, xs, ys) == pytest.approx(2 * MS)  # t ~ x on both: log-log is exact
    assert along(2, xs, (1 * MS, 2 * MS)) == pytest.approx(math.sqrt(2) * MS)  # t ~ sqrt(x)
    assert along(8, xs, ys) == pytest.approx(8 * MS)  # 4 ms + 1 ms per unit past the last point
    assert along(8, xs, (1 * MS, 2 * MS)) == pytest.approx(2 * MS + 4 / 3 * MS)
    assert along(0.5, xs, ys) == 1 * MS  # below the grid: the smallest point's time
    assert along(4, xs, ys) == 4 * MS and along(1, xs, ys) == 1 * MS


def test_a_falling_last_segment_extends_level() -> None:
    """Noise (or a window) can make the last point faster; the line never falls."""
    assert along(100, (1.0, 2.0, 4.0), (1 * MS, 3 * MS, 2 * MS)) == 2 * MS


def test_two_axes_are_bilinear_in_log_space() -> None:
    # log t at the centre is the mean of the corners' logs: 2^((0 + 1 + 2 + 3) / 4) ms
    assert across(2, 2, SQUARE) == pytest.approx(2**1.5 * MS)
    assert across(1, 2, SQUARE) == pytest.approx(math.sqrt(2) * MS)
    assert across(8, 4, SQUARE) == pytest.approx(16 * MS)  # 8 ms + 2 ms per batch past 4
    assert across(4, 8, SQUARE) == pytest.approx(40 / 3 * MS)  # 8 ms + 4/3 ms per token past 4
    assert across(0.5, 0.5, SQUARE) == 1 * MS


def test_the_source_times_what_the_table_holds() -> None:
    assert SOURCE.gemm(GEMM, 2) == pytest.approx(2 * MS)
    assert SOURCE.gemm(GEMM, 1024) == pytest.approx(1024 * MS)
    assert SOURCE.experts(EXPERTS, 2) == pytest.approx(math.sqrt(2) * MS)
    assert SOURCE.experts(EXPERTS, 0) == 0.0
    # attention: the layer's time times the group's 3 layers
    assert SOURCE.decode_attention(_attention(), 2, 2) == pytest.approx(3 * 2**1.5 * MS)
    # prefill's second axis is log(before + 1): before = 1 is halfway from 0 to 3
    assert SOURCE.prefill_attention(_attention(), 2, 1) == pytest.approx(3 * 2 * MS)
    assert SOURCE.prefill_attention(_attention(), 2, 0) == pytest.approx(3 * MS)
    assert SOURCE.all_reduce(32, 2, 2) == pytest.approx(2 * MS)
    assert SOURCE.all_reduce(32, 1, 2) == 0.0  # nothing to reduce on one GPU
    assert SOURCE.memory(2048) == pytest.approx(2 * MS)


def test_every_shape_the_table_lacks_is_left_to_the_next_source() -> None:
    fp8 = WeightFormat(1.0, "fp8", "fp8")
    assert SOURCE.gemm(Gemm("qkv", 64, 64, 5, BF16), 2) is None  # another k
    assert SOURCE.gemm(Gemm("qkv", 64, 32, 5, fp8), 2) is None  # another weight format
    assert SOURCE.experts(Experts(32, 16, 8, 4, 5, 1, BF16), 2) is None  # another top-k
    assert SOURCE.decode_attention(_attention(kv="fp8"), 2, 2) is None  # another KV format
    assert SOURCE.decode_attention(_attention(SlidingAttention, 64), 2, 2) is None  # another kind
    assert SOURCE.prefill_attention(_attention(kv="int8"), 2, 2) is None
    assert SOURCE.all_reduce(32, 4, 2) is None  # measured at tp 2 only
    assert SOURCE.all_reduce(64, 2, 2) is None
    assert ProfileSource(PerfTable(DEVICE), "empty").memory(2048) is None


def test_the_source_is_named_after_the_device_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "perf-a.json"
    write_table(TABLE, path)
    assert ProfileSource.read(path).name == "profile Test CPU (perf-a.json)"


def test_the_engine_times_steps_from_the_table_first(tmp_path: Path) -> None:
    """The operator step model (an EngineOverhead step model) asks the table before the
    roofline: the runner's sources say which timed what."""
    path = write_model_table(tmp_path / "perf.json")
    sizing = SizingConfig(model=STORIES, gpu="h100", max_model_len=256)
    factory = SimulatedEngineFactory(sizing, step_model=EngineOverhead(), perf_table=str(path))
    engine, _ = factory.build(Optimization("paged"))
    described = engine.runner.sources.describe()
    for kind in ("gemm", "decode attention", "prefill attention", "elementwise"):
        assert f"{kind}: profile Test CPU (perf.json)" in described, described
    assert factory.perf_table == str(path)
