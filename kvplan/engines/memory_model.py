"""What a serving engine will leave for the KV cache: a model of its startup memory profile.

vLLM sizes the KV cache after a profiling run (v0 worker.py determine_num_available_blocks,
v1 gpu_worker.py determine_available_memory):

    KV memory = total_gpu_memory x gpu_memory_utilization
                - weights - peak activation - non-torch memory [- CUDA-graph memory]

- total_gpu_memory is what the driver exposes (GpuSpec.usable_memory_bytes), not the datasheet.
- The activation peak comes from one dummy forward of max_num_batched_tokens tokens, then
  logits and a sampler pass for max_num_seqs rows (v0 model_runner.profile_run; v1
  gpu_model_runner.profile_run + _dummy_sampler_run). Defaults differ by engine:
  v0 batches max(max_model_len, 2048) tokens and samples 256 rows; from vLLM 0.5.4 (PR #6666,
  "enable chunked prefill by default for long context models") a max_model_len above 32K turns
  chunked prefill on and the profile batches 2048 tokens; v1's API server batches 8192 tokens /
  1024 rows on >= 70 GiB GPUs
  other than A100, else 2048 / 256 (EngineArgs defaults since ~0.8).
- The activation itself is modeled as the live tensors of the widest layer per token (2 x
  hidden for the residual stream plus the wider of attention's q/k/v/o and the MLP's
  gate+up+act, split by TP) times one fitted scale (allocator reuse). The sampler pass comes
  after the forward: V1 frees the forward's intermediates first and keeps only the hidden
  states, so its peak is the larger of the forward and hidden states + sampler; the sampler
  holds rows x vocab x the bytes its top-k/top-p path allocates (counted per path and release
  in kvplan/engines/engine_releases.py). V0 is modeled additively with fitted bytes per logit
  (its fit on the v0 logs; v0 keeps more of the forward alive while it samples).
- Non-torch memory (CUDA context, kernels loaded by the profile) is a fitted constant. V1 takes
  its baseline after the distributed setup (gpu_worker.init_device), so NCCL's buffers are
  outside it; no log prints a v0 TP > 1 figure to fit a per-rank term on.
- vLLM >= 0.20 (v1) also reserves the CUDA-graph pool it estimates before KV sizing (PR
  #38284; its log line says "default since v0.21.0", the 0.20.0 sources already do it); older
  v1 and v0 captured graphs after sizing, outside the budget. Fitted constant; 0 with
  enforce_eager.
- SGLang: KV = (total - memory in use before loading, the same non-torch model) x
  mem_fraction_static - weights (model_runner.profile_max_num_token); the rest is its
  activation headroom. The fraction's default is the release's (engines/sglang_defaults.py).

The fitted figures live in profiles/memory_model.toml with the residual on every log they
were fitted on (benchmarks/vllm_logs.py --fit rewrites it).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from typing import Any

from kvplan import GIB
from kvplan.engines.engine_releases import SAMPLER_BYTES_PER_LOGIT, v1_sampler_path
from kvplan.engines.serving_engine import (
    SERVING_ENGINES,
    ServingEngine,
    SGLangEngine,
    VllmV0Engine,
    VllmV1Engine,
)
from kvplan.spec import GpuSpec, ModelSpec
from kvplan.spec.profiles import profiles_dir
from kvplan.spec.setting_error import SettingError

DEFAULT_ENGINE = VllmV1Engine.generation


ACTIVATION_BYTES = 2  # bf16/fp16 activations


@dataclass(frozen=True)
class MemoryFit:
    """The fitted mechanism parameters (few, shared by every model and GPU)."""

    activation_scale: float
    sampler_bytes_per_logit_v0: float
    non_torch_gib: float
    cuda_graph_gib: float
    source: str


@cache
def load_memory_fit() -> MemoryFit:
    data = tomllib.loads((profiles_dir() / "memory_model.toml").read_text())
    return MemoryFit(**data["fit"])


@dataclass(frozen=True)
class EngineSettings:
    """The serving settings that change the profile; None means the engine's default."""

    engine: str = DEFAULT_ENGINE
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    enforce_eager: bool = False
    cuda_graph_in_budget: bool | None = None  # None: as the engine version does
    version: tuple[int, int, int] | None = None  # the engine release; None: the newest behaviour
    sampler_path: str | None = None  # the top-k/top-p path a log names; None: the release's default

    @property
    def serving_engine(self) -> ServingEngine:
        return SERVING_ENGINES[self.engine]

    def at_least(self, *release: int) -> bool:
        return self.version is None or self.version >= release

    def __post_init__(self) -> None:
        if self.engine not in SERVING_ENGINES:
            raise SettingError(
                "{engine} must be one of {known}, got '{got}'",
                known=", ".join(SERVING_ENGINES),
                got=self.engine,
            )
        for name in ("max_num_batched_tokens", "max_num_seqs"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        if self.sampler_path is not None and self.sampler_path not in SAMPLER_BYTES_PER_LOGIT:
            raise ValueError(
                f"unknown sampler path '{self.sampler_path}'; one of "
                f"{', '.join(SAMPLER_BYTES_PER_LOGIT)}"
            )


@dataclass(frozen=True)
class MemoryProfile:
    """Per-GPU memory as the engine will see it at startup."""

    engine: str
    total_bytes: float
    usable_bytes: float
    weight_bytes: float
    activation_bytes: float
    non_torch_bytes: float
    cuda_graph_bytes: float
    batched_tokens: int
    sampler_rows: int
    sampler_path: str | None = (
        None  # V1's top-k/top-p path (engine_releases.py); None for v0 and SGLang
    )

    @property
    def reserve_bytes(self) -> float:
        """Everything besides weights and KV: what `--reserve-gib` overrides."""
        return self.activation_bytes + self.non_torch_bytes + self.cuda_graph_bytes

    @property
    def kv_bytes(self) -> float:
        return self.usable_bytes - self.weight_bytes - self.reserve_bytes

    def usable_at(self, utilization: Any) -> Any:
        """The usable memory at another share of the GPU (a number or a numpy array), the
        rest of the profile unchanged."""
        return SERVING_ENGINES[self.engine].usable_bytes(
            self.total_bytes, self.non_torch_bytes, utilization
        )


def mlp_width(model: ModelSpec) -> float:
    """Intermediate width one token passes through per layer (active experts summed), from the
    parameter counts: a gated MLP holds 3 x hidden x width weights per layer."""
    p = model.params
    return (p.dense_mlp + p.experts_active) / (model.num_layers * 3 * model.hidden_size)


def activation_elements_per_token(model: ModelSpec, tp: int) -> float:
    """Live activation elements per token at the widest point of a layer (before the fitted
    scale)."""
    kv_heads = model.self_attention_kv_heads
    attention = (2 * model.num_heads + 2 * kv_heads) * model.head_dim  # q, k, v and the output
    mlp = 3 * mlp_width(model)  # gate and up projections, then the activated product
    return 2 * model.hidden_size + max(attention, mlp) / tp


def dequantized_weight_bytes(model: ModelSpec, tp: int) -> float:
    """A bitsandbytes checkpoint computes a prefill batch by dequantizing each weight to 16 bit
    first (bitsandbytes matmul_4bit / int8 matmul), so the largest layer matrix is also alive at
    the activation peak in 16 bit; 0 for every other format (fused kernels read packed weights)."""
    quant = model.checkpoint_quant
    if quant is None or quant.method != "bitsandbytes":
        return 0.0
    kv_heads = model.self_attention_kv_heads
    qkv = (model.num_heads + 2 * kv_heads) * model.head_dim * model.hidden_size
    gate_up = 2 * mlp_width(model) * model.hidden_size
    return max(qkv, gate_up) / tp * ACTIVATION_BYTES


def batching_defaults(
    settings: EngineSettings, gpu: GpuSpec, max_model_len: int, total_bytes: float
) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) the engine profiles with: the command line's, else
    vLLM's defaults for the release (engine_releases.batch_defaults)."""
    defaults = settings.serving_engine.batch_defaults(
        settings.version, total_bytes / GIB, gpu.name, max_model_len
    )
    tokens = settings.max_num_batched_tokens or defaults.max_num_batched_tokens
    seqs = min(settings.max_num_seqs or defaults.max_num_seqs, tokens)
    return tokens, seqs


