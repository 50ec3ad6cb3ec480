"""write_kv: scatter one step's new K/V into the paged caches (vLLM's reshape_and_cache).

Quantization happens on the way in, so the cache only ever holds the stored format. The
Triton kernel reproduces `quant.quantize` bit for bit: IEEE division (div_rn), round
half to even done by hand, and fp8 values rounded onto the fp8 grid in fp32 before the
cast (the cast is then exact). The last point matters beyond style: the Triton
interpreter's fp32->fp8 conversion neither rounds to even nor carries a mantissa
overflow into the exponent, so casting unrounded values would be wrong on CPU.
"""

from __future__ import annotations

import math

import torch

from . import jit_on_first_use, select_backend
from .quant import CacheFormat, get_format, quantize
from .reference import write_kv_reference

try:  # the kernel below is only jitted on first launch; without triton, torch serves
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only where triton is absent
    tl = None

_KIND_CAST, _KIND_FP8, _KIND_INT = 0, 1, 2


def write_kv(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    fmt: str | CacheFormat = "none",
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    *,
    backend: str | None = None,
) -> None:
    """Store key/value [num_tokens, num_kv_heads, head_dim] at slot_mapping (int64 [num_tokens]).

    slot = block_id * block_size + offset; -1 skips the token (padding). Caches are
    [num_blocks, block_size, num_kv_heads, packed_dim] in the format's storage dtype.
    k_scale/v_scale: the per-token scale caches of int formats (written here), or the
    per-tensor scales of fp8/intB-tensor formats (read; default 1.0).
    backend: None/"auto" (Triton where it can run, else torch), "triton", "torch", "reference".
    """
    cf = get_format(fmt, key_cache.dtype)
    _check_write_args(key, value, key_cache, value_cache, slot_mapping, cf, k_scale, v_scale)
    chosen = select_backend(backend, key.is_cuda)
    if chosen == "reference":
        write_kv_reference(key, value, key_cache, value_cache, slot_mapping, cf, k_scale, v_scale)
    elif chosen == "torch":
        _write_kv_torch(key, value, key_cache, value_cache, slot_mapping, cf, k_scale, v_scale)
    else:
        for src, cache, scale in ((key, key_cache, k_scale), (value, value_cache, v_scale)):
            _launch_write(src, cache, scale, slot_mapping, cf)


def _check_write_args(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    cf: CacheFormat,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
) -> None:
    if key.dim() != 3 or key.shape != value.shape:
        raise ValueError(
            f"key/value must both be [num_tokens, num_kv_heads, head_dim], got "
            f"{tuple(key.shape)} and {tuple(value.shape)}"
        )
    num_tokens, num_kv_heads, head_dim = key.shape
    expected = (num_kv_heads, cf.packed_dim(head_dim))
    for cache in (key_cache, value_cache):
        if cache.dim() != 4 or tuple(cache.shape[2:]) != expected or cache.shape != key_cache.shape:
            raise ValueError(
                f"caches must be [num_blocks, block_size, {expected[0]}, {expected[1]}], "
                f"got {tuple(key_cache.shape)} and {tuple(value_cache.shape)}"
            )
        if cache.dtype != cf.storage:
            raise ValueError(f"format {cf.name} stores {cf.storage}, but a cache is {cache.dtype}")
    if slot_mapping.shape != (num_tokens,) or slot_mapping.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"slot_mapping must be int32/int64 [{num_tokens}], got "
            f"{slot_mapping.dtype} {tuple(slot_mapping.shape)}"
        )
    if cf.per_token_scales:
        scale_shape = (*key_cache.shape[:3], cf.num_groups(head_dim))
        for scale in (k_scale, v_scale):
            if scale is None or tuple(scale.shape) != scale_shape or scale.dtype != torch.float32:
                raise ValueError(f"format {cf.name} needs fp32 scale caches of shape {scale_shape}")


def _write_kv_torch(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    cf: CacheFormat,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
) -> None:
    """Vectorized fallback: quantize every kept token at once, then one indexed store per tensor."""
    slots = slot_mapping.long()
    if bool((slots < 0).any()):  # padding tokens (slot -1) are dropped
        keep = slots >= 0
        slots, key, value = slots[keep], key[keep], value[keep]
    for src, cache, scale in ((key, key_cache, k_scale), (value, value_cache, v_scale)):
        stored, scales = quantize(src, cf, scale if cf.scale == "tensor" else None)
        _store(cache, slots, stored)
        if cf.per_token_scales:
            _store(scale, slots, scales)


