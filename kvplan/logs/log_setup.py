"""From a parsed server log to kvplan's inputs, and kvplan's prediction of what it reported.

Model and GPU names in logs are HF ids, local paths or prose; they go through the same
resolvers a user's typed names do (kvplan/spec/resolve.py for models, the GPU catalog's
name reader for GPUs), so a log is sizeable exactly when a user could have typed what it shows.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from kvplan import GIB
from kvplan.engines.engine_releases import parse_version, version_on
from kvplan.engines.engine_weights import loaded_weight_bytes_per_gpu
from kvplan.engines.hybrid_kv import (
    prefix_caching_mamba_mode,
    state_block_alignment,
    vllm_kv_cache,
)
from kvplan.engines.memory_model import EngineSettings, MemoryFit, MemoryProfile, predict_memory
from kvplan.engines.pool_sizing import GPU_BLOCK_SIZE
from kvplan.engines.serving_engine import (
    SERVING_ENGINES,
    ServingEngine,
    SGLangEngine,
    VllmV1Engine,
)
from kvplan.engines.sglang_kv import sglang_kv_tokens
from kvplan.spec import GpuSpec, ModelSpec, parse_kv_format
from kvplan.spec.profiles import gpu_profiles
from kvplan.spec.resolve import load_gpu, parse_query, strip_suffixes
from kvplan.spec.resolve import resolve_model as resolve_name
from kvplan.spec.server_log import ServerLog
from kvplan.spec.setting_error import SettingError


@dataclass(frozen=True)
class LoggedModel:
    """A logged model name as the resolver read it: the spec, the note that says why a catalog
    entry stands in, or why nothing could be sized."""

    spec: ModelSpec | None
    note: str | None = None
    failure: str | None = None


def resolve_model(logged: str | None) -> LoggedModel:
    if not logged:
        return LoggedModel(None, failure="the log names no model")
    try:
        # A log's local path (/models/Qwen2-7B-Instruct/) is from another machine: its folder
        # name is what names the model here.
        resolved = resolve_name(
            parse_query(logged).repo if logged.strip().startswith(("/", "~", ".")) else logged
        )
    except ValueError as err:
        return LoggedModel(None, failure=str(err))
    return LoggedModel(resolved.spec, resolved.note)


def resolve_gpu(logged: str | None) -> GpuSpec | None:
    if not logged:
        return None
    try:
        return load_gpu(logged)
    except ValueError:
        return None


# Meta published one FP8 checkpoint of its own (the 405B, fbgemm_fp8 with attention in BF16);
# other orgs' Llama-3.1 FP8 conversions (neuralmagic, RedHatAI) quantize every linear layer.
_META_FP8 = re.compile(r"(^|/|\s)(meta-)?llama-3\.1-405b(-instruct)?-fp8(?=$|[\s)])")


def weight_dtype_hint(logged: str | None, quantization: str | None) -> str | None:
    """The weight dtype a logged name's quantization suffix names, read by the resolver's own
    suffix rules (kvplan/spec/resolve.py), and Meta's FP8 recipe for its one FP8 checkpoint."""
    dtype = strip_suffixes(parse_query(logged).name)[2] if logged else None
    text = f"{logged or ''} {quantization or ''}".lower()
    if (
        dtype == "fp8"
        and _META_FP8.search(text)
        and not re.search(r"neuralmagic|redhatai|\bamd/", text)
    ):
        return "fp8-meta"
    return dtype


@dataclass(frozen=True)
class ServerSetup:
    """kvplan's reading of one logged server: model, GPU and the settings that matter."""

    model: ModelSpec | None
    model_match: str | None  # the profile name
    model_note: str | None  # why a twin profile stands in for the logged model
    gpu: GpuSpec | None
    engine: str
    tp: int
    pp: int
    utilization: float
    utilization_logged: bool
    max_model_len: int | None
    kv_dtype: str
    block_size: int
    weight_dtype: str | None
    settings: EngineSettings
    logged_total_bytes: float | None
    model_failure: str | None = (
        None  # why the logged model could not be sized (what the resolver tried)
    )
    expert_split: int = (
        1  # data-parallel ranks the experts are spread over (--enable-expert-parallel)
    )
    # settings the log implies without printing them, with what each was read from
    derived: dict[str, str] = field(default_factory=dict)
    # a name the user gave that the log contradicts, in words naming both
    conflicts: tuple[str, ...] = ()
    # as the log shows it; off where it does not say, which is vLLM's default for the models
    # it changes (hybrid ones: ModelConfig.is_prefix_caching_supported, "still experimental")
    prefix_caching: bool = False
    speculative_tokens: int = 0  # a drafter's tokens per step
    draft_layers: int = 0  # full-attention layers the drafter caches beside the model's (MTP)

    @property
    def serving_engine(self) -> ServingEngine:
        return SERVING_ENGINES[self.engine]

    @property
    def known(self) -> bool:
        return self.model is not None and (
            self.gpu is not None or self.logged_total_bytes is not None
        )


