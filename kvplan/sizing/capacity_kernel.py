"""The capacity arithmetic of one question, written once for a point and for a grid.

`pool_capacity` turns an engine's memory (usable, weights, reserve) into the KV pool, its
blocks, one sequence's bytes and the verdict. Its numbers are Python numbers for one point
(capacity.plan) or numpy arrays over a grid's numeric axes (capacity_sweep.sweep): the few
operations it takes come from `ops`, numpy itself for a grid and POINT for a point, so both
run the same lines and a point is a one-point grid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kvplan.spec import KVFormat, ModelSpec

WEIGHTS_DO_NOT_FIT = "weights-do-not-fit"
KV_DOES_NOT_FIT = "kv-does-not-fit"
FITS = "fits"


class PointOps:
    """numpy's functions the kernel uses, for Python numbers."""

    minimum = staticmethod(min)
    maximum = staticmethod(max)
    floor = staticmethod(math.floor)
    ceil = staticmethod(math.ceil)

    @staticmethod
    def where(condition: Any, yes: Any, no: Any) -> Any:
        return yes if condition else no

    @staticmethod
    def floor_divide(a: Any, b: Any) -> Any:
        return a // b


POINT = PointOps()


def sequence_bytes(
    model: ModelSpec,
    fmt: KVFormat,
    tp: int,
    context: Any,
    block: Any,
    *,
    respect_windows: bool,
    kv_budget: int | None,
    ops: Any = POINT,
) -> Any:
    """Bytes one sequence of `context` tokens holds per GPU, rounded up to whole blocks per
    attention group, plus its per-sequence state; windowed groups keep their window with
    `respect_windows`, every layer at most `kv_budget` tokens with one."""
    total = float(model.state_bytes_per_seq(tp))
    for group in model.token_groups:
        tokens = (
            ops.minimum(context, group.window) if respect_windows and group.windowed else context
        )
        if kv_budget is not None:
            tokens = ops.minimum(tokens, kv_budget)
        total = total + ops.ceil(tokens / block) * block * group.bytes_per_token(fmt, tp)
    return total


@dataclass(frozen=True)
class PoolCapacity:
    """What a KV pool holds (numbers for a point, arrays for a grid)."""

    kv_pool: Any  # bytes per GPU
    num_blocks: Any
    seq_bytes: Any  # one sequence under the chosen allocation
    allocatable: Any  # of the pool, what sequences can use
    max_batch: Any  # sequences of the context that fit at once
    verdict: Any


def pool_capacity(
    model: ModelSpec,
    fmt: KVFormat,
    tp: int,
    *,
    usable: Any,
    weights: Any,
    reserve: Any,
    kv_cache_bytes: float | None,
    context: Any,
    batch: Any,
    block: Any,
    respect_windows: bool,
    kv_budget: int | None,
    ops: Any = POINT,
) -> PoolCapacity:
    """The pool as vLLM sizes it: usable - weights - reserve (or the KV memory given), whole
    blocks of it, and whether `batch` sequences of `context` tokens fit. A model with a
    per-sequence state (linear attention) can use all of the pool, blocks or not."""
    per_token = model.kv_bytes_per_token(fmt, tp)
    kv_pool = kv_cache_bytes if kv_cache_bytes is not None else usable - weights - reserve
    num_blocks = ops.maximum(0, ops.floor(kv_pool / (per_token * block)))
    seq = sequence_bytes(
        model,
        fmt,
        tp,
        context,
        block,
        respect_windows=respect_windows,
        kv_budget=kv_budget,
        ops=ops,
    )
    stateful = bool(model.state_bytes_per_seq(tp))
    allocatable = ops.maximum(0.0, kv_pool) if stateful else num_blocks * block * per_token
    weights_fail = (weights + reserve > usable) & (kv_cache_bytes is None)
    verdict = ops.where(
        weights_fail,
        WEIGHTS_DO_NOT_FIT,
        ops.where(seq * batch > allocatable, KV_DOES_NOT_FIT, FITS),
    )
    return PoolCapacity(
        kv_pool, num_blocks, seq, allocatable, ops.floor_divide(allocatable, seq), verdict
    )
