"""Read what a vLLM or SGLang server printed at startup.

The lines it reads and their patterns are server_log_patterns.py's. Unknown lines are ignored.
Where a figure appears several times the first one is kept (`values` keeps every distinct one),
except per-rank lines, where rank 0 is preferred. Every figure read is checked against what a
server can print (log_claims.py) before a ServerLog holds it. Reading the log's file is
log_file.py's.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any

from kvplan.spec.log_claims import Claim, checked_claims, printable
from kvplan.spec.server_log_patterns import (
    CPU_KV_SOURCES,
    CPU_MARKERS,
    EXPERT_PARALLEL,
    FLOAT_PATTERNS,
    INT_PATTERNS,
    MAX_LINE_CHARS,
    NUM,
    RANK_ZERO,
    SAMPLER_LINES,
    SGLANG_MARKERS,
    SWITCH_PATTERNS,
    TEXT_PATTERNS,
    V0_MARKERS,
    V1_MARKERS,
)

_LOG_LINE_START = (
    r"[^\S\n]*(?:\(|INFO|WARNING|ERROR|DEBUG|\[|#|\$|-|\*|>|`|[A-Z][a-z]+ |\d\d:\d\d|GPU \d)"
)
_WRAP_WIDTH = 120  # some pasted logs are hard-wrapped at ~140 columns
# Whole-text passes (the regex engine's speed, not a Python loop per line): every line break
# splitlines knows becomes \n; a break after a line of _WRAP_WIDTH or more, before a line
# that does not start like a log line, is a hard wrap; a line is cut at MAX_LINE_CHARS.
_LINE_BREAK = re.compile(r"\r\n|[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_HARD_WRAP = re.compile(
    rf"\n(?<=[^\n]{{{_WRAP_WIDTH}}}\n)(?!$|{_LOG_LINE_START})", flags=re.MULTILINE
)
_LONG_LINE = re.compile(rf"^([^\n]{{{MAX_LINE_CHARS}}})[^\n]+", flags=re.MULTILINE)
SAID_CHARS = 60  # a setting's source quoted beside it in explain's table
MAX_CLAIMS_PER_PATTERN = 1024  # one figure per rank of the largest deployments, and more
# Settings vLLM's `non-default args: {...}` line prints that a ServerLog keeps.
ARG_FIELDS = (
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
    "enable_prefix_caching",
)

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
    "cpu_kv_cache_tokens",
    "cpu_kv_gib",
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
    world_size: int | None = None  # GPUs the server's ranks span (TP x PP x DP)
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
    enable_prefix_caching: bool | None = None
    num_speculative_tokens: int | None = None  # a drafter's tokens per step (MTP, EAGLE, ...)
    speculative_method: str | None = None  # "mtp", "eagle", ... as the log names the drafter
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
    # vLLM's CPU backend: the node's memory, not a GPU's (kvplan/logs/cpu_log.py explains it)
    device: str | None = None  # "cpu" for a CPU server; None for a GPU's
    cpu_kv_source: str | None = None  # "explicit" (VLLM_CPU_KVCACHE_SPACE) or "auto"
    cpu_kv_gib: float | None = None
    cpu_node_total_gib: float | None = None
    cpu_requested_gib: float | None = None
    cpu_non_kv_gib: float | None = None
    cpu_node: int | None = None
    cpu_kv_cache_tokens: int | None = None
    blocks_before_override: int | None = None  # what the KV memory gave, before the override
    num_gpu_blocks_override: int | None = None
    values: dict[str, tuple] = field(
        default_factory=dict, compare=False
    )  # every distinct value seen
    # each field's source in the log's own words ("tensor_parallel_size=4")
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def tp_from_world(self) -> int | None:
        """The TP degree a log that names only its world size implies: the world over its
        pipeline and data-parallel ranks, where that divides."""
        if self.world_size is None:
            return None
        others = (self.pipeline_parallel_size or 1) * (self.data_parallel_size or 1)
        return self.world_size // others if self.world_size % others == 0 else None

    def disagreements(self) -> list[str]:
        """The KV figures the log prints with more than one value (two servers in one log, or
        ranks that differ), in words: the explanation uses the first, and says so."""
        said = []
        for name in DISAGREEING_FIELDS:
            seen = self.values.get(name, ())
            if len(seen) > 1:
                shown = ", ".join(f"{value:,}" for value in seen[:4])
                said.append(
                    f"the log prints {len(seen)} different {name} ({shown}): two servers, or "
                    f"ranks that differ; explaining the first ({getattr(self, name):,})"
                )
        return said

    def recovered(self) -> dict[str, object]:
        """The fields the log showed, without `values`."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("values", "sources") and getattr(self, f.name) is not None
        }


