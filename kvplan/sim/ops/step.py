"""A step's time from its operators (shapes.py), each timed by a source (sources.py), plus the
engine's own time per step (overhead.py).

    GPU time = tokens(T) + head(S) + sum over attention kinds of decode(D, mean context)
               + sum over prefill chunks and attention kinds of prefill(new, before)

- tokens(T): every token-major operator at the step's T tokens: the GEMMs of every layer, the
  routed experts, the TP all-reduces, the elementwise traffic and the embedding. A vLLM V1
  step of at most 512 tokens runs a CUDA graph captured at the next capture size (1, 2, 4,
  then every 8: vLLM's cudagraph_capture_sizes), so it pays for the padded size.
- head(S): the LM head and the sampler over the S sequences that sample; the sampler reads
  each row of logits at the bytes per logit of the release's top-k / top-p path
  (kvplan.engines.engine_releases.SAMPLER_BYTES_PER_LOGIT).
- decode: the D decodes of the step at their mean context (a window's reads are capped at
  the mean, a named simplification); prefill: each chunk at its own (new, before).

Each curve is tabulated once per engine on a grid (exact up to 16, then geometric) and read by
linear interpolation, in log space for the two-dimensional attention grids, so a step costs a
few array lookups whatever the source.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import numpy as np

from kvplan.core.scheduler import StepPlan
from kvplan.sim.ops.overhead import EngineOverhead
from kvplan.sim.ops.sources import Sources
from kvplan.sim.runner import SimulatedRunner
from kvplan.sizing.operators.attention import AttentionOp
from kvplan.sizing.operators.shapes import ModelOps
from kvplan.spec.roofline import Roofline

CAPTURE_LIMIT = 512  # vLLM's largest default CUDA graph capture size


class StepCosts(NamedTuple):
    """What a replay keeps of one step (kvplan.fit.replay): its GPU time and what the
    engine's overhead reads, so other overheads re-time it without simulating again. A named
    tuple: the simulator builds one per step."""

    gpu_s: float
    sequences: int
    decisions: float  # 1 on a step the scheduler decided, 0 inside a V0 multi-step run


COST_FIELDS = StepCosts._fields  # the order a recorded step's row keeps them in


def capture_size(tokens: int) -> int:
    """The CUDA graph a step of `tokens` tokens replays: 1, 2, 4, then multiples of 8."""
    if tokens <= 2:
        return tokens
    if tokens <= 4:
        return 4
    return -(-tokens // 8) * 8


def grid(top: int, points: int = 40) -> np.ndarray:
    """1 .. 16 exactly, then geometric up to `top` (inclusive)."""
    top = max(1, top)
    exact = np.arange(1, min(top, 16) + 1)
    if top <= 16:
        return exact.astype(float)
    geometric = np.geomspace(16, top, points)
    return np.unique(np.concatenate([exact, np.round(geometric)])).astype(float)


class Grid2D:
    """f(a, b) tabulated on two grids, read by bilinear interpolation in log space."""

    def __init__(self, a: np.ndarray, b: np.ndarray, f: Callable[[int, int], float]) -> None:
        # plain floats and bisect: a step reads a few points, and numpy's per-call overhead
        # would dominate a simulation of hundreds of thousands of steps
        self.log_a = [math.log(x) for x in a]
        self.log_b = [math.log(y) for y in b]
        self.values = [[float(f(int(x), int(y))) for y in b] for x in a]

    def __call__(self, a: float, b: float) -> float:
        la, lb = math.log(max(a, 1.0)), math.log(max(b, 1.0))
        log_a, log_b = self.log_a, self.log_b
        i = min(max(bisect.bisect_left(log_a, la) - 1, 0), len(log_a) - 2)
        j = min(max(bisect.bisect_left(log_b, lb) - 1, 0), len(log_b) - 2)
        ta = (la - log_a[i]) / (log_a[i + 1] - log_a[i])
        tb = (lb - log_b[j]) / (log_b[j + 1] - log_b[j])
        row, above = self.values[i], self.values[i + 1]
        low = row[j] + (row[j + 1] - row[j]) * tb
        high = above[j] + (above[j + 1] - above[j]) * tb
        return low + (high - low) * ta


class Curve:
    """f(x) tabulated on a grid, read by linear interpolation, each integer x once."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = x, y
        self.read: dict[int, float] = {}

    def __call__(self, x: int) -> float:
        value = self.read.get(x)
        if value is None:
            value = self.read[x] = float(np.interp(x, self.x, self.y))
        return value


