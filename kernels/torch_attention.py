"""Vectorized torch attention over paged KV for CPU users: decode and prefill alike.

Every sequence's queries (padded to the longest) attend to the keys they can see. K/V are
read from the block pool in one `index_select` of whole blocks per cache (a contiguous
copy per block, far cheaper than indexing token by token) and used through a strided
[sequences, KV heads, keys, D] view, dequantized to fp32. GQA groups share their KV head
by becoming extra query rows of it (no repeat). Keys start at the block holding the
earliest position any of the sequence's queries may see (window/chunk), so a windowed
layer gathers only the window.

Plain attention, windows and chunks (a mask) run through torch's fused
`scaled_dot_product_attention`; softcap and sinks change the scores themselves and take
the explicit matmul + softmax path. Memory is about sequences x queries x keys x heads
fp32 scores, fine on CPU; CUDA users get the Triton kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .quant import CacheFormat, dequantize
from .variant import AttentionVariant


def paged_attention_varlen(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                           block_tables: torch.Tensor, query_start: torch.Tensor, seq_lens: torch.Tensor,
                           scale: float, cf: CacheFormat, k_scale: torch.Tensor | float | None,
                           v_scale: torch.Tensor | float | None, variant: AttentionVariant,
                           plan_cache: dict | None = None) -> torch.Tensor:
    """query [num_tokens, H, D] -> same shape and dtype (semantics of `reference.paged_prefill_reference`).

    plan_cache: a dict the caller keeps for one batch of tables and lengths (one model step):
    the index work, which depends on them and the variant's window/chunk but not on a
    layer's K/V, is done by the first layer and reused by the others, and so are the
    buffers the K/V blocks are gathered into.
    """
    num_tokens, num_heads, head_dim = query.shape
    num_seqs = seq_lens.shape[0]
    if num_tokens == 0 or num_seqs == 0:
        return torch.zeros_like(query)
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    group = num_heads // num_kv_heads
    key = (block_size, num_tokens, variant.window, variant.chunk)
    plan = plan_cache.get(key) if plan_cache is not None else None
    if plan is None:
        plan = varlen_plan(block_tables, query_start, seq_lens, block_size, num_tokens, variant, query.device)
        if plan_cache is not None:
            plan_cache[key] = plan
    max_q, max_k = plan.max_q, plan.max_k

    def gather(role: str, cache: torch.Tensor, s: torch.Tensor | float | None) -> torch.Tensor:
        def pick(name: str, t: torch.Tensor) -> torch.Tensor:  # [S, KV, Lk, last] as a strided view of the copy
            rows = torch.index_select(t, 0, plan.blocks, out=_scratch(name, t, len(plan.blocks), plan_cache))
            return rows.reshape(num_seqs, max_k, num_kv_heads, -1).transpose(1, 2)

        scales = pick(role + " scales", s) if cf.per_token_scales else s
        return dequantize(pick(role, cache), scales, cf, head_dim)  # [S, KV, Lk, D] fp32

    def gather_rows(role: str, cache: torch.Tensor, s: torch.Tensor | float | None) -> torch.Tensor:
        def pick(name: str, t: torch.Tensor) -> torch.Tensor:  # [S, Lk, KV, last]
            rows = torch.index_select(t, 0, plan.blocks, out=_scratch(name, t, len(plan.blocks), plan_cache))
            return rows.reshape(num_seqs, max_k, num_kv_heads, -1)

        scales = pick(role + " scales", s) if cf.per_token_scales else s
        return dequantize(pick(role, cache), scales, cf, head_dim)  # [S, Lk, KV, D] fp32

    if max_q == 1 and plan.uniform and num_kv_heads * head_dim <= PACKED_HEADS_MAX_WIDTH:
        k = gather_rows("k", key_cache, k_scale)
        v = gather_rows("v", value_cache, v_scale)
        return _packed_heads_decode(query, k, v, plan, scale, variant).to(query.dtype)
    k, v = gather("k", key_cache, k_scale), gather("v", value_cache, v_scale)
    # [S, Lq, KV, G, D] -> [S, KV, G * Lq, D]: a group's heads are more query rows of their KV head.
    q = (query if plan.uniform else query[plan.q_rows]).float()
    q = q.reshape(num_seqs, max_q, num_kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)
    q = q.reshape(num_seqs, num_kv_heads, group * max_q, head_dim)
    if max_q == 1:  # decode: every row of a KV head shares the one mask row
        allowed = plan.allowed[:, None]
    else:
        allowed = plan.allowed[:, None, None].expand(-1, 1, group, -1, -1).reshape(num_seqs, 1, group * max_q, max_k)
    if variant.softcap is None and variant.sinks is None:
        # Padding query rows see no key and come out NaN; they are never copied to `out`.
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)
    else:
        attended = _scored_attention(q, k, v, allowed, scale, variant, num_kv_heads, group, max_q)
    attended = attended.reshape(num_seqs, num_kv_heads, group, max_q, head_dim).permute(0, 3, 1, 2, 4)
    attended = attended.reshape(num_seqs, max_q, num_heads, head_dim)
    if plan.uniform:
        return attended.reshape(num_tokens, num_heads, head_dim).to(query.dtype)
    out = torch.zeros_like(query)
    out[plan.q_rows[plan.q_valid]] = attended[plan.q_valid].to(query.dtype)
    return out


# Decode packs the KV heads into one gemm while KV heads x head_dim is at most this: the
# extra flops (KV x) cost less than per-head gemms with a short inner dimension.
PACKED_HEADS_MAX_WIDTH = 128


def _packed_heads_decode(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: "VarlenPlan", scale: float,
                         variant: AttentionVariant) -> torch.Tensor:
    """Decode with all KV heads in one gemm per sequence: query [S, H, D], k/v [S, Lk, KV, D] fp32.

    At small head_dim a per-(sequence, head) gemm has an inner dimension too short to run
    well; here each query head becomes a row whose KV*D columns are zero outside its own KV
    head (block diagonal), so scores are one [H, KV*D] x [KV*D, Lk] product per sequence over
    the gathered rows as they lie, and the values one [H, Lk] x [Lk, KV*D] product whose
    diagonal blocks are each head's output. KV times the flops, on contiguous data.
    """
    num_seqs, num_heads, head_dim = query.shape
    max_k, num_kv_heads = k.shape[1], k.shape[2]
    group = num_heads // num_kv_heads
    eye = torch.eye(num_kv_heads, dtype=torch.float32, device=query.device).view(1, num_kv_heads, 1, num_kv_heads, 1)
    q = (query.float().view(num_seqs, num_kv_heads, group, 1, head_dim) * eye).reshape(num_seqs, num_heads, -1)
    keys = k.reshape(num_seqs, max_k, -1).transpose(1, 2)
    if variant.softcap is None:
        scores = torch.baddbmm(plan.bias, q, keys, alpha=scale)
    else:
        scores = torch.bmm(q, keys) * scale
        scores = torch.tanh(scores / variant.softcap) * variant.softcap + plan.bias
    if variant.sinks is not None:
        sinks = variant.sinks.to(device=query.device, dtype=torch.float32).view(1, num_heads, 1)
        scores = torch.cat([scores, sinks.expand(num_seqs, -1, -1)], dim=-1)
    probs = torch.softmax(scores, dim=-1)[..., :max_k]
    out = torch.bmm(probs, v.reshape(num_seqs, max_k, -1)).view(num_seqs, num_kv_heads, group, num_kv_heads, head_dim)
    out = torch.diagonal(out, dim1=1, dim2=3).permute(0, 3, 1, 2).reshape(num_seqs, num_heads, head_dim)
    return out.nan_to_num_(0.0)  # a sequence that sees no key (empty) has only -inf scores: zeros, as elsewhere


def _scored_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, scale: float,
                      variant: AttentionVariant, num_kv_heads: int, group: int, max_q: int) -> torch.Tensor:
    """Attention with a logit softcap and/or sinks: q [S, KV, G*Lq, D], k/v [S, KV, Lk, D]."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if variant.softcap is not None:
        scores = torch.tanh(scores / variant.softcap) * variant.softcap
    scores = scores.masked_fill(~allowed, float("-inf"))
    max_k = k.shape[2]
    if variant.sinks is not None:
        sinks = variant.sinks.to(device=q.device, dtype=torch.float32).reshape(1, num_kv_heads, group, 1, 1)
        sinks = sinks.expand(q.shape[0], num_kv_heads, group, max_q, 1).reshape(*scores.shape[:-1], 1)
        scores = torch.cat([scores, sinks], dim=-1)
    # A query that sees no key has only -inf scores; softmax gives NaN there, and we want zeros.
    probs = torch.softmax(scores, dim=-1)[..., :max_k].nan_to_num(0.0)
    return torch.matmul(probs, v)


