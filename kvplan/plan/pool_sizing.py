"""How a KV pool becomes blocks and how long a sequence it must serve: the rules the
estimator and both engines (kvplan.sim.factory, kvplan.real.factory) share."""

from __future__ import annotations

import math

from kvplan.spec import ModelSpec

DEFAULT_MAX_MODEL_LEN = 4096  # for a model whose config names no max_position_embeddings


def max_model_len_for(model: ModelSpec, asked: int | None = None) -> int:
    """The longest sequence an engine serves: the length asked for, else the model's
    max_position_embeddings, else DEFAULT_MAX_MODEL_LEN."""
    return asked or model.max_position_embeddings or DEFAULT_MAX_MODEL_LEN


def whole_blocks(pool_bytes: float, slot_bytes: float, block_size: int) -> int:
    """Blocks of `block_size` slots a KV pool of `pool_bytes` holds, rounded down as an
    allocator does (none in an empty or negative pool)."""
    return math.floor(pool_bytes / (slot_bytes * block_size)) if pool_bytes > 0 else 0
