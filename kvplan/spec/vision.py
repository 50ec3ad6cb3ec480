"""Parameters of a multimodal checkpoint's vision tower, from its config's `vision_config`.

Serving engines load the vision encoder and its projector beside the language model (vLLM
builds them for every *ForConditionalGeneration model unless told to run it text-only), so
they take weight memory though no decoded token multiplies with them. Counted per family from
the reference modeling code (transformers; formulas derived, not copied):

- Qwen2-VL (modeling_qwen2_vl.py): Conv3d patch embedding (in x t x p x p -> embed_dim, no
  bias); per block two LayerNorms, fused qkv + proj with biases, an ungated fc1/fc2 MLP of
  embed_dim x mlp_ratio; PatchMerger: LayerNorm, then embed_dim*m^2 -> embed_dim*m^2 -> text
  hidden with biases (m = spatial_merge_size).
- Qwen2.5-VL (modeling_qwen2_5_vl.py): the same shape with RMSNorms and a gated SiLU MLP
  (gate/up/down, biases) of intermediate_size; the merger's norm is an RMSNorm and it projects
  to out_hidden_size.
- Qwen3-VL / Qwen3.5 (modeling_qwen3_vl.py): LayerNorms, an ungated fc1/fc2 MLP, a Conv3d patch
  embedding with bias, a learned position table (num_position_embeddings), the merger, and one
  more merger (post-shuffle LayerNorm over hidden*m^2) per deepstack_visual_indexes entry.
- SigLIP (modeling_siglip.py; Gemma 3's tower, LLaVA-OneVision's): Conv2d patch embedding with
  bias, a position table of (image_size/patch)^2, per layer two LayerNorms, q/k/v/out with
  biases, an ungated fc1/fc2 MLP; a post LayerNorm; the attention-pooling head only when
  vision_use_head. Gemma 3's projector (modeling_gemma3.py): an RMSNorm over the vision width
  and one vision -> text matrix.
- CLIP (modeling_clip.py; LLaVA-1.5/NeXT): as SigLIP without biases on the patch conv, plus a
  class embedding, one more position, and a pre LayerNorm; LLaVA's projector is two biased
  linears (vision -> text -> text); LLaVA-NeXT adds an image_newline vector.
- Pixtral (modeling_pixtral.py; Mistral3 and Pixtral-as-LLaVA): Conv2d patch embedding without
  bias, an RMSNorm before the blocks, per block two RMSNorms, bias-free q/k/v/o and a gated
  SiLU MLP; Mistral3's projector (modeling_mistral3.py): RMSNorm, a patch merger
  (hidden*m^2 -> hidden), two linears to the text width (biased per multimodal_projector_bias).
- Llama-3.2-Vision (modeling_mllama.py; vLLM 0.10's mllama.py builds the same): a bias-free
  Conv2d patch embedding, a class embedding, a gated position table of (image/patch)^2 + 1 with
  a tile-position table per aspect ratio (max_aspect_ratio_id + 1 = len(supported_aspect_ratios)
  + 1 rows of max_num_tiles x patches x width), pre- and post-tile aspect-ratio tables of
  max_num_tiles x width per row (each gated), pre and post LayerNorms, a local encoder of
  num_hidden_layers and a gated global encoder of num_global_layers (two LayerNorms, bias-free
  q/k/v/o, fc1/fc2 with biases; the global layers add two gates), and a biased projector from
  vision_output_dim to the text width.
- Llama-4 (modeling_llama4.py): an unfold "convolution" (one bias-free linear over c*p*p), a
  class embedding, a position table of (image/patch)^2 + 1, pre and post LayerNorms, per layer
  two LayerNorms, q/k/v/o and fc1/fc2 with biases; the pixel-shuffle adapter's two bias-free
  linears (intermediate_size -> projector_input_dim -> projector_output_dim) and the projector
  (vision_output_dim -> text hidden, no bias).

Checked against published totals (tests/test_vision_params.py): Qwen2.5-VL-7B-Instruct 8.29B,
Gemma-3-4b-it 4.30B and 27b-it 27.4B (a 417M SigLIP tower), LLaVA-1.5-7B 7.06B, Llama-4
Scout 109B, Llama-3.2-90B-Vision 88.6B. Towers of other families (Gemma 4's gemma4_vision, audio
encoders) count 0.

vLLM differs from the checkpoint in one case: for LLaVA-style models it builds the tower only
up to vision_feature_layer (init_vision_tower_for_llava), dropping the later layers; kvplan
counts the checkpoint's tower.

Not here: what vLLM's profiling run reserves for the encoder. gpu_model_runner.profile_run
runs a dummy multimodal batch (as many maximum-size items as the encoder compute/cache budget
holds) through the tower before sizing the KV cache; its peak depends on the tower's attention
backend and the processor's maximum item size, which this config-only module does not know.
"""

