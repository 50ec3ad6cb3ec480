"""How a serving engine release admits, orders and pages requests: the behaviours of vLLM's
V1 scheduler and KV cache manager that kvplan's engine (kvplan/core) reproduces, each switched
on from the vLLM release that introduced it.

Each release below was read in vLLM's own released sources (the sdists on PyPI, compared on
both sides of the change), as kvplan/engines/engine_releases.py reads its memory profile. A run
that names no release gets the newest behaviour. SGLang and vLLM V0 keep kvplan's own rules
(`KVPLAN_RULES`: a 1% watermark at every admission, running requests in arrival order, blocks
cached once their step is done, freed blocks queued at the back), as does real mode, which
serves on this machine rather than reproducing a server.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from kvplan.engines.versions import Version, on_or_after


@dataclass(frozen=True)
class SchedulingRules:
    # A waiting request is admitted only if blocks for all its known tokens (prompt, and a
    # resumed request's output) fit, not just its first chunk (scheduler_reserve_full_isl).
    whole_prompt_must_fit: bool = False
    # BlockPool holds back block 0 as the null block: the usable pool is one block smaller.
    null_block: bool = False
    # allocate_slots caches the full blocks a step will compute as it allocates them, so a
    # request admitted later in the same step already hits them.
    cache_on_allocate: bool = False
    # A block filled with a prefix another block already holds is cached too (no dedup): the
    # hash maps to every such block, and a lookup takes the first cached.
    duplicate_cached_blocks: bool = False
    # Free blocks kept at admission, as a fraction of the pool...
    watermark: float = 0.01
    # ... kept only while another request runs (an idle engine admits into the whole pool).
    watermark_needs_running: bool = False
    # free_blocks puts freed blocks that hold no hash at the front of the free queue (reused
    # first), cached ones at the back (evicted last).
    unhashed_blocks_first: bool = False
    # Blocks filled by generated tokens are hashed too, so a preempted request re-admitted
    # later hits its own output.
    hash_generated_tokens: bool = False
    # A re-admitted request joins the end of the running list (the next victim), as a new one
    # does; otherwise the running list is kept in arrival order.
    running_in_admission_order: bool = False

    def described(self) -> str:
        """'whole prompt must fit, null block, ...': the rules switched on, for a run's record."""
        on = [f.name.replace("_", " ") for f in fields(self) if getattr(self, f.name) is True]
        return ", ".join([*on, f"watermark {self.watermark:g}"])


KVPLAN_RULES = SchedulingRules()

# (rule, first vLLM release with it, where vLLM's source does it). V1 ships from 0.6.4 (opt-in
# until 0.8.0, when it became the default: kvplan.engines.engine_releases.engine_generation).
VLLM_V1_RELEASES: tuple[tuple[str, Version, str], ...] = (
    ("cache_on_allocate", (0, 6, 4), "KVCacheManager.allocate_slots caches the full blocks"),
    ("duplicate_cached_blocks", (0, 6, 4), "cached_block_hash_to_block: hash -> {id: block}"),
    ("hash_generated_tokens", (0, 6, 4), "output tokens extend the request's block hashes"),
    ("running_in_admission_order", (0, 6, 4), "schedule() appends to self.running"),
    # V1 has no watermark until 0.24.0, whose SchedulerConfig.watermark defaults to 0.0
    ("watermark", (0, 6, 4), "no watermark in KVCacheManager"),
    ("null_block", (0, 8, 3), "BlockPool: self.null_block = self.free_block_queue.popleft()"),
    ("whole_prompt_must_fit", (0, 19, 0), "SchedulerConfig.scheduler_reserve_full_isl = True"),
    ("unhashed_blocks_first", (0, 24, 0), "BlockPool.free_blocks prepends unhashed blocks"),
    ("watermark_needs_running", (0, 24, 0), "allocate_slots(has_scheduled_reqs=...)"),
)
# What each rule is from its release on (the others keep KVPLAN_RULES's values).
_RELEASED_VALUES = {"watermark": 0.0}


# vLLM's async scheduling (schedule step N+1 before step N's tokens return) is the default on
# GPUs from this release (0.14.0's config/vllm.py); its CPU platform turns it off.
ASYNC_SCHEDULING_FROM: Version = (0, 14, 0)


def scheduling_note(engine_label: str, version: Version | None, rules: SchedulingRules) -> str:
    """What the scheduling of a simulated run reproduces, in words, with the simplification
    it makes named."""
    if rules == KVPLAN_RULES:
        return (
            "scheduled by kvplan's own rules (a 1% watermark at every admission, running "
            f"requests in arrival order, blocks cached after their step), not {engine_label}'s "
            "scheduler step for step (a named simplification)"
        )
    release = "release " + ".".join(map(str, version)) if version else "newest release"
    text = f"scheduled as vLLM V1's scheduler of its {release}"
    if on_or_after(version, ASYNC_SCHEDULING_FROM):
        text += (
            ", synchronously: vLLM on GPUs schedules a step ahead from 0.14 (async scheduling), "
            "which kvplan does not model (a named simplification; vLLM on CPUs, and with "
            "--no-async-scheduling, schedules as kvplan does)"
        )
    return text


def vllm_v1_rules(version: Version | None) -> SchedulingRules:
    """The rules of vLLM V1's scheduler at `version` (None: the newest)."""
    changes: dict[str, object] = {}
    for rule, release, _ in VLLM_V1_RELEASES:
        if on_or_after(version, release):
            changes[rule] = _RELEASED_VALUES.get(rule, True)
    return replace(KVPLAN_RULES, **changes)  # type: ignore[arg-type]
