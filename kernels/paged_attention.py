"""Paged decode attention: one query token per sequence against its block-table KV.

The Triton kernel runs one program per (sequence, KV head) and serves all query heads
of that KV head's GQA group at once, so each K/V tile is read (and dequantized) once per
group rather than once per query head. Tokens are gathered through the block table one
tile of BLOCK_N tokens at a time (block = table[t // block_size], offset = t % block_size),
which is why any power-of-two block size, 1 included, works with one code path. Softmax
is online (running max and sum) with fp32 accumulation; quantized K/V are dequantized in
registers right after the load.
"""

from __future__ import annotations

import torch

from . import jit_on_first_use, select_backend
from .quant import CacheFormat, dequantize, get_format
from .reference import paged_attention_reference

try:  # the kernel below is only jitted on first launch; without triton, torch serves
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only where triton is absent
    tl = None

_SCALE_NONE, _SCALE_TENSOR, _SCALE_PER_TOKEN = 0, 1, 2


def paged_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                    block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float,
                    fmt: str | CacheFormat = "none", k_scale: torch.Tensor | float | None = None,
                    v_scale: torch.Tensor | float | None = None, *, backend: str | None = None,
                    block_n: int | None = None) -> torch.Tensor:
    """Decode attention for query [num_seqs, num_heads, head_dim]; returns the same shape and dtype.

    key_cache/value_cache: [num_blocks, block_size, num_kv_heads, packed_dim] in the format's
    storage dtype; block_tables: int32 [num_seqs, max_blocks]; seq_lens: int [num_seqs].
    k_scale/v_scale: per-tensor scales (fp8, intB-tensor; default 1.0) or the per-token
    scale caches [num_blocks, block_size, num_kv_heads, num_groups] of int formats.
    backend: None/"auto" (Triton where it can run, else torch), "triton", "torch", "reference".
    block_n: tokens per Triton tile (power of two >= 16; default from the block size).
    """
    cf = get_format(fmt, key_cache.dtype)
    _check_attention_args(query, key_cache, value_cache, block_tables, seq_lens, cf, k_scale, v_scale)
    chosen = select_backend(backend, query.is_cuda)
    if chosen == "reference":
        return paged_attention_reference(query, key_cache, value_cache, block_tables, seq_lens, scale,
                                         cf, k_scale, v_scale)
    if chosen == "torch":
        return _paged_attention_torch(query, key_cache, value_cache, block_tables, seq_lens, scale,
                                      cf, k_scale, v_scale)
    return _launch_attention(query, key_cache, value_cache, block_tables, seq_lens, scale, cf,
                             k_scale, v_scale, block_n)


def _check_attention_args(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                          block_tables: torch.Tensor, seq_lens: torch.Tensor, cf: CacheFormat,
                          k_scale: torch.Tensor | float | None, v_scale: torch.Tensor | float | None) -> None:
    if query.dim() != 3:
        raise ValueError(f"query must be [num_seqs, num_heads, head_dim], got {tuple(query.shape)}")
    num_seqs, num_heads, head_dim = query.shape
    if key_cache.dim() != 4 or key_cache.shape != value_cache.shape:
        raise ValueError(f"caches must be [num_blocks, block_size, num_kv_heads, packed_dim] and alike, "
                         f"got {tuple(key_cache.shape)} and {tuple(value_cache.shape)}")
    num_kv_heads = key_cache.shape[2]
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
    if key_cache.shape[3] != cf.packed_dim(head_dim):
        raise ValueError(f"format {cf.name} at head_dim {head_dim} stores {cf.packed_dim(head_dim)} "
                         f"elements per vector, but the cache has {key_cache.shape[3]}")
    if key_cache.dtype != cf.storage or value_cache.dtype != cf.storage:
        raise ValueError(f"format {cf.name} stores {cf.storage}, got {key_cache.dtype}/{value_cache.dtype}")
    if block_tables.dim() != 2 or block_tables.shape[0] != num_seqs or block_tables.is_floating_point():
        raise ValueError(f"block_tables must be int [{num_seqs}, max_blocks], got "
                         f"{block_tables.dtype} {tuple(block_tables.shape)}")
    if seq_lens.shape != (num_seqs,) or seq_lens.is_floating_point():
        raise ValueError(f"seq_lens must be int [{num_seqs}], got {seq_lens.dtype} {tuple(seq_lens.shape)}")
    # Checked on CPU only: on CUDA the .max() would cost a host sync on every decode step.
    if num_seqs and not seq_lens.is_cuda and int(seq_lens.max()) > block_tables.shape[1] * key_cache.shape[1]:
        raise ValueError("a sequence is longer than its block table can address")
    if cf.per_token_scales:
        scale_shape = (*key_cache.shape[:3], cf.num_groups(head_dim))
        for s in (k_scale, v_scale):
            if not isinstance(s, torch.Tensor) or tuple(s.shape) != scale_shape:
                raise ValueError(f"format {cf.name} needs scale caches of shape {scale_shape}")