def server_setup(
    log: ServerLog,
    model_name: str | None = None,
    gpu_name: str | None = None,
    version: str | None = None,
    date: str | None = None,
) -> ServerSetup:
    """The setup behind a log; model_name / gpu_name / version fill in what the log does not
    show, and a log's date (YYYY-MM-DD) stands in for a version where neither is known.
    A name the user gives must resolve (the resolver's error is raised, as for any command);
    one the log prints may be unknown, and the explanation says what it could not size."""
    if model_name is not None:
        typed = resolve_name(model_name)
        logged = LoggedModel(typed.spec, typed.note)
    else:
        logged = resolve_model(log.model)
    model, note = logged.spec, logged.note
    match = model.name if model else None
    gpu = load_gpu(gpu_name) if gpu_name is not None else resolve_gpu(log.gpu_name)
    engine = (
        "sglang"
        if log.engine == "sglang"
        else ("vllm-v0" if log.engine_generation == "v0" else "vllm-v1")
    )
    release = parse_version(log.version) or parse_version(version) or version_on(date)
    settings = EngineSettings(
        engine=engine,
        max_num_batched_tokens=log.max_num_batched_tokens,
        max_num_seqs=log.max_num_seqs,
        enforce_eager=bool(log.enforce_eager),
        version=release,
        sampler_path=log.sampler_path,
    )
    max_len = log.max_model_len or (model.max_position_embeddings if model else None)
    tp = log.tensor_parallel_size or log.tp_from_world or 1
    kv_dtype = log.kv_cache_dtype or "auto"
    return ServerSetup(
        model,
        match,
        note,
        gpu,
        engine,
        tp,
        log.pipeline_parallel_size or 1,
        log.gpu_memory_utilization
        or SERVING_ENGINES[engine].default_utilization(release, _memory_gib(gpu, log), tp),
        log.gpu_memory_utilization is not None,
        max_len,
        kv_dtype,
        log.block_size or GPU_BLOCK_SIZE,
        weight_dtype_hint(model_name or log.model, log.quantization),
        settings,
        log.total_gpu_memory_gib * GIB if log.total_gpu_memory_gib else None,
        logged.failure,
        (log.data_parallel_size or 1) if log.expert_parallel else 1,
        derived_settings(log),
        given_against_logged(log, model, gpu, model_name, gpu_name),
        bool(log.enable_prefix_caching),
        log.num_speculative_tokens or 0,
        model.mtp_layers if model is not None and _drafts_with_own_layers(log) else 0,
    )


def _drafts_with_own_layers(log: ServerLog) -> bool:
    """Whether the drafter is the model's own MTP head (vLLM's "mtp" and its per-model
    "*_mtp" methods, SGLang's NEXTN), whose layers the model's config counts."""
    method = (log.speculative_method or "").lower()
    return bool(log.num_speculative_tokens) and ("mtp" in method or method == "nextn")


def given_against_logged(
    log: ServerLog,
    model: ModelSpec | None,
    gpu: GpuSpec | None,
    model_name: str | None,
    gpu_name: str | None,
) -> tuple[str, ...]:
    """What the user named that the log contradicts: a --model or --gpu that resolves to
    another profile than the one the log shows. The user's name is used, and said so."""
    conflicts = []
    logged_model = resolve_model(log.model).spec if model_name is not None else None
    if model is not None and logged_model is not None and logged_model.name != model.name:
        conflicts.append(
            f"--model {model_name} ({model.name}) contradicts the log's model "
            f"'{log.model}' ({logged_model.name}); sizing {model.name} as given"
        )
    logged_gpu = resolve_gpu(log.gpu_name) if gpu_name is not None else None
    if gpu is not None and logged_gpu is not None and logged_gpu.name != gpu.name:
        conflicts.append(
            f"--gpu {gpu_name} ({gpu.name}) contradicts the log's GPU '{log.gpu_name}' "
            f"({logged_gpu.name}); sizing {gpu.name} as given"
        )
    return tuple(conflicts)


def derived_settings(log: ServerLog) -> dict[str, str]:
    """The settings a log implies without printing them, each with what it was read from."""
    if log.tensor_parallel_size is None and log.tp_from_world:
        return {"tensor_parallel_size": f"{log.tp_from_world}, from 'world size {log.world_size}'"}
    return {}