def _scratch(role: str, cache: torch.Tensor, num_blocks: int, plan_cache: dict | None) -> torch.Tensor:
    """A buffer for `num_blocks` blocks of `cache`, reused by the step's next layers (a fresh
    multi-MiB tensor per layer costs page faults); one per role (K, V and their scales)."""
    shape = (num_blocks, *cache.shape[1:])
    buffer = None if plan_cache is None else plan_cache.get(("scratch", role))
    if buffer is None or buffer.shape != shape or buffer.dtype != cache.dtype:
        buffer = torch.empty(shape, dtype=cache.dtype, device=cache.device)
        if plan_cache is not None:
            plan_cache[("scratch", role)] = buffer
    return buffer


@dataclass(frozen=True)
class VarlenPlan:
    """Which pool blocks a varlen batch reads and which keys each query may see."""

    max_q: int
    max_k: int
    uniform: bool  # every sequence has max_q queries (decode: one each): no padding rows
    blocks: torch.Tensor  # long [S * blocks per sequence]: pool blocks to gather, 0 past the end
    q_rows: torch.Tensor  # long [S, Lq]: each padded query's row in the packed batch
    q_valid: torch.Tensor  # bool [S, Lq]
    allowed: torch.Tensor  # bool [S, Lq, Lk]
    bias: torch.Tensor | None  # fp32 [S, 1, Lk], 0 where allowed else -inf (decode only)


