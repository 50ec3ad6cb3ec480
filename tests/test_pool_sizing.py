"""One pool-sizing path: the max_model_len default, the block count and the eviction policy
the estimator, simulated mode and real mode all take from the same functions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvplan.core.engine_factory import Optimization, SizingConfig, eviction_policy
from kvplan.core.scheduler import SchedulerConfig
from kvplan.engines.pool_sizing import DEFAULT_MAX_MODEL_LEN, max_model_len_for, whole_blocks
from kvplan.sim.factory import size_engine
from kvplan.sizing.capacity import PlanInputs
from kvplan.spec.resolve import load_gpu, load_model


def test_max_model_len_is_the_length_asked_else_the_models_else_the_default() -> None:
    model = load_model("llama-3.1-8b")
    assert max_model_len_for(model, 8192) == 8192
    assert max_model_len_for(model) == model.max_position_embeddings == 131072
    assert (
        max_model_len_for(replace(model, max_position_embeddings=0))
        == DEFAULT_MAX_MODEL_LEN
        == 4096
    )
    assert PlanInputs(model=model, gpu=load_gpu("l4"), context=2048).max_model_len == 2048


def test_whole_blocks_round_down_and_an_empty_pool_holds_none() -> None:
    assert whole_blocks(1000.0, 10.0, 16) == 6  # 1000 / 160 = 6.25
    assert whole_blocks(960.0, 10.0, 16) == 6
    assert whole_blocks(0.0, 10.0, 16) == 0
    assert whole_blocks(-5.0, 10.0, 16) == 0


def test_the_simulated_pool_is_the_capacity_plans_in_whole_blocks() -> None:
    config = SizingConfig(model="llama-3.1-8b", gpu="l4", kv_cache_gib=1.0, max_model_len=4096)
    sizing = size_engine(
        config, SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=4096), Optimization("paged")
    )
    assert sizing.kv_pool_bytes == 2**30
    assert sizing.slot_bytes == 131072  # 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes
    assert sizing.capacity_slots == 8192 == whole_blocks(2**30, 131072, 16) * 16
    assert sizing.max_model_len == 4096


def test_the_eviction_policy_needs_a_budget_above_one_block_and_probes_only_entropy_budget() -> (
    None
):
    asked: list[str] = []

    def split() -> tuple[int, ...]:
        asked.append("split")
        return (64, 192)

    assert eviction_policy(Optimization("paged"), 128, 16, split) is None
    h2o = eviction_policy(Optimization("h2o", policy="h2o"), 128, 16, split)
    assert h2o is not None and (h2o.name, h2o.budget, h2o.block, h2o.layer_budgets) == (
        "h2o",
        128,
        16,
        None,
    )
    assert asked == []
    entropy = eviction_policy(
        Optimization("entropy-budget", policy="entropy-budget"), 128, 16, split
    )
    assert entropy is not None and entropy.layer_budgets == (64, 192) and asked == ["split"]
    for budget in (None, 16):
        with pytest.raises(
            ValueError, match=r"^'h2o' needs kv_budget larger than one block \(16 tokens\)$"
        ):
            eviction_policy(Optimization("h2o", policy="h2o"), budget, 16, split)
