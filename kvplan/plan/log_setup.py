"""From a parsed server log to kvplan's inputs, and kvplan's prediction of what it reported.

Model names in logs are HF ids, local paths or prose; they are matched to shipped profiles
by their last path component. A few logged models have no profile of their own but share
every shape kvplan uses with one that does (ARCHITECTURE_TWINS, each with its reason).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from kvplan.plan.memory_model import EngineSettings, MemoryFit, MemoryProfile, parse_version, predict_memory, version_on
from kvplan.plan.roofline import Roofline
from kvplan.spec import GpuSpec, ModelSpec, parse_kv_format
from kvplan.spec.profiles import gpu_profiles, load_model, model_profiles
from kvplan.spec.server_log import ServerLog

# log name (normalized) -> (profile, why the shapes agree, max_model_len default if different)
ARCHITECTURE_TWINS: dict[str, tuple[str, str, int | None]] = {
    "meta-llama-3-8b": ("llama-3.1-8b", "Llama-3-8B has Llama-3.1-8B's shapes; its max length is 8,192", 8192),
    "llama-3-8b": ("llama-3.1-8b", "Llama-3-8B has Llama-3.1-8B's shapes; its max length is 8,192", 8192),
    "qwen2-7b": ("qwen2.5-7b-instruct", "Qwen2-7B has Qwen2.5-7B's shapes (28 layers, 3584 hidden, 4 KV heads, "
                 "18944 MLP, 152064 vocab); its max length is 32,768", 32768),
}
_SUFFIXES = ("-instruct", "-chat", "-hf", "-it", "-base")
_WEIGHT_HINTS = (("-fp8", "fp8"), ("w8a8", "int8"), ("-int8", "int8"), ("-awq", "int4"), ("-gptq", "int4"),
                 ("bnb-4bit", "int4"), ("int4", "int4"), ("nvfp4", "fp4"))
# GPU names as logs and people write them -> profile (checked in order: first match wins)
_GPU_NAMES = (("h100", "h100-80gb"), ("h200", "h200"), ("a100 80", "a100-80gb"), ("a100-80", "a100-80gb"),
              ("a100 40", "a100-40gb"), ("a100-40", "a100-40gb"), ("a10040", "a100-40gb"), ("l40s", "l40s"),
              ("l4", "l4"), ("b200", "b200"), ("mi300x", "mi300x"), ("mi325x", "mi325x"))


def _normalize(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip().rstrip("/").split("/")[-1].lower())


def resolve_model(logged: str | None) -> tuple[ModelSpec | None, str | None, str | None, int | None]:
    """(spec, profile name, twin note, max_model_len default) for a logged model name, or Nones."""
    if not logged:
        return None, None, None, None
    name = _normalize(logged.split(" (")[0])
    stripped = re.sub(r"-(fp8|awq|gptq|bnb-4bit|quantized\.w8a8|w8a8|int8|int4|nvfp4)([.-].*)?$", "", name)
    for _ in range(2):
        for suffix in _SUFFIXES:
            stripped = stripped.removesuffix(suffix)
    for key in (name, stripped):
        if key in ARCHITECTURE_TWINS:
            profile, why, max_len = ARCHITECTURE_TWINS[key]
            return load_model(profile), profile, why, max_len
        for profile in model_profiles().values():
            names = {profile.name, _normalize(profile.hf_repo), *(_normalize(a) for a in profile.aliases)}
            names |= {n.removesuffix(s) for n in set(names) for s in _SUFFIXES}
            if key in names:
                return load_model(profile.name), profile.name, None, None
    return None, None, None, None


def resolve_gpu(logged: str | None) -> GpuSpec | None:
    if not logged:
        return None
    text = logged.lower().replace("_", " ")
    for needle, profile in _GPU_NAMES:
        if re.search(rf"(?<![a-z0-9]){re.escape(needle)}(?![0-9])", text):
            return gpu_profiles()[profile]
    return None


# Meta published one FP8 checkpoint of its own (the 405B, fbgemm_fp8 with attention in BF16);
# other orgs' Llama-3.1 FP8 conversions (neuralmagic, RedHatAI) quantize every linear layer.
_META_FP8 = re.compile(r"(^|/|\s)(meta-)?llama-3\.1-405b(-instruct)?-fp8(?=$|[\s)])")


def weight_dtype_hint(logged: str | None, quantization: str | None) -> str | None:
    text = f"{logged or ''} {quantization or ''}".lower()
    dtype = next((dtype for hint, dtype in _WEIGHT_HINTS if hint in text), None)
    if dtype == "fp8" and _META_FP8.search(text) and not re.search(r"neuralmagic|redhatai|\bamd/", text):
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

    @property
    def known(self) -> bool:
        return self.model is not None and (self.gpu is not None or self.logged_total_bytes is not None)


def server_setup(log: ServerLog, model_name: str | None = None, gpu_name: str | None = None,
                 version: str | None = None, date: str | None = None) -> ServerSetup:
    """The setup behind a log; model_name / gpu_name / version fill in what the log does not
    show, and a log's date (YYYY-MM-DD) stands in for a version where neither is known."""
    model, match, note, default_len = resolve_model(model_name or log.model)
    gpu = resolve_gpu(gpu_name or log.gpu_name)
    engine = "sglang" if log.engine == "sglang" else ("vllm-v0" if log.engine_generation == "v0" else "vllm-v1")
    release = parse_version(log.version) or parse_version(version) or version_on(date)
    graphs_in_budget = None if release is None or release[0] != 0 else release[1] >= 21
    settings = EngineSettings(engine=engine, max_num_batched_tokens=log.max_num_batched_tokens,
                              max_num_seqs=log.max_num_seqs, enforce_eager=bool(log.enforce_eager),
                              cuda_graph_in_budget=graphs_in_budget, version=release)
    max_len = log.max_model_len or default_len or (model.max_position_embeddings if model else None)
    kv_dtype = log.kv_cache_dtype or "auto"
    return ServerSetup(model, match, note, gpu, engine, log.tensor_parallel_size or 1, log.pipeline_parallel_size or 1,
                       log.gpu_memory_utilization or (0.88 if engine == "sglang" else 0.9),
                       log.gpu_memory_utilization is not None, max_len, kv_dtype, log.block_size or 16,
                       weight_dtype_hint(model_name or log.model, log.quantization), settings,
                       log.total_gpu_memory_gib * 2**30 if log.total_gpu_memory_gib else None)


