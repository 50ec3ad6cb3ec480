"""The step trace: one JSON line per engine step saying what the scheduler decided (docs/
metrics.md, "Step trace"), so a user can read why a request waited or was preempted at a
given step, and kvplan's decisions can be compared with vLLM's own, step for step
(tests/test_vllm_conformance.py).

A line: `{"optimization", "pod", "step", "t_s", "scheduled": [[id, tokens, kind], ...],
"preempted": [id, ...], "finished": [id, ...], "prefix": [[id, queried, hit], ...],
"cached_blocks_evicted", "blocks_in_use", "running", "waiting"}`. `kind` is "new" for a
request's first scheduling, "resumed" for its first after a preemption, else "running";
ids are request ids (a parallel sample past the first is "id:sample").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvplan.core.scheduler import Scheduler, StepPlan
    from kvplan.core.sequence import Sequence


def trace_id(seq: Sequence) -> int | str:
    rid = seq.request.request_id
    return rid if seq.sample_index == 0 else f"{rid}:{seq.sample_index}"


def _order(key: int | str) -> tuple[int, ...]:
    """Request ids in numeric order, a request's samples after it."""
    return tuple(int(part) for part in str(key).split(":"))


class StepTrace:
    """Writes an engine's steps as lines through `write` (one string per line, newline
    included), each labelled with `labels` (the optimization and pod it ran)."""

    def __init__(self, write: Callable[[str], object], labels: dict[str, Any]) -> None:
        self.write = write
        self.labels = labels
        self.steps = 0
        # a sequence's preemption count when it was last scheduled (absent: never scheduled)
        self._seen: dict[int | str, int] = {}
        self._evicted = 0

    def record(
        self, plan: StepPlan, scheduler: Scheduler, finished: list[Sequence], now: float
    ) -> None:
        self.steps += 1
        scheduled = []
        for seq, count in plan.scheduled:
            key = trace_id(seq)
            before = self._seen.get(key)
            kind = "new" if before is None else "resumed" if seq.preemptions > before else "running"
            self._seen[key] = seq.preemptions
            scheduled.append([key, count, kind])
        pool = scheduler.allocator.pool
        evicted = pool.cached_evictions if pool is not None else 0
        line = {
            **self.labels,
            "step": self.steps,
            "t_s": round(now, 9),
            "scheduled": scheduled,
            "preempted": [trace_id(seq) for seq in scheduler.step_preempted],
            "finished": sorted((trace_id(seq) for seq in finished), key=_order),
            "prefix": [
                [trace_id(seq), queried, hit] for seq, queried, hit in scheduler.step_lookups
            ],
            "cached_blocks_evicted": evicted - self._evicted,
            "blocks_in_use": pool.num_allocated if pool is not None else None,
            "running": len(scheduler.running),
            "waiting": len(scheduler.waiting),
        }
        self._evicted = evicted
        self.write(json.dumps(line, separators=(",", ":")) + "\n")
