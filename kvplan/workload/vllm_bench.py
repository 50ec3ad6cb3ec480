"""Request streams shaped like `vllm bench serve|throughput|latency` sends them.

Lengths:

- ``random`` follows vLLM's RandomDataset (vllm/benchmarks/datasets/random.py, current
  main): each request's input length is drawn uniformly from the integers
  [floor(L_in (1 - r)), ceil(L_in (1 + r))] and its output length from
  [max(1, floor(L_out (1 - r))), max(1, ceil(L_out (1 + r)))], r = --random-range-ratio in
  [0, 1), default 0 (fixed lengths). Older vLLM (benchmark_serving.py up to about v0.8)
  read the ratio differently - input uniform in [L_in x r, L_in] with default 1.0 - so
  pass r = 0 to reproduce a fixed-length run of either age. Simplification (named): vLLM
  subtracts the tokenizer's special-token count from L_in and re-tokenizes the prompt, so
  real prompts can be a few tokens off; kvplan uses L_in as is.
- ``sharegpt``: kvplan's ShareGPT-like lengths (kvplan.workload.synthetic.sharegpt) with
  vLLM's ShareGPT filter applied (drop prompt or output under 4 tokens, prompt over 1024
  or prompt + output over 2048, as vLLM's is_valid_sequence does) by redrawing.

Send times (`vllm bench serve --request-rate R --burstiness B`): R = inf sends every
request at t = 0; otherwise gaps are gamma(shape B, scale 1 / (R B)) (B = 1: Poisson),
accumulated, then rescaled so the last request goes out at exactly N / R, as vLLM's
get_request does. --max-concurrency is not a send time: the closed-loop client
(kvplan.sim.bench_client) holds a request back until one of the N in flight finishes.
"""

from __future__ import annotations

import math

import numpy as np

from kvplan.workload.bench_load import BenchLoad, random_length_bounds
from kvplan.workload.request import Request
from kvplan.workload.synthetic import sharegpt

SHAREGPT_MIN_LEN = 4  # vLLM's is_valid_sequence: min_len
SHAREGPT_MAX_PROMPT = 1024
SHAREGPT_MAX_TOTAL = 2048
__all__ = ["BenchLoad", "bench_requests", "random_lengths", "send_times", "sharegpt_lengths"]


def random_lengths(
    rng: np.random.Generator,
    n: int,
    input_len: int,
    output_len: int,
    range_ratio: float,
    below: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """vLLM RandomDataset's integer-uniform lengths around the requested means (below: the
    benchmark before 0.8.4, from len x ratio up to len)."""
    (in_low, in_high), (out_low, out_high) = random_length_bounds(
        input_len, output_len, range_ratio, below
    )
    prompts = np.maximum(rng.integers(in_low, in_high + 1, size=n), 1)
    outputs = rng.integers(out_low, out_high + 1, size=n)
    return prompts, outputs


def sharegpt_lengths(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """kvplan's ShareGPT-like lengths kept only where vLLM's ShareGPT filter keeps them."""
    prompts: list[int] = []
    outputs: list[int] = []
    batch, round_seed = max(64, 2 * n), seed
    while len(prompts) < n:
        for r in sharegpt(
            batch, rate=None, arrival="burst", seed=round_seed, max_model_len=1 << 20
        ):
            p, o = r.prompt_len, r.output_len
            if (
                p < SHAREGPT_MIN_LEN
                or o < SHAREGPT_MIN_LEN
                or p > SHAREGPT_MAX_PROMPT
                or p + o > SHAREGPT_MAX_TOTAL
            ):
                continue
            prompts.append(p)
            outputs.append(o)
        round_seed += 1_000_003
    return np.asarray(prompts[:n]), np.asarray(outputs[:n])


def send_times(
    rng: np.random.Generator, n: int, rate: float, burstiness: float = 1.0
) -> np.ndarray:
    """vLLM get_request's schedule: all at 0 for rate inf, else normalized gamma gaps."""
    if math.isinf(rate):
        return np.zeros(n)
    if math.isinf(burstiness):
        delays = np.full(n, 1.0 / rate)
    else:
        delays = rng.gamma(burstiness, 1.0 / (rate * burstiness), n)
    times = np.cumsum(delays)
    if times[-1] > 0:
        times *= (n / rate) / times[-1]
    return times


def bench_requests(
    load: BenchLoad, prompt_scale: float = 1.0, output_scale: float = 1.0
) -> list[Request]:
    """The requests one `vllm bench serve` run sends, with their scheduled send times.

    prompt_scale / output_scale stretch ShareGPT lengths to a measured run's reported token
    totals (its tokenizer and its model's stopping decide them, not the dataset alone).
    """
    rng = np.random.default_rng(load.seed)
    if load.dataset == "random":
        prompts, outputs = random_lengths(
            rng,
            load.num_prompts,
            load.input_len,
            load.output_len,
            load.range_ratio,
            load.range_below,
        )
    else:
        prompts, outputs = sharegpt_lengths(load.num_prompts, load.seed)
        prompts = np.maximum(np.rint(prompts * prompt_scale), 1).astype(np.int64)
        outputs = np.maximum(np.rint(outputs * output_scale), 1).astype(np.int64)
    times = send_times(rng, load.num_prompts, load.request_rate, load.burstiness)
    return [
        Request(request_id=i, arrival_s=float(t), prompt_len=int(p), output_len=int(o))
        for i, (t, p, o) in enumerate(zip(times.tolist(), prompts.tolist(), outputs.tolist()))
    ]
