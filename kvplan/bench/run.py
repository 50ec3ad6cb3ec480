"""One `kvplan bench` run end to end: resolve the workload and its defaults, check the
sizing of every optimization before anything runs, run the matrix, write the results.
The CLI parses options into these inputs and renders the outcome."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvplan import GIB
from kvplan.bench.config import BenchConfig
from kvplan.bench.matrix import run_matrix, variant_names
from kvplan.bench.mode import Mode
from kvplan.bench.optimizations import parse_optimizations
from kvplan.bench.setting_use import check_samples_read
from kvplan.bench.simulation import engine_factory
from kvplan.bench.workloads import Workload, WorkloadSpec, build_workload
from kvplan.core.engine_factory import engine_scheduler
from kvplan.core.scheduler import SchedulerConfig
from kvplan.engines.versions import parse_version
from kvplan.results import ResultRecord, write_jsonl
from kvplan.results.atomic import atomic_file, check_folder_target, restore_on_failure
from kvplan.results.latest import (
    DEFAULT_FOLDER,
    POINTER_NAME,
    default_stem,
    timestamped_path,
    write_latest,
)

_PLAIN_LIMITS = (
    SchedulerConfig().max_num_seqs or 256,
    SchedulerConfig().max_num_batched_tokens or 8192,
)
# Given the variant names and the request count, a context that yields progress(variant, n).
Track = Callable[[list[str], int], AbstractContextManager[Callable[[str, int], None]]]


@dataclass(frozen=True)
class BenchOutcome:
    records: list[ResultRecord]
    out: Path
    num_requests: int
    skipped_lines: int


def prepare(config: BenchConfig, workload: WorkloadSpec) -> tuple[BenchConfig, Workload]:
    """The run's requests, and the config completed with them: the model read from
    --model-path in real mode, max_model_len resolved, the workload described."""
    if config.real.model_path:
        config = dataclasses.replace(
            config, sizing=dataclasses.replace(config.sizing, model=config.real.model_path)
        )
    spec = config.sizing.model_spec
    workload = dataclasses.replace(
        workload,
        range_below=config.sizing.serving_engine.range_ratio_is_floor(
            parse_version(config.sizing.engine_version)
        ),
    )
    built = build_workload(workload, spec, config.mode, config.seed, config.sizing.max_model_len)
    return configured(config, built), built


def configured(config: BenchConfig, built: Workload) -> BenchConfig:
    """The config completed for a workload already built: its max_model_len, the batch limits
    left to the engine (the simulated server's own, for its release, GPU and max_model_len; a
    real run keeps kvplan's: it serves on this machine, not on --gpu), the workload described.
    A second engine of another size (a disaggregated pool) reuses the requests this way."""
    sizing = dataclasses.replace(config.sizing, max_model_len=built.max_model_len)
    scheduler = (
        engine_scheduler(sizing, config.scheduler)
        if config.mode is Mode.SIMULATED
        else config.scheduler.resolved(*_PLAIN_LIMITS)
    )
    return dataclasses.replace(config, sizing=sizing, scheduler=scheduler, workload=built.info)


def default_out(config: BenchConfig) -> Path:
    """Reports/bench-MODEL-GPU-TIMESTAMP.jsonl: a new file per run, never an old one; MODEL
    and GPU are the resolved profile names (`l40s`, not the "NVIDIA L40S" typed), as slugs."""
    name = config.sizing.model_spec.name
    gpu = config.sizing.gpu_spec.name if config.mode is Mode.SIMULATED else "real"
    return timestamped_path(DEFAULT_FOLDER, default_stem("bench", name, gpu))


def _keep_finished(interrupt: KeyboardInterrupt, out: Path) -> None:
    """On Ctrl-C, write the optimizations that finished (a whole file, or nothing) and say so
    through the interrupt's `kept` note, which the CLI prints."""
    records = getattr(interrupt, "partial_records", None) or []
    if not records:
        interrupt.kept = "no optimization had finished; nothing was written"  # type: ignore[attr-defined]
        return
    if out.exists():  # a failing command never changes an existing results file: save beside it
        out = timestamped_path(out.parent, f"{out.stem}-partial")
    with restore_on_failure(out, out.parent / POINTER_NAME):
        write_jsonl(out, records)
        write_latest(out)
    names = ", ".join(record.optimization for record in records)
    kept = f"kept the {len(records)} optimization(s) that finished ({names}) in {out}"
    interrupt.kept = kept  # type: ignore[attr-defined]


def unserved(metrics: Mapping[str, Any]) -> str | None:
    """Why a run served nothing (every request rejected): the reasons, the pool, the largest
    request and what to change; None when it served something or rejected nothing."""
    if metrics.get("requests_finished", 0) or not metrics.get("requests_rejected", 0):
        return None
    reasons = "; ".join(metrics.get("reject_reasons") or []) or "no reason recorded"
    pool = metrics.get("pool_slots")
    budget = metrics.get("kv_budget_bytes_per_gpu")
    where = f"a KV pool of {pool:,} token slots" if pool is not None else "the KV pool"
    if budget is not None:
        where += f" ({budget / GIB:.2f} GiB per GPU)"
    return (
        f"all {metrics['requests_rejected']:,} requests were rejected ({reasons}) with {where}; "
        "give the pool "
        "more memory (--gpu-memory-utilization, --kv-cache-gib, a larger --gpu or --tp) or "
        "shorten the requests "
        "(--max-model-len, the workload's lengths)"
    )


def check_served(records: list[ResultRecord]) -> None:
    """A run that served nothing has no throughput or latency to report: refuse it (exit 2)
    rather than write 0 tok/s and NaN."""
    for record in records:
        reason = unserved(record.metrics)
        if reason:
            raise ValueError(f"{record.optimization}: {reason}")


def run_bench(
    config: BenchConfig,
    workload: WorkloadSpec,
    optimizations: list[str],
    out: Path | None = None,
    track: Track | None = None,
    report_folder: bool = False,
    announce: Callable[[str], None] | None = None,
    before_write: Callable[[list[ResultRecord]], None] | None = None,
    step_trace: Path | None = None,
) -> BenchOutcome:
    """before_write(records) runs once the run succeeded, before anything is written (the CLI
    draws its table there, so output that cannot be drawn changes no file); if writing
    fails, --out gets its previous content back.
    step_trace: a file for every engine step's decisions (kvplan.core.step_trace), written
    whole or not at all.
    report_folder: refuse an unusable report folder (out without its suffix) before any work.
    announce(text): real mode's cost estimate, said before the run starts."""
    parsed = parse_optimizations(optimizations)  # reject bad names before any work
    check_samples_read(workload.samples, parsed)
    config, built = prepare(config, workload)
    out = out or default_out(config)
    if step_trace is not None and step_trace.resolve() == out.resolve():
        raise ValueError(f"--step-trace '{step_trace}' is --out too; give it a file of its own")
    if report_folder:
        check_folder_target(out.with_suffix(""))
    factory = engine_factory(config)  # real mode loads its model here
    for optimization in parsed:  # fail on impossible sizing before any progress bar is drawn
        factory.check(optimization)
    names = variant_names(config, optimizations)
    total = len(built.requests)
    if config.mode is Mode.REAL:  # say what it will cost first; the bars count tokens
        from kvplan.bench.real_cost import measure_cost

        cost = measure_cost(factory, config, built.requests, optimizations)
        if announce is not None:
            announce(cost.describe())
        total = cost.tokens_per_variant  # request_tokens of the run's requests
    # the step trace is renamed into place only once the results are written too
    with atomic_file(step_trace) if step_trace else nullcontext(None) as trace_file:
        try:
            with (
                trace_file.open("w") if trace_file else nullcontext(None) as lines,
                track(names, total) if track else nullcontext(None) as progress,
            ):
                trace = lines.write if lines is not None else None
                records = run_matrix(
                    config, built.requests, optimizations, progress, factory, trace
                )
        except KeyboardInterrupt as interrupt:
            _keep_finished(interrupt, out)
            raise
        check_served(records)
        if before_write is not None:
            before_write(records)
        with restore_on_failure(out, out.parent / POINTER_NAME):
            write_jsonl(out, records)
            write_latest(out)  # `kvplan report` with no arguments reads this run
    return BenchOutcome(records, out, len(built.requests), built.skipped_lines)