def _memory_gib(gpu: GpuSpec | None, log: ServerLog) -> float | None:
    if gpu is not None:
        return gpu.usable_memory_bytes / GIB
    return log.total_gpu_memory_gib


@dataclass(frozen=True)
class CapacityPrediction:
    """kvplan's prediction, in the terms the server logs."""

    memory: MemoryProfile
    kv_bytes_per_token_per_gpu: float  # on the first pipeline stage
    num_blocks: int  # whole model: the smallest stage's count
    kv_cache_tokens: int
    max_concurrency: float | None
    total_source: str
    kv_bytes: float  # the KV budget per GPU the figures come from: the model's, or the one given


def stage_layers_share(model: ModelSpec, pp: int) -> float:
    """Share of the layers on the first pipeline stage (vLLM gives the remainder to the first
    stages)."""
    return math.ceil(model.num_layers / pp) / model.num_layers


def predict_capacity(
    setup: ServerSetup, fit: MemoryFit | None = None, kv_bytes: float | None = None, **overrides
) -> CapacityPrediction:
    """Predict KV memory, blocks and tokens for a setup (fields in overrides replace the setup's).
    kv_bytes fixes the KV budget per GPU (a log's "Available KV cache memory"): then only the
    engine's KV arithmetic is predicted, and no GPU needs to be known."""
    setup = replace(setup, **overrides) if overrides else setup
    if setup.model is None:
        raise SettingError(
            "{failure}; pass {model} NAME", failure=setup.model_failure or "the log names no model"
        )
    model = setup.model
    gpu = setup.gpu or gpu_profiles()["h100-80gb"]
    if setup.gpu is not None:
        total, source = gpu.usable_memory_bytes, f"{gpu.name} profile"
    elif setup.logged_total_bytes:
        total, source = setup.logged_total_bytes, "the log's total_gpu_memory"
    elif kv_bytes is not None:
        total, source = gpu.usable_memory_bytes, "the log's available KV memory"
    else:
        raise SettingError("the log does not name a GPU kvplan knows; pass {gpu} PROFILE")
    share = stage_layers_share(model, setup.pp)
    weights = loaded_weight_bytes_per_gpu(
        model, gpu, setup.tp, setup.weight_dtype, setup.engine, setup.expert_split
    )
    weights = weights * share if setup.pp > 1 else weights
    memory = predict_memory(
        model,
        gpu,
        tp=setup.tp,
        utilization=setup.utilization,
        max_model_len=setup.max_model_len or 4096,
        weight_bytes=weights,
        settings=setup.settings,
        total_bytes=total,
        fit=fit,
    )
    budget = memory.kv_bytes if kv_bytes is None else kv_bytes
    fmt = parse_kv_format(setup.kv_dtype, model)
    per_token = model.kv_bytes_per_token(fmt, setup.tp) * share
    max_len = setup.max_model_len or model.max_position_embeddings or 4096
    if isinstance(setup.serving_engine, VllmV1Engine) and setup.pp == 1:
        mode = prefix_caching_mamba_mode(model, setup.settings.version, setup.prefix_caching)
        # V1 sizes by KV cache groups and prints tokens from them (kvplan/engines/hybrid_kv.py).
        cache = vllm_kv_cache(
            model,
            fmt,
            setup.tp,
            max(0.0, budget),
            max_len,
            setup.block_size,
            max_num_batched_tokens=memory.batched_tokens,
            vllm_version=setup.settings.version,
            mamba_cache_mode=mode,
            mamba_alignment=state_block_alignment(model, mode),
            num_speculative_tokens=setup.speculative_tokens,
            draft_layers=setup.draft_layers,
        )
        blocks, tokens, concurrency = (
            cache.num_blocks,
            cache.reported_tokens,
            cache.reported_concurrency,
        )
    elif isinstance(setup.serving_engine, SGLangEngine) and setup.pp == 1:
        tokens = blocks = sglang_kv_tokens(
            model, fmt, setup.tp, max(0.0, budget)
        ).max_total_num_tokens
        concurrency = tokens / max_len
    elif isinstance(setup.serving_engine, SGLangEngine):
        tokens = blocks = max(0, math.floor(budget / per_token))
        concurrency = tokens / max_len
    else:  # V0 and pipeline stages: one block table, every layer at full length
        blocks = max(0, math.floor(budget / (per_token * setup.block_size)))
        tokens = blocks * setup.block_size
        concurrency = tokens / max_len
    return CapacityPrediction(memory, per_token, blocks, tokens, concurrency, source, budget)
