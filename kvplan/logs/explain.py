"""`kvplan explain`: where a server's memory went, what its KV figures imply, and what-ifs.

Input is a parsed startup log (spec/server_log.py). Everything the log printed is shown as
the server saw it; kvplan's own figures (bytes per token from the model's config, the
memory model's prediction) sit next to them, never in their place. The JSON schema
(kvplan.explain/1) is documented in the README.
"""

from __future__ import annotations

from kvplan import GIB
from kvplan.logs.cpu_log import explain_cpu
from kvplan.logs.log_capacity import (
    bytes_per_token,
    capacity_from_log,
    logged_kv_tokens,
    round_or_none,
    sglang_kv_gib,
)
from kvplan.logs.log_setup import ServerSetup, predict_capacity, server_setup
from kvplan.logs.what_ifs import total_bytes, what_ifs
from kvplan.spec.resolve import load_gpu
from kvplan.spec.server_log import ServerLog, parse_server_log

SCHEMA = "kvplan.explain/1"


def memory_breakdown(log: ServerLog, setup: ServerSetup) -> dict[str, float | None]:
    """Per-GPU GiB as the server saw it; `unaccounted` is usable minus the parts it printed."""
    total = log.total_gpu_memory_gib
    usable = total * log.gpu_memory_utilization if total and log.gpu_memory_utilization else None
    activation = log.peak_activation_gib
    if activation is None and log.peak_torch_memory_gib is not None and log.weights_gib is not None:
        activation = (
            log.peak_torch_memory_gib - log.weights_gib
        )  # ~0.6.4 counts weights in its peak
    kv = log.available_kv_gib if log.available_kv_gib is not None else sglang_kv_gib(log)
    weights = log.weights_gib
    non_torch = log.non_torch_gib
    # the newer per-worker summary prints weights + non-torch as one figure
    parts = [
        weights if weights is not None else log.non_kv_gib,
        activation,
        non_torch,
        log.cuda_graph_gib,
        kv,
    ]
    printed = [p for p in parts if p is not None]
    unaccounted = (
        usable - sum(printed)
        if usable is not None and kv is not None and len(printed) >= 3
        else None
    )
    return {
        "total": total,
        "usable": round_or_none(usable),
        "weights": weights,
        "weights_plus_non_torch": log.non_kv_gib,
        "activation_peak": round_or_none(activation),
        "non_torch": non_torch,
        "cuda_graph": log.cuda_graph_gib,
        "kv": kv,
        "unaccounted": round_or_none(unaccounted),
    }


def not_computed(log: ServerLog, setup: ServerSetup, what_ifs_shown: bool) -> str | None:
    """What the explanation leaves out for want of the model or the GPU, why, and the option
    that supplies it, in one line; None when nothing is left out."""
    no_memory = total_bytes(log, setup) is None
    if setup.model is not None and not no_memory:
        return None
    what, why, supply = ["kvplan's model of where the memory went"], [], []
    if setup.model is None:
        why.append(
            f"kvplan cannot size the model '{log.model}'" if log.model else "the log names no model"
        )
        supply.append("--model NAME")
    if no_memory:
        why.append(
            f"the log names the GPU as '{log.gpu_name}', which kvplan has no profile of"
            if log.gpu_name
            else "the log shows neither the GPU nor its memory"
        )
        supply.append("--gpu NAME (kvplan profiles gpus lists them)")
    if what_ifs_shown and no_memory and setup.utilization < 0.95:
        what.append(f"the {setup.serving_engine.utilization_flag} 0.95 what-if")
    if what_ifs_shown and setup.model is None:
        what.append(f"the {setup.serving_engine.tp_flag} {setup.tp * 2} what-if")
    listed = ", ".join(what[:-1]) + " and " + what[-1] if len(what) > 1 else what[0]
    return f"not computed: {listed}, as {' and '.join(why)}; pass {' and '.join(supply)}"


def prediction(log: ServerLog, setup: ServerSetup) -> dict | None:
    """kvplan's memory model for the same setup, next to what the server printed."""
    if not setup.known:
        return None
    predicted = predict_capacity(setup)
    memory = predicted.memory
    logged = logged_kv_tokens(log, setup)
    return {
        "engine": setup.engine,
        "engine_model": setup.serving_engine.description(setup.settings.version),
        "total_gib": round(memory.total_bytes / GIB, 2),
        "usable_gib": round(memory.usable_bytes / GIB, 2),
        "weights_gib": round(memory.weight_bytes / GIB, 2),
        "activation_peak_gib": round(memory.activation_bytes / GIB, 2),
        "non_torch_gib": round(memory.non_torch_bytes / GIB, 2),
        "cuda_graph_gib": round(memory.cuda_graph_bytes / GIB, 2),
        "kv_gib": round(memory.kv_bytes / GIB, 2),
        "profiling_batch_tokens": memory.batched_tokens,
        "sampler_rows": memory.sampler_rows,
        "kv_cache_tokens": predicted.kv_cache_tokens,
        "error_pct": round((predicted.kv_cache_tokens - logged) / logged * 100, 2)
        if logged
        else None,
    }


