"""How a KV pool becomes blocks and how long a sequence it must serve: the rules the
estimator and both engines (kvplan.sim.factory, kvplan.real.factory) share."""

from __future__ import annotations

import math

from kvplan.spec import ModelSpec
from kvplan.spec.setting_error import SettingError

# vLLM's default GPU KV block (tokens), kvplan's too: the estimator, the engines and a log that
# prints none read it from here
GPU_BLOCK_SIZE = 16
DEFAULT_MAX_MODEL_LEN = 4096  # for a model whose config names no max_position_embeddings


def max_model_len_for(model: ModelSpec, asked: int | None = None) -> int:
    """The longest sequence an engine serves: the length asked for, else the model's
    max_position_embeddings, else DEFAULT_MAX_MODEL_LEN."""
    return asked or model.max_position_embeddings or DEFAULT_MAX_MODEL_LEN


def model_max_len(model: ModelSpec) -> int | None:
    """The longest max_model_len the engine accepts for this model (vLLM's derived maximum:
    its config's length keys with RoPE scaling, kvplan/spec/max_len.py), None where the
    config names no length."""
    return model.derived_max_model_len or model.max_position_embeddings or None


def check_max_model_len(
    model: ModelSpec, asked: int | None, setting: str = "max_model_len", within: str | None = None
) -> None:
    """Refuse a length above the model's maximum, as vLLM does at startup; `setting` names the
    setting that asked for it (estimate's context, bench's max_model_len), as an axis of
    `within` where given (estimate's --sweep context=...)."""
    most = model_max_len(model)
    if asked is None or most is None or asked <= most:
        return
    named = f"{{{within}}} {setting}" if within else f"{{{setting}}}"
    raise SettingError(
        f"{named} {{got:,}} is above {{name}}'s maximum of {{most:,}} tokens (its config's "
        "length with RoPE scaling); vLLM refuses it too unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, "
        "which risks wrong outputs: use at most {most}",
        got=asked,
        name=model.name,
        most=most,
    )


def whole_blocks(pool_bytes: float, slot_bytes: float, block_size: int) -> int:
    """Blocks of `block_size` slots a KV pool of `pool_bytes` holds, rounded down as an
    allocator does (none in an empty or negative pool)."""
    return math.floor(pool_bytes / (slot_bytes * block_size)) if pool_bytes > 0 else 0
