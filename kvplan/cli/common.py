"""Shared CLI pieces: the one error path, option aliases reused across commands, formatting."""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from kvplan import GIB, MIB
from kvplan.cli.interrupts import Terminated, sigterm_raises
from kvplan.spec.setting_error import SettingError

console = Console()
error_console = Console(stderr=True, highlight=False)

F = TypeVar("F", bound=Callable[..., Any])


def cli_errors(*outputs_param: str) -> Callable[[F], F]:
    """Turn library ValueErrors (and unreadable files) into `error: ...` plus exit code 2.

    Names in outputs_param are the command's output-path parameters: any file they name
    that the failed command created is removed, so no partial output is left behind, except
    what an interrupted command says it kept (whole records of the work that finished).
    SIGTERM and Ctrl-C end the command the same way (one line, exit 143 / 130) after the
    `finally` blocks below the command have removed their temporary files.
    """

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            paths = [Path(kwargs[name]) for name in outputs_param if kwargs.get(name)]
            existed = {path: path.exists() for path in paths}
            try:
                with sigterm_raises():
                    return command(*args, **kwargs)
            except (ValueError, OSError, RecursionError, KeyboardInterrupt) as err:
                # An interrupt that saved the finished work (its `kept` note names the file)
                # keeps it; any other failure leaves no output it created.
                saved = isinstance(err, KeyboardInterrupt) and getattr(err, "kept", None)
                for path in paths:
                    if not saved and not existed[path] and path.is_file():
                        path.unlink()
                if isinstance(err, KeyboardInterrupt):
                    how = (
                        "terminated (SIGTERM)"
                        if isinstance(err, Terminated)
                        else "interrupted (Ctrl-C)"
                    )
                    kept = getattr(err, "kept", None)  # what a command saved of its finished work
                    detail = (
                        escape(kept)
                        if kept
                        else (
                            "results written before the interruption are kept, "
                            "nothing half-written was left"
                        )
                    )
                    error_console.print(f"[bold red]error:[/] {how}; {detail}", soft_wrap=True)
                    raise typer.Exit(143 if isinstance(err, Terminated) else 130) from None
                if debugging():
                    traceback.print_exception(err, file=sys.stderr)
                fail(error_message(err))

        return wrapper  # type: ignore[return-value]

    return decorate


# exit codes (docs/reference.md): 2 bad input, 3 a plan with no candidate that meets the SLO,
# 130 / 143 interrupted
BAD_INPUT, NO_DEPLOYMENT = 2, 3


def debugging() -> bool:
    """KVPLAN_DEBUG=1: the traceback behind a one-line error is printed above it."""
    return os.environ.get("KVPLAN_DEBUG", "").strip() not in ("", "0")


def error_message(err: BaseException) -> str:
    """The first line of an error, naming the user's path for file-system errors and each
    setting a library error names by its flag."""
    if isinstance(err, RecursionError):
        return "input nested too deeply to be read; check the file"
    text = err.named(flag_of) if isinstance(err, SettingError) else str(err)
    message = text.splitlines()[0] if text else type(err).__name__
    if isinstance(err, OSError) and err.filename:
        message = f"cannot use '{err.filename}': {err.strerror}; check the path and permissions"
    return message


# Settings whose flag is not the setting's name with dashes (library errors name settings,
# kvplan.spec.setting_error). `calibration_file` is where a file goes, shown with its value.
FLAGS = {
    "params": "--workload-param",
    "routers": "--router",
    "vllm_figures": "--format vllm",
    "calibration_file": "--calibration FILE",  # where a step model file goes
    "swap_slots": "--swap-space-gib",
    "scheduler_steps": "--num-scheduler-steps",
    "request_rate": "--rate",
    "range_ratio": "--random-range-ratio",  # vLLM's client's names
    "reserve_bytes": "--reserve-gib",
    "kv_cache_bytes": "--kv-cache-gib",
    "gpu_memory_gib": "--gpu-mem-gib",
}


def flag_of(setting: str) -> str:
    """The command line's spelling of a setting: `max_num_seqs` -> `--max-num-seqs`."""
    return FLAGS.get(setting) or "--" + setting.replace("_", "-")


def fail(message: str) -> None:
    """Print `error: message` (user text escaped: brackets survive, markup never runs) and exit
    2."""
    error_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(BAD_INPUT) from None


