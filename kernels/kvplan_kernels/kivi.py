"""KIVI (Liu et al. 2024) as tensors: the asymmetric quantizer, when tokens leave the
full-precision residual, and the paged layout real serving keeps it in.

Quantizer: per row, q = round((x - min) / scale) in [0, 2**bits - 1], scale = (max - min) /
(2**bits - 1), x = q * scale + min (a zero point, unlike kvplan's symmetric int formats);
packed in uint8 with `quant.pack_bits` (2 or 4 values per byte). Keys are quantized per
channel over groups of G tokens, values per token over groups of min(G, head_dim) channels.

Residual (the reference code's rule, `settle_counts`): new tokens' K/V join a
full-precision buffer; after the step's attention, the keys waiting there are quantized R
at a time (R a multiple of G) and the values older than the R newest are quantized.

Paged layout (`KiviPagedCache`, one per layer): a pool block holds one key group, so the
block size is G. Per block: keys [kv_heads, head_dim, G * bits / 8] packed along tokens
with one (scale, min) per channel; values [block_size, kv_heads, packed] with one
(scale, min) per token and channel group. Scales and minima are fp32 (KIVI keeps them in
the model's dtype; kvplan sizes every scale as fp32). The residual lives beside the pool,
per sequence (kvplan/real/kivi_pool.py), never in its blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .quant import pack_bits, unpack_bits

KIVI_GROUP = 32  # tokens per key scale, channels per value scale (the paper's G)
KIVI_RESIDUAL = 32  # recent tokens kept in full precision (the paper's R, a multiple of G)


def kivi_bits(fmt: str | None) -> int:
    """2 or 4 for 'kivi-int2' / 'kivi-int4', else 0."""
    if fmt and fmt.startswith("kivi-int") and fmt[8:] in ("2", "4"):
        return int(fmt[8:])
    if fmt and fmt.startswith("kivi"):
        raise ValueError(f"unknown KIVI format '{fmt}'; use kivi-int2 or kivi-int4")
    return 0


def quantize_asymmetric(
    x: torch.Tensor, bits: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantize along the last dim, one (scale, min) per row; returns (packed uint8, scale, min)."""
    levels = 2**bits - 1
    low = x.amin(-1, keepdim=True)
    scale = (x.amax(-1, keepdim=True) - low) / levels
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round((x - low) / safe).clamp(0, levels)
    return pack_bits(q - 2 ** (bits - 1), bits), scale[..., 0], low[..., 0]


def dequantize_asymmetric(
    packed: torch.Tensor, scale: torch.Tensor, low: torch.Tensor, bits: int, n: int
) -> torch.Tensor:
    q = unpack_bits(packed, bits, n).float() + 2 ** (bits - 1)
    return q * scale[..., None] + low[..., None]


def settle_counts(
    keys_waiting: int, values_full: int, residual: int = KIVI_RESIDUAL
) -> tuple[int, int]:
    """After a step's attention: (oldest waiting keys to quantize, oldest full values to
    quantize)."""
    return keys_waiting - keys_waiting % residual, max(0, values_full - residual)


def value_width(head_dim: int, group: int = KIVI_GROUP) -> int:
    """Channels sharing a value's (scale, min); head_dim must be a multiple of it."""
    width = min(group, head_dim)
    if head_dim % width:
        raise ValueError(
            f"KIVI groups values by {width} channels; head_dim {head_dim} is not a multiple"
        )
    return width


