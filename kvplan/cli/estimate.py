"""`kvplan estimate`: KV sizing, GPU fit and decode roofline for one model (or a sweep)."""

from __future__ import annotations

import numbers
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.panel import Panel
from rich.table import Table

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
from kvplan.cli.fit_table import fitted_table
from kvplan.cli.resolution import render_resolution, resolution_record
from kvplan.plan.capacity import (
    CapacityPlan,
    PlanInputs,
    check_can_fit_somehow,
    engine_memory,
    plan,
    smallest_tp_for_weights,
)
from kvplan.plan.engine_releases import SAMPLER_PATH_NAMES, engine_generation, parse_version
from kvplan.plan.memory_model import ENGINE_DESCRIPTIONS
from kvplan.plan.roofline import Roofline
from kvplan.results.atomic import strict_json  # no NaN/Infinity in JSON output
from kvplan.spec import parse_kv_format
from kvplan.spec.numbers import check_numbers, parse_optional_count
from kvplan.spec.resolve import load_gpu, resolve_model

GIB = 2**30
SWEEP_TABLE_ROWS = 40
SWEEP_SETTINGS = ("model", "gpu", "tp", "kv_dtype", "context", "batch")  # shown as columns only where they vary
SWEEP_RESULTS = ("seq_kv_bytes", "kv_cache_tokens", "max_concurrency", "max_batch_at_context", "verdict")
SWEEP_HEADERS = {"seq_kv_bytes": "KV per sequence", "kv_cache_tokens": "KV pool tokens",
                 "max_concurrency": "max concurrency", "max_batch_at_context": "max batch"}


