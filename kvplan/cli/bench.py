"""`kvplan bench`: run KV optimizations on one request stream through the engine, compare."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.markup import escape
from rich.table import Table

from kvplan.cli.common import (BlockSizeOpt, GpuOpt, JsonOpt, KvDtypeOpt, ModelOpt, SeedOpt, TpOpt, UtilOpt,
                               cli_errors, console, error_console)

DEFAULT_MAX_MODEL_LEN = 4096


def _params(pairs: list[str]) -> dict[str, Any]:
    """NAME=VALUE generator settings, numbers parsed as int or float."""
    params: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--workload-param '{pair}' needs NAME=VALUE, e.g. doc_len=2048")
        text = value.strip()
        try:
            params[name.strip()] = int(text)
        except ValueError:
            try:
                params[name.strip()] = float(text)
            except ValueError:
                params[name.strip()] = text
    return params


def _workload(workload: str, trace: Optional[Path], trace_format: Optional[str], skip_bad_lines: bool,
              num_requests: Optional[int], rate: float, arrival: str, cv: float, seed: int,
              max_model_len: int, stats_path: Optional[Path], time_scale: float,
              extra: dict[str, Any]) -> tuple[list, dict[str, Any]]:
    from kvplan.workload import load_trace, make_workload

    if trace is not None:
        loaded = load_trace(trace, trace_format, skip_bad_lines=skip_bad_lines, max_requests=num_requests,
                            time_scale=time_scale)
        if loaded.skipped:
            error_console.print(f"[yellow]warning:[/] skipped {loaded.skipped} malformed lines in {trace}")
        info = {"kind": "trace", "path": str(trace), "format": loaded.fmt, "skipped_lines": loaded.skipped,
                "time_scale": time_scale}
        return loaded.requests, info
    if workload == "random" or math.isinf(rate):
        # Issue 15: `vllm bench serve`-shaped streams (vLLM's random dataset, rate inf = all at t=0).
        from kvplan.workload.vllm_bench import BenchLoad, bench_requests

        if workload not in ("random", "sharegpt"):
            raise ValueError(f"--rate inf goes with --workload random or sharegpt (vLLM's datasets), not {workload}")
        load = BenchLoad(dataset=workload, num_prompts=num_requests or 1000, input_len=extra.pop("input_len", 1024),
                         output_len=extra.pop("output_len", 128), range_ratio=extra.pop("range_ratio", 0.0),
                         request_rate=rate, burstiness=extra.pop("burstiness", 1.0), seed=seed)
        info = {"kind": workload, "rate": rate, "input_len": load.input_len, "output_len": load.output_len,
                "range_ratio": load.range_ratio, "burstiness": load.burstiness}
        return bench_requests(load), info
    try:
        requests = make_workload(workload, num_requests or 1000, rate=rate, arrival=arrival, cv=cv, seed=seed,
                                 max_model_len=max_model_len, stats_path=stats_path, **extra)
    except TypeError as err:  # an unknown --workload-param name
        raise ValueError(f"--workload-param: {err}; see the generator's parameters in the README") from None
    info = {"kind": workload, "rate": rate, "arrival": arrival, "cv": cv, **extra}
    return requests, info


@cli_errors("out")
def bench(
    model: ModelOpt = "llama-3.1-8b",
    gpu: GpuOpt = "l4",
    tp: TpOpt = 1,
    kv_dtype: KvDtypeOpt = "auto",
    optimizations: Annotated[str, typer.Option(help="Comma-separated optimizations; the first is the baseline. Compose with +, e.g. paged+fp8.")] = "contiguous-max,contiguous-pow2,contiguous-oracle,paged,prefix",
    workload: Annotated[str, typer.Option(help="Synthetic workload: sharegpt, alpaca, sharegpt-stats, long-reasoning, system-prompt, rag, chat, few-shot.")] = "sharegpt",
    workload_param: Annotated[Optional[list[str]], typer.Option("--workload-param", help="Generator setting NAME=VALUE, e.g. doc_len=2048, zipf_s=1.2, turns_per_session=8, system_prompt_len=512.")] = None,
    samples: Annotated[int, typer.Option(help="Parallel samples per request (n > 1 shares the prompt's blocks copy-on-write).")] = 1,
    pods: Annotated[int, typer.Option(help="Engine instances behind a router, each with its own KV pool.")] = 1,
    router: Annotated[str, typer.Option(help="Comma-separated routers for --pods > 1: round-robin, least-loaded, sticky, prefix-hash, kv-aware.")] = "round-robin,least-loaded,sticky,prefix-hash,kv-aware",
    w_hit: Annotated[float, typer.Option(help="kv-aware router: weight of the cached-prefix fraction.")] = 0.8,
    w_load: Annotated[float, typer.Option(help="kv-aware router: weight of the load.")] = 0.2,
    trace: Annotated[Optional[Path], typer.Option(help="Replay a trace instead: Mooncake JSONL, Azure CSV or generic JSONL.")] = None,
    trace_format: Annotated[Optional[str], typer.Option(help="mooncake, azure or generic (default: detected).")] = None,
    skip_bad_lines: Annotated[bool, typer.Option(help="Skip malformed trace lines (counted) instead of failing.")] = False,
    time_scale: Annotated[float, typer.Option(help="Multiply trace arrival times (0.5 = twice the rate).")] = 1.0,
    stats_path: Annotated[Optional[Path], typer.Option(help="ShareGPT stats CSV for --workload sharegpt-stats.")] = None,
    rate: Annotated[float, typer.Option(help="Requests per second (synthetic workloads).")] = 3.0,
    arrival: Annotated[str, typer.Option(help="poisson, gamma or burst (all at t=0).")] = "poisson",
    cv: Annotated[float, typer.Option(help="Coefficient of variation of gamma arrivals.")] = 1.0,
    num_requests: Annotated[Optional[int], typer.Option(help="Requests to generate (default 1000), or the first N of a trace.")] = None,
    max_model_len: Annotated[Optional[int], typer.Option(help="Longest request; contiguous-max reserves this. Default 4096 for synthetic workloads, the model's maximum for traces.")] = None,
    block_size: BlockSizeOpt = 16,
    gpu_memory_utilization: UtilOpt = 0.9,
    kv_cache_gib: Annotated[Optional[float], typer.Option(help="Fix the KV budget per GPU instead of deriving it from memory.")] = None,
    max_num_seqs: Annotated[int, typer.Option(help="Most sequences per step.")] = 256,
    max_num_batched_tokens: Annotated[int, typer.Option(help="Token budget per step.")] = 8192,
    chunked_prefill: Annotated[bool, typer.Option(help="Split long prefills across steps.")] = True,
    preemption: Annotated[str, typer.Option(help="recompute (vLLM v1) or swap to a CPU area.")] = "recompute",
    swap_space_gib: Annotated[float, typer.Option(help="CPU swap area per GPU for --preemption swap.")] = 4.0,
    seed: SeedOpt = 0,
    out: Annotated[Optional[Path], typer.Option(help="Results JSONL (default reports/bench-MODEL-GPU.jsonl).")] = None,
    mode: Annotated[str, typer.Option(help="simulated (roofline time, no tensors) or real (KV in torch block pools, a transformers model, wall-clock time).")] = "simulated",
    device: Annotated[str, typer.Option(help="Real mode: cpu, cuda or auto.")] = "auto",
    model_path: Annotated[Optional[Path], typer.Option(help="Real mode: a local transformers checkpoint folder (offline).")] = None,
    layers: Annotated[Optional[int], typer.Option(help="Real mode with a profile: keep only the first N layers (random weights).")] = None,
    model_dtype: Annotated[str, typer.Option(help="Real mode: fp32, fp16, bf16 or auto (fp32 on CPU, bf16 on CUDA).")] = "auto",
    kernel_backend: Annotated[Optional[str], typer.Option(help="Real mode kernels: triton, torch or reference (default: Triton where it can run).")] = None,
    cpu_cache_gb: Annotated[float, typer.Option(help="offload-cpu / offload-disk: host-memory tier size (GB).")] = 64.0,
    disk_cache_gb: Annotated[float, typer.Option(help="offload-disk: local-disk tier size (GB).")] = 512.0,
    tier_policy: Annotated[str, typer.Option(help="Eviction inside the offload tiers: lru or arc.")] = "lru",
    host_link_gbps: Annotated[Optional[float], typer.Option(help="GPU-host bandwidth for the CPU tier (GB/s); default: the GPU profile's.")] = None,
    nvme_gbps: Annotated[Optional[float], typer.Option(help="Disk tier bandwidth (GB/s); default: the GPU profile's.")] = None,
    disk_dir: Annotated[Optional[Path], typer.Option(help="Real mode: folder for the disk tier (default: a temporary folder).")] = None,
    quality_text: Annotated[Optional[Path], typer.Option(help="Real mode: measure perplexity, KL and greedy agreement of each optimization (KV formats, eviction policies) on this text.")] = None,
    tokenizer: Annotated[Optional[Path], typer.Option(help="A llama2.c tokenizer (tok*.bin) for --quality-text; default: the checkpoint's own.")] = None,
    kv_budget: Annotated[Optional[int], typer.Option(help="Tokens per layer an eviction policy keeps (sliding-window, streaming, h2o, snapkv, paged-eviction, entropy-budget).")] = None,
    report: Annotated[bool, typer.Option("--report", help="Also write the HTML/PNG report next to the results.")] = False,
    # Issue 15: vLLM-bench-shaped load and output, and the step model's calibration.
    input_len: Annotated[int, typer.Option(help="--workload random: vLLM's --input-len.")] = 1024,
    output_len: Annotated[int, typer.Option(help="--workload random: vLLM's --output-len.")] = 128,
    random_range_ratio: Annotated[float, typer.Option(help="--workload random: lengths uniform in [L(1-r), L(1+r)] (current vLLM).")] = 0.0,
    burstiness: Annotated[float, typer.Option(help="Gamma shape of vLLM-style send gaps (1 = Poisson), with --rate.")] = 1.0,
    max_concurrency: Annotated[Optional[int], typer.Option(help="Closed loop like vllm bench serve --max-concurrency: at most N requests in flight.")] = None,
    calibration: Annotated[Optional[Path], typer.Option(help="Step-model calibration from `kvplan calibrate` (default: the GPU family's fitted factors).")] = None,
    output_format: Annotated[str, typer.Option("--format", help="table, or vllm: also print vLLM's 'Serving Benchmark Result' block per optimization.")] = "table",
    as_json: JsonOpt = False,
) -> None:
    """Run every optimization on the identical request stream and compare (simulated or real mode)."""
    from kvplan.bench import BenchConfig, parse_optimization, run_matrix, size_engine, variant_names
    from kvplan.core.scheduler import SchedulerConfig
    from kvplan.spec.profiles import load_model
    from kvplan.results import write_jsonl

    names = [name.strip() for name in optimizations.split(",") if name.strip()]
    if quality_text is not None:
        if mode != "real":
            raise ValueError("--quality-text needs --mode real: quality is measured on a real model")
        from kvplan.cli.quality import run_quality_command

        run_quality_command(model, model_path, layers, device, model_dtype, seed, names, quality_text, tokenizer,
                            kv_budget, kv_cache_gib, out, as_json, report)
        return
    for name in names:
        parse_optimization(name)
    if model_path is not None:
        model = str(model_path)
    spec = load_model(model)
    if mode == "real" and max_model_len is None:
        max_model_len = min(spec.max_position_embeddings or DEFAULT_MAX_MODEL_LEN, DEFAULT_MAX_MODEL_LEN)
    if max_model_len is None:
        max_model_len = spec.max_position_embeddings if trace else min(DEFAULT_MAX_MODEL_LEN, spec.max_position_embeddings or DEFAULT_MAX_MODEL_LEN)
    if max_model_len < 2:
        raise ValueError(f"--max-model-len must be at least 2, got {max_model_len}")
    if num_requests is not None and num_requests < 1:
        raise ValueError(f"--num-requests must be at least 1, got {num_requests}")
    if output_format not in ("table", "vllm"):
        raise ValueError(f"--format must be table or vllm, got '{output_format}'")
    vllm_params = {"input_len": input_len, "output_len": output_len, "range_ratio": random_range_ratio,
                   "burstiness": burstiness} if workload == "random" or math.isinf(rate) else {}
    requests, workload_info = _workload(workload, trace, trace_format, skip_bad_lines, num_requests, rate, arrival,
                                        cv, seed, max_model_len, stats_path, time_scale,
                                        {**_params(workload_param or []), **vllm_params})
    if samples < 1:
        raise ValueError(f"--samples must be at least 1, got {samples}")
    if samples > 1:
        requests = [dataclasses.replace(r, n=samples) for r in requests]
        workload_info["samples"] = samples
    scheduler = SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                                chunked_prefill=chunked_prefill, preemption=preemption)
    config = BenchConfig(model=model, gpu=gpu, tp=tp, kv_dtype=kv_dtype, block_size=block_size,
                         gpu_memory_utilization=gpu_memory_utilization, kv_cache_gib=kv_cache_gib,
                         max_model_len=max_model_len, scheduler=scheduler, seed=seed,
                         swap_space_gib=swap_space_gib if preemption == "swap" else 0.0, workload=workload_info,
                         pods=pods, routers=tuple(r.strip() for r in router.split(",") if r.strip()) if pods > 1 else (),
                         w_hit=w_hit, w_load=w_load, mode=mode, device=device,
                         model_path=str(model_path) if model_path else None, layers=layers,
                         model_dtype=model_dtype, kernel_backend=kernel_backend, kv_budget=kv_budget,
                         cpu_cache_gb=cpu_cache_gb, disk_cache_gb=disk_cache_gb, tier_policy=tier_policy,
                         host_link_gbps=host_link_gbps, nvme_gbps=nvme_gbps,
                         disk_dir=str(disk_dir) if disk_dir else None,
                         calibration=str(calibration) if calibration else None, max_concurrency=max_concurrency,
                         vllm_figures=output_format == "vllm")
    if mode == "simulated":
        for name in names:  # fail on impossible sizing before any progress bar is drawn
            size_engine(config, parse_optimization(name))
    out = out or Path("reports") / f"bench-{spec.name}-{gpu if mode == 'simulated' else 'real'}.jsonl"
    started = time.perf_counter()
    with Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=error_console, transient=True) as progress:
        tasks = {name: progress.add_task(name, total=len(requests)) for name in variant_names(config, names)}
        records = run_matrix(config, requests, names, lambda name, n: progress.advance(tasks[name], n))
    write_jsonl(out, records)
    report_index = None
    if report:
        from kvplan.report import write_report

        report_index = write_report([out], out.with_suffix("")).index
    elapsed = time.perf_counter() - started
    if as_json:
        print(json.dumps([{"optimization": r["optimization"], **r["metrics"]} for r in records], indent=2))
        return
    render_comparison(records)
    if output_format == "vllm":  # issue 15: lay beside a measured `vllm bench serve` run
        from kvplan.sim.vllm_metrics import format_serving_block

        for record in records:
            figures = {k[5:]: v for k, v in record["metrics"].items() if k.startswith("vllm_")}
            console.print(escape(format_serving_block(figures, f"modeled by kvplan: {record['optimization']}")),
                          highlight=False)
    console.print(f"[dim]{len(requests):,} requests x {len(records)} optimizations in {elapsed:.1f} s; "
                  f"results: {out}[/]")
    if report_index:
        console.print(f"report: {report_index}")


ROWS: tuple[tuple[str, str, str], ...] = (
    # (label, metric, format); pct = share of the KV pool, time-averaged
    ("token states", "token_states_share", "pct"),
    ("reservation", "reservation_share", "pct"),
    ("internal frag.", "internal_fragmentation_share", "pct"),
    ("external frag.", "external_fragmentation_share", "pct"),
    ("free", "free_share", "pct"),
    ("waste", "waste", "pct"),
    ("KV cache usage", "kv_cache_usage_mean", "pct"),
    ("running (mean)", "running_mean", "float"),
    ("running (peak)", "running_peak", "int"),
    ("waiting (mean)", "waiting_mean", "float"),
    ("preemptions", "preemptions", "int"),
    ("recomputed tokens", "recomputed_tokens", "int"),
    ("output tokens/s", "output_tokens_per_s", "rate"),
    ("total tokens/s", "total_tokens_per_s", "rate"),
    ("requests/s", "requests_per_s", "float"),
    ("TTFT p50/90/99", "ttft_s", "pcts"),
    ("TPOT p50/90/99", "tpot_s", "pcts"),
    ("E2E p50/90/99", "e2e_s", "pcts"),
    ("finished/rejected", "requests_finished", "done"),
)


def render_comparison(records: list[dict[str, Any]]) -> None:
    """One column per optimization, one row per metric; throughput also as a ratio to the baseline."""
    base = records[0]["metrics"]
    params = records[0]["params"]
    mode = records[0].get("mode", "simulated")
    where = f"real mode on {records[0]['metrics']['device']}" if mode == "real" else f"{params['tp']} x {params['gpu']}"
    table = Table(title=f"{params['model']} on {where}, {params['num_requests']:,} requests "
                        f"({params['workload'].get('kind')}), KV {params['kv_format']}, "
                        f"max_model_len {params['max_model_len']:,}", header_style="bold", title_justify="left")
    table.add_column("metric", style="cyan", no_wrap=True)
    for record in records:
        table.add_column(record["optimization"] + (" (base)" if record is records[0] else ""), justify="right")
    for label, key, kind in ROWS:
        cells = [_cell(record["metrics"], key, kind) for record in records]
        if kind == "pcts" and mode == "simulated":
            label += "*"
        table.add_row(label, *cells)
    ratios = [m["output_tokens_per_s"] / base["output_tokens_per_s"] if base["output_tokens_per_s"] else 0.0
              for m in (record["metrics"] for record in records)]
    table.add_row("throughput vs base", *(f"{r:.2f}x" for r in ratios))
    console.print(table)
    if mode == "simulated":
        source = records[0]["metrics"].get("step_model", "")  # issue 15
        console.print(f"[dim]* modeled by the step model ({escape(source)}), not measured[/]")
    else:
        console.print("[dim]* measured wall-clock time[/]")


def _cell(metrics: dict[str, Any], key: str, kind: str) -> str:
    if kind == "pcts":
        return " ".join(_seconds(metrics.get(f"{key}_{p}")) for p in ("p50", "p90", "p99"))
    if kind == "done":
        return f"{metrics['requests_finished']:,} / {metrics['requests_rejected']:,}"
    value = metrics.get(key)
    if value is None:
        return "-"
    return {"pct": lambda: _pct(value), "float": lambda: f"{value:,.2f}", "int": lambda: f"{value:,}",
            "rate": lambda: f"{value:,.0f}"}[kind]()


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1e3:.0f}ms" if value < 1 else f"{value:.1f}s"
