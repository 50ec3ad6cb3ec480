"""The hit rate over all offload tiers is a share of the fresh admissions' queries: a tier hit
made while a preempted request is readmitted is counted apart, as the device's own hits
of readmissions are (vLLM's counters), so the rate never passes 100%."""

from __future__ import annotations

from kvplan.core.block_pool import BlockPool
from kvplan.core.kv.prefix_cache import PrefixCache
from kvplan.core.sequence import Sequence
from kvplan.core.summary import tier_summary
from kvplan.core.tiers import Tier, TieredCache
from kvplan.workload.request import Request

BLOCK = 4


def cache_with_prompt_in_the_cpu_tier(prompt: tuple[int, ...]) -> tuple[PrefixCache, Tier]:
    """An empty 8-block device pool over a CPU tier that holds the prompt's 2 full blocks."""
    cpu = Tier("cpu", 8, 64e9)
    # recomputing a token costs 1 s: reloading a 1 MiB block at 64 GB/s is always cheaper
    tiers = TieredCache([cpu], block_bytes=2**20)
    cache = PrefixCache(BlockPool(8), BLOCK, tiers, recompute_s_per_token=1.0)
    probe = Sequence(Request(99, 0.0, len(prompt), 2, prompt_tokens=prompt))
    cache.lookup(probe)  # computes the prompt's block hashes
    for block_hash in probe.hashes or []:
        cache.tiers.demote(block_hash)  # type: ignore[union-attr]
    return cache, cpu


def admit(cache: PrefixCache, prompt: tuple[int, ...], rid: int, preempted: bool) -> int:
    seq = Sequence(Request(rid, 0.0, len(prompt), 2, prompt_tokens=prompt))
    seq.preemptions = int(preempted)
    return cache.adopt(seq, cache.lookup(seq))


def test_a_readmission_s_tier_hits_are_counted_apart() -> None:
    prompt = tuple(range(1, 10))  # 9 tokens: 2 full blocks of 4, looked up up to token 8
    cache, cpu = cache_with_prompt_in_the_cpu_tier(prompt)
    assert admit(cache, prompt, 0, preempted=True) == 8  # both blocks reloaded from the tier
    # the readmission: 9 queried tokens and 8 tier-hit tokens, both apart from the rates' counts
    assert cache.stats.preempted_queries == 9 and cache.stats.queries == 0
    assert (cpu.stats.hits_tokens, cpu.stats.preempted_hits_tokens) == (0, 8)
    assert cpu.stats.bytes_out == 2 * 2**20  # the two blocks moved all the same
    summary = tier_summary(_allocator(cache))
    assert summary["cpu_hit_tokens"] == 0 and summary["total_hit_rate"] == 0.0


def test_a_fresh_admission_s_tier_hits_count_in_the_all_tier_rate() -> None:
    prompt = tuple(range(1, 10))
    cache, cpu = cache_with_prompt_in_the_cpu_tier(prompt)
    assert admit(cache, prompt, 0, preempted=False) == 8
    assert (cache.stats.queries, cache.stats.hits) == (9, 0)
    assert (cpu.stats.hits_tokens, cpu.stats.preempted_hits_tokens) == (8, 0)
    # device 0 + cpu 8 hit tokens over 9 queried
    summary = tier_summary(_allocator(cache))
    assert summary["cpu_hit_rate"] == 8 / 9 and summary["total_hit_rate"] == 8 / 9


class _allocator:  # the two attributes tier_summary reads
    def __init__(self, cache: PrefixCache) -> None:
        self.tiers, self.prefix_stats = cache.tiers, cache.stats
