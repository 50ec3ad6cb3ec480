"""The configs whose field defaults the options show: each option's default is read here,
from the field it sets, never written in the CLI again."""

from __future__ import annotations

from pathlib import Path

from kvplan.bench.config import BenchConfig
from kvplan.bench.workloads import WorkloadSpec
from kvplan.core.engine_factory import SizingConfig

RUN = BenchConfig()
# Sizing defaults from the class, not RUN.sizing: a run that recomputes records no swap area,
# while --swap-space-gib shows the area swap preemption gets
SIZING = SizingConfig()
STREAM = WorkloadSpec()


def as_path(setting: str | None) -> Path | None:
    """A path setting's default (the configs hold text) as a path option's."""
    return None if setting is None else Path(setting)
