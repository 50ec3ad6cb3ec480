"""Operator times from NVIDIA's aiconfigurator (`aiconfigurator-core`, Apache-2.0, the optional
extra `kvplan[perf]`): kernels measured on real systems, per system and per serving backend
version, read through its public op-list interface (EngineHandle.evaluate_ops_json).

Its tables cover GEMMs (bf16, fp8, fp8 block, nvfp4 on Blackwell), prefill and decode
attention for full and sliding attention, MoE at the shapes of the models it profiled, and
vLLM's custom all-reduce; what they do not cover (a format, a shape, MLA under vLLM, linear
attention) it refuses, and this source answers None so the next one (the roofline) times it.
Latencies are per layer in milliseconds; heads are per GPU. The tables are of one backend
version each (vLLM 0.24.0, SGLang 0.5.14 on most systems): the output names which.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from typing import Any

from kvplan.engines.serving_engine import serving_engine
from kvplan.sizing.operators.attention import (
    AttentionOp,
    FullAttention,
    MlaAttention,
    SlidingAttention,
)
from kvplan.sizing.operators.shapes import Experts, Gemm
from kvplan.spec import GpuSpec

PACKAGE = "aiconfigurator_core"
# kvplan's weight formats as aiconfigurator's GEMM and MoE quant modes
GEMM_MODES = {"bf16": "bfloat16", "fp8": "fp8", "fp8-block": "fp8_block", "nvfp4": "nvfp4",
              "int4-wo": "int4_wo", "int8": "int8_wo"}  # fmt: skip
MOE_MODES = {"bf16": "bfloat16", "fp8": "fp8", "fp8-block": "fp8_block", "nvfp4": "nvfp4",
             "int4-wo": "int4_wo", "mxfp4-wo": "w4a16_mxfp4"}  # fmt: skip
# the routing the tables were measured under for a model that does not say (vLLM's and
# aiconfigurator's default for its MoE models)
ROUTING = "power_law_1.01"


def available() -> bool:
    return importlib.util.find_spec(PACKAGE) is not None


@cache
def _handle(system: str, backend: str) -> tuple[Any, str]:
    """aiconfigurator's engine over one system's tables of the backend's current version."""
    from aiconfigurator_core.sdk import perf_database
    from aiconfigurator_core.sdk.engine import EngineHandle

    database = perf_database.get_database(system, backend, "current")
    if database is None:
        raise ValueError(f"aiconfigurator has no {backend} tables for {system}")
    handle = EngineHandle.for_database(database, systems_path=database.systems_root)
    return handle, str(database.version)


class AicSource:
    def __init__(self, gpu: GpuSpec, engine: str) -> None:
        if gpu.measured_system is None or not available():
            raise ValueError(f"aiconfigurator has no tables for {gpu.name}")
        self.backend = serving_engine(engine).family
        self.system = gpu.measured_system
        self.handle, version = _handle(self.system, self.backend)
        self.name = f"aiconfigurator {self.system} {self.backend} {version}"

    def _ms(self, op: Any, **point: Any) -> float | None:
        from aiconfigurator_core.sdk.engine import build_ops_json

        try:
            (_, latency, _, _), *_ = self.handle.evaluate_ops_json(build_ops_json([op]), **point)
        except Exception:  # a format, shape or kind its tables do not hold: the next source
            return None
        return float(latency) / 1000.0

    def gemm(self, gemm: Gemm, m: int) -> float | None:
        from aiconfigurator_core.sdk import common
        from aiconfigurator_core.sdk.operations.gemm import GEMM

        mode = GEMM_MODES.get(gemm.fmt.label)
        if mode is None:
            return None
        op = GEMM(gemm.name, 1.0, gemm.n, gemm.k, getattr(common.GEMMQuantMode, mode))
        return self._ms(op, is_context=True, batch_size=1, s=1, x=m)

    def experts(self, experts: Experts, tokens: int) -> float | None:
        from aiconfigurator_core.sdk import common
        from aiconfigurator_core.sdk.operations.moe import MoE

        mode = MOE_MODES.get(experts.fmt.label)
        if mode is None:
            return None
        op = MoE("moe", 1.0, experts.hidden, experts.inter * experts.tp, experts.topk,
                 experts.experts, experts.tp, 1, getattr(common.MoEQuantMode, mode), ROUTING,
                 1)  # fmt: skip
        return self._ms(op, is_context=True, batch_size=1, s=1, x=tokens)

    def _attention(self, op: AttentionOp, decode: bool) -> Any | None:
        from aiconfigurator_core.sdk import common
        from aiconfigurator_core.sdk.operations.attention import (
            ContextAttention,
            GenerationAttention,
        )
        from aiconfigurator_core.sdk.operations.mla import ContextMLA, GenerationMLA

        if op.heads_per_gpu % 1:
            return None
        fp8 = op.kv_format.is_float and op.kv_format.bits == 8
        if op.kv_format.bits not in (8, 16) or (op.kv_format.bits == 8 and not fp8):
            return None  # int8 / int4 KV: no table
        kv = common.KVCacheQuantMode.fp8 if fp8 else common.KVCacheQuantMode.bfloat16
        fmha = common.FMHAQuantMode.bfloat16
        heads = int(op.heads_per_gpu)
        if isinstance(op, MlaAttention):  # the attention kernel alone (SGLang's tables only)
            if decode:
                return GenerationMLA("attn", 1.0, heads, kv)
            return ContextMLA("attn", 1.0, heads, kv, fmha)
        if not isinstance(op, (FullAttention, SlidingAttention)):
            return None
        window = op.group.window or 0
        kv_heads, dim = op.kv_heads_per_gpu, op.group.head_dim
        if decode:
            return GenerationAttention("attn", 1.0, heads, kv_heads, kv, window, dim)
        return ContextAttention("attn", 1.0, heads, kv_heads, kv, fmha, window, dim)

    def decode_attention(self, op: AttentionOp, batch: int, context: int) -> float | None:
        table_op = self._attention(op, decode=True)
        if table_op is None:
            return None
        seconds = self._ms(table_op, is_context=False, batch_size=batch, s=max(1, context))
        return None if seconds is None else seconds * op.layers

    def prefill_attention(self, op: AttentionOp, new: int, before: int) -> float | None:
        table_op = self._attention(op, decode=False)
        if table_op is None:
            return None
        seconds = self._ms(table_op, is_context=True, batch_size=1, s=new, prefix=before)
        return None if seconds is None else seconds * op.layers

    def all_reduce(self, hidden: int, tp: int, tokens: int) -> float | None:
        from aiconfigurator_core.sdk.operations.communication import CustomAllReduce

        if tp <= 1:
            return 0.0
        return self._ms(CustomAllReduce("ar", 1.0, hidden, tp), is_context=True, batch_size=1,
                        s=1, x=tokens)  # fmt: skip

    def memory(self, nbytes: float) -> float | None:
        return None  # aiconfigurator's own rule for memory-bound ops is the roofline's