def explain(
    text: str, model: str | None = None, gpu: str | None = None, source: str = "the log"
) -> dict:
    """The kvplan.explain/1 record for one log (ValueError if it shows nothing usable, or a
    figure no server prints: the message names `source` and the line)."""
    named_gpu = load_gpu(gpu) if gpu is not None else None  # an unknown name is refused first
    bound = (
        (
            max(named_gpu.memory_gib, named_gpu.usable_memory_bytes / GIB),
            f"the memory of {named_gpu.name}",
        )
        if named_gpu is not None
        else None
    )
    log = parse_server_log(text, source, bound)
    if log.device == "cpu":
        if gpu is not None:
            raise ValueError(
                f"{source} is a vLLM CPU server's log (its KV memory is a NUMA node's), so "
                "--gpu does not apply; drop --gpu"
            )
        return explain_cpu(log, server_setup(log, model_name=model), SCHEMA)
    setup = server_setup(log, model_name=model, gpu_name=gpu)
    memory = memory_breakdown(log, setup)
    kv = bytes_per_token(log, setup, memory["kv"])
    # What-ifs use kvplan's size where it is a per-token cost the log agrees with, else the log's
    # own.
    dense = setup.model is not None and not (
        setup.model.has_windows or setup.model.state_bytes_per_seq()
    )
    use_kvplan = dense and kv["agrees"] is not False and kv["kvplan_bytes_per_token_per_gpu"]
    per_token = (
        kv["kvplan_bytes_per_token_per_gpu"]
        if use_kvplan
        else kv["implied_bytes_per_token_per_gpu"]
    )
    inputs = {
        "model": log.model,
        "model_profile": setup.model_match,
        "model_profile_note": setup.model_note,
        "gpu": log.gpu_name,
        "gpu_profile": setup.gpu.name if setup.gpu else None,
        "tensor_parallel_size": log.tensor_parallel_size,
        "world_size": log.world_size,
        "pipeline_parallel_size": log.pipeline_parallel_size,
        "data_parallel_size": log.data_parallel_size,
        "gpu_memory_utilization": log.gpu_memory_utilization,
        "max_model_len": log.max_model_len,
        "kv_cache_dtype": log.kv_cache_dtype,
        "block_size": log.block_size,
        "max_num_batched_tokens": log.max_num_batched_tokens,
        "max_num_seqs": log.max_num_seqs,
        "enforce_eager": log.enforce_eager,
        "enable_prefix_caching": log.enable_prefix_caching,
        "num_speculative_tokens": log.num_speculative_tokens,
        "speculative_method": log.speculative_method,
        "quantization": log.quantization,
        "dtype": log.dtype,
    }
    assumed = {
        "tensor_parallel_size": setup.tp,
        "gpu_memory_utilization": setup.utilization,
        "max_model_len": setup.max_model_len,
        "block_size": setup.block_size,
        "kv_cache_dtype": setup.kv_dtype,
    }
    derived = setup.derived
    changes = what_ifs(log, setup, memory["kv"], per_token)
    capacity = capacity_from_log(log, setup)
    return {
        "schema": SCHEMA,
        "engine": log.engine,
        "engine_generation": log.engine_generation,
        "version": log.version,
        "inputs": inputs,
        "sources": {key: log.sources[key] for key in (*inputs, "version") if key in log.sources},
        "derived": derived,
        "warnings": [*setup.conflicts, *log.disagreements()],
        "assumed": {k: v for k, v in assumed.items() if inputs.get(k) is None and k not in derived},
        "memory_gib": memory,
        "kv": kv,
        "prediction": prediction(log, setup),
        "capacity": None
        if capacity is None
        else {
            "unit": capacity.logged.unit,
            "logged": capacity.logged.value,
            "kvplan": capacity.predicted,
            "kv_cache_tokens": capacity.kv_cache_tokens,
            "basis": capacity.basis,
            "error_pct": round(capacity.error_pct, 2),
        },
        "what_ifs": changes,
        "not_computed": not_computed(log, setup, bool(changes)),
        "max_concurrency": log.max_concurrency,
        "refusal_max_tokens": log.max_tokens_in_kv_from_error,
        "recovered": log.recovered(),
    }
