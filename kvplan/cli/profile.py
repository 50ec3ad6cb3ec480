"""`kvplan profile`: measure a model's operators on this machine's CPU or GPU into a table the
simulated engine's step model times its steps with (`kvplan bench --perf-table FILE`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
from rich.table import Table

from kvplan.cli.common import (
    HARDWARE,
    OUTPUT,
    KvDtypeOpt,
    TpOpt,
    cli_errors,
    console,
    error_console,
    escape,
    progress_bars,
)
from kvplan.cli.panels.defaults import SIZING
from kvplan.cli.resolution import render_resolution

GRID = "Grid"
DEFAULTS = {  # device -> (max tokens, max seqs, max context): a few minutes on either
    "cpu": (512, 64, 4096),
    "cuda": (8192, 256, 16384),
}


@cli_errors("output")
def profile(
    model: Annotated[
        str,
        typer.Argument(
            metavar="MODEL",
            help="A profile name (kvplan profiles models), a Hugging Face id, or a config.json / "
            "model dir.",
        ),
    ],
    device: Annotated[
        str,
        typer.Option(rich_help_panel=HARDWARE, metavar="NAME", help="cpu, cuda or auto."),
    ] = "cpu",
    tp: TpOpt = SIZING.tp,
    weight_dtype: Annotated[
        Optional[str],
        typer.Option(
            rich_help_panel=HARDWARE,
            metavar="DTYPE",
            help="Weight dtype served (bf16, fp8, int4, ...); default: the checkpoint's. Only "
            "16-bit weights are measured; the rest is left to the next source.",
        ),
    ] = None,
    kv_dtype: KvDtypeOpt = SIZING.kv_dtype,
    dtype: Annotated[
        str,
        typer.Option(
            rich_help_panel=HARDWARE,
            metavar="DTYPE",
            help="Dtype to compute in: bf16 (what vLLM serves a 16-bit model in, on GPUs and "
            "CPUs), fp16 or fp32.",
        ),
    ] = "bf16",
    threads: Annotated[
        int,
        typer.Option(
            rich_help_panel=HARDWARE,
            metavar="N",
            help="CPU: torch's intra-op threads (1 matches a vLLM CPU server run with "
            "OMP_NUM_THREADS=1).",
        ),
    ] = 1,
    max_tokens: Annotated[
        Optional[int],
        typer.Option(
            rich_help_panel=GRID,
            metavar="N",
            help="Largest step measured (GEMMs, experts, prefill chunks); above it times grow "
            "linearly. Default: 512 on CPU, 8192 on CUDA.",
        ),
    ] = None,
    max_seqs: Annotated[
        Optional[int],
        typer.Option(
            rich_help_panel=GRID,
            metavar="N",
            help="Largest decode batch and LM-head batch measured. Default: 64 on CPU, 256 on "
            "CUDA.",
        ),
    ] = None,
    max_context: Annotated[
        Optional[int],
        typer.Option(
            rich_help_panel=GRID,
            metavar="TOKENS",
            help="Longest context measured (decode, tokens before a prefill chunk). Default: 4096 "
            "on CPU, 16384 on CUDA.",
        ),
    ] = None,
    points: Annotated[
        int,
        typer.Option(rich_help_panel=GRID, metavar="N", help="Points per geometric axis."),
    ] = 6,
    repeats: Annotated[
        int,
        typer.Option(
            rich_help_panel=GRID,
            metavar="N",
            help="Timed repeats per point (the median is kept; a point stops after 0.5 s of "
            "repeats).",
        ),
    ] = 5,
    output: Annotated[
        Optional[Path],
        typer.Option(
            rich_help_panel=OUTPUT,
            metavar="FILE",
            help="Table to write (JSON); default: reports/perf-MODEL-DEVICE.json.",
        ),
    ] = None,
) -> None:
    """Measure a model's operators on this machine's CPU or GPU into a --perf-table table.

    GEMMs, experts, attention, memory passes and all-reduces: the table `kvplan bench
    --perf-table` times simulated steps with."""
    from kvplan.spec import parse_kv_format
    from kvplan.spec.extras import MissingExtra, missing_modules
    from kvplan.spec.numbers import check_numbers
    from kvplan.spec.resolve import resolve_model
    from kvplan.spec.setting_error import SettingError

    check_numbers({"tp": tp})
    if not 1 <= repeats <= 1000 or not 1 <= threads <= 4096:
        raise SettingError(
            "{repeats} must be 1 to 1,000 and {threads} 1 to 4,096, got {got_repeats} and "
            "{got_threads}",
            got_repeats=repeats,
            got_threads=threads,
        )
    if dtype not in ("bf16", "fp16", "fp32"):
        raise SettingError("{dtype} must be bf16, fp16 or fp32, got {got!r}", got=dtype)
    resolved = resolve_model(model)  # an unknown model fails before torch is imported
    spec = resolved.spec
    kv_format = parse_kv_format(kv_dtype, spec)
    if "torch" in missing_modules("real"):
        raise MissingExtra("kvplan profile", "real", ["torch"])
    from kvplan.real.model import resolve_device
    from kvplan.real.op_profile import ProfileGrid, plan_profile
    from kvplan.results.latest import DEFAULT_FOLDER, default_stem
    from kvplan.sizing.operators.profile_writer import write_table
    from kvplan.sizing.operators.shapes import model_ops

    where = resolve_device(device).split(":")[0]
    tokens, seqs, context = DEFAULTS[where]
    grid = ProfileGrid(max_tokens or tokens, max_seqs or seqs, max_context or context, points)
    ops = model_ops(spec, tp, kv_format, weight_dtype)
    measured_for = {"model": spec.name, "tp": tp, "kv_format": kv_format.name,
                    "weight_dtype": weight_dtype}  # fmt: skip
    if where == "cuda":
        import torch

        threads = torch.get_num_threads()  # recorded; CUDA kernels do not depend on them
    planned = plan_profile(ops, measured_for, where, grid, dtype, threads, repeats)
    render_resolution(resolved)
    name = f"{spec.name}-tp{tp}" if tp > 1 else spec.name
    path = output or DEFAULT_FOLDER / f"{default_stem('perf', name, planned.device.name)}.json"
    with progress_bars(
        TextColumn("{task.description:<36}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("points"),
        TimeRemainingColumn(),
    ) as progress:
        task = progress.add_task("profiling", total=planned.points)
        table = planned.run(
            lambda: progress.advance(task),
            lambda label: progress.update(task, description=escape(label[:36])),
        )
    write_table(table, path)
    console.print(_summary(table, planned.device.name, dtype))
    for note in table.notes:
        console.print(f"[dim]note: {escape(note)}[/]")
    shown = escape(str(path))
    error_console.print(
        f"[dim]perf table: {shown}; use it with kvplan bench --perf-table {shown} "
        f'(or perf_table = "{shown}" in a sweep file)[/]'
    )


def _summary(table: Any, device: str, dtype: str) -> Table:
    """One row per section: curves, points, the fastest and slowest time."""
    summary = Table(title=f"measured on {escape(device)} ({dtype})", title_justify="left")
    for header in ("operator", "curves", "points", "fastest", "slowest"):
        summary.add_column(header, justify="left" if header == "operator" else "right")
    sections = {
        "GEMMs": table.gemm,
        "routed experts": table.experts,
        "decode attention": table.decode_attention,
        "prefill attention": table.prefill_attention,
        "all-reduce": table.all_reduce,
        "memory passes": {"memory": table.memory} if table.memory else {},
    }
    for label, curves in sections.items():
        times = [t for curve in curves.values() for t in _times(curve)]
        if not times:
            summary.add_row(label, "0", "0", "-", "-")
            continue
        summary.add_row(label, f"{len(curves)}", f"{len(times):,}", _duration(min(times)),
                        _duration(max(times)))  # fmt: skip
    return summary


def _times(curve: Any) -> list[float]:
    rows = curve.seconds
    return [t for row in rows for t in row] if rows and isinstance(rows[0], tuple) else list(rows)


def _duration(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"
