"""`kvplan explain`: where a server's memory went, what its KV figures imply, and what-ifs.

Input is a parsed startup log (spec/server_log.py). Everything the log printed is shown as
the server saw it; kvplan's own figures (bytes per token from the model's config, the
memory model's prediction) sit next to them, never in their place. The JSON schema
(kvplan.explain/1) is documented in the README.
"""

from __future__ import annotations

import math

from kvplan.plan.cpu_log import explain_cpu
from kvplan.plan.log_setup import ServerSetup, predict_capacity, server_setup, stage_layers_share
from kvplan.plan.memory_model import ENGINE_DESCRIPTIONS, GIB
from kvplan.plan.pool_sizing import model_max_len
from kvplan.spec import parse_kv_format
from kvplan.spec.resolve import load_gpu
from kvplan.spec.server_log import ServerLog, parse_server_log

SCHEMA = "kvplan.explain/1"
PRINT_PRECISION_GIB = 0.005  # logs print GiB with two decimals


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def memory_breakdown(log: ServerLog, setup: ServerSetup) -> dict[str, float | None]:
    """Per-GPU GiB as the server saw it; `unaccounted` is usable minus the parts it printed."""
    total = log.total_gpu_memory_gib
    usable = total * log.gpu_memory_utilization if total and log.gpu_memory_utilization else None
    activation = log.peak_activation_gib
    if activation is None and log.peak_torch_memory_gib is not None and log.weights_gib is not None:
        activation = (
            log.peak_torch_memory_gib - log.weights_gib
        )  # ~0.6.4 counts weights in its peak
    kv = log.available_kv_gib
    if kv is None and log.sglang_k_size_gb is not None and log.sglang_v_size_gb is not None:
        kv = log.sglang_k_size_gb + log.sglang_v_size_gb
    if kv is None and log.sglang_kv_size_gb is not None:
        kv = log.sglang_kv_size_gb
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
        "usable": _round(usable),
        "weights": weights,
        "weights_plus_non_torch": log.non_kv_gib,
        "activation_peak": _round(activation),
        "non_torch": non_torch,
        "cuda_graph": log.cuda_graph_gib,
        "kv": kv,
        "unaccounted": _round(unaccounted),
    }


def logged_kv_tokens(log: ServerLog, setup: ServerSetup) -> int | None:
    if log.gpu_kv_cache_tokens is not None:
        return log.gpu_kv_cache_tokens
    if log.num_gpu_blocks is not None:
        return log.num_gpu_blocks * setup.block_size
    if log.sglang_kv_tokens_allocated or log.sglang_max_total_num_tokens:
        return log.sglang_kv_tokens_allocated or log.sglang_max_total_num_tokens
    if log.max_tokens_in_kv_from_error is not None:
        return log.max_tokens_in_kv_from_error
    return None


def bytes_per_token(log: ServerLog, setup: ServerSetup, kv_gib: float | None) -> dict:
    """The log's implied KV bytes per token per GPU next to kvplan's, with the verdict."""
    tokens = logged_kv_tokens(log, setup)
    implied = kv_gib * GIB / tokens if kv_gib and tokens else None
    result = {
        "tokens": tokens,
        "blocks": log.num_gpu_blocks,
        "implied_bytes_per_token_per_gpu": _round(implied, 1),
        "kvplan_bytes_per_token_per_gpu": None,
        "kvplan_bytes_per_token": None,
        "agrees": None,
        "note": "",
    }
    model = setup.model
    if model is None:
        result["note"] = (
            "model not matched to a kvplan profile; pass --model PROFILE to compare bytes per token"
        )
        return result
    fmt = parse_kv_format(setup.kv_dtype, model)
    per_gpu = model.kv_bytes_per_token(fmt, setup.tp) * stage_layers_share(model, setup.pp)
    result.update(
        kvplan_bytes_per_token_per_gpu=round(per_gpu, 1),
        kvplan_bytes_per_token=round(model.kv_bytes_per_token(fmt), 1),
    )
    if model.has_windows or model.state_bytes_per_seq():
        result["note"] = (
            "hybrid/windowed model: newer vLLM derives the tokens figure from concurrency x "
            "max_model_len, so KV memory / tokens is not a per-token cost"
        )
        return result
    if kv_gib is not None and kv_gib <= 0:
        result["note"] = (
            f"no memory was left for the KV cache ({kv_gib} GiB): the server stopped at startup; "
            "the what-ifs show what frees memory"
        )
        return result
    if implied is None or kv_gib is None or tokens is None:
        result["note"] = "the log does not print both KV memory and a token count"
        return result
    step = 1 if setup.engine == "sglang" else setup.block_size
    # SGLang prints K and V separately (each rounded), so their sum carries twice the rounding
    precision = PRINT_PRECISION_GIB * (2 if log.sglang_k_size_gb is not None else 1)
    low = math.floor((kv_gib - precision) * GIB / (per_gpu * step)) * step
    high = math.floor((kv_gib + precision) * GIB / (per_gpu * step)) * step
    result["agrees"] = low <= tokens <= high
    result["note"] = (
        f"equal within block rounding ({low:,}-{high:,} tokens fit {kv_gib} GiB at kvplan's size)"
        if result["agrees"]
        else f"kvplan's size gives {low:,}-{high:,} tokens for {kv_gib} GiB"
    )
    return result


