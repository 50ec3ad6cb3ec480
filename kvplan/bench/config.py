"""A bench run's settings, grouped by concern so a reader sees which ones a mode uses:
engine sizing (both modes), scheduler (both), offload tiers (optimizations offload-*),
cluster (simulated mode with --pods > 1), real mode (model source and device), plus the
run-wide mode, seed and eviction budget.

Results files predate the grouping: their `params` and run ids are computed from one flat
dict of every setting (`flat_settings`), and `BenchConfig.from_flat` reads the same names
(the sweep files' vocabulary), so both directions share one table of names."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from kvplan.bench.mode import Mode, parse_mode
from kvplan.core.engine_factory import (
    EngineSizing,
    Optimization,
    RealConfig,
    SizingConfig,
    TierConfig,
    engine_rules,
)
from kvplan.core.router_config import RouterConfig
from kvplan.core.scheduler_config import SchedulerConfig
from kvplan.engines.scheduling_rules import KVPLAN_RULES
from kvplan.spec.setting_error import SettingError

# The batch limits a run leaves to the serving engine's own defaults (resolved for its
# release and GPU before an engine is built, bench/run.py)
ENGINE_LIMITS = SchedulerConfig(max_num_seqs=None, max_num_batched_tokens=None)


@dataclass(frozen=True)
class ClusterConfig:
    """Simulated mode: engine instances behind routers (one run per router)."""

    pods: int = 1
    routers: tuple[str, ...] = ()
    w_hit: float = RouterConfig.w_hit  # kv-aware router: weight of the cached-prefix fraction
    w_load: float = RouterConfig.w_load  # kv-aware router: weight of the load

    def __post_init__(self) -> None:
        if self.pods < 1:
            raise SettingError("{pods} must be at least 1, got {got}", got=self.pods)
        for router in self.routers:
            RouterConfig(router)  # validates the name

    def variants(self) -> tuple[str | None, ...]:
        """The routers one optimization runs under; (None,) for a single engine."""
        return (self.routers or (RouterConfig.name,)) if self.pods > 1 else (None,)


@dataclass(frozen=True)
class BenchConfig:
    sizing: SizingConfig = field(default_factory=SizingConfig)
    scheduler: SchedulerConfig = ENGINE_LIMITS
    workload: dict[str, Any] = field(
        default_factory=dict
    )  # how the requests were made, for the record
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    tiers: TierConfig = field(default_factory=TierConfig)
    real: RealConfig = field(default_factory=RealConfig)
    mode: Mode = Mode.SIMULATED
    seed: int = 0
    kv_budget: int | None = None  # tokens per layer an eviction policy keeps
    # Step timing: None (or "fitted") = the operator step model with the shipped engine
    # overhead of the run's release (kvplan.sim.ops, printed with its held-out band);
    # "roofline" = the bare roofline at datasheet peak, a lower bound; else a `kvplan calibrate`
    # file. Recorded only when set.
    step_model: str | None = None
    # A table `kvplan profile` measured (kvplan.sizing.operators.profile_table): the operator
    # step model times what it covers from it. Simulated mode only; recorded only when set.
    perf_table: str | None = None
    # The simulated `vllm bench serve` client (opt-in): a closed loop with at most
    # max_concurrency requests in flight, and/or vLLM-named figures (vllm_*) in the metrics.
    max_concurrency: int | None = None
    vllm_figures: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", parse_mode(self.mode))
        if self.mode is Mode.REAL and self.cluster.pods > 1:
            raise SettingError("{pods} needs simulated mode; real mode runs one engine")
        if self.step_model is not None and self.mode is not Mode.SIMULATED:
            raise SettingError(
                "{step_model} and {calibration} time simulated steps; drop them with {mode} real"
            )
        check_perf_table_mode(self.perf_table, self.mode)
        if (self.max_concurrency is not None or self.vllm_figures) and (
            self.mode is not Mode.SIMULATED or self.cluster.pods > 1
        ):
            raise SettingError(
                "{max_concurrency} and {vllm_figures} need simulated mode with one pod"
            )
        if self.scheduler.preemption != "swap" and self.sizing.swap_space_gib:
            # the swap area is set aside for swap preemption only; recorded as none otherwise
            object.__setattr__(self, "sizing", dataclasses.replace(self.sizing, swap_space_gib=0.0))

    @classmethod
    def from_flat(cls, **settings: Any) -> BenchConfig:
        """From the flat setting names of results files and sweep files (model=..., pods=...)."""
        if CALIBRATION in settings:
            settings = calibration_as_step_model(settings)
        unknown = sorted(set(settings) - set(FLAT_NAMES))
        if unknown:
            raise ValueError(
                f"unknown bench settings {', '.join(unknown)}; use "
                f"{', '.join((*FLAT_NAMES, CALIBRATION))}"
            )
        groups: dict[str, dict[str, Any]] = {group: {} for group in GROUPS}
        top: dict[str, Any] = {}
        for name, value in settings.items():
            group = FLAT_NAMES[name]
            if name == "scheduler" and isinstance(value, dict):
                value = SchedulerConfig(**value)
            if name == "routers":
                value = tuple(value)
            (groups[group] if group else top)[name] = value
        return cls(**top, **{group: GROUPS[group](**values) for group, values in groups.items()})


def check_perf_table_mode(perf_table: str | None, mode: str | Mode) -> None:
    """A perf table times simulated steps; a real run measures its own."""
    if perf_table is not None and parse_mode(mode) is not Mode.SIMULATED:
        raise SettingError(
            "{perf_table} times simulated steps from measured operators; drop it with "
            "{mode} real (a real run measures its own steps)"
        )


GROUPS: dict[str, type] = {
    "sizing": SizingConfig,
    "cluster": ClusterConfig,
    "tiers": TierConfig,
    "real": RealConfig,
}
# Every flat setting name -> its group (None: a field of BenchConfig itself), in the order
# results files have always listed them.
FLAT_NAMES: dict[str, str | None] = {
    **{f.name: "sizing" for f in fields(SizingConfig) if f.name != "swap_space_gib"},
    "scheduler": None,
    "swap_space_gib": "sizing",
    "seed": None,
    "workload": None,
    "pods": "cluster",
    "routers": "cluster",
    "kv_budget": None,
    **{f.name: "tiers" for f in fields(TierConfig)},
    "mode": None,
    **{f.name: "real" for f in fields(RealConfig)},
    "w_hit": "cluster",
    "w_load": "cluster",
    "step_model": None,
    "max_concurrency": None,
    "vllm_figures": None,
    "perf_table": None,
}
# Settings recorded only when set (added after results files existed; None = the old behaviour).
OPTIONAL_NAMES = frozenset({"step_model", "max_concurrency", "vllm_figures", "perf_table"})
# A sweep file's spelling of bench's --calibration FILE: the file's engine overhead times the
# steps.
# It is read into step_model, where a run made with the flag records its file too.
CALIBRATION = "calibration"


def calibration_as_step_model(settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` with calibration = FILE read as step_model = FILE, refused as bench's
    --calibration is (kvplan.sim.step_models: the file must be one `kvplan calibrate` wrote,
    and a step model set beside it conflicts)."""
    from kvplan.sim.step_models import step_model_setting

    settings = dict(settings)
    calibration = settings.pop(CALIBRATION)
    settings["step_model"] = step_model_setting(settings.get("step_model"), calibration)
    return settings