def quantize_values(
    values: torch.Tensor, bits: int, group: int = KIVI_GROUP
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """values [..., head_dim] per token -> packed [..., groups, width * bits / 8], scale/min [...,
    groups]."""
    width = value_width(values.shape[-1], group)
    return quantize_asymmetric(values.float().reshape(*values.shape[:-1], -1, width), bits)


def dequantize_values(
    packed: torch.Tensor,
    scale: torch.Tensor,
    low: torch.Tensor,
    bits: int,
    head_dim: int,
    group: int = KIVI_GROUP,
) -> torch.Tensor:
    width = value_width(head_dim, group)
    return dequantize_asymmetric(packed, scale, low, bits, width).reshape(
        *packed.shape[:-2], head_dim
    )


def quantize_keys(keys: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """keys [..., tokens, head_dim] of whole groups (tokens = G) -> per channel: packed
    [..., head_dim, G * bits / 8], scale/min [..., head_dim]."""
    return quantize_asymmetric(keys.float().transpose(-1, -2), bits)


def dequantize_keys(
    packed: torch.Tensor, scale: torch.Tensor, low: torch.Tensor, bits: int, group: int = KIVI_GROUP
) -> torch.Tensor:
    """Inverse of quantize_keys: [..., G, head_dim] fp32."""
    return dequantize_asymmetric(packed, scale, low, bits, group).transpose(-1, -2)


@dataclass(frozen=True)
class KiviPagedCache:
    """One layer's quantized KIVI K/V in pool blocks of G tokens (see the module doc)."""

    bits: int
    head_dim: int
    key_packed: torch.Tensor  # uint8 [num_blocks, kv_heads, head_dim, G * bits / 8]
    key_scale: torch.Tensor  # fp32 [num_blocks, kv_heads, head_dim]
    key_min: torch.Tensor
    value_packed: torch.Tensor  # uint8 [num_blocks, G, kv_heads, groups, width * bits / 8]
    value_scale: torch.Tensor  # fp32 [num_blocks, G, kv_heads, groups]
    value_min: torch.Tensor

    @property
    def num_blocks(self) -> int:
        return self.key_packed.shape[0]

    @property
    def block_size(self) -> int:
        return self.value_packed.shape[1]

    @property
    def num_kv_heads(self) -> int:
        return self.key_packed.shape[1]

    @property
    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (
            self.key_packed,
            self.key_scale,
            self.key_min,
            self.value_packed,
            self.value_scale,
            self.value_min,
        )

    def key_block_bytes(self, blocks: torch.Tensor) -> int:
        """Bytes the quantized key groups in `blocks` occupy, measured from the tensors."""
        return sum(t[blocks].numel() * t.element_size() for t in self.tensors[:3])

    def value_slot_bytes(self, slots: torch.Tensor) -> int:
        """Bytes the quantized values at flat `slots` (block * G + offset) occupy."""
        return sum(t.flatten(0, 1)[slots].numel() * t.element_size() for t in self.tensors[3:])

    def store_keys(self, blocks: torch.Tensor, keys: torch.Tensor) -> None:
        """keys [len(blocks), G, kv_heads, head_dim]: each block's whole group, quantized per
        channel."""
        packed, scale, low = quantize_keys(keys.transpose(1, 2), self.bits)
        for tensor, rows in (
            (self.key_packed, packed),
            (self.key_scale, scale),
            (self.key_min, low),
        ):
            tensor.index_copy_(0, blocks, rows)

    def store_values(self, slots: torch.Tensor, values: torch.Tensor) -> None:
        """values [len(slots), kv_heads, head_dim]: per token, at flat slots."""
        packed, scale, low = quantize_values(values, self.bits)
        for tensor, rows in (
            (self.value_packed, packed),
            (self.value_scale, scale),
            (self.value_min, low),
        ):
            tensor.flatten(0, 1).index_copy_(0, slots, rows)

    def read_blocks(self, blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The blocks' K and V as attention reads them, [len(blocks), G, kv_heads, head_dim]
        fp32 each (slots not quantized yet read as zeros: the caller overlays the residual)."""
        keys = dequantize_keys(
            self.key_packed[blocks],
            self.key_scale[blocks],
            self.key_min[blocks],
            self.bits,
            self.block_size,
        )
        values = dequantize_values(
            self.value_packed[blocks],
            self.value_scale[blocks],
            self.value_min[blocks],
            self.bits,
            self.head_dim,
        )
        return keys.transpose(1, 2), values


def allocate_kivi_cache(
    bits: int,
    num_blocks: int,
    num_kv_heads: int,
    head_dim: int,
    *,
    device: torch.device | str = "cpu",
) -> KiviPagedCache:
    """Zeroed KIVI tensors for `num_blocks` blocks of G tokens."""
    group, width = KIVI_GROUP, value_width(head_dim)
    groups = head_dim // width

    def zeros(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.zeros(shape, dtype=dtype, device=device)

    return KiviPagedCache(
        bits,
        head_dim,
        zeros(num_blocks, num_kv_heads, head_dim, group * bits // 8, dtype=torch.uint8),
        zeros(num_blocks, num_kv_heads, head_dim),
        zeros(num_blocks, num_kv_heads, head_dim),
        zeros(num_blocks, group, num_kv_heads, groups, width * bits // 8, dtype=torch.uint8),
        zeros(num_blocks, group, num_kv_heads, groups),
        zeros(num_blocks, group, num_kv_heads, groups),
    )
