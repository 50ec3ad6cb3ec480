"""Synthetic workloads: request lengths from published distributions, arrivals from a process.

Why synthetic at all: real traces fix one arrival pattern and one length mix; a capacity
planner needs to sweep both. Every generator is deterministic in its seed: lengths are
drawn first, then arrivals, from one ``numpy.random.default_rng(seed)``, so the same seed
gives identical requests and changing only the arrival process keeps the lengths.

Length models (all lengths are integers, clipped to at least 1 token, then capped so that
prompt + output <= max_model_len by shortening the output first and then the prompt, the
way a server rejects or truncates what does not fit its context):

- ``sharegpt``: independent lognormals with means 161.31 (input) and 337.99 (output)
  tokens, the ShareGPT means reported by the vLLM paper (Kwon et al., SOSP'23, §6.1), and
  log-space dispersions sigma 1.63 (input) and 1.00 (output) measured on the real ShareGPT
  lengths in sarathi-serve's stats CSV (../shared/data/traces).
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

Arrival processes (rate in requests per second):

- ``poisson``: exponential gaps with mean 1/rate.
- ``gamma``: gamma gaps with shape k = 1/cv^2 and scale 1/(rate k): mean 1/rate and
  coefficient of variation cv (cv > 1 is burstier than Poisson, cv < 1 smoother).
- ``burst``: every request arrives at t = 0 (rate ignored), the offline-throughput case.

The first request arrives after the first gap (at 0 for burst).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvplan.workload.request import Request

WORKLOAD_KINDS: tuple[str, ...] = ("sharegpt", "alpaca", "sharegpt-stats", "long-reasoning",
                                   "system-prompt", "rag", "chat", "few-shot")
ARRIVALS: tuple[str, ...] = ("poisson", "gamma", "burst")
SHAREGPT_STATS_FILE = "sarathi_sharegpt_8k_filtered_stats_llama2_tokenizer.csv"


@dataclass(frozen=True)
class LognormalLengths:
    """Independent lognormal prompt and output lengths with target (untruncated) means."""

    prompt_mean: float
    output_mean: float
    prompt_sigma: float = 1.0
    output_sigma: float = 1.0
    source: str = ""


SHAREGPT = LognormalLengths(161.31, 337.99, 1.63, 1.00,
                            source="vLLM paper (Kwon et al., SOSP'23) ShareGPT means; sigmas from sarathi ShareGPT stats")
ALPACA = LognormalLengths(19.31, 58.45, source="vLLM paper (Kwon et al., SOSP'23), Alpaca means")
LONG_REASONING = LognormalLengths(200.0, 4000.0, 1.0, 0.5, source="kvplan assumption: short prompt, long reasoning")


# --- lengths ---------------------------------------------------------------------------

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


def lognormal_lengths(rng: np.random.Generator, mean: float, sigma: float, n: int,
                      cap: float | None = None) -> np.ndarray:
    """Draw n integer lengths >= 1 whose untruncated lognormal mean is `mean`."""
    if not mean > 0 or not sigma >= 0:
        raise ValueError(f"lognormal lengths need mean > 0 and sigma >= 0, got mean={mean}, sigma={sigma}")
    mu = solve_mu(mean, sigma, cap)
    return np.maximum(np.rint(rng.lognormal(mu, sigma, n)), 1).astype(np.int64)


def cap_lengths(prompt: np.ndarray, output: np.ndarray, max_model_len: int) -> tuple[np.ndarray, np.ndarray]:
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
        raise ValueError(f"ShareGPT stats file {path} not found; pass stats_path pointing at {SHAREGPT_STATS_FILE}")
    prompts: list[int] = []
    outputs: list[int] = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = {"num_prefill_tokens", "num_decode_tokens"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(sorted(missing))}; "
                             "expected a sarathi stats CSV with num_prefill_tokens,num_decode_tokens")
        for row in reader:
            try:
                p, o = int(row["num_prefill_tokens"]), int(row["num_decode_tokens"])
            except (TypeError, ValueError):
                raise ValueError(f"{path}:{reader.line_num}: lengths must be integers; fix or remove the row") from None
            if p < 1 or o < 1:
                raise ValueError(f"{path}:{reader.line_num}: lengths must be >= 1; fix or remove the row")
            prompts.append(p)
            outputs.append(o)
    if not prompts:
        raise ValueError(f"{path}: no length rows; pass a non-empty stats CSV")
    return np.asarray(prompts, dtype=np.int64), np.asarray(outputs, dtype=np.int64)


# --- arrivals --------------------------------------------------------------------------

def arrival_times(rng: np.random.Generator, n: int, arrival: str, rate: float | None, cv: float = 1.0) -> np.ndarray:
    """Arrival times in seconds (non-decreasing), the first one after the first gap."""
    if arrival == "burst":
        return np.zeros(n)
    assert rate is not None  # validated by _check_inputs
    if arrival == "poisson":
        gaps = rng.exponential(1.0 / rate, n)
    else:
        shape = 1.0 / (cv * cv)
        gaps = rng.gamma(shape, 1.0 / (rate * shape), n)
    return np.cumsum(gaps)


# --- validation and assembly -----------------------------------------------------------

def _check_inputs(num_requests: int, arrival: str, rate: float | None, cv: float, max_model_len: int) -> None:
    """Reject bad arguments with one-line messages that name the fix."""
    if isinstance(num_requests, bool) or not isinstance(num_requests, (int, np.integer)) or num_requests < 1:
        raise ValueError(f"num_requests must be an integer >= 1, got {num_requests!r}; ask for at least one request")
    if arrival not in ARRIVALS:
        raise ValueError(f"unknown arrival process {arrival!r}; use one of {', '.join(ARRIVALS)}")
    if arrival != "burst" and (rate is None or not (0 < rate < math.inf)):
        raise ValueError(f"{arrival} arrivals need a finite rate > 0 (requests/s), got {rate!r}; "
                         "pass e.g. rate=10, or use arrival='burst'")
    if arrival == "gamma" and not (0 < cv < math.inf):
        raise ValueError(f"gamma arrivals need a finite cv > 0, got {cv!r}; cv=1 is Poisson-like")
    if isinstance(max_model_len, bool) or not isinstance(max_model_len, (int, np.integer)) or max_model_len < 2:
        raise ValueError(f"max_model_len must be an integer >= 2 (one prompt and one output token), "
                         f"got {max_model_len!r}")


def _assemble(prompt: np.ndarray, output: np.ndarray, arrivals: np.ndarray) -> list[Request]:
    """Zip arrays into Requests; arrivals are already sorted so ids follow arrival order."""
    return [Request(request_id=i, arrival_s=float(t), prompt_len=int(p), output_len=int(o))
            for i, (t, p, o) in enumerate(zip(arrivals.tolist(), prompt.tolist(), output.tolist()))]


def lognormal_workload(model: LognormalLengths, num_requests: int, *, rate: float | None,
                       arrival: str = "poisson", cv: float = 1.0, seed: int = 0,
                       max_model_len: int = 2048) -> list[Request]:
    """Requests with lengths from `model` (see module docstring) and the given arrivals."""
    _check_inputs(num_requests, arrival, rate, cv, max_model_len)
    rng = np.random.default_rng(seed)
    cap = max_model_len - 1
    prompt = lognormal_lengths(rng, model.prompt_mean, model.prompt_sigma, num_requests, cap)
    output = lognormal_lengths(rng, model.output_mean, model.output_sigma, num_requests, cap)
    prompt, output = cap_lengths(prompt, output, max_model_len)
    return _assemble(prompt, output, arrival_times(rng, num_requests, arrival, rate, cv))


def sharegpt(num_requests: int, *, rate: float | None, arrival: str = "poisson", cv: float = 1.0,
             seed: int = 0, max_model_len: int = 2048, prompt_sigma: float = SHAREGPT.prompt_sigma,
             output_sigma: float = SHAREGPT.output_sigma) -> list[Request]:
    """ShareGPT-like: lognormal lengths with means 161.31 in / 337.99 out (vLLM paper)."""
    model = LognormalLengths(SHAREGPT.prompt_mean, SHAREGPT.output_mean, prompt_sigma, output_sigma,
                             SHAREGPT.source)
    return lognormal_workload(model, num_requests, rate=rate, arrival=arrival, cv=cv, seed=seed,
                              max_model_len=max_model_len)


def alpaca(num_requests: int, *, rate: float | None, arrival: str = "poisson", cv: float = 1.0,
           seed: int = 0, max_model_len: int = 2048, sigma: float = 1.0) -> list[Request]:
    """Alpaca-like: lognormal(sigma) lengths with means 19.31 in / 58.45 out (vLLM paper)."""
    model = LognormalLengths(ALPACA.prompt_mean, ALPACA.output_mean, sigma, sigma, ALPACA.source)
    return lognormal_workload(model, num_requests, rate=rate, arrival=arrival, cv=cv, seed=seed,
                              max_model_len=max_model_len)


def long_reasoning(num_requests: int, *, rate: float | None, arrival: str = "poisson", cv: float = 1.0,
                   seed: int = 0, max_model_len: int = 2048, prompt_sigma: float = 1.0,
                   output_sigma: float = 0.5) -> list[Request]:
    """Short prompts (mean 200) and long outputs (mean 4000), capped by max_model_len."""
    model = LognormalLengths(LONG_REASONING.prompt_mean, LONG_REASONING.output_mean, prompt_sigma,
                             output_sigma, LONG_REASONING.source)
    return lognormal_workload(model, num_requests, rate=rate, arrival=arrival, cv=cv, seed=seed,
                              max_model_len=max_model_len)


def sharegpt_stats(num_requests: int, *, stats_path: str | Path | None, rate: float | None,
                   arrival: str = "poisson", cv: float = 1.0, seed: int = 0,
                   max_model_len: int = 2048) -> list[Request]:
    """(prompt, output) rows sampled with replacement from sarathi's ShareGPT stats CSV."""
    _check_inputs(num_requests, arrival, rate, cv, max_model_len)
    if stats_path is None:
        raise ValueError(f"sharegpt-stats needs stats_path; pass the path of {SHAREGPT_STATS_FILE} "
                         "(in this project: ../shared/data/traces/)")
    prompts, outputs = load_length_stats(stats_path)
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, len(prompts), num_requests)
    prompt, output = cap_lengths(prompts[rows], outputs[rows], max_model_len)
    return _assemble(prompt, output, arrival_times(rng, num_requests, arrival, rate, cv))


