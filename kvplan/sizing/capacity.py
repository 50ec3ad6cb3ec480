"""Analytic sizing: bytes per token, GPU fit, blocks, concurrency, roofline.

The figures follow how vLLM sizes its KV cache: usable memory = the driver's total x
gpu_memory_utilization; KV pool = usable - weights - the reserve the engine's profiling
run takes (activation peak, non-torch memory, CUDA graphs: engines/memory_model.py, per
engine version); blocks = pool // (block_size x bytes per token); "GPU KV cache size" =
blocks x block_size tokens; "maximum concurrency" = KV cache tokens / max_model_len.
The max_model_len default and the block count are the engines' too (engines/pool_sizing.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from kvplan import GIB
from kvplan.engines.engine_weights import loaded_weight_bytes_per_gpu
from kvplan.engines.hybrid_kv import vllm_kv_cache
from kvplan.engines.memory_model import MemoryProfile, predict_memory
from kvplan.engines.pool_sizing import model_max_len
from kvplan.engines.serving_engine import SGLangEngine, VllmV1Engine
from kvplan.engines.sglang_kv import sglang_kv_tokens
from kvplan.sizing.capacity_kernel import (
    KV_DOES_NOT_FIT,
    WEIGHTS_DO_NOT_FIT,
    pool_capacity,
    sequence_bytes,
)
from kvplan.sizing.plan_inputs import MAX_TOKENS, PlanInputs, valid_tps
from kvplan.spec import parse_kv_format


def engine_memory(
    inputs: PlanInputs, tp: int | None = None, context: int | None = None
) -> MemoryProfile:
    """The startup memory the chosen engine will see per GPU (before any --reserve-gib override)."""
    tp = tp or inputs.tp
    weights = loaded_weight_bytes_per_gpu(
        inputs.model, inputs.gpu, tp, inputs.weight_dtype, inputs.engine
    )
    total = inputs.gpu_memory_gib * GIB if inputs.gpu_memory_gib else None
    return predict_memory(
        inputs.model,
        inputs.gpu,
        tp=tp,
        utilization=inputs.utilization,
        max_model_len=context or inputs.max_model_len,
        weight_bytes=weights,
        settings=inputs.engine_settings,
        total_bytes=total,
    )


@dataclass(frozen=True)
class CapacityPlan:
    inputs: PlanInputs
    usable_bytes: float
    weight_bytes_per_gpu: float
    reserve_bytes: float
    kv_pool_bytes: float  # the KV pool per GPU (records: kv_budget_bytes_per_gpu)
    kv_bytes_per_token: float  # per GPU, every layer at full length
    naive_kv_bytes_per_token: float
    num_blocks: int
    seq_bytes: float  # one max_model_len sequence, per GPU, under the chosen allocation
    seq_bytes_ideal: float
    seq_bytes_full: float
    seq_bytes_unbudgeted: float  # one sequence under the chosen allocation, ignoring --kv-budget
    # of the KV pool, what sequences can use: whole blocks, plus the remainder for models whose
    # linear-attention layers keep a per-sequence state outside the blocks
    allocatable_bytes: float
    max_batch: int
    max_context: int
    verdict: str
    reasons: tuple[str, ...]
    suggestions: tuple[str, ...]

    @property
    def block_bytes(self) -> float:
        return self.inputs.block_size * self.kv_bytes_per_token

    @property
    def kv_cache_tokens(self) -> int:
        return self.num_blocks * self.inputs.block_size

    @property
    def max_concurrency(self) -> float:
        """vLLM's 'Maximum concurrency for M tokens per request'."""
        return self.allocatable_bytes / self.seq_bytes if self.seq_bytes else math.inf

    def engine_report(self) -> dict[str, float | int] | None:
        """What the engine itself prints for this pool: vLLM v1's KV cache groups (hybrid
        models get one group per layer type, pages unified) or SGLang's token pool, beside
        kvplan's own figures; None for vLLM V0, which prints blocks of one full-length table."""
        i = self.inputs
        kv_pool = max(0.0, self.kv_pool_bytes)
        if isinstance(i.serving_engine, VllmV1Engine):
            batched = engine_memory(i).batched_tokens
            cache = vllm_kv_cache(
                i.model,
                i.kv_format,
                i.tp,
                kv_pool,
                i.max_model_len,
                i.block_size,
                max_num_batched_tokens=batched,
            )
            return {
                "reported_tokens": cache.reported_tokens,
                "reported_concurrency": cache.reported_concurrency,
                "true_concurrency": cache.true_concurrency,
                "kv_cache_groups": len(cache.groups),
                "block_size": cache.block_size,
                "page_size_bytes": cache.page_size_bytes,
                "padding_bytes": cache.padding_bytes,
            }
        if isinstance(i.serving_engine, SGLangEngine):
            pool = sglang_kv_tokens(i.model, i.kv_format, i.tp, kv_pool)
            return {
                "reported_tokens": pool.max_total_num_tokens,
                "reported_concurrency": pool.max_total_num_tokens / i.max_model_len,
                "swa_tokens": pool.swa_tokens or 0,
            }
        return None

    @property
    def context_limit(self) -> int:
        """The longest context the model takes (the engine's maximum, pool_sizing.model_max_len),
        so "largest context" never names a length the engine would refuse."""
        return max(model_max_len(self.inputs.model) or MAX_TOKENS, self.inputs.max_model_len)

    @property
    def fits(self) -> bool:
        return self.verdict == "fits"

    def to_dict(self) -> dict:
        """The stable `kvplan estimate --json` record (schema kvplan.estimate/1, see README)."""
        i = self.inputs
        return {
            "schema": "kvplan.estimate/1",
            "model": i.model.name,
            "model_source": i.model.source,
            "kv_kind": i.model.kv_kind,
            "gpu": i.gpu.name,
            "tp": i.tp,
            "kv_dtype": i.kv_format.name,
            "weight_dtype": i.model.weight_format_name(i.weight_dtype),
            "context": i.max_model_len,
            "batch": i.batch,
            "block_size": i.block_size,
            "gpu_memory_utilization": i.utilization,
            "allocation": "ideal" if i.respect_windows else "full",
            "kv_budget": i.kv_budget,
            "engine": i.engine,
            "params_total": i.model.params.total,
            "params_active": i.model.params.active,
            # Byte counts are whole bytes; pool sizes round down, as an allocator would.
            "kv_bytes_per_token": round(i.model.kv_bytes_per_token(i.kv_format)),
            "kv_bytes_per_token_per_gpu": round(self.kv_bytes_per_token),
            "naive_kv_bytes_per_token": round(self.naive_kv_bytes_per_token),
            "seq_kv_bytes_full": math.ceil(self.seq_bytes_full),
            "seq_kv_bytes_ideal": math.ceil(self.seq_bytes_ideal),
            "seq_kv_bytes_without_budget": math.ceil(self.seq_bytes_unbudgeted),
            "request_kv_bytes_per_gpu": math.ceil(self.seq_bytes * i.batch),
            "usable_bytes_per_gpu": math.floor(self.usable_bytes),
            "weight_bytes_per_gpu": math.ceil(self.weight_bytes_per_gpu),
            "reserve_bytes_per_gpu": math.ceil(self.reserve_bytes),
            "kv_budget_bytes_per_gpu": math.floor(self.kv_pool_bytes),
            "block_bytes_per_gpu": round(self.block_bytes),
            "num_blocks": self.num_blocks,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": round(self.max_concurrency, 4),
            "max_batch_at_context": self.max_batch,
            "max_context_at_batch": self.max_context,
            "engine_reports": _rounded(self.engine_report()),
            "smallest_tp_for_weights": smallest_tp_for_weights(i),
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "suggestions": list(self.suggestions),
        }


