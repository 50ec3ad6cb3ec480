"""What a real-mode bench will cost, said before it starts.

Real mode's time goes by engine steps more than by tokens: every step runs the whole model
once (its weights read, every layer's kernels launched, Python through every module), so a
decode step of ten sequences costs little more than one of a single sequence, while a
prompt's tokens are cheap each. Scaling a warm-up's seconds per token (how this was once
done) missed that: a short warm-up is mostly prompt tokens, a run mostly decode steps, and
its estimate came out several times too low.

So a run costs, per optimization: building its engine (the pool's allocation), plus for
each of its steps a fixed cost, a cost per decoding sequence and one per prompt token (the
model's part, times the optimization's own factor: quantizing, evicting, copying), plus
the engine's bookkeeping between steps. The warm-up measures each term on the loaded model
(kvplan/real/step_cost.py): a paged engine serves the run's first requests with their own
prompt tokens (cut short) and staggered output lengths, every step timed, and a fit gives
the three step terms; then each optimization's engine is built (timed) and serves two short
requests, whose steps against the fit give its factor. The run's steps themselves come from
the same scheduler and block manager replaying the run on the modeled step times (no model
runs): each optimization's prefill chunks, batch sizes, preemptions and prefix hits as the
run will have them. What a build learns from the model first (per-tensor KV scales) is
computed here too, and not again in the run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvplan import GIB, MIB
from kvplan.bench.optimizations import parse_optimization
from kvplan.workload.request import Request

if TYPE_CHECKING:
    from kvplan.bench.config import BenchConfig
    from kvplan.core.engine import Engine
    from kvplan.core.engine_factory import EngineFactory, EngineSizing, Optimization
    from kvplan.real.factory import RealEngineFactory
    from kvplan.real.step_cost import ModeledRunner, StepCost


@dataclass(frozen=True)
class RunCost:
    requests: int
    tokens_per_variant: int  # prompt + output tokens of every request
    layers: int
    weight_bytes: int
    kv_pool_bytes: int
    device: str
    step: StepCost
    estimates: dict[str, float]  # seconds per optimization: its build and its steps
    scales: dict[str, float]  # per optimization: its steps' seconds over the fitted ones
    steps: int  # the run's steps, every optimization's
    warmup_steps: int
    warmup_s: float
    utilization: float | None = (
        None  # what sized a CUDA pool (None: --kv-cache-gib or the CPU default)
    )

    @property
    def variants(self) -> int:
        return len(self.estimates)

    @property
    def total_tokens(self) -> int:
        return self.tokens_per_variant * self.variants

    @property
    def estimate_s(self) -> float:
        return sum(self.estimates.values())

    def describe(self) -> str:
        minutes = self.estimate_s / 60
        span = f"{minutes:,.0f} min" if minutes >= 2 else f"{self.estimate_s:,.0f} s"
        step = self.step
        return (
            f"real mode on {self.device}: {self.requests:,} requests x {self.variants} "
            f"optimization(s) = {self.total_tokens:,} tokens through {self.layers} layers; "
            f"weights {_size(self.weight_bytes)}, KV pool {_size(self.kv_pool_bytes)} per "
            f"optimization{self._pool_rule()}; about {span}: {self.steps:,} steps at "
            f"{_ms(step.fixed_s + step.bookkeeping_s)} + {_ms(step.decode_seq_s)} per decoding "
            f"sequence + {_ms(step.prefill_token_s)} per prompt token (timed on a "
            f"{self.warmup_steps}-step warm-up, {self.warmup_s:.1f} s{self._factors()})"
        )

    def _factors(self) -> str:
        """The optimizations whose steps took noticeably longer or shorter than the fit's."""
        apart = [
            f"{name} x{scale:.2f}" for name, scale in self.scales.items() if abs(scale - 1) > 0.1
        ]
        return f"; steps of {', '.join(apart)}" if apart else ""

    def _pool_rule(self) -> str:
        if self.utilization is None:
            return ""
        return (
            f" ({self.utilization:g} of the card less what the loaded model uses; simplified: "
            "vLLM also sets activation memory aside)"
        )


def _size(value: float) -> str:
    return f"{value / GIB:.2f} GiB" if value >= GIB / 10 else f"{value / MIB:.1f} MiB"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3g} ms"


