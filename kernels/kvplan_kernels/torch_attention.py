"""Vectorized torch attention over paged KV for CPU users: decode and prefill alike.

The batch is cut into buckets of query tiles with similar key ranges (varlen_plan.py), so
padding stays small. Per bucket, K/V are read from the block pool in one `index_select` of
whole blocks per cache (a contiguous copy per block, far cheaper than indexing token by
token), dequantized to fp32. GQA groups share their KV head by becoming extra query rows
of it (no repeat). Keys start at the block holding the earliest position a tile's queries
may see (window/chunk), so a windowed layer gathers only the window.

Decode at small KV heads x head_dim packs all KV heads into one gemm per sequence
(`_packed_heads_decode`).

Plain attention, windows and chunks (a mask) run through torch's fused
`scaled_dot_product_attention`; softcap and sinks change the scores themselves and take
the explicit matmul + softmax path. Memory is about sequences x queries x keys x heads
fp32 scores, fine on CPU; CUDA users get the Triton kernels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .quant import CacheFormat, dequantize
from .variant import AttentionVariant
from .varlen_plan import BucketPlan, varlen_plan


def paged_attention_varlen(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    cf: CacheFormat,
    k_scale: torch.Tensor | float | None,
    v_scale: torch.Tensor | float | None,
    variant: AttentionVariant,
    plan_cache: dict | None = None,
) -> torch.Tensor:
    """query [num_tokens, H, D] -> same shape and dtype (semantics of
    `reference.paged_prefill_reference`).

    plan_cache: a dict the caller keeps for one batch of tables and lengths (one model step):
    the index work, which depends on them and the variant's window/chunk but not on a
    layer's K/V, is done by the first layer and reused by the others, and so are the
    buffers the K/V blocks are gathered into.
    """
    num_tokens = query.shape[0]
    if num_tokens == 0 or seq_lens.shape[0] == 0:
        return torch.zeros_like(query)
    block_size = key_cache.shape[1]
    key = (block_size, num_tokens, variant.window, variant.chunk)
    plans = plan_cache.get(key) if plan_cache is not None else None
    if plans is None:
        plans = varlen_plan(block_tables, query_start, seq_lens, block_size, variant, query.device)
        if plan_cache is not None:
            plan_cache[key] = plans
    out = torch.zeros_like(query)
    for index, plan in enumerate(plans):
        attended = _bucket_attention(
            query,
            key_cache,
            value_cache,
            scale,
            cf,
            k_scale,
            v_scale,
            variant,
            plan,
            _Scratch(plan_cache, index),
        )
        out.index_copy_(0, plan.out_rows, attended.to(query.dtype))
    return out


class _Scratch:
    """Buffers for one bucket's gathered blocks, reused by the step's next layers (a fresh
    multi-MiB tensor per layer costs page faults); one per role (K, V and their scales)."""

    def __init__(self, plan_cache: dict | None, bucket: int) -> None:
        self.plan_cache, self.bucket = plan_cache, bucket

    def __call__(self, role: str, cache: torch.Tensor, num_blocks: int) -> torch.Tensor:
        shape = (num_blocks, *cache.shape[1:])
        key = ("scratch", role, self.bucket)
        buffer = None if self.plan_cache is None else self.plan_cache.get(key)
        if buffer is None or buffer.shape != shape or buffer.dtype != cache.dtype:
            buffer = torch.empty(shape, dtype=cache.dtype, device=cache.device)
            if self.plan_cache is not None:
                self.plan_cache[key] = buffer
        return buffer


def _bucket_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    scale: float,
    cf: CacheFormat,
    k_scale: torch.Tensor | float | None,
    v_scale: torch.Tensor | float | None,
    variant: AttentionVariant,
    plan: BucketPlan,
    scratch: _Scratch,
) -> torch.Tensor:
    """One bucket: its real queries' outputs [len(plan.out_rows), H, D] in fp32."""
    num_heads, head_dim = query.shape[1:]
    num_kv_heads = key_cache.shape[2]
    group = num_heads // num_kv_heads
    tiles, max_q, max_k = plan.num_tiles, plan.max_q, plan.max_k

    def gather(role: str, cache: torch.Tensor, s: torch.Tensor | float | None) -> torch.Tensor:
        def pick(name: str, t: torch.Tensor) -> torch.Tensor:  # [tiles, Lk, KV, last]
            rows = torch.index_select(t, 0, plan.blocks, out=scratch(name, t, len(plan.blocks)))
            return rows.reshape(tiles, max_k, num_kv_heads, -1)

        scales = pick(role + " scales", s) if cf.per_token_scales else s
        return dequantize(pick(role, cache), scales, cf, head_dim)  # [tiles, Lk, KV, D] fp32

    k, v = gather("k", key_cache, k_scale), gather("v", value_cache, v_scale)
    q = torch.index_select(query, 0, plan.q_rows.view(-1)).float()  # [tiles * Lq, H, D]
    if max_q == 1 and num_kv_heads * head_dim <= PACKED_HEADS_MAX_WIDTH:
        return _packed_heads_decode(q, k, v, plan.bias, scale, variant)
    k, v = k.transpose(1, 2), v.transpose(1, 2)  # [tiles, KV, Lk, D], strided views
    # [T, Lq, KV, G, D] -> [T, KV, G * Lq, D]: a group's heads are more query rows of their KV head.
    q = q.reshape(tiles, max_q, num_kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)
    q = q.reshape(tiles, num_kv_heads, group * max_q, head_dim)
    if max_q == 1:  # decode: every row of a KV head shares the one mask row
        allowed = plan.allowed[:, None]
    else:
        allowed = (
            plan.allowed[:, None, None]
            .expand(-1, 1, group, -1, -1)
            .reshape(tiles, 1, group * max_q, max_k)
        )
    if variant.softcap is None and variant.sinks is None:
        # Padding query rows see no key and come out NaN; they are never copied to `out`.
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)
    else:
        attended = _scored_attention(q, k, v, allowed, scale, variant, num_kv_heads, group, max_q)
    attended = attended.reshape(tiles, num_kv_heads, group, max_q, head_dim).permute(0, 3, 1, 2, 4)
    attended = attended.reshape(tiles, max_q, num_heads, head_dim)
    return (
        attended.reshape(tiles * max_q, num_heads, head_dim)
        if plan.q_valid is None
        else attended[plan.q_valid]
    )


