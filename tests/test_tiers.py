"""Offload tiers (simulated): LRU and ARC, demotion cascades, promotion, reload vs recompute."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvplan.bench import BenchConfig, SizingConfig, TierConfig, run_matrix
from kvplan.core.tiers import ARCSet, LRUSet, Tier, TieredCache
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


def test_arc_tier_keeps_hit_blocks_through_demote_find_promote() -> None:
    """The calls the prefix cache makes: a reloaded block stays in an ARC tier as frequent,
    so a later scan of one-time blocks cannot flush it; an LRU tier gives it up on the hit."""
    for policy in ("arc", "lru"):
        tier = Tier("cpu", 4, 64e9, policy)
        tiers = TieredCache([tier], block_bytes=2**21)
        for block_hash in (1, 2):
            tiers.demote(block_hash)  # the device pool reclaimed a prefix block
        for block_hash in (1, 2):
            found = tiers.find(block_hash)
            assert (
                found is tier and tiers.promote(block_hash, found, 16) is True
            )  # reloaded to the device
        if policy == "arc":
            assert list(tier.blocks.t2) == [1, 2] and len(tier.blocks) == 2  # kept, now frequent
            tiers.demote(
                1
            )  # evicted from the device again: the tier's copy is current, no bytes move
            assert tier.stats.bytes_in == 2 * 2**21
        else:
            assert len(tier.blocks) == 0
        for block_hash in range(100, 110):  # a one-time scan of other prompts' blocks
            tiers.demote(block_hash)
        assert (tiers.find(1) is tier and tiers.find(2) is tier) == (policy == "arc")


def test_demotion_cascades_and_promotion_counts_bytes() -> None:
    cpu, disk = Tier("cpu", 2, 64e9), Tier("disk", 1, 7e9)
    tiers = TieredCache([cpu, disk], block_bytes=2**21)
    for block_hash in (10, 11, 12):
        tiers.demote(block_hash)
    assert 10 in disk.blocks and 11 in cpu.blocks and 12 in cpu.blocks
    tiers.demote(13)  # cpu evicts 11 to disk, disk evicts 10 for good
    assert tiers.find(10) is None and tiers.find(11) is disk and tiers.find(13) is cpu
    assert tiers.promote(11, disk, 16) is True  # simulated: no bytes, the time is charged
    assert tiers.unbilled_s == pytest.approx(2**21 / 7e9)
    assert disk.stats.bytes_out == 2**21 and disk.stats.hits_tokens == 16 and tiers.find(11) is None
    assert cpu.stats.bytes_in == 4 * 2**21 and cpu.stats.evictions == 2


CHAT = make_workload("chat", 600, rate=4, seed=0, max_model_len=4096)
BASE = BenchConfig(SizingConfig(model="llama-3.1-8b", gpu="l4", max_model_len=4096))


def metrics(config: BenchConfig, names: list[str]) -> dict[str, dict]:
    return {r.optimization: r.metrics for r in run_matrix(config, CHAT, names)}


def test_cpu_offload_turns_evicted_prefixes_into_hits() -> None:
    m = metrics(BASE, ["prefix", "offload-cpu"])
    prefix, offload = m["prefix"], m["offload-cpu"]
    block_bytes = offload["kv_bytes_per_token_per_gpu"] * 16
    # every reload moves a block; readmissions' reloads are not hits of the rate (exact
    # per-block counts: tests/test_tier_hit_rate.py)
    assert offload["cpu_bytes_out"] >= offload["cpu_hit_tokens"] / 16 * block_bytes
    assert offload["total_hit_rate"] > prefix["prefix_hit_rate"] + 0.3
    assert offload["total_hit_rate"] <= offload["prefix_hit_rate_upper_bound"] + 1e-9
    assert offload["ttft_s_p50"] < prefix["ttft_s_p50"]


def test_small_cpu_tier_spills_to_disk_and_slow_links_recompute() -> None:
    m = metrics(replace(BASE, tiers=TierConfig(cpu_cache_gb=0.2)), ["offload-disk"])["offload-disk"]
    assert m["cpu_evictions"] > 0 and m["disk_bytes_in"] > 0 and m["disk_hit_tokens"] > 0
    slow = metrics(replace(BASE, tiers=TierConfig(host_link_gbps=0.001)), ["offload-cpu"])[
        "offload-cpu"
    ]
    assert (
        slow["offload_recomputes"] > 0
        and slow["offload_reloads"] == 0
        and slow["cpu_hit_tokens"] == 0
    )


def test_offload_requires_valid_sizes() -> None:
    with pytest.raises(ValueError):
        metrics(replace(BASE, tiers=TierConfig(tier_policy="fifo")), ["offload-cpu"])


def real_offload_run(stories260k, names: list[str], disk_dir, remove_disk: bool = False):
    """A real stories260K engine whose 20-block pool cannot keep four 96-token prefixes."""
    pytest.importorskip("transformers")
    import numpy as np

    from kvplan.bench import RealConfig, parse_optimization
    from kvplan.real.factory import RealEngineFactory
    from kvplan.workload.request import Request

    rng = np.random.default_rng(0)
    prefixes = [tuple(rng.integers(3, 512, 96).tolist()) for _ in range(4)]
    # All present at t = 0, so the schedule (and the hits) do not depend on measured step times.
    requests = [
        Request(
            i, 0.0, 104, 12, prompt_tokens=prefixes[i % 4] + tuple(rng.integers(3, 512, 8).tolist())
        )
        for i in range(16)
    ]
    model_path = str(stories260k / "hf")
    factory = RealEngineFactory(
        SizingConfig(model=model_path, kv_cache_gib=20 * 16 * 1280 / 2**30, max_model_len=256),
        RealConfig(device="cpu", model_path=model_path, kernel_backend="torch"),
        tiers=TierConfig(cpu_cache_gb=0.00006, disk_dir=str(disk_dir)),
    )
    out = {}
    for name in names:
        engine, _ = factory.build(parse_optimization(name))
        if remove_disk:
            engine.step = _removing(engine, disk_dir)
        result = engine.run(requests)
        storage = getattr(getattr(engine.allocator, "tiers", None), "storage", None)
        moved = {k: v.bytes for k, v in storage.stats.items()} if storage else {}
        out[name] = ({**result.metrics, **moved}, engine.runner.tokens)
    return out


def _removing(engine, disk_dir):
    """Delete the disk tier's folder once blocks have been written to it."""
    import shutil

    original = engine.step

    def step():
        if engine.allocator.tiers.tiers[1].stats.bytes_in and disk_dir.exists():
            shutil.rmtree(disk_dir)
        original()

    return step


