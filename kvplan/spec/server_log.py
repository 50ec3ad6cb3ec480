"""Read what a vLLM or SGLang server printed at startup: pure parsing, no judgement.

The lines it reads and their patterns are server_log_patterns.py's. Unknown lines are ignored.
Where a figure appears several times the first one is kept (`values` keeps every distinct one),
except per-rank lines, where rank 0 is preferred.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, fields
from typing import Any

from kvplan.spec.server_log_patterns import (
    ENFORCE_EAGER,
    EXPERT_PARALLEL,
    FLOAT_PATTERNS,
    INT_PATTERNS,
    RANK_ZERO,
    SAMPLER_LINES,
    SGLANG_MARKERS,
    TEXT_PATTERNS,
    V0_MARKERS,
    V1_MARKERS,
)

_LOG_LINE_START = re.compile(
    r"^\s*(\(|INFO|WARNING|ERROR|DEBUG|\[|#|\$|-|\*|>|`|[A-Z][a-z]+ |\d\d:\d\d|GPU \d)"
)
_WRAP_WIDTH = 120  # some pasted logs are hard-wrapped at ~140 columns

_USEFUL = (
    "gpu_kv_cache_tokens",
    "num_gpu_blocks",
    "available_kv_gib",
    "max_tokens_in_kv_from_error",
    "sglang_max_total_num_tokens",
    "sglang_kv_tokens_allocated",
    "sglang_max_allowed_tokens",
    "peak_activation_gib",
    "weights_gib",
    "max_concurrency",
    "total_gpu_memory_gib",
)


@dataclass(frozen=True)
class ServerLog:
    """Figures one startup log shows (None where it does not); names follow the log's own."""

    engine: str | None = None  # "vllm" or "sglang"
    engine_generation: str | None = None  # "v0" or "v1" for vLLM
    version: str | None = None
    model: str | None = None
    gpu_name: str | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    dtype: str | None = None
    block_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enforce_eager: bool | None = None
    expert_parallel: bool | None = (
        None  # --enable-expert-parallel: experts split over DP x TP ranks
    )
    sampler_path: str | None = None  # "flashinfer" or "sort" where the log names its sampler
    total_gpu_memory_gib: float | None = None
    weights_gib: float | None = None
    non_torch_gib: float | None = None
    peak_torch_memory_gib: float | None = None
    peak_activation_gib: float | None = None
    cuda_graph_gib: float | None = None
    cuda_graph_actual_gib: float | None = None
    non_kv_gib: float | None = None
    available_kv_gib: float | None = None
    kv_needed_gib: float | None = None
    gpu_kv_cache_tokens: int | None = None
    num_gpu_blocks: int | None = None
    num_cpu_blocks: int | None = None
    max_concurrency: float | None = None
    max_concurrency_tokens: int | None = None
    max_tokens_in_kv_from_error: int | None = None
    sglang_max_total_num_tokens: int | None = None
    sglang_kv_tokens_allocated: int | None = None
    sglang_max_allowed_tokens: int | None = None
    sglang_k_size_gb: float | None = None
    sglang_v_size_gb: float | None = None
    sglang_kv_size_gb: float | None = None
    sglang_available_gpu_mem_gb: float | None = None
    values: dict[str, tuple] = field(
        default_factory=dict, compare=False
    )  # every distinct value seen

    def recovered(self) -> dict[str, object]:
        """The fields the log showed, without `values`."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name != "values" and getattr(self, f.name) is not None
        }


def lines_looked_for() -> str:
    return (
        "'GPU KV cache size: N tokens', 'Available KV cache memory: X GiB', '# GPU blocks: N', "
        "'Memory profiling results', 'Maximum concurrency for M tokens per request', "
        "'Loading model weights took' / 'Model loading took', 'can store only N tokens' / "
        "'estimated maximum model length', SGLang 'max_total_num_tokens=' or 'KV Cache is allocated'"
    )


def unwrap(text: str) -> str:
    """Undo hard wraps: a long line followed by one that does not start like a log line."""
    out: list[str] = []
    for line in text.splitlines():
        if out and len(out[-1]) >= _WRAP_WIDTH and line and not _LOG_LINE_START.match(line):
            out[-1] += line
        else:
            out.append(line)
    return "\n".join(out)


def _number(text: str, kind: type) -> int | float:
    clean = text.replace(",", "")
    return int(float(clean)) if kind is int else float(clean)


def _find(
    text: str, patterns: tuple[str, ...], convert, prefer_rank_zero: bool
) -> tuple[object, list]:
    chosen, seen = None, []
    for pattern in patterns:
        matches = list(re.finditer(pattern, text, flags=re.MULTILINE))
        for match in matches:
            value = convert(match.group(1))
            if value not in seen:
                seen.append(value)
        if chosen is None and matches:
            chosen = convert(matches[0].group(1))
            if prefer_rank_zero:
                for match in matches:
                    line = text[text.rfind("\n", 0, match.start()) + 1 : match.start()]
                    if RANK_ZERO.search(line):
                        chosen = convert(match.group(1))
                        break
    return chosen, seen


def _generation(text: str) -> str | None:
    if any(marker in text for marker in V1_MARKERS):
        return "v1"
    if any(marker in text for marker in V0_MARKERS):
        return "v0"
    return None


def _non_default_args(text: str) -> dict:
    """vLLM's `non-default args: {...}` line is a Python dict literal; read it safely."""
    match = re.search(r"non-default args:\s*(\{.*\})\s*$", text, flags=re.MULTILINE)
    if not match:
        return {}
    try:
        value = ast.literal_eval(match.group(1))
    except (ValueError, SyntaxError):
        return {}
    return value if isinstance(value, dict) else {}


