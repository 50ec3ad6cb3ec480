"""KV formats and policies: the KV format, the optimizations compared and the tokens an
eviction policy keeps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Optional

import typer

from kvplan.bench.optimizations import DEFAULT_OPTIMIZATIONS, names_help, optimization_names
from kvplan.cli.common import KV_PANEL, KvDtypeOpt, WeightDtypeOpt
from kvplan.cli.panels.defaults import RUN, SIZING

DEFAULT_LIST = ",".join(DEFAULT_OPTIMIZATIONS)


@dataclass(frozen=True)
class KvOptions:
    kv_dtype: KvDtypeOpt = SIZING.kv_dtype
    weight_dtype: WeightDtypeOpt = SIZING.weight_dtype
    # show_default=False: the default list is one word that a narrow help column would cut;
    # the help spells it out
    optimizations: Annotated[
        str,
        typer.Option(
            rich_help_panel=KV_PANEL,
            metavar="LIST",
            show_default=False,
            help="Comma-separated optimizations; the first is the baseline. Compose with +, e.g. "
            f"paged+fp8, prefix+offload-cpu, h2o+int4. Names: {names_help()}. Default: "
            f"{', '.join(DEFAULT_OPTIMIZATIONS)}.",
        ),
    ] = DEFAULT_LIST
    kv_budget: Annotated[
        Optional[int],
        typer.Option(
            rich_help_panel=KV_PANEL,
            metavar="TOKENS",
            help="Tokens per layer an eviction policy keeps (sliding-window, streaming, h2o, "
            "snapkv, paged-eviction, entropy-budget).",
        ),
    ] = RUN.kv_budget

    def names(self) -> list[str]:
        """The optimizations to compare, the baseline first."""
        return optimization_names(self.optimizations)

    def settings(self) -> dict[str, Any]:
        return {
            "kv_dtype": self.kv_dtype,
            "weight_dtype": self.weight_dtype,
            "kv_budget": self.kv_budget,
        }
