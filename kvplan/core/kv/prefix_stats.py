"""Prefix-cache counters and the one hit-rate formula, apart from the cache itself so the
allocator interface (base.py) can name them without importing the cache."""

from __future__ import annotations

from dataclasses import dataclass


def hit_rate(hit_tokens: int, queried_tokens: int) -> float:
    """The prefix hit rate (docs/metrics.md): prompt tokens served from cache / prompt tokens
    queried; 0 when nothing was queried. Every hit rate kvplan reports goes through here."""
    return hit_tokens / queried_tokens if queried_tokens else 0.0


@dataclass
class PrefixStats:
    """vLLM's prefix-cache counters, in tokens; preempted re-admissions counted apart."""

    queries: int = 0
    hits: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0

    @property
    def hit_rate(self) -> float:
        return hit_rate(self.hits, self.queries)
