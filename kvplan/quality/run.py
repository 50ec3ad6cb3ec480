"""`kvplan bench --mode real --quality-text FILE`: the memory / quality table for KV formats
and eviction policies on one real model and text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvplan.quality.policies import POLICIES, PolicySpec

KV_PARTS = ("fp32", "fp16", "bf16", "fp8", "fp8-e4m3", "fp8-e5m2", "int8", "int4", "int8-tensor")
GREEDY_TOKENS = 200


def parse(name: str, budget: int | None) -> tuple[PolicySpec, str | None]:
    """'int8', 'streaming', 'h2o+int4', 'full' -> (policy, KV format or None)."""
    policy, fmt = "full", None
    for part in (p.strip().lower() for p in name.split("+") if p.strip()):
        if part in POLICIES:
            policy = part
        elif part in KV_PARTS or part.startswith(("int4-g", "int8-g", "int2-g", "kivi-int")):
            fmt = part
        elif part not in ("full", "paged"):
            raise ValueError(f"unknown quality optimization '{part}' in '{name}'; use KV formats "
                             f"({', '.join(KV_PARTS)}, int4-gN) and policies (full, {', '.join(POLICIES)})")
    return PolicySpec(policy, budget if policy != "full" else None), fmt


def load_tokens(text_path: Path, tokenizer: Path | None, model_path: str | None) -> list[int]:
    if not text_path.is_file():
        raise ValueError(f"quality text '{text_path}' does not exist; pass a UTF-8 text file")
    text = text_path.read_text(encoding="utf-8").strip()
    if tokenizer is not None:
        from kvplan.quality.tokenizer import Llama2cTokenizer

        return Llama2cTokenizer(tokenizer).encode(text)
    if not model_path:
        raise ValueError("--quality-text needs --tokenizer (a llama2.c tok*.bin) or a --model-path with a tokenizer")
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model_path, local_files_only=True)(text)["input_ids"]
    except Exception:
        raise ValueError(f"no tokenizer in '{model_path}'; pass --tokenizer") from None


def run_quality(model: Any, tokens: list[int], names: list[str], budget: int | None,
                pool_bytes: float) -> list[dict[str, Any]]:
    """One metrics dict per optimization; the first name is the baseline."""
    import torch

    from kvplan.quality.evaluate import evaluate, run_policy

    if len(tokens) < 3:
        raise ValueError("the quality text needs at least 2 tokens after BOS")
    reference, _ = run_policy(model, tokens, PolicySpec("full"))
    with torch.inference_mode():
        greedy = model.generate(torch.tensor([tokens[:1]]), max_new_tokens=GREEDY_TOKENS - 1,
                                min_new_tokens=GREEDY_TOKENS - 1, do_sample=False)[0].tolist()
    rows = []
    for name in names:
        spec, fmt = parse(name, budget)
        result = evaluate(model, tokens, spec, fmt, reference=reference, greedy=greedy)
        rows.append({"optimization": name, "policy": spec.name, "kv_format": fmt, "kv_budget": spec.budget,
                     "text_tokens": len(tokens), "nll": result.nll, "perplexity": result.perplexity,
                     "kl_mean": result.kl_mean, "greedy_agreement": result.greedy_agreement,
                     "kv_bytes_per_seq": result.kv_bytes_per_seq, "peak_kv_bytes_per_seq": result.peak_kv_bytes_per_seq,
                     "retained_tokens_per_layer": result.retained_tokens,
                     "max_concurrency": pool_bytes / result.kv_bytes_per_seq if result.kv_bytes_per_seq else 0.0})
    base = rows[0]
    for row in rows:
        row["perplexity_vs_base"] = row["perplexity"] / base["perplexity"] - 1.0
        row["kv_bytes_vs_base"] = row["kv_bytes_per_seq"] / base["kv_bytes_per_seq"] if base["kv_bytes_per_seq"] else 0.0
    return rows
