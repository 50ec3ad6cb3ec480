"""Real mode sizes its KV pool from --gpu-memory-utilization on CUDA, as vLLM does less its
activation profiling: utilization x card - what is in use once the model is loaded."""

from __future__ import annotations

import pytest

from kvplan import GIB
from kvplan.core.engine_factory import SizingConfig
from kvplan.real.loaded import CPU_KV_GIB, LoadedModel, cuda_kv_pool_bytes, kv_pool_bytes

torch = pytest.importorskip("torch")


def test_the_pool_is_utilization_of_the_card_less_what_is_in_use() -> None:
    # 80 GiB card, 60 GiB free after loading (20 GiB in use): 0.9 x 80 - 20 = 52 GiB
    assert cuda_kv_pool_bytes(60 * GIB, 80 * GIB, 0.9) == 52 * GIB
    with pytest.raises(
        ValueError, match="gpu_memory_utilization 0.2 leaves no KV memory: 20.00 GiB of 80.00 GiB"
    ):
        cuda_kv_pool_bytes(60 * GIB, 80 * GIB, 0.2)


def loaded(device: str) -> LoadedModel:
    return LoadedModel(model=None, spec=None, device=device, vocab_size=0)  # type: ignore[arg-type]


def test_the_flag_sizes_the_cuda_pool_and_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (60 * GIB, 80 * GIB))
    assert kv_pool_bytes(SizingConfig(gpu_memory_utilization=0.5), loaded("cuda")) == (
        20 * GIB,
        0.5,
    )
    # none given: the engine's own default (vLLM V1 at its newest: 0.92), 0.92 x 80 - 20 = 53.6 GiB
    pool_bytes, utilization = kv_pool_bytes(SizingConfig(), loaded("cuda"))
    assert utilization == 0.92 and pool_bytes == pytest.approx(53.6 * GIB)
    # a fixed size and the CPU default are not a utilization; on CPU the flag has nothing to size
    assert kv_pool_bytes(SizingConfig(kv_cache_gib=3.0), loaded("cuda")) == (3 * GIB, None)
    assert kv_pool_bytes(SizingConfig(), loaded("cpu")) == (CPU_KV_GIB * GIB, None)
    with pytest.raises(ValueError, match="on CPU pass kv_cache_gib"):
        kv_pool_bytes(SizingConfig(gpu_memory_utilization=0.5), loaded("cpu"))


def test_the_pre_run_line_names_the_pool_rule_and_its_simplification() -> None:
    from kvplan.bench.real_cost import RunCost
    from kvplan.real.step_cost import StepCost

    def cost(pool_bytes: float, utilization: float | None) -> RunCost:
        step = StepCost(0.01, 0.002, 1e-5)
        return RunCost(
            10, 1000, 2, 2 * GIB, int(pool_bytes), "cuda", step, {"paged": 30.0}, {"paged": 1.0},
            100, 20, 1.0, utilization,
        )  # fmt: skip

    assert (
        "KV pool 20.00 GiB per optimization (0.9 of the card less what the loaded model uses; "
        "simplified: "
        "vLLM also sets activation memory aside)" in cost(20 * GIB, 0.9).describe()
    )
    assert "of the card" not in cost(GIB, None).describe()