def _decode(ops: tuple[AttentionOp, ...], sources: Sources, batch: int, context: int) -> float:
    return sum(sources.decode_attention(op, batch, context) for op in ops)


def _prefill(
    ops: tuple[AttentionOp, ...], sources: Sources, new: int, before_plus_one: int
) -> float:
    return sum(sources.prefill_attention(op, new, before_plus_one - 1) for op in ops)


class OperatorStepRunner(SimulatedRunner):
    """The operator step model behind `--step-model fitted` (the same StepPlan interface)."""

    def __init__(
        self,
        roofline: Roofline,
        ops: ModelOps,
        sources: Sources,
        overhead: EngineOverhead,
        max_tokens: int,
        max_seqs: int,
        max_model_len: int,
        sampler_bytes_per_logit: float,
        graphs: bool,
    ) -> None:
        super().__init__(roofline, None)
        self.ops, self.sources, self.overhead, self.graphs = ops, sources, overhead, graphs
        self.token_grid = grid(max(max_tokens, CAPTURE_LIMIT))
        self.token_curve = np.array([self._token_ops(int(t)) for t in self.token_grid])
        self.tokens = Curve(self.token_grid, self.token_curve)
        self.seq_grid = grid(max_seqs)
        # the logits are gathered whole before sampling: the sampler reads the full vocabulary
        logits = ops.vocab_per_gpu * ops.tp * sampler_bytes_per_logit
        self.head_curve = np.array(
            [sources.gemm(ops.lm_head, int(s)) + sources.memory(s * logits) for s in self.seq_grid]
        )
        self.head = Curve(self.seq_grid, self.head_curve)
        contexts = grid(max_model_len, 24)
        # every attention group's operator summed on one grid: one lookup a step
        self.decode = Grid2D(self.seq_grid, contexts, partial(_decode, ops.attention, sources))
        # the second axis is the tokens before the chunk plus one (a first chunk has none)
        self.prefill = Grid2D(
            grid(max_tokens, 16),
            grid(max_model_len + 1, 16),
            partial(_prefill, ops.attention, sources),
        )

    def describe(self) -> str:
        """Which sources timed the operators, and the engine overhead, in words."""
        return (
            f"operators by {self.sources.describe()}; engine time per step "
            f"{self.overhead.describe()}"
        )

    def _token_ops(self, tokens: int) -> float:
        ops, sources = self.ops, self.sources
        seconds = sum(sources.gemm(g, tokens) * g.per_step for g in ops.gemms)
        if ops.experts is not None:
            seconds += sources.experts(ops.experts, tokens) * ops.experts.per_step
        if ops.all_reduces_per_step:
            seconds += sources.all_reduce(ops.hidden, ops.tp, tokens) * ops.all_reduces_per_step
        seconds += sum(
            sources.memory(tokens * e.bytes_per_token) * e.per_step for e in ops.elementwise
        )
        return seconds + sources.memory(tokens * ops.embedding_bytes_per_token)

    def gpu_time(self, plan: StepPlan) -> float:
        tokens = plan.num_tokens
        if self.graphs and tokens <= CAPTURE_LIMIT:
            tokens = capture_size(tokens)
        seconds = self.tokens(tokens)
        if plan.samples:
            seconds += self.head(plan.samples)
        if plan.decodes:
            seconds += self.decode(plan.decodes, plan.decode_pairs / plan.decodes)
        for new, before in plan.prefill_chunks:
            seconds += self.prefill(new, before + 1)
        return seconds

    def costs(self, plan: StepPlan) -> StepCosts:
        """The step as a calibration replay records it: its GPU time and what the engine's
        overhead reads (kvplan.fit.overhead_fit re-times it under other overheads)."""
        return StepCosts(self.gpu_time(plan), len(plan.scheduled), 1.0 if plan.decision else 0.0)

    def step_time_from(self, costs: StepCosts) -> float:
        return self.overhead.step(costs.gpu_s, costs.sequences, bool(costs.decisions))

    def step_time(self, plan: StepPlan) -> float:
        seconds = self.overhead.step(self.gpu_time(plan), len(plan.scheduled), plan.decision)
        swapped = plan.swapped_in_slots + plan.swapped_out_slots
        if swapped:
            seconds += swapped * self.slot_bytes / self.host_link
        return seconds + plan.transfer_s
