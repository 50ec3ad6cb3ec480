"""Offload tiers: the host-memory and disk tiers of offload-cpu / offload-disk, TierConfig's
fields."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from kvplan.cli.common import TIERS
from kvplan.cli.panels.defaults import RUN, as_path

DEFAULTS = RUN.tiers


@dataclass(frozen=True)
class TierOptions:
    cpu_cache_gb: Annotated[
        float,
        typer.Option(
            rich_help_panel=TIERS,
            metavar="GB",
            help="offload-cpu / offload-disk: host-memory tier size (GB).",
        ),
    ] = DEFAULTS.cpu_cache_gb
    disk_cache_gb: Annotated[
        float,
        typer.Option(
            rich_help_panel=TIERS,
            metavar="GB",
            help="offload-disk: local-disk tier size (GB).",
        ),
    ] = DEFAULTS.disk_cache_gb
    tier_policy: Annotated[
        str,
        typer.Option(
            rich_help_panel=TIERS,
            metavar="NAME",
            help="Eviction inside the offload tiers: lru or arc.",
        ),
    ] = DEFAULTS.tier_policy
    host_link_gbps: Annotated[
        Optional[float],
        typer.Option(
            rich_help_panel=TIERS,
            metavar="GB/S",
            help="GPU-host bandwidth for the CPU tier (GB/s); default: the GPU profile's.",
        ),
    ] = DEFAULTS.host_link_gbps
    nvme_gbps: Annotated[
        Optional[float],
        typer.Option(
            rich_help_panel=TIERS,
            metavar="GB/S",
            help="Disk tier bandwidth (GB/s); default: the GPU profile's.",
        ),
    ] = DEFAULTS.nvme_gbps
    disk_dir: Annotated[
        Optional[Path],
        typer.Option(
            rich_help_panel=TIERS,
            metavar="DIR",
            help="Real mode: folder for the disk tier (default: a temporary folder).",
        ),
    ] = as_path(DEFAULTS.disk_dir)

    def settings(self) -> dict[str, Any]:
        return {
            "cpu_cache_gb": self.cpu_cache_gb,
            "disk_cache_gb": self.disk_cache_gb,
            "tier_policy": self.tier_policy,
            "host_link_gbps": self.host_link_gbps,
            "nvme_gbps": self.nvme_gbps,
            "disk_dir": str(self.disk_dir) if self.disk_dir else None,
        }