def _tokens(kv_bytes: float, per_token: float, step: int) -> int:
    return max(0, math.floor(kv_bytes / (per_token * step)) * step) if per_token else 0


def what_ifs(
    log: ServerLog, setup: ServerSetup, kv_gib: float | None, per_token: float | None
) -> list[dict]:
    """Changes in the server's own flags and what they would give (per GPU memory held fixed)."""
    if kv_gib is None or not per_token:
        return []
    sglang = setup.engine == "sglang"
    step = 1 if sglang else setup.block_size
    kv = kv_gib * GIB
    length = setup.max_model_len
    out: list[dict] = []

    def add(change: str, tokens: int, note: str) -> None:
        out.append(
            {
                "change": change,
                "kv_cache_tokens": tokens,
                "max_concurrency": round(tokens / length, 2) if length else None,
                "note": note,
            }
        )

    fmt = parse_kv_format(setup.kv_dtype, setup.model) if setup.model else None
    no_cache = kv <= 0  # the server stopped: only more memory helps, not a smaller KV entry
    if (fmt is None or fmt.bits > 8) and not no_cache:
        fp8_per_token = per_token * 8 / (fmt.bits if fmt else 16)
        add(
            "--kv-cache-dtype fp8" + ("_e4m3" if sglang else ""),
            _tokens(kv, fp8_per_token, step),
            "same KV memory, 1 byte per element (per-tensor scales)",
        )
    total = _total_bytes(log, setup)
    if total and setup.utilization < 0.95:
        flag = _utilization_flag(setup)
        extra = total * (0.95 - setup.utilization)
        add(
            f"{flag} 0.95",
            _tokens(kv + extra, per_token, step),
            f"+{extra / GIB:.2f} GiB per GPU for KV; less headroom for other processes and fragmentation",
        )
    if not sglang and not no_cache:
        out += _longest_request(
            log, setup, logged_kv_tokens(log, setup) or _tokens(kv, per_token, step)
        )
    if setup.model is not None:
        tp = setup.tp * 2
        fmt = fmt or parse_kv_format("auto", setup.model)
        weights = (
            log.weights_gib * GIB
            if log.weights_gib is not None
            else predict_capacity(setup).memory.weight_bytes
            if setup.known
            else None
        )
        if weights is not None and setup.model.num_heads % tp == 0:
            kv_tp = kv + weights / 2
            per_token_tp = setup.model.kv_bytes_per_token(fmt, tp) * stage_layers_share(
                setup.model, setup.pp
            )
            flag = "--tp" if sglang else "--tensor-parallel-size"
            add(
                f"{flag} {tp}",
                _tokens(kv_tp, per_token_tp, step),
                f"weights per GPU halve (+{weights / 2 / GIB:.2f} GiB for KV); KV heads split across {tp} GPUs; "
                "activation peak assumed unchanged",
            )
    return out


