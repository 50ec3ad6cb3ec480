"""Sweep rate of `kvplan estimate --sweep` against the scalar plan() loop, in one run.

Target: 100,000 configurations in well under 2 s on a 2-core machine.
Run: python benchmarks/estimate_sweep.py
"""

from __future__ import annotations

import time
from dataclasses import replace

from kvplan.sizing.capacity import PlanInputs, plan
from kvplan.sizing.capacity_sweep import parse_axis, sweep
from kvplan.spec import parse_kv_format
from kvplan.spec.resolve import load_gpu, load_model

SCALAR_SAMPLE = 2_000


def main() -> None:
    base = PlanInputs(
        load_model("llama-3.1-70b"), load_gpu("h100-80gb"), kv_format=parse_kv_format("bf16")
    )
    # 8 contexts x 1,042 batches x 3 KV dtypes x 4 TP degrees = 100,032 configurations
    axes = dict(
        parse_axis(a)
        for a in ("context=1k..128k", "batch=1..1042:1", "kv-dtype=fp16,fp8,int4", "tp=1,2,4,8")
    )
    started = time.perf_counter()
    columns = sweep(base, axes)
    vector_s = time.perf_counter() - started
    points = len(columns["model"])

    started = time.perf_counter()
    for i in range(SCALAR_SAMPLE):
        plan(
            replace(base, context=1024 << (i % 8), batch=1 + i % 1042, tp=1 << (i % 4)),
            suggest=False,
        )
    scalar_per_point = (time.perf_counter() - started) / SCALAR_SAMPLE

    print(
        f"vectorized sweep : {points:,} configurations in {vector_s:.3f} s "
        f"({points / vector_s:,.0f} configs/s)  target < 2 s: {'PASS' if vector_s < 2 else 'FAIL'}"
    )
    print(
        f"scalar plan() loop: {1 / scalar_per_point:,.0f} configs/s "
        f"(would take {scalar_per_point * points:.1f} s for the same grid)"
    )
    print(f"ratio vectorized / scalar: {scalar_per_point * points / vector_s:.0f}x faster")


if __name__ == "__main__":
    main()
