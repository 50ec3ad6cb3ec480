"""The scheduler's settings (kvplan.core.scheduler schedules by them), apart from the
scheduler so the command line reads their defaults without loading the engine."""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvplan.engines.scheduling_rules import KVPLAN_RULES, SchedulingRules
from kvplan.spec.setting_error import SettingError

PREEMPTION_MODES = ("recompute", "swap")


@dataclass(frozen=True)
class SchedulerConfig:
    # None: the serving engine's own default for its release and GPU (resolved by `resolved`
    # before an engine is built; kvplan.engines.engine_releases.batch_defaults)
    max_num_seqs: int | None = 256
    max_num_batched_tokens: int | None = 8192
    chunked_prefill: bool = True
    preemption: str = "recompute"
    swap_slots: int = 0  # CPU swap area, in token slots
    # vLLM V0 without chunked prefill (its _schedule_default): a step with waiting prompts
    # that fit runs only those prefills, and the running decodes wait for the next step.
    prefill_first: bool = False
    # vLLM V0 multi-step scheduling (--num-scheduler-steps N): one scheduling decision runs
    # N decode steps, so waiting requests are admitted only every N steps.
    scheduler_steps: int = 1
    # How the engine release admits, orders and pages (kvplan.engines.scheduling_rules); None:
    # the serving engine's own for its release, resolved with the batch limits
    # (kvplan.core.engine_factory.engine_scheduler), else kvplan's own (real mode)
    rules: SchedulingRules | None = None

    @property
    def engine_rules(self) -> SchedulingRules:
        return self.rules or KVPLAN_RULES

    def __post_init__(self) -> None:
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            raise SettingError(
                "{max_num_seqs} must be at least 1, got {got}", got=self.max_num_seqs
            )
        if self.max_num_batched_tokens is not None and self.max_num_batched_tokens < 1:
            raise SettingError(
                "{max_num_batched_tokens} must be at least 1, got {got}",
                got=self.max_num_batched_tokens,
            )
        if self.preemption not in PREEMPTION_MODES:
            raise SettingError(
                "{preemption} must be one of {known}, got '{got}'",
                known=", ".join(PREEMPTION_MODES),
                got=self.preemption,
            )
        if self.swap_slots < 0:
            raise SettingError("{swap_slots} must not be negative")
        if self.scheduler_steps < 1:
            raise SettingError(
                "{scheduler_steps} must be at least 1, got {got}", got=self.scheduler_steps
            )

    def resolved(self, max_num_seqs: int, max_num_batched_tokens: int) -> SchedulerConfig:
        """These settings with the engine's defaults where none was given."""
        return replace(
            self,
            max_num_seqs=self.max_num_seqs or max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens or max_num_batched_tokens,
        )
