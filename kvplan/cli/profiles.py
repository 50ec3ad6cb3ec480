"""`kvplan profiles`: list and show the shipped model and GPU profiles."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import RenderableType
from rich.table import Table

from kvplan.cli.common import JsonOpt, cli_errors, console, escape, fmt_bytes
from kvplan.cli.fit_table import COMPACT, fitted_table
from kvplan.cli.help_format import Command, Group
from kvplan.results.atomic import strict_json  # no NaN/Infinity in JSON output
from kvplan.spec import parse_kv_format
from kvplan.spec.profiles import gpu_profiles, model_profiles
from kvplan.spec.resolve import load_gpu, load_model

app = typer.Typer(
    cls=Group, help="List and show the shipped model and GPU profiles.", no_args_is_help=True
)


@app.command("models", cls=Command)
@cli_errors()
def models(as_json: JsonOpt = False) -> None:
    """Model profiles: verbatim Hugging Face config.json files with their sources."""
    records = []
    for name, profile in model_profiles().items():
        spec = load_model(name)
        records.append(
            {
                "name": name,
                "hf_repo": profile.hf_repo,
                "kv_kind": spec.kv_kind,
                "layers": spec.num_layers,
                "params_b": round(spec.params.total / 1e9, 3),
                "active_params_b": round(spec.params.active / 1e9, 3),
                "kv_bytes_per_token_bf16": spec.kv_bytes_per_token(parse_kv_format("bf16")),
                "max_context": spec.max_position_embeddings,
            }
        )
    if as_json:
        print(strict_json(records, indent=2))
        return
    console.print(
        compact_table(
            "Model profiles (kvplan profiles show NAME for details)",
            ("name", "KV", "layers", "params", "active", "KiB/tok bf16", "max ctx"),
            [
                [
                    escape(r["name"]),
                    escape(r["kv_kind"]),
                    str(r["layers"]),
                    _billions(r["params_b"]),
                    _billions(r["active_params_b"])
                    if r["active_params_b"] < r["params_b"] * 0.9
                    else "",
                    f"{r['kv_bytes_per_token_bf16'] / 1024:,.1f}",
                    _tokens(r["max_context"]),
                ]
                for r in records
            ],
            wrap=("KV",),
        )
    )


def _billions(value: float) -> str:
    return f"{value:,.0f}B" if value >= 100 else f"{value:.1f}B"


def _tokens(count: int) -> str:
    return (
        f"{count // 1024}k"
        if count >= 1024 and count % 1024 == 0
        else f"{count / 1000:.0f}k"
        if count >= 1000
        else str(count)
    )


def compact_table(
    title: str, headers: tuple[str, ...], rows: list[list[str]], wrap: tuple[str, ...] = ()
) -> RenderableType:
    """A catalog listing: one header rule, columns one space apart, the name first and
    repeated in every table when the columns spread over more than one; the `wrap` columns'
    text (a GPU's full name, a KV kind) wraps between words (kvplan.cli.fit_table)."""
    left = [header for index, header in enumerate(headers) if index < 2 or header == "GPU"]
    return fitted_table(title, headers, rows, console.width, left, wrap=wrap, look=COMPACT)


@app.command("gpus", cls=Command)
@cli_errors()
def gpus(as_json: JsonOpt = False) -> None:
    """GPU profiles: dense datasheet figures with their sources."""
    records = [
        {
            "name": g.name,
            "display_name": g.display_name,
            "memory_gib": g.memory_gib,
            "hbm_tbps": g.hbm_tbps,
            "bf16_tflops": g.bf16_tflops,
            "fp8_tflops": g.fp8_tflops,
            "fp8_support": g.fp8_support,
            "source": g.source,
        }
        for g in gpu_profiles().values()
    ]
    if as_json:
        print(strict_json(records, indent=2))
        return
    console.print(
        compact_table(
            "GPU profiles (dense, no sparsity)",
            ("name", "GPU", "memory", "HBM TB/s", "BF16 TFLOP/s", "FP8 TFLOP/s"),
            [
                [
                    escape(r["name"]),
                    escape(r["display_name"]),
                    f"{r['memory_gib']:g} GiB",
                    f"{r['hbm_tbps']:g}",
                    f"{r['bf16_tflops']:,.1f}",
                    f"{r['fp8_tflops']:,.1f}" if r["fp8_support"] else "no FP8",
                ]
                for r in records
            ],
            wrap=("GPU",),
        )
    )
    console.print("[dim]sources: kvplan profiles show GPU[/]")


@app.command("show", cls=Command)
@cli_errors()
def show(
    name: Annotated[str, typer.Argument(help="A model or GPU profile name.")],
    as_json: JsonOpt = False,
) -> None:
    """Details of one model or GPU profile, with its source."""
    try:
        gpu = load_gpu(name)
    except ValueError:
        gpu = None
    if gpu is not None:
        record = {k: v for k, v in vars(gpu).items()}
        record["aliases"] = list(gpu.aliases)
    else:
        spec = load_model(name)
        profile = model_profiles().get(spec.name)
        record = {
            "name": spec.name,
            "source": spec.source,
            "model_type": spec.model_type,
            "kv_kind": spec.kv_kind,
            "layers": spec.num_layers,
            "hidden_size": spec.hidden_size,
            "attention_heads": spec.num_heads,
            "attention_groups": [g.describe() for g in spec.groups],
            "params_total": spec.params.total,
            "params_active": spec.params.active,
            "weight_dtype": spec.weight_dtype,
            "weight_bytes": spec.weight_bytes(),
            "max_position_embeddings": spec.max_position_embeddings,
            "kv_bytes_per_token_bf16": spec.kv_bytes_per_token(parse_kv_format("bf16")),
        }
        if profile:
            record.update(
                config_file=profile.file,
                copied_from=profile.source,
                published_params_b=profile.published_params_b,
                published_active_b=profile.published_active_b,
                published_source=profile.published_params_source,
            )
    if as_json:
        print(strict_json(record, indent=2))
        return
    table = Table(show_header=False, title=escape(name), title_justify="left")
    table.add_column(style="cyan", no_wrap=True)
    table.add_column(overflow="fold")  # a long file name or URL folds, never ends in "…"
    for key, value in record.items():
        if value is None:
            continue
        if key == "weight_bytes":
            value = fmt_bytes(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            value = f"{value:,}"
        elif isinstance(value, list):
            value = "; ".join(map(str, value))
        table.add_row(key, escape(str(value)))
    console.print(table)
