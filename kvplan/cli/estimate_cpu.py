"""`kvplan estimate MODEL --device cpu`: the KV cache vLLM's CPU backend sizes
(kvplan/engines/cpu_kv.py).

The CPU shares estimate's settings: --kv-cache-space is --kv-cache-gib's (the KV memory,
vLLM's kv_cache_memory_bytes, which VLLM_CPU_KVCACHE_SPACE sets) and --cpu-memory-gib
--gpu-mem-gib's (the device's memory: the NUMA node's), each by the name a CPU user knows;
--gpu-memory-utilization is vLLM's own flag (a share of the node's memory on CPU) and
--reserve-gib the worker's memory besides its weights. Options that size a GPU only are
refused rather than ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvplan import GIB
from kvplan.cli.cpu_tables import render_cpu_plan
from kvplan.cli.resolution import render_resolution, resolution_record
from kvplan.engines.cpu_kv import CpuInputs, plan_cpu
from kvplan.engines.engine_releases import parse_version
from kvplan.engines.serving_engine import VllmV1Engine, serving_engine
from kvplan.results.atomic import strict_json
from kvplan.spec import parse_kv_format
from kvplan.spec.resolve import resolve_model

DEVICES = ("gpu", "cpu")
# estimate's parameters that size a GPU only, with the flag a user typed
GPU_ONLY = {
    "gpu": "--gpu",
    "allocation": "--allocation",
    "kv_budget": "--kv-budget",
    "sweep_axes": "--sweep",
    "csv_path": "--csv",
    "out": "--out",
    "max_num_seqs": "--max-num-seqs",
}


def check_device(device: str) -> None:
    if device not in DEVICES:
        raise ValueError(f"--device must be gpu or cpu, got '{device}'")


def one_of(cpu_flag: str, cpu_value: float | None, flag: str, value: float | None) -> float | None:
    """A setting a CPU names its own way (--kv-cache-space is --kv-cache-gib's), given once."""
    if cpu_value is not None and value is not None:
        raise ValueError(
            f"--{cpu_flag} and --{flag} set the same memory; pass one (--{cpu_flag} on a CPU)"
        )
    return cpu_value if cpu_value is not None else value


def cpu_only(**values: float | None) -> None:
    """Refuse the CPU's own options on a GPU."""
    for name, value in values.items():
        if value is not None:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} sizes vLLM's CPU backend; pass --device cpu with it")


def typed(context: Any, name: str) -> bool:
    """Whether the command line gave the option `name` (not its default)."""
    source = context.get_parameter_source(name) if context is not None else None
    return source is not None and source.name != "DEFAULT"


def estimate_cpu(
    model: str,
    *,
    tp: int,
    kv_dtype: str,
    context: int | None,
    batch: int,
    block_size: int,
    gpu_memory_utilization: float | None,
    weight_dtype: str | None,
    params_b: float | None,
    engine: str,
    engine_version: str | None,
    max_num_batched_tokens: int | None,
    reserve_gib: float | None,
    kv_cache_gib: float | None,
    node_memory_gib: float | None,
    as_json: bool,
    given: Callable[[str], bool] = lambda name: False,
) -> None:
    """Refuse what sizes a GPU only, then plan and print the CPU worker's KV cache; `given`
    says whether the command line gave an option (a default is not the user's)."""
    for name, flag in GPU_ONLY.items():
        if given(name):
            raise ValueError(
                f"{flag} sizes a GPU, and --device cpu sizes vLLM's CPU backend; drop {flag}"
            )
    if not isinstance(serving_engine(engine, engine_version), VllmV1Engine):
        raise ValueError(
            f"--device cpu models vLLM's CPU backend (V1), not --engine {engine}; drop --engine "
            "or pass --engine vllm"
        )
    resolved = resolve_model(model)
    spec = resolved.spec
    if params_b is not None:
        spec = spec.with_param_count(params_b * 1e9)
    inputs = CpuInputs(
        model=spec,
        kv_format=parse_kv_format(kv_dtype, spec),
        tp=tp,
        context=context,
        batch=batch,
        block_size=block_size if given("block_size") else None,
        kv_cache_bytes=None if kv_cache_gib is None else kv_cache_gib * GIB,
        node_memory_gib=node_memory_gib,
        utilization=gpu_memory_utilization,
        overhead_bytes=None if reserve_gib is None else reserve_gib * GIB,
        weight_dtype=weight_dtype,
        max_num_batched_tokens=max_num_batched_tokens,
        engine_version=parse_version(engine_version),
    )
    result = plan_cpu(inputs)
    if as_json:
        record = {**result.to_dict(), "model_resolution": resolution_record(resolved)}
        print(strict_json(record, indent=2))
        return
    render_resolution(resolved)
    render_cpu_plan(result)
