"""Small engines on Llama-3.1-8B / H100 timed by the roofline: a plain one
(test_engine.py, test_disagg.py) and one whose paged pool runs an eviction policy under a
budget (test_quality.py, test_policy_holes.py)."""

from __future__ import annotations

from kvplan.core.engine import Engine
from kvplan.core.kv import make_allocator
from kvplan.core.policies import PolicySpec
from kvplan.core.scheduler import SchedulerConfig
from kvplan.sim.runner import SimulatedRunner
from kvplan.spec import parse_kv_format
from kvplan.spec.resolve import load_gpu, load_model
from kvplan.spec.roofline import Roofline
from kvplan.workload.request import Request


def tiny_engine(
    kind: str = "paged",
    slots: int = 4096,
    block: int = 16,
    max_len: int = 4096,
    **scheduler: object,
) -> tuple[Engine, SimulatedRunner]:
    model = load_model("llama-3.1-8b")
    roofline = Roofline(model, load_gpu("h100-80gb"), 1, parse_kv_format("bf16"))
    runner = SimulatedRunner(roofline)
    allocator = make_allocator(kind, slots, block, max_len, watermark=0.0)
    return Engine(allocator, runner, SchedulerConfig(**scheduler), max_len), runner


def budget_engine(
    policy: str, budget: int, blocks: int = 16, prompt: int = 3, output: int = 10
) -> Engine:
    roofline = Roofline(
        load_model("llama-3.1-8b"), load_gpu("h100-80gb"), 1, parse_kv_format("bf16")
    )
    allocator = make_allocator(
        "paged",
        blocks * 4,
        4,
        64,
        watermark=0.0,
        policy=PolicySpec(policy, budget, block=4),
        copy_s_per_slot=1.0,
    )
    engine = Engine(allocator, SimulatedRunner(roofline), SchedulerConfig(), 64)
    engine.submit(Request(0, 0.0, prompt, output))
    return engine
