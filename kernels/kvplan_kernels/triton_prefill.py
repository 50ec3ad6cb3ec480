"""Triton prefill/extend attention over paged KV: varlen queries, causal within the new tokens.

Grid (sequence, query head, query tile of BLOCK_M tokens). Sequence i's new tokens are the
queries query_start[i] .. query_start[i+1] - 1, sitting at the last positions of its
seq_lens[i] tokens (their K/V already written to the cache), so a chunk extending a cached
prefix and a fresh prompt are the same case. The program walks the keys its tile can see
(from the first row's window/chunk lower bound to the last row's position) through the
block table, with an online softmax in fp32 and tensor-core dots in the query's dtype.
"""

from __future__ import annotations

from .triton_tiles import attend_range, finish_softmax, first_key

try:
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only where triton is absent
    tl = None


def prefill_kernel(
    out_ptr,
    q_ptr,
    k_ptr,
    v_ptr,
    ks_ptr,
    vs_ptr,
    sink_ptr,
    table_ptr,
    qstart_ptr,
    lens_ptr,
    sm_scale,
    softcap,
    window,
    chunk,
    stride_ot,
    stride_oh,
    stride_qt,
    stride_qh,
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
    stride_table,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    GROUP: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SCALE_MODE: tl.constexpr,
    IS_INT: tl.constexpr,
    VPB: tl.constexpr,
    BITS: tl.constexpr,
    GROUP_LEN: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    PRECISION: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    HAS_SINKS: tl.constexpr,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    tile_m = tl.program_id(2)
    kv_head = head // GROUP
    q_first = tl.load(qstart_ptr + seq)
    q_len = tl.load(qstart_ptr + seq + 1) - q_first
    seq_len = tl.load(lens_ptr + seq)
    r = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rvalid = r < q_len
    pos = seq_len - q_len + r  # [BLOCK_M] query positions
    lo = first_key(pos, window, chunk)
    # Keys this tile can see: from its first row's lower bound to its last valid row (empty past
    # q_len).
    start = tl.min(tl.where(rvalid, lo, seq_len), axis=0)
    end = tl.max(tl.where(rvalid, pos + 1, 0), axis=0)
    d = tl.arange(0, HEAD_DIM_PAD)
    rows = (q_first + r).to(tl.int64)
    qmask = rvalid[:, None] & (d[None, :] < HEAD_DIM)
    q = tl.load(
        q_ptr + rows[:, None] * stride_qt + head * stride_qh + d[None, :], mask=qmask, other=0.0
    )
    q = q.to(DOT_DTYPE)
    table_row = table_ptr + seq.to(tl.int64) * stride_table
    m_i, l_i, acc = attend_range(
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
        BLOCK_M,
        HEAD_DIM_PAD,
        BLOCK_N,
        BLOCK_SIZE,
        HEAD_DIM,
        SCALE_MODE,
        IS_INT,
        VPB,
        BITS,
        GROUP_LEN,
        DOT_DTYPE,
        PRECISION,
        HAS_SOFTCAP,
    )
    if HAS_SINKS:
        sink = tl.load(sink_ptr + head).to(tl.float32)
    else:
        sink = 0.0
    out = finish_softmax(m_i, l_i, acc, sink, HAS_SINKS)
    tl.store(
        out_ptr + rows[:, None] * stride_ot + head * stride_oh + d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=qmask,
    )