def _rounded(report: dict[str, float | int] | None) -> dict[str, float | int] | None:
    return (
        None
        if report is None
        else {k: round(v, 4) if isinstance(v, float) else v for k, v in report.items()}
    )


def _seq_bytes(
    inputs: PlanInputs, context: int, respect_windows: bool, budgeted: bool = True
) -> float:
    """Bytes one sequence holds per GPU, rounded up to whole blocks per attention group;
    with `budgeted`, each layer keeps at most --kv-budget tokens."""
    return float(
        sequence_bytes(
            inputs.model,
            inputs.kv_format,
            inputs.tp,
            context,
            inputs.block_size,
            respect_windows=respect_windows,
            kv_budget=inputs.kv_budget if budgeted else None,
        )
    )


def _max_context(inputs: PlanInputs, allocatable: float, batch: int, limit: int) -> int:
    """Largest context up to `limit` whose `batch` sequences fit in `allocatable` bytes
    (binary search: windows make the size piecewise linear; a --kv-budget makes it flat, so
    the limit binds)."""
    fits = lambda n: batch * _seq_bytes(inputs, n, inputs.respect_windows) <= allocatable  # noqa: E731
    if not fits(1):
        return 0
    if fits(limit):
        return limit
    low, high = 1, 1
    while fits(high):
        low, high = high, min(high * 2, limit)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def plan(inputs: PlanInputs, suggest: bool = True) -> CapacityPlan:
    model, tp = inputs.model, inputs.tp
    memory = engine_memory(inputs)
    usable, weights = memory.usable_bytes, memory.weight_bytes
    reserve = inputs.reserve_bytes if inputs.reserve_bytes is not None else memory.reserve_bytes
    context = inputs.max_model_len
    # the same lines a sweep runs over its grid, at one point
    pool = pool_capacity(
        model,
        inputs.kv_format,
        tp,
        usable=usable,
        weights=weights,
        reserve=reserve,
        kv_cache_bytes=inputs.kv_cache_bytes,
        context=context,
        batch=inputs.batch,
        block=inputs.block_size,
        respect_windows=inputs.respect_windows,
        kv_budget=inputs.kv_budget,
    )
    kv_pool, blocks, seq = pool.kv_pool, pool.num_blocks, float(pool.seq_bytes)
    per_token = model.kv_bytes_per_token(inputs.kv_format, tp)
    # the kernel sized the chosen allocation; the other one is sized here
    windows = inputs.respect_windows
    seq_full = _seq_bytes(inputs, context, False) if windows else seq
    seq_ideal = seq if windows else _seq_bytes(inputs, context, True)
    shell = CapacityPlan(
        inputs,
        usable,
        weights,
        reserve,
        kv_pool,
        per_token,
        model.naive_kv_bytes_per_token(inputs.kv_format),
        blocks,
        seq,
        seq_ideal,
        seq_full,
        _seq_bytes(inputs, context, inputs.respect_windows, budgeted=False),
        pool.allocatable,
        0,
        0,
        "",
        (),
        (),
    )
    allocatable = pool.allocatable
    max_batch = int(pool.max_batch)
    max_context = (
        _max_context(inputs, allocatable, inputs.batch, shell.context_limit)
        if allocatable > 0
        else 0
    )

    reasons: list[str] = []
    verdict = pool.verdict
    if verdict == WEIGHTS_DO_NOT_FIT:
        reasons.append(
            f"weights need {weights / GIB:.1f} GiB per GPU + {reserve / GIB:.1f} GiB reserve, "
            f"but only {usable / GIB:.1f} GiB is usable at {inputs.utilization:.0%}"
        )
    elif verdict == KV_DOES_NOT_FIT:
        reasons.append(
            f"{inputs.batch} x {context:,} tokens need {seq * inputs.batch / GIB:.2f} GiB of KV "
            f"per GPU; the KV budget is {max(kv_pool, 0) / GIB:.2f} GiB"
        )
    result = replace(
        shell, max_batch=max_batch, max_context=max_context, verdict=verdict, reasons=tuple(reasons)
    )
    return replace(result, suggestions=_suggestions(result)) if suggest else result


