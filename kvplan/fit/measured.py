"""Measured benchmark runs, read from what vLLM writes or prints, or from kvplan's dataset.

Three inputs give one MeasuredRun each:

- the JSON `vllm bench serve --save-result` writes (keys from vllm/benchmarks/serve.py:
  duration, completed, total_input_tokens, total_output_tokens, request_throughput,
  output_throughput, total_token_throughput, mean/median/p99 _ttft_ms, _tpot_ms, _itl_ms,
  _e2el_ms, plus the run's own num_prompts, request_rate, burstiness, max_concurrency,
  model_id);
- the printed "Serving Benchmark Result" block pasted into a text file (the labels vLLM
  prints, e.g. "Output token throughput (tok/s):");
- a line of the project's dataset of published runs, serving_benchmarks.jsonl (serve,
  throughput, latency).

What the files do not say (GPU, tensor parallel size, the engine's max_num_seqs and token
budget) comes from the caller: `kvplan calibrate --gpu --tp ...`.
The first two are read, and checked, by kvplan/fit/vllm_results.py.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kvplan.engines.engine_releases import DEFAULT_ENGINE_NAME, parse_version
from kvplan.engines.serving_engine import VllmEngine, VllmV0Engine, VllmV1Engine, serving_engine
from kvplan.engines.versions import released_before
from kvplan.fit.run_checks import run_problem
from kvplan.logs.log_setup import weight_dtype_hint
from kvplan.spec.resolve import load_gpu, load_model

METRICS = (
    "output_throughput",
    "mean_ttft_ms",
    "mean_tpot_ms",
    "median_ttft_ms",
    "median_tpot_ms",
    "latency_avg_s",
)
# An offered rate up to this multiple of the saturation rate is not counted as saturating:
# the last requests' own latency keeps a run's served rate a little under its offered one.
SATURATION_MARGIN = 1.1
# vLLM PR #9529 (merged 2024-10-19, first released in 0.6.4) made benchmark_throughput.py and
# benchmark_latency.py take the engine's own arguments. Before it, each script declared
# --enable-chunked-prefill as a store_true flag and passed its value to LLM(), so an offline
# run that did not ask for chunked prefill ran without it even above 32K context.
OFFLINE_SCRIPTS_USE_ENGINE_ARGS = (0, 6, 4)


@dataclass(frozen=True)
class MeasuredRun:
    """One measured benchmark run and the settings a simulation needs to replay it."""

    run_id: str
    sweep: str
    benchmark: str  # serving, throughput or latency
    model: str
    gpu: str
    tp: int
    engine: str = DEFAULT_ENGINE_NAME
    dataset: str = "random"
    input_len: int | None = None
    output_len: int | None = None
    range_ratio: float | None = (
        None  # --random-range-ratio as the run's client read it; None: fixed lengths
    )
    num_prompts: int = 1000
    request_rate: float = math.inf
    max_concurrency: int | None = None
    weight_dtype: str | None = None
    kv_dtype: str = "auto"
    max_num_seqs: int | None = None  # None: the engine's default (batch_defaults)
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None  # None: the engine version's default
    engine_version: str = ""  # "" = current
    num_scheduler_steps: int = 1  # vLLM V0 multi-step scheduling
    chunked_prefill: bool | None = None
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    measured: dict[str, float] = field(default_factory=dict)  # METRICS that the source shows
    caveat: str = ""
    # Requests/s the server completed at its saturation: the highest measured request
    # throughput of the run's sweep (its own where it stands alone); None when not measured.
    saturation_rate: float | None = None

    @property
    def queue_dominated(self) -> bool:
        """TTFT mostly measures waiting: no concurrency cap, and everything sent at once or an
        offered rate above what the server completed at saturation."""
        if self.max_concurrency is not None:
            return False
        if math.isinf(self.request_rate) or self.request_rate >= 100:
            return True
        return (
            self.saturation_rate is not None
            and self.request_rate > SATURATION_MARGIN * self.saturation_rate
        )


def _float(value: Any) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def measured_figures(values: dict[str, Any]) -> dict[str, float]:
    """The METRICS a source shows; a median only where the source has no mean of that figure
    (so one figure is not compared twice), and compared as a median."""
    found = {}
    for key in METRICS:
        value = _float(values.get(key))
        if value is not None and value > 0:
            found[key] = value
    for name in ("ttft", "tpot"):
        if f"mean_{name}_ms" in found:
            found.pop(f"median_{name}_ms", None)
    return found


# --- the shipped dataset ---------------------------------------------------------------


def dataset_run(record: dict[str, Any]) -> tuple[MeasuredRun | None, str]:
    """A serving_benchmarks.jsonl line as a MeasuredRun, or None and why it cannot be replayed."""
    # Model and GPU as the page writes them, through the resolvers a user's input takes.
    model = (record.get("model") or "").strip()
    try:
        load_model(model)
        gpu = load_gpu(record.get("gpu") or "").name
    except ValueError as err:
        return None, str(err)
    kind = record.get("benchmark")
    dataset = "sharegpt" if (record.get("dataset") or "").startswith("sharegpt") else "random"
    measured: dict[str, float] = {}
    out_tps = _float(record.get("output_throughput")) or _float(
        record.get("throughput_output_tokens_per_s")
    )
    total_tps = _float(record.get("throughput_total_tokens_per_s"))
    in_len, out_len = record.get("input_len"), record.get("output_len")
    if out_tps is None and total_tps and in_len and out_len:
        out_tps = (
            total_tps * out_len / (in_len + out_len)
        )  # fixed lengths: the output share of the total
    if out_tps:
        measured["output_throughput"] = out_tps
    measured.update(measured_figures({k: record.get(k) for k in METRICS if k.endswith("_ms")}))
    if kind == "latency" and record.get("latency_avg_s"):
        measured = {"latency_avg_s": float(record["latency_avg_s"])}
    if dataset == "random" and not (in_len and out_len):
        return None, "random dataset without input/output lengths"
    if not measured:
        return None, "no comparable figure (output tok/s, TTFT, TPOT or latency) in the record"
    num_prompts = (
        record.get("num_prompts")
        or record.get("successful_requests")
        or record.get("latency_batch_size")
        or 100
    )
    if kind == "latency":
        num_prompts = record["latency_batch_size"]
    quant = (record.get("quantization") or "").lower()
    kv = (record.get("kv_cache_dtype") or "").lower()
    caveat = record.get("notes") or ""
    run = MeasuredRun(
        run_id=record["record_id"],
        sweep=record.get("sweep_id") or record["record_id"],
        benchmark="serving" if kind == "serving" else str(kind),
        model=model,
        gpu=gpu,
        tp=int(record.get("tensor_parallel_size") or 1),
        engine=record.get("engine") or "vllm",
        dataset=dataset,
        input_len=in_len,
        output_len=out_len,
        num_prompts=int(num_prompts),
        request_rate=_float(record.get("request_rate")) or math.inf,
        max_concurrency=record.get("max_concurrency"),
        weight_dtype=weight_dtype_hint(record.get("model"), quant) if "fp8" in quant else None,
        kv_dtype="fp8" if (kv == "fp8" or "fp8-kv" in quant) else "auto",
        max_num_seqs=record.get("max_num_seqs"),
        engine_version=str(record.get("engine_version") or ""),
        num_scheduler_steps=int(record.get("num_scheduler_steps") or 1),
        chunked_prefill=record.get("enable_chunked_prefill"),
        max_num_batched_tokens=record.get("max_num_batched_tokens"),
        max_model_len=record.get("max_model_len"),
        gpu_memory_utilization=_float(record.get("gpu_memory_utilization")),
        total_input_tokens=record.get("total_input_tokens"),
        total_output_tokens=record.get("total_output_tokens"),
        measured=measured,
        caveat=caveat,
        saturation_rate=_served_rate(record),
    )
    problem = run_problem(run)
    return (None, problem) if problem else (run, "")


def _served_rate(record: dict[str, Any]) -> float | None:
    rate = _float(record.get("request_throughput"))
    done, duration = _float(record.get("successful_requests")), _float(record.get("duration_s"))
    if rate is None and done and duration:
        rate = done / duration
    return rate


def load_dataset(path: Path) -> tuple[list[MeasuredRun], list[tuple[str, str]]]:
    """Every replayable record of serving_benchmarks.jsonl, and (record_id, reason) for the rest."""
    runs, skipped = [], []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        run, why = dataset_run(record)
        if run is None:
            skipped.append((record.get("record_id", "?"), why))
        else:
            runs.append(run)
    return _with_sweep_saturation(runs), skipped


def _with_sweep_saturation(runs: list[MeasuredRun]) -> list[MeasuredRun]:
    """Each serving run's saturation rate becomes the highest request throughput its sweep
    measured: a rate sweep's unthrottled run shows what the lower rates were offered against."""
    best: dict[str, float] = {}
    for run in runs:
        if run.benchmark == "serving" and run.saturation_rate is not None:
            best[run.sweep] = max(best.get(run.sweep, 0.0), run.saturation_rate)
    return [
        replace(run, saturation_rate=best[run.sweep])
        if run.sweep in best and run.benchmark == "serving"
        else run
        for run in runs
    ]


