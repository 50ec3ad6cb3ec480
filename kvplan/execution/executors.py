"""Where independent simulations run: this machine's process pool, or a Ray cluster.

`kvplan sweep` maps its points and `kvplan plan` its candidates through one of these. Both
call on_result(work(item)) for every item in completion order; `work` must be a module-level
function (it is pickled by name). A plan searches `wave` candidates at a time, each wave
bounded by the cheapest plan the earlier ones found (branch and bound): the local pool's
wave is its worker count; Ray's is everything at once, since every map starts a driver
process (execution/ray_driver.py) and a cluster has the cores to spare.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kvplan.execution.pool import run_pool
from kvplan.spec.setting_error import SettingError


@dataclass(frozen=True)
class LocalExecutor:
    workers: int = 1

    @property
    def wave(self) -> int | None:
        return self.workers

    def map(
        self, work: Callable[[Any], Any], items: Sequence[Any], on_result: Callable[[Any], None]
    ) -> None:
        if self.workers <= 1 or len(items) <= 1:
            for item in items:
                on_result(work(item))
            return
        run_pool(work, items, min(self.workers, len(items)), on_result)


@dataclass(frozen=True)
class RayExecutor:
    address: str | None = None  # None or "local": a local Ray instance; else a cluster's address

    @property
    def wave(self) -> int | None:
        return None

    def map(
        self, work: Callable[[Any], Any], items: Sequence[Any], on_result: Callable[[Any], None]
    ) -> None:
        from kvplan.execution.ray_driver import run_on_ray

        if items:
            run_on_ray(list(items), self.address, on_result, work)


Executor = LocalExecutor | RayExecutor
EXECUTORS = {"local": LocalExecutor, "ray": RayExecutor}
DEFAULT_EXECUTOR = "local"  # this machine's process pool


def make_executor(name: str, workers: int | None = None, address: str | None = None) -> Executor:
    """--executor NAME (with --workers for the local pool, --address for Ray)."""
    if name == "ray":
        return RayExecutor(address)
    if name == "local":
        return LocalExecutor(workers or os.cpu_count() or 1)
    raise SettingError(
        "{executor} must be one of {known}, got '{got}'", known=", ".join(EXECUTORS), got=name
    )
