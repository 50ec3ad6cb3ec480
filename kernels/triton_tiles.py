"""Triton helpers shared by the decode and prefill kernels: read one tile of paged K or V
in its storage dtype, and shape raw scores.

Scale modes (SCALE_MODE): 0 none; 1 one fp32 scale per cache (fp8, intB-tensor), applied
to the scores and the output rather than to every element; 2 one scale per token and KV
head (int8, int4), loaded once per token and applied to score columns (K) and to the
probabilities (V); 3 several scales per token (intB-gN groups), applied per element.
Tiles come back in DOT_DTYPE (the query's fp16/bf16, so tl.dot runs on tensor cores with
fp32 accumulation; fp32 for fp32 models). Small ints (|q| <= 127) and fp8 values are exact
in fp16/bf16, so the conversion loses nothing before the per-tensor/per-token scale.

Packed ints (int4/int2) are read through the byte holding each element (d // VPB, bit
offset (d % VPB) * BITS, offset-binary); the VPB elements of one byte are adjacent lanes,
so the repeated byte is served by the same cache line (HBM traffic stays one read per byte).
"""

from __future__ import annotations

from . import triton_helper

try:
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only where triton is absent
    tl = None


@triton_helper
def load_kv_tile(ptr, scale_ptr, row, scale_row, tmask, col, shift, scale_col,
                 SCALE_MODE: tl.constexpr, IS_INT: tl.constexpr, VPB: tl.constexpr, BITS: tl.constexpr,
                 DOT_DTYPE: tl.constexpr):
    """[BLOCK_N, HEAD_DIM_PAD] tile at element offsets row[:, None] + col[None, :]; zeros where masked."""
    # No `other=`: it cannot be cast to fp8; masked lanes are zeroed below.
    x = tl.load(ptr + row[:, None] + col[None, :], mask=tmask)
    if IS_INT:
        if VPB > 1:
            x = ((x.to(tl.int32) >> shift[None, :]) & ((1 << BITS) - 1)) - (1 << (BITS - 1))
        if SCALE_MODE == 3:
            s = tl.load(scale_ptr + scale_row[:, None] + scale_col[None, :], mask=tmask, other=0.0)
            x = x.to(tl.float32) * s
    x = x.to(DOT_DTYPE)
    return tl.where(tmask, x, tl.zeros_like(x))


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
