"""Block-wise eviction (PagedEviction, 2025): drop the whole block (by absolute position) of
lowest mean importance over all heads, never the newest block, until within budget. Every
head keeps the same tokens, so pages really empty."""

from __future__ import annotations

from typing import Any

from kvplan import cdiv
from kvplan.core.policies.base import EvictionPolicy
from kvplan.core.policies.h2o import NO_SCORES


def keep_paged(scores: Any, positions: list[int], budget: int, block: int) -> list[int]:
    """scores [heads, n] (or [n]); drop whole blocks (position // block) of lowest mean score
    over heads until within budget; the newest block stays. Same kept set for every head."""
    import numpy as np

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


class PagedEviction(EvictionPolicy):
    name = "paged-eviction"
    help = "whole pages of lowest mean attention dropped, the newest kept"
    order = 6
    prefix_conflict = NO_SCORES.format("block-wise eviction")

    def held_over_budget(self, spec: Any, prompt_len: int, length: int, budget: int) -> int:
        dropped_blocks = min(cdiv(length - budget, spec.block), (length - 1) // spec.block)
        return length - dropped_blocks * spec.block

    def keep(self, spec: Any, scores: Any, positions: Any, budget: int) -> list[int]:
        """Pages against the spec's budget (every layer holds it), one kept set for all heads."""
        return keep_paged(scores, list(positions[0]), spec.budget, spec.block)