def _total_bytes(log: ServerLog, setup: ServerSetup) -> float | None:
    """The GPU's memory: as the log printed it, else its profile's; None without either."""
    if log.total_gpu_memory_gib:
        return log.total_gpu_memory_gib * GIB
    return setup.gpu.usable_memory_bytes if setup.gpu else None


def _utilization_flag(setup: ServerSetup) -> str:
    return "--mem-fraction-static" if setup.engine == "sglang" else "--gpu-memory-utilization"


def not_computed(log: ServerLog, setup: ServerSetup, what_ifs_shown: bool) -> str | None:
    """What the explanation leaves out for want of the model or the GPU, why, and the option
    that supplies it, in one line; None when nothing is left out."""
    no_memory = _total_bytes(log, setup) is None
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
        what.append(f"the {_utilization_flag(setup)} 0.95 what-if")
    if what_ifs_shown and setup.model is None:
        flag = "--tp" if setup.engine == "sglang" else "--tensor-parallel-size"
        what.append(f"the {flag} {setup.tp * 2} what-if")
    listed = ", ".join(what[:-1]) + " and " + what[-1] if len(what) > 1 else what[0]
    return f"not computed: {listed}, as {' and '.join(why)}; pass {' and '.join(supply)}"


def _longest_request(log: ServerLog, setup: ServerSetup, fits: int) -> list[dict]:
    """The --max-model-len at which one request fills the KV cache, capped at the longest the
    model serves (vLLM refuses a length past the one it derives from the model's config), or,
    for a model kvplan cannot size, at the length the server already runs; no row where the
    server already runs at that cap."""
    derived = model_max_len(setup.model) if setup.model is not None else None
    known = derived is not None
    longest = derived if derived is not None else log.max_model_len
    if longest is not None and fits > longest:
        if setup.max_model_len == longest:
            return []
        cap = (
            "the model's maximum (its config's length with RoPE scaling, as vLLM derives it)"
            if known
            else "the server's own max_model_len (kvplan does not know the model's maximum; pass --model)"
        )
        note = f"{cap}; the KV cache holds {fits:,} tokens, {fits / longest:.2f} requests of this length"
        return [
            {
                "change": f"--max-model-len {longest}",
                "kv_cache_tokens": fits,
                "max_concurrency": round(fits / longest, 2),
                "note": note,
            }
        ]
    note = "one request of this length fits the KV cache"
    if setup.engine == "vllm-v0":
        note += (
            "; v0 profiles max_model_len tokens, so a shorter length also frees activation memory"
        )
    if log.max_tokens_in_kv_from_error is not None:
        note += f" (the server's own estimate: {log.max_tokens_in_kv_from_error:,})"
    return [
        {
            "change": f"--max-model-len {fits}",
            "kv_cache_tokens": fits,
            "max_concurrency": 1.0,
            "note": note,
        }
    ]


def prediction(log: ServerLog, setup: ServerSetup) -> dict | None:
    """kvplan's memory model for the same setup, next to what the server printed."""
    if not setup.known:
        return None
    predicted = predict_capacity(setup)
    memory = predicted.memory
    logged = logged_kv_tokens(log, setup)
    return {
        "engine": setup.engine,
        "engine_model": ENGINE_DESCRIPTIONS[setup.engine],
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
    # What-ifs use kvplan's size where it is a per-token cost the log agrees with, else the log's own.
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
    return {
        "schema": SCHEMA,
        "engine": log.engine,
        "engine_generation": log.engine_generation,
        "version": log.version,
        "inputs": inputs,
        "derived": derived,
        "warnings": [*setup.conflicts, *log.disagreements()],
        "assumed": {k: v for k, v in assumed.items() if inputs.get(k) is None and k not in derived},
        "memory_gib": memory,
        "kv": kv,
        "prediction": prediction(log, setup),
        "what_ifs": changes,
        "not_computed": not_computed(log, setup, bool(changes)),
        "max_concurrency": log.max_concurrency,
        "refusal_max_tokens": log.max_tokens_in_kv_from_error,
        "recovered": log.recovered(),
    }
