"""Offload tiers (simulated): LRU and ARC, demotion cascades, promotion, reload vs recompute."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvplan.bench import BenchConfig, run_matrix
from kvplan.engine.tiers import ARCSet, LRUSet, Tier, TieredCache
from kvplan.workload import make_workload


def test_lru_evicts_the_least_recent() -> None:
    lru = LRUSet(2)
    assert lru.add(1) == [] and lru.add(2) == []
    lru.touch(1)
    assert lru.add(3) == [2] and 1 in lru and 3 in lru


def test_arc_resists_a_scan() -> None:
    arc = ARCSet(4)
    for key in (1, 2):
        arc.add(key)
        arc.touch(key)  # seen twice: frequent
    evicted = [k for key in range(100, 110) for k in arc.add(key)]  # a one-time scan
    assert 1 in arc and 2 in arc  # the frequent blocks survive
    assert set(evicted) <= set(range(100, 110))
    lru = LRUSet(4)
    for key in (1, 2, *range(100, 110)):
        lru.add(key)
    assert 1 not in lru and 2 not in lru  # plain LRU is flushed by the same scan


def test_demotion_cascades_and_promotion_counts_bytes() -> None:
    cpu, disk = Tier("cpu", 2, 64e9), Tier("disk", 1, 7e9)
    tiers = TieredCache([cpu, disk], block_bytes=2**21)
    for block_hash in (10, 11, 12):
        tiers.demote(block_hash)
    assert 10 in disk.blocks and 11 in cpu.blocks and 12 in cpu.blocks
    tiers.demote(13)  # cpu evicts 11 to disk, disk evicts 10 for good
    assert tiers.find(10) is None and tiers.find(11) is disk and tiers.find(13) is cpu
    seconds = tiers.promote(11, disk, 16)
    assert seconds == pytest.approx(2**21 / 7e9)
    assert disk.stats.bytes_out == 2**21 and disk.stats.hits_tokens == 16 and tiers.find(11) is None
    assert cpu.stats.bytes_in == 4 * 2**21 and cpu.stats.evictions == 2


CHAT = make_workload("chat", 600, rate=4, seed=0, max_model_len=4096)
BASE = BenchConfig(model="llama-3.1-8b", gpu="l4", max_model_len=4096)


def metrics(config: BenchConfig, names: list[str]) -> dict[str, dict]:
    return {r["optimization"]: r["metrics"] for r in run_matrix(config, CHAT, names)}


def test_cpu_offload_turns_evicted_prefixes_into_hits() -> None:
    m = metrics(BASE, ["prefix", "offload-cpu"])
    prefix, offload = m["prefix"], m["offload-cpu"]
    block_bytes = offload["kv_bytes_per_token_per_gpu"] * 16
    assert offload["cpu_bytes_out"] == offload["cpu_hit_tokens"] / 16 * block_bytes
    assert offload["total_hit_rate"] > prefix["prefix_hit_rate"] + 0.3
    assert offload["total_hit_rate"] <= offload["prefix_hit_rate_upper_bound"] + 1e-9
    assert offload["ttft_s_p50"] < prefix["ttft_s_p50"]


def test_small_cpu_tier_spills_to_disk_and_slow_links_recompute() -> None:
    m = metrics(replace(BASE, cpu_cache_gb=0.2), ["offload-disk"])["offload-disk"]
    assert m["cpu_evictions"] > 0 and m["disk_bytes_in"] > 0 and m["disk_hit_tokens"] > 0
    slow = metrics(replace(BASE, host_link_gbps=0.001), ["offload-cpu"])["offload-cpu"]
    assert slow["offload_recomputes"] > 0 and slow["offload_reloads"] == 0 and slow["cpu_hit_tokens"] == 0


def test_offload_requires_valid_sizes() -> None:
    with pytest.raises(ValueError):
        metrics(replace(BASE, tier_policy="fifo"), ["offload-cpu"])
