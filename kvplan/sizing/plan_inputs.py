"""What a capacity plan is asked: the model, GPU, TP, KV format, context, batch, block
size, memory settings and engine, validated on construction (each refusal names its
setting)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvplan import GIB
from kvplan.engines.memory_model import DEFAULT_ENGINE, EngineSettings
from kvplan.engines.pool_sizing import GPU_BLOCK_SIZE, check_max_model_len, max_model_len_for
from kvplan.engines.serving_engine import SERVING_ENGINES, ServingEngine
from kvplan.spec import GpuSpec, KVFormat, ModelSpec, parse_kv_format
from kvplan.spec.setting_error import SettingError

MAX_TOKENS = 2**30  # beyond this a context or batch is a typo, not a plan
DEFAULT_PLAN_TPS = 8  # `kvplan plan` considers the valid TP sizes up to one 8-GPU node


def valid_tps(model: ModelSpec, limit: int = 64) -> list[int]:
    """The TP sizes vLLM starts the model with (powers of two dividing its attention heads)."""
    return [tp for tp in (1, 2, 4, 8, 16, 32, 64) if tp <= limit and model.num_heads % tp == 0]


@dataclass(frozen=True)
class PlanInputs:
    model: ModelSpec
    gpu: GpuSpec
    tp: int = 1
    kv_format: KVFormat = field(default_factory=lambda: parse_kv_format("bf16"))
    context: int | None = None  # max_model_len; the model's max_position_embeddings if None
    batch: int = 1
    block_size: int = GPU_BLOCK_SIZE
    gpu_memory_utilization: float | None = None  # the engine version's default if None
    reserve_bytes: float | None = None
    kv_cache_bytes: float | None = None  # a fixed KV pool per GPU, as vLLM's kv_cache_memory_bytes
    weight_dtype: str | None = None
    respect_windows: bool = False  # size sliding-window layers at their window (ideal)
    gpu_memory_gib: float | None = None
    kv_budget: int | None = None  # tokens an eviction policy keeps per layer per sequence
    engine: str = DEFAULT_ENGINE  # whose startup memory profile to model (engines/memory_model.py)
    max_num_batched_tokens: int | None = None  # the engine's default if None
    max_num_seqs: int | None = None
    engine_version: tuple[int, int, int] | None = None  # the newest behaviour if None

    def __post_init__(self) -> None:
        checks = [  # (holds, the error's template, the value it names)
            (self.tp >= 1, "{tp} must be at least 1, got {got}", self.tp),
            (self.batch >= 1, "{batch} must be at least 1, got {got}", self.batch),
            (self.block_size >= 1, "{block_size} must be positive, got {got}", self.block_size),
            (
                0 < self.utilization <= 1,
                "{gpu_memory_utilization} must be in (0, 1], got {got}",
                self.gpu_memory_utilization,
            ),
            (
                self.context is None or 1 <= self.context <= MAX_TOKENS,
                "{context} must be between 1 and {most:,} tokens, got {got}",
                self.context,
            ),
            (self.batch <= MAX_TOKENS, "{batch} must be at most {most:,}, got {got}", self.batch),
            (
                self.reserve_bytes is None or self.reserve_bytes >= 0,
                "{reserve_bytes} must not be negative",
                None,
            ),
            (
                self.kv_cache_bytes is None or self.kv_cache_bytes > 0,
                "{kv_cache_bytes} must be positive",
                None,
            ),
            (
                self.gpu_memory_gib is None or self.gpu_memory_gib > 0,
                "{gpu_memory_gib} must be positive",
                None,
            ),
            (
                self.kv_budget is None or self.kv_budget >= 1,
                "{kv_budget} must be at least 1 token",
                None,
            ),
        ]
        for holds, template, got in checks:
            if not holds:
                raise SettingError(template, got=got, most=MAX_TOKENS)
        self.engine_settings  # validates engine and batching limits
        check_max_model_len(self.model, self.context, "context")
        if self.model.num_heads % self.tp:
            raise SettingError(
                "{tp} {got} must divide the {heads} attention heads of {name}; try {valid}",
                got=self.tp,
                heads=self.model.num_heads,
                name=self.model.name,
                valid=", ".join(map(str, valid_tps(self.model)[:5])),
            )

    @property
    def serving_engine(self) -> ServingEngine:
        return SERVING_ENGINES[self.engine]

    @property
    def utilization(self) -> float:
        """gpu_memory_utilization as given, else the engine's own default for its version."""
        if self.gpu_memory_utilization is not None:
            return self.gpu_memory_utilization
        memory = self.gpu_memory_gib or self.gpu.usable_memory_bytes / GIB
        return self.serving_engine.default_utilization(self.engine_version, memory, self.tp)

    @property
    def max_model_len(self) -> int:
        return max_model_len_for(self.model, self.context)

    @property
    def engine_settings(self) -> EngineSettings:
        return EngineSettings(
            engine=self.engine,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            version=self.engine_version,
        )
