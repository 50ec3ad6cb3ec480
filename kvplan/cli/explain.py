"""`kvplan explain LOG`: read a vLLM / SGLang startup log and explain its memory figures."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from kvplan.cli.common import JsonOpt, cli_errors, console, error_console, fmt_cell
from kvplan.cli.cpu_tables import render_cpu_explain
from kvplan.cli.fit_table import fitted_table
from kvplan.logs.explain import explain as explain_log
from kvplan.spec.log_file import log_name, read_log

_MEMORY_ROWS = (
    ("total", "total GPU memory"),
    ("usable", "usable (total x utilization)"),
    ("weights", "weights"),
    ("weights_plus_non_torch", "weights + non-torch"),
    ("activation_peak", "activation peak"),
    ("non_torch", "non-torch memory"),
    ("cuda_graph", "CUDA graphs"),
    ("kv", "KV cache"),
    ("unaccounted", "not printed by the log"),
)


@cli_errors()
def explain(
    log: Annotated[str, typer.Argument(help="A vLLM or SGLang startup log file, or - for stdin.")],
    model: Annotated[
        Optional[str],
        typer.Option(
            "--model", "-m", metavar="NAME", help="Model profile, when the log does not name it."
        ),
    ] = None,
    gpu: Annotated[
        Optional[str],
        typer.Option(
            "--gpu",
            "-g",
            metavar="NAME",
            help="GPU profile or name, when the log does not show it.",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Where a server's memory went, what its KV figures imply, and what-ifs in its own flags."""
    text = read_log(log, sys.stdin.buffer if log == "-" else None)
    record = explain_log(text, model=model, gpu=gpu, source=log_name(log))
    for warning in record.get("warnings", []):
        error_console.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
    if as_json:
        print(json.dumps(record, indent=2))
        return
    if record.get("device") == "cpu":
        render_cpu_explain(record)
        return
    render(record)


def render(record: dict) -> None:
    engine = record["engine"] + (
        f" {record['engine_generation']}" if record["engine_generation"] else ""
    )
    console.print(
        f"[bold]{escape(engine)}[/] startup log"
        + (f", version {escape(record['version'])}" if record["version"] else "")
        + (
            f" [dim](from '{escape(record['sources']['version'])}')[/]"
            if "version" in record.get("sources", {})
            else ""
        )
    )
    inputs = Table(title="Inputs recovered", show_header=False, title_justify="left")
    inputs.add_column(style="cyan", no_wrap=True)
    inputs.add_column(overflow="fold")  # a long model path folds, never ends in "…"
    sources = record.get("sources", {})
    for key, value in record["inputs"].items():
        if value is not None:
            source = sources.get(key)
            shown = source if source == "non-default args" else f"'{source}'"
            said = f" [dim](from {escape(shown)})[/]" if source else ""
            inputs.add_row(key, fmt_cell(value) + said)
    for key, value in record.get("derived", {}).items():
        inputs.add_row(key, escape(str(value)))
    for key, value in record["assumed"].items():
        inputs.add_row(key, f"{fmt_cell(value)} [dim](not in the log; assumed)[/]")
    console.print(inputs)

    # the title on a line of its own, in a table title's style: a table of two narrow columns
    # would wrap it over three lines
    console.print("Where the memory went (per GPU, GiB, as the server saw it)", style="italic")
    memory = Table(show_header=True, header_style="bold")
    predicted = record["prediction"] or {}
    # without a prediction its column would be all dashes: left out, and the line after the
    # table says what it needs (record["not_computed"])
    columns = ("", "server", "kvplan's model") if predicted else ("", "server")
    for column in columns:
        memory.add_column(column, justify="left" if not column else "right")
    keys = {
        "total": "total_gib",
        "usable": "usable_gib",
        "weights": "weights_gib",
        "activation_peak": "activation_peak_gib",
        "non_torch": "non_torch_gib",
        "cuda_graph": "cuda_graph_gib",
        "kv": "kv_gib",
    }
    for key, label in _MEMORY_ROWS:
        logged, model = record["memory_gib"].get(key), predicted.get(keys.get(key, ""))
        if logged is not None or model is not None:
            memory.add_row(label, fmt_cell(logged), *([fmt_cell(model)] if predicted else []))
    console.print(memory)
    if record["not_computed"]:
        console.print(f"[yellow]{escape(record['not_computed'])}[/]")
    if predicted:
        console.print(
            f"[dim]kvplan's model: {escape(predicted['engine_model'])}; profiling batch "
            f"{predicted['profiling_batch_tokens']:,} tokens, sampler "
            f"{predicted['sampler_rows']:,} rows; "
            f"predicts {predicted['kv_cache_tokens']:,} KV tokens"
            + (
                f" ({predicted['error_pct']:+.1f}% vs the log)"
                if predicted["error_pct"] is not None
                else ""
            )
            + "[/]"
        )

    capacity = record.get("capacity")
    if capacity:
        unit = capacity["unit"]
        basis = (
            f"the engine's KV arithmetic on the {record['memory_gib']['kv']} GiB of KV memory it "
            "logged"
            if capacity["basis"] == "logged KV memory"
            else "kvplan's memory model"
        )
        console.print(
            f"[bold]KV capacity from what the log shows:[/] {fmt_cell(capacity['kvplan'])} {unit} "
            f"({basis}), {capacity['error_pct']:+.1f}% vs the {fmt_cell(capacity['logged'])} it "
            "printed"
        )

    kv = record["kv"]
    table = Table(title="KV bytes per token (per GPU)", show_header=False, title_justify="left")
    table.add_column(style="cyan")
    table.add_column(justify="right")
    table.add_row("KV tokens the server reported", fmt_cell(kv["tokens"]))
    table.add_row(
        "implied by the log (KV memory / tokens)", fmt_cell(kv["implied_bytes_per_token_per_gpu"])
    )
    table.add_row("kvplan, from the model's config", fmt_cell(kv["kvplan_bytes_per_token_per_gpu"]))
    if record["max_concurrency"] is not None:
        table.add_row("maximum concurrency (logged)", f"{record['max_concurrency']:.2f}x")
    if record["refusal_max_tokens"] is not None:
        table.add_row("refusal: tokens that fit", fmt_cell(record["refusal_max_tokens"]))
    console.print(table)
    if kv["note"]:
        mark = {True: "[green]agrees:[/] ", False: "[red]differs:[/] "}.get(kv["agrees"], "")
        console.print(f"{mark}{escape(kv['note'])}")

    if record["what_ifs"]:
        rows = [
            [
                escape(row["change"]),
                fmt_cell(row["kv_cache_tokens"]),
                f"{row['max_concurrency']:.2f}x" if row["max_concurrency"] is not None else "-",
                escape(row["note"]),
            ]
            for row in record["what_ifs"]
        ]
        # the change and the figures whole, the note wrapped between words (kvplan.cli.fit_table)
        console.print(
            fitted_table(
                "What if (same GPU, same model)",
                ("change", "KV tokens", "concurrency", "note"),
                rows,
                console.width,
                left=("change", "note"),
                wrap=("note",),
            )
        )
