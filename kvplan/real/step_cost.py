"""What one real step costs, measured: warm-up requests shaped to time steps of several
kinds, each step timed with its shape, a fit of the seconds to the terms a step's time is
made of, and a runner that replays a run on those seconds instead of the model
(bench/real_cost.py says why the terms are these).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING, Any

import numpy as np

from kvplan.core.scheduler import StepPlan
from kvplan.workload.request import Request

if TYPE_CHECKING:
    from kvplan.core.engine import Engine

# The fitted warm-up: its requests' output lengths (decode steps at 4, 3, 2 and 1
# sequences) and the prompt tokens they share at most
FIT_OUTPUTS = (4, 8, 12, 16)
FIT_PROMPT_TOKENS = 512
# Each optimization's own short warm-up, which scales the fit to the optimization's own
# overheads (quantizing, evicting, copying)
SCALE_OUTPUTS = (4, 8)
SCALE_PROMPT_TOKENS = 128
# Warm-up rounds repeat until they took this long (a round of a small model takes a
# fraction of a second, as long as one burst of other work), at most MAX_ROUNDS times
FIT_MIN_S = 1.0
SCALE_MIN_S = 0.5
MAX_ROUNDS = 5


@dataclass(frozen=True)
class StepCost:
    """Seconds of one real step, fitted on timed warm-up steps."""

    fixed_s: float  # every step: the weights read, each layer's kernels, Python per module
    decode_seq_s: float  # per sequence decoding one token (its attention, its logits row)
    prefill_token_s: float  # per prompt (or recomputed) token in the step
    bookkeeping_s: float = 0.0  # per step outside the model: scheduler, block manager, metrics

    def model_seconds(self, decoding: int, prompt_tokens: int) -> float:
        """The model's part of a step (what the runner times)."""
        return self.fixed_s + self.decode_seq_s * decoding + self.prefill_token_s * prompt_tokens


def split_tokens(plan: StepPlan) -> tuple[int, int]:
    """(sequences decoding one token, prompt tokens) of a step, as the runner packs them."""
    decoding = sum(1 for _, count in plan.scheduled if count == 1)
    return decoding, plan.num_tokens - decoding


def fit_step_cost(samples: list[tuple[int, int, float]], bookkeeping_s: float = 0.0) -> StepCost:
    """Least squares in relative error over (decoding sequences, prompt tokens, seconds) of
    timed steps (the median of each shape's), no coefficient below 0: of the fits on each
    subset of the three terms whose coefficients are all non-negative, the one with the
    smallest error."""
    if not samples:  # no request to warm up on: nothing to time, nothing to estimate
        return StepCost(0.0, 0.0, 0.0, bookkeeping_s)
    by_shape: dict[tuple[int, int], list[float]] = {}
    for decoding, prompt, seconds_taken in samples:
        by_shape.setdefault((decoding, prompt), []).append(seconds_taken)
    # one row per step shape, its median time: a step slowed by other work weighs nothing
    rows = np.array([[1.0, decoding, prompt] for decoding, prompt in by_shape])
    seconds = np.array([statistics.median(times) for times in by_shape.values()])
    weight = 1.0 / np.maximum(seconds, 1e-9)
    best: tuple[float, np.ndarray] | None = None
    for size in (3, 2, 1):
        for terms in combinations(range(3), size):
            columns = list(terms)
            solution, *_ = np.linalg.lstsq(
                rows[:, columns] * weight[:, None], seconds * weight, rcond=None
            )
            if (solution < 0).any():
                continue
            coefficients = np.zeros(3)
            coefficients[columns] = solution
            error = float(np.sum(((rows @ coefficients - seconds) * weight) ** 2))
            if best is None or error < best[0] * (1 - 1e-9):
                best = (error, coefficients)
    assert best is not None  # the fixed term alone is a weighted mean of positive times
    fixed, per_seq, per_token = (float(c) for c in best[1])
    return StepCost(fixed, per_seq, per_token, bookkeeping_s)


def engine_factor(cost: StepCost, samples: list[tuple[int, int, float]]) -> tuple[float, float]:
    """An optimization's steps against the fit: (the median of their measured over fitted
    seconds, and the seconds they took beyond that factor in all, at least 0: a new engine's
    first steps, on a fresh pool, cost more than its later ones, once per engine)."""
    modeled = [cost.model_seconds(decoding, prompt) for decoding, prompt, _ in samples]
    ratios = [s / m for (_, _, s), m in zip(samples, modeled) if m > 0]
    factor = statistics.median(ratios) if ratios else 1.0
    excess = sum(s for _, _, s in samples) - factor * sum(modeled)
    return factor, max(0.0, excess)


