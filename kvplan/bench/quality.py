"""`kvplan bench --mode real --quality-text FILE`: the memory / quality table of KV formats
and eviction policies on one real model and text, as result records (kind "quality")."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvplan import GIB
from kvplan.bench.optimizations import parse_optimizations
from kvplan.results import ResultRecord, make_record, write_jsonl
from kvplan.results.latest import DEFAULT_FOLDER, default_stem
from kvplan.spec.setting_error import SettingError

DEFAULT_POOL_GIB = 0.25  # the KV pool max_concurrency is computed against, without --kv-cache-gib


def served_columns(
    rows: list[dict[str, Any]],
    optimizations: list[Any],
    tokens: list[int],
    model: str,
    model_path: Path | None,
    layers: int | None,
    dtype: str,
    seed: int,
    kv_budget: int | None,
) -> None:
    """Add served_perplexity / served_kl_mean: the same text teacher-forced through the
    serving engine (scheduler, paged pool, policy, kernels; kvplan/real/teacher.py), for
    each optimization real serving runs (others are left without)."""
    from dataclasses import replace

    from kvplan.bench.optimizations import parse_optimization
    from kvplan.core.engine_factory import RealConfig, SizingConfig
    from kvplan.kernels.kivi import KIVI_GROUP
    from kvplan.real.factory import RealEngineFactory
    from kvplan.real.teacher import served_logits, served_quality
    from kvplan.spec import parse_kv_format

    block = 16
    sizing = SizingConfig(
        model=str(model_path) if model_path else model,
        gpu="l4",
        kv_dtype=dtype,
        block_size=block,
        max_model_len=len(tokens) + KIVI_GROUP,
    )
    factory = RealEngineFactory(
        sizing,
        RealConfig(
            device="cpu",
            model_path=str(model_path) if model_path else None,
            layers=layers,
            model_dtype=dtype,
        ),
        seed=seed,
        kv_budget=kv_budget,
    )
    # a pool of one text (and a block or two to spare) in the widest format: the model's own
    # precision
    slot_bytes = factory.loaded.spec.kv_bytes_per_token(parse_kv_format(dtype, factory.loaded.spec))
    pooled = replace(sizing, kv_cache_gib=(len(tokens) + 2 * KIVI_GROUP) * slot_bytes / GIB)
    reference = None
    for row, optimization in zip(rows, optimizations):
        kivi = parse_kv_format(optimization.kv_dtype or dtype, factory.loaded.spec).scale == "kivi"
        # KIVI's pool keeps one key group per block, so its engine runs 32-token blocks
        factory.sizing = (
            replace(pooled, block_size=KIVI_GROUP) if kivi else replace(pooled, block_size=block)
        )
        if (
            "layer_budgets" in row
        ):  # entropy-budget: the evaluator's split, calibrated on the same text
            factory.layer_budgets = tuple(row["layer_budgets"])
        try:
            factory.check(optimization)  # policy, budget and format as real serving takes them
        except ValueError:
            continue  # h2o-holes, a budget within one block: the evaluator only
        if reference is None:
            reference = served_logits(factory, parse_optimization("paged"), tokens)
        row.update(served_quality(factory, optimization, tokens, reference))


@dataclass(frozen=True)
class QualityRun:
    rows: list[dict[str, Any]]  # one per optimization, the first the baseline
    records: list[ResultRecord]
    label: str  # the model's name
    text_tokens: int
    out: Path


def run_quality_table(
    model: str,
    model_path: Path | None,
    layers: int | None,
    device: str,
    model_dtype: str,
    seed: int,
    names: list[str],
    text: Path,
    tokenizer: Path | None,
    kv_budget: int | None,
    kv_cache_gib: float | None,
    out: Path | None,
) -> QualityRun:
    from kvplan.quality.run import load_tokens, quality_setup, run_quality
    from kvplan.real.model import load_causal_lm, resolve_device

    optimizations = parse_optimizations(names)
    for optimization in optimizations:
        quality_setup(optimization, kv_budget)  # reject bad names before loading anything
    resolved = resolve_device(device)
    if resolved != "cpu":
        raise SettingError("quality measurement runs on CPU (token by token); use {device} cpu")
    tokens = load_tokens(text, tokenizer, str(model_path) if model_path else None)
    dtype = "fp32" if model_dtype == "auto" else model_dtype
    lm, _ = load_causal_lm(
        model, str(model_path) if model_path else None, layers, dtype, resolved, seed
    )
    pool = (kv_cache_gib or DEFAULT_POOL_GIB) * GIB
    rows = run_quality(lm, tokens, optimizations, kv_budget, pool)
    served_columns(rows, optimizations, tokens, model, model_path, layers, dtype, seed, kv_budget)
    label = (
        model_path.parent.name
        if model_path and model_path.name == "hf"
        else (model_path.name if model_path else model)
    )
    params = {
        "model": label,
        "text": str(text),
        "text_tokens": len(tokens),
        "kv_budget": kv_budget,
        "seed": seed,
        "device": resolved,
        "kv_pool_bytes": pool,
    }
    run_id = hashlib.sha256(json.dumps([params, names], sort_keys=True).encode()).hexdigest()[:12]
    records = [
        make_record(
            "quality",
            run_id,
            "real",
            row["optimization"],
            params,
            {k: v for k, v in row.items() if k != "optimization"},
            baseline=index == 0,
        )
        for index, row in enumerate(rows)
    ]
    out = out or DEFAULT_FOLDER / f"{default_stem('quality', label)}.jsonl"
    write_jsonl(out, records)
    return QualityRun(rows, records, label, len(tokens), out)
