"""The serving engines kvplan models, one class each: vLLM's V0 and V1 engines and SGLang.

Each class holds what tells its engine apart where kvplan chooses behaviour: the batch limits
and memory share it starts with when none is given (release by release, from
engine_releases.py and sglang_defaults.py), the flags a user writes, whether its steps overlap
the CPU's scheduling with the GPU, and how its KV pool is counted. The generation name
('vllm-v0', 'vllm-v1', 'sglang') is how a setting, a record and a log name one; `serving_engine`
turns that name into its class, and nothing else compares it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from kvplan.engines import sglang_defaults
from kvplan.engines.engine_releases import (
    CUDA_GRAPHS_IN_BUDGET,
    HIGH_END_GIB,
    LARGEST_BATCH_DEFAULTS,
    LARGEST_GIB,
    LONG_CONTEXT,
    RANGE_RATIO_SYMMETRIC,
    UTILIZATION_092,
    V0_CHUNK_BUDGET,
    V0_LONG_CONTEXT_CHUNKED,
    V1_DEFAULTS_BY_MEMORY,
    V1_DEFAULTS_NOT_A100,
    V1_SEQS_BY_DEVICE,
    BatchDefaults,
    engine_generation,
)
from kvplan.engines.scheduling_rules import (
    ASYNC_SCHEDULING_FROM,
    KVPLAN_RULES,
    SchedulingRules,
    vllm_v1_rules,
)
from kvplan.engines.versions import Version, on_or_after


class ServingEngine(ABC):
    """One serving engine generation: what kvplan needs to know to size and schedule as it does."""

    # the name settings, records and logs use
    generation: ClassVar[str]
    # the engine as a user names it (--engine) and aiconfigurator's backend for it
    family: ClassVar[str]
    # the engine in words
    label: ClassVar[str]
    # the memory rules of the newest release, in words (explain's engine_model)
    rules: ClassVar[str]
    utilization_flag: ClassVar[str] = "--gpu-memory-utilization"
    tp_flag: ClassVar[str] = "--tensor-parallel-size"
    # --kv-cache-dtype's value for an FP8 (E4M3) KV cache
    fp8_kv_dtype: ClassVar[str] = "fp8"
    # tokens per page of the KV pool: vLLM allocates blocks, SGLang single tokens
    pages_in_blocks: ClassVar[bool] = True
    # whether decode steps replay captured CUDA graphs by default
    captures_cuda_graphs: ClassVar[bool] = True

    @abstractmethod
    def batch_defaults(
        self,
        version: Version | None,
        gpu_memory_gib: float,
        gpu_name: str,
        max_model_len: int,
        offline: bool = False,
    ) -> BatchDefaults:
        """The scheduler limits the engine starts with on this GPU when none is given
        (offline: vLLM's LLM class, as `vllm bench throughput` / `latency` run it)."""

    @abstractmethod
    def default_utilization(
        self, version: Version | None, memory_gib: float | None = None, tp: int = 1
    ) -> float:
        """The share of GPU memory the engine takes when none is given."""

    def overlaps_scheduling(self, version: Version | None) -> bool:
        """Whether the CPU schedules step N + 1 while the GPU runs step N by default."""
        return False

    def usable_bytes(self, total: Any, non_torch: Any, utilization: Any) -> Any:
        """The memory the engine's share gives (numbers or numpy arrays alike): vLLM's
        gpu_memory_utilization is of the GPU's total memory."""
        return total * utilization

    def scheduling_rules(self, version: Version | None) -> SchedulingRules:
        """The scheduler rules a simulated run follows: kvplan's own unless the engine's are
        reproduced step for step (vLLM V1's)."""
        return KVPLAN_RULES

    def page_tokens(self, block_size: int) -> int:
        """Tokens one page of the KV pool holds."""
        return block_size if self.pages_in_blocks else 1

    def range_ratio_is_floor(self, version: Version | None) -> bool:
        """Whether the release's benchmark client reads --random-range-ratio as a floor."""
        return False

    def description(self, version: Version | None) -> str:
        """The memory rules a release gets, in words; `rules` for the newest."""
        if version is None:
            return self.rules
        return self.release_rules(version, "v" + ".".join(map(str, version)))

    @abstractmethod
    def release_rules(self, version: Version, release: str) -> str:
        """The memory rules of one release (written `release`, as v0.8.5), in words."""


class VllmEngine(ServingEngine):
    """vLLM, either engine generation."""

    family: ClassVar[str] = "vllm"

    def default_utilization(
        self, version: Version | None, memory_gib: float | None = None, tp: int = 1
    ) -> float:
        return 0.9

    def range_ratio_is_floor(self, version: Version | None) -> bool:
        return version is not None and version < RANGE_RATIO_SYMMETRIC


class VllmV0Engine(VllmEngine):
    generation: ClassVar[str] = "vllm-v0"
    label: ClassVar[str] = "vLLM V0"
    rules: ClassVar[str] = (
        "vLLM V0 engine (<= 0.10; profiling of worker.py, graphs outside the budget)"
    )
    captures_cuda_graphs: ClassVar[bool] = False

    def batch_defaults(
        self,
        version: Version | None,
        gpu_memory_gib: float,
        gpu_name: str,
        max_model_len: int,
        offline: bool = False,
    ) -> BatchDefaults:
        chunked = max_model_len > LONG_CONTEXT and on_or_after(version, V0_LONG_CONTEXT_CHUNKED)
        return BatchDefaults(256, V0_CHUNK_BUDGET if chunked else max(max_model_len, 2048), chunked)

    def release_rules(self, version: Version, release: str) -> str:
        return (
            f"vLLM V0 engine, {release} rules (profiling of worker.py, graphs outside the budget)"
        )


class VllmV1Engine(VllmEngine):
    generation: ClassVar[str] = "vllm-v1"
    label: ClassVar[str] = "vLLM V1"
    rules: ClassVar[str] = "vLLM V1 engine (>= 0.20: CUDA-graph memory profiled into the budget)"

    def batch_defaults(
        self,
        version: Version | None,
        gpu_memory_gib: float,
        gpu_name: str,
        max_model_len: int,
        offline: bool = False,
    ) -> BatchDefaults:
        name = gpu_name.lower()
        if on_or_after(version, V1_DEFAULTS_BY_MEMORY):
            large = gpu_memory_gib >= HIGH_END_GIB and not (
                "a100" in name and on_or_after(version, V1_DEFAULTS_NOT_A100)
            )
            seqs = 1024 if large else 256
        else:
            large = "h100" in name or "h200" in name
            seqs = 1024 if large or not on_or_after(version, V1_SEQS_BY_DEVICE) else 256
        tokens = (16384 if large else 8192) if offline else (8192 if large else 2048)
        if gpu_memory_gib >= LARGEST_GIB and on_or_after(version, LARGEST_BATCH_DEFAULTS):
            tokens = 16384
        return BatchDefaults(seqs, tokens, True)

    def default_utilization(
        self, version: Version | None, memory_gib: float | None = None, tp: int = 1
    ) -> float:
        return 0.92 if on_or_after(version, UTILIZATION_092) else 0.9

    def overlaps_scheduling(self, version: Version | None) -> bool:
        return on_or_after(version, ASYNC_SCHEDULING_FROM)

    def scheduling_rules(self, version: Version | None) -> SchedulingRules:
        return vllm_v1_rules(version)

    def graphs_in_budget(self, version: Version | None) -> bool:
        """Whether the profiling run counts the CUDA graphs' memory in the KV budget."""
        return on_or_after(version, CUDA_GRAPHS_IN_BUDGET)

    def release_rules(self, version: Version, release: str) -> str:
        graphs = (
            "CUDA-graph memory profiled into the budget"
            if self.graphs_in_budget(version)
            else "CUDA graphs captured outside the budget"
        )
        return f"vLLM V1 engine, {release} rules ({graphs})"


class SGLangEngine(ServingEngine):
    generation: ClassVar[str] = "sglang"
    family: ClassVar[str] = "sglang"
    label: ClassVar[str] = "SGLang"
    rules: ClassVar[str] = "SGLang (mem_fraction_static of total memory, minus weights)"
    utilization_flag: ClassVar[str] = "--mem-fraction-static"
    tp_flag: ClassVar[str] = "--tp"
    fp8_kv_dtype: ClassVar[str] = "fp8_e4m3"
    pages_in_blocks: ClassVar[bool] = False

    def batch_defaults(
        self,
        version: Version | None,
        gpu_memory_gib: float,
        gpu_name: str,
        max_model_len: int,
        offline: bool = False,
    ) -> BatchDefaults:
        # max_running_requests also depends on the pool (sglang_defaults.max_running_requests)
        return BatchDefaults(
            4096, sglang_defaults.chunked_prefill_size(version, gpu_memory_gib), True
        )

    def default_utilization(
        self, version: Version | None, memory_gib: float | None = None, tp: int = 1
    ) -> float:
        if not memory_gib:
            return 0.88
        return sglang_defaults.mem_fraction_static(version, memory_gib, tp)

    def overlaps_scheduling(self, version: Version | None) -> bool:
        return on_or_after(version, sglang_defaults.OVERLAP_SCHEDULER_FROM)

    def usable_bytes(self, total: Any, non_torch: Any, utilization: Any) -> Any:
        # mem_fraction_static is of the memory free once torch.distributed / NCCL started (the
        # non-torch part), which stays in use besides
        return (total - non_torch) * utilization + non_torch

    def release_rules(self, version: Version, release: str) -> str:
        return f"SGLang {release} (mem_fraction_static of total memory, minus weights)"


SERVING_ENGINES: dict[str, ServingEngine] = {
    engine.generation: engine for engine in (VllmV1Engine(), VllmV0Engine(), SGLangEngine())
}


def serving_engine(engine: str | None, version: str | None = None) -> ServingEngine:
    """The engine a name gives: a generation ('vllm-v0', 'vllm-v1', 'sglang') or an engine
    ('vllm', 'sglang') whose generation the release picks (engine_releases.engine_generation)."""
    return SERVING_ENGINES[engine_generation(engine, version)]


def is_vllm(engine: str | None) -> bool:
    """Whether a name a run or a table carries is vLLM's (no name: the default engine, vLLM);
    a name kvplan does not model is not."""
    name = (engine or VllmEngine.family).strip().lower()
    known = name == VllmEngine.family or name in SERVING_ENGINES
    return known and isinstance(serving_engine(name), VllmEngine)
