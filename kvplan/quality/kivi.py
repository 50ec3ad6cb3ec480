"""KIVI (Liu et al. 2024) storage for one layer in the quality evaluator, as the reference
code keeps it; the quantizer, the residual rule and the value/key grouping are
kvplan.kernels.kivi's, shared with real serving's paged pool (kvplan/real/kivi_pool.py).

Keys gather in a full-precision buffer until it holds `residual` tokens, then the whole
buffer is quantized (per channel, `group` tokens per scale) and emptied; values keep the
`residual` newest tokens in full precision and quantize the oldest one as each new token
arrives. Quantized data is packed in uint8 (2 or 4 values per byte) beside fp32 scales and
minima, and the bytes are measured from these tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from kvplan.kernels.kivi import (
    KIVI_GROUP,
    KIVI_RESIDUAL,
    dequantize_keys,
    dequantize_values,
    kivi_bits,
    quantize_keys,
    quantize_values,
    settle_counts,
)

__all__ = ["KIVI_GROUP", "KIVI_RESIDUAL", "KiviLayer", "kivi_bits"]


@dataclass
class KiviLayer:
    bits: int
    group: int = KIVI_GROUP
    residual: int = KIVI_RESIDUAL
    # keys: per quantized run [kv_heads, groups, head_dim, packed group] + scale/min [kv_heads,
    # groups, head_dim]
    key_packed: list[Any] = field(default_factory=list)
    key_scale: list[Any] = field(default_factory=list)
    key_min: list[Any] = field(default_factory=list)
    key_full: Any = None  # [kv_heads, < residual, head_dim]
    # values: per token [kv_heads, tokens, channel groups, packed] + scale/min [kv_heads, tokens,
    # channel groups]
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
        self.value_full = (
            value if self.value_full is None else torch.cat([self.value_full, value], dim=1)
        )

    def settle(self) -> None:
        """After the step's attention (as the reference): full key groups are quantized, and
        values beyond the residual window leave it oldest first."""
        keys, values = settle_counts(
            self._count(self.key_full), self._count(self.value_full), self.residual
        )
        if keys:
            heads, _, dim = self.key_full.shape
            grouped = (
                self.key_full[:, :keys].float().reshape(heads, keys // self.group, self.group, dim)
            )
            packed, scale, low = quantize_keys(grouped, self.bits)
            self.key_packed.append(packed)
            self.key_scale.append(scale)
            self.key_min.append(low)
            read = dequantize_keys(packed, scale, low, self.bits, self.group).reshape(
                heads, keys, dim
            )
            self.key_read = _extend(self.key_read, read)
            self.key_full = self.key_full[:, keys:] if keys < self.key_full.shape[1] else None
        if values:
            oldest = self.value_full[:, :values]
            packed, scale, low = quantize_values(oldest, self.bits, self.group)
            self.value_packed.append(packed)
            self.value_scale.append(scale)
            self.value_min.append(low)
            self.value_read = _extend(
                self.value_read,
                dequantize_values(packed, scale, low, self.bits, oldest.shape[-1], self.group),
            )
            self.value_full = self.value_full[:, values:]

    @staticmethod
    def _count(buffer: Any) -> int:
        return 0 if buffer is None else buffer.shape[1]

    def keys(self) -> torch.Tensor:
        """All keys as attention reads them, [kv_heads, n, head_dim]."""
        parts = [t.float() for t in (self.key_read, self.key_full) if t is not None]
        return torch.cat(parts, dim=1)

    def values(self) -> torch.Tensor:
        parts = [t.float() for t in (self.value_read, self.value_full) if t is not None]
        return torch.cat(parts, dim=1)

    @property
    def tokens(self) -> int:
        return sum(t.shape[1] for t in self.value_packed) + self._count(self.value_full)

    def nbytes(self) -> int:
        """Bytes the layer's K and V occupy, measured from its tensors."""
        tensors = [
            *self.key_packed,
            *self.key_scale,
            *self.key_min,
            *self.value_packed,
            *self.value_scale,
            *self.value_min,
            self.key_full,
            self.value_full,
        ]
        return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def _extend(done: torch.Tensor | None, more: torch.Tensor) -> torch.Tensor:
    return more if done is None else torch.cat([done, more], dim=1)
