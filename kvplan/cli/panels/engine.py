"""Engine: how the serving engine sizes its pool and schedules (SizingConfig's and
SchedulerConfig's fields) and how its steps are timed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from kvplan.cli.common import ENGINE, BlockSizeOpt, EngineOpt, EngineVersionOpt, UtilOpt
from kvplan.cli.panels.defaults import RUN, SIZING, as_path
from kvplan.core.scheduler_config import SchedulerConfig

SCHEDULER = RUN.scheduler  # batch limits left to the engine
# How steps are timed, declared once for bench's panel and `kvplan plan`
StepModelOpt = Annotated[
    Optional[str],
    typer.Option(
        rich_help_panel=ENGINE,
        metavar="NAME",
        help="How steps are timed: fitted (the default: the sum of each step's operators "
        "from measured tables or the roofline, plus the engine overhead fitted for its "
        "release, printed with its held-out error) or roofline (datasheet peak, a lower "
        "bound).",
    ),
]
CalibrationOpt = Annotated[
    Optional[Path],
    typer.Option(
        rich_help_panel=ENGINE,
        metavar="FILE",
        help="Time steps with the step model fitted by `kvplan calibrate` (this file).",
    ),
]

PerfTableOpt = Annotated[
    Optional[Path],
    typer.Option(
        rich_help_panel=ENGINE,
        metavar="FILE",
        help="Time the operators it covers from this table, measured by `kvplan profile` "
        "(simulated mode).",
    ),
]


@dataclass(frozen=True)
class EngineOptions:
    block_size: BlockSizeOpt = SIZING.block_size
    gpu_memory_utilization: UtilOpt = SIZING.gpu_memory_utilization
    kv_cache_gib: Annotated[
        Optional[float],
        typer.Option(
            rich_help_panel=ENGINE,
            metavar="GIB",
            help="Fix the KV budget per GPU instead of deriving it from memory.",
        ),
    ] = SIZING.kv_cache_gib
    num_gpu_blocks_override: Annotated[
        Optional[int],
        typer.Option(
            rich_help_panel=ENGINE,
            metavar="N",
            help="vLLM's --num-gpu-blocks-override: the KV pool's blocks whatever memory gives "
            "(vLLM V1's reserved null block among them).",
        ),
    ] = SIZING.num_gpu_blocks_override
    max_num_seqs: Annotated[
        Optional[int],
        typer.Option(
            rich_help_panel=ENGINE,
            metavar="N",
            help="Most sequences per step; default: the engine's for its release and GPU (vLLM: "
            "1024 on >= 70 GiB GPUs but A100s, else 256).",
        ),
    ] = SCHEDULER.max_num_seqs
    max_num_batched_tokens: Annotated[
        Optional[int],
        typer.Option(
            rich_help_panel=ENGINE,
            metavar="N",
            help="Token budget per step; default: the engine's (vLLM serve: 8192 on >= 70 GiB "
            "GPUs but A100s, else 2048).",
        ),
    ] = SCHEDULER.max_num_batched_tokens
    engine: EngineOpt = SIZING.engine
    engine_version: EngineVersionOpt = SIZING.engine_version
    # one flag, no --chunked-prefill/--no- pair: the pair's second column squeezed the Engine
    # panel's names at 80 columns
    no_chunked_prefill: Annotated[
        bool,
        typer.Option(
            "--no-chunked-prefill",
            rich_help_panel=ENGINE,
            metavar="",
            help="Run each prefill whole in one step; by default long prefills are split across "
            "steps (chunked prefill).",
        ),
    ] = not SCHEDULER.chunked_prefill
    preemption: Annotated[
        str,
        typer.Option(
            rich_help_panel=ENGINE,
            metavar="NAME",
            help="recompute (vLLM v1) or swap to a CPU area.",
        ),
    ] = SCHEDULER.preemption
    swap_space_gib: Annotated[
        float,
        typer.Option(
            rich_help_panel=ENGINE,
            metavar="GIB",
            help="CPU swap area per GPU for --preemption swap.",
        ),
    ] = SIZING.swap_space_gib
    step_model: StepModelOpt = RUN.step_model
    calibration: CalibrationOpt = None
    perf_table: PerfTableOpt = as_path(RUN.perf_table)

    def check(self) -> None:
        """--step-model, --calibration and --perf-table as a sweep's keys are checked (the
        files read now)."""
        self._step_model()
        from kvplan.sizing.operators.profile_table import perf_table_setting

        perf_table_setting(self.perf_table)

    def _step_model(self) -> str | None:
        # loaded here: the light commands' help registers this panel without the simulator
        from kvplan.sim.step_models import step_model_setting

        return step_model_setting(self.step_model, self.calibration)

    def settings(self) -> dict[str, Any]:
        scheduler = SchedulerConfig(
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            chunked_prefill=not self.no_chunked_prefill,
            preemption=self.preemption,
        )
        return {
            "block_size": self.block_size,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "kv_cache_gib": self.kv_cache_gib,
            "num_gpu_blocks_override": self.num_gpu_blocks_override,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "swap_space_gib": self.swap_space_gib,
            "scheduler": scheduler,
            "step_model": self._step_model(),
            "perf_table": None if self.perf_table is None else str(self.perf_table),
        }