def warmup_requests(
    requests: list[Request],
    outputs: tuple[int, ...],
    prompt_tokens: int,
    max_model_len: int,
    at: float = 0.0,
    first_id: int | None = None,
) -> list[Request]:
    """The run's first requests as warm-up requests: their own prompts (ids included: the
    runner's token path) cut to share `prompt_tokens`, and `outputs` output tokens each
    whatever they asked (the warm-up times step shapes, not the requests); the first half
    arrives `at`, the second just after, so the first step prefills alone and the next
    mixes prefill and decode. first_id: numbered from it (an engine that served them)."""
    sample = requests[: len(outputs)]
    share = max(1, prompt_tokens // max(1, len(sample)))
    on_time = len(sample) - len(sample) // 2
    return [
        shortened(
            request,
            max(1, min(request.prompt_len, share, max_model_len - output)),
            output,
            arrival_s=at if index < on_time else at + 1e-9,
            request_id=request.request_id if first_id is None else first_id + index,
        )
        for index, (request, output) in enumerate(zip(sample, outputs))
    ]


def timed_rounds(
    engine: Engine,
    requests: list[Request],
    outputs: tuple[int, ...],
    prompt_tokens: int,
    min_s: float,
    untimed_first: bool = False,
) -> tuple[list[tuple[int, int, float]], float]:
    """Warm-up rounds (warmup_requests) on the engine until they took `min_s` or
    MAX_ROUNDS rounds, so that a burst of other work on the machine weighs on one round of
    several: (every step's shape and seconds, seconds per step outside the runner).
    untimed_first: one short request first, untimed (the model's first calls)."""
    next_id = max((r.request_id for r in requests), default=-1) + 1  # ids the run leaves free
    if untimed_first and requests:
        engine.run([shortened(requests[0], 1, 2, request_id=next_id, arrival_s=engine.now)])
        next_id += 1
    recorder = StepRecorder(engine.runner)
    engine.runner = recorder
    started = time.perf_counter()
    for _ in range(MAX_ROUNDS):
        engine.run(
            warmup_requests(
                requests, outputs, prompt_tokens, engine.max_model_len, engine.now, next_id
            )
        )
        next_id += len(outputs)
        if time.perf_counter() - started >= min_s:
            break
    engine.runner = recorder.runner
    outside = time.perf_counter() - started - sum(s for _, _, s in recorder.samples)
    return recorder.samples, max(0.0, outside) / max(1, len(recorder.samples))


def shortened(request: Request, prompt: int, output: int, **changes: Any) -> Request:
    """The request's first `prompt` prompt tokens, `output` output tokens, one sample."""
    tokens = request.prompt_tokens
    return dataclasses.replace(
        request,
        prompt_len=prompt,
        prompt_tokens=tokens[:prompt] if tokens is not None else None,
        output_len=output,
        output_tokens=None,
        block_hashes=None,
        hash_block_tokens=0,
        transferred_tokens=0,
        n=1,
        **changes,
    )


class StepRecorder:
    """A warm-up's runner: the real runner's steps, each timed with its shape."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.samples: list[tuple[int, int, float]] = []  # (decoding, prompt tokens, seconds)
        self.mode = runner.mode

    def step_time(self, plan: StepPlan) -> float:
        seconds = float(self.runner.step_time(plan))
        self.samples.append((*split_tokens(plan), seconds))
        return seconds


class ModeledRunner:
    """A runner that computes nothing: each step takes the fitted seconds, the model's part
    scaled by the optimization's measured factor."""

    mode = "real"

    def __init__(self, cost: StepCost, scale: float = 1.0) -> None:
        self.cost = cost
        self.scale = scale
        self.seconds = 0.0
        self.steps = 0

    def step_time(self, plan: StepPlan) -> float:
        model = self.cost.model_seconds(*split_tokens(plan))
        seconds = model * self.scale + self.cost.bookkeeping_s + plan.transfer_s
        self.steps += 1
        self.seconds += seconds
        return seconds
