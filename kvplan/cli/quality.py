"""The memory / quality table of `kvplan bench --mode real --quality-text FILE`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvplan.cli.common import console, escape, fmt_bytes
from kvplan.cli.fit_table import fitted_table
from kvplan.results.atomic import restore_on_failure, strict_json


def run_quality_command(
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
    as_json: bool,
    report: bool,
) -> None:
    from kvplan.bench.quality import run_quality_table

    with restore_on_failure(out):  # a failed report gives --out its previous content back
        with console.status(f"measuring {len(names)} optimizations"):
            run = run_quality_table(
                model,
                model_path,
                layers,
                device,
                model_dtype,
                seed,
                names,
                text,
                tokenizer,
                kv_budget,
                kv_cache_gib,
                out,
            )
        if report:
            from kvplan.report import write_report

            write_report([run.out], run.out.with_suffix(""))
    if as_json:
        print(strict_json(run.rows, indent=2))
        return
    render(run.rows, run.label, run.text_tokens, kv_budget)
    console.print(f"[dim]results: {escape(str(run.out))}[/]")


QUALITY_HEADERS = (
    "optimization",
    "KV / sequence",
    "vs base",
    "max concurrency",
    "perplexity",
    "vs base",
    "KL(full||opt)",
    "greedy agree",
)


def render(rows: list[dict[str, Any]], label: str, tokens: int, budget: int | None) -> None:
    """One row per optimization; on a narrow terminal the figures spread over more tables,
    each repeating the optimization's name (kvplan.cli.fit_table)."""
    served = any("served_perplexity" in row for row in rows)
    headers = (*QUALITY_HEADERS, *(("served ppl", "served KL") if served else ()))
    cells = []
    for row in rows:
        line = [
            escape(row["optimization"]),
            fmt_bytes(row["kv_bytes_per_seq"]),
            f"{row['kv_bytes_vs_base']:.2f}x",
            f"{row['max_concurrency']:,.0f}",
            f"{row['perplexity']:.3f}",
            f"{100 * row['perplexity_vs_base']:+.1f}%",
            f"{row['kl_mean']:.4f}",
            f"{100 * row['greedy_agreement']:.1f}%",
        ]
        if served:
            line += [
                f"{row['served_perplexity']:.3f}" if "served_perplexity" in row else "-",
                f"{row['served_kl_mean']:.4f}" if "served_kl_mean" in row else "-",
            ]
        cells.append(line)
    title = f"{escape(label)}: memory and quality on {tokens} tokens" + (
        f", eviction budget {budget} tokens per layer" if budget else ""
    )
    console.print(fitted_table(title, headers, cells, console.width, left=("optimization",)))
    if served:
        console.print(
            "[dim]served: the text teacher-forced through the serving engine (scheduler, paged "
            "pool, "
            "policy, kernels; KIVI in 32-token blocks, one key group each); '-': refused by real "
            "serving "
            "(h2o-holes, a budget within one block)[/]"
        )
    console.print(
        "[dim]KL and agreement against the full-precision, full-length cache; agreement: share of "
        "positions where the optimized cache's greedy token matches the full one's[/]"
    )
