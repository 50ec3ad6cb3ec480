"""`kvplan calibrate`: fit the simulator's step model to a user's own measured runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import RenderableType
from rich.markup import escape

from kvplan.cli.common import (
    GpuOpt,
    KvDtypeOpt,
    ModelOpt,
    TpOpt,
    cli_errors,
    console,
    error_console,
)
from kvplan.cli.fit_table import fitted_table
from kvplan.cli.panels.defaults import SIZING
from kvplan.engines.engine_releases import DEFAULT_ENGINE_NAME


@cli_errors("out")
def calibrate(
    results: Annotated[
        list[Path],
        typer.Argument(
            help="`vllm bench serve --save-result` JSON files, or text files holding vLLM's "
            "printed 'Serving Benchmark Result' block."
        ),
    ],
    model: ModelOpt = SIZING.model,
    gpu: GpuOpt = "h100",
    tp: TpOpt = SIZING.tp,
    kv_dtype: KvDtypeOpt = SIZING.kv_dtype,
    weight_dtype: Annotated[
        Optional[str],
        typer.Option(
            metavar="DTYPE", help="Weight dtype the server ran (e.g. fp8); default: the model's."
        ),
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            metavar="NAME", help="Engine that produced the results (recorded in the file)."
        ),
    ] = DEFAULT_ENGINE_NAME,
    dataset: Annotated[
        str, typer.Option(metavar="NAME", help="The benchmark's dataset: random or sharegpt.")
    ] = "random",
    input_len: Annotated[
        Optional[int],
        typer.Option(
            metavar="TOKENS",
            help="random dataset: --input-len of the runs, one value for every file (default: "
            "each file's total input tokens / requests); a file whose totals disagree is "
            "refused.",
        ),
    ] = None,
    output_len: Annotated[
        Optional[int],
        typer.Option(
            metavar="TOKENS",
            help="random dataset: --output-len of the runs, one value for every file (default: "
            "each file's total output tokens / requests).",
        ),
    ] = None,
    random_range_ratio: Annotated[
        Optional[float],
        typer.Option(
            metavar="X",
            help="random dataset: --random-range-ratio as the run's vLLM read it (before 0.8.4: "
            "lengths in [L r, L]); default: fixed lengths.",
        ),
    ] = None,
    max_concurrency: Annotated[
        Optional[int],
        typer.Option(
            metavar="N",
            help="The run's --max-concurrency where the result file does not record it.",
        ),
    ] = None,
    max_num_seqs: Annotated[
        Optional[int],
        typer.Option(
            metavar="N",
            help="The server's --max-num-seqs (default: vLLM's for the GPU and version).",
        ),
    ] = None,
    max_num_batched_tokens: Annotated[
        Optional[int],
        typer.Option(
            metavar="N",
            help="The server's --max-num-batched-tokens (default: vLLM's for the GPU and version).",
        ),
    ] = None,
    engine_version: Annotated[
        str,
        typer.Option(
            metavar="VERSION",
            help="vLLM version of the server, e.g. 0.6.3 (V0 defaults before 0.8); default: "
            "current.",
        ),
    ] = "",
    out: Annotated[
        Path,
        typer.Option(
            metavar="FILE",
            help="Calibration file to write (JSON), for `kvplan bench --calibration`.",
        ),
    ] = Path("calibration.json"),
) -> None:
    """Fit the step model to measured runs and print the fit error per run.

    Fits bandwidth / attention / FLOP/s factors, per-step overheads and (MoE models) the expert
    GEMMs' factor."""
    from kvplan.fit.calibrate_runs import calibrate_results
    from kvplan.spec.resolve import load_gpu, load_model

    settings = {
        "model": load_model(model).name,
        "gpu": load_gpu(gpu).name,
        "tp": tp,
        "kv_dtype": kv_dtype,
        "weight_dtype": weight_dtype,
        "engine": engine,
        "dataset": dataset,
        "input_len": input_len,
        "output_len": output_len,
        "range_ratio": random_range_ratio,
        "max_concurrency": max_concurrency,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "engine_version": engine_version,
    }
    with console.status("fitting the engine overhead, then once more per run left out..."):
        result = calibrate_results(results, settings, out)
    console.print(
        _error_table(f"fit error per run ({escape(result.overhead.source)})", result.rows)
    )
    if result.held_out_rows:
        console.print(
            _error_table(
                "held out: each run predicted by a fit without it (what to expect on a new run)",
                result.held_out_rows,
            )
        )
        summary = result.held_out or {}
        console.print(
            "held-out median error: "
            + ", ".join(
                f"{name.removesuffix('_error')} ±{100 * value:.1f}% "
                f"({int(summary[name.replace('_error', '_runs')])} runs)"
                for name, value in summary.items()
                if name.endswith("_error")
            )
        )
    else:
        console.print(
            "[dim]one run: nothing to hold out, so the fit's error above is in-sample only; "
            "give two or more runs for a held-out error[/]"
        )
    for note in result.notes:
        console.print(f"[dim]note: {escape(note)}[/]")
    console.print(f"engine time per step: {escape(result.overhead.describe())}")
    shown = escape(str(out))
    error_console.print(
        f"[dim]calibration: {shown}; use it with kvplan bench --calibration {shown} "
        f'(or calibration = "{shown}" in a sweep file)[/]'
    )


def _error_table(title: str, rows: list[dict[str, Any]]) -> RenderableType:
    """A run's name and its figure whole at any width (kvplan.cli.fit_table)."""
    cells = [
        [
            escape(row["run"]),
            escape(row["metric"]),
            f"{row['measured']:,.2f}",
            f"{row['predicted']:,.2f}",
            f"{100 * row['error']:+.1f}%",
        ]
        for row in rows
    ]
    headers = ("run", "figure", "measured", "kvplan", "error")
    return fitted_table(title, headers, cells, console.width, ("run", "figure"), key=2)