def predict_memory(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    tp: int,
    utilization: float,
    max_model_len: int,
    weight_bytes: float,
    settings: EngineSettings = EngineSettings(),
    total_bytes: float | None = None,
    fit: MemoryFit | None = None,
) -> MemoryProfile:
    """Per-GPU startup memory for `model` on `gpu` under `settings` (weights given per GPU)."""
    fit = fit or load_memory_fit()
    total = total_bytes if total_bytes is not None else gpu.usable_memory_bytes
    tokens, rows = batching_defaults(settings, gpu, max_model_len, total)
    non_torch = fit.non_torch_gib * GIB
    engine = settings.serving_engine
    if isinstance(engine, SGLangEngine):
        usable = engine.usable_bytes(total, non_torch, utilization)
        return MemoryProfile(
            engine.generation, total, usable, weight_bytes, 0.0, non_torch, 0.0, tokens, rows
        )
    forward = fit.activation_scale * tokens * activation_elements_per_token(
        model, tp
    ) * ACTIVATION_BYTES + dequantized_weight_bytes(model, tp)
    path = None
    if isinstance(engine, VllmV0Engine):
        activation = forward + rows * model.vocab_size * fit.sampler_bytes_per_logit_v0
    else:
        path = settings.sampler_path or v1_sampler_path(model, settings.version)
        sampler = rows * model.vocab_size * SAMPLER_BYTES_PER_LOGIT[path] if path else 0.0
        hidden = tokens * model.hidden_size * ACTIVATION_BYTES  # the forward's output, still held
        activation = max(forward, hidden + sampler)
    graphs_counted = settings.cuda_graph_in_budget
    if graphs_counted is None:
        graphs_counted = isinstance(engine, VllmV1Engine) and engine.graphs_in_budget(
            settings.version
        )
    graphs = fit.cuda_graph_gib * GIB if graphs_counted and not settings.enforce_eager else 0.0
    return MemoryProfile(
        settings.engine,
        total,
        engine.usable_bytes(total, non_torch, utilization),
        weight_bytes,
        activation,
        non_torch,
        graphs,
        tokens,
        rows,
        path,
    )
