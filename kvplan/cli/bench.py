"""`kvplan bench`: run KV optimizations on one request stream through the engine, compare."""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from kvplan.bench.caption import table_caption
from kvplan.bench.comparison import comparison
from kvplan.bench.optimizations import parse_optimizations
from kvplan.bench.setting_use import check_budget_read, ignored_settings
from kvplan.cli.bench_table import render_comparison
from kvplan.cli.common import (
    cli_errors,
    console,
    error_console,
    error_message,
    escape,
    fail,
    flag_of,
    progress_bars,
)
from kvplan.cli.panels import with_panels
from kvplan.cli.panels.cluster import ClusterOptions
from kvplan.cli.panels.engine import EngineOptions
from kvplan.cli.panels.hardware import HardwareOptions
from kvplan.cli.panels.kv import KvOptions
from kvplan.cli.panels.output import OutputOptions
from kvplan.cli.panels.real import RealOptions
from kvplan.cli.panels.tiers import TierOptions
from kvplan.cli.panels.workload import WorkloadOptions
from kvplan.cli.resolution import render_resolution
from kvplan.results.atomic import strict_json  # no NaN/Infinity in JSON output
from kvplan.spec.extras import require_extra
from kvplan.spec.numbers import check_numbers
from kvplan.spec.resolve import resolve_model

if TYPE_CHECKING:
    from kvplan.bench.config import BenchConfig
    from kvplan.results import ResultRecord

Panels = tuple[
    HardwareOptions,
    KvOptions,
    WorkloadOptions,
    ClusterOptions,
    EngineOptions,
    OutputOptions,
    RealOptions,
    TierOptions,
]


@cli_errors("out")
@with_panels  # the help lists the panels in this order
def bench(
    hardware: HardwareOptions,
    kv: KvOptions,
    requests: WorkloadOptions,
    cluster: ClusterOptions,
    engine: EngineOptions,
    output: OutputOptions,
    real: RealOptions,
    tiers: TierOptions,
) -> None:
    """Run every optimization on one identical request stream and compare (simulated or real)."""
    from kvplan.bench.run import run_bench

    panels: Panels = (hardware, kv, requests, cluster, engine, output, real, tiers)
    values = {name: value for panel in panels for name, value in dataclasses.asdict(panel).items()}
    rate = None if requests.rate == math.inf else requests.rate  # inf: every request at t = 0
    check_numbers({**values, "rate": rate})  # finite, in range
    output.check()
    engine.check()
    names = kv.names()
    optimizations = parse_optimizations(names)  # a bad or repeated name before any work
    from kvplan.bench.config import check_perf_table_mode
    from kvplan.bench.mode import Mode, parse_mode

    perf_table = None if engine.perf_table is None else str(engine.perf_table)
    check_perf_table_mode(perf_table, real.mode)  # before torch is imported
    if (
        parse_mode(real.mode) is Mode.REAL
    ):  # before torch is imported: one line naming the extra, not a traceback
        require_extra("real", "kvplan bench --mode real")
    if real.quality_text is not None:
        if parse_mode(real.mode) is not Mode.REAL:
            raise ValueError(
                "--quality-text needs --mode real: quality is measured on a real model"
            )
        if output.report:  # a failed quality report takes its table back: ask before the run
            require_extra("report", "kvplan bench --quality-text --report")
        check_budget_read(kv.kv_budget, optimizations)
        from kvplan.cli.quality import run_quality_command

        run_quality_command(
            hardware.model,
            real.model_path,
            real.layers,
            real.device,
            real.model_dtype,
            requests.seed,
            names,
            real.quality_text,
            real.tokenizer,
            kv.kv_budget,
            engine.kv_cache_gib,
            output.out,
            output.as_json,
            output.report,
        )
        return
    config = bench_config(panels)
    spec = requests.spec()
    for warning in ignored_settings(config, optimizations):  # refuses what results would hide
        error_console.print(f"[yellow]warning:[/] {escape(warning.named(flag_of))}", soft_wrap=True)
    if parse_mode(real.mode) is Mode.REAL and real.model_path is None:
        _warn_real_footprint(hardware.model, real.layers, real.model_dtype, real.device)
    started = time.perf_counter()
    track = functools.partial(
        _progress_bars, unit="tokens" if parse_mode(real.mode) is Mode.REAL else "requests"
    )

    def show(records: list[ResultRecord]) -> None:
        # Drawn before the results are written (run_bench's before_write): a table that cannot
        # be drawn ends the command with one line and any existing --out unchanged
        if output.as_json:
            print(
                strict_json(
                    [{"optimization": r.optimization, **r.metrics} for r in records], indent=2
                )
            )
            return
        # a --model-path run names its checkpoint
        if parse_mode(real.mode) is not Mode.REAL or real.model_path is None:
            render_resolution(resolve_model(hardware.model))
        render_comparison(comparison(records), console, table_caption(records))
        if config.vllm_figures:  # lay beside a measured `vllm bench serve` run
            from kvplan.sim.vllm_metrics import format_serving_block

            for record in records:
                figures = {k[5:]: v for k, v in record.metrics.items() if k.startswith("vllm_")}
                console.print(
                    escape(
                        format_serving_block(figures, f"modeled by kvplan: {record.optimization}")
                    ),
                    highlight=False,
                )

    outcome = run_bench(
        config,
        spec,
        names,
        output.out,
        track,
        report_folder=output.report,  # an unusable report folder is refused before the run
        announce=lambda text: error_console.print(escape(text), soft_wrap=True),
        before_write=show,
        step_trace=output.step_trace,
    )
    if outcome.skipped_lines:
        error_console.print(
            f"[yellow]warning:[/] skipped {outcome.skipped_lines} malformed lines in "
            f"{escape(str(requests.trace))}"
        )
    elapsed = time.perf_counter() - started
    records = outcome.records
    if output.as_json:
        if output.report:
            _report_beside(outcome.out)
        return
    console.print(
        f"[dim]{outcome.num_requests:,} requests x {len(records)} optimizations in {elapsed:.1f} "
        "s; "
        f"results: {escape(str(outcome.out))}[/]"
    )
    if output.report:
        console.print(f"report: {escape(str(_report_beside(outcome.out)))}")


