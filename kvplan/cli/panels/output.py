"""Output: where the results go and how they are shown (the command's own options, no
config field but BenchConfig.vllm_figures)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from kvplan.cli.common import OUTPUT, JsonOpt

FORMATS = ("table", "vllm")


@dataclass(frozen=True)
class OutputOptions:
    out: Annotated[
        Optional[Path],
        typer.Option(
            rich_help_panel=OUTPUT,
            metavar="FILE",
            help="Results JSONL (default: a new reports/bench-MODEL-GPU-TIMESTAMP.jsonl; "
            "reports/latest names it).",
        ),
    ] = None
    report: Annotated[
        bool,
        typer.Option(
            "--report",
            rich_help_panel=OUTPUT,
            metavar="",
            help="Also write the HTML/PNG report next to the results.",
        ),
    ] = False
    output_format: Annotated[
        str,
        typer.Option(
            "--format",
            rich_help_panel=OUTPUT,
            metavar="NAME",
            help="table, or vllm: also print vLLM's 'Serving Benchmark Result' block per "
            "optimization.",
        ),
    ] = FORMATS[0]
    as_json: JsonOpt = False
    step_trace: Annotated[
        Optional[Path],
        typer.Option(
            rich_help_panel=OUTPUT,
            metavar="FILE",
            help="Also write one JSON line per engine step: the requests scheduled (tokens; "
            "new, running or resumed), preempted and finished, prefix lookups, cached blocks "
            "evicted, blocks in use (docs/metrics.md, 'Step trace').",
        ),
    ] = None

    def check(self) -> None:
        if self.output_format not in FORMATS:
            raise ValueError(f"--format must be table or vllm, got '{self.output_format}'")

    def settings(self) -> dict[str, Any]:
        return {"vllm_figures": self.output_format == "vllm"}
