"""The one registry of a run's summary metrics: every field a bench record's `metrics` may
hold, with its labels, unit, direction, feature, how a cluster of pods reports it and its
Prometheus name where it has one.

The bench table, the report's tables and charts, the CSV and Prometheus exports and the
cluster's aggregation read it; none keeps its own list of labels or formats. It is read when
a run is summarized or shown, never per engine step. Pure data: imports nothing of kvplan.

Entries are in the order a cluster run records its figures. A field whose name holds a
`{placeholder}` (one per offload tier, per measured copy direction, per `vllm bench serve`
figure) is a pattern: `metric("cpu_hit_rate")` returns it filled in. Definitions in words
are docs/metrics.md's; adding a metric is docs/metrics.md's last section.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from enum import Enum
from string import Formatter


class Unit(Enum):
    """What a figure counts; each surface (bench table, report page) formats a unit one way."""

    SHARE = "share"  # a fraction of a whole (0..1), shown as a percentage
    COUNT = "count"  # tokens, slots, blocks, requests or events: a whole number
    TOKENS_PER_S = "tokens/s"  # shown as a whole number
    REQUESTS_PER_S = "requests/s"
    NUMBER = "number"  # a mean or a ratio of two figures
    SECONDS = "s"
    BYTES = "bytes"
    GB_PER_S = "GB/s"
    TEXT = "text"  # a name, reasons, a nested record
    FLAG = "yes/no"  # a JSON true or false


class Shape(Enum):
    SCALAR = "one value"
    PER_POD = "a list, one value per pod in pod order"
    PER_LAYER = "a list, one value per model layer"
    LIST = "a list of texts"
    RECORD = "a nested record"


class Direction(Enum):
    HIGHER = "higher is better"
    LOWER = "lower is better"
    NEITHER = "neither: it describes the run, the workload or the load"


class Feature(Enum):
    """What a metric is about; the value is how the bench table heads the feature's rows."""

    ROUTING = "routing"
    REQUESTS = "requests"
    PREFIX_CACHE = "prefix caching"
    THROUGHPUT = "throughput"
    SCHEDULING = "scheduling"  # batch sizes and preemption
    POOL_USE = "KV use"
    LATENCY = "latency"
    POOL_SPLIT = "KV pool split (adds to 100%)"
    SHARING = "sharing"  # blocks held once for several sequences: parallel samples' forks
    EVICTION = "eviction policy"
    OFFLOAD = "offload tiers"
    SIZING = "sizing"
    WORKLOAD = "workload"
    STEP_MODEL = "step model"
    SERVING_CLIENT = "vllm bench serve"
    REAL_MODE = "real mode"


class ClusterRule(Enum):
    """How a cluster of pods (kvplan.sim.cluster) reports a metric from its pods' figures."""

    SUM = "the pods' figures added (a missing one counts 0)"
    POD_MEAN = "the mean of the pods' figures, each pod weighted equally"
    PER_POD = "a list of one pod figure (per_pod_of) per pod, in pod order"
    CLUSTER = "computed over the whole cluster: all pods' requests, summed counters, routing"
    POD_ONLY = "a pod's figure a cluster record leaves out"
    RUN = "added by the bench once per run, after the engines ran (settings, workload, factory)"


# The rules under which a cluster record carries the metric.
REPORTED_BY_CLUSTER = (
    ClusterRule.SUM,
    ClusterRule.POD_MEAN,
    ClusterRule.PER_POD,
    ClusterRule.CLUSTER,
)


@dataclass(frozen=True)
class Prometheus:
    """The metric's name in the Prometheus text exposition (vLLM's where vLLM has one)."""

    name: str
    counter: bool = False  # a running total (exposed with `_total`); a gauge otherwise


@dataclass(frozen=True)
class Metric:
    name: str  # the field in a run's summary and a bench record's `metrics`
    label: str  # the bench table's row label
    unit: Unit
    direction: Direction
    feature: Feature
    cluster: ClusterRule
    description: str  # one sentence; the Prometheus help text where it is exported
    column: str = ""  # a shorter label for report tables, comparison.csv and chart legends
    shape: Shape = Shape.SCALAR
    per_pod_of: str = ""  # PER_POD: the pod figure listed
    ratio_label: str = ""  # the name of its ratio to the baseline run, where one is shown
    prometheus: Prometheus | None = None

    @property
    def column_label(self) -> str:
        return self.column or self.label

    @property
    def is_pattern(self) -> bool:
        return "{" in self.name