# KV figures every rank of one server prints alike
DISAGREEING_FIELDS = ("gpu_kv_cache_tokens", "num_gpu_blocks", "sglang_max_total_num_tokens")
# a server's own KV figures, by engine: a log with both is two servers
ENGINE_KV_FIELDS = {
    # vLLM's refusal names the tokens its KV cache holds, as a pool line would
    "vLLM": ("gpu_kv_cache_tokens", "num_gpu_blocks", "max_tokens_in_kv_from_error"),
    "SGLang": ("sglang_max_total_num_tokens", "sglang_kv_tokens_allocated"),
}


def lines_looked_for() -> str:
    return (
        "'GPU KV cache size: N tokens', 'Available KV cache memory: X GiB', '# GPU blocks: N', "
        "'Memory profiling results', 'Maximum concurrency for M tokens per request', "
        "'CPU KV cache size: N tokens', 'Auto set (X/T) GiB for KV cache' / 'Explicitly set', "
        "'Loading model weights took' / 'Model loading took', 'can store only N tokens' / "
        "'estimated maximum model length', SGLang 'max_total_num_tokens=' or 'KV Cache is "
        "allocated'"
    )


def unwrap(text: str) -> str:
    """Undo hard wraps: a line of _WRAP_WIDTH or more characters followed by one that does not
    start like a log line is one line. Line breaks become \\n, and every line is cut at
    MAX_LINE_CHARS (joined ones too)."""
    text = _HARD_WRAP.sub("", _LINE_BREAK.sub("\n", text))
    return _LONG_LINE.sub(r"\1", text)


class _Lines:
    """Claims by offset in the unwrapped log: the line around it, and its number on demand."""

    def __init__(self, text: str) -> None:
        self.text = text

    def claim(self, name: str, raw: Any, offset: int, said: str = "") -> Claim:
        start = self.text.rfind("\n", 0, offset) + 1
        end = self.text.find("\n", offset)
        line = self.text[start : len(self.text) if end == -1 else end]
        return Claim(name, raw, offset, line, offset - start, said)

    def number(self, offset: int) -> int:
        return self.text.count("\n", 0, offset) + 1


def _matches(pattern: str, text: str) -> Iterator[re.Match[str]]:
    """The pattern's matches in order. One that starts with a figure (`NUM GiB for ...`) has
    no plain text to scan for, and trying it at every position of a large log is slow: it is
    tried only between one occurrence of its text and the next, from the line's start."""
    compiled = re.compile(pattern, flags=re.MULTILINE)
    if not pattern.startswith(NUM):
        yield from compiled.finditer(text)
        return
    suffix = pattern[len(NUM) :]
    needle = suffix.removeprefix(r"\s*")
    if re.escape(needle) != needle.replace(" ", r"\ "):
        raise ValueError(f"a pattern that starts with a figure must end in plain text: {pattern!r}")
    start = text.find(needle)
    window = 0
    while start != -1:
        end = start + len(needle)
        window = max(window, text.rfind("\n", 0, start) + 1)
        match = compiled.search(text, window, end)
        if match:
            yield match
        window, start = end, text.find(needle, end)


def _find(
    lines: _Lines, name: str, patterns: tuple[str, ...], text_field: bool
) -> tuple[list[Claim], int | None]:
    """Every figure the patterns read for one field, and which one the field keeps: the first
    pattern's first (rank 0's where `name` is per rank)."""
    claims: list[Claim] = []
    chosen = None
    for pattern in patterns:
        found = itertools.islice(_matches(pattern, lines.text), MAX_CLAIMS_PER_PATTERN)
        first = len(claims)
        for match in found:
            raw = match.group(1).strip().rstrip(",") if text_field else match.group(1).rstrip(",")
            claims.append(lines.claim(name, raw, match.start(1), _said(match.group(0))))
        if chosen is None and len(claims) > first:
            chosen = first
            if name == "available_kv_gib":
                chosen = next(
                    (
                        first + i
                        for i, claim in enumerate(claims[first:])
                        if RANK_ZERO.search(claim.line[: claim.column])
                    ),
                    first,
                )
    return claims, chosen


