"""Synthetic workloads: request lengths from published distributions (lengths.py), arrivals
from a process (arrivals.py).

Why synthetic at all: real traces fix one arrival pattern and one length mix; a capacity
planner needs to sweep both. Every generator is deterministic in its seed: lengths are
drawn first, then arrivals, from one ``numpy.random.default_rng(seed)``, so the same seed
gives identical requests and changing only the arrival process keeps the lengths.

Length models (lengths.py): ``sharegpt`` and ``alpaca`` (the vLLM paper's means),
``sharegpt-stats`` (pairs sampled from sarathi-serve's stats CSV) and ``long-reasoning``;
prompt + output is capped at max_model_len. Arrival processes (arrivals.py): ``poisson``,
``gamma`` (with a coefficient of variation) and ``burst``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kvplan.workload.arrivals import arrival_times, check_inputs
from kvplan.workload.lengths import (
    ALPACA,
    LONG_REASONING,
    SHAREGPT,
    SHAREGPT_STATS_FILE,
    LognormalLengths,
    cap_lengths,
    load_length_stats,
    lognormal_lengths,
)
from kvplan.workload.request import Request


def _assemble(prompt: np.ndarray, output: np.ndarray, arrivals: np.ndarray) -> list[Request]:
    """Zip arrays into Requests; arrivals are already sorted so ids follow arrival order."""
    return [
        Request(request_id=i, arrival_s=float(t), prompt_len=int(p), output_len=int(o))
        for i, (t, p, o) in enumerate(zip(arrivals.tolist(), prompt.tolist(), output.tolist()))
    ]


def lognormal_workload(
    model: LognormalLengths,
    num_requests: int,
    *,
    rate: float | None,
    arrival: str = "poisson",
    cv: float = 1.0,
    seed: int = 0,
    max_model_len: int = 2048,
) -> list[Request]:
    """Requests with lengths from `model` (see module docstring) and the given arrivals."""
    check_inputs(num_requests, arrival, rate, cv, max_model_len)
    rng = np.random.default_rng(seed)
    cap = max_model_len - 1
    prompt = lognormal_lengths(rng, model.prompt_mean, model.prompt_sigma, num_requests, cap)
    output = lognormal_lengths(rng, model.output_mean, model.output_sigma, num_requests, cap)
    prompt, output = cap_lengths(prompt, output, max_model_len)
    return _assemble(prompt, output, arrival_times(rng, num_requests, arrival, rate, cv))


def sharegpt(
    num_requests: int,
    *,
    rate: float | None,
    arrival: str = "poisson",
    cv: float = 1.0,
    seed: int = 0,
    max_model_len: int = 2048,
    prompt_sigma: float = SHAREGPT.prompt_sigma,
    output_sigma: float = SHAREGPT.output_sigma,
) -> list[Request]:
    """ShareGPT-like: lognormal lengths with means 161.31 in / 337.99 out (vLLM paper)."""
    model = LognormalLengths(
        SHAREGPT.prompt_mean, SHAREGPT.output_mean, prompt_sigma, output_sigma, SHAREGPT.source
    )
    return lognormal_workload(
        model,
        num_requests,
        rate=rate,
        arrival=arrival,
        cv=cv,
        seed=seed,
        max_model_len=max_model_len,
    )


def alpaca(
    num_requests: int,
    *,
    rate: float | None,
    arrival: str = "poisson",
    cv: float = 1.0,
    seed: int = 0,
    max_model_len: int = 2048,
    sigma: float = 1.0,
) -> list[Request]:
    """Alpaca-like: lognormal(sigma) lengths with means 19.31 in / 58.45 out (vLLM paper)."""
    model = LognormalLengths(ALPACA.prompt_mean, ALPACA.output_mean, sigma, sigma, ALPACA.source)
    return lognormal_workload(
        model,
        num_requests,
        rate=rate,
        arrival=arrival,
        cv=cv,
        seed=seed,
        max_model_len=max_model_len,
    )


def long_reasoning(
    num_requests: int,
    *,
    rate: float | None,
    arrival: str = "poisson",
    cv: float = 1.0,
    seed: int = 0,
    max_model_len: int = 2048,
    prompt_sigma: float = 1.0,
    output_sigma: float = 0.5,
) -> list[Request]:
    """Short prompts (mean 200) and long outputs (mean 4000), capped by max_model_len."""
    model = LognormalLengths(
        LONG_REASONING.prompt_mean,
        LONG_REASONING.output_mean,
        prompt_sigma,
        output_sigma,
        LONG_REASONING.source,
    )
    return lognormal_workload(
        model,
        num_requests,
        rate=rate,
        arrival=arrival,
        cv=cv,
        seed=seed,
        max_model_len=max_model_len,
    )


def sharegpt_stats(
    num_requests: int,
    *,
    stats_path: str | Path | None,
    rate: float | None,
    arrival: str = "poisson",
    cv: float = 1.0,
    seed: int = 0,
    max_model_len: int = 2048,
) -> list[Request]:
    """(prompt, output) rows sampled with replacement from sarathi's ShareGPT stats CSV."""
    check_inputs(num_requests, arrival, rate, cv, max_model_len)
    if stats_path is None:
        raise ValueError(
            f"sharegpt-stats needs stats_path; pass the path of {SHAREGPT_STATS_FILE} "
            "(a 500-row excerpt ships with kvplan: kvplan samples path sharegpt-stats)"
        )
    prompts, outputs = load_length_stats(stats_path)
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, len(prompts), num_requests)
    prompt, output = cap_lengths(prompts[rows], outputs[rows], max_model_len)
    return _assemble(prompt, output, arrival_times(rng, num_requests, arrival, rate, cv))