@dataclass(frozen=True)
class Placeholder:
    """What a pattern's {placeholder} stands for: the values it matches, and their labels."""

    pattern: str  # a regular expression
    labels: dict[str, str] = field(default_factory=dict)  # values the tables name otherwise

    def label(self, value: str) -> str:
        return self.labels.get(value, value)


# Offload tiers by name (kvplan.core.tiers), measured copy directions (real mode's tier
# storage, "device_to_cpu"), and the figures `vllm bench serve` saves under its own names.
TIER_LABELS = {"cpu": "CPU", "disk": "disk"}
PLACEHOLDERS = {
    "tier": Placeholder("|".join(TIER_LABELS), TIER_LABELS),
    "direction": Placeholder("[a-z]+_to_[a-z]+"),
    "figure": Placeholder("[a-z0-9_]+"),
}


def _latency(
    prefix: str, label: str, what: str, exported: tuple[str, ...] = (), ratios: tuple[str, ...] = ()
) -> tuple[Metric, ...]:
    """Mean and percentiles over requests (kvplan.core.metrics.percentiles), in seconds."""
    words = {"mean": "Mean", "p50": "Median", "p90": "p90", "p99": "p99"}
    stem = "kvplan_" + what.replace(" ", "_") + "_seconds"
    return tuple(
        Metric(
            f"{prefix}_{stat}",
            f"{label} {stat}",
            Unit.SECONDS,
            Direction.LOWER,
            Feature.LATENCY,
            ClusterRule.CLUSTER,
            f"{word} {what}.",
            column=f"{label} {stat} (s)",
            ratio_label=f"{label} {stat} vs base" if stat in ratios else "",
            prometheus=Prometheus(f"{stem}_{stat}") if stat in exported else None,
        )
        for stat, word in words.items()
    )


# Short names keep each entry below to two or three lines; the table stays in rows (the
# formatter would give every field of every entry its own line).
U, D, F, C = Unit, Direction, Feature, ClusterRule
P = Prometheus

