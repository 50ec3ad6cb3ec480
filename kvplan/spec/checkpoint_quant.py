"""A checkpoint's weight format as its config.json's `quantization_config` states it.

Parsed from the config's fields only (never from the model's name): the element bits, the
scales and zero points each quantized weight carries, and which parameter roles the
checkpoint leaves in 16 bit. The layouts are the tensors the serving engines allocate for
each method (vLLM's vllm/model_executor/layers/quantization/, transformers' quantizers); the
record they fill is quant_storage.py's, ModelOpt's reader modelopt_quant.py's:

- GPTQ (AutoGPTQ / GPTQModel; vLLM gptq.py, gptq_marlin.py): `qweight` int32 holding 32/bits
  values, `scales` [in/g, out] in the activation dtype (fp16), `qzeros` [in/g, out*bits/32]
  int32 - present and packed even for `sym: true` checkpoints, as GPTQ's qzeros tensor is -
  and `g_idx` int32 [in] (kept on the GPU only with desc_act, so not counted). 4-bit g128:
  4 + 16/128 + 4/128 = 4.15625 bits per weight. (vLLM's Marlin kernels drop the zeros of a
  symmetric checkpoint after loading; the checkpoint still ships them.)
- AWQ (AutoAWQ; vLLM awq.py, awq_marlin.py): `qweight` [in, out*bits/32] int32, `scales`
  [in/g, out] fp16, `qzeros` [in/g, out*bits/32] int32 when zero_point (AWQ's default).
  `modules_to_not_convert` stay 16 bit.
- AutoRound (intel/auto-round; vLLM auto_round.py): bits, group_size, sym; packing_format
  "auto_round:auto_gptq" (the default) is GPTQ's layout (zeros always), "auto_round:auto_awq"
  AWQ's (zeros only when not sym). `block_name_to_quantize` / `to_quant_block_names` name the
  blocks quantized; an `extra_config` entry with bits >= 16 keeps that module in 16 bit.
- FP8 (quant_method "fp8": DeepSeek-V3, Qwen3-*-FP8; vLLM fp8.py): one byte per weight; with
  `weight_block_size` [bn, bk] one fp32 `weight_scale_inv` per bn x bk block (8 + 32/16384
  bits at 128 x 128); without it one fp32 scale per tensor (negligible).
- fbgemm_fp8 (Meta's Llama-3.1-405B-Instruct-FP8; vLLM fbgemm_fp8.py): fp8 with one fp32
  scale per output channel; `modules_to_not_convert` stay 16 bit.
- compressed-tensors (llm-compressor; vLLM compressed_tensors/): each `config_groups` entry's
  `weights` gives num_bits, type (int / float), strategy (tensor / channel / group / block /
  tensor_group) and group_size; `ignore` names what stays 16 bit ("lm_head", "re:.*self_attn.*",
  "re:visual.*", ...). format "pack-quantized": int values packed into int32, `weight_scale` per
  group in the activation dtype, `weight_zero_point` packed int32 only when not symmetric
  (compressed_tensors_wNa16.py); "float-quantized": fp8 with fp32 scales per channel / block;
  "int-quantized": int8 with fp32 channel scales; "naive-quantized": each value in its own
  int8 container (8 bits whatever num_bits); "nvfp4-pack-quantized" / a float 4-bit group-16
  scheme: NVFP4 (below).
- NVFP4 (modelopt quant_algo "NVFP4", flat in config.json or nested under "quantization" as in
  hf_quant_config.json; vLLM modelopt.py, compressed_tensors_w4a4_nvfp4.py): FP4 E2M1 values,
  one fp8 E4M3 scale per 16 (4.5 bits) and one fp32 global scale per tensor (negligible);
  `exclude_modules` / `ignore` stay 16 bit. modelopt "FP8": per-tensor fp8. modelopt
  "MIXED_PRECISION" (nvidia/Qwen3.6-*-NVFP4; vLLM modelopt.py ModelOptMixedPrecisionConfig): a
  `quantized_layers` map names each quantized module's quant_algo (NVFP4 / W4A16_NVFP4: NVFP4;
  FP8: per-tensor fp8); a Linear it does not name stays 16 bit, and so does an excluded one.
- MXFP4 (gpt-oss; vLLM mxfp4.py, transformers' quantizer_mxfp4.py): only the MoE experts, FP4
  values with one 8-bit E8M0 scale per 32 (4.25 bits); attention, routers, embeddings and the
  LM head stay bf16 (its `modules_to_not_convert`).
- bitsandbytes (transformers' quantizer_bnb_4bit.py / quantizer_bnb_8bit.py; vLLM
  bitsandbytes.py): load_in_4bit nf4 / fp4 values with one fp32 absmax per 64 (4.5 bits); with
  bnb_4bit_use_double_quant the absmax is itself 8-bit with one fp32 scale per 256 of them
  (4 + 8/64 + 32/16384 bits). load_in_8bit: int8 with one fp32 scale per output row (SCB).
  `llm_int8_skip_modules` stay 16 bit.

Whatever the method, the engines keep the input embedding, norms and MoE routers in 16 bit
(vLLM builds VocabParallelEmbedding and the routers' gate layers without a quant method), and
the LM head too unless the config quantizes it (GPTQ/AutoRound `lm_head: true`). A vision tower
stays 16 bit where the quantizer only walks the decoder blocks (GPTQ, AWQ, AutoRound); under a
method with an exhaustive ignore list (compressed-tensors, fp8, modelopt, bitsandbytes) it is
quantized unless that list names it.
"""