# Help panels: options grouped by what they set, in every command's --help.
HARDWARE, KV_PANEL, ENGINE, WORKLOAD, OUTPUT = (
    "Model and hardware",
    "KV formats and policies",
    "Engine",
    "Workload",
    "Output",
)
CLUSTER, REAL_MODE, TIERS = "Cluster", "Real mode", "Offload tiers"

# Option aliases shared by estimate, bench and later commands.
ModelOpt = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        rich_help_panel=HARDWARE,
        metavar="NAME",
        help="Profile name (kvplan profiles models) or a config.json / model dir.",
    ),
]
GpuOpt = Annotated[
    str,
    typer.Option(
        "--gpu",
        "-g",
        rich_help_panel=HARDWARE,
        metavar="NAME",
        help="GPU profile (kvplan profiles gpus).",
    ),
]
TpOpt = Annotated[
    int,
    typer.Option(
        "--tp",
        rich_help_panel=HARDWARE,
        metavar="N",
        help="Tensor-parallel degree (GPUs per replica).",
    ),
]
KvDtypeOpt = Annotated[
    str,
    typer.Option(
        "--kv-dtype",
        rich_help_panel=KV_PANEL,
        metavar="FORMAT",
        help="KV format: fp16, bf16, fp32, fp8\\[-e4m3|-e5m2], int8, int4, int4-g64 ...",
    ),
]
WeightDtypeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--weight-dtype",
        rich_help_panel=HARDWARE,
        metavar="DTYPE",
        help="Weight format of the linear layers (bf16, fp8, fp8-meta = Meta's FP8 recipe with "
        "attention in BF16, int4, nvfp4 ...); embeddings stay 16-bit. Default: the checkpoint's "
        "own, layer by layer.",
    ),
]
BlockSizeOpt = Annotated[
    int,
    typer.Option(
        "--block-size", rich_help_panel=ENGINE, metavar="TOKENS", help="Tokens per KV block."
    ),
]
EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        rich_help_panel=ENGINE,
        metavar="NAME",
        help="The serving engine modeled: vllm or sglang (vllm-v0 / vllm-v1 name a vLLM "
        "generation). Its release's defaults size the pool, set the batch limits and time "
        "the steps.",
    ),
]
EngineVersionOpt = Annotated[
    Optional[str],
    typer.Option(
        "--engine-version",
        rich_help_panel=ENGINE,
        metavar="X.Y.Z",
        help="The engine's release, e.g. 0.11.0 or 0.5.4.post2; default: the newest behaviour "
        "kvplan knows.",
    ),
]
UtilOpt = Annotated[
    Optional[float],
    typer.Option(
        "--gpu-memory-utilization",
        rich_help_panel=ENGINE,
        metavar="FRACTION",
        help="Fraction of GPU memory the engine may use; default: the engine's own (vLLM >= 0.20: "
        "0.92, older: 0.9, SGLang: 0.88).",
    ),
]
JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        rich_help_panel=OUTPUT,
        metavar="",
        help="Print machine-readable JSON instead of tables.",
    ),
]
SeedOpt = Annotated[
    int,
    typer.Option(
        "--seed",
        rich_help_panel=WORKLOAD,
        metavar="N",
        help="Random seed; the same seed gives the same results.",
    ),
]


def fmt_bytes(value: float) -> str:
    """Binary units, as vLLM logs them (GiB)."""
    if value is None:
        return "-"
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit, size in (("TiB", 2**40), ("GiB", GIB), ("MiB", MIB), ("KiB", 2**10)):
        if value >= size:
            return f"{sign}{value / size:,.2f} {unit}"
    return f"{sign}{value:,.0f} B"


def fmt_cell(value: object) -> str:
    """A table cell: '-' for nothing, thousands separators, two decimals, text escaped."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return escape(str(value))


def fmt_int(value: float) -> str:
    return f"{value:,.0f}"


def progress_bars(*columns: Any, disable: bool | None = None) -> Any:
    """A rich Progress on stderr that clears itself when done; off where stderr is not a
    terminal (piped, a bar is only a stray blank line) unless `disable` says otherwise."""
    from rich.progress import Progress

    off = not error_console.is_terminal if disable is None else disable
    return Progress(*columns, console=error_console, transient=True, disable=off)
