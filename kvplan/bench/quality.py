"""`kvplan bench --mode real --quality-text FILE`: the memory / quality table of KV formats
and eviction policies on one real model and text, as result records (kind "quality")."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvplan.bench.optimizations import parse_optimizations
from kvplan.results import ResultRecord, make_record, write_jsonl

GIB = 2**30
DEFAULT_POOL_GIB = 0.25  # the KV pool max_concurrency is computed against, without --kv-cache-gib


@dataclass(frozen=True)
class QualityRun:
    rows: list[dict[str, Any]]  # one per optimization, the first the baseline
    records: list[ResultRecord]
    label: str  # the model's name
    text_tokens: int
    out: Path


def run_quality_table(model: str, model_path: Path | None, layers: int | None, device: str, model_dtype: str,
                      seed: int, names: list[str], text: Path, tokenizer: Path | None, kv_budget: int | None,
                      kv_cache_gib: float | None, out: Path | None) -> QualityRun:
    from kvplan.quality.run import load_tokens, quality_setup, run_quality
    from kvplan.real.model import load_causal_lm, resolve_device

    optimizations = parse_optimizations(names)
    for optimization in optimizations:
        quality_setup(optimization, kv_budget)  # reject bad names before loading anything
    resolved = resolve_device(device)
    if resolved != "cpu":
        raise ValueError("quality measurement runs on CPU (token by token); use --device cpu")
    tokens = load_tokens(text, tokenizer, str(model_path) if model_path else None)
    dtype = "fp32" if model_dtype == "auto" else model_dtype
    lm, _ = load_causal_lm(model, str(model_path) if model_path else None, layers, dtype, resolved, seed)
    pool = (kv_cache_gib or DEFAULT_POOL_GIB) * GIB
    rows = run_quality(lm, tokens, optimizations, kv_budget, pool)
    label = model_path.parent.name if model_path and model_path.name == "hf" else (model_path.name if model_path else model)
    params = {"model": label, "text": str(text), "text_tokens": len(tokens), "kv_budget": kv_budget, "seed": seed,
              "device": resolved, "kv_pool_bytes": pool}
    run_id = hashlib.sha256(json.dumps([params, names], sort_keys=True).encode()).hexdigest()[:12]
    records = [make_record("quality", run_id, "real", row["optimization"], params,
                           {k: v for k, v in row.items() if k != "optimization"}, baseline=index == 0)
               for index, row in enumerate(rows)]
    out = out or Path("reports") / f"quality-{label}.jsonl"
    write_jsonl(out, records)
    return QualityRun(rows, records, label, len(tokens), out)