from __future__ import annotations

import math
from typing import Any

from kvplan.spec.kept_modules import VISION_WORDS, as_list, kept_modules, pattern_role
from kvplan.spec.modelopt_quant import mixed_precision_quant, modelopt_quant
from kvplan.spec.quant_storage import NVFP4, SCALE_16, SCALE_32, CheckpointQuant


def _int_dtype(bits: float) -> str:
    return "int8" if bits > 4 else "int4"


def _group_label(group: int) -> str:
    return "" if group == 0 else ("-ch" if group < 0 else f"-g{group}")


def _finish(
    quant: CheckpointQuant,
    entries: list[str],
    num_layers: int,
    has_vision: bool,
    vision_default: bool,
) -> CheckpointQuant:
    kept = kept_modules(entries, num_layers)
    vision = vision_default and has_vision and "vision" not in kept.roles
    lm_head = quant.lm_head_quantized and "lm_head" not in kept.roles
    return CheckpointQuant(
        **{
            **quant.__dict__,
            "vision_quantized": vision,
            "lm_head_quantized": lm_head,
            "attention_kept": kept.attention_kept,
            "dense_kept": kept.dense_kept,
            "experts_kept": kept.experts_kept,
        }
    )


def _gptq_like(
    method: str, bits: int, group: int, zeros: bool, source: str, lm_head: bool = False
) -> CheckpointQuant:
    label = f"{method}-int{bits}{_group_label(group)}"
    return CheckpointQuant(
        method,
        label,
        _int_dtype(bits),
        float(bits),
        group,
        SCALE_16,
        float(bits) if zeros else 0.0,
        lm_head_quantized=lm_head,
        source=source,
    )


def _gptq(q: dict[str, Any]) -> CheckpointQuant:
    bits, group = int(q.get("bits", 4)), int(q.get("group_size", 128))
    return _gptq_like(
        "gptq",
        bits,
        group,
        True,
        "GPTQ: qweight + fp16 scales + packed qzeros per group "
        "(vLLM gptq.py create_weights; AutoGPTQ qlinear)",
        lm_head=bool(q.get("lm_head")),
    )


def _awq(q: dict[str, Any]) -> CheckpointQuant:
    bits = int(q.get("bits", q.get("w_bit", 4)))
    group = int(q.get("group_size", q.get("q_group_size", 128)))
    zeros = bool(q.get("zero_point", True))
    return _gptq_like(
        "awq",
        bits,
        group,
        zeros,
        "AWQ: qweight + fp16 scales + packed qzeros per group when "
        "zero_point (vLLM awq.py create_weights)",
    )


def _auto_round(q: dict[str, Any]) -> CheckpointQuant:
    bits, group = int(q.get("bits", 4)), int(q.get("group_size", 128))
    packing = str(q.get("packing_format", "auto_round:auto_gptq")).lower()
    sym = bool(q.get("sym", True))
    awq = "awq" in packing
    zeros = (not sym) if awq else True
    quant = _gptq_like(
        "autoround",
        bits,
        group,
        zeros,
        f"AutoRound, {packing}: {'AWQ' if awq else 'GPTQ'} layout (vLLM auto_round.py)",
        lm_head=False,
    )
    return quant


def _fp8(q: dict[str, Any]) -> CheckpointQuant:
    block = q.get("weight_block_size")
    if block:
        bn, bk = int(block[0]), int(block[1])
        return CheckpointQuant(
            "fp8",
            f"fp8-block{bn}" if bn == bk else f"fp8-block{bn}x{bk}",
            "fp8",
            8.0,
            scale_bits=SCALE_32,
            block=(bn, bk),
            source="fp8 block-wise: one fp32 weight_scale_inv per block (vLLM fp8.py)",
        )
    return CheckpointQuant("fp8", "fp8", "fp8", 8.0, source="fp8 per-tensor scales (vLLM fp8.py)")