def parse_server_log(text: str) -> ServerLog:
    """Every figure the log shows; raises ValueError if it shows nothing kvplan can use."""
    text = unwrap(text.replace("\r\n", "\n"))
    found: dict[str, Any] = {}
    values: dict[str, tuple] = {}
    groups = (
        (FLOAT_PATTERNS, lambda s: _number(s, float)),
        (INT_PATTERNS, lambda s: _number(s, int)),
        (TEXT_PATTERNS, lambda s: s.strip().rstrip(",")),
    )
    for table, convert in groups:
        for name, patterns in table.items():
            value, seen = _find(
                text, patterns, convert, prefer_rank_zero=name == "available_kv_gib"
            )
            if value is not None:
                found[name] = value
                values[name] = tuple(seen)
    args = _non_default_args(text)
    for key in (
        "max_model_len",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "gpu_memory_utilization",
        "block_size",
        "max_num_seqs",
        "max_num_batched_tokens",
        "kv_cache_dtype",
        "model",
        "dtype",
        "quantization",
        "enforce_eager",
    ):
        if key in args and isinstance(args[key], (int, float, str, bool)):
            found[key] = args[key]
    if "enforce_eager" not in found:
        for pattern in ENFORCE_EAGER:
            match = re.search(pattern, text)
            if match:
                flag = match.group(1)
                found["enforce_eager"] = (
                    flag is None if pattern.startswith("--") else flag == "True"
                )
                break
    for path, pattern in SAMPLER_LINES:
        if re.search(pattern, text):
            found["sampler_path"] = path
            break
    if any(re.search(pattern, text) for pattern in EXPERT_PARALLEL):
        found["expert_parallel"] = True
    useful = [name for name in _USEFUL if name in found]
    if not useful:
        raise ValueError(
            f"no vLLM or SGLang memory figures found; kvplan explain looks for {lines_looked_for()}"
        )
    is_sglang = any(marker in text for marker in SGLANG_MARKERS) and not any(
        name in found for name in ("gpu_kv_cache_tokens", "num_gpu_blocks", "available_kv_gib")
    )
    found["engine"] = "sglang" if is_sglang else "vllm"
    if not is_sglang:
        found["engine_generation"] = _generation(text)
    return ServerLog(**found, values=values)