def flat_settings(config: BenchConfig) -> dict[str, Any]:
    """Every setting under its flat name (the scheduler as a dict), as results files record them."""
    flat: dict[str, Any] = {}
    for name, group in FLAT_NAMES.items():
        value = getattr(getattr(config, group) if group else config, name)
        if name in OPTIONAL_NAMES and value in (None, False):
            continue
        flat[name] = asdict(value) if name == "scheduler" else copy.deepcopy(value)
    return flat


def run_id(config: BenchConfig, optimizations: list[str], num_requests: int) -> str:
    """Deterministic: the same inputs give the same run id (nothing wall-clock goes in)."""
    identity = json.dumps(
        [flat_settings(config), optimizations, num_requests], sort_keys=True, default=str
    )
    return hashlib.sha256(identity.encode()).hexdigest()[:12]


def record_params(
    config: BenchConfig,
    optimization: Optimization,
    sizing: EngineSizing,
    num_requests: int,
    router: str | None,
) -> dict[str, Any]:
    """A bench record's `params`: every setting but the scheduler, the scheduler's as scheduler_*
    (its rules as the engine release resolves them, in words), and what this run resolved
    (allocator, KV format, max_model_len)."""
    flat = flat_settings(config)
    scheduler = flat.pop("scheduler")
    # real mode serves on this machine by kvplan's own rules (kvplan.real.factory)
    rules = (
        KVPLAN_RULES if config.mode is Mode.REAL else engine_rules(config.sizing, config.scheduler)
    )
    scheduler["rules"] = rules.described()
    return {
        **flat,
        **{f"scheduler_{k}": v for k, v in scheduler.items()},
        "allocator": optimization.allocator,
        "kv_format": sizing.kv_format.name,
        "max_model_len": sizing.max_model_len,
        "num_requests": num_requests,
        "router": router,
    }
