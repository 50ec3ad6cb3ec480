"""The vectorized sweep agrees with plan() point by point."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvplan.sizing.capacity import PlanInputs, plan
from kvplan.sizing.capacity_sweep import parse_axis, rows, sweep
from kvplan.spec import parse_kv_format
from kvplan.spec.resolve import load_gpu, load_model


def test_axis_parsing() -> None:
    assert parse_axis("context=1k..128k") == ("context", [1024 * 2**i for i in range(8)])
    assert parse_axis("batch=8..32:8") == ("batch", [8, 16, 24, 32])
    assert parse_axis("batch=1..100") == ("batch", [1, 2, 4, 8, 16, 32, 64, 100])
    assert parse_axis("kv-dtype=fp16,fp8,int4") == ("kv-dtype", ["fp16", "fp8", "int4"])
    assert parse_axis("tp=1,2,4") == ("tp", [1, 2, 4])


@pytest.mark.parametrize(
    "bad", ["context", "context=abc", "context=8k..1k", "colour=red", "batch=-1"]
)
def test_bad_axes_raise(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_axis(bad)


@pytest.mark.parametrize("respect_windows", [False, True])
def test_sweep_rows_equal_single_plans(respect_windows: bool) -> None:
    base = PlanInputs(
        load_model("gpt-oss-120b"),
        load_gpu("h100-80gb"),
        kv_format=parse_kv_format("bf16"),
        respect_windows=respect_windows,
    )
    axes = dict(
        [
            parse_axis("context=1k..128k"),
            parse_axis("batch=1,7,64"),
            parse_axis("kv-dtype=bf16,fp8,int4"),
            parse_axis("tp=1,2,4"),
            parse_axis("gpu=h100,a100-40gb"),
        ]
    )
    table = rows(sweep(base, axes))
    assert len(table) == 8 * 3 * 3 * 3 * 2
    for row in table[::7]:
        single = plan(
            replace(
                base,
                gpu=load_gpu(row["gpu"]),
                tp=row["tp"],
                context=row["context"],
                batch=row["batch"],
                kv_format=parse_kv_format(row["kv_dtype"]),
            ),
            suggest=False,
        )
        assert row["num_blocks"] == single.num_blocks
        assert row["seq_kv_bytes"] == pytest.approx(single.seq_bytes)
        assert row["max_batch_at_context"] == single.max_batch
        assert row["max_concurrency"] == pytest.approx(single.max_concurrency, abs=1e-4)
        assert row["verdict"] == single.verdict


def test_sweep_over_models_includes_hybrid_state() -> None:
    base = PlanInputs(load_model("llama-3.1-8b"), load_gpu("h200"))
    table = rows(
        sweep(
            base, dict([parse_axis("model=qwen3.5-27b,llama-3.1-8b"), parse_axis("context=4k,8k")])
        )
    )
    for row in table:
        single = plan(
            replace(base, model=load_model(row["model"]), context=row["context"]), suggest=False
        )
        assert row["max_batch_at_context"] == single.max_batch


@pytest.mark.parametrize("engine", ["sglang", "vllm-v1"])
def test_a_sweep_over_the_memory_share_equals_single_plans_for_each_engine(engine: str) -> None:
    """SGLang's mem_fraction_static is of the memory left once NCCL started, vLLM's
    gpu_memory_utilization of the whole GPU: a swept share takes each engine's own rule, as a
    single plan does (the grid and the point run the same kernel)."""
    base = PlanInputs(load_model("llama-3.1-8b"), load_gpu("h100-80gb"), engine=engine)
    axes = dict([parse_axis("context=4k,32k"), parse_axis("gpu-memory-utilization=0.5,0.8,0.95")])
    table = rows(sweep(base, axes))
    assert len(table) == 6
    for row in table:
        single = plan(
            replace(
                base,
                context=row["context"],
                gpu_memory_utilization=row["gpu_memory_utilization"],
            ),
            suggest=False,
        )
        assert row["kv_budget_bytes_per_gpu"] == int(single.kv_pool_bytes // 1)
        assert row["num_blocks"] == single.num_blocks
        assert row["max_batch_at_context"] == single.max_batch
        assert row["verdict"] == single.verdict
