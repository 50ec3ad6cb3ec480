"""Real bytes for the offload tiers: a block's K/V (every layer, with its scales) copied to
host memory (pinned when the pool is on a GPU) or written to a file on local disk, timed,
and copied back into a fresh device block on a hit.

Failures degrade, never corrupt: a disk write that fails (full disk, removed folder) keeps
the block out of the disk tier with a warning; a file that is gone when needed makes the
lookup stop there, so those tokens are recomputed.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class TransferStats:
    bytes: int = 0
    seconds: float = 0.0

    @property
    def gb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds else 0.0


@dataclass
class TensorTierStorage:
    pool: list[Any]  # PagedKVCache per layer
    disk_dir: Path | None = None
    host: dict[int, list[Any]] = field(default_factory=dict)
    stats: dict[str, TransferStats] = field(default_factory=dict)
    warned: bool = False
    # Called with a device block that a restore overwrote, so whoever remembers what the
    # block held (the runner's token check on prefix hits) forgets its old content.
    on_restore: Callable[[int], None] | None = None

    def _tensors(self) -> list[Any]:
        out = []
        for cache in self.pool:
            for tensor in (cache.key_cache, cache.value_cache, cache.k_scale, cache.v_scale):
                if tensor is not None and tensor.dim() == 4:  # per-tensor scales stay with the pool
                    out.append(tensor)
        return out

    def _record(self, name: str, nbytes: int, started: float) -> float:
        seconds = time.perf_counter() - started
        entry = self.stats.setdefault(name, TransferStats())
        entry.bytes += nbytes
        entry.seconds += seconds
        return seconds

    def _path(self, block_hash: int) -> Path:
        return self.disk_dir / f"{block_hash & (2**64 - 1):016x}.pt"  # type: ignore[operator]

    def put(self, block_hash: int, block: int) -> float:
        """Device block -> host memory."""
        import torch

        started = time.perf_counter()
        pin = any(t.is_cuda for t in self._tensors())
        copies = [t[block].to("cpu", copy=True) for t in self._tensors()]
        if pin:
            copies = [c.pin_memory() for c in copies]
        if any(t.is_cuda for t in self._tensors()):
            torch.cuda.synchronize()
        self.host[block_hash] = copies
        return self._record(
            "device->cpu", sum(c.numel() * c.element_size() for c in copies), started
        )

    def to_disk(self, block_hash: int) -> bool:
        """Host memory -> a file; False (with a warning) when the disk refuses it."""
        import torch

        copies = self.host.pop(block_hash, None)
        if copies is None or self.disk_dir is None:
            return False
        started = time.perf_counter()
        try:
            self.disk_dir.mkdir(parents=True, exist_ok=True)
            torch.save(copies, self._path(block_hash))
        except OSError as err:
            self._warn(f"disk tier write failed ({err}); the block will be recomputed when needed")
            return False
        self._record("cpu->disk", sum(c.numel() * c.element_size() for c in copies), started)
        return True

    def has(self, tier: str, block_hash: int) -> bool:
        if tier == "cpu":
            return block_hash in self.host
        return self.disk_dir is not None and self._path(block_hash).is_file()

    def drop(self, tier: str, block_hash: int) -> None:
        if tier == "cpu":
            self.host.pop(block_hash, None)
        elif self.disk_dir is not None:
            self._path(block_hash).unlink(missing_ok=True)

    def take(self, tier: str, block_hash: int, keep: bool = False) -> list[Any] | None:
        """Read a block out of its tier (it leaves the tier unless `keep`); None if it cannot be
        read."""
        import torch

        if tier == "cpu":
            return self.host.get(block_hash) if keep else self.host.pop(block_hash, None)
        started = time.perf_counter()
        try:
            copies = torch.load(self._path(block_hash), weights_only=True)
            if not keep:
                self._path(block_hash).unlink(missing_ok=True)
        except (OSError, RuntimeError) as err:
            self._warn(f"disk tier read failed ({err}); recomputing")
            return None
        self._record("disk->cpu", sum(c.numel() * c.element_size() for c in copies), started)
        return copies

    def restore(self, block: int, copies: list[Any]) -> float:
        """Host copies -> a fresh device block."""
        import torch

        started = time.perf_counter()
        tensors = self._tensors()
        for tensor, copy in zip(tensors, copies):
            tensor[block].copy_(copy, non_blocking=False)
        if any(t.is_cuda for t in tensors):
            torch.cuda.synchronize()
        if self.on_restore is not None:
            self.on_restore(block)
        return self._record(
            "cpu->device", sum(c.numel() * c.element_size() for c in copies), started
        )

    def lost(self, tier: str) -> None:
        self._warn(f"a block of the {tier} tier is missing (was its folder removed?); recomputing")

    def _warn(self, message: str) -> None:
        if not self.warned:
            warnings.warn(f"kvplan offload: {message}", RuntimeWarning, stacklevel=3)
            self.warned = True
