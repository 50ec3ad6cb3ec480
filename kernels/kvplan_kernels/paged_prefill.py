"""Paged prefill/extend attention: each sequence's new tokens (a varlen batch) attend to
its whole block table, causal within the new tokens.

This replaces gathering a dense prefix per sequence for SDPA: the Triton kernel
(triton_prefill.py) reads K/V through the block table in their storage format, and the
torch path (torch_attention.py) does one batched gather for every sequence at once.
"""

from __future__ import annotations

import torch

from . import interpreting, jit_on_first_use, select_backend
from .paged_attention import check_attention_args, kernel_layout_args
from .quant import CacheFormat, get_format
from .reference import paged_prefill_reference
from .torch_attention import paged_attention_varlen
from .triton_prefill import prefill_kernel
from .variant import PLAIN, AttentionVariant, check_sinks


def paged_prefill(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    fmt: str | CacheFormat = "none",
    k_scale: torch.Tensor | float | None = None,
    v_scale: torch.Tensor | float | None = None,
    *,
    variant: AttentionVariant = PLAIN,
    backend: str | None = None,
    max_query_len: int | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    plan_cache: dict | None = None,
) -> torch.Tensor:
    """query [num_tokens, num_heads, head_dim] -> same shape and dtype.

    query_start: int [num_seqs + 1], sequence i's queries are rows query_start[i] ..
    query_start[i+1] - 1 (its newest tokens); seq_lens: int [num_seqs], tokens in the cache
    including the new ones. Caches, scales and variant as in `paged_attention`.
    max_query_len: the longest query run, if the caller knows it (saves a host sync).
    plan_cache: as in `paged_attention` (one dict per step's tables and lengths).
    """
    cf = get_format(fmt, key_cache.dtype)
    check_attention_args(
        query, key_cache, value_cache, block_tables, seq_lens, cf, k_scale, v_scale
    )
    check_sinks(variant, query.shape[1])
    if query_start.shape != (seq_lens.shape[0] + 1,) or query_start.is_floating_point():
        raise ValueError(
            f"query_start must be int [{seq_lens.shape[0] + 1}], got {tuple(query_start.shape)}"
        )
    chosen = select_backend(backend, query.is_cuda)
    if chosen == "reference":
        return paged_prefill_reference(
            query,
            key_cache,
            value_cache,
            block_tables,
            query_start,
            seq_lens,
            scale,
            cf,
            k_scale,
            v_scale,
            variant,
        )
    if chosen == "torch":
        return paged_attention_varlen(
            query,
            key_cache,
            value_cache,
            block_tables,
            query_start,
            seq_lens,
            scale,
            cf,
            k_scale,
            v_scale,
            variant,
            None if plan_cache is None else plan_cache.setdefault("prefill", {}),
        )
    return _launch_prefill(
        query,
        key_cache,
        value_cache,
        block_tables,
        query_start,
        seq_lens,
        scale,
        cf,
        k_scale,
        v_scale,
        variant,
        max_query_len,
        block_m,
        block_n,
    )


_AUTOTUNED: dict[bool, object] = {}


def _autotuned_prefill():
    if False not in _AUTOTUNED:
        import triton

        configs = [
            triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)
            for m, n, w, s in ((128, 64, 8, 3), (128, 64, 4, 2), (64, 64, 4, 3), (64, 32, 4, 2))
        ]
        keys = ["HEAD_DIM", "GROUP", "BLOCK_SIZE", "SCALE_MODE", "VPB", "HAS_SOFTCAP"]
        _AUTOTUNED[False] = triton.autotune(configs=configs, key=keys)(
            jit_on_first_use(prefill_kernel)
        )
    return _AUTOTUNED[False]


def _launch_prefill(
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
    max_query_len: int | None,
    block_m: int | None,
    block_n: int | None,
) -> torch.Tensor:
    num_tokens, num_heads, _ = query.shape
    num_seqs = seq_lens.shape[0]
    out = torch.empty_like(query)
    if num_tokens == 0 or num_seqs == 0:
        return out
    for label, value in (("block_m", block_m), ("block_n", block_n)):
        if value is not None and (value < 16 or value & (value - 1)):
            raise ValueError(
                f"{label} must be a power of two >= 16 (tl.dot's minimum), got {value}"
            )
    (pointers, strides), constexprs = kernel_layout_args(
        query, key_cache, value_cache, cf, k_scale, v_scale, variant
    )
    max_q = (
        max_query_len
        if max_query_len is not None
        else int((query_start[1:] - query_start[:-1]).max())
    )
    args = [
        out,
        query,
        *pointers,
        block_tables,
        query_start,
        seq_lens,
        float(scale),
        float(variant.softcap or 1.0),
        variant.window,
        variant.chunk,
        out.stride(0),
        out.stride(1),
        query.stride(0),
        query.stride(1),
        *strides,
        block_tables.stride(0),
    ]
    constexprs.update(GROUP=num_heads // key_cache.shape[2])
    if block_m is None and block_n is None and not interpreting():

        def grid(meta: dict) -> tuple[int, int, int]:
            return num_seqs, num_heads, -(-max_q // meta["BLOCK_M"])

        _autotuned_prefill()[grid](*args, **constexprs)
    else:
        block_m = block_m or 16
        jit_on_first_use(prefill_kernel)[(num_seqs, num_heads, -(-max_q // block_m))](
            *args, BLOCK_M=block_m, BLOCK_N=block_n or 32, **constexprs
        )
    return out
