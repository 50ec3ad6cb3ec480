"""`kvplan explain` on a startup log of vLLM's CPU backend (kvplan/engines/cpu_kv.py has its rules).

A CPU worker prints its KV memory on its NUMA node ("Auto set" or "Explicitly set"), a
num_gpu_blocks override where one is set, and "CPU KV cache size" / "Maximum concurrency".
It prints no block size (the engine's config line leaves it out), so where no argument line
shows it, it is the size among those vLLM's CPU attention runs (multiples of 32 up to 256)
that gives the logged figures, else vLLM CPU's default. Every figure is explained as the
server saw it; kvplan's own (bytes per token, its prediction of the tokens from the logged KV
memory) stand beside it, never in its place.
"""

from __future__ import annotations

import math

from kvplan import GIB, cdiv
from kvplan.engines.cpu_kv import (
    BLOCK_MULTIPLE,
    DEEPSEEK_V4_BLOCK_SIZE,
    PRINT_PRECISION_GIB,
    RUNTIME_OVERHEAD_GIB,
    cpu_block_size,
    cpu_kv_cache,
    uses_mla,
)
from kvplan.engines.engine_releases import parse_version
from kvplan.engines.hybrid_kv import VllmKVCache
from kvplan.logs.log_setup import ServerSetup, stage_layers_share
from kvplan.spec import parse_kv_format
from kvplan.spec.server_log import ServerLog

CANDIDATE_BLOCKS = tuple(range(BLOCK_MULTIPLE, DEEPSEEK_V4_BLOCK_SIZE + 1, BLOCK_MULTIPLE))
KV_RULES = {
    "explicit": "set by VLLM_CPU_KVCACHE_SPACE (whole GiB) or --kv-cache-memory-bytes",
    "auto": "vLLM's auto rule: gpu_memory_utilization x the node's memory, less the worker's "
    "RSS (weights, Python, torch and vLLM, what the warm-up left)",
}


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


