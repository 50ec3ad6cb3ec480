"""The KV capacity a startup log shows, and what kvplan makes of it.

A server prints its KV capacity as tokens (vLLM V1, SGLang), blocks (vLLM V0), the tokens a
refused request could have had, or only the memory it gave the KV cache. `logged_capacity` is
that figure; `capacity_from_log` is kvplan's figure in the same unit from what the log shows
besides: the engine's KV arithmetic on the logged KV memory where it is printed (only the
model's config is needed), else kvplan's memory model of the whole GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvplan import GIB
from kvplan.engines.memory_model import MemoryFit
from kvplan.logs.log_setup import (
    CapacityPrediction,
    ServerSetup,
    predict_capacity,
    stage_layers_share,
)
from kvplan.spec import parse_kv_format
from kvplan.spec.server_log import ServerLog

PRINT_PRECISION_GIB = 0.005  # logs print GiB with two decimals


def round_or_none(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def logged_kv_tokens(log: ServerLog, setup: ServerSetup) -> int | None:
    """The capacity the log prints, in tokens (its blocks at the server's block size); None
    where it prints only memory or nothing."""
    logged = logged_capacity(log)
    return None if logged is None else logged.tokens(setup.block_size)


def bytes_per_token(log: ServerLog, setup: ServerSetup, kv_gib: float | None) -> dict:
    """The log's implied KV bytes per token per GPU next to kvplan's, with the verdict."""
    tokens = logged_kv_tokens(log, setup)
    implied = kv_gib * GIB / tokens if kv_gib and tokens else None
    result = {
        "tokens": tokens,
        "blocks": log.num_gpu_blocks,
        "implied_bytes_per_token_per_gpu": round_or_none(implied, 1),
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
    step = setup.serving_engine.page_tokens(setup.block_size)
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


@dataclass(frozen=True)
class LoggedCapacity:
    """The KV capacity figure a server printed: `unit` is "tokens", "blocks" or "GiB" (a log
    whose only figure is the memory it gave the KV cache)."""

    unit: str
    value: float

    def tokens(self, block_size: int) -> int | None:
        """The figure in tokens (blocks of `block_size` each); None for a memory figure."""
        if self.unit == "GiB":
            return None
        return int(self.value) * (block_size if self.unit == "blocks" else 1)


def logged_capacity(log: ServerLog) -> LoggedCapacity | None:
    """The capacity figure the log prints, the most direct first."""
    if log.gpu_kv_cache_tokens is not None:
        return LoggedCapacity("tokens", log.gpu_kv_cache_tokens)
    if log.num_gpu_blocks is not None:
        return LoggedCapacity("blocks", log.num_gpu_blocks)
    if log.max_tokens_in_kv_from_error is not None:
        return LoggedCapacity("tokens", log.max_tokens_in_kv_from_error)
    if log.sglang_kv_tokens_allocated or log.sglang_max_total_num_tokens:
        return LoggedCapacity(
            "tokens", log.sglang_kv_tokens_allocated or log.sglang_max_total_num_tokens or 0
        )
    if log.available_kv_gib is not None and log.available_kv_gib > 0:
        return LoggedCapacity("GiB", log.available_kv_gib)
    return None


def sglang_kv_gib(log: ServerLog) -> float | None:
    """The KV pool SGLang printed: its K and V sizes together, else its one KV size."""
    if log.sglang_k_size_gb is not None and log.sglang_v_size_gb is not None:
        return log.sglang_k_size_gb + log.sglang_v_size_gb
    return log.sglang_kv_size_gb


def logged_kv_bytes(log: ServerLog) -> float | None:
    """The memory the server gave its KV cache, per GPU, where the log prints it."""
    if log.available_kv_gib is not None and log.available_kv_gib > 0:
        return log.available_kv_gib * GIB
    sglang = sglang_kv_gib(log)
    return None if sglang is None else sglang * GIB


def in_unit(prediction: CapacityPrediction, unit: str) -> float:
    """A prediction in the unit of the figure it is compared with."""
    if unit == "GiB":
        return round(prediction.kv_bytes / GIB, 2)
    return prediction.num_blocks if unit == "blocks" else prediction.kv_cache_tokens


@dataclass(frozen=True)
class CapacityFromLog:
    """kvplan's capacity for a log, from what it shows, beside the figure it printed."""

    logged: LoggedCapacity
    predicted: float
    basis: str  # "logged KV memory" or "memory model"
    kv_cache_tokens: int  # the predicted capacity in tokens, whatever the logged unit

    @property
    def error_pct(self) -> float:
        if not self.logged.value:
            return 0.0 if self.predicted == self.logged.value else 100.0
        return (self.predicted - self.logged.value) / self.logged.value * 100


def capacity_from_log(
    log: ServerLog, setup: ServerSetup, fit: MemoryFit | None = None
) -> CapacityFromLog | None:
    """kvplan's capacity in the logged figure's unit: from the logged KV memory where the log
    prints it (the engine's KV arithmetic alone), else from the memory model (which needs the
    GPU); None where the model is unknown, the GPU too (without KV memory), or the log prints
    no capacity."""
    logged = logged_capacity(log)
    if logged is None or setup.model is None:
        return None
    kv_bytes = logged_kv_bytes(log)
    if kv_bytes is not None and logged.unit != "GiB":
        predicted = predict_capacity(setup, fit=fit, kv_bytes=kv_bytes)
        basis = "logged KV memory"
    elif setup.known:
        predicted = predict_capacity(setup, fit=fit)
        basis = "memory model"
    else:
        return None
    return CapacityFromLog(
        logged, in_unit(predicted, logged.unit), basis, predicted.kv_cache_tokens
    )
