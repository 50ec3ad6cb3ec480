"""The model a real-mode bench serves, loaded once, and the bytes its KV pool gets: a fixed
--kv-cache-gib, the CPU default, or on CUDA vLLM's utilization rule."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kvplan import GIB
from kvplan.core.engine_factory import RealConfig, SizingConfig
from kvplan.engines.engine_releases import parse_version
from kvplan.real.model import load_causal_lm, resolve_device
from kvplan.spec import ModelSpec
from kvplan.spec.attention_group import FullAttentionSpec, SlidingWindowSpec
from kvplan.spec.hf_config import model_spec_from_config
from kvplan.spec.setting_error import SettingError

if TYPE_CHECKING:
    import torch

CPU_KV_GIB = 0.25  # default KV pool on CPU; on CUDA: --gpu-memory-utilization (cuda_kv_pool_bytes)


@dataclass
class LoadedModel:
    model: torch.nn.Module  # a transformers causal LM
    spec: ModelSpec
    device: str
    vocab_size: int


def load_model_for_bench(model: str, real: RealConfig, seed: int) -> LoadedModel:
    device = resolve_device(real.device)
    dtype = (
        real.model_dtype if real.model_dtype != "auto" else ("fp32" if device == "cpu" else "bf16")
    )
    lm, raw = load_causal_lm(model, real.model_path, real.layers, dtype, device, seed)
    label = Path(real.model_path).name if real.model_path else model
    if label == "hf" and real.model_path:
        label = Path(real.model_path).parent.name
    spec = model_spec_from_config(raw, label, real.model_path or model)
    check_real_spec(spec)
    return LoadedModel(lm, spec, device, int(raw.get("vocab_size") or spec.vocab_size))


def check_real_spec(spec: ModelSpec) -> None:
    """Refuse, naming the feature, a model whose KV real mode's one pool shape cannot hold."""
    if not all(isinstance(g, (FullAttentionSpec, SlidingWindowSpec)) for g in spec.groups):
        raise ValueError(
            f"real mode supports MHA/GQA/MQA attention models; {spec.name} is {spec.kv_kind}"
        )
    shapes = sorted({(g.num_kv_heads, g.head_dim) for g in spec.token_groups})
    if len(shapes) > 1:
        raise ValueError(
            f"real mode keeps one KV shape for every layer, but {spec.name}'s layers differ "
            f"(KV heads x head_dim: {', '.join(f'{h} x {d}' for h, d in shapes)}; e.g. Gemma-4's "
            "global_head_dim): run it in simulated mode"
        )


def kv_pool_bytes(config: SizingConfig, loaded: LoadedModel) -> tuple[float, float | None]:
    """The real KV pool's bytes and the utilization that sized it (None: fixed or CPU's)."""
    if config.kv_cache_gib is not None:
        return config.kv_cache_gib * GIB, None
    if loaded.device == "cpu":
        if config.gpu_memory_utilization is not None:
            raise SettingError(
                "{gpu_memory_utilization} sizes a CUDA pool; on CPU pass {kv_cache_gib} "
                "(default {default:g} GiB)",
                default=CPU_KV_GIB,
            )
        return CPU_KV_GIB * GIB, None
    import gc

    import torch

    # a pool an engine before this one freed (the cost estimate's warm-up, an earlier
    # optimization's) stays in torch's allocator cache, which the driver counts as in use
    gc.collect()
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    utilization = config.gpu_memory_utilization or config.serving_engine.default_utilization(
        parse_version(config.engine_version), total / GIB
    )
    return cuda_kv_pool_bytes(free, total, utilization), utilization


def cuda_kv_pool_bytes(free: float, total: float, utilization: float) -> float:
    """vLLM's rule, simplified: the engine may use `utilization` of the card, and what is in
    use once the model is loaded (weights, the CUDA context, other processes) comes off it.
    vLLM also profiles a forward pass for activation memory; real mode does not (named in
    the README), so its pool is somewhat larger than vLLM's at the same setting."""
    in_use = total - free
    pool_bytes = utilization * total - in_use
    if pool_bytes <= 0:
        raise SettingError(
            "{gpu_memory_utilization} {utilization:g} leaves no KV memory: {in_use:.2f} GiB of "
            "{total:.2f} GiB is in use after loading the model; raise it or pass {kv_cache_gib}",
            utilization=utilization,
            in_use=in_use / GIB,
            total=total / GIB,
        )
    return pool_bytes
