"""One layer's KV cache in the quality evaluator: per KV head, the kept tokens' K/V (as
stored: quantized and read back), their original positions and accumulated attention.
Selection (which tokens to keep) comes from kvplan.core.policies; this file only moves
tensors, and re-rotates keys for StreamingLLM's in-cache positions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch


@dataclass
class LayerCache:
    keys: Any = None  # [kv_heads, n, head_dim]
    values: Any = None
    positions: Any = None  # np [kv_heads, n]: each kept token's original position
    # np [kv_heads, n]: attention each token received (summed over the group's query heads)
    scores: Any = None
    window_rows: list[Any] = field(
        default_factory=list
    )  # snapkv: recent per-query attention [kv_heads, n_then]
    entropy: float = 0.0
    entropy_steps: int = 0
    peak_tokens: int = 0
    key_absmax: float = 0.0  # of every K/V written (per-tensor scale calibration)
    value_absmax: float = 0.0
    kivi: Any = None  # a KiviLayer when the format is KIVI
    raw_keys: Any = (
        None  # [kv_heads, n, head_dim] as computed, before rounding (quantized streaming)
    )

    @property
    def count(self) -> int:
        return 0 if self.positions is None else self.positions.shape[1]

    def append(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        position: int,
        raw_key: torch.Tensor | None = None,
    ) -> None:
        """key, value [kv_heads, 1, head_dim]; raw_key: the key before the format rounded it."""
        if raw_key is not None:
            self.raw_keys = (
                raw_key if self.raw_keys is None else torch.cat([self.raw_keys, raw_key], dim=1)
            )
        heads = key.shape[0]
        self.key_absmax = max(self.key_absmax, float(key.abs().max()))
        self.value_absmax = max(self.value_absmax, float(value.abs().max()))
        column = np.full((heads, 1), position)
        if self.positions is None:
            self.keys, self.values, self.positions, self.scores = (
                key,
                value,
                column,
                np.zeros((heads, 1)),
            )
        else:
            self.keys = torch.cat([self.keys, key], dim=1)
            self.values = torch.cat([self.values, value], dim=1)
            self.positions = np.concatenate([self.positions, column], axis=1)
            self.scores = np.concatenate([self.scores, np.zeros((heads, 1))], axis=1)

    def keep(self, kept: Any) -> None:
        """kept: per-head indices [kv_heads, k], or one list for every head."""
        kept = np.asarray(kept)
        if kept.ndim == 1:
            kept = np.tile(kept, (self.positions.shape[0], 1))
        index = torch.from_numpy(kept).long()[..., None].expand(-1, -1, self.keys.shape[-1])
        self.keys = torch.gather(self.keys, 1, index)
        self.values = torch.gather(self.values, 1, index)
        if self.raw_keys is not None:
            self.raw_keys = torch.gather(self.raw_keys, 1, index)
        self.positions = np.take_along_axis(self.positions, kept, axis=1)
        self.scores = np.take_along_axis(self.scores, kept, axis=1)
        self.window_rows = []

    def record(self, received: np.ndarray, entropy: float, window: int) -> None:
        self.scores = self.scores + received
        self.entropy += entropy
        self.entropy_steps += 1
        self.window_rows = (self.window_rows + [received])[-window:]
        self.peak_tokens = max(self.peak_tokens, self.count)


def rotate(x: torch.Tensor, delta: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Rotate post-RoPE vectors x [heads, n, dim] by `delta` [heads, n] more positions
    (RoPE rotations compose: R(a) R(b) = R(a + b)); Llama's half-split layout."""
    freqs = delta.to(torch.float32)[..., None] * inv_freq.float()
    emb = torch.cat([freqs, freqs], dim=-1)
    half = x.shape[-1] // 2
    rotated_half = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * emb.cos() + rotated_half * emb.sin()


def rope_inv_freq(model: Any) -> torch.Tensor:
    """The model's RoPE frequencies, for re-rotating cached keys (StreamingLLM re-indexing);
    only plain RoPE composes as `rotate` assumes."""
    rotary = getattr(getattr(model, "model", model), "rotary_emb", None)
    if (
        rotary is None
        or getattr(model.config, "rope_parameters", {}).get("rope_type", "default") != "default"
    ):
        raise ValueError(
            "streaming re-indexes RoPE positions and needs a model with default RoPE; "
            "use streaming-abspos (original positions)"
        )
    return rotary.inv_freq


def reindexed_keys(
    cache: LayerCache, keys: torch.Tensor, step: int, inv_freq: torch.Tensor, store: Any = None
) -> torch.Tensor:
    """StreamingLLM: the token in cache slot i sits at position i and the query at n - 1.
    Only distances matter to RoPE, so keys move by (i - p_i) - (step - (n - 1)).
    `store` (quantized formats): how the cache stores a key; a moved key is then rotated from
    the key as computed (`raw_keys`) and stored once, as writing the token at its in-cache
    position would, not rotated off the rounding grid (the serving engine's sinks match)."""
    n = keys.shape[1]
    slots = torch.arange(n)[None, :]
    delta = slots - torch.from_numpy(cache.positions) + (step - (n - 1))
    if store is None or cache.raw_keys is None:
        return rotate(keys.float(), delta, inv_freq)
    moved = store(rotate(cache.raw_keys.float(), delta, inv_freq))
    return torch.where((delta != 0)[..., None], moved.float(), keys.float())
