"""One set of rules for every number a user types: flags, `--sweep` axes and sweep files.

RULES is keyed by the setting's name (`kv_cache_gib`); a flag's or a `--sweep` axis's
dashed name (`kv-cache-gib`) maps onto the same entry, so a value refused as a flag is
refused as an axis or a sweep-file key too. A refused value is a SettingError naming the
setting (the command line words it as the flag), or a ValueError after the caller's label
(a sweep file's table and key). Every rule demands a finite number (no NaN,
no inf), a whole number where counts are meant, and a range; the upper bounds are far
beyond any real deployment and exist to catch typos (1e300) before they reach numpy or an
allocation. Grid products are bounded before a grid is built.

The same rules bound what a file a user gives may claim: a server's startup log
(spec/log_claims.py), a measured benchmark run (fit/run_checks.py) and a calibration file
(sim/calibration_file.py); those readers word a refusal after the file and line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kvplan.spec.setting_error import SettingError

GIB_MAX = 2.0**20  # 1 PiB expressed in GiB/GB: beyond any one machine
TOKENS_MAX = 2**30  # the estimator's MAX_TOKENS
PREFIXES_MAX = 2**20  # shared prompts, documents or templates a synthetic workload draws
GPU_GIB_MAX = 2.0**12  # 4 TiB in GiB/GB: beyond any one GPU (the largest hold 288 GB)


@dataclass(frozen=True)
class NumberRule:
    """A finite int or float in [low, high] (or (low, high] when low_open)."""

    kind: type
    low: float
    high: float
    low_open: bool = False

    def describe(self) -> str:
        what = "a whole number" if self.kind is int else "a finite number"
        opening = f"> {_show(self.low)}" if self.low_open else f">= {_show(self.low)}"
        return f"{what} {opening} and <= {_show(self.high)}"

    def admits(self, value: Any) -> bool:
        """Whether `value` keeps the rule. The range is compared first, so an int of any size
        (JSON reads 400 digits as one) is refused without a conversion to float."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if value < self.low or value > self.high or (self.low_open and value == self.low):
            return False
        return self.kind is not int or float(value).is_integer()

    def convert(self, value: int | float) -> int | float:
        """An admitted value as the rule's kind: a whole float (1e3) as an int."""
        return int(value) if self.kind is int else float(value)


SHOWN_CHARS = 60  # a refused text value is quoted up to this length


