"""Which modules a quantized checkpoint leaves in 16 bit, read from the name patterns its
quantization_config lists (`modules_to_not_convert`, compressed-tensors' `ignore`, ModelOpt's
`exclude_modules`, bitsandbytes' `llm_int8_skip_modules`): each pattern mapped to a parameter
role (attention, dense MLP, routed experts, router, LM head, vision tower) and, where it names
one, a layer, so the kept share of each role is a fraction of the layers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

VISION_WORDS = ("vision", "visual", "vit", "multi_modal_projector", "mm_projector", "merger", "image")


def as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value if v is not None]


_ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "q_a_proj", "q_b_proj",
                          "kv_a_proj_with_mqa", "kv_b_proj", "wq", "wk", "wv", "wo")


def pattern_role(entry: str) -> str | None:
    """The parameter role a not-convert / ignore entry names: embedding, lm_head, routers, vision,
    attention (all of a layer's), attention-part (one of its q/k/v/o projections), dense (a dense
    or shared-expert MLP), experts (the routed experts), mlp (both); None for norms and the
    small parts kvplan does not size apart (indexer projections, MTP heads, biases)."""
    text = entry[3:] if entry.startswith("re:") else entry
    low = text.lower()
    if any(word in low for word in VISION_WORDS):
        return "vision"
    if "lm_head" in low or "output_layer" in low:
        return "lm_head"
    if "embed" in low or "wte" in low:
        return "embedding"
    if "norm" in low:
        return None
    if re.search(r"(^|\.)(gate|router)(\.|\W*$)", low) or "shared_expert_gate" in low or "e_score_correction" in low:
        return "routers"
    leaf = re.sub(r"[^a-z0-9_]+$", "", low.rsplit(".", 1)[-1])
    if re.search(r"(self_attn|linear_attn|attention|attn)\W*$", low) or re.search(r"(self_attn|attn)\.\*", low):
        return "attention"
    if leaf in _ATTENTION_PROJECTIONS and re.search(r"attn|attention", low):
        return "attention-part"
    if re.search(r"attn|attention", low):
        return None  # an indexer, a sink, a norm of the attention block
    if "shared_expert" in low:
        return "dense"
    if "experts" in low:
        return "experts"
    if "_proj" in low or re.search(r"fc1|fc2|dense_h_to_4h|dense_4h_to_h", low):
        return "dense"  # a dense MLP's projection (a routed expert's names "experts" above)
    if re.search(r"mlp|feed_forward|ffn|block_sparse_moe|moe", low):
        return "mlp"
    return None


def layer_of(entry: str) -> int | None:
    """The decoder layer an entry names, or None when it names every layer (a regex, a wildcard)."""
    match = re.search(r"layers\\?\.(\d+)(\\?\.|\*|$)", entry)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class Kept:
    """What a not-convert list keeps in 16 bit: roles by name, and per-layer fractions."""

    roles: frozenset[str]
    attention_kept: float
    dense_kept: float
    experts_kept: float


def kept_modules(entries: list[str], num_layers: int) -> Kept:
    """Read a modules_to_not_convert / ignore / exclude_modules list. An entry naming a layer
    ("model.layers.0.mlp", "model.layers.3.self_attn") keeps that part of that layer; a regex
    or a wildcard without a layer ("re:.*self_attn.*", "model.layers.*.self_attn") keeps it in
    every layer. One q/k/v/o projection counts a quarter of its layer's attention (Meta's
    405B-FP8 list names all four); "shared_expert" and dense projections keep the dense MLP,
    "experts" the routed experts, a plain "mlp" both."""
    roles: set[str] = set()
    layers = max(num_layers, 1)
    kept: dict[str, dict[int, float]] = {"attention": {}, "dense": {}, "experts": {}}
    every = {"attention": 0.0, "dense": 0.0, "experts": 0.0}

    def add(part: str, layer: int | None, amount: float) -> None:
        if layer is None:
            every[part] = min(1.0, every[part] + amount)
        elif layer < layers:
            kept[part][layer] = min(1.0, kept[part].get(layer, 0.0) + amount)

    for entry in entries:
        role = pattern_role(entry)
        if role is None:
            continue
        layer = layer_of(entry)
        if role == "attention":
            add("attention", layer, 1.0)
        elif role == "attention-part":
            add("attention", layer, 0.25)
        elif role in ("dense", "experts"):
            add(role, layer, 1.0)
        elif role == "mlp":
            add("dense", layer, 1.0)
            add("experts", layer, 1.0)
        else:
            roles.add(role)

    def fraction(part: str) -> float:
        if every[part] >= 1.0:
            return 1.0
        per_layer = [max(every[part], kept[part].get(i, 0.0)) for i in range(layers)]
        return sum(per_layer) / layers

    return Kept(frozenset(roles), fraction("attention"), fraction("dense"), fraction("experts"))