def make_workload(kind: str, num_requests: int, *, rate: float | None, arrival: str = "poisson",
                  cv: float = 1.0, seed: int = 0, max_model_len: int = 2048,
                  stats_path: str | Path | None = None, system_prompt_len: int = 1024,
                  num_system_prompts: int = 1, num_documents: int = 200, doc_len: int = 1024,
                  docs_per_request: int = 1, zipf_s: float = 1.1, turns_per_session: float = 5.0,
                  think_time: float = 10.0, num_templates: int = 8, template_len: int = 512,
                  vocab_size: int = 32000) -> list[Request]:
    """Build a synthetic workload by name: the one entry point the CLI and bench use.

    kind is one of WORKLOAD_KINDS, arrival one of ARRIVALS (see the module docstring).
    Returns requests sorted by arrival with ids 0..num_requests-1; bad input raises
    ValueError with a one-line message naming the fix. The shared-prefix kinds
    (system-prompt, rag, chat, few-shot; see shared_prefix.py) carry real token ids and take
    the keyword arguments after stats_path; for chat, rate is session starts per second.
    """
    common = dict(rate=rate, arrival=arrival, cv=cv, seed=seed, max_model_len=max_model_len)
    if kind == "sharegpt":
        return sharegpt(num_requests, **common)
    if kind == "alpaca":
        return alpaca(num_requests, **common)
    if kind == "long-reasoning":
        return long_reasoning(num_requests, **common)
    if kind == "sharegpt-stats":
        return sharegpt_stats(num_requests, stats_path=stats_path, **common)
    if kind in ("system-prompt", "rag", "chat", "few-shot"):
        from kvplan.workload import shared_prefix  # imported here: shared_prefix imports this module

        common["vocab_size"] = vocab_size
        if kind == "system-prompt":
            return shared_prefix.system_prompt(num_requests, system_prompt_len=system_prompt_len,
                                               num_system_prompts=num_system_prompts, **common)
        if kind == "rag":
            return shared_prefix.rag(num_requests, num_documents=num_documents, doc_len=doc_len,
                                     docs_per_request=docs_per_request, zipf_s=zipf_s, **common)
        if kind == "chat":
            return shared_prefix.chat(num_requests, turns_per_session=turns_per_session, think_time=think_time,
                                      **common)
        return shared_prefix.few_shot(num_requests, num_templates=num_templates, template_len=template_len,
                                      zipf_s=zipf_s, **common)
    raise ValueError(f"unknown workload kind {kind!r}; use one of {', '.join(WORKLOAD_KINDS)}")
