"""How KV (and weights) are stored: element bits plus the scales a quantized format needs."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal, Protocol


class HasDtype(Protocol):
    """What a KV format needs of a model: its activation dtype (what `auto` means)."""

    @property
    def dtype(self) -> str: ...


_DTYPE_BYTES = {
    "fp32": 4.0,
    "float32": 4.0,
    "fp16": 2.0,
    "float16": 2.0,
    "bf16": 2.0,
    "bfloat16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "fp4": 0.5,
    "mxfp4": 4.25 / 8,
    "nvfp4": 4.5 / 8,
}


def dtype_bytes(name: str) -> float:
    try:
        return _DTYPE_BYTES[name.lower()]
    except KeyError:
        raise ValueError(
            f"unknown weight dtype '{name}'; use one of: {', '.join(sorted(_DTYPE_BYTES))}"
        ) from None


ScaleScheme = Literal["none", "tensor", "token-head", "group", "kivi"]


@dataclass(frozen=True)
class KVFormat:
    """How one KV vector is stored: element bits plus the scales a quantized format needs.

    Scales are fp32 as vLLM sizes them: per-token-head int8 at head_dim 128 is
    128 + 4 = 132 B per vector, 264 B per token per head for K and V.
    """

    name: str
    bits: int
    is_float: bool
    scale: ScaleScheme = "none"
    group_size: int | None = None
    scale_bytes: int = 4

    def bytes_per_vector(self, dim: int) -> float:
        data = math.ceil(dim * self.bits / 8)
        if self.scale == "token-head":
            return data + self.scale_bytes
        if self.scale == "group":
            return data + math.ceil(dim / (self.group_size or dim)) * self.scale_bytes
        if self.scale == "kivi":
            # KIVI: a scale and a zero point (min) per key channel, shared by a group of
            # tokens; per value token, one pair per group of channels. Averaged over the K and
            # V vectors of a token; the full-precision residual is not counted (steady state;
            # kivi_sequence_bytes counts it).
            return data + (self.kivi_key_pair_bytes(dim) + self.kivi_value_pair_bytes(dim)) / 2
        return float(data)  # per-tensor scales are a few bytes per layer, not per token

    def kivi_key_pair_bytes(self, dim: int) -> float:
        """Per token: a key's share of its channels' (scale, min) pairs."""
        return dim * 2 * self.scale_bytes / (self.group_size or 1)

    def kivi_value_pair_bytes(self, dim: int) -> int:
        """Per token: a value's (scale, min) pairs, one per group of channels."""
        return math.ceil(dim / min(self.group_size or dim, dim)) * 2 * self.scale_bytes

    def kivi_sequence_bytes(
        self, tokens: int, dim: int, full_bytes: float, residual: int = 32
    ) -> float:
        """K and V bytes of one KV head of one layer holding `tokens` tokens, as KIVI stores
        them: keys are quantized `residual` at a time (the rest wait in full precision),
        values beyond the `residual` newest are quantized one by one."""
        width = min(self.group_size or dim, dim)
        quant_keys = tokens - tokens % residual
        quant_values = max(0, tokens - residual)
        key = quant_keys * (dim * self.bits / 8 + self.kivi_key_pair_bytes(dim))
        value = quant_values * (
            math.ceil(dim / width) * math.ceil(width * self.bits / 8)
            + self.kivi_value_pair_bytes(dim)
        )
        full = (tokens - quant_keys + tokens - quant_values) * dim * full_bytes
        return key + value + full

    @property
    def label(self) -> str:
        return self.name


_FLOAT_FORMATS = {
    "fp32": KVFormat("fp32", 32, True),
    "fp16": KVFormat("fp16", 16, True),
    "bf16": KVFormat("bf16", 16, True),
    "fp8-e4m3": KVFormat("fp8-e4m3", 8, True, "tensor"),
    "fp8-e5m2": KVFormat("fp8-e5m2", 8, True, "tensor"),
}
_ALIASES = {"fp8": "fp8-e4m3", "float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
_INT_PATTERN = re.compile(r"^int(8|4|2)(?:-(g(\d+)|tensor|token))?$")

KV_FORMAT_NAMES = (
    "auto",
    "fp32",
    "fp16",
    "bf16",
    "fp8",
    "fp8-e4m3",
    "fp8-e5m2",
    "int8",
    "int4",
    "int2-g32",
    "int4-g64 (any int{8,4,2}-gN)",
    "kivi-int2",
    "kivi-int4",
)


def parse_kv_format(name: str, model: HasDtype | None = None) -> KVFormat:
    """auto (the model's dtype), fp32, fp16, bf16, fp8[-e4m3|-e5m2], int8/int4/int2 (per token-head
    scales),
    int4-g64 (group-wise scales every 64 elements), int8-tensor (one scale per tensor)."""
    # vLLM and its logs write fp8_e4m3 / fp8_e5m2 (--kv-cache-dtype): the same formats
    lowered = name.lower().replace("_", "-")
    key = _ALIASES.get(lowered, lowered)
    if key == "auto":
        key = model.dtype if model is not None and model.dtype in _FLOAT_FORMATS else "bf16"
    if key in _FLOAT_FORMATS:
        return _FLOAT_FORMATS[key]
    if key in ("kivi-int2", "kivi-int4"):
        return KVFormat(key, int(key[-1]), False, "kivi", 32)
    match = _INT_PATTERN.match(key)
    if not match:
        raise ValueError(f"unknown KV dtype '{name}'; use one of: {', '.join(KV_FORMAT_NAMES)}")
    bits = int(match.group(1))
    if match.group(3):
        group = int(match.group(3))
        per_byte = max(2, 8 // bits)  # whole bytes per group, as kvplan.kernels packs them
        if group < per_byte or group > 4096 or group & (group - 1):
            raise ValueError(
                f"KV format '{name}': the group size must be a power of two from {per_byte} to "
                "4096 "
                f"(a multiple of {per_byte}), e.g. int{bits}-g32 or int{bits}-g64"
            )
        return KVFormat(key, bits, False, "group", group)
    if match.group(2) == "tensor":
        return KVFormat(key, bits, False, "tensor")
    return KVFormat(f"int{bits}", bits, False, "token-head")
