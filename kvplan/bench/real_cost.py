"""What a real-mode bench will cost, said before it starts.

Real mode runs a transformers model on the device, so a default run on CPU can take half
an hour. Before the matrix runs, a short warm-up pushes the first two requests (outputs
capped at 8 tokens) through a throwaway paged engine on the loaded model and times it;
the estimate is that wall-clock time per token times every token the run will compute
(prompt + output of every request, per optimization). Preemptions recompute tokens, and
prefill runs faster per token than decode, so the figure is a rough guide, labelled so.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from kvplan.bench.optimizations import parse_optimization
from kvplan.core.engine_factory import EngineFactory
from kvplan.workload.request import Request

WARMUP_REQUESTS = 2
WARMUP_OUTPUT = 8
GIB = 2**30


@dataclass(frozen=True)
class RunCost:
    requests: int
    variants: int
    tokens_per_variant: int  # prompt + output tokens of every request
    layers: int
    weight_bytes: int
    kv_pool_bytes: int
    device: str
    warmup_tokens: int
    warmup_s: float
    utilization: float | None = (
        None  # what sized a CUDA pool (None: --kv-cache-gib or the CPU default)
    )

    @property
    def total_tokens(self) -> int:
        return self.tokens_per_variant * self.variants

    @property
    def estimate_s(self) -> float:
        return self.warmup_s / max(1, self.warmup_tokens) * self.total_tokens

    def describe(self) -> str:
        minutes = self.estimate_s / 60
        span = f"{minutes:,.0f} min" if minutes >= 2 else f"{self.estimate_s:,.0f} s"
        return (
            f"real mode on {self.device}: {self.requests:,} requests x {self.variants} optimization(s) = "
            f"{self.total_tokens:,} tokens through {self.layers} layers; weights {_size(self.weight_bytes)}, "
            f"KV pool {_size(self.kv_pool_bytes)} per optimization{self._pool_rule()}; about {span} "
            f"(rough: {self.warmup_tokens:,} warm-up tokens took {self.warmup_s:.2f} s)"
        )

    def _pool_rule(self) -> str:
        if self.utilization is None:
            return ""
        return (
            f" ({self.utilization:g} of the card less what the loaded model uses; simplified: vLLM also sets "
            "activation memory aside)"
        )


def _size(value: float) -> str:
    return f"{value / GIB:.2f} GiB" if value >= GIB / 10 else f"{value / 2**20:.1f} MiB"


def request_tokens(requests: list[Request]) -> int:
    """Tokens a run feeds through the model at least: every prompt, then each output token but
    the last (the prefill yields the first; preemptions recompute more)."""
    return sum(r.prompt_len + max(0, r.output_len - 1) * max(1, r.n) for r in requests)


def measure_cost(factory: EngineFactory, requests: list[Request], variants: int) -> RunCost:
    """Time a short warm-up on the factory's loaded model and scale it to the whole run."""
    sample = [_short(r) for r in requests[:WARMUP_REQUESTS]]
    engine, sizing = factory.build(parse_optimization("paged"))
    started = time.perf_counter()
    engine.run(sample)
    elapsed = time.perf_counter() - started
    loaded: Any = getattr(factory, "loaded")
    weights = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    return RunCost(
        len(requests),
        variants,
        request_tokens(requests),
        loaded.spec.num_layers,
        int(weights),
        int(getattr(engine.runner, "kv_bytes", 0)),
        loaded.device,
        request_tokens(sample),
        elapsed,
        sizing.gpu_memory_utilization,
    )


def _short(request: Request) -> Request:
    output = min(request.output_len, WARMUP_OUTPUT)
    tokens = request.output_tokens[:output] if request.output_tokens is not None else None
    return dataclasses.replace(request, arrival_s=0.0, output_len=output, output_tokens=tokens, n=1)