def _report_beside(results: Path) -> Path:
    """The report of a run whose results are already written (folder: results without its
    suffix). A missing extra or a failing report ends the command with one line and exit 2,
    and the results stay: `fail` exits without cli_errors, which would remove a new --out."""
    try:
        require_extra("report", "kvplan bench --report")
        from kvplan.report import write_report

        return write_report([results], results.with_suffix("")).index
    except (ValueError, OSError, RecursionError) as err:
        fail(
            f"{error_message(err)}; the results were written to {results} "
            f"(kvplan report {results} draws them)"
        )
        raise  # not reached: fail exits


def bench_config(panels: Panels) -> BenchConfig:
    """The run's settings from every panel, under the names sweep files use, read by the one
    reader of those names (so a sweep point and this command share every default)."""
    from kvplan.bench.config import BenchConfig

    settings = {name: value for panel in panels for name, value in panel.settings().items()}
    return BenchConfig.from_flat(**settings)


def _warn_real_footprint(model: str, layers: int | None, model_dtype: str, device: str) -> None:
    """Say (or refuse, above the memory there is) what building the model costs, before minutes of
    it."""
    from kvplan.real.footprint import check_real_model_memory
    from kvplan.real.model import resolve_device
    from kvplan.spec.resolve import load_model

    resolved = resolve_device(device)
    dtype = model_dtype if model_dtype != "auto" else ("fp32" if resolved == "cpu" else "bf16")
    warning = check_real_model_memory(load_model(model), layers, dtype, resolved)
    if warning:  # worded with the flags given (the library names settings)
        error_console.print(f"[yellow]warning:[/] {escape(warning.named(flag_of))}", soft_wrap=True)


@contextmanager
def _progress_bars(
    names: list[str], total: int, unit: str = "requests"
) -> Iterator[Callable[[str, int], None]]:
    """One bar per variant (optimization, or optimization@router), over its requests (real
    mode: its tokens, which move every step) with an ETA."""
    with progress_bars(
        TextColumn("{task.description:<28}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    ) as progress:
        tasks = {name: progress.add_task(escape(name), total=total) for name in names}
        yield lambda name, n: progress.advance(tasks[name], n)
