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

VISION_WORDS = (
    "vision",
    "visual",
    "vit",
    "multi_modal_projector",
    "mm_projector",
    "merger",
    "image",
)


def as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value if v is not None]


_ATTENTION_PROJECTIONS = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "qkv_proj",
    "q_a_proj",
    "q_b_proj",
    "kv_a_proj_with_mqa",
    "kv_b_proj",
    "wq",
    "wk",
    "wv",
    "wo",
)
# a gated-delta-net layer's projections (Qwen3.5 in_proj_qkv / in_proj_z / out_proj, Qwen3-Next
# in_proj_qkvz); in_proj_a / in_proj_b / in_proj_ba are hidden x value_heads, not sized apart
_LINEAR_ATTENTION_PROJECTIONS = {
    "in_proj_qkv": 1 / 3,
    "in_proj_z": 1 / 3,
    "out_proj": 1 / 3,
    "in_proj_qkvz": 2 / 3,
}
# the share of a layer's dense MLP one projection stands for
_MLP_PROJECTIONS = {
    "gate_proj": 1 / 3,
    "up_proj": 1 / 3,
    "down_proj": 1 / 3,
    "w1": 1 / 3,
    "w2": 1 / 3,
    "w3": 1 / 3,
    "gate_up_proj": 2 / 3,
    "fc1": 1 / 2,
    "fc2": 1 / 2,
}


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
    if (
        re.search(r"(^|\.)(gate|router)(\.|\W*$)", low)
        or "shared_expert_gate" in low
        or "e_score_correction" in low
    ):
        return "routers"
    leaf = re.sub(r"[^a-z0-9_]+$", "", low.rsplit(".", 1)[-1])
    if re.search(r"(self_attn|linear_attn|attention|attn)\W*$", low) or re.search(
        r"(self_attn|attn)\.\*", low
    ):
        return "attention"
    if leaf in _ATTENTION_PROJECTIONS and re.search(r"attn|attention", low):
        return "attention-part"
    if leaf in _LINEAR_ATTENTION_PROJECTIONS and "linear_attn" in low:
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
            add("attention", layer, part_share(entry, role))
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


def _leaf(entry: str) -> str:
    return re.sub(r"[^a-z0-9_]+$", "", entry.lower().rsplit(".", 1)[-1])


def part_share(entry: str, role: str) -> float:
    """The share of its layer's role one entry stands for: a q/k/v/o projection a quarter of
    the attention, a gated-delta-net in_proj_qkv / in_proj_z / out_proj a third, a gate / up /
    down projection a third of the dense MLP; a whole module (self_attn, mlp, experts) 1."""
    leaf = _leaf(entry)
    if role == "attention-part":
        return (
            _LINEAR_ATTENTION_PROJECTIONS.get(leaf, 0.25)
            if "linear_attn" in entry.lower()
            else 0.25
        )
    if role == "dense":
        return _MLP_PROJECTIONS.get(leaf, 1.0)
    return 1.0


def role_formats(
    formats: dict[str, str], num_layers: int
) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """A per-module format list (ModelOpt MIXED_PRECISION's `quantized_layers`, read as
    {module name: 'nvfp4' / 'fp8'}) as ({role: {format: fraction}}, {whole role: format}).

    For attention the fraction is of all decoder layers; for the dense MLP and the routed
    experts, of the layers that name that role at all (a MoE model's dense-first layers hold
    no experts, its MoE layers no dense MLP): what no format names stays 16 bit. lm_head,
    embedding and vision come back whole. MTP modules are skipped (kvplan does not count them)."""
    layers = max(num_layers, 1)
    shares: dict[str, dict[str, dict[int, float]]] = {"attention": {}, "dense": {}, "experts": {}}
    whole: dict[str, str] = {}
    for name, fmt in formats.items():
        if name.startswith("mtp") or ".mtp." in name:
            continue
        role = pattern_role(name)
        if role is None or role == "routers":
            continue
        if role not in ("attention", "attention-part", "dense", "experts", "mlp"):
            whole[role] = fmt
            continue
        parts = (
            ("dense", "experts")
            if role == "mlp"
            else ("attention",)
            if role.startswith("attention")
            else (role,)
        )
        layer = layer_of(name)
        for part in parts:
            by_layer = shares[part].setdefault(fmt, {})
            for i in range(layers) if layer is None else [layer] if layer < layers else []:
                by_layer[i] = min(1.0, by_layer.get(i, 0.0) + part_share(name, role))
    fractions: dict[str, dict[str, float]] = {}
    for part, by_format in shares.items():
        named = set().union(*(set(d) for d in by_format.values())) if by_format else set()
        total = layers if part == "attention" else max(len(named), 1)
        fractions[part] = {fmt: sum(d.values()) / total for fmt, d in by_format.items()}
    return fractions, whole
