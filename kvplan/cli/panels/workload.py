"""Workload: the request stream (WorkloadSpec's fields), the longest request, the seed and
the closed loop of vLLM's benchmark client."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from kvplan.bench.workloads import (
    DEFAULT_NUM_REQUESTS,
    MAX_MODEL_LEN_HELP,
    WorkloadSpec,
    parse_workload_params,
)
from kvplan.cli.common import WORKLOAD, SeedOpt
from kvplan.cli.panels.defaults import RUN, SIZING, STREAM, as_path
from kvplan.workload.bench_load import BenchLoad
from kvplan.workload.default_rates import default_rates_help
from kvplan.workload.kinds import rate_units_help


@dataclass(frozen=True)
class WorkloadOptions:
    workload: Annotated[
        str,
        typer.Option(
            rich_help_panel=WORKLOAD,
            metavar="NAME",
            help="Synthetic workload: system-prompt (ShareGPT-like messages after one shared "
            "system prompt), sharegpt, alpaca, sharegpt-stats, long-reasoning, rag, chat, "
            "few-shot, random.",
        ),
    ] = STREAM.kind
    workload_param: Annotated[
        Optional[list[str]],
        typer.Option(
            "--workload-param",
            rich_help_panel=WORKLOAD,
            metavar="NAME=VALUE",
            help="Generator setting NAME=VALUE, e.g. doc_len=2048, zipf_s=1.2, "
            "turns_per_session=8, system_prompt_len=512.",
        ),
    ] = None
    samples: Annotated[
        int,
        typer.Option(
            rich_help_panel=WORKLOAD,
            metavar="N",
            help="Parallel samples per request (n > 1 shares the prompt's blocks copy-on-write).",
        ),
    ] = STREAM.samples
    trace: Annotated[
        Optional[Path],
        typer.Option(
            rich_help_panel=WORKLOAD,
            metavar="FILE",
            help="Replay a trace instead: Mooncake JSONL, Azure CSV or generic JSONL.",
        ),
    ] = as_path(STREAM.trace)
    trace_format: Annotated[
        Optional[str],
        typer.Option(
            rich_help_panel=WORKLOAD,
            metavar="NAME",
            help="mooncake, azure or generic (default: detected).",
        ),
    ] = STREAM.trace_format
    skip_bad_lines: Annotated[
        bool,
        typer.Option(
            "--skip-bad-lines",
            rich_help_panel=WORKLOAD,
            metavar="",
            help="Skip malformed trace lines (counted) instead of failing.",
        ),
    ] = STREAM.skip_bad_lines
    time_scale: Annotated[
        Optional[float],
        typer.Option(
            rich_help_panel=WORKLOAD,
            metavar="X",
            help="Multiply trace arrival times (0.5 = twice the rate); or give --rate, not both.",
        ),
    ] = STREAM.time_scale
    stats_path: Annotated[
        Optional[Path],
        typer.Option(
            rich_help_panel=WORKLOAD,
            metavar="FILE",
            help="ShareGPT stats CSV for --workload sharegpt-stats.",
        ),
    ] = as_path(STREAM.stats_path)
    rate: Annotated[
        Optional[float],
        typer.Option(
            rich_help_panel=WORKLOAD,
            metavar="RATE",
            help=f"Arrivals per second of synthetic workloads: {rate_units_help()}; a --trace's "
            "arrivals are rescaled to this mean rate in requests/s (default: as recorded); inf "
            "sends every request at t = 0. Default: the workload's own, a load Llama-3.1-8B on "
            f"one L4 serves ({default_rates_help()}).",
        ),
    ] = STREAM.rate
    arrival: Annotated[
        Optional[str],
        typer.Option(
            rich_help_panel=WORKLOAD,
            metavar="NAME",
            help="Synthetic arrivals: poisson (default), gamma or burst (all at t=0).",
        ),
    ] = STREAM.arrival
    cv: Annotated[
        Optional[float],
        typer.Option(
            rich_help_panel=WORKLOAD,
            metavar="X",
            help="Coefficient of variation of --arrival gamma (default 1).",
        ),
    ] = STREAM.cv
    num_requests: Annotated[
        Optional[int],
        typer.Option(
            rich_help_panel=WORKLOAD,
            metavar="N",
            help=f"Requests to generate (default {DEFAULT_NUM_REQUESTS}), or the first N of a "
            "trace.",
        ),
    ] = STREAM.num_requests
    max_model_len: Annotated[
        Optional[int],
        typer.Option(
            rich_help_panel=WORKLOAD,
            metavar="TOKENS",
            help=MAX_MODEL_LEN_HELP,
        ),
    ] = SIZING.max_model_len
    seed: SeedOpt = RUN.seed
    # vLLM-bench-shaped load
    input_len: Annotated[
        Optional[int],
        typer.Option(
            rich_help_panel=WORKLOAD,
            metavar="N",
            help=f"--workload random: vLLM's --input-len (default {BenchLoad.input_len}).",
        ),
    ] = STREAM.input_len
    output_len: Annotated[
        Optional[int],
        typer.Option(
            rich_help_panel=WORKLOAD,
            metavar="N",
            help=f"--workload random: vLLM's --output-len (default {BenchLoad.output_len}).",
        ),
    ] = STREAM.output_len
    random_range_ratio: Annotated[
        Optional[float],
        typer.Option(
            rich_help_panel=WORKLOAD,
            metavar="X",
            help="--workload random: lengths uniform in [L(1-r), L(1+r)], or in [L r, L] as "
            "vLLM's client read it before 0.8.4 (--engine-version); default: fixed lengths.",
        ),
    ] = STREAM.random_range_ratio
    burstiness: Annotated[
        Optional[float],
        typer.Option(
            rich_help_panel=WORKLOAD,
            metavar="X",
            help="--workload random or --rate inf: gamma shape of vLLM-style send gaps "
            f"(default {BenchLoad.burstiness:g} = Poisson).",
        ),
    ] = STREAM.burstiness
    max_concurrency: Annotated[
        Optional[int],
        typer.Option(
            rich_help_panel=WORKLOAD,
            metavar="N",
            help="Closed loop like vllm bench serve --max-concurrency: at most N requests in "
            "flight.",
        ),
    ] = RUN.max_concurrency

    def spec(self) -> WorkloadSpec:
        """The request stream these options describe."""
        return WorkloadSpec(
            kind=self.workload,
            trace=str(self.trace) if self.trace is not None else None,
            trace_format=self.trace_format,
            skip_bad_lines=self.skip_bad_lines,
            num_requests=self.num_requests,
            rate=self.rate,
            arrival=self.arrival,
            cv=self.cv,
            stats_path=str(self.stats_path) if self.stats_path is not None else None,
            time_scale=self.time_scale,
            samples=self.samples,
            params=parse_workload_params(self.workload_param or []),
            input_len=self.input_len,
            output_len=self.output_len,
            random_range_ratio=self.random_range_ratio,
            burstiness=self.burstiness,
        )

    def settings(self) -> dict[str, Any]:
        """The run settings among these options (the rest make the stream)."""
        return {
            "max_model_len": self.max_model_len,
            "seed": self.seed,
            "max_concurrency": self.max_concurrency,
        }
