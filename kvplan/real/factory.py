"""Real mode for `kvplan bench`: one transformers model shared by every optimization of a
run, a torch block pool per optimization (its KV format), the same scheduler and block
manager as simulated mode, and wall-clock step times."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from dataclasses import dataclass, replace
from typing import Any

from kvplan.core.kv import make_allocator
from kvplan.core.engine import Engine
from kvplan.real.model import load_causal_lm, resolve_device
from kvplan.real.runner import RealRunner
from kvplan.spec.hf_config import model_spec_from_config
from kvplan.spec import ModelSpec, parse_kv_format

GIB = 2**30
CPU_KV_GIB = 0.25  # default KV pool on CPU; on CUDA: 40% of the memory free after loading
CUDA_FREE_SHARE = 0.4
CPU_FLOPS = 50e9  # a rough CPU rate for the reload-or-recompute choice (copies win here anyway)


@dataclass
class LoadedModel:
    model: Any
    spec: ModelSpec
    device: str
    vocab_size: int


def load_for_bench(config: Any) -> LoadedModel:
    device = resolve_device(config.device)
    dtype = config.model_dtype if config.model_dtype != "auto" else ("fp32" if device == "cpu" else "bf16")
    model, raw = load_causal_lm(config.model, config.model_path, config.layers, dtype, device, config.seed)
    label = Path(config.model_path).name if config.model_path else config.model
    if label == "hf" and config.model_path:
        label = Path(config.model_path).parent.name
    spec = model_spec_from_config(raw, label, config.model_path or config.model)
    if any(g.kind not in ("full", "sliding") for g in spec.groups):
        raise ValueError(f"real mode supports MHA/GQA/MQA attention models; {spec.name} is {spec.kv_kind}")
    return LoadedModel(model, spec, device, int(raw.get("vocab_size") or spec.vocab_size))


def kv_budget_bytes(config: Any, loaded: LoadedModel) -> float:
    if config.kv_cache_gib is not None:
        return config.kv_cache_gib * GIB
    if loaded.device == "cpu":
        return CPU_KV_GIB * GIB
    import torch

    free, _ = torch.cuda.mem_get_info()
    return free * CUDA_FREE_SHARE


def build_real_engine(config: Any, optimization: Any, loaded: LoadedModel) -> tuple[Engine, Any]:
    from kvplan.bench import EngineSizing, make_tiers
    from kvplan.real.tier_storage import TensorTierStorage
    from kvplan.kernels.quant import allocate_kv_cache

    spec = loaded.spec
    if optimization.policy:
        raise ValueError(f"'{optimization.name}': in real mode eviction policies are measured on a text with "
                         "--quality-text (simulated mode applies them as --kv-budget)")
    kv_format = parse_kv_format(optimization.kv_dtype or config.kv_dtype, spec)
    if kv_format.scale == "kivi":
        raise ValueError("KIVI formats are measured with --quality-text only (the serving kernels store "
                         "per-token or group scales)")
    max_model_len = config.max_model_len or spec.max_position_embeddings or 4096
    slot_bytes = spec.kv_bytes_per_token(kv_format)
    budget = kv_budget_bytes(config, loaded)
    blocks = math.floor(budget / (slot_bytes * config.block_size))
    if blocks * config.block_size < max_model_len:
        raise ValueError(f"the KV pool ({blocks * config.block_size:,} tokens in {budget / GIB:.4f} GiB) is too small "
                         f"for one request of max_model_len {max_model_len} on {spec.name}; raise --kv-cache-gib")
    group = spec.token_groups[0]
    store_dtype = next(p.dtype for p in loaded.model.parameters())
    pool = [allocate_kv_cache(kv_format.name, blocks, config.block_size, group.num_kv_heads, group.head_dim,
                              dtype=store_dtype, device=loaded.device) for _ in range(spec.num_layers)]
    runner = RealRunner(loaded.model, pool, config.block_size, loaded.vocab_size, loaded.device,
                        backend=config.kernel_backend, seed=config.seed)
    sizing = EngineSizing(spec, kv_format, budget, slot_bytes, blocks * config.block_size, max_model_len)
    tiers = make_tiers(config, optimization, sizing)
    recompute_s = 0.0
    if tiers is not None:  # real bytes: pinned host memory and files, timed
        disk = Path(config.disk_dir) if config.disk_dir else Path(tempfile.mkdtemp(prefix="kvplan-offload-"))
        tiers.storage = TensorTierStorage(pool, disk)
        params = sum(p.numel() for p in loaded.model.parameters())
        recompute_s = 2.0 * params / CPU_FLOPS if loaded.device == "cpu" else 0.0
    allocator = make_allocator(optimization.allocator, blocks * config.block_size, config.block_size,
                               max_model_len, prefix_caching=optimization.prefix_caching, tiers=tiers,
                               recompute_s_per_token=recompute_s)
    # Swapping needs a host tier with real copies (the offload tiers); real mode recomputes.
    scheduler = replace(config.scheduler, preemption="recompute", swap_slots=0)
    return Engine(allocator, runner, scheduler, max_model_len), sizing
