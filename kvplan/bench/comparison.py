"""What the `kvplan bench` table shows: rows of registered metrics, grouped by the feature
each is about, a row shown only when a run exercised its feature.

A row names a metric of kvplan.core.metric_registry, which gives its label, unit and
section (the metric's feature); the rows here only choose which metrics the table shows,
in what order, when, and the notes under it. `comparison()` turns result records into plain
strings, so the CLI only lays them out. To show a new metric, register it and add its Row.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kvplan.bench.mode import Mode, record_mode
from kvplan.core.metric_registry import Feature, Metric, Shape, Unit, metric
from kvplan.results import ResultRecord
from kvplan.workload.kinds import rate_unit

Metrics = dict[str, Any]
_NUMBER = re.compile(r"\d+")
PERCENTILES = ("p50", "p90", "p99")


class Shown(Enum):
    ALWAYS = "always"
    REPORTED = "when some run reports the metric"
    NONZERO = "when some run's figure is not zero"


@dataclass(frozen=True)
class Row:
    metric: str  # a registered metric: its label, unit and feature (the row's section)
    shown: Shown = Shown.ALWAYS
    hint: str = ""  # a short why, shown under the table after the row's label when the row is
    pair: str = ""  # a second metric in the same cell, "first / second" (0 when it is missing)
    ratio: bool = False  # the figure over the baseline run's, named by the metric's ratio_label
    section: Feature | None = None  # a derived row's section, where not its metric's feature

    @property
    def entry(self) -> Metric:
        return metric(self.metric)

    @property
    def label(self) -> str:
        entry = self.entry
        if self.ratio:
            return entry.ratio_label
        return _pair_label(entry.label, metric(self.pair).label) if self.pair else entry.label

    @property
    def heading(self) -> str:
        return (self.section or self.entry.feature).value

    def is_shown(self, runs: list[Metrics]) -> bool:
        if self.shown is Shown.REPORTED:
            return any(m.get(self.metric) is not None for m in runs)
        if self.shown is Shown.NONZERO:
            return any(m.get(self.metric) for m in runs)
        return True


def _pair_label(first: str, second: str) -> str:
    """Two labels in one, the words they start with said once: 'CPU bytes in / out'."""
    words, others = first.split(), second.split()
    shared = 0
    while shared < min(len(words), len(others)) - 1 and words[shared] == others[shared]:
        shared += 1
    return " ".join(words) + " / " + " ".join(others[shared:])


REPORTED, NONZERO = Shown.REPORTED, Shown.NONZERO
ROWS: tuple[Row, ...] = (
    Row("token_states_share"),
    Row("reservation_share"),
    Row("internal_fragmentation_share"),
    Row("external_fragmentation_share"),
    Row("cached_share", NONZERO),
    Row("free_share"),
    Row("waste"),
    Row("kv_cache_usage_mean"),
    Row("prefix_hit_rate", REPORTED),
    Row("prefix_hit_rate_upper_bound", REPORTED, "the hit rate of a cache that never evicts"),
    Row("prefill_tokens_saved", REPORTED),
    Row("cached_blocks_evicted", REPORTED),
    Row("pod_prefix_hit_rate", REPORTED),
    Row("pod_requests", REPORTED),
    Row("load_imbalance", REPORTED, "max / mean requests per pod (1.00 = even)"),
    Row("cpu_hit_rate", REPORTED),
    Row("cpu_bytes_in", REPORTED, pair="cpu_bytes_out"),
    Row("disk_hit_rate", REPORTED),
    Row("disk_bytes_in", REPORTED, pair="disk_bytes_out"),
    Row("offload_reloads", REPORTED, pair="offload_recomputes"),
    Row("total_hit_rate", REPORTED),
    Row("tokens_dropped", REPORTED),
    Row(
        "eviction_copied_slots",
        REPORTED,
        "K/V moved inside the pool by eviction (holes refilled; streaming: sinks written into "
        "each window), in slots of every layer; simulated runs charge compaction copies as time",
    ),
    Row(
        "eviction_hole_blocks_ratio",
        REPORTED,
        "blocks held with holes left in place, per compacted block (measured on the run)",
    ),
    Row(
        "layer_budgets",
        REPORTED,
        "entropy-budget's split of layers x --kv-budget by attention entropy (real mode: probed "
        "on the model's own 200-token greedy text from BOS, never the requests); one block "
        "table serves every layer, so each sequence holds the largest layer budget in every "
        "layer and the smaller layers' unused tail slots are internal fragmentation (a "
        "simplification: per-layer block tables, vLLM v1's KV-cache groups, would hold each "
        "layer's own); simulated runs without a split charge every layer --kv-budget",
    ),
    Row(
        "evicted_token_share",
        NONZERO,
        "of the running sequences' tokens, the share evicted (time-averaged)",
    ),
    Row("shared_token_share", NONZERO),
    Row("parallel_forks", REPORTED, pair="cow_copies"),
    Row("running_mean"),
    Row("running_peak"),
    Row("waiting_mean"),
    Row("preemptions"),
    Row("recomputed_tokens"),
    Row("swapped_out_slots", NONZERO),
    Row(
        "served_output_tokens_per_s",
        hint="sampled per second over the steady window: the arrival window's second half "
        "(a burst: its whole drain); the makespan rows include the drain after arrivals stop, "
        "as vllm bench serve's figures do",
    ),
    Row("served_requests_per_s"),
    Row("sustainable_requests_per_s", Shown.REPORTED),
    Row("served_output_tokens_per_s", ratio=True),
    Row(
        "running_mean",
        hint="mean running requests against the baseline's",
        ratio=True,
        section=Feature.THROUGHPUT,
    ),
    Row("output_tokens_per_s"),
    Row("total_tokens_per_s"),
    Row("requests_per_s"),
    *(Row(f"{latency}_{p}") for latency in ("ttft_s", "tpot_s", "e2e_s") for p in PERCENTILES),
    Row("requests_finished", pair="requests_rejected"),
)


@dataclass(frozen=True)
class ComparisonRow:
    section: str
    label: str
    cells: tuple[str, ...]  # one per optimization


@dataclass(frozen=True)
class Comparison:
    title: str
    names: tuple[str, ...]  # optimization (or optimization@router) per column, the baseline first
    rows: tuple[ComparisonRow, ...]
    notes: tuple[str, ...]  # rejection reasons, what the bound and ratios mean, modeled vs measured


def comparison(records: list[ResultRecord]) -> Comparison:
    """The bench table of these records (the first one is the baseline)."""
    runs = [record.metrics for record in records]
    base = runs[0]
    rows: list[ComparisonRow] = []
    hints: list[str] = []
    for row in ROWS:
        if not row.is_shown(runs):
            continue
        rows.append(ComparisonRow(row.heading, row.label, tuple(_cell(row, m, base) for m in runs)))
        rows = [r for r in rows if any(cell != "-" for cell in r.cells)]  # a metric no run reports
        if row.hint:
            hints.append(f"{row.label}: {row.hint}")
    names = tuple(r.optimization for r in records)
    base_note = f'baseline: {names[0]} (the "vs base" rows divide by its figures)'
    return Comparison(
        _title(records[0]),
        names,
        tuple(rows),
        (
            *_rejections(records),
            base_note,
            *hints,
            *_unsplit_entropy(records),
            _time_note(records[0]),
            _scheduling_note(records[0]),
        ),
    )


def _title(record: ResultRecord) -> str:
    params, metrics = record.params, record.metrics
    if record_mode(record.mode) is Mode.REAL:
        where = f"real mode on {metrics.get('device', '?')}"
    else:
        where = f"{params['tp']} x {params['gpu']}"
        if (params.get("pods") or 1) > 1:
            where = f"{params['pods']} pods of {where}"
    joint = "in" if where.startswith("real mode") else "on"
    return (
        f"{params['model']} {joint} {where}, {params['num_requests']:,} requests "
        f"({_load(params.get('workload') or {})}), KV {params['kv_format']}, "
        f"max_model_len {params['max_model_len']:,}"
    )


def _load(workload: dict[str, Any]) -> str:
    """The stream and its rate in the unit the workload reads it in: 'chat at 4 sessions/s'."""
    kind = workload.get("kind")
    rate = workload.get("rate")
    if "rate" not in workload:  # a trace keeps its own arrival times (its info has no rate)
        return str(kind)
    if rate is None or rate == math.inf or workload.get("arrival") == "burst":
        return f"{kind}, all at t = 0"  # results files write an infinite rate as null
    return f"{kind} at {rate:g} {rate_unit(str(kind))}/s"


def _splits_layers(optimization: str) -> bool:
    from kvplan.bench.optimizations import parse_optimization
    from kvplan.core.policies.registry import lookup

    try:  # a cluster's records name their router after "@"
        policy = parse_optimization(optimization.split("@")[0]).policy
    except ValueError:
        return False
    return policy is not None and lookup(policy).splits_layers


def _unsplit_entropy(records: list[ResultRecord]) -> list[str]:
    """A simulated entropy-budget run has no weights to probe its layer split (named here)."""
    names = [
        r.optimization
        for r in records
        if _splits_layers(r.optimization)
        and record_mode(r.mode) is not Mode.REAL
        and "layer_budgets" not in r.metrics
    ]
    if not names:
        return []
    return [
        f"{', '.join(names)}: simulated without weights to probe the per-layer split, so every "
        "layer is "
        "charged --kv-budget, as h2o is (a named simplification); real serving holds its split's "
        "largest "
        "layer budget in every layer (1.45x h2o's slots on stories260K at budget 32)"
    ]


def _rejections(records: list[ResultRecord]) -> list[str]:
    notes = []
    for record in records:
        count = record.metrics.get("requests_rejected") or 0
        if count:
            reasons = (
                "; ".join(summarize_reasons(record.metrics.get("reject_reasons") or []))
                or "no reason recorded"
            )
            notes.append(f"{record.optimization}: {count:,} rejected: {reasons}")
    return notes


def summarize_reasons(reasons: list[str]) -> list[str]:
    """Reasons that differ only in their numbers as one line with each number's range:
    'needs 2480..4096 KV slots, the whole pool admits 2432'."""
    groups: dict[str, list[list[int]]] = {}
    for reason in reasons:
        groups.setdefault(_NUMBER.sub("#", reason), []).append(
            [int(n) for n in _NUMBER.findall(reason)]
        )
    lines = []
    for template, numbers in groups.items():
        spans = [
            f"{min(column)}..{max(column)}" if min(column) != max(column) else str(column[0])
            for column in zip(*numbers)
        ]
        pieces = template.split("#")
        lines.append(
            "".join(piece + (spans[i] if i < len(spans) else "") for i, piece in enumerate(pieces))
        )
    return lines


def _scheduling_note(record: ResultRecord) -> str:
    from kvplan.engines.scheduling_rules import KVPLAN_RULES, scheduling_note
    from kvplan.engines.serving_engine import serving_engine
    from kvplan.engines.versions import parse_version

    params = record.params
    if record_mode(record.mode) is Mode.REAL:
        return "real mode schedules by kvplan's own rules (it serves on this machine)"
    engine = serving_engine(params.get("engine"), params.get("engine_version"))
    version = parse_version(params.get("engine_version"))
    own = params.get("scheduler_rules") == KVPLAN_RULES.described()
    rules = KVPLAN_RULES if own else engine.scheduling_rules(version)
    return scheduling_note(engine.label, version, rules)


def _time_note(record: ResultRecord) -> str:
    if record_mode(record.mode) is Mode.REAL:
        return "times are measured wall-clock"
    source = record.metrics.get("step_model")  # set when the operator step model timed the run
    if not source:
        return (
            "times are modeled from the GPU roofline at datasheet peak (a lower bound), "
            "not measured"
        )
    band = record.metrics.get("time_error_band")
    return f"times are modeled as the sum of each step's operators ({source}), not measured" + (
        f"; {band_text(band)}" if band else ""
    )


BAND_FIGURES = (
    ("output_throughput", "output tok/s"),
    ("mean_tpot_ms", "TPOT"),
    ("mean_ttft_ms", "TTFT"),
    ("latency_avg_s", "batch latency"),
)


def band_text(band: dict) -> str:
    """A modeled run's error band in words: the held-out median error of each time figure."""
    where = (
        f"{band.get('kind', '')} models on {band.get('gpu_family')} under {band.get('engine')}"
        if band.get("gpu_family")
        else "its runs"
    )
    parts = [
        f"{label} ±{100 * band[f'{name}_error']:.0f}% ({int(band[f'{name}_runs'])} runs)"
        for name, label in BAND_FIGURES
        if f"{name}_error" in band
    ]
    if band.get("unvalidated"):
        if not parts:
            return f"unvalidated: no measured run on {where}"
        return (
            f"unvalidated: no measured run on {where}; on the kind's other GPU families "
            f"({band.get('basis')}): " + ", ".join(parts)
        )
    return f"held-out error on {where} ({band.get('basis')}): " + ", ".join(parts)


