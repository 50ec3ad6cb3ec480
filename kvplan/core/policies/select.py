"""Which cached tokens each KV head keeps: pure functions of what the head holds and a
budget, returning sorted indices into the head's cache, so kept sets pin on tiny inputs.

Attention-dependent policies select per KV head, as H2O and SnapKV do (under GQA the
query heads of a group add their attention into their shared KV head's score):

- sliding-window: the newest `budget` tokens.
- streaming (StreamingLLM, Xiao et al. 2023): the first 4 "sink" tokens + the newest.
- h2o (Zhang et al. 2023): the newest half of the budget + the heavy hitters (largest
  accumulated attention) among the older tokens, per head.
- snapkv (Li et al. 2024): once, after the prompt: the observation window (last `window`
  prompt queries) votes over the earlier tokens per head, votes are max-pooled (`kernel`
  wide) and the top tokens plus the window are kept; later tokens are all kept.
- paged-eviction (block-wise, PagedEviction 2025): drop the whole block (by absolute
  position) of lowest mean importance over all heads, never the newest block, until
  within budget; every head keeps the same tokens, so pages really empty.
- entropy-budget: a total budget split across layers by attention entropy, H2O within.
"""

from __future__ import annotations

import numpy as np

from kvplan.core.policies.spec import SINKS


def keep_sliding(count: int, budget: int) -> list[int]:
    return list(range(max(0, count - budget), count))


def keep_streaming(count: int, budget: int, sinks: int = SINKS) -> list[int]:
    if count <= budget:
        return list(range(count))
    sinks = min(sinks, budget)
    return list(range(sinks)) + list(range(count - (budget - sinks), count))


def _top(scores: np.ndarray, count: int) -> np.ndarray:
    """Per row, the indices of the `count` largest scores (ties: the earlier token), sorted."""
    order = np.argsort(-scores, axis=-1, kind="stable")[..., :count]
    return np.sort(order, axis=-1)


def keep_h2o(scores: np.ndarray, budget: int, recent: int | None = None) -> np.ndarray:
    """scores [heads, n] accumulated attention -> kept indices [heads, min(n, budget)]."""
    scores = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    heads, count = scores.shape
    if count <= budget:
        return np.tile(np.arange(count), (heads, 1))
    recent = budget // 2 if recent is None else min(recent, budget)
    heavy = _top(scores[:, : count - recent], budget - recent)
    tail = np.tile(np.arange(count - recent, count), (heads, 1))
    return np.concatenate([heavy, tail], axis=1)


def keep_snapkv(votes: np.ndarray, budget: int, window: int, kernel: int = 7) -> np.ndarray:
    """votes [heads, n - window]: attention the observation window paid to each earlier token
    -> kept indices [heads, min(n, budget)] (the window always kept)."""
    votes = np.atleast_2d(np.asarray(votes, dtype=np.float64))
    heads, older = votes.shape
    count = older + window
    if count <= budget:
        return np.tile(np.arange(count), (heads, 1))
    half = kernel // 2
    padded = np.pad(votes, ((0, 0), (half, half)), constant_values=-np.inf)
    pooled = np.max(np.lib.stride_tricks.sliding_window_view(padded, kernel, axis=1), axis=-1)
    top = _top(pooled, budget - window)
    return np.concatenate([top, np.tile(np.arange(older, count), (heads, 1))], axis=1)


def keep_paged(scores: np.ndarray, positions: list[int], budget: int, block: int) -> list[int]:
    """scores [heads, n] (or [n]); drop whole blocks (position // block) of lowest mean score
    over heads until within budget; the newest block stays. Same kept set for every head."""
    mean = np.atleast_2d(np.asarray(scores, dtype=np.float64)).mean(axis=0)
    kept = list(range(len(mean)))
    newest = positions[-1] // block if positions else 0
    while len(kept) > budget:
        blocks: dict[int, list[int]] = {}
        for index in kept:
            blocks.setdefault(positions[index] // block, []).append(index)
        candidates = [b for b in blocks if b != newest]
        if not candidates:
            break
        victim = min(candidates, key=lambda b: (float(mean[blocks[b]].mean()), b))
        dropped = set(blocks[victim])
        kept = [i for i in kept if i not in dropped]
    return kept


def split_budget(total: int, entropies: list[float], floor: int = SINKS) -> list[int]:
    """Per-layer budgets proportional to entropy, each at least `floor`, summing to `total`
    (largest remainders get the leftover tokens)."""
    layers = len(entropies)
    spare = total - floor * layers
    if spare < 0:
        raise ValueError(f"a total budget of {total} cannot give {layers} layers {floor} tokens each")
    weight = sum(entropies) or 1.0
    shares = [spare * e / weight for e in entropies]
    budgets = [floor + int(s) for s in shares]
    order = sorted(range(layers), key=lambda i: (-(shares[i] - int(shares[i])), i))
    for i in order[: total - sum(budgets)]:
        budgets[i] += 1
    return budgets
