"""Checks of the shared-prefix generators' settings: each failure is one ValueError naming the
setting, the value and a fix."""

from __future__ import annotations

import math

import numpy as np

from kvplan.workload.arrivals import check_inputs
from kvplan.workload.prompt_draws import DRAWN_TOKENS_MAX, FIRST_TOKEN_ID


def check_int(name: str, value: object, low: int, fix: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}; {fix}")


def check_real(
    name: str, value: object, fix: str, *, low: float = 0.0, allow_low: bool = False
) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not math.isfinite(value)
        or not (value >= low if allow_low else value > low)
    ):
        sign = ">=" if allow_low else ">"
        raise ValueError(f"{name} must be a finite number {sign} {low}, got {value!r}; {fix}")


def check_common(
    num_requests: int,
    arrival: str,
    rate: float | None,
    cv: float,
    max_model_len: int,
    vocab_size: int,
    suffix: tuple[float, float],
    output: tuple[float, float],
) -> None:
    """synthetic.py's checks plus the vocabulary and the (mean, sigma) of the unique parts."""
    check_inputs(num_requests, arrival, rate, cv, max_model_len)
    check_int("vocab_size", vocab_size, FIRST_TOKEN_ID + 1, "ids start at 3, so use e.g. 32000")
    for name, (mean, sigma) in (("user/query", suffix), ("output", output)):
        check_real(f"{name} mean length", mean, "pass a mean length in tokens, e.g. 64")
        check_real(f"{name} sigma", sigma, "use e.g. 1.0 (0 gives fixed lengths)", allow_low=True)


def check_stored(
    count_name: str, count: int, size_name: str, size: int, unit: str = "tokens"
) -> None:
    """A store of `count` x `size` `unit` (shared prefixes of `size` tokens, or `size`
    documents chosen per request) refused before it is allocated when it exceeds what one
    workload holds in memory, naming both settings."""
    total = int(count) * int(size)
    if total > DRAWN_TOKENS_MAX:
        raise ValueError(
            f"{count_name} {count:,} x {size_name} {size:,} = {total:,} {unit}, more than the "
            f"{DRAWN_TOKENS_MAX:,} one workload holds in memory; lower {count_name} or {size_name}"
        )
