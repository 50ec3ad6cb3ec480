"""KV-cache formats as tensor layouts, with their quantize/dequantize in plain torch.

A format is described once (`CacheFormat`) and every consumer -- the Triton kernels, the
vectorized torch fallback and the naive references -- reads the same description, so the
bytes a layout really allocates can be checked against kvplan's estimator
(`kvplan.spec.parse_kv_format(name).bytes_per_vector`).

Layouts (per cache, K and V alike; D = head_dim):

* ``none`` / ``fp32`` / ``fp16`` / ``bf16``: ``[num_blocks, block_size, num_kv_heads, D]`` in
  that dtype, no scales.
* ``fp8-e4m3`` / ``fp8-e5m2``: same shape in ``float8_e4m3fn`` / ``float8_e5m2`` plus one
  fp32 scale per cache (shape ``[1]``): stored = fp8(clamp(x / scale)), x = stored * scale.
* ``int8`` / ``int4`` / ``int2`` (per token-head), ``intB-gN`` (per group of N elements along
  head_dim): data ``[num_blocks, block_size, num_kv_heads, packed_dim]`` plus fp32 scales
  ``[num_blocks, block_size, num_kv_heads, num_groups]``. Symmetric absmax:
  scale = absmax / qmax (qmax = 2**(bits-1) - 1: 127, 7, 1), q = round(x / scale) clamped
  to [-qmax, qmax], x = q * scale. ``intB-tensor`` uses one fp32 scale per cache instead.

Rounding is round-half-to-even everywhere (torch.round; the kernels reproduce it exactly).

Packing for bits < 8 (int4, int2), in ``uint8``: values are stored **offset-binary**,
u = q + 2**(bits-1) (int4: q in [-8, 7] -> u in [0, 15]; symmetric quantization only ever
produces [-7, 7]). Element d lives in byte d // (8 // bits) at bit offset
(d % (8 // bits)) * bits: for int4 the **low nibble holds the even element** 2j and the
high nibble the odd element 2j+1. A head_dim that does not fill the last byte is padded
with q = 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from kvplan.spec import parse_kv_format

ScaleLayout = Literal["none", "tensor", "token-head", "group"]

_FLOAT_STORAGE = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp8-e4m3": torch.float8_e4m3fn,
    "fp8-e5m2": torch.float8_e5m2,
}
_DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


@dataclass(frozen=True)
class CacheFormat:
    """How one KV vector is laid out in the paged cache tensors.

    `bits` is the logical width of one element; `storage` the dtype of the cache tensor
    (uint8 for packed sub-byte ints). `group_size` is only set for the "group" layout.
    """

    name: str
    storage: torch.dtype
    bits: int
    is_float: bool
    scale: ScaleLayout
    group_size: int | None = None

    @property
    def values_per_byte(self) -> int:
        """Logical elements per stored element: 2 for int4, 4 for int2, else 1."""
        return 8 // self.bits if (not self.is_float and self.bits < 8) else 1

    @property
    def qmax(self) -> int:
        """Largest quantized magnitude of an int format (symmetric range)."""
        return 2 ** (self.bits - 1) - 1

    @property
    def offset(self) -> int:
        """Offset-binary bias of packed sub-byte values (8 for int4)."""
        return 2 ** (self.bits - 1)

    @property
    def per_token_scales(self) -> bool:
        """True when scales are stored beside every token (token-head or group)."""
        return self.scale in ("token-head", "group")

    @property
    def fp8_max(self) -> float:
        return float(torch.finfo(self.storage).max)

    def packed_dim(self, head_dim: int) -> int:
        """Stored elements per vector: ceil(head_dim * bits / 8) for packed ints."""
        return math.ceil(head_dim / self.values_per_byte)

    def group_len(self, head_dim: int) -> int:
        """Elements sharing one scale; a group wider than head_dim covers the whole vector."""
        if self.scale == "group":
            return min(self.group_size or head_dim, head_dim)
        return head_dim

    def num_groups(self, head_dim: int) -> int:
        """Scales stored per token per KV head (0 when scales are not per token)."""
        return math.ceil(head_dim / self.group_len(head_dim)) if self.per_token_scales else 0


def get_format(fmt: str | CacheFormat, dtype: torch.dtype | None = None) -> CacheFormat:
    """Resolve a kvplan KV format name to its layout.

    "none" (or "auto") means "unquantized in `dtype`", so callers that only hold a cache
    tensor pass its dtype. Other names go through kvplan's estimator parser so both sides
    agree on what e.g. "int4-g32" means.
    """
    if isinstance(fmt, CacheFormat):
        return fmt
    key = fmt.lower()
    if key in ("none", "auto"):
        if dtype not in _DTYPE_NAMES:
            raise ValueError(f"KV format '{fmt}' needs an fp32/fp16/bf16 dtype, got {dtype}")
        key = _DTYPE_NAMES[dtype]
    spec = parse_kv_format(key)
    if spec.is_float:
        return CacheFormat(spec.name, _FLOAT_STORAGE[spec.name], spec.bits, True, spec.scale)
    if spec.bits not in (8, 4, 2):
        raise ValueError(f"KV format '{fmt}': only 8-, 4- and 2-bit ints are implemented")
    out = CacheFormat(
        spec.name,
        torch.int8 if spec.bits == 8 else torch.uint8,
        spec.bits,
        False,
        spec.scale,
        spec.group_size,
    )
    if out.scale == "group" and out.group_size % out.values_per_byte:
        # A byte must never straddle two groups, or its halves would need two scales.
        raise ValueError(
            f"KV format '{fmt}': group size must be a multiple of {out.values_per_byte}"
        )
    return out


@dataclass(frozen=True)
class PagedKVCache:
    """One layer's paged K and V caches plus the scales their format needs.

    k_scale/v_scale: None (unquantized), shape [1] (per-tensor: fp8, intB-tensor) or
    [num_blocks, block_size, num_kv_heads, num_groups] fp32 (per token-head / group).
    """

    fmt: CacheFormat
    head_dim: int
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    k_scale: torch.Tensor | None
    v_scale: torch.Tensor | None

    @property
    def num_blocks(self) -> int:
        return self.key_cache.shape[0]

    @property
    def block_size(self) -> int:
        return self.key_cache.shape[1]

    @property
    def num_kv_heads(self) -> int:
        return self.key_cache.shape[2]


def allocate_kv_cache(
    fmt: str | CacheFormat,
    num_blocks: int,
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | str = "cpu",
) -> PagedKVCache:
    """Allocate zeroed K/V caches for `fmt`; per-tensor scales start at 1.0 (vLLM's default)."""
    for label, value in (
        ("num_blocks", num_blocks),
        ("block_size", block_size),
        ("num_kv_heads", num_kv_heads),
        ("head_dim", head_dim),
    ):
        if value <= 0:
            raise ValueError(f"{label} must be positive, got {value}")
    cf = get_format(fmt, dtype)
    shape = (num_blocks, block_size, num_kv_heads, cf.packed_dim(head_dim))
    key_cache = torch.zeros(shape, dtype=cf.storage, device=device)
    value_cache = torch.zeros(shape, dtype=cf.storage, device=device)
    k_scale = v_scale = None
    if cf.per_token_scales:
        scale_shape = (num_blocks, block_size, num_kv_heads, cf.num_groups(head_dim))
        k_scale = torch.zeros(scale_shape, dtype=torch.float32, device=device)
        v_scale = torch.zeros(scale_shape, dtype=torch.float32, device=device)
    elif cf.scale == "tensor":
        k_scale = torch.ones(1, dtype=torch.float32, device=device)
        v_scale = torch.ones(1, dtype=torch.float32, device=device)
    return PagedKVCache(cf, head_dim, key_cache, value_cache, k_scale, v_scale)


def cache_bytes_per_token_per_head(fmt_name: str, head_dim: int) -> int:
    """Bytes one token's K (or V) vector of one KV head really occupies, scales included.

    Measured from the allocated tensors (on the meta device, so nothing is allocated);
    per-tensor scales are a few bytes per layer and, like the estimator, not counted.
    """
    cache = allocate_kv_cache(fmt_name, 1, 1, 1, head_dim, dtype=torch.float16, device="meta")
    total = cache.key_cache.numel() * cache.key_cache.element_size()
    if cache.fmt.per_token_scales:
        total += cache.k_scale.numel() * cache.k_scale.element_size()
    return total


def tensor_scale(x: torch.Tensor, fmt: str | CacheFormat) -> torch.Tensor:
    """A per-tensor scale that maps absmax(x) onto the format's largest value (shape [1])."""
    cf = get_format(fmt, x.dtype)
    top = cf.fp8_max if cf.is_float else float(cf.qmax)
    absmax = x.detach().abs().amax().float().reshape(1)
    return torch.where(absmax > 0, absmax / top, torch.ones_like(absmax))


def pack_bits(q: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack signed ints q [..., n] into uint8 [..., ceil(n * bits / 8)] (offset-binary, low bits
    first)."""
    per_byte = 8 // bits
    pad = (-q.shape[-1]) % per_byte
    q = torch.nn.functional.pad(q.to(torch.int32), (0, pad))
    u = (q + 2 ** (bits - 1)).reshape(*q.shape[:-1], -1, per_byte)
    shifts = torch.arange(per_byte, device=q.device, dtype=torch.int32) * bits
    return (u << shifts).sum(-1).to(torch.uint8)


def unpack_bits(packed: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """Inverse of pack_bits: uint8 [..., P] -> int32 [..., n] signed values."""
    per_byte = 8 // bits
    shifts = torch.arange(per_byte, device=packed.device, dtype=torch.int32) * bits
    u = (packed.to(torch.int32).unsqueeze(-1) >> shifts) & ((1 << bits) - 1)
    return (u - 2 ** (bits - 1)).reshape(*packed.shape[:-1], -1)[..., :n]


def quantize(
    x: torch.Tensor, fmt: str | CacheFormat, scale: torch.Tensor | float | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Encode vectors x [..., head_dim] for storage.

    Returns (stored [..., packed_dim] in fmt.storage, per-token scales [..., num_groups]
    fp32 or None). `scale` is the per-tensor scale of fp8/intB-tensor formats (default 1).
    """
    cf = get_format(fmt, x.dtype)
    if cf.scale == "none":
        return x.to(cf.storage), None
    head_dim = x.shape[-1]
    xf = x.float()
    if cf.scale == "tensor":
        s = torch.as_tensor(1.0 if scale is None else scale, dtype=torch.float32, device=x.device)
        y = xf / s.reshape(())
        if cf.is_float:
            return y.clamp(-cf.fp8_max, cf.fp8_max).to(cf.storage), None
        q = torch.round(y).clamp(-cf.qmax, cf.qmax)
        return _store_ints(q, cf), None
    glen, ngroups = cf.group_len(head_dim), cf.num_groups(head_dim)
    xg = torch.nn.functional.pad(xf, (0, ngroups * glen - head_dim)).reshape(
        *x.shape[:-1], ngroups, glen
    )
    scales = xg.abs().amax(-1) / cf.qmax
    # An all-zero group has scale 0; divide by 1 instead so it stores q = 0, not NaN.
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))
    q = torch.round(xg / safe.unsqueeze(-1)).clamp(-cf.qmax, cf.qmax)
    q = q.reshape(*x.shape[:-1], ngroups * glen)[..., :head_dim]
    return _store_ints(q, cf), scales


