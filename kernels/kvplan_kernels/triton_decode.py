"""Triton decode attention over paged KV, split-KV (flash-decoding) with a reduction pass.

Grid (sequence, KV head, split). One program serves every query head of its KV head's GQA
group (the group is tl.dot's M dimension, padded to its minimum of 16), so each K/V tile is
read once per group. Split s covers keys [lo + s * split_len, lo + (s + 1) * split_len) of
the sequence's visible range, lo being the window/chunk lower bound; with one split the
program finishes the softmax itself, otherwise it writes (acc, max, sum) partials that
`decode_reduce_kernel` merges (the attention sinks join the denominator there).
"""

from __future__ import annotations

from .triton_tiles import attend_range, finish_softmax, first_key

try:
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only where triton is absent
    tl = None


def decode_kernel(
    out_ptr,
    part_ptr,
    stat_ptr,
    q_ptr,
    k_ptr,
    v_ptr,
    ks_ptr,
    vs_ptr,
    sink_ptr,
    table_ptr,
    lens_ptr,
    sm_scale,
    softcap,
    window,
    chunk,
    split_len,
    stride_os,
    stride_oh,
    stride_qs,
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
    GROUP_PAD: tl.constexpr,
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
    NUM_SPLITS: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(lens_ptr + seq)
    lo = first_key(seq_len - 1, window, chunk)
    start = lo + split * split_len
    end = tl.minimum(start + split_len, seq_len)
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, HEAD_DIM_PAD)
    heads = kv_head * GROUP + g
    qmask = (g[:, None] < GROUP) & (d[None, :] < HEAD_DIM)
    q = tl.load(
        q_ptr + seq * stride_qs + heads[:, None] * stride_qh + d[None, :], mask=qmask, other=0.0
    )
    q = q.to(DOT_DTYPE)
    table_row = table_ptr + seq.to(tl.int64) * stride_table
    pos = tl.full([GROUP_PAD], 0, tl.int32) + (seq_len - 1)
    lo_rows = tl.full([GROUP_PAD], 0, tl.int32) + lo
    m_i, l_i, acc = attend_range(
        q,
        start,
        end,
        pos,
        lo_rows,
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
        GROUP_PAD,
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

    if NUM_SPLITS == 1:
        if HAS_SINKS:
            sink = tl.load(sink_ptr + heads, mask=g < GROUP, other=0.0).to(tl.float32)
        else:
            sink = tl.zeros([GROUP_PAD], tl.float32)
        # A query that saw no key (empty sequence) returns zeros.
        out = finish_softmax(m_i, l_i, acc, sink, HAS_SINKS)
        tl.store(
            out_ptr + seq * stride_os + heads[:, None] * stride_oh + d[None, :],
            out.to(out_ptr.dtype.element_ty),
            mask=qmask,
        )
    else:
        # Partials: acc [S, H, NUM_SPLITS, HEAD_DIM_PAD], stats [S, H, NUM_SPLITS, 2] (max, sum),
        # contiguous.
        row = (seq * (GROUP * tl.num_programs(1)) + heads) * NUM_SPLITS + split
        tl.store(part_ptr + row[:, None] * HEAD_DIM_PAD + d[None, :], acc, mask=g[:, None] < GROUP)
        tl.store(stat_ptr + row * 2, m_i, mask=g < GROUP)
        tl.store(stat_ptr + row * 2 + 1, l_i, mask=g < GROUP)


def decode_reduce_kernel(
    out_ptr,
    part_ptr,
    stat_ptr,
    sink_ptr,
    stride_os,
    stride_oh,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    HAS_SINKS: tl.constexpr,
):
    """Grid (sequence, query head): merge the splits' partial softmaxes into the output."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    s = tl.arange(0, NUM_SPLITS)
    d = tl.arange(0, HEAD_DIM_PAD)
    row = (seq * tl.num_programs(1) + head) * NUM_SPLITS + s
    m = tl.load(stat_ptr + row * 2)
    denominators = tl.load(stat_ptr + row * 2 + 1)
    m_all = tl.max(m, axis=0)
    if HAS_SINKS:
        sink = tl.load(sink_ptr + head).to(tl.float32)
        m_all = tl.maximum(m_all, sink)
    m_all = tl.where(
        m_all == float("-inf"), 0.0, m_all
    )  # nothing seen anywhere: weights 0, output 0
    w = tl.exp(m - m_all)
    total = tl.sum(denominators * w, axis=0)
    if HAS_SINKS:
        total += tl.exp(sink - m_all)
    acc = tl.sum(tl.load(part_ptr + row[:, None] * HEAD_DIM_PAD + d[None, :]) * w[:, None], axis=0)
    out = acc / tl.where(total > 0.0, total, 1.0)
    tl.store(
        out_ptr + seq * stride_os + head * stride_oh + d,
        out.to(out_ptr.dtype.element_ty),
        mask=d < HEAD_DIM,
    )
