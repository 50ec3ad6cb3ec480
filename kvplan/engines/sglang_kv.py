"""SGLang's KV token pools for the same models vLLM's hybrid manager groups
(kvplan/engines/hybrid_kv.py): one pool at full length, an SWA pool beside it for
sliding-window models, Mamba state slots for linear-attention models.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.spec import KVFormat, ModelSpec


@dataclass(frozen=True)
class SglangKVCache:
    """SGLang's token pools: max_total_num_tokens (the full-attention pool), and for SWA models
    the sliding-window pool; for hybrid linear-attention models the Mamba state slots."""

    max_total_num_tokens: int
    full_tokens: int | None = None
    swa_tokens: int | None = None
    mamba_slots: int | None = None


def sglang_kv_tokens(
    model: ModelSpec,
    fmt: KVFormat,
    tp: int,
    available_bytes_per_gpu: float,
    *,
    swa_full_tokens_ratio: float = 0.8,
    page_size: int = 1,
    mamba_full_memory_ratio: float = 0.9,
    max_mamba_cache_size: int | None = None,
) -> SglangKVCache:
    """SGLang's KV pools from the bytes left for KV on one GPU (sglang/srt/model_executor/
    model_runner.py: profile_max_num_token, set_num_token_hybrid, the Mamba budget split).

    SWA models: the tokens that fit with every layer at full length (cell size of all layers),
    rounded down to page_size, re-divided so the SWA pool is swa_full_tokens_ratio of the full
    pool at the same bytes. SGLang solves this over layer counts (its layers share one shape);
    kvplan weights by bytes, which is the same when the shapes are equal. Linear attention: the
    state pool takes ratio / (1 + ratio) of the memory (max_mamba_cache_size caps the slots), the
    full-attention layers the rest.
    """
    token_groups = model.token_groups
    if model.has_state:
        per_req = model.state_bytes_per_seq(tp)
        budget = available_bytes_per_gpu * mamba_full_memory_ratio / (1 + mamba_full_memory_ratio)
        slots = int(budget // per_req)
        if max_mamba_cache_size is not None:
            slots = min(slots, max_mamba_cache_size)
        cell = sum(g.bytes_per_token(fmt, tp) for g in token_groups)
        tokens = int((available_bytes_per_gpu - slots * per_req) // cell) // page_size * page_size
        return SglangKVCache(tokens, tokens, None, slots)
    cell = sum(g.bytes_per_token(fmt, tp) for g in token_groups)
    tokens = int(available_bytes_per_gpu // cell) // page_size * page_size
    windowed = [g for g in token_groups if g.windowed]
    if not windowed or len(windowed) == len(token_groups):
        return SglangKVCache(tokens)
    swa_bytes = sum(g.bytes_per_token(fmt, tp) for g in windowed)
    full_bytes = cell - swa_bytes
    full = int(tokens * cell / (swa_full_tokens_ratio * swa_bytes + full_bytes))
    swa = int(full * swa_full_tokens_ratio)
    return SglangKVCache(full, full, swa, None)
