"""What-ifs in a server's own flags: what the same GPU would hold with each one changed."""

from __future__ import annotations

import math

from kvplan import GIB
from kvplan.engines.pool_sizing import model_max_len
from kvplan.engines.serving_engine import VllmEngine, VllmV0Engine
from kvplan.logs.log_capacity import logged_kv_tokens
from kvplan.logs.log_setup import ServerSetup, predict_capacity, stage_layers_share
from kvplan.spec import parse_kv_format
from kvplan.spec.server_log import ServerLog


def _tokens(kv_bytes: float, per_token: float, step: int) -> int:
    return max(0, math.floor(kv_bytes / (per_token * step)) * step) if per_token else 0


def what_ifs(
    log: ServerLog, setup: ServerSetup, kv_gib: float | None, per_token: float | None
) -> list[dict]:
    """Changes in the server's own flags and what they would give (per GPU memory held fixed)."""
    if kv_gib is None or not per_token:
        return []
    engine = setup.serving_engine
    step = engine.page_tokens(setup.block_size)
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
            f"--kv-cache-dtype {engine.fp8_kv_dtype}",
            _tokens(kv, fp8_per_token, step),
            "same KV memory, 1 byte per element (per-tensor scales)",
        )
    total = total_bytes(log, setup)
    if total and setup.utilization < 0.95:
        flag = engine.utilization_flag
        extra = total * (0.95 - setup.utilization)
        add(
            f"{flag} 0.95",
            _tokens(kv + extra, per_token, step),
            f"+{extra / GIB:.2f} GiB per GPU for KV; less headroom for other processes and "
            "fragmentation",
        )
    if isinstance(engine, VllmEngine) and not no_cache:
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
            add(
                f"{engine.tp_flag} {tp}",
                _tokens(kv_tp, per_token_tp, step),
                f"weights per GPU halve (+{weights / 2 / GIB:.2f} GiB for KV); KV heads split "
                f"across {tp} GPUs; "
                "activation peak assumed unchanged",
            )
    return out


def total_bytes(log: ServerLog, setup: ServerSetup) -> float | None:
    """The GPU's memory: as the log printed it, else its profile's; None without either."""
    if log.total_gpu_memory_gib:
        return log.total_gpu_memory_gib * GIB
    return setup.gpu.usable_memory_bytes if setup.gpu else None


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
            else "the server's own max_model_len (kvplan does not know the model's maximum; pass "
            "--model)"
        )
        note = (
            f"{cap}; the KV cache holds {fits:,} tokens, {fits / longest:.2f} requests of "
            "this length"
        )
        return [
            {
                "change": f"--max-model-len {longest}",
                "kv_cache_tokens": fits,
                "max_concurrency": round(fits / longest, 2),
                "note": note,
            }
        ]
    note = "one request of this length fits the KV cache"
    if isinstance(setup.serving_engine, VllmV0Engine):
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
