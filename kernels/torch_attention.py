"""Vectorized torch attention over paged KV for CPU users: decode and prefill alike.

Every sequence's queries (padded to the longest) attend to the keys they can see, gathered
from the block pool through the block table in one indexed read per cache and dequantized
to fp32; GQA groups share a KV head through a reshape (no repeat). Keys start at the
earliest position any of the sequence's queries may see (window/chunk), so a windowed layer
gathers only the window. Memory is about sequences x queries x keys x heads fp32 scores,
fine on CPU; CUDA users get the Triton kernels.
"""

from __future__ import annotations

import torch

from .quant import CacheFormat, dequantize
from .variant import AttentionVariant


def paged_attention_varlen(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                           block_tables: torch.Tensor, query_start: torch.Tensor, seq_lens: torch.Tensor,
                           scale: float, cf: CacheFormat, k_scale: torch.Tensor | float | None,
                           v_scale: torch.Tensor | float | None, variant: AttentionVariant) -> torch.Tensor:
    """query [num_tokens, H, D] -> same shape and dtype (semantics of `reference.paged_prefill_reference`)."""
    num_tokens, num_heads, head_dim = query.shape
    num_seqs = seq_lens.shape[0]
    out = torch.zeros_like(query)
    if num_tokens == 0 or num_seqs == 0:
        return out
    device = query.device
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    group = num_heads // num_kv_heads
    query_start = query_start.to(device=device, dtype=torch.long)
    seq_lens = seq_lens.to(device=device, dtype=torch.long)
    q_lens = query_start[1:] - query_start[:-1]
    max_q = int(q_lens.max())
    qi = torch.arange(max_q, device=device)
    q_valid = qi[None, :] < q_lens[:, None]  # [S, Lq]
    q_pos = (seq_lens - q_lens)[:, None] + qi[None, :]
    lo = _first_key(q_pos, variant)  # [S, Lq]
    base = torch.where(q_valid, lo, seq_lens[:, None]).amin(dim=1)  # first key any query sees
    max_k = int((seq_lens - base).clamp(min=0).max())
    ki = torch.arange(max_k, device=device)
    k_pos = base[:, None] + ki[None, :]  # [S, Lk]
    k_valid = k_pos < seq_lens[:, None]
    blocks = torch.where(k_valid, block_tables.to(device).long().gather(1, (k_pos // block_size).clamp(
        max=block_tables.shape[1] - 1)), 0)
    offsets = torch.where(k_valid, k_pos % block_size, 0)

    def gather(cache: torch.Tensor, s: torch.Tensor | float | None) -> torch.Tensor:
        token_scales = s[blocks, offsets] if cf.per_token_scales else s
        return dequantize(cache[blocks, offsets], token_scales, cf, head_dim)  # [S, Lk, Hkv, D] fp32

    k, v = gather(key_cache, k_scale), gather(value_cache, v_scale)
    rows = (query_start[:-1, None] + qi[None, :]).clamp(max=num_tokens - 1)
    q = query[rows].float().reshape(num_seqs, max_q, num_kv_heads, group, head_dim)
    scores = torch.einsum("sqkgd,stkd->skgqt", q, k) * scale
    if variant.softcap is not None:
        scores = torch.tanh(scores / variant.softcap) * variant.softcap
    allowed = (k_valid[:, None, :] & (k_pos[:, None, :] <= q_pos[:, :, None])
               & (k_pos[:, None, :] >= lo[:, :, None]))  # [S, Lq, Lk]
    scores = scores.masked_fill(~allowed[:, None, None], float("-inf"))
    if variant.sinks is not None:
        sinks = variant.sinks.to(device=device, dtype=torch.float32).reshape(1, num_kv_heads, group, 1, 1)
        scores = torch.cat([scores, sinks.expand(*scores.shape[:-1], 1)], dim=-1)
    # A query that sees no key has only -inf scores; softmax gives NaN there, and we want zeros.
    probs = torch.softmax(scores, dim=-1)[..., :max_k].nan_to_num(0.0)
    attended = torch.einsum("skgqt,stkd->sqkgd", probs, v).reshape(num_seqs, max_q, num_heads, head_dim)
    out[rows[q_valid]] = attended[q_valid].to(query.dtype)
    return out


def _first_key(position: torch.Tensor, variant: AttentionVariant) -> torch.Tensor:
    lo = torch.zeros_like(position)
    if variant.sliding_window:
        lo = torch.maximum(lo, position - variant.sliding_window + 1)
    if variant.chunk_size:
        lo = torch.maximum(lo, torch.div(position, variant.chunk_size, rounding_mode="floor") * variant.chunk_size)
    return lo