def _store_ints(q: torch.Tensor, cf: CacheFormat) -> torch.Tensor:
    return q.to(torch.int8) if cf.bits == 8 else pack_bits(q, cf.bits)


def dequantize(
    stored: torch.Tensor, scales: torch.Tensor | float | None, fmt: str | CacheFormat, head_dim: int
) -> torch.Tensor:
    """Decode stored vectors [..., packed_dim] back to fp32 [..., head_dim].

    `scales` is per-token [..., num_groups] for token-head/group formats, a per-tensor
    scale (tensor of one element or float) for fp8/intB-tensor, ignored otherwise.
    """
    cf = get_format(fmt, stored.dtype)
    if cf.is_float:
        values = stored.float()
        if cf.scale == "tensor":
            values = values * _as_scalar(scales, stored.device)
        return values
    q = stored.float() if cf.bits == 8 else unpack_bits(stored, cf.bits, head_dim).float()
    if cf.scale == "tensor":
        return q * _as_scalar(scales, stored.device)
    group_of = torch.arange(head_dim, device=stored.device) // cf.group_len(head_dim)
    return q * scales.float()[..., group_of]


def _as_scalar(scale: torch.Tensor | float | None, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(
        1.0 if scale is None else scale, dtype=torch.float32, device=device
    ).reshape(())
