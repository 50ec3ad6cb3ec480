"""Deliberately naive torch references for the KV kernels.

They walk the block table one token at a time and attend one head at a time, so each
line can be checked against the definition by eye. They are slow on purpose: tests hold
the Triton kernels and the vectorized torch fallback to them. Element encoding is
delegated to `quant.quantize`/`quant.dequantize`, whose layouts are tested on their own.
"""

from __future__ import annotations

import torch

from .quant import CacheFormat, dequantize, get_format, quantize
from .variant import PLAIN, AttentionVariant


def write_kv_reference(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    fmt: str | CacheFormat = "none",
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> None:
    """Store token t's K/V [num_tokens, num_kv_heads, head_dim] at slot_mapping[t], in place.

    slot = block_id * block_size + offset; a negative slot (padding) is skipped. For
    token-head/group formats k_scale/v_scale are the scale caches and get written; for
    per-tensor formats they are the (read-only) scales to divide by.
    """
    cf = get_format(fmt, key_cache.dtype)
    block_size = key_cache.shape[1]
    for t in range(key.shape[0]):
        slot = int(slot_mapping[t])
        if slot < 0:
            continue
        block, offset = divmod(slot, block_size)
        for head in range(key.shape[1]):
            for src, cache, scale in ((key, key_cache, k_scale), (value, value_cache, v_scale)):
                per_tensor = scale if cf.scale == "tensor" else None
                stored, scales = quantize(src[t, head], cf, per_tensor)
                cache[block, offset, head] = stored
                if cf.per_token_scales:
                    scale[block, offset, head] = scales


def paged_attention_reference(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    fmt: str | CacheFormat = "none",
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    variant: AttentionVariant = PLAIN,
) -> torch.Tensor:
    """Decode attention: query [num_seqs, num_heads, head_dim] -> same shape and dtype.

    Sequence i's one query sits at position seq_lens[i] - 1 and attends to its cached
    tokens (see `paged_prefill_reference`). A sequence of length 0 gets a zero output.
    """
    query_start = torch.arange(query.shape[0] + 1)
    return paged_prefill_reference(
        query,
        key_cache,
        value_cache,
        block_tables,
        query_start,
        seq_lens,
        scale,
        fmt,
        k_scale,
        v_scale,
        variant,
    )


def paged_prefill_reference(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    fmt: str | CacheFormat = "none",
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    variant: AttentionVariant = PLAIN,
) -> torch.Tensor:
    """Varlen attention over paged KV: query [num_tokens, num_heads, head_dim] -> same shape and
    dtype.

    Sequence i owns queries query_start[i] .. query_start[i+1] - 1, its newest tokens: with
    n = query_start[i+1] - query_start[i], query j sits at position seq_lens[i] - n + j and sees
    keys variant.first_key(p) .. p (causal), token t living in block
    block_tables[i, t // block_size] at offset t % block_size. Query head h reads KV head
    h // (num_heads // num_kv_heads) (GQA; MQA when there is one KV head). Scores are
    scaled, softcapped, then softmaxed with the head's sink logit (if any) in the
    denominator; everything in fp32. A query that sees no key gets a zero output.
    """
    cf = get_format(fmt, key_cache.dtype)
    num_tokens, num_heads, head_dim = query.shape
    num_kv_heads, block_size = key_cache.shape[2], key_cache.shape[1]
    group = num_heads // num_kv_heads
    out = torch.zeros(num_tokens, num_heads, head_dim, dtype=torch.float32, device=query.device)
    for i in range(len(seq_lens)):
        seq_len, first, last = int(seq_lens[i]), int(query_start[i]), int(query_start[i + 1])
        keys, values = [], []
        for t in range(seq_len):
            block = int(block_tables[i, t // block_size])
            offset = t % block_size
            keys.append(_read_token(key_cache, k_scale, cf, block, offset, head_dim))
            values.append(_read_token(value_cache, v_scale, cf, block, offset, head_dim))
        for row in range(first, last):
            position = seq_len - (last - first) + (row - first)
            lo = variant.first_key(position)
            if position < lo or position < 0:
                continue
            k = torch.stack(keys[lo : position + 1])  # [visible, num_kv_heads, head_dim]
            v = torch.stack(values[lo : position + 1])
            for h in range(num_heads):
                scores = (k[:, h // group] @ query[row, h].float()) * scale
                if variant.softcap is not None:
                    scores = torch.tanh(scores / variant.softcap) * variant.softcap
                if variant.sinks is not None:
                    scores = torch.cat([scores, variant.sinks[h].float().reshape(1)])
                probs = torch.softmax(scores, dim=0)[: k.shape[0]]
                out[row, h] = probs @ v[:, h // group]
    return out.to(query.dtype)


def _read_token(
    cache: torch.Tensor,
    scale: torch.Tensor | None,
    cf: CacheFormat,
    block: int,
    offset: int,
    head_dim: int,
) -> torch.Tensor:
    """One token's vectors for every KV head, dequantized to fp32 [num_kv_heads, head_dim]."""
    stored = cache[block, offset]
    if cf.per_token_scales:
        return dequantize(stored, scale[block, offset], cf, head_dim)
    return dequantize(stored, scale, cf, head_dim)
