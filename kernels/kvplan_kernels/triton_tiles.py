"""Triton helpers shared by the decode and prefill kernels: read one tile of paged K or V
in its storage dtype, and shape raw scores.

Scale modes (SCALE_MODE): 0 none; 1 one fp32 scale per cache (fp8, intB-tensor), applied
to the scores and the output rather than to every element; 2 one scale per token and KV
head (int8, int4), loaded once per token and applied to score columns (K) and to the
probabilities (V); 3 several scales per token (intB-gN groups), applied per element.
Tiles come back in DOT_DTYPE (the query's fp16/bf16, so tl.dot runs on tensor cores with
fp32 accumulation; fp32 for fp32 models). Small ints (|q| <= 127) and fp8 values are exact
in fp16/bf16, so the conversion loses nothing before the per-tensor/per-token scale.

Packed ints (int4/int2) are loaded one byte per lane, once, and split into their VPB
offset-binary values with tl.interleave (element d is bits (d % VPB) * BITS of byte
d // VPB), so a tile issues one load per byte rather than one per value.
"""

from __future__ import annotations

from . import triton_helper

try:
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only where triton is absent
    tl = None


@triton_helper
def load_kv_tile(
    ptr,
    scale_ptr,
    row,
    scale_row,
    tvalid,
    tmask,
    d,
    scale_col,
    SCALE_MODE: tl.constexpr,
    IS_INT: tl.constexpr,
    VPB: tl.constexpr,
    BITS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
):
    """[BLOCK_N, HEAD_DIM_PAD] tile of the vectors starting at element offsets `row`; zeros where
    masked."""
    if IS_INT and VPB > 1:  # packed: each byte is loaded once and split into its VPB values
        cb = tl.arange(0, HEAD_DIM_PAD // VPB)
        bmask = tvalid[:, None] & (cb[None, :] < (HEAD_DIM + VPB - 1) // VPB)
        x = unpack_bytes(
            tl.load(ptr + row[:, None] + cb[None, :], mask=bmask, other=0).to(tl.int32), VPB, BITS
        )
    else:
        # No `other=`: it cannot be cast to fp8; masked lanes are zeroed below.
        x = tl.load(ptr + row[:, None] + d[None, :], mask=tmask)
    if IS_INT and SCALE_MODE == 3:
        s = tl.load(scale_ptr + scale_row[:, None] + scale_col[None, :], mask=tmask, other=0.0)
        x = x.to(tl.float32) * s
    x = x.to(DOT_DTYPE)
    return tl.where(tmask, x, tl.zeros_like(x))


@triton_helper
def unpack_bytes(b, VPB: tl.constexpr, BITS: tl.constexpr):
    """[N, C] packed bytes (int32) -> [N, C * VPB] values: element j * VPB + i is bits
    i * BITS .. of byte j, offset-binary (kernels/quant.py's packing)."""
    low = (1 << BITS) - 1
    bias = 1 << (BITS - 1)
    if VPB == 2:
        values = tl.interleave((b & low) - bias, ((b >> BITS) & low) - bias)
    else:  # VPB 4: interleaving (v0, v2) with (v1, v3) puts v0 v1 v2 v3 side by side
        even = tl.interleave((b & low) - bias, ((b >> (2 * BITS)) & low) - bias)
        odd = tl.interleave(((b >> BITS) & low) - bias, ((b >> (3 * BITS)) & low) - bias)
        values = tl.interleave(even, odd)
    return values  # one return: the compiler types every return alike, even in pruned branches


@triton_helper
def shape_scores(scores, sm_scale, softcap, HAS_SOFTCAP: tl.constexpr):
    """Scale raw dot products; Gemma-2's softcap c * tanh(s / c) (tanh through the sigmoid)."""
    scores = scores * sm_scale
    if HAS_SOFTCAP:
        scores = softcap * (2.0 * tl.sigmoid(2.0 * scores / softcap) - 1.0)
    return scores


@triton_helper
def first_key(position, window, chunk):
    """Earliest key a query at `position` sees (0 for plain causal attention)."""
    lo = tl.zeros_like(position)
    if window > 0:
        lo = tl.maximum(lo, position - window + 1)
    if chunk > 0:
        lo = tl.maximum(lo, (position // tl.maximum(chunk, 1)) * chunk)
    return lo


@triton_helper
def attend_tile(
    q,
    m_i,
    l_i,
    acc,
    tile,
    end,
    pos,
    lo,
    table_row,
    kv_head,
    d,
    scale_col,
    k_ptr,
    v_ptr,
    ks_ptr,
    vs_ptr,
    stride_kb,
    stride_kt,
    stride_kh,
    stride_vb,
    stride_vt,
    stride_vh,
    stride_ksb,
    stride_kst,
    stride_ksh,
    stride_vsb,
    stride_vst,
    stride_vsh,
    sm_scale,
    softcap,
    BLOCK_N: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    SCALE_MODE: tl.constexpr,
    IS_INT: tl.constexpr,
    VPB: tl.constexpr,
    BITS: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    PRECISION: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
):
    """One online-softmax step over keys tile .. tile + BLOCK_N - 1 (below `end`) for query rows at
    positions `pos` that see keys lo .. pos; returns the updated (max, sum, accumulator)."""
    t = tile + tl.arange(0, BLOCK_N)
    tvalid = t < end
    block = tl.load(table_row + t // BLOCK_SIZE, mask=tvalid, other=0).to(tl.int64)
    offset = t % BLOCK_SIZE
    tmask = tvalid[:, None] & (d[None, :] < HEAD_DIM)
    ks_row = block * stride_ksb + offset * stride_kst + kv_head * stride_ksh
    vs_row = block * stride_vsb + offset * stride_vst + kv_head * stride_vsh
    k = load_kv_tile(
        k_ptr,
        ks_ptr,
        block * stride_kb + offset * stride_kt + kv_head * stride_kh,
        ks_row,
        tvalid,
        tmask,
        d,
        scale_col,
        SCALE_MODE,
        IS_INT,
        VPB,
        BITS,
        HEAD_DIM,
        HEAD_DIM_PAD,
        DOT_DTYPE,
    )
    scores = tl.dot(q, tl.trans(k), input_precision=PRECISION)  # [rows, BLOCK_N] fp32
    if SCALE_MODE == 1:
        scores = scores * tl.load(ks_ptr)
    elif SCALE_MODE == 2:
        scores = scores * tl.load(ks_ptr + ks_row, mask=tvalid, other=0.0)[None, :]
    scores = shape_scores(scores, sm_scale, softcap, HAS_SOFTCAP)
    seen = tvalid[None, :] & (t[None, :] <= pos[:, None]) & (t[None, :] >= lo[:, None])
    scores = tl.where(seen, scores, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(scores, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that have seen nothing yet
    alpha = tl.exp(m_i - m_safe)
    p = tl.exp(scores - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if SCALE_MODE == 2:  # V's per-token scale folds into the probabilities
        p = p * tl.load(vs_ptr + vs_row, mask=tvalid, other=0.0)[None, :]
    v = load_kv_tile(
        v_ptr,
        vs_ptr,
        block * stride_vb + offset * stride_vt + kv_head * stride_vh,
        vs_row,
        tvalid,
        tmask,
        d,
        scale_col,
        SCALE_MODE,
        IS_INT,
        VPB,
        BITS,
        HEAD_DIM,
        HEAD_DIM_PAD,
        DOT_DTYPE,
    )
    acc = acc * alpha[:, None] + tl.dot(p.to(DOT_DTYPE), v, input_precision=PRECISION)
    return m_new, l_i, acc


@triton_helper
def attend_range(
    q,
    start,
    end,
    pos,
    lo,
    table_row,
    kv_head,
    d,
    k_ptr,
    v_ptr,
    ks_ptr,
    vs_ptr,
    stride_kb,
    stride_kt,
    stride_kh,
    stride_vb,
    stride_vt,
    stride_vh,
    stride_ksb,
    stride_kst,
    stride_ksh,
    stride_vsb,
    stride_vst,
    stride_vsh,
    sm_scale,
    softcap,
    ROWS: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    SCALE_MODE: tl.constexpr,
    IS_INT: tl.constexpr,
    VPB: tl.constexpr,
    BITS: tl.constexpr,
    GROUP_LEN: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    PRECISION: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
):
    """Online softmax of the ROWS query rows `q` over keys start .. end - 1 (row r sees lo[r] ..
    pos[r]); returns (max, sum, accumulator), the per-tensor V scale already applied."""
    scale_col = d // GROUP_LEN
    m_i = tl.full([ROWS], float("-inf"), tl.float32)
    l_i = tl.zeros([ROWS], tl.float32)
    acc = tl.zeros([ROWS, HEAD_DIM_PAD], tl.float32)
    for tile in range(start, end, BLOCK_N):
        m_i, l_i, acc = attend_tile(
            q,
            m_i,
            l_i,
            acc,
            tile,
            end,
            pos,
            lo,
            table_row,
            kv_head,
            d,
            scale_col,
            k_ptr,
            v_ptr,
            ks_ptr,
            vs_ptr,
            stride_kb,
            stride_kt,
            stride_kh,
            stride_vb,
            stride_vt,
            stride_vh,
            stride_ksb,
            stride_kst,
            stride_ksh,
            stride_vsb,
            stride_vst,
            stride_vsh,
            sm_scale,
            softcap,
            BLOCK_N,
            BLOCK_SIZE,
            HEAD_DIM,
            HEAD_DIM_PAD,
            SCALE_MODE,
            IS_INT,
            VPB,
            BITS,
            DOT_DTYPE,
            PRECISION,
            HAS_SOFTCAP,
        )
    if SCALE_MODE == 1:
        acc = acc * tl.load(vs_ptr)
    return m_i, l_i, acc


@triton_helper
def finish_softmax(m_i, l_i, acc, sink, HAS_SINKS: tl.constexpr):
    """Normalise; a sink logit joins the denominator. Rows that saw no key return zeros."""
    if HAS_SINKS:
        m_all = tl.maximum(m_i, sink)
        keep = tl.exp(m_i - m_all)
        l_i = l_i * keep + tl.exp(sink - m_all)
        acc = acc * keep[:, None]
    return acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