# fmt: off
METRICS: tuple[Metric, ...] = (
    Metric("pods", "pods", U.COUNT, D.NEITHER, F.ROUTING, C.CLUSTER,
           "Engine instances behind the router."),
    Metric("requests_finished", "finished", U.COUNT, D.HIGHER, F.REQUESTS, C.SUM,
           "Requests served to their last token (parallel samples count once)."),
    Metric("requests_rejected", "rejected", U.COUNT, D.LOWER, F.REQUESTS, C.SUM,
           "Requests the engine could never serve (reject_reasons says why)."),
    Metric("reject_reasons", "reject reasons", U.TEXT, D.NEITHER, F.REQUESTS, C.POD_ONLY,
           "Why requests were rejected, one text per distinct reason.", shape=Shape.LIST),
    Metric("makespan_s", "makespan", U.SECONDS, D.LOWER, F.REQUESTS, C.CLUSTER,
           "First arrival to last finish."),
    Metric("engine_steps", "engine steps", U.COUNT, D.NEITHER, F.SCHEDULING, C.POD_ONLY,
           "Scheduling steps the engine ran."),
    Metric("pool_slots", "pool slots", U.COUNT, D.NEITHER, F.SIZING, C.POD_ONLY,
           "Token slots in the KV pool."),
    Metric("pod_requests", "requests per pod", U.COUNT, D.NEITHER, F.ROUTING, C.CLUSTER,
           "Requests the router sent to each pod.", shape=Shape.PER_POD),
    Metric("pod_running_mean", "running per pod", U.NUMBER, D.NEITHER, F.ROUTING, C.PER_POD,
           "Each pod's mean running requests.", shape=Shape.PER_POD, per_pod_of="running_mean"),
    Metric("pod_prefix_hit_rate", "hit rate per pod", U.SHARE, D.HIGHER, F.ROUTING, C.PER_POD,
           "Each pod's prefix hit rate (none without prefix caching).", shape=Shape.PER_POD,
           per_pod_of="prefix_hit_rate"),
    Metric("pod_kv_cache_usage_mean", "KV cache usage per pod", U.SHARE, D.NEITHER, F.ROUTING,
           C.PER_POD, "Each pod's time-averaged KV cache usage.", shape=Shape.PER_POD,
           per_pod_of="kv_cache_usage_mean"),
    Metric("load_imbalance", "load imbalance", U.NUMBER, D.LOWER, F.ROUTING, C.CLUSTER,
           "The most requests routed to one pod over the mean per pod (1.00 = even)."),
    Metric("prefix_cache_queries", "prefix cache queries", U.COUNT, D.NEITHER, F.PREFIX_CACHE,
           C.SUM, "Prefix cache queries, in prompt tokens.",
           prometheus=P("vllm:prefix_cache_queries_total", counter=True)),
    Metric("prefix_cache_hits", "prefix cache hits", U.COUNT, D.HIGHER, F.PREFIX_CACHE, C.SUM,
           "Prefix cache hits, in prompt tokens.",
           prometheus=P("vllm:prefix_cache_hits_total", counter=True)),
    Metric("prefix_hit_rate", "prefix hit rate", U.SHARE, D.HIGHER, F.PREFIX_CACHE, C.CLUSTER,
           "Prompt tokens served from the cache over prompt tokens looked up."),
    Metric("preempted_prefix_queries", "preempted prefix queries", U.COUNT, D.NEITHER,
           F.PREFIX_CACHE, C.POD_ONLY,
           "Prefix cache queries of requests readmitted after a preemption, in prompt tokens."),
    Metric("preempted_prefix_hits", "preempted prefix hits", U.COUNT, D.HIGHER, F.PREFIX_CACHE,
           C.POD_ONLY, "Prefix cache hits of requests readmitted after a preemption."),
    Metric("prefill_tokens_saved", "prefill tokens saved", U.COUNT, D.HIGHER, F.PREFIX_CACHE,
           C.POD_ONLY, "Prompt tokens served from the cache, readmissions included."),
    Metric("cached_blocks_evicted", "cached blocks evicted", U.COUNT, D.NEITHER, F.PREFIX_CACHE,
           C.POD_ONLY, "Cached prefix blocks reclaimed to make room for new blocks."),
    Metric("prefix_hit_rate_upper_bound", "infinite-cache bound", U.SHARE, D.NEITHER,
           F.PREFIX_CACHE, C.RUN,
           "The hit rate of a cache that never evicts, on the same requests in arrival order."),
    Metric("trace_block_hit_bound", "trace block bound", U.SHARE, D.NEITHER, F.PREFIX_CACHE,
           C.RUN, "The share of a trace's prompt block ids seen before (traces with block ids)."),
    Metric("served_output_tokens_per_s", "output tok/s (steady)", U.TOKENS_PER_S, D.HIGHER,
           F.THROUGHPUT, C.CLUSTER, "Output tokens sampled per second of the steady window.",
           ratio_label="throughput vs base",
           prometheus=P("kvplan_output_tokens_per_second")),
    Metric("served_requests_per_s", "served req/s (steady)", U.REQUESTS_PER_S, D.HIGHER,
           F.THROUGHPUT, C.CLUSTER, "Steady output tok/s over the output per request."),
    Metric("offered_requests_per_s", "offered req/s", U.REQUESTS_PER_S, D.NEITHER, F.THROUGHPUT,
           C.CLUSTER, "Arrival rate: requests after the first over the arrival span."),
    Metric("sustainable_requests_per_s", "sustainable req/s", U.REQUESTS_PER_S, D.HIGHER,
           F.THROUGHPUT, C.CLUSTER, "An overloaded run's ceiling: its saturated steps' rate."),
    Metric("output_tokens_per_s", "output tok/s (makespan)", U.TOKENS_PER_S, D.HIGHER,
           F.THROUGHPUT, C.CLUSTER, "Output tokens per second of the makespan (vllm bench's).",
           column="output tok/s (makespan)"),
    Metric("total_tokens_per_s", "total tok/s (makespan)", U.TOKENS_PER_S, D.HIGHER,
           F.THROUGHPUT, C.POD_ONLY, "Prompt and output tokens per second of the makespan."),
    Metric("requests_per_s", "req/s (makespan)", U.REQUESTS_PER_S, D.HIGHER, F.THROUGHPUT,
           C.CLUSTER, "Finished requests per second of the makespan.", column="req/s (makespan)"),
    Metric("overloaded", "overloaded", U.FLAG, D.LOWER, F.THROUGHPUT, C.CLUSTER,
           "Whether the backlog grew over the arrival window's second half (docs/metrics.md)."),
    Metric("preemptions", "preemptions", U.COUNT, D.LOWER, F.SCHEDULING, C.SUM,
           "Cumulative number of preemptions.",
           prometheus=P("vllm:num_preemptions_total", counter=True)),
    Metric("recomputed_tokens", "recomputed tokens", U.COUNT, D.LOWER, F.SCHEDULING, C.POD_ONLY,
           "Tokens recomputed after preemption.",
           prometheus=P("kvplan_recomputed_tokens_total", counter=True)),
    Metric("swapped_out_slots", "swapped out (slots)", U.COUNT, D.LOWER, F.SCHEDULING,
           C.POD_ONLY, "KV slots preemptions copied to the CPU swap area."),
    Metric("running_mean", "running (mean)", U.NUMBER, D.HIGHER, F.SCHEDULING, C.SUM,
           "Mean number of running requests.", column="mean running",
           ratio_label="concurrency vs base", prometheus=P("kvplan_num_requests_running_mean")),
    Metric("running_peak", "running (peak)", U.COUNT, D.NEITHER, F.SCHEDULING, C.POD_ONLY,
           "The most requests running at once."),
    Metric("waiting_mean", "waiting (mean)", U.NUMBER, D.LOWER, F.SCHEDULING, C.POD_ONLY,
           "Mean number of waiting requests.", prometheus=P("kvplan_num_requests_waiting_mean")),
    Metric("kv_cache_usage_mean", "KV cache usage", U.SHARE, D.NEITHER, F.POOL_USE, C.POD_MEAN,
           "KV-cache usage (allocated blocks / total), time-averaged. 1 means 100 percent usage.",
           column="KV usage", prometheus=P("vllm:kv_cache_usage_perc")),
    Metric("kv_cache_usage_peak", "KV cache usage (peak)", U.SHARE, D.NEITHER, F.POOL_USE,
           C.POD_ONLY, "Peak KV-cache usage.", prometheus=P("kvplan_kv_cache_usage_peak")),
    *_latency("ttft_s", "TTFT", "time to first token", exported=("p50", "p90"), ratios=("p50",)),
    *_latency("tpot_s", "TPOT", "time per output token", exported=("p50",), ratios=("p50",)),
    *_latency("e2e_s", "E2E", "end-to-end latency"),
    Metric("token_states_share", "token states", U.SHARE, D.HIGHER, F.POOL_SPLIT, C.POD_MEAN,
           "Time-averaged share of the KV pool holding tokens.",
           prometheus=P("kvplan_token_states_share")),
    Metric("reservation_share", "reservation", U.SHARE, D.LOWER, F.POOL_SPLIT, C.POD_MEAN,
           "Time-averaged share of the KV pool held for tokens not generated yet."),
    Metric("internal_fragmentation_share", "internal frag.", U.SHARE, D.LOWER, F.POOL_SPLIT,
           C.POD_MEAN, "Time-averaged share of the KV pool reserved but never used.",
           prometheus=P("kvplan_internal_fragmentation_share")),
    Metric("external_fragmentation_share", "external frag.", U.SHARE, D.LOWER, F.POOL_SPLIT,
           C.POD_MEAN, "Time-averaged share of free KV slots no waiting request can use.",
           prometheus=P("kvplan_external_fragmentation_share")),
    Metric("cached_share", "cached (prefix)", U.SHARE, D.NEITHER, F.POOL_SPLIT, C.POD_MEAN,
           "Time-averaged share of the KV pool in free blocks that still hold a prefix."),
    Metric("free_share", "free", U.SHARE, D.NEITHER, F.POOL_SPLIT, C.POD_MEAN,
           "Time-averaged share of the KV pool free and holding nothing."),
    Metric("waste", "waste (1 - used/reserved)", U.SHARE, D.LOWER, F.POOL_USE, C.POD_MEAN,
           "1 - used / reserved KV slots.", column="waste",
           prometheus=P("kvplan_kv_waste_ratio")),
    Metric("token_states_of_reserved", "token states of reserved", U.SHARE, D.HIGHER,
           F.POOL_USE, C.POD_ONLY, "Used over reserved KV slots, time-averaged (1 - waste)."),
    Metric("sharing_savings", "sharing savings", U.SHARE, D.HIGHER, F.SHARING, C.POD_MEAN,
           "Block references beyond the first over all block references, time-averaged."),
    Metric("shared_token_share", "shared token share", U.SHARE, D.HIGHER, F.SHARING, C.POD_ONLY,
           "Time-averaged share of the sequences' tokens held once for several sequences."),
    Metric("evicted_token_share", "dropped share of tokens", U.SHARE, D.NEITHER, F.EVICTION,
           C.POD_ONLY, "Time-averaged share of the sequences' tokens an eviction policy dropped."),
    Metric("{tier}_hit_tokens", "{tier} tier hit tokens", U.COUNT, D.HIGHER, F.OFFLOAD,
           C.POD_ONLY, "Prompt tokens found in the tier after the device cache missed them."),
    Metric("{tier}_bytes_in", "{tier} bytes in", U.BYTES, D.NEITHER, F.OFFLOAD, C.POD_ONLY,
           "Bytes of reclaimed prefix blocks written to the tier."),
    Metric("{tier}_bytes_out", "{tier} bytes out", U.BYTES, D.NEITHER, F.OFFLOAD, C.POD_ONLY,
           "Bytes read back from the tier to the device."),
    Metric("{tier}_evictions", "{tier} tier evictions", U.COUNT, D.NEITHER, F.OFFLOAD,
           C.POD_ONLY, "Blocks the tier dropped (or moved down) to make room."),
    Metric("{tier}_hit_rate", "{tier} tier hit rate", U.SHARE, D.HIGHER, F.OFFLOAD, C.POD_ONLY,
           "Prompt tokens found in the tier over the device cache's queried tokens."),
    Metric("offload_reloads", "reloads", U.COUNT, D.NEITHER, F.OFFLOAD, C.POD_ONLY,
           "Tier hits read back to the device."),
    Metric("offload_recomputes", "recomputes", U.COUNT, D.NEITHER, F.OFFLOAD, C.POD_ONLY,
           "Tier hits recomputed instead, where recomputing was the cheaper."),
    Metric("total_hit_rate", "hit rate, all tiers", U.SHARE, D.HIGHER, F.OFFLOAD, C.POD_ONLY,
           "Prompt tokens found on the device or any tier over the device cache's queries."),
    Metric("parallel_forks", "parallel forks", U.COUNT, D.NEITHER, F.SHARING, C.POD_ONLY,
           "Samples forked from their request's prompt blocks (--samples)."),
    Metric("cow_copies", "CoW copies", U.COUNT, D.LOWER, F.SHARING, C.POD_ONLY,
           "Shared blocks copied when a sample first wrote into them."),
    Metric("tokens_dropped", "tokens dropped", U.COUNT, D.NEITHER, F.EVICTION, C.POD_ONLY,
           "Tokens an eviction policy removed from live sequences."),
    Metric("eviction_copied_slots", "slots copied", U.COUNT, D.LOWER, F.EVICTION, C.RUN,
           "Slots of every layer and head moved by eviction (a cluster: its first pod's)."),
    Metric("layer_budgets", "budget per layer", U.COUNT, D.NEITHER, F.EVICTION, C.RUN,
           "entropy-budget's tokens kept per layer.", shape=Shape.PER_LAYER),
    Metric("eviction_hole_blocks_ratio", "blocks if holes kept", U.NUMBER, D.NEITHER,
           F.EVICTION, C.RUN, "Blocks held with holes left in place per compacted block."),
    Metric("step_model", "step model", U.TEXT, D.NEITHER, F.STEP_MODEL, C.RUN,
           "Which step-model factors timed the run."),
    Metric("time_error_band", "time error band", U.TEXT, D.NEITHER, F.STEP_MODEL, C.RUN,
           "The held-out error of the factors that timed the run.", shape=Shape.RECORD),
    Metric("kv_budget_bytes_per_gpu", "KV budget per GPU", U.BYTES, D.HIGHER, F.SIZING, C.RUN,
           "Bytes per GPU the KV pool was given."),
    Metric("gpu_memory_utilization_used", "GPU memory utilization", U.SHARE, D.NEITHER,
           F.SIZING, C.RUN, "The share of GPU memory that sized the pool."),
    Metric("kv_bytes_per_token_per_gpu", "KV bytes per token per GPU", U.BYTES, D.LOWER,
           F.SIZING, C.RUN, "Bytes one token slot takes per GPU in the run's KV format."),
    Metric("mean_sequence_tokens", "mean sequence tokens", U.NUMBER, D.NEITHER, F.WORKLOAD,
           C.RUN, "The workload's mean prompt plus output tokens."),
    Metric("vllm_{figure}", "vllm bench serve {figure}", U.NUMBER, D.NEITHER,
           F.SERVING_CLIENT, C.RUN,
           "A `vllm bench serve --save-result` figure of the simulated client, under its name."),
    Metric("kv_bytes_allocated", "KV bytes allocated", U.BYTES, D.NEITHER, F.REAL_MODE, C.RUN,
           "Bytes the real pool's tensors hold."),
    Metric("device", "device", U.TEXT, D.NEITHER, F.REAL_MODE, C.RUN,
           "The device real mode ran on."),
    Metric("measured_{direction}_gbps", "measured {direction} GB/s", U.GB_PER_S, D.HIGHER,
           F.REAL_MODE, C.RUN, "Measured bandwidth of the tier copies in one direction."),
    Metric("measured_{direction}_bytes", "measured {direction} bytes", U.BYTES, D.NEITHER,
           F.REAL_MODE, C.RUN, "Bytes the tier copies moved in one direction."),
    Metric("kivi_bytes_per_seq_measured", "KIVI bytes per sequence", U.BYTES, D.LOWER,
           F.REAL_MODE, C.RUN, "KIVI's bytes per sequence measured from the pool's tensors."),
    Metric("kivi_bytes_per_seq_estimated", "KIVI bytes per sequence (estimated)", U.BYTES,
           D.LOWER, F.REAL_MODE, C.RUN, "KIVI's bytes per sequence as the estimator sizes them."),
    Metric("wall_s", "wall time", U.SECONDS, D.LOWER, F.REAL_MODE, C.RUN,
           "Wall-clock seconds from the engine's build to the end of its run."),
    Metric("estimated_wall_s", "estimated wall time", U.SECONDS, D.NEITHER, F.REAL_MODE, C.RUN,
           "The pre-run estimate of wall_s, from the timed warm-up's step cost."),
)
# fmt: on


