"""Each workload's default arrival rate: the rate `kvplan bench` sends it at without --rate.

A load the bench's default setup serves (Llama-3.1-8B on one L4, the default engine and
max_model_len), so the default run compares the optimizations on a queue that does not grow:
about two thirds of the rate the weakest default optimization, contiguous-max, sustains on
that setup (its `sustainable_requests_per_s` at --rate 3, where it is overloaded), rounded
down to a round figure. Measured, per kind: system-prompt 0.22 req/s, sharegpt 0.25, alpaca
1.52, long-reasoning 0.018, rag 0.55, chat 0.34 requests (0.05 sessions/s offer 0.23),
few-shot 2.32, random 0.56. A larger model, a smaller GPU or a slower optimization
sustains less; the bench table says when a run is overloaded. No numpy here: the --rate
help reads it.
"""

from __future__ import annotations

# Requests per second (chat: sessions per second; a session sends several turns).
DEFAULT_RATES: dict[str, float] = {
    "system-prompt": 0.15,
    "sharegpt": 0.15,
    "sharegpt-stats": 0.15,  # ShareGPT's own lengths, as sharegpt's
    "alpaca": 1.0,
    "long-reasoning": 0.012,
    "rag": 0.35,
    "chat": 0.05,
    "few-shot": 1.5,
    "random": 0.35,  # vLLM's random dataset: 1,024 tokens in, 128 out
}


def default_rate(kind: str) -> float:
    """The kind's default rate (an unknown kind gets the slowest, and is refused by name
    when its requests are made; tests/test_overload.py checks every kind has its own)."""
    return DEFAULT_RATES.get(kind, min(DEFAULT_RATES.values()))


def default_rates_help() -> str:
    """'system-prompt 0.15, sharegpt 0.15, ...': the --rate help's list of defaults."""
    return ", ".join(f"{kind} {rate:g}" for kind, rate in DEFAULT_RATES.items())
