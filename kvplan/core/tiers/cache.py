"""Offload tiers below the device pool: host memory, then local disk.

A cached prefix block the device pool reclaims is demoted to the CPU tier instead of
being dropped; a block the CPU tier evicts moves on to disk; disk evicts for good. A
prefix lookup that runs out of device hits continues in the CPU tier, then on disk, and
each run of lower-tier hits is either reloaded (transfer time) or recomputed (prefill
time), whichever the cost model says is cheaper. Simulated mode moves no bytes: it counts
them and charges their time at the tier's bandwidth (PCIe / NVLink-C2C for host, NVMe
for disk, from the GPU profile, overridable).

Eviction inside a tier: LRU (tiers/lru.py) or ARC (tiers/arc.py). An LRU tier is
exclusive (a hit leaves the tier for the device); an ARC tier keeps a hit block, which
moves to its frequency list, as ARC is defined over repeated accesses to resident keys; a
later demotion of that block finds its bytes already there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvplan.core.tiers.arc import ARCSet
from kvplan.core.tiers.lru import LRUSet
from kvplan.spec.setting_error import SettingError

# each tier policy by its name; the first is the default (TierConfig's too)
TIER_SETS: dict[str, type[LRUSet] | type[ARCSet]] = {s.name: s for s in (LRUSet, ARCSet)}
TIER_POLICIES = tuple(TIER_SETS)


@dataclass
class TierStats:
    hits_tokens: int = 0  # on fresh admissions: the hit rates' numerators
    # on readmissions after a preemption: apart, as the device cache's own hits of them are
    # (their queries are not in the rates' denominators)
    preempted_hits_tokens: int = 0
    bytes_in: int = 0  # demoted into this tier
    bytes_out: int = 0  # promoted back to the device
    evictions: int = 0


@dataclass
class Tier:
    name: str
    capacity_blocks: int
    bandwidth: float  # bytes/s to and from the device
    policy: str = TIER_POLICIES[0]
    blocks: LRUSet | ARCSet = field(init=False)
    stats: TierStats = field(default_factory=TierStats)

    def __post_init__(self) -> None:
        if self.policy not in TIER_POLICIES:
            raise SettingError(
                "{tier_policy} must be one of {known}, got '{got}'",
                known=", ".join(TIER_POLICIES),
                got=self.policy,
            )
        if self.capacity_blocks < 0 or self.bandwidth <= 0:
            raise ValueError(
                f"tier {self.name} needs a non-negative capacity and a positive bandwidth"
            )
        self.blocks = TIER_SETS[self.policy](self.capacity_blocks)


class TieredCache:
    """Lower tiers for prefix blocks, looked up device -> cpu -> disk.

    Without `storage` (simulated mode) only the block ids move and transfers are charged at
    each tier's bandwidth; with it (real mode) the bytes move and transfers are timed.
    """

    def __init__(self, tiers: list[Tier], block_bytes: float, storage: Any | None = None) -> None:
        self.tiers = tiers
        self.block_bytes = block_bytes
        self.storage = storage
        self.reloads = 0  # runs of lower-tier hits reloaded
        self.recomputes = 0  # runs judged cheaper to recompute
        self.unbilled_s = 0.0  # transfer time not yet charged to a step

    def demote(self, block_hash: int, block: int | None = None, level: int = 0) -> None:
        """A block leaves the device (level 0, into the first tier) or a tier (cascades down)."""
        if level < len(self.tiers) and block_hash in self.tiers[level].blocks:
            return  # an ARC tier kept it on its last hit: the copy there is still current
        if level >= len(self.tiers):
            if self.storage is not None:
                self.storage.drop(self.tiers[-1].name, block_hash)
            return
        if level == 0 and self.storage is not None and block is not None:
            self.unbilled_s += self.storage.put(block_hash, block)
        tier = self.tiers[level]
        tier.stats.bytes_in += int(self.block_bytes)
        for evicted in tier.blocks.add(block_hash):
            tier.stats.evictions += 1
            if evicted == block_hash and tier.capacity_blocks > 0:
                continue
            if self.storage is not None and level + 1 < len(self.tiers):
                if not self.storage.to_disk(evicted):
                    continue  # the disk refused it: the block is simply gone
            self.demote(evicted, None, level + 1)

    def find(self, block_hash: int) -> Tier | None:
        for tier in self.tiers:
            if block_hash in tier.blocks:
                if self.storage is not None and not self.storage.has(tier.name, block_hash):
                    tier.blocks.remove(block_hash)  # its bytes are gone (a removed folder): a miss
                    self.storage.lost(tier.name)
                    return None
                return tier
        return None

    def promote(
        self, block_hash: int, tier: Tier, block_size: int, readmitted: bool = False
    ) -> Any:
        """Read a block from its tier for reloading (an LRU tier gives it up, an ARC tier keeps
        it). Returns its bytes in real mode (None if they cannot be read), True in simulated mode.
        `readmitted`: the block serves a preempted request's readmission."""
        keep = tier.blocks.keeps_promoted
        if keep:
            tier.blocks.touch(block_hash)  # seen again: frequent
        else:
            tier.blocks.remove(block_hash)
        payload: Any = True
        if self.storage is not None:
            payload = self.storage.take(tier.name, block_hash, keep=keep)
            if payload is None:
                if keep:
                    tier.blocks.remove(block_hash)
                return None
        else:
            self.unbilled_s += self.block_bytes / tier.bandwidth
        if readmitted:
            tier.stats.preempted_hits_tokens += block_size
        else:
            tier.stats.hits_tokens += block_size
        tier.stats.bytes_out += int(self.block_bytes)
        return payload

    def restore(self, block: int, payload: Any) -> None:
        if self.storage is not None:
            self.unbilled_s += self.storage.restore(block, payload)
