"""`kvplan bench --mode real --quality-text FILE`: the memory / quality table for KV formats
and eviction policies on one real model and text."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvplan.core.engine_factory import Optimization
from kvplan.core.policies import PolicySpec
from kvplan.spec.setting_error import SettingError

if TYPE_CHECKING:
    import torch

GREEDY_TOKENS = 200


def quality_setup(optimization: Optimization, budget: int | None) -> tuple[PolicySpec, str | None]:
    """A parsed optimization ('int8', 'streaming', 'h2o+int4', 'full') -> (policy, KV format or
    None). The quality table compares KV formats and eviction policies on one sequence, so
    allocators, prefix caching and offload tiers have nothing to measure here."""
    if optimization.allocator != "paged" or optimization.prefix_caching or optimization.offload:
        raise ValueError(
            f"'{optimization.name}': the quality table measures KV formats and eviction policies "
            f"(e.g. int8, int4-g64, h2o+int4, full); {optimization.name} changes memory layout only"
        )
    policy = optimization.policy or "full"
    return PolicySpec(policy, budget if policy != "full" else None), optimization.kv_dtype


def load_tokens(text_path: Path, tokenizer: Path | None, model_path: str | None) -> list[int]:
    if not text_path.is_file():
        raise ValueError(f"quality text '{text_path}' does not exist; pass a UTF-8 text file")
    text = text_path.read_text(encoding="utf-8").strip()
    if tokenizer is not None:
        from kvplan.quality.tokenizer import Llama2cTokenizer

        return Llama2cTokenizer(tokenizer).encode(text)
    if not model_path:
        raise SettingError(
            "{quality_text} needs {tokenizer} (a llama2.c tok*.bin) or a {model_path} with a "
            "tokenizer"
        )
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model_path, local_files_only=True)(text)["input_ids"]
    except Exception:
        raise SettingError(
            "no tokenizer in '{path}'; pass {tokenizer}", path=str(model_path)
        ) from None


def run_quality(
    model: torch.nn.Module,
    tokens: list[int],
    optimizations: list[Optimization],
    budget: int | None,
    pool_bytes: float,
) -> list[dict[str, Any]]:
    """One metrics dict per optimization; the first is the baseline."""
    import torch

    from kvplan.quality.evaluate import evaluate, run_policy

    if len(tokens) < 3:
        raise ValueError("the quality text needs at least 2 tokens after BOS")
    reference, _ = run_policy(model, tokens, PolicySpec("full"))
    with torch.inference_mode():
        greedy = model.generate(
            torch.tensor([tokens[:1]]),
            max_new_tokens=GREEDY_TOKENS - 1,
            min_new_tokens=GREEDY_TOKENS - 1,
            do_sample=False,
        )[0].tolist()
    rows = []
    for optimization in optimizations:
        spec, fmt = quality_setup(optimization, budget)
        # Per-tensor scales and entropy-budget's split are calibrated on the model's own greedy
        # text, never on the text scored.
        result = evaluate(
            model, tokens, spec, fmt, reference=reference, greedy=greedy, calibration=greedy
        )
        rows.append(
            {
                "optimization": optimization.name,
                "policy": spec.name,
                "kv_format": fmt,
                "kv_budget": spec.budget,
                "text_tokens": len(tokens),
                "nll": result.nll,
                "perplexity": result.perplexity,
                "kl_mean": result.kl_mean,
                "greedy_agreement": result.greedy_agreement,
                "kv_bytes_per_seq": result.kv_bytes_per_seq,
                "peak_kv_bytes_per_seq": result.peak_kv_bytes_per_seq,
                "retained_tokens_per_layer": result.retained_tokens,
                "max_concurrency": pool_bytes / result.kv_bytes_per_seq
                if result.kv_bytes_per_seq
                else 0.0,
            }
        )
        if result.layer_budgets:  # entropy-budget's split, which serving the text must use too
            rows[-1]["layer_budgets"] = result.layer_budgets
    base = rows[0]
    for row in rows:
        row["perplexity_vs_base"] = row["perplexity"] / base["perplexity"] - 1.0
        row["kv_bytes_vs_base"] = (
            row["kv_bytes_per_seq"] / base["kv_bytes_per_seq"] if base["kv_bytes_per_seq"] else 0.0
        )
    return rows