def request_tokens(requests: list[Request]) -> int:
    """Tokens a run feeds through the model at least: every prompt, then each output token but
    the last (the prefill yields the first; preemptions recompute more)."""
    return sum(r.prompt_len + max(0, r.output_len - 1) * max(1, r.n) for r in requests)


@dataclass
class ModeledFactory:
    """The real factory's schedulers and block managers on modeled step times, for
    simulate to replay the run on (no pool tensors, no model)."""

    real: RealEngineFactory
    cost: StepCost
    scales: dict[str, float]  # per optimization: its steps' measured seconds over the fit's
    pool: tuple[float, float | None]  # the warm-up's pool: bytes, the utilization that sized it
    mode: str = "real"
    runners: list[tuple[str, ModeledRunner]] = field(default_factory=list)

    def check(self, optimization: Optimization) -> None:
        """Checked already by the real factory."""

    def build(self, optimization: Optimization) -> tuple[Engine, EngineSizing]:
        from kvplan.real.step_cost import ModeledRunner

        runner = ModeledRunner(self.cost, self.scales.get(optimization.name, 1.0))
        self.runners.append((optimization.name, runner))
        return self.real.scheduling_engine(optimization, runner, self.pool)

    def run_metrics(self, engine: Engine) -> dict[str, Any]:
        return {}


def measure_cost(
    factory: EngineFactory,
    config: BenchConfig,
    requests: list[Request],
    optimizations: list[str],
) -> RunCost:
    """Warm up on the real factory's loaded model, fit the step cost, time each
    optimization's build and factor, and replay the run's schedule on them; each
    optimization's estimate is left on the factory for its record."""
    from kvplan.bench.simulation import simulate
    from kvplan.real.factory import RealEngineFactory
    from kvplan.real.step_cost import (
        FIT_MIN_S,
        FIT_OUTPUTS,
        FIT_PROMPT_TOKENS,
        SCALE_MIN_S,
        SCALE_OUTPUTS,
        SCALE_PROMPT_TOKENS,
        engine_factor,
        fit_step_cost,
        timed_rounds,
    )

    assert isinstance(factory, RealEngineFactory)  # real mode's
    started = time.perf_counter()
    for name in optimizations:  # what a build learns from the model first, once, here
        factory.prepare(parse_optimization(name))
    engine, sizing = factory.build(parse_optimization("paged"))
    # first calls (allocations, kernel choices) are no step's cost: a request before, untimed
    samples, bookkeeping_s = timed_rounds(
        engine, requests, FIT_OUTPUTS, FIT_PROMPT_TOKENS, FIT_MIN_S, untimed_first=True
    )
    cost = fit_step_cost(samples, bookkeeping_s)
    warmup_steps = len(samples)
    del engine  # the warm-up's pool goes before the next one's
    builds: dict[str, float] = {}  # per optimization: its build and its first steps' excess
    scales: dict[str, float] = {}
    for name in optimizations:  # each optimization's build and its steps against the fit
        building = time.perf_counter()
        engine, _ = factory.build(parse_optimization(name))
        builds[name] = time.perf_counter() - building
        samples, _ = timed_rounds(engine, requests, SCALE_OUTPUTS, SCALE_PROMPT_TOKENS, SCALE_MIN_S)
        scales[name], start_s = engine_factor(cost, samples)
        builds[name] += start_s
        warmup_steps += len(samples)
        del engine
    replay = ModeledFactory(
        factory, cost, scales, (sizing.kv_pool_bytes, sizing.gpu_memory_utilization)
    )
    for name in optimizations:  # the replay's runners keep what each run cost
        for router in config.cluster.variants():
            simulate(config, requests, parse_optimization(name), router=router, factory=replay)
    estimates = {name: builds[name] + runner.seconds for name, runner in replay.runners}
    factory.estimated_wall_s = dict(estimates)
    loaded = factory.loaded
    weights = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    return RunCost(
        len(requests),
        request_tokens(requests),
        loaded.spec.num_layers,
        int(weights),
        int(sizing.kv_pool_bytes),
        loaded.device,
        cost,
        estimates,
        scales,
        sum(runner.steps for _, runner in replay.runners),
        warmup_steps,
        time.perf_counter() - started,
        sizing.gpu_memory_utilization,
    )