def _show(value: Any) -> str:
    """1,073,741,824 for whole numbers, 1e+300 / nan / 0.5 otherwise, "a 400-digit number"
    for ints no float holds; repr for non-numbers, shortened."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        text = repr(value)
        return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"
    if isinstance(value, int) and value.bit_length() > 1000:
        try:
            return f"a {len(str(abs(value))):,}-digit number"
        except ValueError:  # beyond Python's int-to-text limit
            return "a number of thousands of digits"
    if math.isfinite(value) and float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:g}"


def _int(low: int, high: int) -> NumberRule:
    return NumberRule(int, low, high)


def _float(low: float, high: float, low_open: bool = True) -> NumberRule:
    return NumberRule(float, low, high, low_open)


RULES: dict[str, NumberRule] = {
    # estimate and bench sizing
    "tp": _int(1, 1024),
    "batch": _int(1, TOKENS_MAX),
    "context": _int(1, TOKENS_MAX),
    "max_model_len": _int(2, TOKENS_MAX),
    "block_size": _int(
        1, 2**16
    ),  # vLLM's largest is 256; 65,536 leaves room without int64 overflow
    "gpu_memory_utilization": _float(0.0, 1.0),
    "kv_cache_gib": _float(0.0, GIB_MAX),
    "num_gpu_blocks_override": _int(1, 2**31),
    "reserve_gib": _float(0.0, GIB_MAX, low_open=False),
    "gpu_mem_gib": _float(0.0, GIB_MAX),
    # kv_cache_gib and gpu_mem_gib as `kvplan estimate --device cpu` names them
    "kv_cache_space": _float(0.0, GIB_MAX),
    "cpu_memory_gib": _float(0.0, GIB_MAX),
    "params_b": _float(0.0, 1e7),
    "kv_budget": _int(1, TOKENS_MAX),
    # bench workload and scheduler
    "rate": _float(
        0.0, 1e9, low_open=False
    ),  # 0 is fine for burst arrivals; poisson checks > 0 itself
    "cv": _float(0.0, 1e6, low_open=False),  # only gamma arrivals use it, and check it
    "num_requests": _int(1, 10**8),
    "max_num_seqs": _int(1, 2**20),
    "max_num_batched_tokens": _int(1, TOKENS_MAX),
    "num_speculative_tokens": _int(
        0, 1024
    ),  # a drafter's tokens per step (vLLM --speculative-config)
    "swap_space_gib": _float(0.0, GIB_MAX, low_open=False),
    "samples": _int(1, 1024),
    "input_len": _int(1, TOKENS_MAX),  # vLLM-bench random dataset
    "output_len": _int(1, TOKENS_MAX),
    "random_range_ratio": _float(0.0, 1.0, low_open=False),
    "burstiness": _float(0.0, 1e6),
    "max_concurrency": _int(1, 2**20),
    "seed": _int(0, 2**63 - 1),
    "time_scale": _float(0.0, 1e9),
    "pods": _int(1, 2**14),
    "w_hit": _float(0.0, 1e6, low_open=False),
    "w_load": _float(0.0, 1e6, low_open=False),
    "cpu_cache_gb": _float(0.0, GIB_MAX, low_open=False),
    "disk_cache_gb": _float(0.0, GIB_MAX, low_open=False),
    "host_link_gbps": _float(0.0, 1e6),
    "nvme_gbps": _float(0.0, 1e6),
    "layers": _int(1, 2**16),
    "workers": _int(1, 4096),
    # plan
    "max_gpus": _int(1, 2**20),
    "kv_link_gbps": _float(0.0, 1e6),
    # workload generator settings (--workload-param): counts of shared prefixes are stored
    # once each, so their bounds keep a corpus in memory (kvplan/workload/catalog.py)
    "system_prompt_len": _int(1, TOKENS_MAX),
    "num_system_prompts": _int(1, PREFIXES_MAX),
    "num_documents": _int(1, PREFIXES_MAX),
    "doc_len": _int(1, TOKENS_MAX),
    "docs_per_request": _int(1, 1024),
    "zipf_s": _float(0.0, 100.0, low_open=False),
    "turns_per_session": _float(1.0, 1e6, low_open=False),
    "think_time": _float(0.0, 1e9, low_open=False),
    "num_templates": _int(1, PREFIXES_MAX),
    "template_len": _int(1, TOKENS_MAX),
    "vocab_size": _int(4, 2**21),  # ids 0..2 are special; the largest tokenizers hold ~262k
    # what a server's startup log may claim (per GPU where it is memory)
    "gpu_figure_gib": _float(0.0, GPU_GIB_MAX, low_open=False),
    # the KV budget is what is left: negative where the weights did not fit and the server stopped
    "kv_budget_gib": _float(-GPU_GIB_MAX, GPU_GIB_MAX, low_open=False),
    "gpu_total_gib": _float(0.0, GPU_GIB_MAX),
    "kv_needed_gib": _float(0.0, GIB_MAX, low_open=False),  # what a refused length would need
    "token_count": _int(0, TOKENS_MAX),  # KV tokens or blocks: 0 when no memory was left
    "concurrency_ratio": _float(0.0, TOKENS_MAX, low_open=False),
    # a CPU server's figures are a NUMA node's memory, which can pass any one GPU's
    "node_figure_gib": _float(0.0, GIB_MAX, low_open=False),
    "node_total_gib": _float(0.0, GIB_MAX),
    "numa_node": _int(0, 2**16),
    "pp": _int(1, 1024),
    "dp": _int(1, 2**16),
    # what a measured benchmark run may claim; each request is replayed, several times a fit
    # (about 2 ms a request), and vllm bench serve runs hold hundreds to thousands
    "measured_requests": _int(1, 10**5),
    "duration_s": _float(0.0, 1e9),
    "token_total": _int(0, 10**14),
    "throughput": _float(0.0, 1e12),  # tokens or requests per second
    "latency_ms": _float(0.0, 1e12, low_open=False),
    "num_scheduler_steps": _int(1, 1024),  # vLLM V0's multi-step scheduling
    "offered_rate": _float(0.0, 1e9),  # requests/s a run offered; inf (all at once) is read apart
    # a calibration file's engine overhead (the fit searches well inside these)
    "base_s": _float(0.0, 1.0, low_open=False),  # per step; real engines pay milliseconds
    "per_seq_s": _float(0.0, 0.1, low_open=False),
    "gpu_factor": _float(0.0, 10.0),
    "fit_error": _float(0.0, 1e6, low_open=False),  # a held-out median error, as a fraction
    "fit_runs": _int(1, 10**6),
}

MAX_GRID_POINTS = 2_000_000  # an estimate sweep row costs ~200 B per column: ~7 GB beyond this
MAX_SWEEP_POINTS = 100_000  # bench sweep points: each runs a whole simulation


def setting_name(name: str) -> str:
    """A flag's, axis's or sweep-file key's name as the setting's: `kv-cache-gib` ->
    `kv_cache_gib`."""
    return name.strip().lower().replace("-", "_")


def rule_for(name: str) -> NumberRule | None:
    """The rule for a setting, a flag, a `--sweep` axis or a sweep-file key (dashes or
    underscores)."""
    return RULES.get(setting_name(name))


def refused(
    name: str,
    problem: str,
    label: str | None = None,
    within: str | None = None,
    separator: str = " ",
) -> ValueError:
    """The error for a refused number: after `label` when given (plain text: a sweep file's
    key), else a SettingError naming the setting, or naming `within` and the value's part of
    it (an axis of `--sweep`)."""
    if label is not None:
        return ValueError(f"{label}{separator}{problem}")
    if within is not None:
        return SettingError(
            f"{{{within}}} {{axis}}{separator}{{problem}}", axis=name, problem=problem
        )
    return SettingError(f"{{{setting_name(name)}}}{separator}{{problem}}", problem=problem)


def check_number(
    name: str, value: Any, label: str | None = None, within: str | None = None
) -> int | float:
    """`value` validated by the rule for `name`; refused as `refused` words it."""
    rule = rule_for(name)
    if rule is None:
        raise KeyError(f"no number rule for '{name}'")
    if not rule.admits(value):
        raise refused(name, f"must be {rule.describe()}, got {_show(value)}", label, within)
    return rule.convert(value)


def check_numbers(values: dict[str, Any]) -> None:
    """Check every value whose setting has a rule (None means "not given" and passes)."""
    for name, value in values.items():
        if value is not None and rule_for(name) is not None:
            check_number(name, value)


SIZE_SUFFIXES = {
    "k": 1024,
    "m": 1024**2,
}  # 32k = 32,768 tokens, as `--sweep context=1k..128k` reads it


def parse_count(text: str, name: str, within: str | None = None) -> int | float:
    """A count typed as text with an optional k / m suffix (binary: 32k = 32,768), checked by
    the rule for `name`; flags and `--sweep` axes (`within="sweep"`) read sizes through this
    one function."""
    cleaned = str(text).strip().lower().replace(",", "").replace("_", "")
    scale = 1
    if cleaned and cleaned[-1] in SIZE_SUFFIXES:
        scale, cleaned = SIZE_SUFFIXES[cleaned[-1]], cleaned[:-1]
    try:
        value = float(cleaned) * scale
    except ValueError:
        raise refused(
            name,
            f"'{text}' is not a number; write e.g. 32768 or 32k",
            within=within,
            separator=": ",
        ) from None
    return check_number(name, value, within=within)


def parse_optional_count(text: str | None, name: str) -> int | None:
    """A flag's count (`--context 32k`), or None when the flag was not given."""
    return None if text is None else int(parse_count(text, name))


def check_grid_size(
    sizes: list[int], limit: int, label: str, fix: str, within: str | None = None
) -> int:
    """The product of axis sizes, refused above `limit` before anything is allocated; the
    error begins with `label`, after the setting `within` names when given."""
    total = math.prod(sizes)
    if total > limit:
        problem = f"{label}: the grid has {total:,} points, more than {limit:,}; {fix}"
        if within is not None:
            raise SettingError(f"{{{within}}}{{problem}}", problem=problem)
        raise ValueError(problem)
    return total
