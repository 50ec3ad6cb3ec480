"""Triton prefill/extend attention over paged KV: varlen queries, causal within the new tokens.

Grid (sequence, query head, query tile of BLOCK_M tokens). Sequence i's new tokens are the
queries query_start[i] .. query_start[i+1] - 1, sitting at the last positions of its
seq_lens[i] tokens (their K/V already written to the cache), so a chunk extending a cached
prefix and a fresh prompt are the same case. The program walks the keys its tile can see
(from the first row's window/chunk lower bound to the last row's position) through the
block table, with an online softmax in fp32 and tensor-core dots in the query's dtype.
"""

from __future__ import annotations

from .triton_tiles import first_key, load_kv_tile, shape_scores

try:
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only where triton is absent
    tl = None


def prefill_kernel(
    out_ptr, q_ptr, k_ptr, v_ptr, ks_ptr, vs_ptr, sink_ptr, table_ptr, qstart_ptr, lens_ptr,
    sm_scale, softcap, window, chunk,
    stride_ot, stride_oh, stride_qt, stride_qh,
    stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
    stride_ksb, stride_kst, stride_ksh, stride_vsb, stride_vst, stride_vsh, stride_table,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr, GROUP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SCALE_MODE: tl.constexpr, IS_INT: tl.constexpr,
    VPB: tl.constexpr, BITS: tl.constexpr, GROUP_LEN: tl.constexpr, DOT_DTYPE: tl.constexpr,
    PRECISION: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_SINKS: tl.constexpr,
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
    # Keys this tile can see: from its first row's lower bound to its last valid row (empty past q_len).
    start = tl.min(tl.where(rvalid, lo, seq_len), axis=0)
    end = tl.max(tl.where(rvalid, pos + 1, 0), axis=0)
    d = tl.arange(0, HEAD_DIM_PAD)
    rows = (q_first + r).to(tl.int64)
    qmask = rvalid[:, None] & (d[None, :] < HEAD_DIM)
    q = tl.load(q_ptr + rows[:, None] * stride_qt + head * stride_qh + d[None, :], mask=qmask, other=0.0)
    q = q.to(DOT_DTYPE)
    col = d // VPB
    shift = (d % VPB) * BITS
    scale_col = d // GROUP_LEN
    table_row = table_ptr + seq.to(tl.int64) * stride_table

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], tl.float32)
    for tile in range(start, end, BLOCK_N):
        t = tile + tl.arange(0, BLOCK_N)
        tvalid = t < end
        block = tl.load(table_row + t // BLOCK_SIZE, mask=tvalid, other=0).to(tl.int64)
        offset = t % BLOCK_SIZE
        tmask = tvalid[:, None] & (d[None, :] < HEAD_DIM)
        k = load_kv_tile(k_ptr, ks_ptr, block * stride_kb + offset * stride_kt + kv_head * stride_kh,
                         block * stride_ksb + offset * stride_kst + kv_head * stride_ksh, tmask, col, shift,
                         scale_col, SCALE_MODE, IS_INT, VPB, BITS, DOT_DTYPE)
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION)  # [BLOCK_M, BLOCK_N] fp32
        if SCALE_MODE == 1:
            scores = scores * tl.load(ks_ptr)
        elif SCALE_MODE == 2:
            ks_row = block * stride_ksb + offset * stride_kst + kv_head * stride_ksh
            scores = scores * tl.load(ks_ptr + ks_row, mask=tvalid, other=0.0)[None, :]
        scores = shape_scores(scores, sm_scale, softcap, HAS_SOFTCAP)
        seen = tvalid[None, :] & (t[None, :] <= pos[:, None]) & (t[None, :] >= lo[:, None])
        scores = tl.where(seen, scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that have seen nothing yet
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(scores - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if SCALE_MODE == 2:
            vs_row = block * stride_vsb + offset * stride_vst + kv_head * stride_vsh
            p = p * tl.load(vs_ptr + vs_row, mask=tvalid, other=0.0)[None, :]
        v = load_kv_tile(v_ptr, vs_ptr, block * stride_vb + offset * stride_vt + kv_head * stride_vh,
                         block * stride_vsb + offset * stride_vst + kv_head * stride_vsh, tmask, col, shift,
                         scale_col, SCALE_MODE, IS_INT, VPB, BITS, DOT_DTYPE)
        acc = acc * alpha[:, None] + tl.dot(p.to(DOT_DTYPE), v, input_precision=PRECISION)
        m_i = m_new
    if SCALE_MODE == 1:
        acc = acc * tl.load(vs_ptr)
    if HAS_SINKS:
        sink = tl.load(sink_ptr + head).to(tl.float32)
        m_all = tl.maximum(m_i, sink)
        keep = tl.exp(m_i - m_all)
        l_i = l_i * keep + tl.exp(sink - m_all)
        acc = acc * keep[:, None]
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    tl.store(out_ptr + rows[:, None] * stride_ot + head * stride_oh + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=qmask)
