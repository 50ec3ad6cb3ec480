"""Arrival times of synthetic workloads, and the checks every generator applies to its
common inputs (request count, arrival process, rate, cv, max_model_len).

Arrival processes (rate in requests per second):

- ``poisson``: exponential gaps with mean 1/rate.
- ``gamma``: gamma gaps with shape k = 1/cv^2 and scale 1/(rate k): mean 1/rate and
  coefficient of variation cv (cv > 1 is burstier than Poisson, cv < 1 smoother).
- ``burst``: every request arrives at t = 0 (rate ignored), the offline-throughput case.

The first request arrives after the first gap (at 0 for burst).
"""

from __future__ import annotations

import math

import numpy as np

ARRIVALS: tuple[str, ...] = ("poisson", "gamma", "burst")


def arrival_times(
    rng: np.random.Generator, n: int, arrival: str, rate: float | None, cv: float = 1.0
) -> np.ndarray:
    """Arrival times in seconds (non-decreasing), the first one after the first gap."""
    if arrival == "burst":
        return np.zeros(n)
    assert rate is not None  # validated by check_inputs
    if arrival == "poisson":
        gaps = rng.exponential(1.0 / rate, n)
    else:
        shape = 1.0 / (cv * cv)
        gaps = rng.gamma(shape, 1.0 / (rate * shape), n)
    return np.cumsum(gaps)


def check_inputs(
    num_requests: int, arrival: str, rate: float | None, cv: float, max_model_len: int
) -> None:
    """Reject bad arguments with one-line messages that name the fix."""
    if (
        isinstance(num_requests, bool)
        or not isinstance(num_requests, (int, np.integer))
        or num_requests < 1
    ):
        raise ValueError(
            f"num_requests must be an integer >= 1, got {num_requests!r}; ask for at least one "
            "request"
        )
    if arrival not in ARRIVALS:
        raise ValueError(f"unknown arrival process {arrival!r}; use one of {', '.join(ARRIVALS)}")
    if arrival != "burst" and (rate is None or not (0 < rate < math.inf)):
        raise ValueError(
            f"{arrival} arrivals need a finite rate > 0 (requests/s), got {rate!r}; "
            "pass e.g. rate=10, or use arrival='burst'"
        )
    if arrival == "gamma" and not (0 < cv < math.inf):
        raise ValueError(f"gamma arrivals need a finite cv > 0, got {cv!r}; cv=1 is Poisson-like")
    if (
        isinstance(max_model_len, bool)
        or not isinstance(max_model_len, (int, np.integer))
        or max_model_len < 2
    ):
        raise ValueError(
            f"max_model_len must be an integer >= 2 (one prompt and one output token), "
            f"got {max_model_len!r}"
        )
