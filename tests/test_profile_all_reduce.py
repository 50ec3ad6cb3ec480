"""The all-reduce timing `kvplan profile` runs at tp > 1 on CUDA (NCCL), exercised on CPU
tensors with the gloo backend: tp spawned ranks, one time per token count."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")


@pytest.mark.slow  # spawns two processes that each import torch
def test_all_reduce_times_each_token_count_across_ranks() -> None:
    from kvplan.real.all_reduce_timing import all_reduce_seconds

    seconds = all_reduce_seconds(8, 2, [1, 4], "fp32", repeats=1, backend="gloo")
    assert len(seconds) == 2 and all(0 < s < 1 for s in seconds)
