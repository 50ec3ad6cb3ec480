"""What `kvplan profile` measures and on which grids: the token grid (1 .. 16 exactly, then
geometric), the experts uniform routing touches, and each operator kind timed on CPU at tiny
shapes (seconds, not minutes)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from kvplan.real.expert_kernels import touched_experts  # noqa: E402
from kvplan.real.op_profile import ProfileGrid, _unmeasured, geometric  # noqa: E402
from kvplan.real.op_timer import Timer  # noqa: E402
from kvplan.real.op_workloads import Workbench  # noqa: E402
from kvplan.sizing.operators.profile_table import AttentionShape, ExpertsShape  # noqa: E402
from kvplan.spec.setting_error import SettingError  # noqa: E402

BENCH = Workbench(Timer("cpu", 1, 0.01, 2**20), "cpu", "fp32", "torch", 16, 2**20)


def test_the_token_grid_is_exact_to_16_then_geometric() -> None:
    grid = ProfileGrid(512, 64, 4096, points=6)
    assert grid.tokens() == [*range(1, 17), 32, 64, 128, 256, 512]
    assert grid.tokens(4) == [1, 2, 3, 4]
    assert grid.befores()[0] == 0 and grid.befores()[-1] == 4096
    assert grid.batches() == [1, 2, 5, 12, 28, 64]
    assert geometric(1, 1000, 4) == [1, 10, 100, 1000]
    assert geometric(5, 5, 3) == [5]


def test_a_grid_below_two_points_is_refused() -> None:
    with pytest.raises(SettingError, match="max_tokens must be a whole number from 2"):
        ProfileGrid(1, 64, 4096)


def test_uniform_routing_touches_e_times_one_minus_the_miss_chance() -> None:
    # E (1 - (1 - k/E)^T): one token touches its k experts, many tokens touch them all
    assert touched_experts(64, 8, 1) == 8
    assert touched_experts(64, 8, 2) == round(64 * (1 - (56 / 64) ** 2))  # 15
    assert touched_experts(64, 8, 10_000) == 64


def test_each_operator_kind_is_timed_on_cpu() -> None:
    ticks: list[int] = []
    tick = lambda: ticks.append(1)  # noqa: E731
    assert all(s > 0 for s in BENCH.gemm(16, 8, [1, 4], tick))
    experts = ExpertsShape(8, 4, 4, 2, "bf16")
    assert all(s > 0 for s in BENCH.experts(experts, [1, 8], tick))
    sliding = AttentionShape("SlidingAttention", 4.0, 2, 8, "bf16", 16)
    decode = BENCH.decode(sliding, [1, 2], [1, 40], tick)
    prefill = BENCH.prefill(sliding, [1, 8], [0, 40], tick)
    assert all(s > 0 for row in (*decode, *prefill) for s in row)
    int8 = AttentionShape("FullAttention", 4.0, 2, 8, "int8", 0)
    assert all(s > 0 for row in BENCH.decode(int8, [1, 2], [1, 40], tick) for s in row)
    assert all(s > 0 for s in BENCH.memory([1024, 4096], tick))
    assert len(ticks) == 2 + 2 + 4 + 4 + 4 + 2  # one per point


def test_what_the_kernels_cannot_run_is_left_out_with_a_reason() -> None:
    assert _unmeasured(AttentionShape("FullAttention", 4.0, 2, 8, "fp8-e4m3", 0)) == ""
    assert "full, sliding and chunked" in _unmeasured(
        AttentionShape("MlaAttention", 4.0, 1, 576, "bf16", 0)
    )
    assert "not a whole number" in _unmeasured(
        AttentionShape("FullAttention", 2.5, 1, 8, "bf16", 0)
    )