def batch_defaults(
    run: MeasuredRun, gpu_memory_gib: float, gpu_name: str, max_model_len: int
) -> tuple[int, int, bool]:
    """(max_num_seqs, max_num_batched_tokens, chunked prefill) the server ran with: the run's
    own settings where it states them, else vLLM's defaults for its version and GPU
    (ServingEngine.batch_defaults: `vllm serve`'s for serving runs, the offline
    LLM class's for `bench throughput` / `latency`). V0's offline scripts before 0.6.4 turned
    chunked prefill off unless asked (OFFLINE_SCRIPTS_USE_ENGINE_ARGS). SGLang runs take
    SGLang's own limits instead (calibration.build_engine, core.engine_factory.engine_scheduler)."""
    offline = run.benchmark in ("throughput", "latency")
    engine = serving_engine(run.engine, run.engine_version)
    if not isinstance(engine, VllmEngine):
        engine = VllmV1Engine()
    v0 = isinstance(engine, VllmV0Engine)
    defaults = engine.batch_defaults(
        parse_version(run.engine_version),
        gpu_memory_gib,
        gpu_name,
        max_model_len,
        offline,
    )
    chunked = run.chunked_prefill
    if chunked is None:
        old_script = (
            v0 and offline and released_before(run.engine_version, OFFLINE_SCRIPTS_USE_ENGINE_ARGS)
        )
        chunked = defaults.chunked_prefill and not old_script
    budget = defaults.max_num_batched_tokens
    if v0 and not chunked:
        budget = max(max_model_len, 2048)
    return run.max_num_seqs or defaults.max_num_seqs, run.max_num_batched_tokens or budget, chunked
