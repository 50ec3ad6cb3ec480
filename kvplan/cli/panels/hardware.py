"""Model and hardware: which model on how many of which GPU (SizingConfig's fields)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from kvplan.cli.common import GpuOpt, ModelOpt, TpOpt
from kvplan.cli.panels.defaults import SIZING


@dataclass(frozen=True)
class HardwareOptions:
    model: ModelOpt = SIZING.model
    gpu: GpuOpt = SIZING.gpu
    tp: TpOpt = SIZING.tp

    def settings(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
