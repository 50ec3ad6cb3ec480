"""The operator step model of one engine: its operators, the sources that time them, its
overhead; curves tabulated once per process for each distinct engine (a plan search builds
the same engine for many trials)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from kvplan.engines.engine_releases import SAMPLER_BYTES_PER_LOGIT
from kvplan.sim.ops import aic_source
from kvplan.sim.ops.overhead import EngineOverhead
from kvplan.sim.ops.sources import OperatorSource, RooflineSource, Sources
from kvplan.sim.ops.step import OperatorStepRunner
from kvplan.sizing.operators.shapes import model_ops
from kvplan.spec.roofline import Roofline

# A serving step samples greedily or at a temperature: it reads the bf16 logits, keeps an fp32
# copy and takes its softmax, 10 bytes per logit (the V1 engine's FlashInfer path's figure,
# kvplan.engines.engine_releases), whatever top-k / top-p path the release's profiling run takes.
SAMPLER_PATH = "flashinfer"


def sources_for(roofline: Roofline, engine: str, perf_table: Path | None) -> Sources:
    """A measured profile first, then aiconfigurator's tables where they cover the GPU and the
    engine, then the roofline, which times everything."""
    chain: list[OperatorSource] = []
    if perf_table is not None:
        from kvplan.sim.ops.profile_source import ProfileSource

        chain.append(ProfileSource.read(perf_table))
    if roofline.gpu.measured_system is not None and aic_source.available():
        chain.append(aic_source.AicSource(roofline.gpu, engine))
    chain.append(RooflineSource(roofline.gpu))
    return Sources(tuple(chain))


@lru_cache(maxsize=64)
def operator_runner(
    roofline: Roofline,
    engine: str,
    overhead: EngineOverhead,
    max_tokens: int,
    max_seqs: int,
    max_model_len: int,
    graphs: bool,
    perf_table: Path | None = None,
) -> OperatorStepRunner:
    ops = model_ops(roofline.model, roofline.tp, roofline.kv_format, roofline.weight_dtype)
    return OperatorStepRunner(
        roofline,
        ops,
        sources_for(roofline, engine, perf_table),
        overhead,
        max_tokens,
        max_seqs,
        max_model_len,
        SAMPLER_BYTES_PER_LOGIT[SAMPLER_PATH],
        graphs,
    )
