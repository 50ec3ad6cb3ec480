"""A user's own measured runs: what `vllm bench serve --save-result` writes, or the "Serving
Benchmark Result" block it prints, pasted into a text file (keys and labels from
vllm/benchmarks/serve.py). Each file is read up to MAX_RESULT_BYTES and checked
(kvplan/fit/run_checks.py) before it becomes a MeasuredRun a fit replays.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from kvplan import MIB
from kvplan.fit.measured import MeasuredRun, measured_figures
from kvplan.fit.run_checks import (
    check_lengths,
    check_request_length,
    check_result,
    run_problem,
)
from kvplan.spec.capped_read import read_capped
from kvplan.spec.setting_error import SettingError

# vLLM's printed labels -> its JSON keys (serve.py prints "{:<40} {:<10.2f}").
BLOCK_LABELS = {
    "Successful requests": "completed",
    "Failed requests": "failed",
    "Maximum request concurrency": "max_concurrency",
    "Request rate configured (RPS)": "request_rate",
    "Benchmark duration (s)": "duration",
    "Total input tokens": "total_input_tokens",
    "Total generated tokens": "total_output_tokens",
    "Request throughput (req/s)": "request_throughput",
    "Output token throughput (tok/s)": "output_throughput",
    "Total token throughput (tok/s)": "total_token_throughput",
    **{
        f"{stat} {name} (ms)": f"{key}_{name.lower()}_ms"
        for stat, key in (("Mean", "mean"), ("Median", "median"), ("P99", "p99"))
        for name in ("TTFT", "TPOT", "ITL", "E2EL")
    },
}


MAX_RESULT_BYTES = 256 * MIB  # a --save-result JSON; --save-detailed adds per-request lists


def _result_text(path: Path) -> str:
    """The file's text, refused above MAX_RESULT_BYTES before more is read (/dev/zero is not a
    result); bytes that are not UTF-8 are replaced, and then fail to parse as numbers."""
    if not path.is_file():
        raise ValueError(
            f"result file '{path}' does not exist or is not a file; pass a --save-result JSON "
            "or a pasted result block"
        )
    try:
        data = read_capped(path, MAX_RESULT_BYTES)
    except OSError as err:
        raise ValueError(f"{path}: cannot read ({err.strerror or err})") from None
    if len(data) > MAX_RESULT_BYTES:
        raise ValueError(
            f"{path}: larger than {MAX_RESULT_BYTES // MIB} MiB, more than a vLLM result; "
            "pass the file --save-result wrote (without --save-detailed)"
        )
    return data.decode("utf-8", errors="replace")


def read_vllm_json(path: Path, settings: dict[str, Any], text: str) -> MeasuredRun:
    """A `vllm bench serve --save-result` file (its `text`); `settings` supplies
    model/gpu/tp and engine limits."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as err:  # bad JSON, 5,000-digit numbers, deep nesting
        reason = str(err).splitlines()[0][:120] if str(err) else type(err).__name__
        raise ValueError(
            f"{path}: not a readable vLLM result JSON ({reason}); pass the file --save-result wrote"
        ) from None
    if not isinstance(data, dict) or "output_throughput" not in data:
        raise ValueError(
            f"{path}: no 'output_throughput' key; pass a `vllm bench serve --save-result` JSON"
        )
    return _serving_run(path, data, settings)


def _block_value(text: str) -> Any:
    """A printed figure as a number ("inf" included), else the text, for the check to name."""
    try:
        return float(text)
    except ValueError:
        return text


def read_vllm_block(path: Path, settings: dict[str, Any], text: str) -> MeasuredRun:
    """vLLM's printed "Serving Benchmark Result" block, pasted into a text file (its `text`)."""
    if "Serving Benchmark Result" not in text:
        raise ValueError(
            f"{path}: no 'Serving Benchmark Result' block; paste vLLM's printed result into it"
        )
    values: dict[str, Any] = {}
    for line in text.splitlines():
        label, colon, value = line.partition(":")
        if colon and label.strip() in BLOCK_LABELS and value.strip():
            values[BLOCK_LABELS[label.strip()]] = _block_value(value.strip())
    if "output_throughput" not in values:
        raise ValueError(
            f"{path}: the block has no 'Output token throughput (tok/s)' line; paste the whole "
            "block"
        )
    return _serving_run(path, values, settings)


def _serving_run(path: Path, data: dict[str, Any], settings: dict[str, Any]) -> MeasuredRun:
    for key in ("model", "gpu"):
        if not settings.get(key) and not (key == "model" and data.get("model_id")):
            raise SettingError(
                "{where}: the result does not name the {what}; pass {" + key + "}",
                where=path,
                what=key,
            )
    figures = check_result(path, data)
    completed = figures.get("completed") or 0
    if completed < 1:
        raise ValueError(
            f"{path}: no completed requests in the result; pass a run that finished requests"
        )
    check_lengths(path, settings, figures)
    total_in, total_out = figures.get("total_input_tokens"), figures.get("total_output_tokens")
    dataset = settings.get("dataset") or "random"
    input_len = settings.get("input_len") or (round(total_in / completed) if total_in else None)
    output_len = settings.get("output_len") or (round(total_out / completed) if total_out else None)
    if dataset == "random" and not (input_len and output_len):
        raise SettingError(
            "{where}: the result has no token totals; pass {input_len} and {output_len}", where=path
        )
    model = settings.get("model") or str(data.get("model_id"))
    check_request_length(path, model, settings.get("max_model_len"), input_len, output_len)
    rate = figures.get("request_rate")
    concurrency = figures.get("max_concurrency") or settings.get("max_concurrency")
    run = MeasuredRun(
        run_id=path.name,
        sweep=settings.get("sweep") or path.name,
        benchmark="serving",
        model=model,
        gpu=settings["gpu"],
        tp=int(settings.get("tp") or 1),
        engine=settings.get("engine") or "vllm",
        dataset=dataset,
        input_len=input_len,
        output_len=output_len,
        range_ratio=None if settings.get("range_ratio") is None else float(settings["range_ratio"]),
        num_prompts=int(completed),
        request_rate=math.inf if rate is None else rate,
        max_concurrency=int(concurrency) if concurrency else None,
        weight_dtype=settings.get("weight_dtype"),
        kv_dtype=settings.get("kv_dtype") or "auto",
        max_num_seqs=settings.get("max_num_seqs"),
        engine_version=settings.get("engine_version") or "",
        max_num_batched_tokens=settings.get("max_num_batched_tokens"),
        max_model_len=settings.get("max_model_len"),
        total_input_tokens=int(total_in) if total_in else None,
        total_output_tokens=int(total_out) if total_out else None,
        measured=measured_figures(figures),
        saturation_rate=figures.get("request_throughput"),
    )
    problem = run_problem(run)
    if problem is not None:
        raise ValueError(f"{path}: {problem}; pass the result file vLLM wrote, and its settings")
    return run


def read_result(path: Path, settings: dict[str, Any]) -> MeasuredRun:
    """A JSON result or a pasted text block, told apart by content."""
    text = _result_text(path)
    if text.lstrip()[:1] in ("{", "["):  # JSON (a list is refused as not a result)
        return read_vllm_json(path, settings, text)
    return read_vllm_block(path, settings, text)