def _suggestions(result: CapacityPlan) -> tuple[str, ...]:
    """What would make a plan that does not fit fit: a shorter context, FP8 KV, more GPUs."""
    inputs = result.inputs
    tips: list[str] = []
    if result.verdict != "fits":
        if result.verdict == "kv-does-not-fit" and result.max_context > 0:
            tips.append(
                f"largest max_model_len that fits at batch {inputs.batch}: {result.max_context:,} "
                f"(vLLM: --max-model-len {result.max_context})"
            )
        if result.verdict == "kv-does-not-fit" and result.max_batch > 0:
            tips.append(f"largest batch at {inputs.max_model_len:,} tokens: {result.max_batch}")
        weights_fp8 = (inputs.weight_dtype or inputs.model.weight_dtype) == "fp8"
        # FP8 weights halve a 16-bit model's weights and leave the KV pool the rest: said when
        # the weights are what does not fit, and when the KV pool they free makes it fit
        fp8_weights = (
            plan(replace(inputs, weight_dtype="fp8"), suggest=False)
            if inputs.gpu.fp8_support and not weights_fp8 and inputs.kv_cache_bytes is None
            else None
        )
        if result.verdict == "weights-do-not-fit" and fp8_weights is not None:
            outcome = "fits" if fp8_weights.fits else f"still does not fit ({fp8_weights.verdict})"
            tips.append(f"FP8 weights (--weight-dtype fp8): {outcome}")
        elif inputs.kv_format.bits > 8 and inputs.gpu.fp8_support:
            fp8 = plan(replace(inputs, kv_format=parse_kv_format("fp8")), suggest=False)
            tips.append(
                f"FP8 KV cache (--kv-dtype fp8): {'fits' if fp8.fits else 'still does not fit'}, "
                f"{fp8.kv_cache_tokens:,} tokens of KV cache"
            )
        if result.verdict == "kv-does-not-fit" and fp8_weights is not None and fp8_weights.fits:
            tips.append(
                f"FP8 weights (--weight-dtype fp8): fits, {fp8_weights.kv_cache_tokens:,} tokens "
                "of KV cache"
            )
        for tp in valid_tps(inputs.model):
            if tp > inputs.tp:
                bigger = plan(replace(inputs, tp=tp), suggest=False)
                if bigger.fits:
                    tips.append(
                        f"TP={tp} ({tp} x {inputs.gpu.name}) fits, {bigger.max_concurrency:.2f}x "
                        "concurrency"
                    )
                    break
        if inputs.model.has_windows and not inputs.respect_windows:
            ideal = plan(replace(inputs, respect_windows=True), suggest=False)
            if ideal.fits:
                tips.append(
                    "fits if sliding-window layers keep only their window (--allocation ideal; "
                    "vLLM's hybrid KV cache manager does this)"
                )
    return tuple(tips)


def check_can_fit_somehow(inputs: PlanInputs) -> None:
    """A model whose weights fit at no TP degree is an input error, not a plan."""
    if inputs.kv_cache_bytes is None and smallest_tp_for_weights(inputs) is None:
        largest = valid_tps(inputs.model)[-1]
        weights = plan(replace(inputs, tp=largest), suggest=False).weight_bytes_per_gpu
        raise ValueError(
            f"{inputs.model.name} cannot fit on {inputs.gpu.name} at any TP up to {largest}: "
            f"weights alone need {weights / GIB:.1f} GiB per GPU; choose a GPU with more memory "
            "or a smaller --weight-dtype"
        )


def smallest_tp_for_weights(inputs: PlanInputs) -> int | None:
    """The smallest TP degree at which weights + reserve fit in usable memory, if any."""
    for tp in valid_tps(inputs.model):
        if plan(replace(inputs, tp=tp), suggest=False).verdict != "weights-do-not-fit":
            return tp
    return None
