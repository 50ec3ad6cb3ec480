"""Per-layer plans for families whose config describes every decoder layer on its own.

Most configs give one shape for all layers and, at most, a list of attention kinds
(layers.py). Three families instead say, layer by layer, which mixer a layer has and which
feed-forward follows it:

- NVIDIA Nemotron-H (`hybrid_override_pattern`, one character per layer; newer transformers
  write the same as a `layers_block_type` list): `M` a Mamba-2 mixer (per-sequence state),
  `*` attention, `-` a dense MLP, `E` a mixture-of-experts block. Each layer holds exactly one
  of them (vLLM's NemotronH*DecoderLayer: one norm, one mixer), so an `M` layer has no MLP and
  a `-` layer no attention.
- DeciLM / Nemotron-NAS (`block_configs`, Llama-3.3-Nemotron-Super-49B): per layer an attention
  with its own KV head count (num_attention_heads // n_heads_in_group) or a no-op, and an FFN
  of its own width (ffn_mult) or a no-op. vLLM's DeciLMDecoderLayer skips the no-op parts,
  their norms included, and allocates KV only for the layers with attention (HasNoOps).
- Llama-3.2-Vision (mllama, `cross_attention_layers`): those layers cross-attend to the image
  tokens (a KV of the image, not of the text: see ModelSpec.cross_groups); the others are
  ordinary self-attention layers. Every layer has a gated MLP.

Mixer kinds are layers.py's ('full', 'sliding', 'state') plus 'cross' and 'none' (no KV).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvplan import cdiv
from kvplan.spec.family_defaults import MLLAMA_CROSS_LAYERS

# Nemotron-H's pattern characters and the list names newer transformers use for them
# (NemotronHConfig._pattern_to_list): mixer kind and feed-forward of the layer.
_NEMOTRON_H_BLOCKS: dict[str, tuple[str, str]] = {
    "M": ("state", "none"),
    "*": ("full", "none"),
    "-": ("none", "dense"),
    "E": ("none", "moe"),
    "mamba": ("state", "none"),
    "linear_attention": ("state", "none"),
    "attention": ("full", "none"),
    "full_attention": ("full", "none"),
    "mlp": ("none", "dense"),
    "moe": ("none", "moe"),
}


@dataclass(frozen=True)
class LayerPlan:
    """One decoder layer: its mixer ('full', 'sliding', 'state', 'cross', 'none') and its
    feed-forward ('dense', 'moe', 'none'), with a per-layer KV head count or MLP width where
    the config sets one (None: the model-wide value)."""

    mixer: str
    ffn: str
    kv_heads: int | None = None
    ffn_width: int | None = None


def _nemotron_h(cfg: dict[str, Any], num_layers: int) -> list[LayerPlan]:
    blocks = cfg.get("layers_block_type") or cfg.get("hybrid_override_pattern")
    if blocks is None:
        raise ValueError("a nemotron_h config needs hybrid_override_pattern (M, *, -, E per layer)")
    blocks = list(blocks)
    if len(blocks) != num_layers:
        raise ValueError(
            f"hybrid_override_pattern has {len(blocks)} layers but the model has {num_layers}"
        )
    unknown = sorted({b for b in blocks if b not in _NEMOTRON_H_BLOCKS})
    if unknown:
        raise ValueError(f"unknown Nemotron-H layer type(s) {unknown}; known: M, *, -, E")
    return [LayerPlan(*_NEMOTRON_H_BLOCKS[b]) for b in blocks]


def decilm_ffn_width(ffn_mult: float, hidden: int) -> int:
    """DeciLM's FFN width from ffn_mult: 2/3 x mult x hidden, rounded up to a multiple of 256
    (vLLM's nemotron_nas._ffn_mult_to_intermediate_size)."""
    width = int(2 * ffn_mult * hidden / 3)
    return cdiv(width, 256) * 256


def _decilm(cfg: dict[str, Any], num_layers: int) -> list[LayerPlan]:
    blocks = cfg["block_configs"]
    if len(blocks) != num_layers:
        raise ValueError(
            f"block_configs has {len(blocks)} entries but the model has {num_layers} layers"
        )
    if not (cfg.get("num_attention_heads") and cfg.get("hidden_size")):
        raise ValueError("a config with block_configs needs num_attention_heads and hidden_size")
    heads, hidden = int(cfg["num_attention_heads"]), int(cfg["hidden_size"])
    plans = []
    for i, block in enumerate(blocks):
        attention, ffn = block.get("attention") or {}, block.get("ffn") or {}
        if not (isinstance(attention, dict) and isinstance(ffn, dict)):
            raise ValueError(f"block_configs[{i}] must hold an 'attention' and an 'ffn' object")
        if attention.get("replace_with_linear") or ffn.get("replace_with_linear"):
            raise ValueError(
                f"block_configs[{i}] replaces a sublayer with a linear layer, which vLLM "
                "does not build; kvplan cannot size it"
            )
        if attention.get("no_op"):
            mixer, kv_heads = "none", None
        else:
            group = attention.get("n_heads_in_group")
            if not isinstance(group, int) or isinstance(group, bool) or group <= 0 or heads % group:
                raise ValueError(
                    f"block_configs[{i}].attention.n_heads_in_group = {group!r} must divide "
                    f"num_attention_heads = {heads}"
                )
            mixer, kv_heads = "full", heads // group
        if ffn.get("no_op"):
            plans.append(LayerPlan(mixer, "none", kv_heads))
            continue
        # vLLM takes ffn_mult when the block has one, else the block's own intermediate_size.
        mult, width = ffn.get("ffn_mult"), ffn.get("intermediate_size")
        if mult is not None:
            if isinstance(mult, bool) or not isinstance(mult, (int, float)) or not 0 < mult < 1e6:
                raise ValueError(
                    f"block_configs[{i}].ffn.ffn_mult = {mult!r} must be a positive number"
                )
            width = decilm_ffn_width(float(mult), hidden)
        if isinstance(width, bool) or not isinstance(width, int) or width <= 0:
            raise ValueError(
                f"block_configs[{i}].ffn needs a positive ffn_mult or intermediate_size"
            )
        plans.append(LayerPlan(mixer, "dense", kv_heads, width))
    return plans


def _mllama(cfg: dict[str, Any], num_layers: int) -> list[LayerPlan]:
    layers: list[int] | None = cfg.get("cross_attention_layers")
    cross = set(
        MLLAMA_CROSS_LAYERS if layers is None else layers
    )  # MllamaTextConfig: None -> default
    if any(i >= num_layers for i in cross):
        raise ValueError(
            f"cross_attention_layers names a layer past num_hidden_layers = {num_layers}"
        )
    return [LayerPlan("cross" if i in cross else "full", "dense") for i in range(num_layers)]


def layer_plans(cfg: dict[str, Any], num_layers: int) -> list[LayerPlan] | None:
    """The per-layer plan of a Nemotron-H, DeciLM or mllama text config; None for other families."""
    model_type = str(cfg.get("model_type", ""))
    if model_type == "nemotron_h":
        return _nemotron_h(cfg, num_layers)
    if isinstance(cfg.get("block_configs"), list):
        return _decilm(cfg, num_layers)
    if model_type.startswith("mllama"):
        return _mllama(cfg, num_layers)
    return None
