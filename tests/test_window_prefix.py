"""sliding-window with prefix caching, as vLLM v1's SlidingWindowManager composes them:
blocks that leave the window are freed but keep their hash (evictable, still findable),
and a hit is the rightmost run of cdiv(window - 1, block) cached blocks before the hit
point, the blocks before the run skipped. Every figure below is traced by hand for block
size 4 and window 8 (a hit needs 2 contiguous blocks), an 8-block pool, no watermark."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from property_helpers import EXAMPLES

from kvplan.core.engine import Engine
from kvplan.core.hashing import block_hashes
from kvplan.core.kv import PrefixCache, make_allocator
from kvplan.core.policies import PolicySpec
from kvplan.core.scheduler import SchedulerConfig, StepPlan
from kvplan.core.sequence import Sequence
from kvplan.sim.runner import SimulatedRunner
from kvplan.spec import parse_kv_format
from kvplan.spec.resolve import load_gpu, load_model
from kvplan.spec.roofline import Roofline
from kvplan.workload.request import Request

A_PROMPT = tuple(range(1, 21))  # 20 tokens: 5 full blocks, hashes h0..h4


ROOFLINE = Roofline(load_model("llama-3.1-8b"), load_gpu("h100-80gb"), 1, parse_kv_format("bf16"))


def engine(policy: PolicySpec | None = PolicySpec("sliding-window", 8)) -> Engine:
    allocator = make_allocator(
        "paged", 8 * 4, 4, 64, watermark=0.0, prefix_caching=True, policy=policy
    )
    return Engine(allocator, SimulatedRunner(ROOFLINE), SchedulerConfig(), 64)


def req(rid: int, prompt: tuple[int, ...], output: int = 2) -> Request:
    return Request(rid, 0.0, len(prompt), output, prompt_tokens=prompt)


def after_a(policy: PolicySpec | None = PolicySpec("sliding-window", 8)) -> Engine:
    e = engine(policy)
    e.run([req(0, A_PROMPT)])
    return e


def test_blocks_leaving_the_window_are_freed_but_stay_cached() -> None:
    e = engine()
    pool = e.allocator.pool
    e.advance(0.0)
    e.submit(req(0, A_PROMPT))
    e.step()  # the 20-token prompt in one chunk: blocks 0-4; all 5 full blocks are cached first
    a = e.scheduler.running[0]
    # then the window keeps tokens 12..19 (logical blocks 3, 4): blocks 0-2 are freed, newest first
    assert a.block_table == [3, 4] and a.dropped_blocks == 3
    assert list(pool.free_queue) == [5, 6, 7, 2, 1, 0]
    assert sorted(pool.block_to_hash) == [0, 1, 2, 3, 4] and pool.num_cached_free == 3
    assert e.allocator.evicted_slots == 20 - 8
    # decode token 20: logical block 5 -> pool block 5; the window (13..20) still needs block 3
    e.step()
    assert a.status.value == "finished" and list(pool.free_queue) == [6, 7, 2, 1, 0, 5, 4, 3]
    assert pool.num_cached_free == 5 and e.allocator.evicted_slots == 0


def test_a_hit_skips_the_blocks_before_the_window() -> None:
    e = after_a()
    pool = e.allocator.pool
    b = Sequence(
        req(1, A_PROMPT[:12] + (50, 51, 52, 53, 54))
    )  # shares blocks 0-2; 17 tokens, limit 4 blocks
    hits = e.allocator.lookup(b)
    # from the right: h3' misses, h2 (block 2) and h1 (block 1) make the run of 2; block 0 is
    # skipped
    assert (hits.skipped, hits.blocks, hits.free_cached) == (1, [1, 2], 2)
    assert e.allocator.hit_tokens(hits) == 12
    assert e.allocator.adopt(b, hits) == 12
    assert b.block_table == [1, 2] and b.dropped_blocks == 1 and b.cached_blocks == 3
    assert list(pool.free_queue) == [
        6,
        7,
        0,
        5,
        4,
        3,
    ]  # block 0 was not touched: still free, still cached
    assert pool.ref_counts[0] == 0 and 0 in pool.block_to_hash
    assert (e.allocator.prefix_stats.queries, e.allocator.prefix_stats.hits) == (20 + 17, 12)
    assert e.allocator.evicted_slots == 12 - 8  # token 0..3 are covered by the hit but not held


def test_the_window_finds_a_hit_full_attention_cannot() -> None:
    e = after_a()
    pool = e.allocator.pool
    assert pool.allocate(5) == [6, 7, 2, 1, 0]  # reclaims h2, h1, h0
    b = Sequence(req(1, A_PROMPT + (50, 51, 52)))  # shares all 5 blocks; 23 tokens, limit 5
    hits = e.allocator.lookup(b)
    # from the right: h4, h3 make the run; tokens 0..11 are skipped, so their loss does not matter
    assert (hits.skipped, hits.blocks, e.allocator.hit_tokens(hits)) == (3, [3, 4], 20)
    full = PrefixCache(pool, 4)  # full attention's lookup on the same pool stops at h0
    assert full.lookup(Sequence(req(2, A_PROMPT + (50, 51, 52)))).blocks == []


def test_an_evicted_block_early_in_the_window_limits_the_hit() -> None:
    e = after_a()
    pool = e.allocator.pool
    assert pool.allocate(3) == [6, 7, 2]  # reclaims h2 only
    short = Sequence(
        req(1, A_PROMPT[:16] + (50, 51))
    )  # hit point 16 needs blocks 2 and 3: 2 is gone
    hits = e.allocator.lookup(short)
    # from the right: h3 (run 1), h2 misses (run 0), h1, h0 (run 2): the hit falls back to 8 tokens
    assert (hits.skipped, hits.blocks, e.allocator.hit_tokens(hits)) == (0, [0, 1], 8)
    long = Sequence(req(2, A_PROMPT + (50, 51, 52)))  # hit point 20 needs blocks 3 and 4 only
    hits = e.allocator.lookup(long)
    assert (hits.skipped, hits.blocks, e.allocator.hit_tokens(hits)) == (3, [3, 4], 20)


def test_admission_counts_only_the_held_hits() -> None:
    e = after_a()
    pool = e.allocator.pool
    pool.allocate(5)  # 3 blocks left free: 5, 4, 3 (blocks 4 and 3 cached)
    b = Sequence(req(1, A_PROMPT + (50, 51, 52)))
    hits = e.allocator.lookup(b)
    # 23 tokens span 6 logical blocks: 3 skipped, 2 hit (both free, so they leave the queue), 1 new
    assert e.allocator.can_admit(b, 23, hits) and not e.allocator.can_admit(b, 25, hits)


def test_a_second_request_runs_on_its_hit_and_caches_its_own_blocks() -> None:
    e = after_a()
    b = req(1, A_PROMPT[:12] + (50, 51, 52, 53, 54), output=3)
    result = e.run([b])
    assert result.metrics["requests_finished"] == 2  # A and B
    stats = e.allocator.prefix_stats
    assert (stats.queries, stats.hits) == (20 + 17, 12)
    pool = e.allocator.pool
    # B held blocks 1, 2 (hit) and 6, 7 (new); its logical block 3 (tokens 50..53, pool block 6) is
    # cached before the window frees block 1; freed tail first at the end: 7, 6, 2
    assert len(pool.block_to_hash) == 6 and pool.block_to_hash[6] == block_hashes(b, 4)[3]
    assert list(pool.free_queue) == [0, 5, 4, 3, 1, 7, 6, 2] and e.allocator.evicted_slots == 0


# --- properties: random shared-prefix workloads through prefix+sliding-window --------------

PREFIXES = [
    tuple(range(100, 100 + n)) for n in (0, 13, 29, 40)
]  # shared heads of different lengths


class CheckingRunner(SimulatedRunner):
    """Before every step: block references, the window each scheduled query needs, and the
    hash of every cached block a sequence holds against the tokens it holds there."""

    engine: Engine
    window = 0

    def step_time(self, plan: StepPlan) -> float:
        allocator, scheduler = self.engine.allocator, self.engine.scheduler
        pool, size = allocator.pool, allocator.block_size
        refs = Counter(block for seq in scheduler.running for block in seq.block_table)
        assert all(pool.ref_counts[block] == refs.get(block, 0) for block in range(pool.num_blocks))
        assert pool.num_allocated == len(refs)
        for seq in scheduler.running:
            dropped = seq.dropped_blocks
            assert dropped + len(seq.block_table) == -(-seq.capacity // size)
            for index, block in enumerate(seq.block_table):
                logical = dropped + index
                if block in pool.block_to_hash:  # a cached block holds this sequence's tokens there
                    assert (logical + 1) * size <= seq.num_computed
                    assert pool.block_to_hash[block] == seq.hashes[logical]
        for (
            seq,
            _,
        ) in plan.scheduled:  # the first query's window (window - 1 keys before it) is held
            assert seq.dropped_blocks * size <= max(0, seq.num_computed - self.window + 1)
        full = PrefixCache(pool, size)
        for seq in scheduler.waiting:
            if seq.num_computed == 0:  # a window hit is never shorter than full attention's
                assert allocator.hit_tokens(allocator.lookup(seq)) >= full.hit_tokens(
                    full.lookup(seq)
                )
        return super().step_time(plan)


@settings(max_examples=EXAMPLES // 2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    block=st.sampled_from([4, 8]),
    window=st.integers(5, 40),
    blocks=st.integers(12, 40),
    batched=st.sampled_from([8, 16, 64, 512]),
    specs=st.lists(
        st.tuples(
            st.floats(0.0, 0.3),
            st.integers(0, 3),
            st.integers(1, 30),
            st.integers(1, 20),
            st.sampled_from([1, 1, 2]),
        ),
        min_size=1,
        max_size=16,
    ),
)
# Found by this test: a hit that holds one token fewer than the window (its run covers
# window - 1 tokens) was counted as dropping one more token than trim() and release() undo.
@example(
    block=4,
    window=5,
    blocks=12,
    batched=8,
    specs=[(0.0, 0, 1, 1, 1), (0.0, 0, 1, 1, 1), (0.0, 1, 1, 1, 1), (0.0, 1, 1, 1, 1)],
)
def test_random_shared_prefix_runs_keep_the_window_and_the_hashes_consistent(
    block: int,
    window: int,
    blocks: int,
    batched: int,
    specs: list[tuple[float, int, int, int, int]],
) -> None:
    requests = []
    for rid, (arrival, head, tail, output, samples) in enumerate(sorted(specs)):
        prompt = PREFIXES[head] + tuple(1000 * (rid + 1) + i for i in range(tail))
        requests.append(Request(rid, arrival, len(prompt), output, prompt_tokens=prompt, n=samples))
    allocator = make_allocator(
        "paged",
        blocks * block,
        block,
        128,
        watermark=0.0,
        prefix_caching=True,
        policy=PolicySpec("sliding-window", window),
    )
    runner = CheckingRunner(ROOFLINE)
    e = Engine(allocator, runner, SchedulerConfig(max_num_batched_tokens=batched), 128)
    runner.engine, runner.window = e, window
    result = e.run(requests)
    assert {seq.request_id for seq in (*result.finished, *result.rejected)} == set(
        range(len(requests))
    )
    assert not e.scheduler.running and not e.scheduler.waiting
    pool = allocator.pool
    assert (
        pool.num_free == pool.num_blocks
        and allocator.evicted_slots == 0
        and allocator.reserved_slots == 0
    )
    stats = allocator.prefix_stats
    assert 0 <= stats.hits <= stats.queries and stats.hits % block == 0
