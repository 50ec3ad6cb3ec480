"""What a server's startup log may claim: every figure a log shows, checked before anything
is explained from it.

A claim is one figure as one line of the log shows it. Numbers keep the rule of the
setting they are (kvplan/spec/numbers.py: a logged block size is refused exactly where
`--block-size` would be) or of what they measure (memory one GPU shows, tokens, a ratio);
names are text and switches are True or False. Memory a GPU shows must also fit in the
total memory the same log gives for it. A refusal names the log and the line, quotes the
line (shortened, around the figure) and says what the figure must be.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvplan.spec.numbers import RULES, _show

# ServerLog field -> the numbers.RULES entry its figures keep.
FIELD_RULES: dict[str, str] = {
    "total_gpu_memory_gib": "gpu_total_gib",
    "weights_gib": "gpu_figure_gib",
    "non_torch_gib": "gpu_figure_gib",
    "peak_torch_memory_gib": "gpu_figure_gib",
    "peak_activation_gib": "gpu_figure_gib",
    "cuda_graph_gib": "gpu_figure_gib",
    "cuda_graph_actual_gib": "gpu_figure_gib",
    "non_kv_gib": "gpu_figure_gib",
    "available_kv_gib": "kv_budget_gib",
    "sglang_k_size_gb": "gpu_figure_gib",
    "sglang_v_size_gb": "gpu_figure_gib",
    "sglang_kv_size_gb": "gpu_figure_gib",
    "sglang_available_gpu_mem_gb": "gpu_figure_gib",
    "kv_needed_gib": "kv_needed_gib",
    "max_concurrency": "concurrency_ratio",
    "gpu_kv_cache_tokens": "token_count",
    "num_gpu_blocks": "token_count",
    "num_cpu_blocks": "token_count",
    "max_tokens_in_kv_from_error": "token_count",
    "sglang_max_total_num_tokens": "token_count",
    "sglang_kv_tokens_allocated": "token_count",
    "sglang_max_allowed_tokens": "token_count",
    "max_concurrency_tokens": "context",
    "cpu_kv_gib": "node_figure_gib",
    "cpu_requested_gib": "node_figure_gib",
    "cpu_non_kv_gib": "node_figure_gib",
    "cpu_node_total_gib": "node_total_gib",
    "cpu_node": "numa_node",
    "cpu_kv_cache_tokens": "token_count",
    "blocks_before_override": "token_count",
    "num_gpu_blocks_override": "token_count",
    "tensor_parallel_size": "tp",
    "world_size": "tp",  # GPUs in the world: the same range as a TP degree
    "pipeline_parallel_size": "pp",
    "data_parallel_size": "dp",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "max_model_len": "max_model_len",
    "block_size": "block_size",
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "num_speculative_tokens": "num_speculative_tokens",
}
TEXT_FIELDS = (
    "model",
    "kv_cache_dtype",
    "quantization",
    "dtype",
    "version",
    "gpu_name",
    "speculative_method",
)
SWITCH_FIELDS = ("enforce_eager", "enable_prefix_caching")
# Memory one GPU shows, bounded by the total the log gives for that GPU. Two-decimal printing
# and GiB-labelled-GB figures leave a little slack.
PER_GPU_MEMORY = tuple(
    name for name, rule in FIELD_RULES.items() if rule in ("gpu_figure_gib", "kv_budget_gib")
)
# Memory a CPU worker shows on its NUMA node, bounded by the node's total the same line gives;
# the KV memory and the non-KV usage are parts of it.
PER_NODE_MEMORY = ("cpu_kv_gib", "cpu_requested_gib", "cpu_non_kv_gib")
NODE_PARTS = ("cpu_kv_gib", "cpu_non_kv_gib")
# A server whose KV budget came out negative stops with no KV cache: it reports no tokens.
KV_CAPACITY = ("gpu_kv_cache_tokens", "num_gpu_blocks", "sglang_max_total_num_tokens")
TOTAL_SLACK = 1.01
QUOTE_CHARS = 100  # a quoted line is shortened to about this many characters
VALUE_CHARS = 24


@dataclass(frozen=True)
class Claim:
    """One figure one line shows: `raw` as the log wrote it (text for a figure the patterns
    read, any Python value for the engine's printed dict of arguments)."""

    field: str
    raw: Any
    offset: int  # where the figure starts in the log as read (hard wraps undone)
    line: str
    column: int = 0  # where the figure starts in the line, to centre the quote on it
    said: str = ""  # the words that hold the figure, to show where a setting was read


class LogClaimError(ValueError):
    """A figure no server prints; the message names the log, the line and the fix."""


def printable(text: str) -> str:
    """Text safe to quote on one terminal line: control and line-separator characters become ?."""
    return "".join(char if char.isprintable() else "?" for char in text)


def quote(line: str, column: int = 0) -> str:
    """The line, shortened around `column` to about QUOTE_CHARS characters."""
    text = line.strip()
    column = max(0, column - (len(line) - len(line.lstrip())))
    if len(text) > QUOTE_CHARS:
        start = min(max(0, column - QUOTE_CHARS // 2), len(text) - QUOTE_CHARS)
        tail = "…" if start + QUOTE_CHARS < len(text) else ""
        text = ("…" if start else "") + text[start : start + QUOTE_CHARS] + tail
    return printable(text)


def _shown(raw: Any) -> str:
    """A claimed value in a message: numbers as the rules show them, a long value cut with
    its whole length (of the text, or of a list's or dict's repr, not of a shortened form)."""
    text = raw if isinstance(raw, str) else _show(raw)
    if len(text) > VALUE_CHARS:
        whole = text if isinstance(raw, (str, int, float)) else repr(raw)  # _show cut a repr
        text = f"{text[:12]}… ({len(whole):,} characters)"
    return printable(text)


def _as_number(raw: Any) -> Any:
    """A figure's text as a float (nan, inf and 400-digit numbers included, for the rule to
    refuse); any other value as it is."""
    if isinstance(raw, str):
        try:
            return float(raw.replace(",", ""))
        except ValueError:
            return raw
    return raw


def _parts(fields: dict[str, int]) -> tuple[str, ...]:
    """The fields that split one GPU's memory without overlap: weights (or, in the newer
    per-worker summary, weights + non-torch), activation peak, non-torch, CUDA graphs, KV."""
    weights = "weights_gib" if "weights_gib" in fields else "non_kv_gib"
    return (weights, "peak_activation_gib", "non_torch_gib", "cuda_graph_gib", "available_kv_gib")


LineNumber = Callable[[int], int]  # an offset's 1-based line in the log as read


LOG_FIX = "correct or remove that line, or pass the log as the server printed it"
GPU_FIX = "pass the GPU the server ran on with --gpu, or correct that line"


def _refuse(
    source: str, claim: Claim, must: str, line_number: LineNumber, fix: str = LOG_FIX
) -> LogClaimError:
    return LogClaimError(
        f"{source} line {line_number(claim.offset)} claims {claim.field} {_shown(claim.raw)}, "
        f'but it must be {must} ("{quote(claim.line, claim.column)}"); {fix}'
    )


def _must(claim: Claim) -> tuple[Any, str | None]:
    """The claim's value as its field holds it (int, float, text or bool), or None and what
    the value must be."""
    if claim.field in TEXT_FIELDS:
        return (claim.raw, None) if isinstance(claim.raw, str) else (None, "text")
    if claim.field in SWITCH_FIELDS:
        return (claim.raw, None) if isinstance(claim.raw, bool) else (None, "True or False")
    rule = RULES[FIELD_RULES[claim.field]]
    value = _as_number(claim.raw)
    if not rule.admits(value):
        unit = " GiB" if FIELD_RULES[claim.field].endswith("gib") else ""
        return None, rule.describe() + unit
    return rule.convert(value), None


def checked_claims(
    source: str,
    claims: list[Claim],
    line_number: LineNumber,
    gpu_memory: tuple[float, str] | None = None,
) -> dict[int, Any]:
    """Every claim's value by its index in `claims`, the first bad one (in line order) refused;
    then memory a GPU shows against the total the log gives (its first total), or where it
    gives none, against `gpu_memory`: (GiB, the GPU's name) of the GPU the user named."""
    values: dict[int, Any] = {}
    for index in sorted(range(len(claims)), key=lambda i: claims[i].offset):
        value, must = _must(claims[index])
        if must is not None:
            raise _refuse(source, claims[index], must, line_number)
        values[index] = value
    totals = [values[i] for i, c in enumerate(claims) if c.field == "total_gpu_memory_gib"]
    bound = (totals[0], "the GPU's total memory the log shows") if totals else gpu_memory
    if bound is not None:
        total, whose = bound
        fix = LOG_FIX if totals else GPU_FIX
        for index, claim in enumerate(claims):
            if claim.field in PER_GPU_MEMORY and abs(values[index]) > total * TOTAL_SLACK + 0.01:
                raise _refuse(source, claim, f"within {whose}, {total:g} GiB", line_number, fix)
        first: dict[str, int] = {}  # each field's first claim in the log
        for index, claim in enumerate(claims):
            first.setdefault(claim.field, index)
        parts = [first[name] for name in _parts(first) if name in first]
        held = sum(max(0.0, values[i]) for i in parts)
        if held > total * TOTAL_SLACK + 0.05:
            last = max(parts, key=lambda i: claims[i].offset)
            raise _refuse(
                source,
                claims[last],
                f"such that the parts of the GPU's memory the log prints ({held:g} GiB) fit "
                f"{whose}, {total:g} GiB",
                line_number,
                fix,
            )
    _check_node_memory(source, claims, values, line_number)
    capacity = [i for i, c in enumerate(claims) if c.field in KV_CAPACITY and values[i] > 0]
    for index, claim in enumerate(claims):
        if claim.field == "available_kv_gib" and values[index] < 0 and capacity:
            other = claims[capacity[0]]
            raise _refuse(
                source,
                claim,
                f">= 0 where line {line_number(other.offset)} reports {other.field} "
                f"{_shown(other.raw)} (a negative KV budget leaves no KV cache)",
                line_number,
            )
    return values


def _check_node_memory(
    source: str, claims: list[Claim], values: dict[int, Any], line_number: LineNumber
) -> None:
    """A CPU worker's figures within its node's total memory (the first one the log gives),
    and its KV memory and non-KV usage together within it too."""
    totals = [values[i] for i, c in enumerate(claims) if c.field == "cpu_node_total_gib"]
    if not totals:
        return
    total = totals[0]
    for index, claim in enumerate(claims):
        if claim.field in PER_NODE_MEMORY and values[index] > total * TOTAL_SLACK + 0.01:
            raise _refuse(
                source,
                claim,
                f"within the node's total memory the log shows, {total:g} GiB",
                line_number,
            )
    first: dict[str, int] = {}
    for index, claim in enumerate(claims):
        first.setdefault(claim.field, index)
    parts = [first[name] for name in NODE_PARTS if name in first]
    held = sum(values[i] for i in parts)
    if len(parts) > 1 and held > total * TOTAL_SLACK + 0.05:
        last = max(parts, key=lambda i: claims[i].offset)
        raise _refuse(
            source,
            claims[last],
            f"such that the KV memory and the non-KV usage ({held:g} GiB) fit the node's "
            f"{total:g} GiB",
            line_number,
        )
