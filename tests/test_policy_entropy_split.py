"""entropy-budget in a paged pool whose one block table serves every layer: each sequence
holds its largest layer budget, the smaller layers' tail slots counted as internal
fragmentation (kvplan.core.policies.slots). Small cases computed by hand."""

from __future__ import annotations

import pytest

from kvplan.core.metrics import pool_split
from kvplan.core.policies import PolicySpec, held_blocks, held_tokens, used_tokens

SPLIT = PolicySpec("entropy-budget", 8, block=4, layer_budgets=(4, 12))  # two layers, 8 on average


def test_split_memory_model_by_hand() -> None:
    # 13 tokens written: layer 0 keeps 4, layer 1 keeps 12; the table holds 12 slots in each
    assert held_tokens(SPLIT, 6, 13) == 12 and used_tokens(SPLIT, 6, 13) == 8.0
    assert held_blocks(SPLIT, 6, 13, 4) == 3
    # before any layer is full, both hold everything: no slot unused
    assert held_tokens(SPLIT, 6, 3) == 3 and used_tokens(SPLIT, 6, 3) == 3.0
    assert used_tokens(SPLIT, 6, 6) == 5.0  # layer 0 at 4, layer 1 at 6
    # without a probed split (simulated runs): every layer the budget
    even = PolicySpec("entropy-budget", 8, block=4)
    assert held_tokens(even, 6, 13) == used_tokens(even, 6, 13) == 8


def test_unused_tail_slots_are_internal_fragmentation() -> None:
    from kvplan.core.engine import Engine
    from kvplan.core.kv import make_allocator
    from kvplan.core.scheduler import SchedulerConfig
    from kvplan.sim.runner import SimulatedRunner
    from kvplan.spec import parse_kv_format
    from kvplan.spec.resolve import load_gpu, load_model
    from kvplan.spec.roofline import Roofline
    from kvplan.workload.request import Request

    roofline = Roofline(
        load_model("llama-3.1-8b"), load_gpu("h100-80gb"), 1, parse_kv_format("bf16")
    )
    allocator = make_allocator("paged", 64, 4, 64, watermark=0.0, policy=SPLIT)
    engine = Engine(allocator, SimulatedRunner(roofline), SchedulerConfig(), 64)
    engine.submit(Request(0, 0.0, 6, 12))
    for _ in range(8):  # the 6-token prompt, then 7 decode steps: 13 tokens written
        engine.step()
    seq = engine.scheduler.running[0]
    assert (
        seq.num_computed == 13 and len(seq.block_table) == 3
    )  # 12 slots: the largest layer's budget
    used, _, internal, *_ = pool_split(allocator, engine.scheduler)
    # token states: the mean over layers (4 + 12) / 2 = 8; layer 0's 8 unused slots, i.e.
    # 4 slots of every layer, are internal fragmentation
    assert (used, internal) == (8, 4)
    assert (
        allocator.evicted_slots == 5 and allocator.budget.copied_total == 5
    )  # (9 + 1) / 2 dropped


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(name="h2o", budget=8, layer_budgets=(4, 12)), "belong to entropy-budget"),
        (dict(name="entropy-budget", budget=8, layer_budgets=(4, 11)), "sum to kv_budget x layers"),
    ],
)
def test_bad_splits_are_refused(kwargs, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PolicySpec(**kwargs)