def _store(cache: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor) -> None:
    """cache[slot // block_size, slot % block_size] = rows; a contiguous cache is seen as
    [slots, ...] so the store is one index_copy_ instead of a two-index put."""
    if cache.is_contiguous():
        if cache.dtype in (
            torch.float8_e4m3fn,
            torch.float8_e5m2,
        ):  # no index_copy_ for fp8: copy the bytes
            cache, rows = cache.view(torch.uint8), rows.view(torch.uint8)
        cache.view(-1, *cache.shape[2:]).index_copy_(0, slots, rows)
    else:
        block_size = cache.shape[1]
        cache[slots // block_size, slots % block_size] = rows


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _launch_write(
    src: torch.Tensor,
    cache: torch.Tensor,
    scale: torch.Tensor | None,
    slot_mapping: torch.Tensor,
    cf: CacheFormat,
) -> None:
    num_tokens, num_kv_heads, head_dim = src.shape
    if num_tokens == 0:
        return
    if src.stride(-1) != 1 or cache.stride(-1) != 1:
        raise ValueError("write_kv's Triton path needs the last (head_dim) dimension contiguous")
    if cf.scale == "tensor" and scale is None:
        scale = torch.ones(1, dtype=torch.float32, device=src.device)
    if scale is None:
        scale = cache  # never read: only passed so the kernel has a pointer
    scale_strides = scale.stride()[:3] if cf.per_token_scales else (0, 0, 0)
    kind = _KIND_CAST if cf.scale == "none" else (_KIND_FP8 if cf.is_float else _KIND_INT)
    group_len, vpb = cf.group_len(head_dim), cf.values_per_byte
    bytes_per_group = -(-group_len // vpb)
    num_groups = max(1, cf.num_groups(head_dim))
    fp8 = torch.finfo(cf.storage) if kind == _KIND_FP8 else None
    kernel = jit_on_first_use(_write_kv_kernel)
    kernel[(num_tokens, num_kv_heads)](
        src,
        cache,
        scale,
        slot_mapping,
        src.stride(0),
        src.stride(1),
        *cache.stride()[:3],
        *scale_strides,
        HEAD_DIM=head_dim,
        HEAD_DIM_PAD=_next_pow2(head_dim),
        BLOCK_SIZE=cache.shape[1],
        KIND=kind,
        PER_TOKEN=cf.per_token_scales,
        BITS=cf.bits,
        QMAX=cf.qmax if kind == _KIND_INT else 1,
        VPB=vpb,
        GROUP_LEN=group_len,
        NG_PAD=_next_pow2(num_groups),
        BYTES_PER_GROUP=bytes_per_group,
        BPG_PAD=_next_pow2(bytes_per_group),
        FP8_MANT=round(-math.log2(fp8.eps)) if fp8 else 0,
        FP8_EMIN=round(math.log2(fp8.smallest_normal)) if fp8 else 0,
        FP8_MAX=fp8.max if fp8 else 0.0,
    )


def _write_kv_kernel(
    src_ptr,
    cache_ptr,
    scale_ptr,
    slot_ptr,
    stride_st,
    stride_sh,
    stride_cb,
    stride_ct,
    stride_ch,
    stride_xb,
    stride_xt,
    stride_xh,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    KIND: tl.constexpr,
    PER_TOKEN: tl.constexpr,
    BITS: tl.constexpr,
    QMAX: tl.constexpr,
    VPB: tl.constexpr,
    GROUP_LEN: tl.constexpr,
    NG_PAD: tl.constexpr,
    BYTES_PER_GROUP: tl.constexpr,
    BPG_PAD: tl.constexpr,
    FP8_MANT: tl.constexpr,
    FP8_EMIN: tl.constexpr,
    FP8_MAX: tl.constexpr,
):
    """One program per (token, kv head): encode one vector and store it (and its scales)."""
    tok = tl.program_id(0)
    head = tl.program_id(1)
    slot = tl.load(slot_ptr + tok).to(tl.int64)
    # Padding tokens (slot -1) get an empty element range, so they load and store nothing.
    # (A scalar `& keep` on a mask would be simpler, but the interpreter mistypes that.)
    limit = tl.where(slot >= 0, HEAD_DIM, 0)
    block = slot // BLOCK_SIZE
    src_row = src_ptr + tok.to(tl.int64) * stride_st + head * stride_sh
    dst_row = cache_ptr + block * stride_cb + (slot % BLOCK_SIZE) * stride_ct + head * stride_ch
    if KIND != 2:
        d = tl.arange(0, HEAD_DIM_PAD)
        dmask = d < limit
        x = tl.load(src_row + d, mask=dmask, other=0.0)
        if KIND == 0:
            out = x.to(cache_ptr.dtype.element_ty)
        else:
            y = x.to(tl.float32)
            y = tl.math.div_rn(y, tl.full(y.shape, 0.0, tl.float32) + tl.load(scale_ptr))
            y = tl.minimum(tl.maximum(y, -FP8_MAX), FP8_MAX)
            # Round onto the fp8 grid: the spacing at |y| is 2^(max(e, emin) - mantissa bits).
            bits = y.to(tl.int32, bitcast=True)
            exp = tl.maximum(((bits >> 23) & 0xFF) - 127, FP8_EMIN)
            quantum = ((exp - FP8_MANT + 127) << 23).to(tl.float32, bitcast=True)
            steps = tl.math.div_rn(tl.abs(y), quantum)  # exact: quantum is a power of two
            low = tl.floor(steps)
            frac = steps - low
            odd = (low - 2.0 * tl.floor(low * 0.5)) == 1.0
            steps = low + ((frac > 0.5) | ((frac == 0.5) & odd)).to(tl.float32)
            mag = steps * quantum
            out = tl.where(bits < 0, -mag, mag).to(cache_ptr.dtype.element_ty)  # keeps -0.0
        tl.store(dst_row + d, out, mask=dmask)
    else:
        # Element d = g * GROUP_LEN + p * VPB + i: group g, byte p of the group, slot i of the byte.
        g = tl.arange(0, NG_PAD)[:, None, None]
        p = tl.arange(0, BPG_PAD)[None, :, None]
        i = tl.arange(0, VPB)[None, None, :]
        d = g * GROUP_LEN + p * VPB + i
        emask = (p < BYTES_PER_GROUP) & (d < limit)
        x = tl.load(src_row + d, mask=emask, other=0.0).to(tl.float32)
        if PER_TOKEN:
            absmax = tl.max(tl.max(tl.abs(x), axis=2), axis=1)
            scale = tl.math.div_rn(absmax, tl.full(absmax.shape, QMAX, tl.float32))
            gs = tl.arange(0, NG_PAD)
            scale_row = (
                scale_ptr + block * stride_xb + (slot % BLOCK_SIZE) * stride_xt + head * stride_xh
            )
            tl.store(scale_row + gs, scale, mask=gs * GROUP_LEN < limit)
            # An all-zero group stores scale 0 and divides by 1, so q = 0 rather than NaN.
            safe = tl.where(scale > 0.0, scale, 1.0)
            y = tl.math.div_rn(x, tl.broadcast_to(safe[:, None, None], x.shape))
        else:
            y = tl.math.div_rn(x, tl.full(x.shape, 0.0, tl.float32) + tl.load(scale_ptr))
        low = tl.floor(y)
        frac = y - low
        odd = (low - 2.0 * tl.floor(low * 0.5)) == 1.0
        q = low + ((frac > 0.5) | ((frac == 0.5) & odd)).to(tl.float32)
        q = tl.minimum(tl.maximum(q, -QMAX), QMAX).to(tl.int32)
        if VPB == 1:
            tl.store(dst_row + g * BYTES_PER_GROUP + p + i, q.to(tl.int8), mask=emask)
        else:
            # Offset-binary, element i of a byte in bits [i*BITS, (i+1)*BITS): low bits first.
            packed = tl.sum((q + (1 << (BITS - 1))) << (i * BITS), axis=2)
            g2 = tl.arange(0, NG_PAD)[:, None]
            p2 = tl.arange(0, BPG_PAD)[None, :]
            bmask = (p2 < BYTES_PER_GROUP) & (g2 * GROUP_LEN + p2 * VPB < limit)
            tl.store(dst_row + g2 * BYTES_PER_GROUP + p2, packed.to(tl.uint8), mask=bmask)