def test_real_offload_reproduces_the_same_tokens(stories260k, tmp_path) -> None:
    runs = real_offload_run(stories260k, ["prefix", "offload-disk"], tmp_path / "disk")
    (plain, plain_tokens), (offload, offload_tokens) = runs["prefix"], runs["offload-disk"]
    assert plain["prefix_hit_rate"] == 0.0 and offload["total_hit_rate"] > 0.6  # bound: 0.75 here
    reloaded = offload["cpu_hit_tokens"] + offload["disk_hit_tokens"]
    assert (
        offload["disk_hit_tokens"] > 0 and offload["cpu->device"] == reloaded * 1280
    )  # 1,280 B per token
    assert offload_tokens == plain_tokens  # reloaded KV is exactly the KV that was computed


def test_removed_disk_folder_degrades_to_recompute(stories260k, tmp_path) -> None:
    with pytest.warns(RuntimeWarning, match="kvplan offload"):
        runs = real_offload_run(stories260k, ["offload-disk"], tmp_path / "disk", remove_disk=True)
    metrics, tokens = runs["offload-disk"]
    reference = real_offload_run(stories260k, ["prefix"], tmp_path / "other")["prefix"][1]
    assert metrics["requests_finished"] == 16 and tokens == reference


def test_blocks_read_back_bitwise(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    import hashlib

    from kvplan.kernels.quant import allocate_kv_cache

    from kvplan.real.tier_storage import TensorTierStorage

    pool = [allocate_kv_cache(fmt, 8, 4, 2, 8, dtype=torch.float16) for fmt in ("fp16", "int8")]
    for cache in pool:
        for tensor in (cache.key_cache, cache.value_cache, cache.k_scale, cache.v_scale):
            if tensor is not None:
                tensor.copy_(torch.randn(tensor.shape).to(tensor.dtype) * 50)

    def digest(block: int) -> str:
        parts = [
            t[block].contiguous().numpy().tobytes()
            for c in pool
            for t in (c.key_cache, c.value_cache, c.k_scale, c.v_scale)
            if t is not None
        ]
        return hashlib.sha256(b"".join(parts)).hexdigest()

    storage = TensorTierStorage(pool, tmp_path / "disk")
    before = digest(3)
    storage.put(99, 3)
    assert storage.to_disk(99) and storage.has("disk", 99) and not storage.has("cpu", 99)
    storage.restore(6, storage.take("disk", 99))
    assert digest(6) == before and not storage.has("disk", 99)


def test_unwritable_disk_keeps_blocks_out_with_a_warning(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    from kvplan.kernels.quant import allocate_kv_cache

    from kvplan.real.tier_storage import TensorTierStorage

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the disk tier's folder should be")
    storage = TensorTierStorage(
        [allocate_kv_cache("fp16", 4, 4, 1, 8, dtype=torch.float16)], blocker
    )
    tiers = TieredCache(
        [Tier("cpu", 1, 64e9), Tier("disk", 8, 7e9)], block_bytes=128, storage=storage
    )
    tiers.demote(1, block=0)
    with pytest.warns(RuntimeWarning, match="disk tier write failed"):
        tiers.demote(
            2, block=1
        )  # the CPU tier evicts block 1's hash towards the disk, which refuses
    assert tiers.find(1) is None and tiers.find(2) is tiers.tiers[0]