# Decode packs the KV heads into one gemm while KV heads x head_dim is at most this: the
# extra flops (KV x) cost less than per-head gemms with a short inner dimension.
PACKED_HEADS_MAX_WIDTH = 128


def _packed_heads_decode(
    query: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    scale: float,
    variant: AttentionVariant,
) -> torch.Tensor:
    """Decode with all KV heads in one gemm per sequence: query [S, H, D], k/v [S, Lk, KV, D] fp32,
    bias [S, 1, Lk] (0 or -inf).

    At small head_dim a per-(sequence, head) gemm has an inner dimension too short to run
    well; here each query head becomes a row whose KV*D columns are zero outside its own KV
    head (block diagonal), so scores are one [H, KV*D] x [KV*D, Lk] product per sequence over
    the gathered rows as they lie, and the values one [H, Lk] x [Lk, KV*D] product whose
    diagonal blocks are each head's output. KV times the flops, on contiguous data.
    """
    num_seqs, num_heads, head_dim = query.shape
    max_k, num_kv_heads = k.shape[1], k.shape[2]
    group = num_heads // num_kv_heads
    eye = torch.eye(num_kv_heads, dtype=torch.float32, device=query.device).view(
        1, num_kv_heads, 1, num_kv_heads, 1
    )
    q = (query.view(num_seqs, num_kv_heads, group, 1, head_dim) * eye).reshape(
        num_seqs, num_heads, -1
    )
    keys = k.reshape(num_seqs, max_k, -1).transpose(1, 2)
    if variant.softcap is None:
        scores = torch.baddbmm(bias, q, keys, alpha=scale)
    else:
        scores = torch.bmm(q, keys) * scale
        scores = torch.tanh(scores / variant.softcap) * variant.softcap + bias
    if variant.sinks is not None:
        sinks = variant.sinks.to(device=query.device, dtype=torch.float32).view(1, num_heads, 1)
        scores = torch.cat([scores, sinks.expand(num_seqs, -1, -1)], dim=-1)
    probs = torch.softmax(scores, dim=-1)[..., :max_k]
    out = torch.bmm(probs, v.reshape(num_seqs, max_k, -1)).view(
        num_seqs, num_kv_heads, group, num_kv_heads, head_dim
    )
    out = (
        torch.diagonal(out, dim1=1, dim2=3)
        .permute(0, 3, 1, 2)
        .reshape(num_seqs, num_heads, head_dim)
    )
    return out.nan_to_num_(
        0.0
    )  # a sequence that sees no key (empty) has only -inf scores: zeros, as elsewhere


def _scored_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    allowed: torch.Tensor,
    scale: float,
    variant: AttentionVariant,
    num_kv_heads: int,
    group: int,
    max_q: int,
) -> torch.Tensor:
    """Attention with a logit softcap and/or sinks: q [S, KV, G*Lq, D], k/v [S, KV, Lk, D]."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if variant.softcap is not None:
        scores = torch.tanh(scores / variant.softcap) * variant.softcap
    scores = scores.masked_fill(~allowed, float("-inf"))
    max_k = k.shape[2]
    if variant.sinks is not None:
        sinks = variant.sinks.to(device=q.device, dtype=torch.float32).reshape(
            1, num_kv_heads, group, 1, 1
        )
        sinks = sinks.expand(q.shape[0], num_kv_heads, group, max_q, 1).reshape(
            *scores.shape[:-1], 1
        )
        scores = torch.cat([scores, sinks], dim=-1)
    # A query that sees no key has only -inf scores; softmax gives NaN there, and we want zeros.
    probs = torch.softmax(scores, dim=-1)[..., :max_k].nan_to_num(0.0)
    return torch.matmul(probs, v)