def _regex(template: str) -> re.Pattern[str]:
    parts = []
    for literal, placeholder, _, _ in Formatter().parse(template):
        parts.append(re.escape(literal))
        if placeholder:
            parts.append(f"(?P<{placeholder}>{PLACEHOLDERS[placeholder].pattern})")
    return re.compile("".join(parts))


_EXACT = {entry.name: entry for entry in METRICS if not entry.is_pattern}
_PATTERNS = [(_regex(entry.name), entry) for entry in METRICS if entry.is_pattern]


def find(name: str) -> Metric | None:
    """The registered metric of a summary field (a pattern's filled in), or None."""
    if name in _EXACT:
        return _EXACT[name]
    for regex, entry in _PATTERNS:
        match = regex.fullmatch(name)
        if match:
            labels = {
                key: PLACEHOLDERS[key].label(value) for key, value in match.groupdict().items()
            }
            return replace(
                entry,
                name=name,
                label=entry.label.format(**labels),
                column=entry.column.format(**labels),
            )
    return None


def metric(name: str) -> Metric:
    found = find(name)
    if found is None:
        raise KeyError(
            f"'{name}' is not a registered metric; register it in "
            "kvplan.core.metric_registry.METRICS"
        )
    return found


def by_feature(feature: Feature) -> tuple[Metric, ...]:
    return tuple(entry for entry in METRICS if entry.feature is feature)