def _said(matched: str) -> str:
    """What a pattern matched, on one line and short enough to quote beside the setting."""
    text = " ".join(matched.split()).rstrip(",;")
    return printable(text if len(text) <= SAID_CHARS else text[: SAID_CHARS - 1] + "…")


def _generation(text: str) -> str | None:
    if any(marker in text for marker in V1_MARKERS):
        return "v1"
    if any(marker in text for marker in V0_MARKERS):
        return "v0"
    return None


def _non_default_args(text: str) -> tuple[dict, int]:
    """vLLM's `non-default args: {...}` line is a Python dict literal; read it safely.
    Returns the dict and where it starts ({} where there is none or it is not a literal)."""
    match = re.search(r"non-default args:\s*(\{.*\})\s*$", text, flags=re.MULTILINE)
    if not match:
        return {}, 0
    try:
        value = ast.literal_eval(match.group(1))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return {}, 0
    return (value, match.start(1)) if isinstance(value, dict) else ({}, 0)


def parse_server_log(
    text: str, source: str = "the log", gpu_memory: tuple[float, str] | None = None
) -> ServerLog:
    """Every figure the log shows; raises ValueError if it shows nothing kvplan can use, or a
    figure no server prints (naming `source` and the line). `gpu_memory` (GiB, name) bounds
    the memory figures of a log that does not print its GPU's total."""
    text = unwrap(text)
    lines = _Lines(text)
    claims: list[Claim] = []
    chosen: dict[str, int] = {}
    seen: dict[str, tuple[int, ...]] = {}  # field -> its claims read by the patterns
    for table in (FLOAT_PATTERNS, INT_PATTERNS, TEXT_PATTERNS):
        for name, patterns in table.items():
            found, pick = _find(lines, name, patterns, table is TEXT_PATTERNS)
            if pick is not None:
                chosen[name] = len(claims) + pick
                seen[name] = tuple(range(len(claims), len(claims) + len(found)))
            claims += found
    args, at = _non_default_args(text)
    for key in ARG_FIELDS:
        if args.get(key) is not None:
            chosen[key] = len(claims)
            claims.append(lines.claim(key, args[key], at, "non-default args"))
    checked = checked_claims(source, claims, lines.number, gpu_memory)
    found_values: dict[str, Any] = {name: checked[index] for name, index in chosen.items()}
    sources = {name: claims[index].said for name, index in chosen.items() if claims[index].said}
    values = {name: tuple(dict.fromkeys(checked[i] for i in seen[name])) for name in seen}
    for name, patterns in SWITCH_PATTERNS.items():
        if name in found_values:
            continue
        for pattern in patterns:
            match = re.search(pattern, text)
            if match:
                flag = match.group(1)
                found_values[name] = flag is None if pattern.startswith("--") else flag == "True"
                sources[name] = _said(match.group(0))
                break
    for path, pattern in SAMPLER_LINES:
        if re.search(pattern, text):
            found_values["sampler_path"] = path
            break
    if any(re.search(pattern, text) for pattern in EXPERT_PARALLEL):
        found_values["expert_parallel"] = True
    if any(marker in text for marker in CPU_MARKERS):
        found_values["device"] = "cpu"
        found_values["cpu_kv_source"] = next(
            (source for source, line in CPU_KV_SOURCES if line in text), None
        )
    if not any(name in found_values for name in _USEFUL):
        raise ValueError(
            f"no vLLM or SGLang memory figures found; kvplan explain looks for {lines_looked_for()}"
        )
    engines = [e for e, names in ENGINE_KV_FIELDS.items() if any(n in found_values for n in names)]
    if len(engines) > 1:
        raise ValueError(
            "the log holds the KV figures of both a vLLM and an SGLang server; give kvplan "
            "explain one server's log"
        )
    is_sglang = any(marker in text for marker in SGLANG_MARKERS) and not any(
        name in found_values
        for name in ("gpu_kv_cache_tokens", "num_gpu_blocks", "available_kv_gib", "device")
    )
    found_values["engine"] = "sglang" if is_sglang else "vllm"
    if not is_sglang:
        found_values["engine_generation"] = _generation(text)
    return ServerLog(**found_values, values=values, sources=sources)
