"""The vLLM paper's memory-waste figures, reproduced with kvplan's engine.

Kwon et al., SOSP'23: OPT-13B on one A100-40GB with about 12 GB of KV cache, ShareGPT
requests. Fig. 2 (token states as a share of KV memory): Orca-Max 20.4%, Orca-Pow2 26.8%,
Orca-Oracle 38.2%, vLLM 96.3%. Fig. 13a (mean batched requests at the same rate): 7.00,
9.81, 13.62, 30.42. Measured figures and the length distribution: docs/reproduction.md.
"""

from __future__ import annotations

import pytest

from kvplan.bench import BenchConfig, SizingConfig, run_matrix
from kvplan.core.scheduler import SchedulerConfig
from kvplan.workload import make_workload

# the paper's engine, not today's vLLM defaults: kvplan's plain batch limits, datasheet-speed steps
CONFIG = BenchConfig(
    SizingConfig(model="opt-13b", gpu="a100-40gb", kv_cache_gib=11.2, max_model_len=2048),
    scheduler=SchedulerConfig(),
    step_model="roofline",
)
ALLOCATORS = ["contiguous-max", "contiguous-oracle", "paged"]


def run(num_requests: int) -> dict[str, dict]:
    requests = make_workload("sharegpt", num_requests, rate=20, seed=0, max_model_len=2048)
    return {r.optimization: r.metrics for r in run_matrix(CONFIG, requests, ALLOCATORS)}


def test_memory_waste_split_matches_the_paper() -> None:
    m = run(1000)
    assert m["paged"]["token_states_of_reserved"] >= 0.96  # paper: 96.3%
    assert 0.18 <= m["contiguous-max"]["token_states_share"] <= 0.28  # paper: 20.4%
    # Ours is higher than the paper's 38.2%: the first-fit allocator coalesces holes.
    assert 0.38 <= m["contiguous-oracle"]["token_states_share"] <= 0.50
    assert m["contiguous-max"]["running_mean"] == pytest.approx(7.00, abs=0.3)  # paper: 7.00
    assert m["contiguous-oracle"]["running_mean"] == pytest.approx(13.62, abs=1.0)  # paper: 13.62
    # 1,000 requests include a drain tail that lowers paged's mean more than oracle's.
    assert m["paged"]["running_mean"] / m["contiguous-oracle"]["running_mean"] >= 1.9


@pytest.mark.slow
def test_paged_sustains_twice_the_concurrency_of_oracle_at_steady_state() -> None:
    m = run(4000)
    assert (
        m["paged"]["running_mean"] / m["contiguous-oracle"]["running_mean"] >= 2.0
    )  # paper: 2.23x
