"""Real mode: the mode itself, where the transformers model comes from and runs (RealConfig's
fields), and the quality table's text."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from kvplan.cli.common import REAL_MODE
from kvplan.cli.panels.defaults import RUN, as_path

DEFAULTS = RUN.real


@dataclass(frozen=True)
class RealOptions:
    mode: Annotated[
        str,
        typer.Option(
            rich_help_panel=REAL_MODE,
            metavar="NAME",
            help="simulated (roofline time, no tensors) or real (KV in torch block pools, a "
            "transformers model, wall-clock time).",
        ),
    ] = RUN.mode
    device: Annotated[
        str,
        typer.Option(
            rich_help_panel=REAL_MODE,
            metavar="NAME",
            help="Real mode: cpu, cuda or auto.",
        ),
    ] = DEFAULTS.device
    model_path: Annotated[
        Optional[Path],
        typer.Option(
            rich_help_panel=REAL_MODE,
            metavar="DIR",
            help="Real mode: a local transformers checkpoint folder (offline).",
        ),
    ] = as_path(DEFAULTS.model_path)
    layers: Annotated[
        Optional[int],
        typer.Option(
            rich_help_panel=REAL_MODE,
            metavar="N",
            help="Real mode with a profile: keep only the first N layers (random weights).",
        ),
    ] = DEFAULTS.layers
    model_dtype: Annotated[
        str,
        typer.Option(
            rich_help_panel=REAL_MODE,
            metavar="NAME",
            help="Real mode: fp32, fp16, bf16 or auto (fp32 on CPU, bf16 on CUDA).",
        ),
    ] = DEFAULTS.model_dtype
    kernel_backend: Annotated[
        Optional[str],
        typer.Option(
            rich_help_panel=REAL_MODE,
            metavar="NAME",
            help="Real mode kernels: triton, torch or reference (default: Triton where it can "
            "run).",
        ),
    ] = DEFAULTS.kernel_backend
    quality_text: Annotated[
        Optional[Path],
        typer.Option(
            rich_help_panel=REAL_MODE,
            metavar="FILE",
            help="Real mode: measure perplexity, KL and greedy agreement of each optimization "
            "(KV formats, eviction policies) on this text.",
        ),
    ] = None
    tokenizer: Annotated[
        Optional[Path],
        typer.Option(
            rich_help_panel=REAL_MODE,
            metavar="FILE",
            help="A llama2.c tokenizer (tok*.bin) for --quality-text; default: the checkpoint's "
            "own.",
        ),
    ] = None

    def settings(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "device": self.device,
            "model_path": str(self.model_path) if self.model_path else None,
            "layers": self.layers,
            "model_dtype": self.model_dtype,
            "kernel_backend": self.kernel_backend,
        }