@dataclass(frozen=True)
class CapacityPrediction:
    """kvplan's prediction, in the terms the server logs."""

    memory: MemoryProfile
    kv_bytes_per_token_per_gpu: float  # on the first pipeline stage
    num_blocks: int  # whole model: the smallest stage's count
    kv_cache_tokens: int
    max_concurrency: float | None
    total_source: str


def stage_layers_share(model: ModelSpec, pp: int) -> float:
    """Share of the layers on the first pipeline stage (vLLM gives the remainder to the first stages)."""
    return math.ceil(model.num_layers / pp) / model.num_layers


def predict_capacity(setup: ServerSetup, fit: MemoryFit | None = None, **overrides) -> CapacityPrediction:
    """Predict KV memory, blocks and tokens for a setup (fields in overrides replace the setup's)."""
    setup = replace(setup, **overrides) if overrides else setup
    if setup.model is None:
        raise ValueError("the log does not name a model kvplan has a profile for; pass --model PROFILE")
    model = setup.model
    gpu = setup.gpu or gpu_profiles()["h100-80gb"]
    if setup.gpu is not None:
        total, source = gpu.usable_memory_bytes, f"{gpu.name} profile"
    elif setup.logged_total_bytes:
        total, source = setup.logged_total_bytes, "the log's total_gpu_memory"
    else:
        raise ValueError("the log does not name a GPU kvplan knows; pass --gpu PROFILE")
    share = stage_layers_share(model, setup.pp)
    weights = Roofline(model, gpu, setup.tp, parse_kv_format("bf16"), setup.weight_dtype).weight_bytes_per_gpu
    weights = weights * share if setup.pp > 1 else weights
    memory = predict_memory(model, gpu, tp=setup.tp, utilization=setup.utilization,
                            max_model_len=setup.max_model_len or 4096, weight_bytes=weights,
                            settings=setup.settings, total_bytes=total, fit=fit)
    per_token = model.kv_bytes_per_token(parse_kv_format(setup.kv_dtype, model), setup.tp) * share
    if setup.engine == "sglang":
        tokens = max(0, math.floor(memory.kv_bytes / per_token))
        blocks = tokens
    else:
        blocks = max(0, math.floor(memory.kv_bytes / (per_token * setup.block_size)))
        tokens = blocks * setup.block_size
    concurrency = tokens / setup.max_model_len if setup.max_model_len else None
    return CapacityPrediction(memory, per_token, blocks, tokens, concurrency, source)
