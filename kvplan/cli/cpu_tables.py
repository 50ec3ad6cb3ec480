"""The tables of vLLM's CPU backend: `kvplan estimate --device cpu` and `kvplan explain` on a CPU
server's log (kvplan/engines/cpu_kv.py, kvplan/logs/cpu_log.py)."""

from __future__ import annotations

from rich.panel import Panel
from rich.table import Table

from kvplan import GIB
from kvplan.cli.common import console, escape, fmt_bytes, fmt_cell, fmt_int
from kvplan.engines.cpu_kv import RUNTIME_OVERHEAD_GIB, CpuKvPlan

_MEMORY_ROWS = (
    ("node_total", "node memory"),
    ("requested", "requested (node x utilization)"),
    ("non_kv", "non-KV usage (the worker's RSS)"),
    ("kv", "KV cache"),
)


def _pairs(title: str) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="cyan")
    table.add_column(justify="right")
    table.add_column(style="dim")
    return table


def render_cpu_plan(result: CpuKvPlan) -> None:
    """`kvplan estimate --device cpu`: the worker's memory, its KV cache and vLLM's lines."""
    i = result.inputs
    m = i.model
    console.print(
        f"[bold]{escape(m.name)}[/] ({m.kv_kind}, {m.params.total / 1e9:.2f}B params) on "
        f"{'a CPU worker' if i.tp == 1 else f'{i.tp} CPU workers (TP)'} (vLLM's CPU backend), "
        f"KV {i.kv_format.name}, "
        f"context {i.max_model_len:,}, batch {i.batch}"
    )
    size = _pairs("KV cache (per worker)")
    size.add_row(
        "KV per token",
        f"{result.kv_bytes_per_token:,.0f} B",
        "; ".join(g.describe() for g in m.groups),
    )
    size.add_row("block size", str(result.block_size), i.block[1])
    memory = _pairs("Memory of the worker's NUMA node")
    if i.kv_cache_bytes is not None:
        memory.add_row(
            "KV cache", fmt_bytes(result.kv_bytes), "--kv-cache-space (VLLM_CPU_KVCACHE_SPACE)"
        )
    else:
        overhead = result.consumed_bytes - result.weight_bytes if result.consumed_bytes else 0.0
        memory.add_row("node memory", fmt_bytes((i.node_memory_gib or 0) * GIB), "--cpu-memory-gib")
        memory.add_row(
            "requested",
            fmt_bytes(result.requested_bytes or 0),
            f"node x {i.memory_fraction} (--gpu-memory-utilization; vLLM's auto rule)",
        )
        memory.add_row(
            "non-KV usage (estimate)",
            fmt_bytes(result.consumed_bytes or 0),
            f"weights {fmt_bytes(result.weight_bytes)} + runtime {fmt_bytes(overhead)} "
            + (
                "(--reserve-gib); "
                if i.overhead_bytes is not None
                else f"(kvplan: {RUNTIME_OVERHEAD_GIB} GiB measured on vLLM 0.32); "
            )
            + "vLLM measures the worker's RSS",
        )
        memory.add_row(
            "KV cache", fmt_bytes(result.kv_bytes), "requested - non-KV usage (an estimate)"
        )
    console.print(memory)
    if result.verdict != "weights-do-not-fit":
        size.add_row(
            "blocks",
            fmt_int(result.num_blocks),
            f"of {fmt_bytes(result.cache.block_bytes)}; one is vLLM's null block",
        )
        size.add_row("CPU KV cache size", f"{result.kv_cache_tokens:,} tokens", "as vLLM logs it")
        size.add_row(
            f"Maximum concurrency for {i.max_model_len:,} tokens per request",
            f"{result.max_concurrency:.2f}x",
            "as vLLM logs it (the null block counted)",
        )
        size.add_row(f"largest batch at {i.max_model_len:,} tokens", fmt_int(result.max_batch), "")
    console.print(size)
    console.print("[dim]vLLM would log:[/]")
    for line in result.log_lines():
        console.print(f"  {escape(line)}", soft_wrap=True, highlight=False)
    if result.verdict == "fits":
        console.print(
            Panel(f"[bold green]FITS[/]: {i.batch} x {i.max_model_len:,} tokens", expand=False)
        )
    else:
        lines = [f"[bold red]DOES NOT FIT[/] ({result.verdict})", *map(escape, result.reasons)]
        console.print(Panel("\n".join(lines), expand=False))


