"""The engine's own time per step, what no operator table holds, by engine era.

Each step the engine's CPU schedules, prepares inputs, launches the forward pass and turns
the sampled tokens into outputs: a fixed part and a part per scheduled sequence. It adds to
the GPU's time unless the engine overlaps the two:

- vLLM's async scheduling, the default on GPUs from 0.14 (its config/vllm.py), schedules
  step N + 1 while step N runs;
- SGLang's overlap scheduler, the default from 0.4.0 (its "zero-overhead batch scheduler"),
  does the same;

so there a step takes the longer of the two. Under vLLM V0's multi-step scheduling
(--num-scheduler-steps N) one scheduling decision serves N steps, so only the steps the
scheduler decided pay it (vLLM RFC #6854).

An era is the span of releases that share these costs: vLLM V0 (before 0.8), V1 (0.8 to
0.13), V1 with async scheduling (0.14 on), SGLang before and after the overlap scheduler. An
era whose kernels predate the measured tables (vLLM V0, SGLang before 0.4) also gets a factor
on the GPU time: its attention, MoE and FP8 paths were slower than the releases the tables
were measured on. The figures are fitted per era on published runs (fit.py), the only fitted
part of the step model; V1 with async scheduling has no published run of its own and takes
V1's CPU time, overlapped.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from kvplan.engines.serving_engine import (
    ServingEngine,
    SGLangEngine,
    VllmV0Engine,
    VllmV1Engine,
    serving_engine,
)
from kvplan.engines.versions import parse_version


@dataclass(frozen=True)
class Era:
    key: str
    overlapped: bool  # the engine's CPU time hides behind the GPU's
    predates_tables: bool  # kernels older than the measured tables: an era factor is fitted
    fitted_as: str  # the era whose runs fit its overheads (an era without runs borrows)


ERAS = {
    era.key: era
    for era in (
        Era("vllm-v0", False, True, "vllm-v0"),
        Era("vllm-v1", False, False, "vllm-v1"),
        Era("vllm-v1-async", True, False, "vllm-v1"),
        Era("sglang-sync", False, True, "sglang-sync"),
        Era("sglang", True, False, "sglang"),
    )
}


# each engine's eras: (without, with) the CPU's scheduling overlapped
ERA_KEYS: dict[type[ServingEngine], tuple[str, str]] = {
    VllmV0Engine: ("vllm-v0", "vllm-v0"),
    VllmV1Engine: ("vllm-v1", "vllm-v1-async"),
    SGLangEngine: ("sglang-sync", "sglang"),
}


def engine_era(engine: str | None, version: str | None) -> Era:
    """The era of an engine and release (no release: the newest)."""
    served_by = serving_engine(engine, version)
    release = parse_version(version)
    unoverlapped, overlapped = ERA_KEYS[type(served_by)]
    return ERAS[overlapped if served_by.overlaps_scheduling(release) else unoverlapped]


@dataclass(frozen=True)
class EngineOverhead:
    base_s: float = 0.0
    per_seq_s: float = 0.0
    overlapped: bool = False
    gpu_factor: float = 1.0  # the era's kernels against the measured tables'
    source: str = "none"

    def describe(self) -> str:
        """'0.63 ms + 103.2 us per sequence, overlapped (fit on 227 runs)'."""
        text = f"{self.base_s * 1e3:.2f} ms + {self.per_seq_s * 1e6:.1f} us per sequence"
        if self.overlapped:
            text += ", overlapped with the GPU"
        if self.gpu_factor != 1.0:
            text += f", GPU time x {self.gpu_factor:.2f}"
        return f"{text} ({self.source})"

    def cpu(self, sequences: int, decision: bool = True) -> float:
        return (self.base_s + self.per_seq_s * sequences) if decision else 0.0

    def step(self, gpu_s: float, sequences: int, decision: bool = True) -> float:
        gpu, cpu = gpu_s * self.gpu_factor, self.cpu(sequences, decision)
        return max(gpu, cpu) if self.overlapped else gpu + cpu

    def steps(self, gpu_s: Any, sequences: Any, decisions: Any) -> np.ndarray:
        """step() over arrays of many steps (a replay's recording)."""
        gpu = np.asarray(gpu_s) * self.gpu_factor
        cpu = (self.base_s + self.per_seq_s * np.asarray(sequences)) * np.asarray(decisions)
        return np.maximum(gpu, cpu) if self.overlapped else gpu + cpu

    @classmethod
    def of(cls, factors: dict[str, float], era: Era, source: str = "fit") -> EngineOverhead:
        """The overhead of `era` at fitted factors {base_s, per_seq_s[, gpu_factor]}."""
        return cls(factors["base_s"], factors["per_seq_s"], era.overlapped,
                   factors.get("gpu_factor", 1.0), source)  # fmt: skip


def for_era(overheads: dict[str, EngineOverhead], era: Era) -> EngineOverhead:
    """The overhead a run of `era` is timed with: the fit of the era it borrows from,
    overlapped as `era` is; none, so named, where nothing was fitted."""
    fitted = overheads.get(era.fitted_as)
    if fitted is None:
        return EngineOverhead(overlapped=era.overlapped, source=f"none fitted for {era.key}")
    return replace(fitted, overlapped=era.overlapped)
