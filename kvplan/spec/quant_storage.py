"""How a quantized checkpoint stores its weights (CheckpointQuant): each quantized weight's bits
with its share of scales and zero points, and the mean bytes per weight of each parameter role.
checkpoint_quant.py reads one from a config's `quantization_config` (its docstring lists each
method's layout).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SCALE_16 = 16  # fp16 / bf16 scales (GPTQ, AWQ, packed compressed-tensors)
SCALE_32 = 32  # fp32 scales (fp8 blocks and channels, int8 channels, bitsandbytes absmax)

NVFP4: dict[str, Any] = dict(dtype="nvfp4", weight_bits=4.0, group_size=16, scale_bits=8.0)
MIXED_FORMAT_BYTES = {"fp8": 1.0}  # a mixed checkpoint's FP8 layers: per-tensor scales, not counted


@dataclass(frozen=True)
class CheckpointQuant:
    """How a checkpoint stores its quantized linear weights, and what it leaves in 16 bit.

    Per quantized weight: `weight_bits` for the value, plus `scale_bits` and `zero_bits` per
    `group_size` weights along the input dimension (group_size -1: per output channel, one per
    row of `in_features`; 0: per tensor, not counted), or one `scale_bits` per `block` of
    weights (fp8 block-wise), plus `nested_bits` per weight for second-level scales (bnb double
    quant). `attention_kept`, `dense_kept` and `experts_kept` are the fractions of the decoder
    layers' attention, dense / shared-expert MLP and routed experts a not-convert list keeps in
    16 bit.
    """

    method: str
    label: str
    dtype: str  # the plain element dtype kvplan's roofline knows: fp8 / int8 / int4 / nvfp4 / mxfp4
    weight_bits: float
    group_size: int = 0
    scale_bits: float = 0.0
    zero_bits: float = 0.0
    block: tuple[int, int] | None = None
    nested_bits: float = 0.0
    experts_only: bool = False  # MXFP4 (gpt-oss): only the routed experts are quantized
    lm_head_quantized: bool = False
    vision_quantized: bool = False
    attention_kept: float = 0.0
    dense_kept: float = 0.0
    experts_kept: float = 0.0
    source: str = ""
    # MIXED_PRECISION: (role, format, fraction of the role) as the checkpoint states them; the
    # rest of each role is 16 bit (the *_kept fields then hold that share).
    mixed: tuple[tuple[str, str, float], ...] = ()

    def role_bytes(self, role: str, in_features: int) -> float:
        """Mean bytes per weight of one parameter role (attention, dense, experts, lm_head,
        vision) as stored: its quantized share at its format's bytes with their scales, the
        rest at 16 bit."""
        stated = [(fmt, share) for r, fmt, share in self.mixed if r == role]
        if stated:
            quantized = sum(share for _, share in stated)
            return (
                sum(share * self._format_bytes(fmt, in_features) for fmt, share in stated)
                + (1.0 - quantized) * 2.0
            )
        kept = {
            "attention": self.attention_kept,
            "dense": self.dense_kept,
            "experts": self.experts_kept,
        }.get(role, 0.0)
        return (1.0 - kept) * self.bits_per_weight(in_features) / 8 + kept * 2.0

    def _format_bytes(self, fmt: str, in_features: int) -> float:
        """Bytes per weight of one of a mixed checkpoint's formats: its primary format as
        bits_per_weight counts it, per-tensor fp8 one byte."""
        return (
            self.bits_per_weight(in_features) / 8 if fmt == self.dtype else MIXED_FORMAT_BYTES[fmt]
        )

    def bits_per_weight(self, in_features: int) -> float:
        """Bits one quantized weight costs with its share of scales and zero points, for a
        matrix of `in_features` inputs (used only by per-channel scales)."""
        bits = self.weight_bits + self.nested_bits
        if self.block is not None:
            return bits + self.scale_bits / (self.block[0] * self.block[1])
        group = in_features if self.group_size < 0 else self.group_size
        if group > 0:
            bits += (self.scale_bits + self.zero_bits) / group
        return bits