def render_cpu_explain(record: dict) -> None:
    """`kvplan explain` on a CPU server's log."""
    console.print(
        f"[bold]{escape(record['engine'])} {escape(record['engine_generation'] or '')}[/] "
        "startup log of vLLM's CPU backend"
        + (f", version {escape(record['version'])}" if record["version"] else "")
    )
    inputs = Table(title="Inputs recovered", show_header=False, title_justify="left")
    inputs.add_column(style="cyan", no_wrap=True)
    inputs.add_column(overflow="fold")
    for key, value in record["inputs"].items():
        if value is not None:
            inputs.add_row(key, fmt_cell(value))
    for key, value in record["assumed"].items():
        why = record["block_size_source"] if key == "block_size" else "not in the log; assumed"
        inputs.add_row(key, f"{fmt_cell(value)} [dim]({escape(why)})[/]")
    console.print(inputs)

    logged, modeled = record["memory_gib"], record["memory_model_gib"]
    console.print("KV memory on the node (GiB, as the worker logged it)", style="italic")
    memory = Table(show_header=True, header_style="bold")
    for column in ("", "server", "kvplan's model") if modeled else ("", "server"):
        memory.add_column(column, justify="right" if column else "left")
    for key, label in _MEMORY_ROWS:
        model_value = (modeled or {}).get(key)
        if logged.get(key) is not None or model_value is not None:
            memory.add_row(
                label, fmt_cell(logged.get(key)), *([fmt_cell(model_value)] if modeled else [])
            )
    console.print(memory)
    cpu = record["cpu"]
    source = cpu["kv_memory_source"] or "not logged"
    console.print(f"KV memory ({escape(source)}): {escape(cpu['kv_memory_rule'])}")
    if modeled:
        console.print(
            "[dim]kvplan's model of the auto rule: the worker's RSS = weights + "
            f"{RUNTIME_OVERHEAD_GIB} "
            "GiB of runtime (an estimate; vLLM measures it)[/]"
        )
    if record["not_computed"]:
        console.print(f"[yellow]{escape(record['not_computed'])}[/]")

    kv, predicted = record["kv"], record["prediction"]
    table = _pairs("KV cache (per worker)")
    table.add_row("CPU KV cache size (logged)", fmt_cell(kv["tokens"]), "null block included")
    if record["max_concurrency"] is not None:
        table.add_row("maximum concurrency (logged)", f"{record['max_concurrency']:.2f}x", "")
    if kv["num_gpu_blocks_override"] is not None:
        table.add_row(
            "num_gpu_blocks_override (logged)", fmt_cell(kv["num_gpu_blocks_override"]), ""
        )
    if kv["blocks_from_kv_memory"] is not None:
        how = "logged before the override" if kv["num_gpu_blocks_override"] else "from the tokens"
        table.add_row("blocks the KV memory gave", fmt_cell(kv["blocks_from_kv_memory"]), how)
    for label, key, how in (
        (
            "implied bytes per token",
            "implied_bytes_per_token_per_gpu",
            "KV memory / (blocks x block size)",
        ),
        ("kvplan bytes per token", "kvplan_bytes_per_token_per_gpu", "from the model's config"),
    ):
        value = kv[key]
        table.add_row(label, "-" if value is None else f"{value:,.1f} B", how)
    if predicted:
        table.add_row(
            "kvplan predicts",
            f"{predicted['kv_cache_tokens']:,} tokens",
            f"{predicted['num_blocks']:,} blocks of {predicted['block_size']} from "
            f"{predicted['basis']}, {predicted['max_concurrency']:.2f}x"
            + (
                f", {predicted['error_pct']:+.1f}% vs the log"
                if predicted["error_pct"] is not None
                else ""
            ),
        )
    console.print(table)
    if kv["decided_by_override"]:
        console.print(escape(kv["decided_by_override"]))
    if kv["note"]:
        mark = {True: "[green]agrees:[/] ", False: "[red]differs:[/] "}.get(kv["agrees"], "")
        console.print(f"{mark}{escape(kv['note'])}")