def _fbgemm_fp8(q: dict[str, Any]) -> CheckpointQuant:
    return CheckpointQuant(
        "fbgemm_fp8",
        "fp8-channel",
        "fp8",
        8.0,
        -1,
        SCALE_32,
        source="fbgemm_fp8: fp8 + fp32 scale per output channel (vLLM fbgemm_fp8.py)",
    )


def _compressed_tensors(q: dict[str, Any]) -> CheckpointQuant:
    fmt = str(q.get("format", "")).lower()
    groups = q.get("config_groups") or {}
    # the group covering the Linear layers (the first with weights, as vLLM reads them)
    scheme = next((g for g in groups.values() if isinstance(g, dict) and g.get("weights")), None)
    if scheme is None:
        raise ValueError("compressed-tensors quantization_config has no config_groups with weights")
    w = scheme["weights"]
    bits = int(w.get("num_bits", 8))
    kind = str(w.get("type", "int")).lower()
    strategy = str(w.get("strategy", "tensor")).lower()
    symmetric = bool(w.get("symmetric", True))
    group = int(w.get("group_size") or 0)
    group_fmt = scheme.get("format", fmt) or fmt
    fmt = str(group_fmt).lower()
    src = f"compressed-tensors {fmt or 'format?'} {kind}{bits} {strategy}"
    if kind == "float" and bits == 4:
        if group == 16 or "nvfp4" in fmt or strategy == "tensor_group":
            return CheckpointQuant(
                "compressed-tensors",
                "nvfp4",
                **NVFP4,
                source=src
                + ": fp4 + fp8 scale per 16 + fp32 global (vLLM compressed_tensors_w4a4_nvfp4.py)",
            )
        return CheckpointQuant(
            "compressed-tensors",
            f"mxfp4-g{group or 32}",
            "mxfp4",
            4.0,
            group or 32,
            8.0,
            source=src + ": fp4 + E8M0 scale per group (vLLM compressed_tensors_w4a16_mxfp4.py)",
        )
    if kind == "float":
        if strategy == "block":
            bn, bk = (int(x) for x in (w.get("block_structure") or [128, 128]))
            return CheckpointQuant(
                "compressed-tensors",
                f"fp8-block{bn}" if bn == bk else f"fp8-block{bn}x{bk}",
                "fp8",
                float(bits),
                scale_bits=SCALE_32,
                block=(bn, bk),
                source=src,
            )
        group = {"channel": -1, "group": group}.get(strategy, 0)
        return CheckpointQuant(
            "compressed-tensors",
            f"fp{bits}{_group_label(group)}",
            "fp8",
            float(bits),
            group,
            SCALE_32 if group else 0.0,
            source=src + " (vLLM compressed_tensors_w8a8_fp8.py)",
        )
    # integer weights
    group = {"channel": -1, "group": group, "tensor": 0}.get(strategy, group)
    naive = "naive" in fmt
    stored_bits = (
        8 * math.ceil(bits / 8) if naive else bits
    )  # naive-quantized: one int8 container per value
    packed = "pack" in fmt
    # group scales in the activation dtype (wNa16); channel scales fp32 (vLLM's W8A8 int8
    # ChannelQuantScaleParameter)
    scale_bits = SCALE_16 if (packed or group > 0) else SCALE_32
    zero_bits = 0.0 if symmetric else (float(bits) if packed else 8.0)
    layer = "compressed_tensors_wNa16.py" if packed else "compressed_tensors_w8a8_int8.py"
    return CheckpointQuant(
        "compressed-tensors",
        f"int{bits}{_group_label(group)}" + ("" if symmetric else "-zp"),
        _int_dtype(bits),
        float(stored_bits),
        group,
        scale_bits if group else 0.0,
        zero_bits,
        source=src + f" (vLLM {layer})",
    )


def _untargeted(q: dict[str, Any]) -> list[str]:
    """compressed-tensors `targets` other than "Linear" (e.g. ["re:.*mlp.*"]) quantize only the
    roles they name: the roles none names come back as not-convert entries."""
    targets = [
        t
        for g in (q.get("config_groups") or {}).values()
        if isinstance(g, dict)
        for t in as_list(g.get("targets"))
    ]
    if not targets or any(t.lower() in ("linear", "re:.*") for t in targets):
        return []
    named = {pattern_role(t) for t in targets}
    return [
        f"re:.*{word}.*"
        for role, word in (("attention", "self_attn"), ("mlp", "mlp"))
        if role not in named
    ]