from __future__ import annotations

from typing import Any

from kvplan.spec.family_defaults import with_vision_defaults


class _Missing(ValueError):
    """A field the family's formula needs is absent: the tower is not counted."""


def _int(vc: dict[str, Any], keys: tuple[str, ...], default: int | None = None) -> int:
    for key in keys:
        value = vc.get(key)
        if value is not None:
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or value <= 0
                or value != int(value)
            ):
                raise ValueError(
                    f"vision_config has an invalid {key} = {value!r}; it must be a positive integer"
                )
            return int(value)
    if default is None:
        raise _Missing(f"vision_config has no {keys[0]}")
    return default


def _linear(n_in: int, n_out: int, bias: bool = True) -> int:
    return n_in * n_out + (n_out if bias else 0)


def _ln(width: int) -> int:
    return 2 * width  # LayerNorm: weight + bias


def _vit_block(hidden: int, inter: int, *, norm: int, gated: bool, bias: bool) -> int:
    """One ViT block: two norms (`norm` params each), q/k/v/out projections and the MLP."""
    attention = 3 * _linear(hidden, hidden, bias) + _linear(hidden, hidden, bias)
    if gated:
        mlp = 2 * _linear(hidden, inter, bias) + _linear(inter, hidden, bias)
    else:
        mlp = _linear(hidden, inter, bias) + _linear(inter, hidden, bias)
    return 2 * norm + attention + mlp


def _qwen_merger(width: int, merge: int, out: int, norm: int) -> int:
    merged = width * merge * merge
    return norm + _linear(merged, merged) + _linear(merged, out)


def _qwen2_vl(vc: dict[str, Any], text_hidden: int) -> int:
    dim = _int(vc, ("embed_dim",))
    depth = _int(vc, ("depth", "num_hidden_layers"))
    inter = int(dim * float(vc.get("mlp_ratio") or 4))
    channels, patch = (
        _int(vc, ("in_chans", "in_channels"), 3),
        _int(vc, ("patch_size", "spatial_patch_size"), 14),
    )
    temporal, merge = _int(vc, ("temporal_patch_size",), 2), _int(vc, ("spatial_merge_size",), 2)
    out = _int(vc, ("hidden_size",), text_hidden)  # Qwen2-VL's vision hidden_size is the text width
    blocks = depth * _vit_block(dim, inter, norm=_ln(dim), gated=False, bias=True)
    return (
        channels * temporal * patch * patch * dim + blocks + _qwen_merger(dim, merge, out, _ln(dim))
    )


def _qwen2_5_vl(vc: dict[str, Any], text_hidden: int) -> int:
    dim, inter = _int(vc, ("hidden_size",)), _int(vc, ("intermediate_size",))
    depth = _int(vc, ("depth", "num_hidden_layers"))
    channels, patch = (
        _int(vc, ("in_chans", "in_channels"), 3),
        _int(vc, ("patch_size", "spatial_patch_size"), 14),
    )
    temporal, merge = _int(vc, ("temporal_patch_size",), 2), _int(vc, ("spatial_merge_size",), 2)
    out = _int(vc, ("out_hidden_size",), text_hidden)
    blocks = depth * _vit_block(dim, inter, norm=dim, gated=True, bias=True)  # RMSNorm: weight only
    return channels * temporal * patch * patch * dim + blocks + _qwen_merger(dim, merge, out, dim)


def _qwen3_vl(vc: dict[str, Any], text_hidden: int) -> int:
    dim, inter = _int(vc, ("hidden_size",)), _int(vc, ("intermediate_size",))
    depth = _int(vc, ("depth", "num_hidden_layers"))
    channels, patch = _int(vc, ("in_channels", "in_chans"), 3), _int(vc, ("patch_size",), 16)
    temporal, merge = _int(vc, ("temporal_patch_size",), 2), _int(vc, ("spatial_merge_size",), 2)
    out = _int(vc, ("out_hidden_size",), text_hidden)
    positions = int(vc.get("num_position_embeddings") or 0)
    deepstack = len(vc.get("deepstack_visual_indexes") or [])
    patch_embed = channels * temporal * patch * patch * dim + dim  # Conv3d with bias
    blocks = depth * _vit_block(dim, inter, norm=_ln(dim), gated=False, bias=True)
    merger = _qwen_merger(dim, merge, out, _ln(dim))
    deepstack_mergers = deepstack * _qwen_merger(dim, merge, out, _ln(dim * merge * merge))
    return patch_embed + positions * dim + blocks + merger + deepstack_mergers


