"""The longest max_model_len a serving engine accepts for a model, read from its config as
vLLM derives it (vllm/config ModelConfig `_get_and_verify_max_len`):

- the smallest of the length keys the config names (max_position_embeddings, n_positions,
  max_seq_len, seq_length, model_max_length, max_sequence_length, max_seq_length, seq_len);
- times the RoPE scaling factor, unless the scaling already extends the positions the model
  names (llama3, longrope / su) or the model is Gemma-3 (whose 128K is already scaled);
  YaRN scales its original_max_position_embeddings instead. Transformers v5 nests
  rope_parameters per layer type; one factor serves them all, as in vLLM.

vLLM refuses a longer --max-model-len unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (it warns that
outputs may then be wrong), and accepts one up to model_max_length where the config names it.
"""

from __future__ import annotations

import math
from typing import Any

LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
UNSCALED_ROPE = ("su", "longrope", "llama3")  # their positions already span the scaled length
LENGTH_LIMIT = 2**62  # a factor of 1e300 in a config is a length no int64 holds: cap it


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _rope_entries(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling")
    if not isinstance(rope, dict) or not rope:
        return []
    if all(isinstance(entry, dict) for entry in rope.values()):  # per layer type (v5)
        return list(rope.values())
    return [rope]


def derived_max_len(cfg: dict[str, Any]) -> int:
    """vLLM's derived maximum for this (text) config; 0 when it names no length."""
    lengths = [n for n in (_number(cfg.get(key)) for key in LENGTH_KEYS) if n is not None]
    if not lengths:
        return 0
    derived = min(lengths)
    if "gemma3" not in str(cfg.get("model_type", "")):
        factor = 1.0
        for entry in _rope_entries(cfg):
            kind = entry.get("rope_type", entry.get("type", "default"))
            if kind in UNSCALED_ROPE:
                continue
            factor = _number(entry.get("factor")) or factor
            if kind == "yarn":
                derived = _number(entry.get("original_max_position_embeddings")) or derived
        derived *= factor
    allowed = _number(cfg.get("model_max_length"))  # vLLM accepts up to it where named
    if allowed is not None:
        derived = max(derived, allowed)
    return int(min(derived, LENGTH_LIMIT))
