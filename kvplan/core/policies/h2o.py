"""H2O (Zhang et al. 2023): per KV head, the newest half of the budget + the heavy hitters
(largest accumulated attention) among the older tokens. Under GQA the query heads of a
group add their attention into their shared KV head's score.

Different heads keep different tokens, so the pool holds each head's kept tokens
compacted at the front of the sequence's slots (one copy per evicted token, charged as
time) and ceil(held / block_size) blocks. `h2o-holes` selects as h2o does but leaves each
evicted token's hole where it was: a block frees only once no head of any layer keeps a
token of it. Without attention scores the simulator cannot tell when that is, so it
charges the bound where heavy hitters can sit in any old block: every written block stays,
its holes counted as internal fragmentation (real mode measures the blocks holes would
hold on its h2o runs: eviction_hole_blocks_ratio)."""

from __future__ import annotations

from typing import Any

from kvplan.core.policies.base import EvictionPolicy, top_indices

NO_SCORES = (
    "a request that hits the prefix cache never computes the cached prefix's attention, so {} has "
    "no "
    "scores to choose from"
)


def keep_h2o(scores: Any, budget: int, recent: int | None = None) -> Any:
    """scores [heads, n] accumulated attention -> kept indices [heads, min(n, budget)]."""
    import numpy as np

    scores = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    heads, count = scores.shape
    if count <= budget:
        return np.tile(np.arange(count), (heads, 1))
    recent = budget // 2 if recent is None else min(recent, budget)
    heavy = top_indices(scores[:, : count - recent], budget - recent)
    tail = np.tile(np.arange(count - recent, count), (heads, 1))
    return np.concatenate([heavy, tail], axis=1)


class H2O(EvictionPolicy):
    name = "h2o"
    help = "H2O: the newest half of the budget + the heavy hitters, per KV head"
    order = 3
    prefix_conflict = NO_SCORES.format("H2O")

    def keep(self, spec: Any, scores: Any, positions: Any, budget: int) -> Any:
        return keep_h2o(scores, budget)


class H2OHoles(H2O):
    name = "h2o-holes"
    help = "h2o leaving evicted tokens' holes in their blocks (no compaction copies)"
    order = 4
    compacts = False
    keeps_holes = True
    # A forked sample shares its parent's blocks, holes included, and then drops tokens of
    # its own inside them: which slots of a shared block still hold a live token is per
    # sample, which the simulator's token counts do not track (its split would go negative).
    fork_refusal = (
        "parallel samples share blocks whose holes differ per sample, which kvplan does not "
        "model; use h2o (compacting) with --samples, or --samples 1"
    )
    real_refusal = (
        "the paged kernels read a sequence's slots densely, so real h2o compacts its holes (its "
        "runs "
        "report the blocks holes would hold: eviction_hole_blocks_ratio)"
    )
