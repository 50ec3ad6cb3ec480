"""Which keys a query may see, and how its scores are shaped: one description shared by the
naive references, the vectorized torch path and both Triton kernels.

Conventions follow transformers' own masks and eager attention (masking_utils,
modeling_gemma2/gpt_oss), so a model run through kvplan reproduces the model's logits:

* sliding window W: a query at position p sees keys p - W + 1 .. p (W keys, itself included;
  `kv_idx > q_idx - sliding_window`);
* chunked local attention C (Llama-4): keys in p's chunk, C * (p // C) .. p;
* logit softcap c (Gemma-2): score = c * tanh(score / c), applied after the 1/sqrt(d) scale;
* attention sinks (gpt-oss `s_aux`): one learned logit per query head joins the softmax
  denominator and contributes no value.

Window and chunk both reduce to a lower bound on the key position, which is how the kernels
skip whole tiles outside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AttentionVariant:
    sliding_window: int | None = None
    chunk_size: int | None = None
    softcap: float | None = None
    sinks: Any = None  # torch.Tensor [num_heads] of logits, or None

    def __post_init__(self) -> None:
        for label, value in (
            ("sliding_window", self.sliding_window),
            ("chunk_size", self.chunk_size),
        ):
            if value is not None and int(value) < 1:
                raise ValueError(f"{label} must be a positive number of tokens, got {value}")
        if self.softcap is not None and not self.softcap > 0:
            raise ValueError(f"softcap must be positive, got {self.softcap}")

    @property
    def window(self) -> int:
        """The sliding window as a kernel argument (0: none)."""
        return int(self.sliding_window or 0)

    @property
    def chunk(self) -> int:
        """The chunk size as a kernel argument (0: none)."""
        return int(self.chunk_size or 0)

    def first_key(self, position: int) -> int:
        """The earliest key position a query at `position` may see."""
        lo = 0
        if self.sliding_window:
            lo = max(lo, position - self.sliding_window + 1)
        if self.chunk_size:
            lo = max(lo, position // self.chunk_size * self.chunk_size)
        return lo

    def span(self, max_len: int) -> int:
        """The most keys one query can see in a sequence of `max_len` tokens."""
        span = max_len
        for limit in (self.sliding_window, self.chunk_size):
            if limit:
                span = min(span, limit)
        return span


PLAIN = AttentionVariant()


def check_sinks(variant: AttentionVariant, num_heads: int) -> None:
    sinks = variant.sinks
    if sinks is not None and tuple(sinks.shape) != (num_heads,):
        raise ValueError(
            f"attention sinks must be one logit per query head ({num_heads}), got "
            f"{tuple(sinks.shape)}"
        )
