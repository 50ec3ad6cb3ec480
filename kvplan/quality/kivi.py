"""KIVI (Liu et al. 2024) storage for one layer, as the reference code keeps it: asymmetric
min/max quantization with a zero point; keys per channel over groups of `group` tokens,
values per token over groups of channels; a full-precision residual of recent tokens.

Keys gather in a full-precision buffer until it holds `residual` tokens, then the whole
buffer is quantized (per channel, `group` tokens per scale) and emptied; values keep the
`residual` newest tokens in full precision and quantize the oldest one as each new token
arrives. Quantized data is packed in uint8 (2 or 4 values per byte) beside fp32 scales and
minima (KIVI keeps them in the model's dtype: kvplan sizes every scale as fp32), and the
bytes are measured from these tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from kvplan.kernels.quant import pack_bits, unpack_bits

KIVI_GROUP = 32  # tokens per key scale, channels per value scale (the paper's G)
KIVI_RESIDUAL = 32  # recent tokens kept in full precision (the paper's R, a multiple of G)


def kivi_bits(fmt: str | None) -> int:
    """2 or 4 for 'kivi-int2' / 'kivi-int4', else 0."""
    if fmt and fmt.startswith("kivi-int") and fmt[8:] in ("2", "4"):
        return int(fmt[8:])
    if fmt and fmt.startswith("kivi"):
        raise ValueError(f"unknown KIVI format '{fmt}'; use kivi-int2 or kivi-int4")
    return 0


def quantize_asymmetric(x: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantize along the last dim, one (scale, min) per row: q = round((x - min) / scale)
    in [0, 2**bits - 1]; returns (packed uint8, scale, min)."""
    levels = 2**bits - 1
    low = x.amin(-1, keepdim=True)
    scale = (x.amax(-1, keepdim=True) - low) / levels
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round((x - low) / safe).clamp(0, levels)
    return pack_bits(q - 2 ** (bits - 1), bits), scale[..., 0], low[..., 0]


def dequantize_asymmetric(packed: torch.Tensor, scale: torch.Tensor, low: torch.Tensor, bits: int,
                          n: int) -> torch.Tensor:
    q = unpack_bits(packed, bits, n).float() + 2 ** (bits - 1)
    return q * scale[..., None] + low[..., None]


@dataclass
class KiviLayer:
    bits: int
    group: int = KIVI_GROUP
    residual: int = KIVI_RESIDUAL
    # keys: [kv_heads, head_dim, groups, packed group] + scale/min [kv_heads, head_dim, groups]
    key_packed: list[Any] = field(default_factory=list)
    key_scale: list[Any] = field(default_factory=list)
    key_min: list[Any] = field(default_factory=list)
    key_full: Any = None  # [kv_heads, < residual, head_dim]
    # values: per token [kv_heads, tokens, channel groups, packed] + scale/min [kv_heads, tokens, channel groups]
    value_packed: list[Any] = field(default_factory=list)
    value_scale: list[Any] = field(default_factory=list)
    value_min: list[Any] = field(default_factory=list)
    value_full: Any = None  # [kv_heads, <= residual, head_dim]
    # What attention reads back from the quantized parts, decoded once when they are stored.
    key_read: Any = None
    value_read: Any = None

    def append(self, key: torch.Tensor, value: torch.Tensor) -> None:
        """key, value [kv_heads, 1, head_dim] in full precision: joins the residual buffers."""
        self.key_full = key if self.key_full is None else torch.cat([self.key_full, key], dim=1)
        self.value_full = value if self.value_full is None else torch.cat([self.value_full, value], dim=1)

    def settle(self) -> None:
        """After the step's attention (as the reference): a full key buffer is quantized, and
        values beyond the residual window leave it oldest first."""
        if self.key_full is not None and self.key_full.shape[1] == self.residual:
            heads, tokens, dim = self.key_full.shape
            grouped = self.key_full.float().transpose(1, 2).reshape(heads, dim, tokens // self.group, self.group)
            packed, scale, low = quantize_asymmetric(grouped, self.bits)
            self.key_packed.append(packed)
            self.key_scale.append(scale)
            self.key_min.append(low)
            read = dequantize_asymmetric(packed, scale, low, self.bits, self.group).reshape(heads, dim, -1)
            self.key_read = _extend(self.key_read, read.transpose(1, 2))
            self.key_full = None
        while self.value_full is not None and self.value_full.shape[1] > self.residual:
            oldest = self.value_full[:, :1].float()
            heads, _, dim = oldest.shape
            width = min(self.group, dim)
            packed, scale, low = quantize_asymmetric(oldest.reshape(heads, 1, -(-dim // width), width), self.bits)
            self.value_packed.append(packed)
            self.value_scale.append(scale)
            self.value_min.append(low)
            read = dequantize_asymmetric(packed, scale, low, self.bits, width).reshape(heads, 1, -1)[..., :dim]
            self.value_read = _extend(self.value_read, read)
            self.value_full = self.value_full[:, 1:]

    def keys(self) -> torch.Tensor:
        """All keys as attention reads them, [kv_heads, n, head_dim]."""
        parts = [t.float() for t in (self.key_read, self.key_full) if t is not None]
        return torch.cat(parts, dim=1)

    def values(self) -> torch.Tensor:
        parts = [t.float() for t in (self.value_read, self.value_full) if t is not None]
        return torch.cat(parts, dim=1)

    @property
    def tokens(self) -> int:
        return len(self.value_packed) + (self.value_full.shape[1] if self.value_full is not None else 0)

    def nbytes(self) -> int:
        """Bytes the layer's K and V occupy, measured from its tensors."""
        tensors = [*self.key_packed, *self.key_scale, *self.key_min, *self.value_packed, *self.value_scale,
                   *self.value_min, self.key_full, self.value_full]
        return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def _extend(done: torch.Tensor | None, more: torch.Tensor) -> torch.Tensor:
    return more if done is None else torch.cat([done, more], dim=1)
