"""SnapKV (Li et al. 2024): once, after the prompt, the observation window (the last
`window` prompt queries) votes over the earlier tokens per KV head; votes are max-pooled
(`kernel` wide) and the top tokens plus the window are kept, compacted; later tokens are
all kept."""

from __future__ import annotations

from typing import Any

from kvplan.core.policies.base import EvictionPolicy, top_indices


def keep_snapkv(votes: Any, budget: int, window: int, kernel: int = 7) -> Any:
    """votes [heads, n - window]: attention the observation window paid to each earlier token
    -> kept indices [heads, min(n, budget)] (the window always kept)."""
    import numpy as np

    votes = np.atleast_2d(np.asarray(votes, dtype=np.float64))
    heads, older = votes.shape
    count = older + window
    if count <= budget:
        return np.tile(np.arange(count), (heads, 1))
    half = kernel // 2
    padded = np.pad(votes, ((0, 0), (half, half)), constant_values=-np.inf)
    pooled = np.max(np.lib.stride_tricks.sliding_window_view(padded, kernel, axis=1), axis=-1)
    top = top_indices(pooled, budget - window)
    return np.concatenate([top, np.tile(np.arange(older, count), (heads, 1))], axis=1)


class SnapKV(EvictionPolicy):
    name = "snapkv"
    help = "SnapKV: the prompt compressed once by its last queries' votes, later tokens kept"
    order = 5
    selects_after_prompt = True
    prefix_conflict = (
        "SnapKV compresses each prompt in place from its own observation window, so a compressed "
        "block no longer holds the tokens another request's hit reads"
    )

    def check(self, spec: Any) -> None:
        if spec.budget is not None and spec.budget <= spec.window:
            raise ValueError(
                f"snapkv keeps its {spec.window}-query observation window: the budget must exceed "
                "it"
            )

    def held_over_budget(self, spec: Any, prompt_len: int, length: int, budget: int) -> int:
        if length < prompt_len:
            return length
        return min(prompt_len, budget) + (length - prompt_len)

    def attended_tokens(self, spec: Any, prompt_len: int, length: int) -> int:
        """It reads its whole prompt before compressing it."""
        if length <= prompt_len:
            return length
        return self.held_tokens(spec, prompt_len, length)

    def peak_held_tokens(self, spec: Any, prompt_len: int, length: int) -> int:
        return max(min(length, prompt_len), self.held_tokens(spec, prompt_len, length))

    def keep_after_prompt(self, spec: Any, votes: Any, window: int) -> Any:
        return keep_snapkv(votes, spec.budget, window, spec.kernel)
