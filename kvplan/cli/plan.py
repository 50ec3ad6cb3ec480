"""`kvplan plan`: how many of which GPUs serve this traffic within the SLO, and at what cost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TextColumn,
    TimeRemainingColumn,
)

from kvplan.bench.workloads import MAX_MODEL_LEN_HELP
from kvplan.cli.common import (
    ENGINE,
    HARDWARE,
    KV_PANEL,
    NO_DEPLOYMENT,
    OUTPUT,
    WORKLOAD,
    EngineOpt,
    EngineVersionOpt,
    JsonOpt,
    SeedOpt,
    cli_errors,
    error_console,
    flag_of,
    progress_bars,
)
from kvplan.cli.panels.defaults import RUN, SIZING
from kvplan.cli.panels.engine import CalibrationOpt, PerfTableOpt, StepModelOpt
from kvplan.cli.plan_table import render_plan
from kvplan.deploy.search_status import TRIAL_REQUESTS
from kvplan.engines.engine_releases import DEFAULT_ENGINE_NAME
from kvplan.sizing.plan_inputs import DEFAULT_PLAN_TPS, valid_tps
from kvplan.spec.comma_list import comma_list
from kvplan.workload.bench_load import BenchLoad


def _ints(text: str, flag: str) -> list[int]:
    """Comma-separated whole numbers; their ranges are checked where they are used."""
    takes = "whole numbers separated by commas, e.g. 1,2,4,8"
    entries = comma_list(text, flag.removeprefix("--").replace("-", "_"), takes)
    try:
        return [int(v) for v in entries]
    except ValueError:
        raise ValueError(f"{flag} takes {takes}; got '{text}'") from None


@cli_errors()
def plan(
    model: Annotated[
        str, typer.Argument(metavar="MODEL", help="Profile name, Hugging Face id or config.json.")
    ],
    rate: Annotated[
        float,
        typer.Option(
            metavar="REQ/S",
            rich_help_panel=WORKLOAD,
            help="Requests per second the whole deployment must serve.",
        ),
    ],
    slo: Annotated[
        str,
        typer.Option(
            metavar="TARGETS",
            rich_help_panel=WORKLOAD,
            help="Latency targets, any of ttft/tpot/e2e at p50/p90/p99, e.g. "
            "ttft_p90=2s,tpot_p90=60ms.",
        ),
    ] = "ttft_p90=2s",
    workload: Annotated[
        str,
        typer.Option(
            metavar="NAME",
            rich_help_panel=WORKLOAD,
            help="Synthetic workload (as kvplan bench --workload): sharegpt, alpaca, "
            "system-prompt, rag, chat, ...",
        ),
    ] = "sharegpt",
    trace: Annotated[
        Optional[Path],
        typer.Option(
            metavar="FILE",
            rich_help_panel=WORKLOAD,
            help="Replay a request trace instead (Mooncake / Azure / generic JSONL, as kvplan "
            "bench --trace); its arrivals are rescaled to each rate tried.",
        ),
    ] = None,
    input_len: Annotated[
        Optional[int],
        typer.Option(
            metavar="N",
            rich_help_panel=WORKLOAD,
            help=f"--workload random: vLLM's --input-len (default {BenchLoad.input_len}).",
        ),
    ] = None,
    output_len: Annotated[
        Optional[int],
        typer.Option(
            metavar="N",
            rich_help_panel=WORKLOAD,
            help=f"--workload random: vLLM's --output-len (default {BenchLoad.output_len}).",
        ),
    ] = None,
    workload_param: Annotated[
        Optional[list[str]],
        typer.Option(
            "--workload-param",
            metavar="NAME=VALUE",
            rich_help_panel=WORKLOAD,
            help="Generator setting NAME=VALUE, as in kvplan bench (--workload random reads "
            "input_len, output_len, random_range_ratio).",
        ),
    ] = None,
    gpu: Annotated[
        Optional[str],
        typer.Option(
            "--gpu",
            "--gpus",  # the spelling plan once had; --gpu is estimate's and bench's
            metavar="NAMES",
            rich_help_panel=HARDWARE,
            help="GPUs to consider, comma-separated (as estimate's and bench's --gpu); default: "
            "every GPU the price file names.",
        ),
    ] = None,
    prices: Annotated[
        Optional[Path],
        typer.Option(
            metavar="FILE",
            rich_help_panel=HARDWARE,
            help="TOML file of $/GPU-hour (\\[usd_per_gpu_hour] h100-80gb = 2.49); kvplan ships "
            "no prices.",
        ),
    ] = None,
    tp: Annotated[
        Optional[str],
        typer.Option(
            metavar="SIZES",
            rich_help_panel=HARDWARE,
            help="Tensor-parallel sizes to consider, e.g. 1,2,4; default: every power of two up "
            f"to {DEFAULT_PLAN_TPS} that divides the model's attention heads.",
        ),
    ] = None,
    kv_dtype: Annotated[
        str,
        typer.Option(
            metavar="FORMATS",
            rich_help_panel=KV_PANEL,
            help="KV formats to consider, e.g. auto,fp8.",
        ),
    ] = SIZING.kv_dtype,
    max_num_seqs: Annotated[
        Optional[str],
        typer.Option(
            metavar="NS",
            rich_help_panel=ENGINE,
            help="--max-num-seqs values to consider; default: the engine's.",
        ),
    ] = None,
    max_gpus: Annotated[
        Optional[int],
        typer.Option(metavar="N", rich_help_panel=HARDWARE, help="Most GPUs a plan may use."),
    ] = None,
    disagg: Annotated[
        bool,
        typer.Option(
            "--disagg",
            rich_help_panel=HARDWARE,
            help="Also consider prefill/decode-disaggregated deployments (xPyD): each pool sized "
            "on its own, the pipeline verified with the KV transfer between them.",
        ),
    ] = False,
    kv_link_gbps: Annotated[
        Optional[float],
        typer.Option(
            metavar="GB/S",
            rich_help_panel=HARDWARE,
            help="--disagg: KV transfer bandwidth per GPU, one direction (default: the GPU "
            "profile's interconnect, i.e. both pools in one NVLink domain; across nodes give "
            "the NIC's, e.g. 50 for 400 Gb/s).",
        ),
    ] = None,
    optimization: Annotated[
        str,
        typer.Option(
            metavar="NAME",
            rich_help_panel=KV_PANEL,
            help="KV optimization served with (as in kvplan bench); prefix caching is vLLM V1's "
            "and SGLang's default.",
        ),
    ] = "prefix",
    engine: EngineOpt = DEFAULT_ENGINE_NAME,
    engine_version: EngineVersionOpt = None,
    step_model: StepModelOpt = None,
    calibration: CalibrationOpt = None,
    perf_table: PerfTableOpt = None,
    max_model_len: Annotated[
        Optional[int],
        typer.Option(metavar="TOKENS", rich_help_panel=WORKLOAD, help=MAX_MODEL_LEN_HELP),
    ] = None,
    num_requests: Annotated[
        int,
        typer.Option(
            metavar="N",
            rich_help_panel=WORKLOAD,
            help="Requests per replica in each simulated trial.",
        ),
    ] = TRIAL_REQUESTS,
    executor: Annotated[
        str,
        typer.Option(
            metavar="NAME",
            rich_help_panel=OUTPUT,
            help="local (a process pool over this machine's cores) or ray (pip install "
            "'kvplan\\[ray]'): where the candidates' searches run.",
        ),
    ] = "local",
    workers: Annotated[
        Optional[int],
        typer.Option(
            metavar="N",
            rich_help_panel=OUTPUT,
            help="Local processes for the search (default: the CPU count).",
        ),
    ] = None,
    address: Annotated[
        Optional[str],
        typer.Option(
            metavar="ADDR",
            rich_help_panel=OUTPUT,
            help="Ray cluster address (default: a local Ray instance).",
        ),
    ] = None,
    seed: SeedOpt = RUN.seed,
    json_out: JsonOpt = False,
    out: Annotated[
        Optional[Path],
        typer.Option(
            metavar="DIR",
            rich_help_panel=OUTPUT,
            help="Also write DIR/plan.json (kvplan.plan/1) and DIR/plan.jsonl (one result record "
            "per candidate; kvplan report DIR/plan.jsonl draws cost against capacity).",
        ),
    ] = None,
) -> None:
    """Find the cheapest deployment (GPU, TP, KV format, replicas) that serves --rate within --slo.

    The fewest replicas per candidate by branch and bound on kvplan's simulated engine, the best
    verified as a whole cluster; with --disagg also prefill/decode pools."""
    from kvplan.bench.setting_use import calibration_warnings
    from kvplan.bench.workloads import WorkloadSpec, parse_workload_params
    from kvplan.deploy.demand import Candidate, Demand
    from kvplan.deploy.deploy_plan import make_plan
    from kvplan.deploy.plan_output import plan_json, plan_records
    from kvplan.deploy.prices import load_prices
    from kvplan.deploy.slo import parse_slo
    from kvplan.execution.executors import make_executor
    from kvplan.results import write_jsonl
    from kvplan.results.atomic import strict_json, write_text
    from kvplan.sim.step_models import step_model_setting
    from kvplan.spec.numbers import check_numbers
    from kvplan.spec.resolve import load_gpu, load_model

    if not rate > 0 or rate == float("inf"):
        raise ValueError(f"--rate must be a positive number of requests per second, got {rate}")
    if num_requests < 10:
        raise ValueError(
            "--num-requests must be at least 10 for a percentile to mean anything, got "
            f"{num_requests}"
        )
    check_numbers(
        {
            "workers": workers,
            "input-len": input_len,
            "output-len": output_len,
            "max-model-len": max_model_len,
            "max-gpus": max_gpus,
            "kv-link-gbps": kv_link_gbps,
        }
    )
    runner = make_executor(executor, workers, address)
    if out is not None and out.exists() and not out.is_dir():
        raise ValueError(f"--out '{out}' is a file; give a folder for plan.json and plan.jsonl")
    targets = parse_slo(slo)
    price_table = load_prices(prices) if prices else {}
    if gpu is not None:  # given, even empty: refused below, not read as "every priced GPU"
        takes = "GPU names separated by commas, e.g. h100-80gb,l40s"
        gpu_names = [load_gpu(name).name for name in comma_list(gpu, "gpu", takes)]
    elif price_table:
        gpu_names = sorted(price_table)
    else:
        raise ValueError(
            "name the GPUs to consider with --gpu h100-80gb,l40s,... or give a --prices file"
        )
    spec = load_model(model)  # an unknown model fails here, before any search
    sizes = _ints(tp, "--tp") if tp is not None else valid_tps(spec, DEFAULT_PLAN_TPS)
    seqs: list[int | None] = (
        list(_ints(max_num_seqs, "--max-num-seqs")) if max_num_seqs is not None else [None]
    )
    dtypes = comma_list(kv_dtype, "kv_dtype", "KV formats separated by commas, e.g. auto,fp8")
    candidates = [
        Candidate(gpu, size, dtype, n)
        for gpu in dict.fromkeys(gpu_names)
        for size in sizes
        for dtype in dtypes
        for n in seqs
    ]
    demand = Demand(
        model=model,
        rate=rate,
        slo=targets,
        workload=WorkloadSpec(
            kind=workload,
            params=parse_workload_params(workload_param or []),
            trace=str(trace) if trace else None,
            input_len=input_len,
            output_len=output_len,
        ),
        optimization=optimization,
        num_requests=num_requests,
        engine=engine,
        engine_version=engine_version,
        step_model=step_model_setting(step_model, calibration),
        perf_table=None if perf_table is None else str(perf_table),
        max_model_len=max_model_len,
        seed=seed,
    )
    setups = [(demand.step_model, model, name, engine, engine_version) for name in gpu_names]
    for warning in calibration_warnings(setups):  # a file fitted on another model, GPU, engine
        error_console.print(f"[yellow]warning:[/] {escape(warning.named(flag_of))}", soft_wrap=True)
    if disagg:  # a SLO the prefill pool cannot be sized by fails before any search
        from kvplan.deploy.disagg_plan import pool_demands

        pool_demands(demand)
    with progress_bars(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        disable=True if json_out else None,  # off on a pipe: a bar there is a stray line
    ) as progress:
        task = progress.add_task("searching", total=len(candidates))

        def note(label: str, more: int) -> None:
            if more:
                progress.update(task, total=(progress.tasks[0].total or 0) + more)
            if label:
                progress.update(task, advance=1, description=escape(label))

        result = make_plan(
            demand,
            candidates,
            price_table,
            runner,
            max_gpus,
            note,
            disagg=disagg,
            kv_link_gbps=kv_link_gbps,
        )
    data = plan_json(result)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / "plan.json", strict_json(data, indent=2) + "\n")
        write_jsonl(out / "plan.jsonl", plan_records(result))
    if json_out:
        print(json.dumps(data, indent=2))
    else:
        render_plan(data, list(dict.fromkeys(target.metric for target in targets.targets)))
        if out:
            error_console.print(
                f"[dim]plan: {escape(str(out / 'plan.json'))}; kvplan report "
                f"{escape(str(out / 'plan.jsonl'))} draws cost against capacity[/]"
            )
    if data["winner"] is None:
        # a search that found no deployment is an answer, not bad input: its own exit code
        raise typer.Exit(NO_DEPLOYMENT)
