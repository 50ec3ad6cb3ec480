"""The draws behind the shared-prefix workloads: token ids as shared Python ints, lognormal
lengths, Zipf popularity, distinct choices per request, and requests built as chosen prefixes
plus unique suffixes (shared_prefix.py's generators call these in a fixed order per seed).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, islice

import numpy as np

from kvplan.workload.arrivals import arrival_times
from kvplan.workload.lengths import cap_lengths, solve_mu
from kvplan.workload.request import Request

FIRST_TOKEN_ID = 3  # ids 0..2 are left for special tokens
# Token ids one draw may make: each costs ~32 bytes at its peak (numpy ids, the list, the
# tuple), so 2^27 ids need ~4 GiB; a larger workload runs out of memory before it runs
DRAWN_TOKENS_MAX = 2**27


class TokenDrawer:
    """Draws token ids as shared Python ints, split into one tuple per requested length."""

    def __init__(self, rng: np.random.Generator, vocab_size: int) -> None:
        self.rng = rng
        self.vocab_size = vocab_size
        self.ints = np.arange(vocab_size).astype(
            object
        )  # one int object per id, shared by every tuple

    def draw(self, lengths: Sequence[int] | np.ndarray) -> list[tuple[int, ...]]:
        lengths = np.asarray(lengths, dtype=np.int64)
        total = int(lengths.sum())
        if total > DRAWN_TOKENS_MAX:  # refused before the ids are allocated
            raise ValueError(
                f"the workload's prompts and outputs would hold {total:,} token ids, more than "
                f"the {DRAWN_TOKENS_MAX:,} one workload holds in memory; lower num_requests "
                "or the lengths (max_model_len)"
            )
        ids = self.rng.integers(FIRST_TOKEN_ID, self.vocab_size, total)
        flat = tuple(self.ints[ids].tolist())
        ends = np.cumsum(lengths).tolist()
        return [flat[start:end] for start, end in zip([0] + ends[:-1], ends)]


def lognormal_lengths(
    rng: np.random.Generator, mu: float, sigma: float, n: int, cap: int
) -> np.ndarray:
    """n integer lengths in [1, cap] from lognormal(mu, sigma) (mu from solve_mu, solved once)."""
    return np.clip(np.rint(rng.lognormal(mu, sigma, n)), 1, cap).astype(np.int64)


def zipf_probabilities(n: int, s: float) -> np.ndarray:
    """P(rank r) = r^-s / H(n, s) for ranks 1..n (item i has rank i + 1)."""
    weights = np.arange(1, n + 1, dtype=np.float64) ** -s
    return weights / weights.sum()


def choose_distinct(rng: np.random.Generator, p: np.ndarray, n: int, k: int) -> np.ndarray:
    """n rows of k distinct indices drawn with probabilities p, in draw order (Gumbel-top-k).

    Adding Gumbel noise to log p and taking the k largest is exactly sequential sampling
    without replacement; done in row chunks so memory stays bounded for large corpora.
    """
    if k == 1:  # plain categorical draws: much cheaper than noise over the whole corpus
        return rng.choice(len(p), size=(n, 1), p=p)
    out = np.empty((n, k), dtype=np.int64)
    log_p = np.log(p)
    chunk = max(1, 4_000_000 // len(p))
    for start in range(0, n, chunk):
        keys = log_p + rng.gumbel(size=(min(chunk, n - start), len(p)))
        top = np.argpartition(-keys, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(keys, top, axis=1), axis=1, kind="stable")
        out[start : start + len(keys)] = np.take_along_axis(top, order, axis=1)
    return out


def prefixed_requests(
    rng: np.random.Generator,
    tokens: TokenDrawer,
    prefixes: list[tuple[int, ...]],
    choice: np.ndarray,
    suffix: tuple[float, float],
    output: tuple[float, float],
    *,
    rate: float | None,
    arrival: str,
    cv: float,
    max_model_len: int,
) -> list[Request]:
    """Requests = chosen prefixes (rows of `choice`) + a unique suffix; (mean, sigma) lengths."""
    n = len(choice)
    prefix_len = np.array([len(p) for p in prefixes], dtype=np.int64)[choice].sum(axis=1)
    room = np.maximum(max_model_len - 1 - prefix_len, 1)
    suffix_len = np.minimum(
        lognormal_lengths(
            rng, solve_mu(suffix[0], suffix[1], float(room.max())), suffix[1], n, int(room.max())
        ),
        room,
    )
    cap = max_model_len - 1
    output_len = lognormal_lengths(rng, solve_mu(output[0], output[1], cap), output[1], n, cap)
    prompt_len, output_len = cap_lengths(prefix_len + suffix_len, output_len, max_model_len)
    suffix_tokens = tokens.draw(np.maximum(prompt_len - prefix_len, 0))
    output_tokens = tokens.draw(output_len)
    arrivals = arrival_times(rng, n, arrival, rate, cv)
    requests = []
    for i, (row, length) in enumerate(zip(choice.tolist(), prompt_len.tolist())):
        # several prefixes: only the first `length` of their tokens (a long concatenation
        # would be built only to be cut)
        head = (
            prefixes[row[0]]
            if len(row) == 1
            else tuple(islice(chain.from_iterable(prefixes[j] for j in row), length))
        )
        prompt = head + suffix_tokens[i] if len(head) < length else head[:length]
        requests.append(
            Request(
                request_id=i,
                arrival_s=float(arrivals[i]),
                prompt_len=length,
                output_len=int(output_len[i]),
                prompt_tokens=prompt,
                output_tokens=output_tokens[i],
            )
        )
    return requests
