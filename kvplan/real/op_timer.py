"""How `kvplan profile` times one operator at one shape: warm-up, then the median of repeats.

- Each repeat runs the operator back to back enough times to last about a millisecond, so a
  10-microsecond kernel is timed over many launches (as a CUDA graph or a steady step replays
  them), not over one launch and a host synchronization; CUDA waits for the device
  (torch.cuda.synchronize) before each clock reading.
- Consecutive calls cycle over copies of the operator's inputs whose bytes together exceed the
  device's last-level cache, because in a real step each layer reads its own weights and KV:
  timing one small weight over and over would read it from cache (an 8 MiB GEMM fits an H100's
  50 MB L2 or this machine's 32 MB L3).
- A point stops repeating once its repeats have taken the time budget (at least one timed run
  after the warm-up), so a CPU GEMM of seconds is timed once and a profile stays minutes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from kvplan import MIB

REPEAT_S = 1e-3  # a repeat lasts at least this long: launches per repeat follow from the warm-up
MAX_LAUNCHES = 1000


@dataclass(frozen=True)
class Timer:
    device: str  # cpu or cuda
    repeats: int = 5
    budget_s: float = 0.5  # stop repeating a point once its repeats took this long
    flush_bytes: int = 64 * MIB  # inputs cycled per point: at least this many bytes

    def copies(self, nbytes: float, most: int = 64) -> int:
        """Copies of an operator's inputs of `nbytes` so that together they exceed the cache."""
        return int(max(1, min(most, -(-self.flush_bytes // max(1, int(nbytes))))))

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def seconds(self, calls: Sequence[Callable[[], object]]) -> float:
        """The median time of one call, cycling over `calls` (one per copy of the inputs)."""
        with torch.inference_mode():
            first = self._warm_up(calls)
            launches = max(1, min(MAX_LAUNCHES, int(REPEAT_S / max(first, 1e-9))))
            samples: list[float] = []
            spent = 0.0
            while len(samples) < self.repeats and (not samples or spent < self.budget_s):
                self.sync()
                started = time.perf_counter()
                for index in range(launches):
                    calls[index % len(calls)]()
                self.sync()
                elapsed = time.perf_counter() - started
                samples.append(elapsed / launches)
                spent += elapsed
        return statistics.median(samples)

    def _warm_up(self, calls: Sequence[Callable[[], object]]) -> float:
        """Each copy once (caches, autotuning, first touch), or until the budget is spent;
        the mean time of a call, which sets the launches per repeat."""
        self.sync()
        started = time.perf_counter()
        done = 0
        for call in calls:
            call()
            self.sync()
            done += 1
            if time.perf_counter() - started > self.budget_s:
                break
        return (time.perf_counter() - started) / done
