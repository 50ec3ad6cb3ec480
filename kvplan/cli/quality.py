"""The memory / quality table of `kvplan bench --mode real --quality-text FILE`."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from rich.table import Table

from kvplan.cli.common import console, escape, fmt_bytes
from kvplan.results.atomic import restore_on_failure, strict_json

GIB = 2**30


def run_quality_command(model: str, model_path: Path | None, layers: int | None, device: str, model_dtype: str,
                        seed: int, names: list[str], text: Path, tokenizer: Path | None, kv_budget: int | None,
                        kv_cache_gib: float | None, out: Path | None, as_json: bool, report: bool) -> None:
    from kvplan.real.model import load_causal_lm, resolve_device
    from kvplan.quality.run import load_tokens, parse, run_quality
    from kvplan.results import make_record, write_jsonl

    for name in names:
        parse(name, kv_budget)  # reject bad names before loading anything
    resolved = resolve_device(device)
    if resolved != "cpu":
        raise ValueError("quality measurement runs on CPU (token by token); use --device cpu")
    tokens = load_tokens(text, tokenizer, str(model_path) if model_path else None)
    dtype = "fp32" if model_dtype == "auto" else model_dtype
    lm, _ = load_causal_lm(model, str(model_path) if model_path else None, layers, dtype, resolved, seed)
    pool = (kv_cache_gib or 0.25) * GIB
    with console.status(f"measuring {len(names)} optimizations on {len(tokens)} tokens"):
        rows = run_quality(lm, tokens, names, kv_budget, pool)
    label = model_path.parent.name if model_path and model_path.name == "hf" else (model_path.name if model_path else model)
    params = {"model": label, "text": str(text), "text_tokens": len(tokens), "kv_budget": kv_budget, "seed": seed,
              "device": resolved, "kv_pool_bytes": pool}
    run_id = hashlib.sha256(json.dumps([params, names], sort_keys=True).encode()).hexdigest()[:12]
    records = [make_record("quality", run_id, "real", row["optimization"], params,
                           {k: v for k, v in row.items() if k != "optimization"}, baseline=index == 0)
               for index, row in enumerate(rows)]
    out = out or Path("reports") / f"quality-{label}.jsonl"
    with restore_on_failure(out):  # issue 13: a failed report gives --out its previous content back
        write_jsonl(out, records)
        if report:
            from kvplan.report import write_report

            write_report([out], out.with_suffix(""))
    if as_json:
        print(strict_json(rows, indent=2))
        return
    render(rows, label, len(tokens), kv_budget)
    console.print(f"[dim]results: {escape(str(out))}[/]")


def render(rows: list[dict[str, Any]], label: str, tokens: int, budget: int | None) -> None:
    table = Table(title=f"{escape(label)}: memory and quality on {tokens} tokens"
                        + (f", eviction budget {budget} tokens per layer" if budget else ""), title_justify="left",
                  header_style="bold")
    for column in ("optimization", "KV / sequence", "vs base", "max concurrency", "perplexity", "vs base",
                   "KL(full||opt)", "greedy agree"):
        table.add_column(column, justify="left" if column == "optimization" else "right")
    for row in rows:
        table.add_row(escape(row["optimization"]), fmt_bytes(row["kv_bytes_per_seq"]), f"{row['kv_bytes_vs_base']:.2f}x",
                      f"{row['max_concurrency']:,.0f}", f"{row['perplexity']:.3f}",
                      f"{100 * row['perplexity_vs_base']:+.1f}%", f"{row['kl_mean']:.4f}",
                      f"{100 * row['greedy_agreement']:.1f}%")
    console.print(table)
    console.print("[dim]KL and agreement against the full-precision, full-length cache; agreement: share of "
                  "positions where the optimized cache's greedy token matches the full one's[/]")
