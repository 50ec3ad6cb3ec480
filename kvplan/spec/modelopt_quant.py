"""ModelOpt's `quantization_config` (flat in config.json or nested under "quantization", as in
hf_quant_config.json) read into a CheckpointQuant: NVFP4, the FP8 variants and MIXED_PRECISION
(checkpoint_quant.py's docstring gives their layouts).
"""

from __future__ import annotations

from typing import Any

from kvplan.spec.kept_modules import as_list, kept_modules, role_formats
from kvplan.spec.quant_storage import NVFP4, SCALE_32, CheckpointQuant

MIXED_ORDER = ("nvfp4", "fp8")  # the narrowest format the checkpoint uses becomes `dtype`


def modelopt_quant(q: dict[str, Any]) -> tuple[CheckpointQuant, list[str]]:
    nested = q.get("quantization") if isinstance(q.get("quantization"), dict) else None
    inner = nested or q
    algo = str(inner.get("quant_algo", "")).upper()
    entries = (
        as_list(inner.get("exclude_modules"))
        + as_list(q.get("ignore"))
        + as_list(q.get("exclude_modules"))
    )
    if "NVFP4" in algo or "FP4" in algo:
        group = int(inner.get("group_size") or 16)
        return CheckpointQuant(
            "modelopt",
            "nvfp4" if group == 16 else f"nvfp4-g{group}",
            **{**NVFP4, "group_size": group},
            source="modelopt NVFP4: fp4 + fp8 E4M3 scale per 16 + fp32 global scale "
            "(vLLM modelopt.py ModelOptNvFp4Config)",
        ), entries
    if "FP8" in algo:
        per_channel = "CHANNEL" in algo
        block = "PB" in algo  # FP8_PB_WO: 128 x 128 blocks
        if block:
            return CheckpointQuant(
                "modelopt",
                "fp8-block128",
                "fp8",
                8.0,
                scale_bits=SCALE_32,
                block=(128, 128),
                source="modelopt FP8_PB_WO (vLLM modelopt.py)",
            ), entries
        return CheckpointQuant(
            "modelopt",
            "fp8-channel" if per_channel else "fp8",
            "fp8",
            8.0,
            -1 if per_channel else 0,
            SCALE_32 if per_channel else 0.0,
            source=f"modelopt {algo} (vLLM modelopt.py ModelOptFp8Config)",
        ), entries
    raise ValueError(f"modelopt quant_algo '{algo}' is not one kvplan sizes (NVFP4, FP8*)")


def mixed_precision_quant(
    q: dict[str, Any], inner: dict[str, Any], entries: list[str], num_layers: int, has_vision: bool
) -> CheckpointQuant:
    """ModelOpt MIXED_PRECISION as one CheckpointQuant: `dtype` the narrowest format it uses,
    `mixed` each role's stated split of formats (CheckpointQuant.role_bytes sizes them), the
    *_kept fields the 16-bit rest."""
    layers = inner.get("quantized_layers") or q.get("quantized_layers")
    if not isinstance(layers, dict) or not layers:
        raise ValueError("modelopt MIXED_PRECISION needs a non-empty 'quantized_layers' mapping")
    formats: dict[str, str] = {}
    group = 16
    for name, info in layers.items():
        algo = str(info.get("quant_algo", "") if isinstance(info, dict) else "").upper()
        if "FP4" in algo:
            formats[str(name)], group = "nvfp4", int(info.get("group_size") or 16)
        elif algo == "FP8":
            formats[str(name)] = "fp8"
        else:
            raise ValueError(
                f"modelopt MIXED_PRECISION layer '{name}' has quant_algo '{algo}'; "
                "kvplan sizes NVFP4, W4A16_NVFP4 and FP8"
            )
    fractions, whole = role_formats(formats, num_layers)
    primary = next(f for f in MIXED_ORDER if f in formats.values())
    kept = kept_modules(entries, num_layers)

    def sixteen_bit(part: str, floor: float) -> float:
        return min(1.0, max(floor, 1.0 - sum(fractions[part].values())))

    mixed = tuple(
        (role, fmt, round(f, 6))
        for role, split in fractions.items()
        for fmt, f in sorted(split.items())
    )
    mixed += tuple((role, fmt, 1.0) for role, fmt in sorted(whole.items()))
    label = "mixed-" + "+".join(f for f in MIXED_ORDER if f in formats.values())
    base: dict[str, Any] = (
        dict(NVFP4, group_size=group) if primary == "nvfp4" else dict(dtype="fp8", weight_bits=8.0)
    )
    return CheckpointQuant(
        "modelopt",
        label,
        **base,
        lm_head_quantized="lm_head" in whole and "lm_head" not in kept.roles,
        vision_quantized=has_vision and "vision" in whole and "vision" not in kept.roles,
        attention_kept=sixteen_bit("attention", kept.attention_kept),
        dense_kept=sixteen_bit("dense", kept.dense_kept),
        experts_kept=sixteen_bit("experts", kept.experts_kept),
        mixed=mixed,
        source="modelopt MIXED_PRECISION: per-layer NVFP4 / FP8 from quantized_layers, "
        "the rest 16 bit (vLLM modelopt.py ModelOptMixedPrecisionConfig)",
    )
