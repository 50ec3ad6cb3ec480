"""`kvplan plan`: how many of which GPUs serve this traffic within the SLO, and at what cost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich import box
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from kvplan.cli.common import (
    ENGINE,
    HARDWARE,
    KV_PANEL,
    OUTPUT,
    WORKLOAD,
    EngineOpt,
    EngineVersionOpt,
    JsonOpt,
    SeedOpt,
    cli_errors,
    console,
    error_console,
)


def _ints(text: str, flag: str) -> list[int]:
    """Comma-separated whole numbers; their ranges are checked where they are used."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values:
        raise ValueError(f"{flag} takes whole numbers separated by commas, e.g. 1,2,4,8; got '{text}'")
    return values


@cli_errors()
def plan(
    model: Annotated[str, typer.Argument(metavar="MODEL", help="Profile name, Hugging Face id or config.json.")],
    rate: Annotated[float, typer.Option(metavar="REQ/S", rich_help_panel=WORKLOAD, help="Requests per second the whole deployment must serve.")],
    slo: Annotated[str, typer.Option(metavar="TARGETS", rich_help_panel=WORKLOAD, help="Latency targets, any of ttft/tpot/e2e at p50/p90/p99, e.g. ttft_p90=2s,tpot_p90=60ms.")] = "ttft_p90=2s",
    workload: Annotated[str, typer.Option(metavar="NAME", rich_help_panel=WORKLOAD, help="Synthetic workload (as kvplan bench --workload): sharegpt, alpaca, system-prompt, rag, chat, ...")] = "sharegpt",
    trace: Annotated[Optional[Path], typer.Option(metavar="FILE", rich_help_panel=WORKLOAD, help="Replay a request trace instead (Mooncake / Azure / generic JSONL, as kvplan bench --trace); its arrivals are rescaled to each rate tried.")] = None,
    input_len: Annotated[int, typer.Option(metavar="N", rich_help_panel=WORKLOAD, help="--workload random: vLLM's --input-len.")] = 1024,
    output_len: Annotated[int, typer.Option(metavar="N", rich_help_panel=WORKLOAD, help="--workload random: vLLM's --output-len.")] = 128,
    workload_param: Annotated[Optional[list[str]], typer.Option("--workload-param", metavar="NAME=VALUE", rich_help_panel=WORKLOAD, help="Generator setting NAME=VALUE, as in kvplan bench.")] = None,
    gpus: Annotated[Optional[str], typer.Option(metavar="NAMES", rich_help_panel=HARDWARE, help="GPUs to consider, comma-separated; default: every GPU the price file names.")] = None,
    prices: Annotated[Optional[Path], typer.Option(metavar="FILE", rich_help_panel=HARDWARE, help="TOML file of $/GPU-hour ([usd_per_gpu_hour] h100-80gb = 2.49); kvplan ships no prices.")] = None,
    tp: Annotated[str, typer.Option(metavar="SIZES", rich_help_panel=HARDWARE, help="Tensor-parallel sizes to consider.")] = "1,2,4,8",
    kv_dtype: Annotated[str, typer.Option(metavar="FORMATS", rich_help_panel=KV_PANEL, help="KV formats to consider, e.g. auto,fp8.")] = "auto",
    max_num_seqs: Annotated[Optional[str], typer.Option(metavar="NS", rich_help_panel=ENGINE, help="--max-num-seqs values to consider; default: the engine's.")] = None,
    max_gpus: Annotated[Optional[int], typer.Option(metavar="N", rich_help_panel=HARDWARE, help="Most GPUs a plan may use.")] = None,
    disagg: Annotated[bool, typer.Option("--disagg", rich_help_panel=HARDWARE, help="Also consider prefill/decode-disaggregated deployments (xPyD): each pool sized on its own, the pipeline verified with the KV transfer between them.")] = False,
    kv_link_gbps: Annotated[Optional[float], typer.Option(metavar="GB/S", rich_help_panel=HARDWARE, help="--disagg: KV transfer bandwidth per GPU, one direction (default: the GPU profile's interconnect, i.e. both pools in one NVLink domain; across nodes give the NIC's, e.g. 50 for 400 Gb/s).")] = None,
    optimization: Annotated[str, typer.Option(metavar="NAME", rich_help_panel=KV_PANEL, help="KV optimization served with (as in kvplan bench); prefix caching is vLLM V1's and SGLang's default.")] = "prefix",
    engine: EngineOpt = "vllm",
    engine_version: EngineVersionOpt = None,
    step_model: Annotated[Optional[str], typer.Option(metavar="NAME", rich_help_panel=ENGINE, help="fitted (default) or roofline, or a kvplan calibrate file.")] = None,
    num_requests: Annotated[int, typer.Option(metavar="N", rich_help_panel=WORKLOAD, help="Requests per replica in each simulated trial.")] = 300,
    executor: Annotated[str, typer.Option(metavar="NAME", rich_help_panel=OUTPUT, help="local (a process pool over this machine's cores) or ray (pip install 'kvplan\\[ray]'): where the candidates' searches run.")] = "local",
    workers: Annotated[Optional[int], typer.Option(metavar="N", rich_help_panel=OUTPUT, help="Local processes for the search (default: the CPU count).")] = None,
    address: Annotated[Optional[str], typer.Option(metavar="ADDR", rich_help_panel=OUTPUT, help="Ray cluster address (default: a local Ray instance).")] = None,
    seed: SeedOpt = 0,
    json_out: JsonOpt = False,
    out: Annotated[Optional[Path], typer.Option(metavar="DIR", rich_help_panel=OUTPUT, help="Also write DIR/plan.json (kvplan.plan/1) and DIR/plan.jsonl (one result record per candidate; kvplan report DIR/plan.jsonl draws cost against capacity).")] = None,
) -> None:
    """Find the cheapest deployment (GPU, TP, KV format, replicas; with --disagg also prefill/decode pools) that serves --rate within --slo: the fewest replicas by branch and bound on kvplan's simulated engine, the best verified as a whole cluster."""
    from kvplan.bench.deploy_plan import make_plan
    from kvplan.bench.executors import make_executor
    from kvplan.bench.plan_output import plan_json, plan_records
    from kvplan.bench.prices import load_prices
    from kvplan.bench.replica_search import Candidate, Demand
    from kvplan.bench.slo import parse_slo
    from kvplan.bench.workloads import WorkloadSpec, parse_workload_params
    from kvplan.results import write_jsonl
    from kvplan.results.atomic import strict_json, write_text
    from kvplan.spec.numbers import check_numbers
    from kvplan.spec.resolve import load_gpu, load_model

    if not rate > 0 or rate == float("inf"):
        raise ValueError(f"--rate must be a positive number of requests per second, got {rate}")
    if num_requests < 10:
        raise ValueError(f"--num-requests must be at least 10 for a percentile to mean anything, got {num_requests}")
    check_numbers({"workers": workers, "input-len": input_len, "output-len": output_len, "max-gpus": max_gpus,
                   "kv-link-gbps": kv_link_gbps})
    runner = make_executor(executor, workers, address)
    if out is not None and out.exists() and not out.is_dir():
        raise ValueError(f"--out '{out}' is a file; give a folder for plan.json and plan.jsonl")
    targets = parse_slo(slo)
    price_table = load_prices(prices) if prices else {}
    if gpus:
        gpu_names = [load_gpu(name.strip()).name for name in gpus.split(",") if name.strip()]
    elif price_table:
        gpu_names = sorted(price_table)
    else:
        raise ValueError("name the GPUs to consider with --gpus h100-80gb,l40s,... or give a --prices file")
    load_model(model)  # an unknown model fails here, before any search
    seqs: list[int | None] = list(_ints(max_num_seqs, "--max-num-seqs")) if max_num_seqs else [None]
    candidates = [Candidate(gpu, size, dtype.strip(), n) for gpu in dict.fromkeys(gpu_names)
                  for size in _ints(tp, "--tp") for dtype in kv_dtype.split(",") for n in seqs]
    demand = Demand(model=model, rate=rate, slo=targets,
                    workload=WorkloadSpec(kind=workload, params=parse_workload_params(workload_param or []),
                                          trace=str(trace) if trace else None, input_len=input_len,
                                          output_len=output_len),
                    optimization=optimization, num_requests=num_requests, engine=engine,
                    engine_version=engine_version, step_model=step_model, seed=seed)
    if disagg:  # a SLO the prefill pool cannot be sized by fails before any search
        from kvplan.bench.disagg_plan import pool_demands

        pool_demands(demand)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=error_console, transient=True, disable=json_out) as progress:
        task = progress.add_task("searching", total=len(candidates))

        def note(label: str, more: int) -> None:
            if more:
                progress.update(task, total=(progress.tasks[0].total or 0) + more)
            if label:
                progress.update(task, advance=1, description=escape(label))

        result = make_plan(demand, candidates, price_table, runner, max_gpus, note, disagg=disagg,
                           kv_link_gbps=kv_link_gbps)
    data = plan_json(result)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / "plan.json", strict_json(data, indent=2) + "\n")
        write_jsonl(out / "plan.jsonl", plan_records(result))
    if json_out:
        print(json.dumps(data, indent=2))
        return
    _render(data, list(dict.fromkeys(target.metric for target in targets.targets)))
    if out:
        error_console.print(f"[dim]plan: {escape(str(out / 'plan.json'))}; kvplan report "
                            f"{escape(str(out / 'plan.jsonl'))} draws cost against capacity[/]")


