"""Request lengths for the synthetic workloads: published length distributions, the
lognormal mean solved under a context cap, the joint prompt + output cap, and sarathi's
ShareGPT stats CSV.

Length models (all lengths are integers, clipped to at least 1 token, then capped so that
prompt + output <= max_model_len by shortening the output first and then the prompt, the
way a server rejects or truncates what does not fit its context):

- ``sharegpt``: independent lognormals with means 161.31 (input) and 337.99 (output)
  tokens, the ShareGPT means reported by the vLLM paper (Kwon et al., SOSP'23, §6.1), and
  log-space dispersions sigma 1.63 (input) and 1.00 (output) measured on the real ShareGPT
  lengths in sarathi-serve's stats CSV (microsoft/sarathi-serve, data/processed_traces/).
- ``alpaca``: the same scheme with the paper's Alpaca means, 19.31 in / 58.45 out.
- ``sharegpt-stats``: (prompt, output) pairs sampled jointly, with replacement, from the
  rows of sarathi-serve's ShareGPT stats CSV (``num_prefill_tokens``,
  ``num_decode_tokens``), so the real correlation between the two is kept.
- ``long-reasoning``: short prompts (lognormal, mean 200, sigma 1.0) and thousands of
  output tokens (lognormal, mean 4000, sigma 0.5: median ~3,500), as reasoning models
  produce; at the default max_model_len of 2048 the cap dominates, so raise it.

A lognormal with parameters (mu, sigma) has mean exp(mu + sigma^2 / 2). mu is solved so
that the mean *after capping each length at max_model_len - 1* equals the target
(E[min(X, c)] has a closed form), so heavy tails cut by a short context still give the
published means; the joint prompt + output cap then trims a little more.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SHAREGPT_STATS_FILE = "sarathi_sharegpt_8k_filtered_stats_llama2_tokenizer.csv"


@dataclass(frozen=True)
class LognormalLengths:
    """Independent lognormal prompt and output lengths with target (untruncated) means."""

    prompt_mean: float
    output_mean: float
    prompt_sigma: float = 1.0
    output_sigma: float = 1.0
    source: str = ""


SHAREGPT = LognormalLengths(
    161.31,
    337.99,
    1.63,
    1.00,
    source="vLLM paper (Kwon et al., SOSP'23) ShareGPT means; sigmas from sarathi ShareGPT stats",
)
ALPACA = LognormalLengths(19.31, 58.45, source="vLLM paper (Kwon et al., SOSP'23), Alpaca means")
LONG_REASONING = LognormalLengths(
    200.0, 4000.0, 1.0, 0.5, source="kvplan assumption: short prompt, long reasoning"
)


def _capped_mean(mu: float, sigma: float, cap: float) -> float:
    """E[min(X, cap)] for X ~ lognormal(mu, sigma)."""
    if sigma == 0:
        return min(math.exp(mu), cap)
    phi = lambda z: 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))  # noqa: E731
    log_cap = math.log(cap)
    below = math.exp(mu + sigma * sigma / 2.0) * phi((log_cap - mu - sigma * sigma) / sigma)
    return below + cap * (1.0 - phi((log_cap - mu) / sigma))


def solve_mu(mean: float, sigma: float, cap: float | None) -> float:
    """mu whose lognormal, capped at `cap`, has the target mean (bisection; monotone in mu)."""
    mu = math.log(mean) - sigma * sigma / 2.0
    if cap is None or cap <= mean:
        return mu
    low, high = mu - 10.0, math.log(cap) + 10.0
    for _ in range(200):
        mid = (low + high) / 2.0
        low, high = (mid, high) if _capped_mean(mid, sigma, cap) < mean else (low, mid)
    return (low + high) / 2.0


def lognormal_lengths(
    rng: np.random.Generator, mean: float, sigma: float, n: int, cap: float | None = None
) -> np.ndarray:
    """Draw n integer lengths >= 1 whose untruncated lognormal mean is `mean`."""
    if not mean > 0 or not sigma >= 0:
        raise ValueError(
            f"lognormal lengths need mean > 0 and sigma >= 0, got mean={mean}, sigma={sigma}"
        )
    mu = solve_mu(mean, sigma, cap)
    return np.maximum(np.rint(rng.lognormal(mu, sigma, n)), 1).astype(np.int64)


def cap_lengths(
    prompt: np.ndarray, output: np.ndarray, max_model_len: int
) -> tuple[np.ndarray, np.ndarray]:
    """Make prompt + output <= max_model_len: shorten the output first (to >= 1), then the prompt.

    Output goes first because a server keeps the prompt it was sent and stops generating
    at the context limit; only a prompt that alone overflows the context is cut.
    """
    output = np.clip(output, 1, np.maximum(max_model_len - prompt, 1))
    prompt = np.clip(prompt, 1, max_model_len - output)
    return prompt, output


def load_length_stats(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read (prompt, output) length rows from a sarathi-style stats CSV.

    Only ``num_prefill_tokens`` and ``num_decode_tokens`` are used; rows are kept as pairs
    so sampling preserves the prompt/output correlation of the real conversations.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(
            f"ShareGPT stats file {path} not found; pass stats_path pointing at "
            f"{SHAREGPT_STATS_FILE} "
            "(or at the excerpt that `kvplan samples path sharegpt-stats` prints)"
        )
    prompts: list[int] = []
    outputs: list[int] = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = {"num_prefill_tokens", "num_decode_tokens"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(
                f"{path}: missing column(s) {', '.join(sorted(missing))}; "
                "expected a sarathi stats CSV with num_prefill_tokens,num_decode_tokens"
            )
        for row in reader:
            try:
                p, o = int(row["num_prefill_tokens"]), int(row["num_decode_tokens"])
            except (TypeError, ValueError):
                raise ValueError(
                    f"{path}:{reader.line_num}: lengths must be integers; fix or remove the row"
                ) from None
            if p < 1 or o < 1:
                raise ValueError(
                    f"{path}:{reader.line_num}: lengths must be >= 1; fix or remove the row"
                )
            prompts.append(p)
            outputs.append(o)
    if not prompts:
        raise ValueError(f"{path}: no length rows; pass a non-empty stats CSV")
    return np.asarray(prompts, dtype=np.int64), np.asarray(outputs, dtype=np.int64)
