"""Eviction policies' kept-token sets and memory model on tiny inputs, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from kvplan.core.policies import (
    PolicySpec,
    held_blocks,
    held_tokens,
    keep_h2o,
    keep_paged,
    keep_snapkv,
    split_budget,
)


def _window_keep(name: str, count: int, budget: int) -> list[int]:
    spec = PolicySpec(name, max(budget, 5))
    return spec.policy.keep(spec, None, [list(range(count))], budget)


def test_sliding_and_streaming_keep_sets() -> None:
    assert _window_keep("sliding-window", 10, 4) == [6, 7, 8, 9]
    assert _window_keep("sliding-window", 3, 4) == [0, 1, 2]
    assert _window_keep("streaming", 10, 6) == [0, 1, 2, 3, 8, 9]  # 4 sinks + the 2 most recent
    assert _window_keep("streaming", 5, 6) == [0, 1, 2, 3, 4]
    assert _window_keep("streaming-abspos", 10, 6) == [0, 1, 2, 3, 8, 9]


def test_h2o_selects_per_kv_head() -> None:
    scores = np.array(
        [
            [5.0, 0.1, 3.0, 0.2, 4.0, 0.3, 0.0, 0.0],  # head 0: heavy 0 and 4
            [0.1, 5.0, 0.2, 4.0, 0.1, 0.3, 0.0, 0.0],
        ]
    )  # head 1: heavy 1 and 3
    assert keep_h2o(scores, 4).tolist() == [
        [0, 4, 6, 7],
        [1, 3, 6, 7],
    ]  # recent 2 + 2 heavy, per head
    assert keep_h2o(scores[:1], 4, recent=1).tolist() == [[0, 2, 4, 7]]
    assert keep_h2o([[1.0, 1.0, 1.0]], 2, recent=0).tolist() == [
        [0, 1]
    ]  # ties keep the earlier token


def test_snapkv_pools_votes_per_head_and_keeps_the_window() -> None:
    votes = np.array(
        [
            [0.0, 0.0, 9.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0],  # 10 earlier tokens, window 2
            [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 9.0, 0.0, 0.0, 0.0],
        ]
    )
    assert keep_snapkv(votes, budget=5, window=2, kernel=3).tolist() == [
        [1, 2, 3, 10, 11],
        [5, 6, 7, 10, 11],
    ]
    assert keep_snapkv(votes, budget=20, window=2).tolist() == [list(range(12))] * 2


def test_paged_eviction_drops_whole_blocks_for_every_head() -> None:
    positions = list(range(12))
    scores = np.array([[9, 9, 9, 9, 1, 1, 1, 1, 5, 5, 5, 5], [9, 9, 9, 9, 1, 1, 1, 1, 5, 5, 5, 5]])
    assert keep_paged(scores, positions, budget=8, block=4) == [0, 1, 2, 3, 8, 9, 10, 11]
    assert keep_paged(scores, positions, budget=4, block=4) == [
        8,
        9,
        10,
        11,
    ]  # the newest block stays


def test_entropy_budget_split() -> None:
    assert split_budget(40, [1.0, 1.0, 2.0]) == [11, 11, 18]
    assert sum(split_budget(37, [0.3, 2.0, 1.1, 0.0])) == 37
    with pytest.raises(ValueError):
        split_budget(10, [1.0, 1.0, 1.0])


def test_policy_specs_validate() -> None:
    with pytest.raises(ValueError, match="unknown policy"):
        PolicySpec("lru")
    with pytest.raises(ValueError, match="token budget"):
        PolicySpec("h2o")
    with pytest.raises(ValueError, match="observation window"):
        PolicySpec("snapkv", 8)


def test_memory_model_counts_by_hand() -> None:
    # Strict budgets: 10 tokens written, budget 6 -> 6 held by every budgeted policy.
    for name in ("sliding-window", "streaming", "h2o"):
        assert held_tokens(PolicySpec(name, 6), 5, 10) == 6
    # SnapKV: a 40-token prompt compressed to 16 once, then 10 generated tokens all kept.
    assert [held_tokens(PolicySpec("snapkv", 16), 40, n) for n in (39, 40, 50)] == [39, 16, 26]
    # paged-eviction, 16-token blocks, budget 32: 50 tokens -> drop 2 old blocks -> 18 held.
    assert held_tokens(PolicySpec("paged-eviction", 32), 0, 50) == 18
    # A 32-token window at 100 tokens covers positions 68..99: blocks 4, 5, 6 of 16.
    assert held_blocks(PolicySpec("sliding-window", 32), 0, 100, 16) == 3
    # StreamingLLM keeps the sink block as well: positions 0..3 and 72..99 -> blocks 0, 4, 5, 6.
    assert held_blocks(PolicySpec("streaming", 32), 0, 100, 16) == 4
    assert held_blocks(PolicySpec("h2o", 32), 0, 100, 16) == 2  # compacted per head