def siglip_params(vc: dict[str, Any]) -> int:
    """A SigLIP vision tower (SiglipVisionModel), with its pooling head when vision_use_head."""
    dim, inter = _int(vc, ("hidden_size",), 768), _int(vc, ("intermediate_size",), 3072)
    layers = _int(vc, ("num_hidden_layers",), 12)
    channels, patch = _int(vc, ("num_channels",), 3), _int(vc, ("patch_size",), 16)
    image = _int(vc, ("image_size",), 224)
    embeddings = channels * patch * patch * dim + dim + (image // patch) ** 2 * dim
    blocks = layers * _vit_block(dim, inter, norm=_ln(dim), gated=False, bias=True)
    head = 0
    if vc.get("vision_use_head", True):  # SiglipMultiheadAttentionPoolingHead
        head = (
            dim
            + (3 * dim * dim + 3 * dim)
            + _linear(dim, dim)
            + _ln(dim)
            + _linear(dim, inter)
            + _linear(inter, dim)
        )
    return embeddings + blocks + _ln(dim) + head


def clip_params(vc: dict[str, Any]) -> int:
    """A CLIP vision tower (CLIPVisionModel): class embedding, pre and post LayerNorms."""
    dim, inter = _int(vc, ("hidden_size",), 768), _int(vc, ("intermediate_size",), 3072)
    layers = _int(vc, ("num_hidden_layers",), 12)
    channels, patch = _int(vc, ("num_channels",), 3), _int(vc, ("patch_size",), 32)
    image = _int(vc, ("image_size",), 224)
    embeddings = dim + channels * patch * patch * dim + ((image // patch) ** 2 + 1) * dim
    blocks = layers * _vit_block(dim, inter, norm=_ln(dim), gated=False, bias=True)
    return embeddings + 2 * _ln(dim) + blocks


def pixtral_params(vc: dict[str, Any]) -> int:
    dim, inter = _int(vc, ("hidden_size",), 1024), _int(vc, ("intermediate_size",), 4096)
    layers = _int(vc, ("num_hidden_layers",), 24)
    channels, patch = _int(vc, ("num_channels",), 3), _int(vc, ("patch_size",), 16)
    blocks = layers * _vit_block(dim, inter, norm=dim, gated=True, bias=False)
    return channels * patch * patch * dim + dim + blocks


def _tower(vc: dict[str, Any]) -> int:
    kind = str(vc.get("model_type", "")).lower()
    if kind.startswith("siglip"):
        return siglip_params(vc)
    if kind.startswith("clip"):
        return clip_params(vc)
    if kind == "pixtral":
        return pixtral_params(vc)
    return -1


def _feature_layers(cfg: dict[str, Any]) -> int:
    layer = cfg.get("vision_feature_layer")
    return len(layer) if isinstance(layer, list) else 1


def _llama4(vc: dict[str, Any], text_hidden: int) -> int:
    dim, inter = _int(vc, ("hidden_size",)), _int(vc, ("intermediate_size",))
    layers = _int(vc, ("num_hidden_layers",))
    channels, patch = _int(vc, ("num_channels",), 3), _int(vc, ("patch_size",), 14)
    image = _int(vc, ("image_size",), 336)
    project_in, project_out = (
        _int(vc, ("projector_input_dim",)),
        _int(vc, ("projector_output_dim",)),
    )
    output = _int(vc, ("vision_output_dim",), project_out)
    embeddings = channels * patch * patch * dim + dim + ((image // patch) ** 2 + 1) * dim
    blocks = layers * _vit_block(dim, inter, norm=_ln(dim), gated=False, bias=True)
    adapter = inter * project_in + project_out * project_out  # Llama4VisionMLP2: fc1, fc2, no bias
    return embeddings + 2 * _ln(dim) + blocks + adapter + output * text_hidden


def _mllama(vc: dict[str, Any], text_hidden: int) -> int:
    vc = with_vision_defaults({k: v for k, v in vc.items() if v is not None}, "mllama")
    if not isinstance(vc["supported_aspect_ratios"], list):
        raise ValueError(
            "vision_config.supported_aspect_ratios must be a list of [rows, columns] pairs"
        )
    dim, inter = _int(vc, ("hidden_size",)), _int(vc, ("intermediate_size",))
    channels, patch, image = (
        _int(vc, ("num_channels",)),
        _int(vc, ("patch_size",)),
        _int(vc, ("image_size",)),
    )
    tiles, patches = _int(vc, ("max_num_tiles",)), (image // patch) ** 2 + 1
    aspect_rows = len(vc["supported_aspect_ratios"]) + 1
    positions = 1 + patches * dim + aspect_rows * tiles * patches * dim  # gate, table, tile table
    tile_tables = 2 * (aspect_rows * tiles * dim + 1)  # pre / post, each with a gate
    block = 2 * _ln(dim) + 4 * dim * dim + _linear(dim, inter) + _linear(inter, dim)
    layers, global_layers = _int(vc, ("num_hidden_layers",)), _int(vc, ("num_global_layers",))
    encoders = layers * block + global_layers * (block + 2)
    projector = _linear(_int(vc, ("vision_output_dim",)), text_hidden)
    return (
        channels * patch * patch * dim
        + dim
        + positions
        + tile_tables
        + 2 * _ln(dim)
        + encoders
        + projector
    )


def encoder_tokens_per_image(cfg: dict[str, Any]) -> int:
    """Image tokens Llama-3.2-Vision's cross-attention layers attend to for one image at the
    most tiles: max_num_tiles x ((image_size // patch_size)^2 + 1), a class token per tile
    (vLLM 0.10's mllama processor: num_tiles x calc_token_per_chunk). 0 without a vision_config."""
    vc = cfg.get("vision_config")
    if not isinstance(vc, dict):
        return 0
    vc = with_vision_defaults({k: v for k, v in vc.items() if v is not None}, "mllama")
    patches = (_int(vc, ("image_size",)) // _int(vc, ("patch_size",))) ** 2 + 1
    return _int(vc, ("max_num_tiles",)) * patches


def vision_params(cfg: dict[str, Any], text_hidden: int) -> int:
    """Parameters of the vision tower and its projector into the text model; 0 without a
    vision_config, for a tower family kvplan has no formula for, or when a field the formula
    needs is absent. A field present with an invalid value raises ValueError."""
    try:
        return _vision_params(cfg, text_hidden)
    except _Missing:
        return 0


def _vision_params(cfg: dict[str, Any], text_hidden: int) -> int:
    vc = cfg.get("vision_config")
    if not isinstance(vc, dict):
        return 0
    outer = str(cfg.get("model_type", "")).lower()
    kind = str(vc.get("model_type", "")).lower()
    if kind.startswith("qwen3") or outer.startswith(("qwen3_vl", "qwen3_5", "qwen3_omni")):
        return _qwen3_vl(vc, text_hidden)
    if (
        kind == "qwen2_5_vl"
        or outer.startswith("qwen2_5_vl")
        or (outer.startswith("qwen2") and "out_hidden_size" in vc)
    ):
        return _qwen2_5_vl(vc, text_hidden)
    if kind == "qwen2_vl" or outer.startswith("qwen2_vl"):
        return _qwen2_vl(vc, text_hidden)
    if kind.startswith("llama4") or outer.startswith("llama4"):
        return _llama4(vc, text_hidden)
    if outer == "mllama":
        return _mllama(vc, text_hidden)
    tower = _tower(vc)
    if tower < 0:
        return 0  # gemma4_vision, unknown towers: not counted
    width = _int(vc, ("hidden_size",))
    if outer.startswith("gemma3"):  # Gemma3MultiModalProjector: RMSNorm + one matrix
        return tower + width + width * text_hidden
    if outer == "mistral3":
        merge = _int(cfg, ("spatial_merge_size",), 2)
        bias = bool(cfg.get("multimodal_projector_bias", False))
        projector = width + width * merge * merge * width
        projector += _linear(width * _feature_layers(cfg), text_hidden, bias) + _linear(
            text_hidden, text_hidden, bias
        )
        return tower + projector
    if outer.startswith("llava") or outer in ("pixtral",):
        bias = bool(cfg.get("multimodal_projector_bias", True))
        projector = _linear(width * _feature_layers(cfg), text_hidden, bias) + _linear(
            text_hidden, text_hidden, bias
        )
        newline = text_hidden if outer.startswith(("llava_next", "llava_onevision")) else 0
        return tower + projector + newline
    return tower
