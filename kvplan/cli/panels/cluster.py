"""Cluster: engine instances behind routers (simulated mode), ClusterConfig's fields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer

from kvplan.cli.common import CLUSTER
from kvplan.cli.panels.defaults import RUN
from kvplan.core.router_config import ROUTERS, parse_routers

DEFAULTS = RUN.cluster
EVERY_ROUTER = ",".join(ROUTERS)  # the command compares them all; a sweep point runs one


@dataclass(frozen=True)
class ClusterOptions:
    pods: Annotated[
        int,
        typer.Option(
            rich_help_panel=CLUSTER,
            metavar="N",
            help="Engine instances behind a router, each with its own KV pool.",
        ),
    ] = DEFAULTS.pods
    router: Annotated[
        str,
        typer.Option(
            rich_help_panel=CLUSTER,
            metavar="LIST",
            show_default=False,
            help=f"Comma-separated routers for --pods > 1: {', '.join(ROUTERS)}. Default: "
            f"{', '.join(ROUTERS)}.",
        ),
    ] = EVERY_ROUTER
    w_hit: Annotated[
        float,
        typer.Option(
            rich_help_panel=CLUSTER,
            metavar="X",
            help="kv-aware router: weight of the cached-prefix fraction.",
        ),
    ] = DEFAULTS.w_hit
    w_load: Annotated[
        float,
        typer.Option(
            rich_help_panel=CLUSTER,
            metavar="X",
            help="kv-aware router: weight of the load.",
        ),
    ] = DEFAULTS.w_load

    def settings(self) -> dict[str, Any]:
        routers = parse_routers(self.router)
        if self.pods == 1 and self.router == EVERY_ROUTER:
            routers = ()  # one engine, no router; routers given for it are warned about (bench)
        return {
            "pods": self.pods,
            "routers": routers,
            "w_hit": self.w_hit,
            "w_load": self.w_load,
        }
