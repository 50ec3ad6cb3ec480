"""One set of rules for every number a user types: flags, `--sweep` axes and sweep files.

RULES is keyed by the flag's name without dashes (`kv-cache-gib`); a sweep file's
underscored names (`kv_cache_gib`) and `--sweep` axes map onto the same entry, so a value
refused as a flag is refused as an axis too. Every rule demands a finite number (no NaN,
no inf), a whole number where counts are meant, and a range; the upper bounds are far
beyond any real deployment and exist to catch typos (1e300) before they reach numpy or an
allocation. Grid products are bounded before a grid is built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

GIB_MAX = 2.0**20  # 1 PiB expressed in GiB/GB: beyond any one machine
TOKENS_MAX = 2**30  # the estimator's MAX_TOKENS


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


def _show(value: Any) -> str:
    """1,073,741,824 for whole numbers, 1e+300 / nan / 0.5 otherwise; repr for non-numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return repr(value)
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
    "max-model-len": _int(2, TOKENS_MAX),
    "block-size": _int(1, 2**16),  # vLLM's largest is 256; 65,536 leaves room without int64 overflow
    "gpu-memory-utilization": _float(0.0, 1.0),
    "kv-cache-gib": _float(0.0, GIB_MAX),
    "reserve-gib": _float(0.0, GIB_MAX, low_open=False),
    "gpu-mem-gib": _float(0.0, GIB_MAX),
    "params-b": _float(0.0, 1e7),
    "kv-budget": _int(1, TOKENS_MAX),
    # bench workload and scheduler
    "rate": _float(0.0, 1e9, low_open=False),  # 0 is fine for burst arrivals; poisson checks > 0 itself
    "cv": _float(0.0, 1e6, low_open=False),  # only gamma arrivals use it, and check it
    "num-requests": _int(1, 10**8),
    "max-num-seqs": _int(1, 2**20),
    "max-num-batched-tokens": _int(1, TOKENS_MAX),
    "swap-space-gib": _float(0.0, GIB_MAX, low_open=False),
    "samples": _int(1, 1024),
    "input-len": _int(1, TOKENS_MAX),  # vLLM-bench random dataset
    "output-len": _int(1, TOKENS_MAX),
    "random-range-ratio": _float(0.0, 1.0, low_open=False),
    "burstiness": _float(0.0, 1e6),
    "max-concurrency": _int(1, 2**20),
    "seed": _int(0, 2**63 - 1),
    "time-scale": _float(0.0, 1e9),
    "pods": _int(1, 2**14),
    "w-hit": _float(0.0, 1e6, low_open=False),
    "w-load": _float(0.0, 1e6, low_open=False),
    "cpu-cache-gb": _float(0.0, GIB_MAX, low_open=False),
    "disk-cache-gb": _float(0.0, GIB_MAX, low_open=False),
    "host-link-gbps": _float(0.0, 1e6),
    "nvme-gbps": _float(0.0, 1e6),
    "layers": _int(1, 2**16),
    "workers": _int(1, 4096),
    # plan
    "max-gpus": _int(1, 2**20),
    "kv-link-gbps": _float(0.0, 1e6),
}

MAX_GRID_POINTS = 2_000_000  # an estimate sweep row costs ~200 B per column: ~7 GB beyond this
MAX_SWEEP_POINTS = 100_000  # bench sweep points: each runs a whole simulation


def rule_for(name: str) -> NumberRule | None:
    """The rule for a flag, a `--sweep` axis or a sweep-file key (dashes or underscores)."""
    return RULES.get(name.strip().lower().replace("_", "-"))


def check_number(name: str, value: Any, label: str | None = None) -> int | float:
    """`value` validated by the rule for `name`; ValueError naming `label` (default --NAME)."""
    rule = rule_for(name)
    label = label or f"--{name.replace('_', '-')}"
    if rule is None:
        raise KeyError(f"no number rule for '{name}'")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{label} must be {rule.describe()}, got {_show(value)}")
    bad_range = value < rule.low or value > rule.high or (rule.low_open and value == rule.low)
    if not math.isfinite(value) or bad_range or (rule.kind is int and not float(value).is_integer()):
        raise ValueError(f"{label} must be {rule.describe()}, got {_show(value)}")
    return int(value) if rule.kind is int else float(value)


def check_numbers(values: dict[str, Any], label: str = "--{name}") -> None:
    """Check every value whose name has a rule (None means "not given" and passes)."""
    for name, value in values.items():
        if value is not None and rule_for(name) is not None:
            check_number(name, value, label.format(name=name.replace("_", "-")))


SIZE_SUFFIXES = {"k": 1024, "m": 1024**2}  # 32k = 32,768 tokens, as `--sweep context=1k..128k` reads it


def parse_count(text: str, name: str, label: str) -> int | float:
    """A count typed as text with an optional k / m suffix (binary: 32k = 32,768), checked by
    the rule for `name`; flags and `--sweep` axes read sizes through this one function."""
    cleaned = str(text).strip().lower().replace(",", "").replace("_", "")
    scale = 1
    if cleaned and cleaned[-1] in SIZE_SUFFIXES:
        scale, cleaned = SIZE_SUFFIXES[cleaned[-1]], cleaned[:-1]
    try:
        value = float(cleaned) * scale
    except ValueError:
        raise ValueError(f"{label}: '{text}' is not a number; write e.g. 32768 or 32k") from None
    return check_number(name, value, label)


def parse_optional_count(text: str | None, name: str) -> int | None:
    """A flag's count (`--context 32k`), or None when the flag was not given."""
    return None if text is None else int(parse_count(text, name, f"--{name}"))


def check_grid_size(sizes: list[int], limit: int, label: str, fix: str) -> int:
    """The product of axis sizes, refused above `limit` before anything is allocated."""
    total = math.prod(sizes)
    if total > limit:
        raise ValueError(f"{label}: the grid has {total:,} points, more than {limit:,}; {fix}")
    return total
