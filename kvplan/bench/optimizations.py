"""The one parser of optimization names (`paged`, `prefix+fp8`, `h2o+int4`, ...): used by
`kvplan bench` in both modes, by sweeps, and by the quality table."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from kvplan.core.kv import ALLOCATORS
from kvplan.core.policies.registry import policy_names
from kvplan.spec import parse_kv_format
from kvplan.spec.comma_list import comma_list
from kvplan.spec.kv_format import KV_FORMAT_NAMES
from kvplan.spec.setting_error import SettingError

if TYPE_CHECKING:  # the engine's setup loads when a name is parsed, not for the names' help text
    from kvplan.core.engine_factory import Optimization

DEFAULT_OPTIMIZATIONS = (
    "contiguous-max",
    "contiguous-pow2",
    "contiguous-oracle",
    "paged",
    "prefix",
)
# the KV formats an optimization may name: the KV-format parser's own list, less the run's "auto"
KV_FORMAT_PARTS = tuple(name for name in KV_FORMAT_NAMES if name != "auto")
OFFLOAD_PARTS = {"offload-cpu": ("cpu",), "offload-disk": ("cpu", "disk")}
FULL = (
    "full"  # the unoptimized cache: no eviction, the run's KV format (the quality table's baseline)
)


def names_help() -> str:
    """Every valid optimization name, grouped, for `kvplan bench --help` (brackets escaped for
    rich)."""
    return (
        f"allocators: {', '.join(ALLOCATORS)}; prefix; offload: {', '.join(OFFLOAD_PARTS)}; "
        f"KV formats: {', '.join(KV_FORMAT_PARTS)}; "
        f"eviction (with --kv-budget): {', '.join(policy_names())}"
    )


def _names_kv_format(part: str) -> bool:
    """Whether a part is a KV format: the one KV-format parser decides (every name --kv-dtype
    takes, int2 and float16 included), except "auto", which is the run's own format."""
    if part == "auto":
        return False
    try:
        parse_kv_format(part)
    except ValueError:
        return False
    return True


def parse_optimization(text: str) -> Optimization:
    from kvplan.core.engine_factory import Optimization

    parts = [p.strip().lower() for p in text.split("+") if p.strip()]
    if not parts:
        raise ValueError("empty optimization name; use e.g. paged, contiguous-max or paged+fp8")
    allocator, kv_dtype, prefix, policy = None, None, False, None
    offload: tuple[str, ...] = ()
    for part in parts:
        if part == FULL:
            continue
        if part == "prefix":
            prefix = True
        elif part in OFFLOAD_PARTS:
            prefix = True  # the tiers hold prefix-cache blocks
            offload = OFFLOAD_PARTS[part]
        elif part in policy_names():
            policy = part
        elif part in ALLOCATORS:
            if allocator:
                raise ValueError(
                    f"'{text}' names two allocators; compose one allocator with other parts"
                )
            allocator = part
        elif _names_kv_format(part):
            kv_dtype = part
        else:
            known = ", ".join(
                (
                    *ALLOCATORS,
                    "prefix",
                    *OFFLOAD_PARTS,
                    *policy_names(),
                    *KV_FORMAT_PARTS,
                    FULL,
                )
            )
            raise ValueError(f"unknown optimization '{part}' in '{text}'; known: {known}")
    if prefix and allocator not in (None, "paged"):
        raise ValueError(f"'{text}': prefix caching needs the paged allocator")
    if policy and allocator not in (None, "paged"):
        raise ValueError(f"'{text}': eviction policies need the paged allocator")
    return Optimization("+".join(parts), allocator or "paged", kv_dtype, prefix, policy, offload)


def optimization_names(text: str) -> list[str]:
    """The names of a comma-separated list (--optimizations), the baseline first; an empty
    list or entry is refused (kvplan.spec.comma_list)."""
    return comma_list(
        text, "optimizations", "optimization names separated by commas, e.g. paged,prefix"
    )


def parse_optimizations(names: str | list[str]) -> list[Optimization]:
    """A comma-separated list (or a list) of names, each parsed; fails on the first bad one,
    and on two names for the same optimization (`paged,paged`, `paged+fp8,fp8+paged`): each
    would run the identical engine and share one row name in results and reports."""
    items = optimization_names(names) if isinstance(names, str) else names
    parsed: list[Optimization] = []
    for optimization in (parse_optimization(name) for name in (n.strip() for n in items) if name):
        twin = next((seen for seen in parsed if _same(seen, optimization)), None)
        if twin is not None:
            raise SettingError(
                "{optimizations} names '{first}' and '{second}', the same run twice; names "
                "must be distinct: list each optimization once",
                first=twin.name,
                second=optimization.name,
            )
        parsed.append(optimization)
    return parsed


def _same(first: Optimization, second: Optimization) -> bool:
    """The same engine: every part equal, whatever order or spelling named them (fp8 and
    fp8-e4m3 are one KV format)."""

    def parts(optimization: Optimization) -> Optimization:
        kv_format = optimization.kv_dtype and parse_kv_format(optimization.kv_dtype).name
        return dataclasses.replace(optimization, name="", kv_dtype=kv_format)

    return parts(first) == parts(second)