def _money(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"${value:,.{digits}f}"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 0.01:  # a KV transfer over NVLink: tenths of a millisecond
        return f"{value * 1000:.2f} ms"
    return f"{value * 1000:,.0f} ms" if value < 10 else f"{value:,.1f} s"


def _headroom(row: dict) -> str:
    upper = row["headroom_upper_rps"]
    return f">={row['headroom_rps']:,.1f}/s" if upper is None else f"{row['headroom_rps']:,.1f}-{upper:,.1f}/s"


def _render(data: dict, figures: list[str]) -> None:
    """The ranked table: the predicted figures the SLO names (and, on a wide terminal, p90 TTFT
    and TPOT, $/M tokens and KV use too)."""
    wide = console.width >= 120
    if wide:
        figures = list(dict.fromkeys([*figures, "ttft_s_p90", "tpot_s_p90"]))
    table = Table(title=escape(f"{data['model']} at {data['rate_rps']:g} req/s of {data['workload']}, "
                               f"SLO {data['slo']}"), header_style="bold", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    heads = [f"{name.split('_')[0].upper()} {name.split('_')[-1]}" for name in figures]
    columns = ["#", "GPUs", "deployment", "$/hour", *(["$/M tok"] if wide else []), *heads,
               *(["KV use"] if wide else []), "headroom", "why not"]
    for column in columns:
        text = column in ("deployment", "why not")  # the columns that wrap, so the figures never do
        table.add_column(column, justify="left" if text else "right", overflow="fold", no_wrap=not text,
                         min_width=12 if text else None, ratio=1 if text else None)
    for i, row in enumerate(data["candidates"], 1):
        feasible = row["status"] == "ok"
        mark = "" if row["verified"] else "*"  # figures of one replica at its capacity, not the cluster
        usage = row["predicted"].get("kv_cache_usage_mean")
        cells = [str(i), str(row["gpus"]) if feasible else "-",
                 escape(row["layout"]), _money(row["usd_per_hour"]),
                 *([_money(row["usd_per_million_output_tokens"], 3)] if wide else []),
                 *[_ms(row["predicted"].get(name)) + mark if feasible else "-" for name in figures],
                 *(["-" if usage is None or not feasible else f"{100 * usage:.0f}%"] if wide else []),
                 _headroom(row) if feasible else "-", escape(row["verdict"] or "")]
        table.add_row(*cells)
    console.print(table)
    winner = data["candidates"][0] if data["winner"] is not None else None
    if winner is None:
        console.print("[bold red]no candidate meets the SLO at this rate[/]; the table says why each failed: "
                      "try more GPU types or TP sizes (--gpus, --tp), fp8 KV (--kv-dtype auto,fp8) or a looser --slo")
    else:
        cost = (f" for {_money(winner['usd_per_hour'])}/hour" if winner["usd_per_hour"] is not None
                else " (no price given: ranked by GPU count)")
        gpus = f"{winner['gpus']} GPU{'s' if winner['gpus'] > 1 else ''}{cost}"
        split = winner["disaggregated"]
        if split is None:
            why = (f"each replica sustains at least {winner['replica_capacity_rps']:.2f} req/s within the SLO, and a "
                   f"cluster of {winner['replicas']} behind the {data['router']} router met it at {data['rate_rps']:g} req/s")
        else:
            transfer = split["kv_transfer_s_mean"]
            why = (f"{split['prefill_replicas']} prefill replica(s) at TP {split['prefill_tp']} and "
                   f"{split['decode_replicas']} decode replica(s) at TP {split['decode_tp']}; the pipeline (KV transfer "
                   f"{_ms(transfer)} on average) met the SLO at {data['rate_rps']:g} req/s")
        console.print(f"[bold]winner:[/] {escape(winner['layout'])} = {gpus}: {why}.")
        band = winner.get("time_error_band") or {}
        if band.get("output_throughput_error") is not None:
            console.print(f"[dim]modeled times: held-out error on {band.get('gpu_family')} under {band.get('engine')} "
                          f"±{100 * band['output_throughput_error']:.0f}% on tok/s"
                          + (" (unvalidated GPU family)" if band.get("unvalidated") else "") + "[/]")
    if any(row["disaggregated"] is not None for row in data["candidates"]):
        from kvplan.sim.disagg import SIMPLIFICATIONS

        console.print("[dim]disaggregated rows, simplified: " + "; ".join(SIMPLIFICATIONS) + "[/]")
    if any(row["status"] == "ok" and not row["verified"] for row in data["candidates"]):
        console.print("[dim]* not verified as a cluster: one replica's p90s at its own capacity, "
                      "not at the target rate[/]")
    console.print(f"[dim]{data['simulations']} simulations; replicas = the fewest n for which one replica meets "
                  "the SLO at rate / n; 'cost >=' rows stopped once they could not beat the best (--json says why "
                  "each row lost); headroom = replicas x per-replica capacity, between the highest rate seen to "
                  "meet the SLO and the lowest seen to miss it[/]")
