"""Measured serving runs from NVIDIA aiconfigurator-core's silicon sample (`kvplan[perf]`).

aiconfigurator-core 0.12.0 ships `systems/silicon_sample.csv`: end-to-end TTFT and TPOT that
NVIDIA measured for models on its systems under vLLM, SGLang and TRT-LLM, each at a fixed
concurrency with fixed input and output lengths. Its rows are independent of its kernel tables
(they time whole servers), so they check the operator composition and fit the engines' own
per-step time on current releases, which the published runs of the project's dataset barely
cover.

A row becomes a MeasuredRun as `vllm bench serve --max-concurrency C --random-input-len ISL
--random-output-len OSL` would replay it. What the sample does not say is named here: the
number of requests (NUM_PROMPTS_PER_SLOT x C, enough for the concurrency to reach its steady
state), the vLLM release of a row without one (the last release on the day it was measured),
the KV format (the engine's default). Kept: aggregated serving with no pipeline, attention
data or expert parallelism (kvplan models none of them), vLLM and SGLang, on GPUs the catalog
knows.
"""

from __future__ import annotations

import csv
import importlib.util
import math
import re
from pathlib import Path

from kvplan.engines.engine_releases import version_on
from kvplan.engines.serving_engine import is_vllm
from kvplan.fit.measured import MeasuredRun
from kvplan.spec.profiles import gpu_profiles
from kvplan.spec.resolve import load_model

PACKAGE = "aiconfigurator_core"
NUM_PROMPTS_PER_SLOT = 4
# aiconfigurator's GEMM quant modes as kvplan's weight formats
WEIGHT_DTYPES = {"fp8": "fp8", "fp8_block": "fp8", "nvfp4": "nvfp4", "int4_wo": "int4",
                 "bfloat16": "bf16", "float16": "bf16", "fp4": "nvfp4", "int4": "int4",
                 "bf16": "bf16"}  # fmt: skip
BITS = {"fp8": 8, "int8": 8, "nvfp4": 4, "int4": 4, "mxfp4": 4, "bf16": 16, "fp16": 16}
ENGINES = ("vllm", "sglang")


def sample_path() -> Path | None:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "systems" / "silicon_sample.csv"
    return path if path.is_file() else None


def _gpu_for(system: str) -> str | None:
    for gpu in gpu_profiles().values():
        if gpu.measured_system == system:
            return gpu.name
    return None


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _one(row: dict[str, str], key: str) -> bool:
    return (_number(row.get(key, "")) or 1.0) == 1.0


def _weight_dtype(model: str, mode: str) -> str | None:
    """The run's weight format: None where the checkpoint already holds that precision (its
    own layout: quantized experts only, MXFP4 where the mode says FP4 on a GPU without NVFP4),
    else the recipe the mode names."""
    wanted = WEIGHT_DTYPES.get(mode)
    if wanted is None:
        return None
    spec = load_model(model)
    held = spec.checkpoint_quant.dtype if spec.checkpoint_quant else spec.weight_dtype
    return None if BITS.get(held) == BITS[wanted] else wanted


def aic_runs(
    path: Path | None = None, ttft: bool = False
) -> tuple[list[MeasuredRun], list[tuple[str, str]]]:
    """The sample's replayable rows as runs, and (row id, why not) for the others. Their TTFT
    is left out unless asked for: the sample does not say how its client started requests,
    and its TTFTs sit below what prefilling a whole wave of C prompts takes on vLLM and above it
    on SGLang, so they time the client's protocol as much as the engine (docs/step_time.md)."""
    path = path or sample_path()
    if path is None:
        return [], []
    runs, skipped = [], []
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            run, why = _run(row, ttft)
            if run is None:
                skipped.append((row["id"], why))
            else:
                runs.append(run)
    return runs, skipped


def _run(row: dict[str, str], with_ttft: bool) -> tuple[MeasuredRun | None, str]:
    engine, source = row["backend"], row["silicon_data_source"]
    if engine not in ENGINES or row["mode"] != "agg":
        return None, f"{engine} {row['mode']}"
    parallel = ("pp_size", "attention_dp_size", "moe_ep_size")
    if not all(_one(row, key) for key in parallel):
        return None, "pipeline, attention-data or expert parallelism"
    gpu = _gpu_for(row["system"])
    if gpu is None:
        return None, f"no catalog GPU for {row['system']}"
    found = re.search(r"silicon_concurrency=(\d+)", source)
    concurrency = int(found.group(1)) if found else int(_number(row["batch_size"]) or 0)
    ttft, tpot = _number(row["silicon_ttft_ms"]), _number(row["silicon_tpot_ms"])
    if not concurrency or ttft is None or tpot is None:
        return None, "no concurrency or no measured figure"
    version = row["backend_version"].strip()
    if not version and is_vllm(engine):
        day = re.search(r"measured=(\d{4}-\d{2}-\d{2})", source)
        release = version_on(day.group(1) if day else None)
        version = ".".join(map(str, release)) if release else ""
    try:
        # the GEMM quant mode, else the row's precision (some rows name only that)
        mode = row["gemm_quant_mode"] or row["precision"]
        weight_dtype = _weight_dtype(row["model_path"], mode)
    except ValueError as err:
        return None, str(err).splitlines()[0]
    return MeasuredRun(
        run_id=row["id"],
        sweep=f"aic/{row['model_path']}/{row['system']}/{engine}/{mode}",
        benchmark="serving",
        model=row["model_path"],
        gpu=gpu,
        tp=int(_number(row["tp_size"]) or 1),
        engine=engine,
        dataset="random",
        input_len=int(float(row["isl"])),
        output_len=int(float(row["osl"])),
        num_prompts=NUM_PROMPTS_PER_SLOT * concurrency,
        max_concurrency=concurrency,
        weight_dtype=weight_dtype,
        engine_version=version,
        measured={"mean_ttft_ms": ttft, "mean_tpot_ms": tpot}
        if with_ttft
        else {"mean_tpot_ms": tpot},
        caveat="aiconfigurator-core silicon sample",
    ), ""
