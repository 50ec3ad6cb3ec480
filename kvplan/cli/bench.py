"""`kvplan bench`: run KV optimizations on one request stream through the engine, compare."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from kvplan.bench.comparison import comparison
from kvplan.bench.optimizations import DEFAULT_OPTIMIZATIONS as OPTIMIZATIONS_BY_DEFAULT
from kvplan.bench.optimizations import names_help
from kvplan.bench.workloads import DEFAULT_WORKLOAD
from kvplan.cli.bench_table import render_comparison
from kvplan.cli.common import (
    BlockSizeOpt,
    EngineOpt,
    EngineVersionOpt,
    GpuOpt,
    JsonOpt,
    KvDtypeOpt,
    ModelOpt,
    SeedOpt,
    TpOpt,
    UtilOpt,
    cli_errors,
    console,
    error_console,
    escape,
)
from kvplan.cli.resolution import render_resolution
from kvplan.core.engine_factory import SizingConfig
from kvplan.results.atomic import strict_json  # no NaN/Infinity in JSON output
from kvplan.spec.numbers import check_numbers
from kvplan.spec.resolve import resolve_model

DEFAULT_OPTIMIZATIONS = ",".join(OPTIMIZATIONS_BY_DEFAULT)
SIZING = SizingConfig  # the sizing settings' defaults are declared there, once
DEFAULT_ROUTERS = "round-robin,least-loaded,sticky,prefix-hash,kv-aware"


@cli_errors("out")
def bench(
    model: ModelOpt = SIZING.model,
    gpu: GpuOpt = SIZING.gpu,
    tp: TpOpt = SIZING.tp,
    kv_dtype: KvDtypeOpt = SIZING.kv_dtype,
    # show_default=False: the default list is one word that a narrow help column would cut; the help spells it out
    optimizations: Annotated[str, typer.Option(rich_help_panel="KV formats and policies", metavar="LIST", show_default=False, help=f"Comma-separated optimizations; the first is the baseline. Compose with +, e.g. paged+fp8, prefix+offload-cpu, h2o+int4. Names: {names_help()}. Default: {DEFAULT_OPTIMIZATIONS.replace(',', ', ')}.")] = DEFAULT_OPTIMIZATIONS,
    workload: Annotated[str, typer.Option(rich_help_panel="Workload", metavar="NAME", help="Synthetic workload: system-prompt (ShareGPT-like messages after one shared system prompt), sharegpt, alpaca, sharegpt-stats, long-reasoning, rag, chat, few-shot, random.")] = DEFAULT_WORKLOAD,
    workload_param: Annotated[Optional[list[str]], typer.Option("--workload-param", rich_help_panel="Workload", metavar="NAME=VALUE", help="Generator setting NAME=VALUE, e.g. doc_len=2048, zipf_s=1.2, turns_per_session=8, system_prompt_len=512.")] = None,
    samples: Annotated[int, typer.Option(rich_help_panel="Workload", metavar="N", help="Parallel samples per request (n > 1 shares the prompt's blocks copy-on-write).")] = 1,
    pods: Annotated[int, typer.Option(rich_help_panel="Cluster", metavar="N", help="Engine instances behind a router, each with its own KV pool.")] = 1,
    router: Annotated[str, typer.Option(rich_help_panel="Cluster", metavar="LIST", show_default=False, help=f"Comma-separated routers for --pods > 1: round-robin, least-loaded, sticky, prefix-hash, kv-aware. Default: {DEFAULT_ROUTERS.replace(',', ', ')}.")] = DEFAULT_ROUTERS,
    w_hit: Annotated[float, typer.Option(rich_help_panel="Cluster", metavar="X", help="kv-aware router: weight of the cached-prefix fraction.")] = 0.8,
    w_load: Annotated[float, typer.Option(rich_help_panel="Cluster", metavar="X", help="kv-aware router: weight of the load.")] = 0.2,
    trace: Annotated[Optional[Path], typer.Option(rich_help_panel="Workload", metavar="FILE", help="Replay a trace instead: Mooncake JSONL, Azure CSV or generic JSONL.")] = None,
    trace_format: Annotated[Optional[str], typer.Option(rich_help_panel="Workload", metavar="NAME", help="mooncake, azure or generic (default: detected).")] = None,
    skip_bad_lines: Annotated[bool, typer.Option("--skip-bad-lines", rich_help_panel="Workload", metavar="", help="Skip malformed trace lines (counted) instead of failing.")] = False,
    time_scale: Annotated[float, typer.Option(rich_help_panel="Workload", metavar="X", help="Multiply trace arrival times (0.5 = twice the rate).")] = 1.0,
    stats_path: Annotated[Optional[Path], typer.Option(rich_help_panel="Workload", metavar="FILE", help="ShareGPT stats CSV for --workload sharegpt-stats.")] = None,
    rate: Annotated[float, typer.Option(rich_help_panel="Workload", metavar="REQ/S", help="Requests per second (synthetic workloads).")] = 3.0,
    arrival: Annotated[str, typer.Option(rich_help_panel="Workload", metavar="NAME", help="poisson, gamma or burst (all at t=0).")] = "poisson",
    cv: Annotated[float, typer.Option(rich_help_panel="Workload", metavar="X", help="Coefficient of variation of gamma arrivals.")] = 1.0,
    num_requests: Annotated[Optional[int], typer.Option(rich_help_panel="Workload", metavar="N", help="Requests to generate (default 1000), or the first N of a trace.")] = None,
    max_model_len: Annotated[Optional[int], typer.Option(rich_help_panel="Workload", metavar="TOKENS", help="Longest request; contiguous-max reserves this. Default 4096 for synthetic workloads, the model's maximum for traces.")] = None,
    block_size: BlockSizeOpt = SIZING.block_size,
    gpu_memory_utilization: UtilOpt = None,
    kv_cache_gib: Annotated[Optional[float], typer.Option(rich_help_panel="Engine", metavar="GIB", help="Fix the KV budget per GPU instead of deriving it from memory.")] = None,
    max_num_seqs: Annotated[Optional[int], typer.Option(rich_help_panel="Engine", metavar="N", help="Most sequences per step; default: the engine's for its release and GPU (vLLM: 1024 on >= 70 GiB GPUs but A100s, else 256).")] = None,
    max_num_batched_tokens: Annotated[Optional[int], typer.Option(rich_help_panel="Engine", metavar="N", help="Token budget per step; default: the engine's (vLLM serve: 8192 on >= 70 GiB GPUs but A100s, else 2048).")] = None,
    engine: EngineOpt = "vllm",
    engine_version: EngineVersionOpt = None,
    # one flag, no --chunked-prefill/--no- pair: the pair's second column squeezed the Engine panel's names at 80 columns
    no_chunked_prefill: Annotated[bool, typer.Option("--no-chunked-prefill", rich_help_panel="Engine", metavar="", help="Run each prefill whole in one step; by default long prefills are split across steps (chunked prefill).")] = False,
    preemption: Annotated[str, typer.Option(rich_help_panel="Engine", metavar="NAME", help="recompute (vLLM v1) or swap to a CPU area.")] = "recompute",
    swap_space_gib: Annotated[float, typer.Option(rich_help_panel="Engine", metavar="GIB", help="CPU swap area per GPU for --preemption swap.")] = 4.0,
    seed: SeedOpt = 0,
    out: Annotated[Optional[Path], typer.Option(rich_help_panel="Output", metavar="FILE", help="Results JSONL (default: a new reports/bench-MODEL-GPU-TIMESTAMP.jsonl; reports/latest names it).")] = None,
    mode: Annotated[str, typer.Option(rich_help_panel="Real mode", metavar="NAME", help="simulated (roofline time, no tensors) or real (KV in torch block pools, a transformers model, wall-clock time).")] = "simulated",
    device: Annotated[str, typer.Option(rich_help_panel="Real mode", metavar="NAME", help="Real mode: cpu, cuda or auto.")] = "auto",
    model_path: Annotated[Optional[Path], typer.Option(rich_help_panel="Real mode", metavar="DIR", help="Real mode: a local transformers checkpoint folder (offline).")] = None,
    layers: Annotated[Optional[int], typer.Option(rich_help_panel="Real mode", metavar="N", help="Real mode with a profile: keep only the first N layers (random weights).")] = None,
    model_dtype: Annotated[str, typer.Option(rich_help_panel="Real mode", metavar="NAME", help="Real mode: fp32, fp16, bf16 or auto (fp32 on CPU, bf16 on CUDA).")] = "auto",
    kernel_backend: Annotated[Optional[str], typer.Option(rich_help_panel="Real mode", metavar="NAME", help="Real mode kernels: triton, torch or reference (default: Triton where it can run).")] = None,
    cpu_cache_gb: Annotated[float, typer.Option(rich_help_panel="Offload tiers", metavar="GB", help="offload-cpu / offload-disk: host-memory tier size (GB).")] = 64.0,
    disk_cache_gb: Annotated[float, typer.Option(rich_help_panel="Offload tiers", metavar="GB", help="offload-disk: local-disk tier size (GB).")] = 512.0,
    tier_policy: Annotated[str, typer.Option(rich_help_panel="Offload tiers", metavar="NAME", help="Eviction inside the offload tiers: lru or arc.")] = "lru",
    host_link_gbps: Annotated[Optional[float], typer.Option(rich_help_panel="Offload tiers", metavar="GB/S", help="GPU-host bandwidth for the CPU tier (GB/s); default: the GPU profile's.")] = None,
    nvme_gbps: Annotated[Optional[float], typer.Option(rich_help_panel="Offload tiers", metavar="GB/S", help="Disk tier bandwidth (GB/s); default: the GPU profile's.")] = None,
    disk_dir: Annotated[Optional[Path], typer.Option(rich_help_panel="Offload tiers", metavar="DIR", help="Real mode: folder for the disk tier (default: a temporary folder).")] = None,
    quality_text: Annotated[Optional[Path], typer.Option(rich_help_panel="Real mode", metavar="FILE", help="Real mode: measure perplexity, KL and greedy agreement of each optimization (KV formats, eviction policies) on this text.")] = None,
    tokenizer: Annotated[Optional[Path], typer.Option(rich_help_panel="Real mode", metavar="FILE", help="A llama2.c tokenizer (tok*.bin) for --quality-text; default: the checkpoint's own.")] = None,
    kv_budget: Annotated[Optional[int], typer.Option(rich_help_panel="KV formats and policies", metavar="TOKENS", help="Tokens per layer an eviction policy keeps (sliding-window, streaming, h2o, snapkv, paged-eviction, entropy-budget).")] = None,
    report: Annotated[bool, typer.Option("--report", rich_help_panel="Output", metavar="", help="Also write the HTML/PNG report next to the results.")] = False,
    # vLLM-bench-shaped load, and the opt-in calibrated step model.
    input_len: Annotated[int, typer.Option(rich_help_panel="Workload", metavar="N", help="--workload random: vLLM's --input-len.")] = 1024,
    output_len: Annotated[int, typer.Option(rich_help_panel="Workload", metavar="N", help="--workload random: vLLM's --output-len.")] = 128,
    random_range_ratio: Annotated[Optional[float], typer.Option(rich_help_panel="Workload", metavar="X", help="--workload random: lengths uniform in [L(1-r), L(1+r)], or in [L r, L] as vLLM's client read it before 0.8.4 (--engine-version); default: fixed lengths.")] = None,
    burstiness: Annotated[float, typer.Option(rich_help_panel="Workload", metavar="X", help="--workload random or --rate inf: gamma shape of vLLM-style send gaps (1 = Poisson).")] = 1.0,
    step_model: Annotated[Optional[str], typer.Option(rich_help_panel="Engine", metavar="NAME", help="How steps are timed: fitted (the default: the step model with the shipped factors of the GPU family and engine, printed with their held-out error) or roofline (datasheet peak, a lower bound).")] = None,
    calibration: Annotated[Optional[Path], typer.Option(rich_help_panel="Engine", metavar="FILE", help="Time steps with the step model fitted by `kvplan calibrate` (this file).")] = None,
    max_concurrency: Annotated[Optional[int], typer.Option(rich_help_panel="Workload", metavar="N", help="Closed loop like vllm bench serve --max-concurrency: at most N requests in flight.")] = None,
    output_format: Annotated[str, typer.Option("--format", rich_help_panel="Output", metavar="NAME", help="table, or vllm: also print vLLM's 'Serving Benchmark Result' block per optimization.")] = "table",
    as_json: JsonOpt = False,
) -> None:
    """Run every optimization on the identical request stream and compare (simulated or real mode)."""
    from kvplan.bench import BenchConfig, ClusterConfig, RealConfig, SizingConfig, TierConfig
    from kvplan.bench.run import run_bench
    from kvplan.bench.workloads import WorkloadSpec, parse_workload_params
    from kvplan.core.scheduler import SchedulerConfig

    check_numbers({"tp": tp, "rate": None if rate == math.inf else rate, "cv": cv, "num-requests": num_requests,  # finite, in range
                   "max-model-len": max_model_len, "block-size": block_size,
                   "gpu-memory-utilization": gpu_memory_utilization, "kv-cache-gib": kv_cache_gib,
                   "max-num-seqs": max_num_seqs, "max-num-batched-tokens": max_num_batched_tokens,
                   "swap-space-gib": swap_space_gib, "seed": seed, "time-scale": time_scale, "pods": pods,
                   "w-hit": w_hit, "w-load": w_load, "cpu-cache-gb": cpu_cache_gb, "disk-cache-gb": disk_cache_gb,
                   "host-link-gbps": host_link_gbps, "nvme-gbps": nvme_gbps, "layers": layers,
                   "samples": samples, "kv-budget": kv_budget, "input-len": input_len, "output-len": output_len,
                   "random-range-ratio": random_range_ratio, "burstiness": burstiness, "max-concurrency": max_concurrency})
    if output_format not in ("table", "vllm"):
        raise ValueError(f"--format must be table or vllm, got '{output_format}'")
    if step_model is not None and step_model not in ("fitted", "roofline"):
        raise ValueError(f"--step-model must be fitted or roofline (or give --calibration FILE), got '{step_model}'")
    if step_model is not None and calibration is not None:
        raise ValueError(f"--step-model {step_model} and --calibration FILE exclude each other; pick one")
    names = [name.strip() for name in optimizations.split(",") if name.strip()]
    if not names:
        raise ValueError(f"--optimizations {optimizations!r} names no optimization; write e.g. "
                         "--optimizations paged,prefix")
    if quality_text is not None:
        if mode != "real":
            raise ValueError("--quality-text needs --mode real: quality is measured on a real model")
        from kvplan.cli.quality import run_quality_command

        run_quality_command(model, model_path, layers, device, model_dtype, seed, names, quality_text, tokenizer,
                            kv_budget, kv_cache_gib, out, as_json, report)
        return
    config = BenchConfig(
        sizing=SizingConfig(model=model, gpu=gpu, tp=tp, kv_dtype=kv_dtype, block_size=block_size,
                            gpu_memory_utilization=gpu_memory_utilization, kv_cache_gib=kv_cache_gib,
                            max_model_len=max_model_len, engine=engine, engine_version=engine_version,
                            swap_space_gib=swap_space_gib if preemption == "swap" else 0.0),
        scheduler=SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                                  chunked_prefill=not no_chunked_prefill, preemption=preemption),
        cluster=ClusterConfig(pods=pods, routers=tuple(r.strip() for r in router.split(",") if r.strip())
                              if pods > 1 else (), w_hit=w_hit, w_load=w_load),
        tiers=TierConfig(cpu_cache_gb=cpu_cache_gb, disk_cache_gb=disk_cache_gb, tier_policy=tier_policy,
                         host_link_gbps=host_link_gbps, nvme_gbps=nvme_gbps,
                         disk_dir=str(disk_dir) if disk_dir else None),
        real=RealConfig(device=device, model_path=str(model_path) if model_path else None, layers=layers,
                        model_dtype=model_dtype, kernel_backend=kernel_backend),
        mode=mode, seed=seed, kv_budget=kv_budget, step_model=str(calibration) if calibration else step_model,
        max_concurrency=max_concurrency, vllm_figures=output_format == "vllm")
    spec = WorkloadSpec(kind=workload, trace=str(trace) if trace is not None else None, trace_format=trace_format,
                        skip_bad_lines=skip_bad_lines, num_requests=num_requests, rate=rate, arrival=arrival, cv=cv,
                        stats_path=str(stats_path) if stats_path is not None else None, time_scale=time_scale,
                        samples=samples, params=parse_workload_params(workload_param or []),
                        input_len=input_len, output_len=output_len, random_range_ratio=random_range_ratio,
                        burstiness=burstiness)
    if mode == "real" and model_path is None:
        _warn_real_footprint(model, layers, model_dtype, device)
    started = time.perf_counter()
    written: dict[str, Path] = {}

    def write_report_beside(path: Path) -> None:  # runs before --out's old content is let go
        from kvplan.report import write_report

        written["index"] = write_report([path], path.with_suffix("")).index

    track = functools.partial(_progress_bars, unit="tokens" if mode == "real" else "requests")
    outcome = run_bench(config, spec, names, out, track, after_write=write_report_beside if report else None,
                        report_folder=report, announce=lambda text: error_console.print(escape(text), soft_wrap=True))
    if outcome.skipped_lines:
        error_console.print(f"[yellow]warning:[/] skipped {outcome.skipped_lines} malformed lines in "
                            f"{escape(str(trace))}")
    report_index = written.get("index")
    elapsed = time.perf_counter() - started
    records = outcome.records
    if as_json:
        print(strict_json([{"optimization": r.optimization, **r.metrics} for r in records], indent=2))
        return
    if mode != "real" or model_path is None:  # a real --model-path run names its own checkpoint
        render_resolution(resolve_model(model))
    render_comparison(comparison(records), console)
    if output_format == "vllm":  # lay beside a measured `vllm bench serve` run
        from kvplan.sim.vllm_metrics import format_serving_block

        for record in records:
            figures = {k[5:]: v for k, v in record.metrics.items() if k.startswith("vllm_")}
            console.print(escape(format_serving_block(figures, f"modeled by kvplan: {record.optimization}")),
                          highlight=False)
    console.print(f"[dim]{outcome.num_requests:,} requests x {len(records)} optimizations in {elapsed:.1f} s; "
                  f"results: {escape(str(outcome.out))}[/]")
    if report_index:
        console.print(f"report: {escape(str(report_index))}")


def _warn_real_footprint(model: str, layers: int | None, model_dtype: str, device: str) -> None:
    """Say (or refuse, above the memory there is) what building the model costs, before minutes of it."""
    from kvplan.real.footprint import check_real_model_memory
    from kvplan.real.model import resolve_device
    from kvplan.spec.resolve import load_model

    resolved = resolve_device(device)
    dtype = model_dtype if model_dtype != "auto" else ("fp32" if resolved == "cpu" else "bf16")
    warning = check_real_model_memory(load_model(model), layers, dtype, resolved)
    if warning:
        error_console.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)


@contextmanager
def _progress_bars(names: list[str], total: int, unit: str = "requests") -> Iterator[Callable[[str, int], None]]:
    """One bar per variant (optimization, or optimization@router), over its requests (real
    mode: its tokens, which move every step) with an ETA."""
    with Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=error_console, transient=True) as progress:
        tasks = {name: progress.add_task(escape(name), total=total) for name in names}
        yield lambda name, n: progress.advance(tasks[name], n)