@cli_errors("csv_path", "out")
def estimate(
    model: Annotated[str, typer.Argument(help="A profile name (kvplan profiles models), a Hugging Face id (org/name, from the local HF cache or the Hub), or a config.json / model dir.")],
    gpu: GpuOpt = "h100-80gb",
    tp: TpOpt = 1,
    kv_dtype: KvDtypeOpt = "auto",
    context: Annotated[Optional[str], typer.Option("--context", "-c", metavar="TOKENS", help="Tokens per request (max_model_len), e.g. 32768 or 32k; default: the model's maximum.")] = None,
    batch: Annotated[int, typer.Option("--batch", "-b", metavar="N", help="Concurrent requests at --context.")] = 1,
    block_size: BlockSizeOpt = 16,
    gpu_memory_utilization: UtilOpt = None,
    allocation: Annotated[str, typer.Option(metavar="NAME", help="full: every layer at full length (one block table); ideal: sliding-window layers keep only their window.")] = "full",
    weight_dtype: Annotated[Optional[str], typer.Option(metavar="DTYPE", help="Override weight dtype (bf16, fp8, int4, ...; fp8-meta = Meta's FP8 recipe, attention in BF16); linear layers only, embeddings stay 16-bit. Default: the checkpoint's.")] = None,
    params_b: Annotated[Optional[float], typer.Option("--params-b", metavar="BILLIONS", help="Override the parameter count (billions).")] = None,
    engine: EngineOpt = "vllm",
    engine_version: EngineVersionOpt = None,
    max_num_batched_tokens: Annotated[Optional[int], typer.Option(metavar="N", help="Tokens in the engine's profiling batch; default: the engine's.")] = None,
    max_num_seqs: Annotated[Optional[int], typer.Option(metavar="N", help="Sequences the engine samples for; default: the engine's.")] = None,
    reserve_gib: Annotated[Optional[float], typer.Option(metavar="GIB", help="Memory per GPU held for activations and runtime; default: the engine's memory model.")] = None,
    kv_cache_gib: Annotated[Optional[float], typer.Option(metavar="GIB", help="Fix the KV budget per GPU instead of deriving it (vLLM's kv_cache_memory_bytes).")] = None,
    gpu_mem_gib: Annotated[Optional[float], typer.Option(metavar="GIB", help="Override the GPU's memory capacity (GiB).")] = None,
    kv_budget: Annotated[Optional[str], typer.Option(metavar="TOKENS", help="Tokens an eviction policy (sliding-window, streaming, h2o, ...) keeps per layer per sequence, e.g. 2048 or 2k.")] = None,
    sweep_axes: Annotated[Optional[list[str]], typer.Option("--sweep", metavar="AXIS=VALUES", help="Sweep an axis: context=1k..128k, batch=1..256, tp=1,2,4, kv-dtype=fp16,fp8, gpu=h100,h200, model=a,b.")] = None,
    csv_path: Annotated[Optional[Path], typer.Option("--csv", metavar="FILE", help="Write the sweep (or the single estimate) as CSV.")] = None,
    out: Annotated[Optional[Path], typer.Option(metavar="FILE", help="Write kvplan.result/1 records (JSONL) for `kvplan report`.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """How much KV cache a model needs, what fits on a GPU, and how fast decode can go."""
    context_tokens, kv_budget_tokens = parse_optional_count(context, "context"), parse_optional_count(kv_budget, "kv-budget")
    check_numbers({"tp": tp, "batch": batch, "block-size": block_size,  # finite, in range
                   "gpu-memory-utilization": gpu_memory_utilization, "params-b": params_b, "reserve-gib": reserve_gib,
                   "kv-cache-gib": kv_cache_gib, "gpu-mem-gib": gpu_mem_gib})
    if allocation not in ("full", "ideal"):
        raise ValueError(f"--allocation must be 'full' or 'ideal', got '{allocation}'")
    resolved = resolve_model(model)
    spec = resolved.spec
    if params_b is not None:
        spec = spec.with_param_count(params_b * 1e9)
    inputs = PlanInputs(
        model=spec, gpu=load_gpu(gpu), tp=tp, kv_format=parse_kv_format(kv_dtype, spec), context=context_tokens,
        batch=batch, block_size=block_size, gpu_memory_utilization=gpu_memory_utilization,
        reserve_bytes=None if reserve_gib is None else reserve_gib * GIB,
        kv_cache_bytes=None if kv_cache_gib is None else kv_cache_gib * GIB,
        weight_dtype=weight_dtype, respect_windows=allocation == "ideal", gpu_memory_gib=gpu_mem_gib,
        kv_budget=kv_budget_tokens, engine=engine_generation(engine, engine_version),
        engine_version=parse_version(engine_version), max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
    )
    if not sweep_axes:
        check_can_fit_somehow(inputs)
    if sweep_axes or csv_path or out:  # files of a single point are a sweep of one (numpy: only when written)
        axes = sweep_axes or [f"context={inputs.max_model_len}"]
        _run_sweep(inputs, axes, csv_path, out, as_json, table=bool(sweep_axes))
    if sweep_axes:
        return
    result = plan(inputs)
    if as_json:
        print(strict_json({**result.to_dict(), "model_resolution": resolution_record(resolved)}, indent=2))
        return
    render_resolution(resolved)
    render_plan(result)


def _run_sweep(inputs: PlanInputs, specs: list[str], csv_path: Path | None, out: Path | None, as_json: bool,
               table: bool = True) -> None:
    """Sweep (or a single point), writing CSV / result records; prints the table when asked."""
    from kvplan.plan.capacity_sweep import (
        COLUMNS,
        estimate_records,
        parse_axis,
        rows,
        sweep,
        write_csv,
    )
    from kvplan.results import write_jsonl
    from kvplan.results.atomic import restore_on_failure

    axes = dict(parse_axis(spec) for spec in specs)
    started = time.perf_counter()
    columns = sweep(inputs, axes)
    elapsed = time.perf_counter() - started
    with restore_on_failure(csv_path, out):  # both outputs or neither
        if csv_path:
            write_csv(columns, csv_path)
        if out:
            write_jsonl(out, estimate_records(rows(columns), "ideal" if inputs.respect_windows else "full"))
    if not table:
        return
    if as_json:
        records = rows(columns)
        print(strict_json({"schema": "kvplan.estimate-sweep/1", "columns": list(COLUMNS), "rows": records}))
        return
    count = len(columns["model"])
    console.print(_sweep_table(columns, rows({name: column[:SWEEP_TABLE_ROWS] for name, column in columns.items()}),
                               f"{count:,} configurations in {elapsed * 1000:.0f} ms", console.width))
    if count > SWEEP_TABLE_ROWS:
        where = f"all rows are in {escape(str(csv_path))}" if csv_path else "use --csv FILE or --json for all rows"
        console.print(f"[dim]showing {SWEEP_TABLE_ROWS} of {count:,} rows; {where}[/]")
    elif csv_path:
        console.print(f"[dim]wrote {escape(str(csv_path))}[/]")


def _sweep_table(columns: dict[str, Any], records: list[dict[str, Any]], summary: str, width: int) -> Table:
    """Settings that every configuration shares go to the title, so the table holds only what
    varies and the results; cells fold rather than being cut when the terminal is narrow."""
    shared = [c for c in SWEEP_SETTINGS if len({str(v) for v in columns[c]}) == 1]
    title = ", ".join(f"{c.replace('_', ' ')} {_plain(c, columns[c][0])}" for c in shared)
    shown = [c for c in SWEEP_SETTINGS if c not in shared] + list(SWEEP_RESULTS)
    headers = [SWEEP_HEADERS.get(column, column.replace("_", " ")) for column in shown]
    return fitted_table(escape(f"{title}: {summary}" if title else summary), headers,
                        [[_cell(column, record[column]) for column in shown] for record in records], width,
                        left=[h for c, h in zip(shown, headers) if c in ("model", "gpu", "kv_dtype", "verdict")],
                        flexible=[h for c, h in zip(shown, headers) if c in ("model", "gpu", "verdict")])


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


def render_plan(result: CapacityPlan) -> None:
    i = result.inputs
    m = i.model
    ctx = i.max_model_len
    moe = f", {m.params.active / 1e9:.1f}B active" if m.params.is_moe else ""
    console.print(f"[bold]{escape(m.name)}[/] ({m.kv_kind}, {m.params.total / 1e9:.2f}B params{moe}) on "
                  f"{i.tp} x {i.gpu.display_name}, KV {i.kv_format.name}, context {ctx:,}, batch {i.batch}")

    size = Table(title="KV cache size", show_header=False, title_justify="left")
    size.add_column(style="cyan")
    size.add_column(justify="right")
    size.add_column(style="dim")
    per_token = m.kv_bytes_per_token(i.kv_format)
    size.add_row("KV per token (all layers)", f"{per_token:,.0f} B", "; ".join(g.describe() for g in m.groups))
    if i.tp > 1:
        size.add_row("KV per token per GPU", f"{result.kv_bytes_per_token:,.0f} B", f"TP={i.tp}")
    naive = result.naive_kv_bytes_per_token
    if abs(naive - per_token) > 0.5:
        size.add_row("naive 2 x layers x hidden", f"{naive:,.0f} B",
                     f"{naive / per_token:.1f}x off: it ignores {_naive_gap(result)}")
    applies = "every layer at full length" + (" (chosen)" if m.has_windows and not i.respect_windows else "")
    if i.kv_budget is not None:  # the full size first, then what the eviction budget keeps
        size.add_row(f"one {ctx:,}-token sequence", fmt_bytes(result.seq_bytes_unbudgeted),
                     "without --kv-budget, per GPU")
        size.add_row(f"  kept under --kv-budget {i.kv_budget:,}", fmt_bytes(result.seq_bytes),
                     f"each layer keeps at most {i.kv_budget:,} tokens (whole blocks); concurrency below uses this")
    else:
        size.add_row(f"one {ctx:,}-token sequence", fmt_bytes(result.seq_bytes_full), applies + ", per GPU")
    if i.kv_budget is None and (m.has_windows or result.seq_bytes_ideal != result.seq_bytes_full):
        chosen = " (chosen)" if i.respect_windows else ""
        size.add_row("  ideal, windows kept", fmt_bytes(result.seq_bytes_ideal),
                     f"sliding layers hold only their window{chosen}; vLLM's hybrid KV cache manager allocates this")
    if m.state_bytes_per_seq(i.tp):
        size.add_row("  of which per-sequence state", fmt_bytes(m.state_bytes_per_seq(i.tp)), "linear-attention layers")
    size.add_row(f"batch of {i.batch}", fmt_bytes(result.seq_bytes * i.batch), "per GPU")
    console.print(size)

    memory = Table(title="Memory per GPU", show_header=False, title_justify="left")
    memory.add_column(style="cyan")
    memory.add_column(justify="right")
    memory.add_column(style="dim")
    profile = engine_memory(i)
    total_note = ("--gpu-mem-gib" if i.gpu_memory_gib else
                  "driver total seen in a real log; kvplan profiles gpus" if i.gpu.driver_memory_gib else
                  (f"datasheet {i.gpu.memory_gib:g} GiB x 15/16: inline GDDR ECC (driver total not observed)"
                   if i.gpu.gddr_ecc else f"datasheet {i.gpu.memory_gib:g} GiB x 0.99 (driver total not observed)"))
    memory.add_row("usable", fmt_bytes(result.usable_bytes),
                   f"{profile.total_bytes / GIB:.2f} GiB x {i.utilization} ({total_note})")
    memory.add_row("weights", fmt_bytes(result.weight_bytes_per_gpu), f"{m.weight_format_name(i.weight_dtype)}, / TP {i.tp}")
    if i.reserve_bytes is not None:
        memory.add_row("reserve", fmt_bytes(result.reserve_bytes), "--reserve-gib")
    else:
        memory.add_row("activation peak", fmt_bytes(profile.activation_bytes),
                       f"profiling run: {profile.batched_tokens:,} tokens, sampler for {profile.sampler_rows:,} sequences"
                       + (f" ({SAMPLER_PATH_NAMES[profile.sampler_path]})" if profile.sampler_path else "")
                       + ("; not modeled: the vision encoder's own profiling pass, which vLLM runs first unless "
                          "--language-model-only" if m.params.vision and profile.engine != "sglang" else ""))
        memory.add_row("non-torch memory", fmt_bytes(profile.non_torch_bytes), "CUDA context, loaded kernels (fitted)")
        memory.add_row("CUDA graphs", fmt_bytes(profile.cuda_graph_bytes),
                       "counted before KV sizing" if profile.cuda_graph_bytes else "captured after KV sizing")
    memory.add_row("KV budget", fmt_bytes(result.kv_budget_bytes), f"{result.num_blocks:,} blocks of {fmt_bytes(result.block_bytes)}")
    report = result.engine_report()
    budget_note = f"each request keeps {i.kv_budget:,} tokens per layer (--kv-budget)" if i.kv_budget else ""
    if report is not None and i.kv_budget is None:
        groups = f"{report['kv_cache_groups']} KV cache groups, block {report['block_size']}" \
            if "kv_cache_groups" in report else "SGLang's token pool"
        memory.add_row("GPU KV cache size", f"{report['reported_tokens']:,} tokens", f"as the engine logs it ({groups})")
        memory.add_row(f"Maximum concurrency for {ctx:,} tokens per request", f"{report['reported_concurrency']:.2f}x",
                       "as the engine logs it")
        if "true_concurrency" in report and abs(report["true_concurrency"] - report["reported_concurrency"]) > 0.005:
            memory.add_row("  concurrency once prefilled", f"{report['true_concurrency']:.2f}x",
                           "sliding-window layers then hold only their window (kvplan)")
    else:
        memory.add_row("GPU KV cache size", f"{result.kv_cache_tokens:,} tokens", "blocks x block size")
        memory.add_row(f"Maximum concurrency for {ctx:,} tokens per request", f"{result.max_concurrency:.2f}x",
                       budget_note)
    memory.add_row(f"largest batch at {ctx:,} tokens", fmt_int(result.max_batch), "")
    limit_note = "the model's maximum context" if result.max_context >= result.context_limit else ""
    memory.add_row(f"largest context at batch {i.batch}", fmt_int(result.max_context), limit_note)
    smallest = smallest_tp_for_weights(i)
    memory.add_row("smallest TP that fits the weights", str(smallest) if smallest else "none up to 64", "")
    console.print(memory)
    console.print(f"[dim]memory model: {ENGINE_DESCRIPTIONS[i.engine]}"
                  f"{'; KV budget fixed by --kv-cache-gib' if i.kv_cache_bytes is not None else ''}[/]")

    if result.fits:
        console.print(Panel(f"[bold green]FITS[/]: {i.batch} x {ctx:,} tokens on {i.tp} x {i.gpu.name}", expand=False))
        render_roofline(result)
    else:
        lines = [f"[bold red]DOES NOT FIT[/] ({result.verdict})", *result.reasons]
        lines += [f"  -> {tip}" for tip in result.suggestions]
        console.print(Panel("\n".join(lines), expand=False))


def _naive_gap(result: CapacityPlan) -> str:
    m = result.inputs.model
    kinds = []
    if any(g.kind == "mla" for g in m.groups):
        kinds.append("MLA's compressed latent")
    full = [g for g in m.groups if g.kind in ("full", "sliding")]
    if full and full[0].num_kv_heads < m.num_heads:
        kinds.append(f"the {full[0].num_kv_heads} KV heads of {m.num_heads} query heads")
    if full and full[0].head_dim * m.num_heads != m.hidden_size:
        kinds.append(f"head_dim {full[0].head_dim} x {m.num_heads} heads != hidden {m.hidden_size}")
    if any(g.kind == "state" for g in m.groups):
        kinds.append("linear-attention layers that keep no per-token KV")
    return ", ".join(kinds) or "the model's KV layout"


def render_roofline(result: CapacityPlan) -> None:
    i = result.inputs
    roof = Roofline(i.model, i.gpu, i.tp, i.kv_format, i.weight_dtype)
    ctx = i.max_model_len
    table = Table(title=f"Decode roofline at {ctx:,} tokens (lower bound, per replica of {i.tp} GPU)",
                  title_justify="left", header_style="bold")
    for column in ("batch", "ITL (ms)", "tokens/s", "bound"):
        table.add_column(column, justify="right")
    batches = sorted({b for b in (1, 8, 32, 128, 512, i.batch, result.max_batch) if 1 <= b <= max(1, result.max_batch)})
    for b in batches:
        step = roof.decode_step_time(b, ctx)
        memory_time = (roof.weight_bytes_read(b) + b * roof.kv_read_bytes(ctx)) / roof.bandwidth
        bound = "memory" if memory_time >= step * 0.999 else "compute"
        table.add_row(str(b), f"{step * 1e3:.2f}", f"{b / step:,.0f}", bound)
    console.print(table)
    console.print(f"[dim]prefill of {ctx:,} tokens >= {roof.prefill_time(ctx) * 1e3:,.1f} ms "
                  f"({'FP8' if roof.uses_fp8_compute else 'BF16'} peak {roof.peak_flops / 1e12:,.0f} TFLOP/s, "
                  f"HBM {i.gpu.hbm_tbps} TB/s; source: {i.gpu.source})[/]")