def varlen_plan(block_tables: torch.Tensor, query_start: torch.Tensor, seq_lens: torch.Tensor, block_size: int,
                num_tokens: int, variant: AttentionVariant, device: torch.device) -> VarlenPlan:
    num_seqs = seq_lens.shape[0]
    query_start = query_start.to(device=device, dtype=torch.long)
    seq_lens = seq_lens.to(device=device, dtype=torch.long)
    q_lens = query_start[1:] - query_start[:-1]
    max_q = int(q_lens.max())
    qi = torch.arange(max_q, device=device)
    q_valid = qi[None, :] < q_lens[:, None]  # [S, Lq]
    q_pos = (seq_lens - q_lens)[:, None] + qi[None, :]
    lo = _first_key(q_pos, variant)  # [S, Lq]
    base = torch.where(q_valid, lo, seq_lens[:, None]).amin(dim=1)  # first key any query sees
    # Whole blocks are gathered (one contiguous copy each), from the block holding the first
    # key any query sees to the sequence's last block; the mask drops the rest.
    first_block = torch.div(base, block_size, rounding_mode="floor")
    num_blocks = int((-(-seq_lens // block_size) - first_block).clamp(min=0).max())
    max_k = num_blocks * block_size
    table_cols = first_block[:, None] + torch.arange(num_blocks, device=device)[None, :]
    blocks = block_tables.to(device).long().gather(1, table_cols.clamp(max=block_tables.shape[1] - 1))
    blocks = torch.where(table_cols * block_size < seq_lens[:, None], blocks, 0).reshape(-1)
    k_pos = first_block[:, None] * block_size + torch.arange(max_k, device=device)[None, :]  # [S, Lk]
    allowed = ((k_pos < seq_lens[:, None])[:, None, :] & (k_pos[:, None, :] <= q_pos[:, :, None])
               & (k_pos[:, None, :] >= lo[:, :, None]))  # [S, Lq, Lk]
    uniform = int(query_start[0]) == 0 and int(query_start[-1]) == num_tokens == num_seqs * max_q
    q_rows = (query_start[:-1, None] + qi[None, :]).clamp(max=num_tokens - 1)  # [S, Lq]
    bias = None
    if max_q == 1:
        bias = torch.zeros(allowed.shape, dtype=torch.float32, device=device).masked_fill_(~allowed, float("-inf"))
    return VarlenPlan(max_q, max_k, uniform, blocks, q_rows, q_valid, allowed, bias)


def _first_key(position: torch.Tensor, variant: AttentionVariant) -> torch.Tensor:
    lo = torch.zeros_like(position)
    if variant.sliding_window:
        lo = torch.maximum(lo, position - variant.sliding_window + 1)
    if variant.chunk_size:
        lo = torch.maximum(lo, torch.div(position, variant.chunk_size, rounding_mode="floor") * variant.chunk_size)
    return lo