def _bitsandbytes(q: dict[str, Any]) -> CheckpointQuant:
    if q.get("load_in_8bit") and not q.get("load_in_4bit"):
        return CheckpointQuant(
            "bitsandbytes",
            "bnb-int8",
            "int8",
            8.0,
            -1,
            SCALE_32,
            source="bitsandbytes LLM.int8: int8 + fp32 SCB per output row (transformers "
            "quantizer_bnb_8bit)",
        )
    kind = str(q.get("bnb_4bit_quant_type", "fp4")).lower()
    blocksize = int(q.get("bnb_4bit_blocksize") or 64)
    if q.get("bnb_4bit_use_double_quant"):
        # absmax in 8 bit per block, one fp32 scale per 256 absmax values
        return CheckpointQuant(
            "bitsandbytes",
            f"bnb-{kind}-dq",
            "int4",
            4.0,
            blocksize,
            8.0,
            nested_bits=SCALE_32 / (blocksize * 256),
            source="bitsandbytes 4-bit double quant: 8-bit absmax per 64, fp32 per 256 absmax "
            "(bitsandbytes quantize_4bit compress_statistics; transformers quantizer_bnb_4bit)",
        )
    return CheckpointQuant(
        "bitsandbytes",
        f"bnb-{kind}",
        "int4",
        4.0,
        blocksize,
        SCALE_32,
        source="bitsandbytes 4-bit: fp32 absmax per 64 (bitsandbytes quantize_4bit)",
    )


def _mxfp4(q: dict[str, Any]) -> CheckpointQuant:
    return CheckpointQuant(
        "mxfp4",
        "mxfp4-experts",
        "mxfp4",
        4.0,
        32,
        8.0,
        experts_only=True,
        source="MXFP4 (gpt-oss): experts only, fp4 + E8M0 scale per 32 (vLLM mxfp4.py)",
    )


def checkpoint_quant(cfg: dict[str, Any], num_layers: int) -> CheckpointQuant | None:
    """The checkpoint's weight format from `quantization_config` (None: unquantized)."""
    q = cfg.get("quantization_config")
    if not isinstance(q, dict) or not q:
        return None
    method = str(q.get("quant_method", "")).lower().replace("_", "-")
    producer = q.get("producer")
    # ModelOpt's own block names no quant_method: vLLM knows it by its producer
    if not method and (
        isinstance(q.get("quantization"), dict)
        or (isinstance(producer, dict) and producer.get("name") == "modelopt")
    ):
        method = "modelopt"
    has_vision = isinstance(cfg.get("vision_config"), dict)
    entries = as_list(q.get("modules_to_not_convert"))
    if method == "gptq":
        quant, exhaustive = _gptq(q), False
    elif method == "awq":
        quant, exhaustive = _awq(q), False
    elif method in ("auto-round", "intel/auto-round", "autoround"):
        quant, exhaustive = _auto_round(q), False
        blocks = as_list(q.get("block_name_to_quantize") or q.get("to_quant_block_names"))
        if blocks and any(any(word in b.lower() for word in VISION_WORDS) for b in blocks):
            exhaustive = True
        for name, extra in (q.get("extra_config") or {}).items():
            if isinstance(extra, dict) and int(extra.get("bits", 0) or 0) >= 16:
                entries.append(str(name))
    elif method == "fp8":
        quant, exhaustive = _fp8(q), True
    elif method == "fbgemm-fp8":
        quant, exhaustive = _fbgemm_fp8(q), True
    elif method == "compressed-tensors":
        quant, exhaustive = _compressed_tensors(q), True
        entries += as_list(q.get("ignore")) + _untargeted(q)
    elif method == "modelopt":
        inner: dict[str, Any] = q["quantization"] if isinstance(q.get("quantization"), dict) else q
        if str(inner.get("quant_algo", "")).upper() == "MIXED_PRECISION":
            entries += as_list(inner.get("exclude_modules")) + as_list(q.get("ignore"))
            return mixed_precision_quant(q, inner, entries, num_layers, has_vision)
        quant, extra = modelopt_quant(q)
        entries += extra
        exhaustive = True
    elif method == "bitsandbytes" or q.get("load_in_4bit") or q.get("load_in_8bit"):
        quant, exhaustive = _bitsandbytes(q), True
        entries += as_list(q.get("llm_int8_skip_modules"))
    elif method == "mxfp4":
        quant, exhaustive = _mxfp4(q), False
    else:
        # a method kvplan does not size (hqq, gguf, bitnet, ...): weights at the config's dtype
        return None
    return _finish(quant, entries, num_layers, has_vision, vision_default=exhaustive)