class _Sizing:
    """The logged CPU figures against one block size, with the model where kvplan knows it."""

    def __init__(self, log: ServerLog, setup: ServerSetup, block_size: int) -> None:
        self.log, self.setup, self.block_size = log, setup, block_size
        self.max_len = setup.max_model_len or 0
        model = setup.model
        self.per_token: float | None = None
        if model is not None:
            fmt = parse_kv_format(setup.kv_dtype, model)
            share = stage_layers_share(model, setup.pp)
            self.per_token = model.kv_bytes_per_token(fmt, setup.tp) * share

    def cache(self, kv_bytes: float) -> VllmKVCache | None:
        model = self.setup.model
        if model is None or not self.max_len:
            return None
        fmt = parse_kv_format(self.setup.kv_dtype, model)
        return cpu_kv_cache(
            model,
            fmt,
            self.setup.tp,
            kv_bytes,
            self.max_len,
            self.block_size,
            parse_version(self.log.version),
            self.log.max_num_batched_tokens,
        )

    def blocks_per_request(self) -> int | None:
        """Blocks one max_model_len request needs (full attention where the model is unknown)."""
        cache = self.cache(0.0)
        if cache is not None:
            return cache.blocks_per_request
        return cdiv(self.max_len, self.block_size) if self.max_len else None

    def tokens_for_blocks(self, blocks: int) -> int | None:
        """'CPU KV cache size' for a pool of `blocks` (vLLM: int(concurrency x max_model_len))."""
        per_request = self.blocks_per_request()
        return int(blocks / per_request * self.max_len) if per_request else None

    def block_range(self, kv_gib: float) -> tuple[int, int] | None:
        """Blocks the KV memory gives at kvplan's size, the log's two-decimal rounding either
        way."""
        cache = self.cache(0.0)
        if cache is None:
            return None
        low, high = (
            max(0.0, kv_gib + d) * GIB for d in (-PRINT_PRECISION_GIB, PRINT_PRECISION_GIB)
        )
        return int(low // cache.block_bytes), int(high // cache.block_bytes)

    def agrees(self) -> bool:
        """Whether this block size gives every figure the log printed."""
        log = self.log
        tokens, override, kv = log.cpu_kv_cache_tokens, log.num_gpu_blocks_override, log.cpu_kv_gib
        if (
            override is not None
            and tokens is not None
            and self.tokens_for_blocks(override) != tokens
        ):
            return False
        blocks = self.block_range(kv) if kv is not None else None
        if blocks is None:
            return True
        if override is not None:
            before = log.blocks_before_override
            return before is None or blocks[0] <= before <= blocks[1]
        if tokens is None:
            return True
        low, high = (self.tokens_for_blocks(count) or 0 for count in blocks)
        return low <= tokens <= high


def cpu_block_size_of(log: ServerLog, setup: ServerSetup) -> tuple[int, str]:
    """The block size the server ran with and where it comes from."""
    if log.block_size is not None:
        return log.block_size, "logged"
    model = setup.model
    if model is not None and (uses_mla(model) or model.model_type == "deepseek_v4"):
        size, why = cpu_block_size(model, None)
        return size, f"not in the log; {why}"
    fits = [size for size in CANDIDATE_BLOCKS if _Sizing(log, setup, size).agrees()]
    default = cpu_block_size(model, None)[0] if model is not None else 128
    if len(fits) == 1:
        return fits[0], "not in the log; the one block size that gives the logged figures"
    if default in fits or not fits:
        other = "" if fits else " (no block size gives the logged figures)"
        return default, f"not in the log; vLLM CPU's default{other}"
    return fits[0], f"not in the log; the smallest of {', '.join(map(str, fits))}, which all fit"


def cpu_memory(log: ServerLog, setup: ServerSetup) -> tuple[dict, dict | None]:
    """The node's memory as the worker logged it, and kvplan's model of the auto rule (None
    without a model)."""
    total, requested = log.cpu_node_total_gib, log.cpu_requested_gib
    logged = {
        "node_total": total,
        "requested": requested,
        "utilization_implied": _round(requested / total, 4) if requested and total else None,
        "non_kv": log.cpu_non_kv_gib,
        "kv": log.cpu_kv_gib,
    }
    model = setup.model
    if model is None or total is None or log.cpu_kv_source != "auto":
        return logged, None
    weights = model.weight_bytes(setup.weight_dtype) / setup.tp / GIB
    asked = math.ceil(total * GIB * setup.utilization) / GIB
    consumed = weights + RUNTIME_OVERHEAD_GIB
    return logged, {
        "node_total": total,
        "requested": _round(asked),
        "weights": _round(weights, 4),
        "non_kv": _round(consumed),
        "kv": _round(asked - consumed),
    }


def _kv(log: ServerLog, sizing: _Sizing) -> tuple[dict, dict | None]:
    """The KV figures: what the log implies per token beside kvplan's size, and kvplan's
    prediction of the logged tokens (from the override where one decided the blocks, else
    from the logged KV memory)."""
    tokens, override, kv_gib = log.cpu_kv_cache_tokens, log.num_gpu_blocks_override, log.cpu_kv_gib
    size = sizing.block_size
    per_request = sizing.blocks_per_request()
    from_memory = log.blocks_before_override if override is not None else None
    if from_memory is None and tokens is not None and per_request and sizing.max_len:
        from_memory = round(tokens * per_request / sizing.max_len)  # inverts vLLM's token figure
    implied = kv_gib * GIB / (from_memory * size) if kv_gib and from_memory else None
    model = sizing.setup.model
    windowed = model is not None and bool(model.has_windows or model.state_bytes_per_seq())
    note, agrees = "", None
    if model is None:
        note = "pass --model NAME to compare bytes per token and predict the tokens"
    blocks = sizing.block_range(kv_gib) if kv_gib is not None else None
    if blocks is not None and from_memory is not None:
        agrees = blocks[0] <= from_memory <= blocks[1]
        note = (
            f"kvplan's {sizing.per_token or 0:,.0f} B per token gives {blocks[0]:,}-{blocks[1]:,} "
            f"blocks of {size} for {kv_gib} GiB (the log's rounding either way); the KV memory "
            f"gave {from_memory:,}"
        )
    if windowed:
        note = (
            "hybrid/windowed model: vLLM derives the tokens from concurrency x max_model_len, "
            "so KV memory / tokens is not a per-token cost; " + note
        )
    decided = None
    if override is not None:
        decided = (
            f"num_gpu_blocks_override={override:,} decided the KV cache, not the KV memory: "
            f"{override:,} blocks of {size} tokens, {(override - 1) * size:,} of them usable "
            "besides vLLM's null block"
        )
    kv = {
        "tokens": tokens,
        "blocks": override if override is not None else from_memory,
        "blocks_from_kv_memory": from_memory,
        "num_gpu_blocks_override": override,
        "decided_by_override": decided,
        "implied_bytes_per_token_per_gpu": None if windowed else _round(implied, 1),
        "kvplan_bytes_per_token_per_gpu": _round(sizing.per_token, 1),
        "agrees": agrees,
        "note": note,
    }
    cache = sizing.cache(0.0)
    if cache is None or (override is None and kv_gib is None):
        return kv, None
    if override is not None:
        predicted_tokens = sizing.tokens_for_blocks(override)
        basis, blocks_predicted = "the num_gpu_blocks_override", override
        allocated = override * cache.block_bytes
    else:
        assert kv_gib is not None
        point = sizing.cache(kv_gib * GIB)
        assert point is not None
        predicted_tokens, blocks_predicted = point.reported_tokens, point.num_blocks
        basis, allocated = "the logged KV memory", point.pool_bytes
    per_request = cache.blocks_per_request
    prediction = {
        "basis": basis,
        "block_size": size,
        "num_blocks": blocks_predicted,
        "kv_cache_tokens": predicted_tokens,
        "usable_tokens": (blocks_predicted - 1) * size if blocks_predicted else 0,
        "max_concurrency": round(blocks_predicted / per_request, 4),
        "allocated_kv_bytes": allocated,
        # what the logged KV memory gives, its two-decimal rounding either way
        "kv_cache_tokens_range": [sizing.tokens_for_blocks(b) for b in blocks]
        if blocks and override is None
        else None,
        "error_pct": round((predicted_tokens - tokens) / tokens * 100, 2)
        if tokens and predicted_tokens is not None
        else None,
    }
    return kv, prediction


def explain_cpu(log: ServerLog, setup: ServerSetup, schema: str) -> dict:
    """The kvplan.explain/1 record of a CPU server's log (README: its CPU fields)."""
    block_size, block_source = cpu_block_size_of(log, setup)
    sizing = _Sizing(log, setup, block_size)
    memory, modeled = cpu_memory(log, setup)
    kv, prediction = _kv(log, sizing)
    node = f"CPU (NUMA node {log.cpu_node})" if log.cpu_node is not None else "CPU"
    inputs = {
        "model": log.model,
        "model_profile": setup.model_match,
        "model_profile_note": setup.model_note,
        "device": node,
        "tensor_parallel_size": log.tensor_parallel_size,
        "pipeline_parallel_size": log.pipeline_parallel_size,
        "max_model_len": log.max_model_len,
        "kv_cache_dtype": log.kv_cache_dtype,
        "block_size": log.block_size,
        "max_num_batched_tokens": log.max_num_batched_tokens,
        "max_num_seqs": log.max_num_seqs,
        "enforce_eager": log.enforce_eager,
        "dtype": log.dtype,
    }
    assumed: dict[str, object] = {}
    if log.block_size is None:
        assumed["block_size"] = block_size
    if log.cpu_kv_source == "auto" and log.cpu_requested_gib is None:
        assumed["gpu_memory_utilization"] = setup.utilization
    source = log.cpu_kv_source
    missing = None
    if setup.model is None:
        why = (
            f"kvplan cannot size the model '{log.model}'" if log.model else "the log names no model"
        )
        missing = (
            f"not computed: kvplan's bytes per token and its prediction of the KV cache tokens, "
            f"as {why}; pass --model NAME"
        )
    return {
        "schema": schema,
        "engine": log.engine,
        "engine_generation": log.engine_generation,
        "version": log.version,
        "device": "cpu",
        "inputs": inputs,
        "assumed": assumed,
        "block_size_source": block_source,
        "cpu": {
            "node": log.cpu_node,
            "kv_memory_source": source,
            "kv_memory_rule": KV_RULES.get(source or "", "the log does not say how"),
        },
        "memory_gib": memory,
        "memory_model_gib": modeled,
        "kv": kv,
        "prediction": prediction,
        "what_ifs": [],
        "not_computed": missing,
        "max_concurrency": log.max_concurrency,
        "refusal_max_tokens": log.max_tokens_in_kv_from_error,
        "recovered": log.recovered(),
    }