def _paged_attention_torch(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                           block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float,
                           cf: CacheFormat, k_scale: torch.Tensor | float | None,
                           v_scale: torch.Tensor | float | None) -> torch.Tensor:
    """Vectorized fallback: gather every sequence's tokens, then one masked softmax.

    Memory is num_seqs * max_seq_len * num_kv_heads * head_dim fp32 per cache, fine for
    the CPU runs it serves; CUDA users get the Triton kernel instead.
    """
    num_seqs, num_heads, head_dim = query.shape
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    max_len = int(seq_lens.max()) if num_seqs else 0
    t = torch.arange(max_len, device=query.device)
    valid = t[None, :] < seq_lens.to(query.device)[:, None]  # [S, T]
    # Positions past a sequence's end may index unused (garbage) table entries: send them to block 0.
    blocks = torch.where(valid, block_tables[:, t // block_size].long(), 0)
    offsets = (t % block_size).expand(num_seqs, max_len)

    def gather(cache: torch.Tensor, s: torch.Tensor | float | None) -> torch.Tensor:
        token_scales = s[blocks, offsets] if cf.per_token_scales else s
        return dequantize(cache[blocks, offsets], token_scales, cf, head_dim)  # [S, T, Hkv, D]

    k, v = gather(key_cache, k_scale), gather(value_cache, v_scale)
    q = query.float().reshape(num_seqs, num_kv_heads, num_heads // num_kv_heads, head_dim)
    scores = torch.einsum("skgd,stkd->skgt", q, k) * scale
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    # An empty sequence has only -inf scores; softmax gives NaN there, and we want zeros.
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    out = torch.einsum("skgt,stkd->skgd", probs, v)
    return out.reshape(num_seqs, num_heads, head_dim).to(query.dtype)


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _scale_arg(s: torch.Tensor | float | None, like: torch.Tensor) -> torch.Tensor:
    """Per-tensor scales go in as a 1-element device tensor: no host sync, no recompiles."""
    if isinstance(s, torch.Tensor):
        return s.to(device=like.device, dtype=torch.float32).reshape(-1)[:1].contiguous()
    return torch.full((1,), 1.0 if s is None else float(s), dtype=torch.float32, device=like.device)


def _launch_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                      block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float, cf: CacheFormat,
                      k_scale: torch.Tensor | float | None, v_scale: torch.Tensor | float | None,
                      block_n: int | None) -> torch.Tensor:
    num_seqs, num_heads, head_dim = query.shape
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    out = torch.empty_like(query)
    if num_seqs == 0:
        return out
    if query.stride(-1) != 1 or key_cache.stride(-1) != 1 or value_cache.stride(-1) != 1:
        raise ValueError("paged_attention's Triton path needs the last (head_dim) dimension contiguous")
    block_n = block_n or min(max(32, block_size), 128)
    if block_n < 16 or block_n & (block_n - 1):
        raise ValueError(f"block_n must be a power of two >= 16 (tl.dot's minimum), got {block_n}")
    mode = _SCALE_PER_TOKEN if cf.per_token_scales else (_SCALE_TENSOR if cf.scale == "tensor" else _SCALE_NONE)
    if mode == _SCALE_PER_TOKEN:
        ks, vs = k_scale, v_scale
    elif mode == _SCALE_TENSOR:
        ks, vs = _scale_arg(k_scale, query), _scale_arg(v_scale, query)
    else:
        ks = vs = key_cache  # never read: only passed so the kernel has pointers
    ks_strides = ks.stride()[:3] if mode == _SCALE_PER_TOKEN else (0, 0, 0)
    vs_strides = vs.stride()[:3] if mode == _SCALE_PER_TOKEN else (0, 0, 0)
    group = num_heads // num_kv_heads
    kernel = jit_on_first_use(_paged_attention_kernel)
    kernel[(num_seqs, num_kv_heads)](
        out, query, key_cache, value_cache, ks, vs, block_tables, seq_lens, float(scale),
        out.stride(0), out.stride(1), query.stride(0), query.stride(1),
        *key_cache.stride()[:3], *value_cache.stride()[:3], *ks_strides, *vs_strides,
        block_tables.stride(0),
        HEAD_DIM=head_dim, HEAD_DIM_PAD=max(16, _next_pow2(head_dim)), BLOCK_SIZE=block_size,
        GROUP=group, GROUP_PAD=max(16, _next_pow2(group)), BLOCK_N=block_n, SCALE_MODE=mode,
        IS_INT=not cf.is_float, VPB=cf.values_per_byte, BITS=cf.bits,
        GROUP_LEN=cf.group_len(head_dim),
    )
    return out


def _paged_attention_kernel(
    out_ptr, q_ptr, k_ptr, v_ptr, ks_ptr, vs_ptr, table_ptr, lens_ptr, sm_scale,
    stride_os, stride_oh, stride_qs, stride_qh,
    stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
    stride_ksb, stride_kst, stride_ksh, stride_vsb, stride_vst, stride_vsh,
    stride_table,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_N: tl.constexpr, SCALE_MODE: tl.constexpr,
    IS_INT: tl.constexpr, VPB: tl.constexpr, BITS: tl.constexpr, GROUP_LEN: tl.constexpr,
):
    """One program per (sequence, KV head); rows of the tile are that KV head's query heads."""
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq_len = tl.load(lens_ptr + seq)
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, HEAD_DIM_PAD)
    # Rows are padded to 16 (tl.dot's minimum); padded rows and columns load zeros.
    heads = kv_head * GROUP + g
    qmask = (g[:, None] < GROUP) & (d[None, :] < HEAD_DIM)
    q = tl.load(q_ptr + seq * stride_qs + heads[:, None] * stride_qh + d[None, :], mask=qmask, other=0.0)
    q = q.to(tl.float32)
    if SCALE_MODE == 1:
        k_tensor_scale = tl.load(ks_ptr)
        v_tensor_scale = tl.load(vs_ptr)
    # Packed ints: element d sits in byte d // VPB at bit (d % VPB) * BITS, offset-binary.
    col = d // VPB
    shift = (d % VPB) * BITS
    scale_col = d // GROUP_LEN

    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM_PAD], tl.float32)
    for start in range(0, seq_len, BLOCK_N):
        t = start + tl.arange(0, BLOCK_N)
        tvalid = t < seq_len
        block = tl.load(table_ptr + seq * stride_table + t // BLOCK_SIZE, mask=tvalid, other=0).to(tl.int64)
        offset = t % BLOCK_SIZE
        tmask = tvalid[:, None] & (d[None, :] < HEAD_DIM)

        k_row = block * stride_kb + offset * stride_kt + kv_head * stride_kh
        # No `other=`: it cannot be cast to fp8; masked lanes are zeroed after decoding.
        k = tl.load(k_ptr + k_row[:, None] + col[None, :], mask=tmask)
        if IS_INT and VPB > 1:
            k = ((k.to(tl.int32) >> shift[None, :]) & ((1 << BITS) - 1)) - (1 << (BITS - 1))
        k = k.to(tl.float32)
        if SCALE_MODE == 1:
            k = k * k_tensor_scale
        elif SCALE_MODE == 2:
            ks_row = block * stride_ksb + offset * stride_kst + kv_head * stride_ksh
            k = k * tl.load(ks_ptr + ks_row[:, None] + scale_col[None, :], mask=tmask, other=0.0)
        k = tl.where(tmask, k, 0.0)

        v_row = block * stride_vb + offset * stride_vt + kv_head * stride_vh
        v = tl.load(v_ptr + v_row[:, None] + col[None, :], mask=tmask)
        if IS_INT and VPB > 1:
            v = ((v.to(tl.int32) >> shift[None, :]) & ((1 << BITS) - 1)) - (1 << (BITS - 1))
        v = v.to(tl.float32)
        if SCALE_MODE == 1:
            v = v * v_tensor_scale
        elif SCALE_MODE == 2:
            vs_row = block * stride_vsb + offset * stride_vst + kv_head * stride_vsh
            v = v * tl.load(vs_ptr + vs_row[:, None] + scale_col[None, :], mask=tmask, other=0.0)
        v = tl.where(tmask, v, 0.0)

        scores = tl.dot(q, tl.trans(k), input_precision="ieee") * sm_scale  # [GROUP_PAD, BLOCK_N]
        scores = tl.where(tvalid[None, :], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(scores - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new

    # Empty sequences never entered the loop: l_i = 0, and they return zeros.
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    tl.store(out_ptr + seq * stride_os + heads[:, None] * stride_oh + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=qmask)
