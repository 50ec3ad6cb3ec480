"""Tensor operations an eviction policy performs on one layer's paged pool: read a
sequence's slots back (dequantized), score them with queries per KV head, and move K/V
(and per-token scales) between slots of one head. Slot i of a sequence lives in block
table[i // block_size] at offset i % block_size."""

from __future__ import annotations

from typing import Any

import numpy as np


def flat_slots(table: list[int], indices: Any, block_size: int) -> Any:
    import torch

    indices = torch.as_tensor(indices, dtype=torch.long)
    blocks = torch.tensor(table, dtype=torch.long)[indices // block_size]
    return blocks * block_size + indices % block_size


def read_slots(
    cache: Any, table: list[int], indices: Any, block_size: int, values: bool = False
) -> Any:
    """Keys (or values) at the sequence's slots `indices`, as attention reads them:
    [len(indices), kv_heads, head_dim] fp32."""
    from kvplan.kernels.quant import dequantize

    slots = flat_slots(table, indices, block_size).to(cache.key_cache.device)
    store, scales = (
        (cache.value_cache, cache.v_scale) if values else (cache.key_cache, cache.k_scale)
    )
    heads = store.shape[2]
    stored = store.reshape(-1, heads, store.shape[-1])[slots]
    if scales is not None and scales.dim() == 4:
        scales = scales.reshape(-1, heads, scales.shape[-1])[slots]
    return dequantize(stored, scales, cache.fmt, cache.head_dim).float()


def read_keys(cache: Any, table: list[int], count: int, block_size: int) -> Any:
    """The first `count` slots' keys: [count, kv_heads, head_dim] fp32."""
    return read_slots(cache, table, np.arange(count), block_size)


def attention_probs(keys: Any, queries: Any, query_slots: Any, scale: float) -> Any:
    """Softmax attention of `queries` [t, heads, dim] (query i sits at slot query_slots[i]
    and sees slots 0..query_slots[i]) over `keys` [n, kv_heads, dim], the query heads of a
    GQA group added into their KV head: [kv_heads, t, n] float64 numpy."""
    import torch

    count, heads = queries.shape[0], keys.shape[1]
    grouped = queries.float().reshape(count, heads, queries.shape[1] // heads, -1)
    logits = torch.einsum("tkgd,nkd->kgtn", grouped, keys) * scale
    later = torch.arange(keys.shape[0])[None, :] > torch.as_tensor(query_slots)[:, None]
    probs = logits.masked_fill(later.to(logits.device), float("-inf")).softmax(dim=-1)
    return probs.sum(dim=1).double().cpu().numpy()


def _tensors(cache: Any) -> list[Any]:
    heads = cache.key_cache.shape[2]
    out = [cache.key_cache, cache.value_cache]
    out += [s for s in (cache.k_scale, cache.v_scale) if s is not None and s.dim() == 4]
    return [t.reshape(-1, heads, t.shape[-1]) for t in out]


def move_slots(
    cache: Any, table: list[int], block_size: int, heads: Any, sources: Any, targets: Any
) -> None:
    """Per (head, source, target): copy the head's K/V at slot `source` into slot `target`
    (all sources are read before any target is written)."""
    import torch

    if len(heads) == 0:
        return
    src, dst = flat_slots(table, sources, block_size), flat_slots(table, targets, block_size)
    head_index = torch.as_tensor(np.asarray(heads), dtype=torch.long)
    for flat in _tensors(cache):
        rows = head_index.to(flat.device)
        flat[dst.to(flat.device), rows] = flat[src.to(flat.device), rows]


def compact(cache: Any, table: list[int], block_size: int, keep: Any) -> int:
    """Per head, gather the kept slots `keep` [heads, held] (sorted) to the front; returns
    the slots that moved."""
    heads, held = keep.shape
    moved = keep != np.arange(held)
    head_index = np.repeat(np.arange(heads), held)[moved.reshape(-1)]
    targets = np.tile(np.arange(held), heads)[moved.reshape(-1)]
    move_slots(cache, table, block_size, head_index, keep[moved], targets)
    return int(moved.sum())


def fill_holes(keep: Any, held: int) -> tuple[Any, Any, Any]:
    """Per head, the moves that bring the kept slots `keep` [heads, k] into slots 0..held-1
    with one copy per evicted slot below `held`: each hole there takes a kept slot from
    `held` or beyond. Returns (heads, sources, targets)."""
    heads, sources, targets = [], [], []
    for head, row in enumerate(np.asarray(keep)):
        kept = set(row.tolist())
        holes = [s for s in range(held) if s not in kept]
        tail = sorted(s for s in kept if s >= held)
        for hole, source in zip(holes, tail):
            heads.append(head)
            sources.append(source)
            targets.append(hole)
    return (
        np.array(heads, dtype=np.int64),
        np.array(sources, dtype=np.int64),
        np.array(targets, dtype=np.int64),
    )