def _cell(row: Row, metrics: Metrics, base: Metrics) -> str:
    value = metrics.get(row.metric)
    if row.ratio:
        reference = base.get(row.metric)
        return f"{value / reference:.2f}x" if value is not None and reference else "-"
    if value is None:
        return "-"
    if row.pair:
        second = _figure(metric(row.pair), metrics.get(row.pair) or 0)
        return f"{_figure(row.entry, value)} / {second}"
    return _figure(row.entry, value)


def _figure(entry: Metric, value: Any) -> str:
    """A value as the terminal shows its unit; lists (per pod, per layer) item by item."""
    if entry.shape in (Shape.PER_POD, Shape.PER_LAYER):  # a pod without the figure shows "-"
        item_text = LIST_ITEM.get(entry.unit, CELL[entry.unit])
        return " ".join("-" if item is None else item_text(item) for item in value)
    return CELL[entry.unit](value)


def _bytes(value: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def _seconds(value: float) -> str:
    return f"{value * 1e3:.0f}ms" if value < 1 else f"{value:.1f}s"


# How the terminal shows each unit; a list (per pod, per layer) item by item, shorter.
CELL: dict[Unit, Callable[[Any], str]] = {
    Unit.SHARE: lambda v: f"{100 * v:.1f}%",
    Unit.COUNT: lambda v: f"{v:,}",
    Unit.TOKENS_PER_S: lambda v: f"{v:,.0f}",
    Unit.REQUESTS_PER_S: lambda v: f"{v:,.2f}",
    Unit.NUMBER: lambda v: f"{v:,.2f}",
    Unit.SECONDS: _seconds,
    Unit.BYTES: _bytes,
}
LIST_ITEM: dict[Unit, Callable[[Any], str]] = {
    Unit.SHARE: lambda v: f"{100 * v:.0f}%",
    Unit.COUNT: lambda v: f"{v:,}",
}
