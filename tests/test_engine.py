"""The engine on tiny hand-traced fixtures: block ids, ref counts, free-queue order, extents,
step counts, preemptions and modeled times derived by hand."""

from __future__ import annotations

import pytest
from engine_helpers import tiny_engine

from kvplan.core.block_pool import BlockPool
from kvplan.core.engine import Engine
from kvplan.core.kv import ContiguousAllocator, PagedAllocator
from kvplan.core.metrics import pool_split
from kvplan.core.sequence import Sequence
from kvplan.workload.request import Request


def seq(prompt: int, output: int, rid: int = 0, arrival: float = 0.0) -> Sequence:
    return Sequence(Request(rid, arrival, prompt, output))


def test_block_pool_free_queue_order_and_ref_counts() -> None:
    pool = BlockPool(4)
    assert pool.allocate(3) == [0, 1, 2]
    assert list(pool.free_queue) == [3]
    pool.touch(1)  # a second holder of block 1
    assert pool.ref_counts.tolist() == [1, 2, 1, 0]
    pool.free(reversed([0, 1, 2]))  # a sequence frees tail first
    assert pool.ref_counts.tolist() == [0, 1, 0, 0]
    assert list(pool.free_queue) == [3, 2, 0]
    assert pool.allocate(2) == [3, 2]
    pool.free([1])
    assert list(pool.free_queue) == [0, 1]


def test_block_pool_cached_blocks_are_evicted_from_the_front() -> None:
    pool = BlockPool(2)
    blocks = pool.allocate(2)
    pool.cache(blocks[0], 111)
    pool.free(reversed(blocks))
    assert pool.lookup(111) == 0 and pool.num_cached_free == 1
    pool.touch(0)  # a hit on a free cached block takes it out of the queue
    assert list(pool.free_queue) == [1] and pool.ref_counts[0] == 1
    pool.free([0])
    assert pool.allocate(2) == [1, 0]
    assert pool.lookup(111) is None and pool.cached_evictions == 1
    with pytest.raises(RuntimeError):
        pool.free([0, 0, 0])


def test_paged_allocator_grows_by_blocks_and_keeps_a_watermark() -> None:
    allocator = PagedAllocator(num_blocks=5, block_size=4, watermark=0.2)  # 1 block watermark
    a = seq(5, 5)
    assert allocator.allocate(a, 5) and a.block_table == [0, 1] and a.capacity == 8
    assert allocator.allocate(a, 8) and a.block_table == [0, 1]
    assert allocator.allocate(a, 9) and a.block_table == [0, 1, 2]
    b = seq(8, 1, rid=1)
    assert not allocator.can_admit(b, 8)  # 2 free - 2 needed < 1 watermark
    assert allocator.can_admit(b, 4)
    assert allocator.reserved_slots == 12
    allocator.free(a)
    assert list(allocator.pool.free_queue) == [3, 4, 2, 1, 0]
    assert a.capacity == 0 and allocator.reserved_slots == 0


def test_contiguous_first_fit_measures_external_fragmentation() -> None:
    allocator = ContiguousAllocator("oracle", capacity_slots=100, max_model_len=100)
    a, b, c = seq(20, 10, 0), seq(10, 10, 1), seq(20, 10, 2)
    for s in (a, b, c):
        assert allocator.allocate(s, 1)
    assert (a.extent, b.extent, c.extent) == ((0, 30), (30, 20), (50, 30))
    allocator.free(b)
    assert allocator.free_lengths == {30: 20, 80: 20}
    d = seq(20, 5, 3)  # needs 25: 40 slots free, no extent large enough
    assert not allocator.can_admit(d, 1) and not allocator.allocate(d, 1)
    assert allocator.external_fragmentation(25) == 40
    allocator.free(a)  # coalesces with the hole after it
    assert allocator.free_lengths == {0: 50, 80: 20}
    assert allocator.allocate(d, 1) and d.extent == (0, 25)
    assert allocator.reserved_slots == 55


@pytest.mark.parametrize(
    ("policy", "final", "max_len", "size"),
    [
        ("max", 33, 48, 48),
        ("pow2", 33, 100, 64),
        ("pow2", 33, 48, 48),
        ("pow2", 32, 100, 32),
        ("oracle", 33, 48, 33),
    ],
)
def test_contiguous_reservation_sizes(policy: str, final: int, max_len: int, size: int) -> None:
    allocator = ContiguousAllocator(policy, capacity_slots=1000, max_model_len=max_len)
    assert allocator.reservation_size(seq(final - 1, 1)) == size


def test_single_request_steps_and_modeled_times_by_hand() -> None:
    engine, runner = tiny_engine()
    result = engine.run([Request(0, 0.0, 10, 3)])
    (done,) = result.finished
    roof = runner.roofline
    per_token = 131_072
    flops_per_pair = 4 * 32 * 32 * 128  # layers x query heads x head_dim, QK and PV
    step1 = roof.step_time(
        10, 55 * flops_per_pair, 10 * per_token
    )  # prefill: 10 + 9 + ... + 1 pairs
    step2 = roof.step_time(1, 11 * flops_per_pair, 11 * per_token)
    step3 = roof.step_time(1, 12 * flops_per_pair, 12 * per_token)
    assert result.metrics["engine_steps"] == 3
    assert done.num_computed == 12 and done.num_generated == 3
    assert done.first_token_s == pytest.approx(step1)
    assert done.finish_s == pytest.approx(step1 + step2 + step3)
    assert result.metrics["tpot_s_mean"] == pytest.approx((step2 + step3) / 2)
    assert result.metrics["output_tokens_per_s"] == pytest.approx(3 / (step1 + step2 + step3))


def test_chunked_prefill_splits_by_the_token_budget() -> None:
    engine, _ = tiny_engine(max_num_batched_tokens=4)
    result = engine.run([Request(0, 0.0, 10, 3)])
    assert result.metrics["engine_steps"] == 5  # chunks 4, 4, 2 (first token), then 2 decodes
    with pytest.raises(ValueError, match="must be at least max_model_len"):
        tiny_engine(max_num_batched_tokens=4, chunked_prefill=False)  # vLLM refuses this too
    engine, _ = tiny_engine(max_num_batched_tokens=16, max_len=16, chunked_prefill=False)
    result = engine.run([Request(0, 0.0, 10, 3)])
    assert result.metrics["engine_steps"] == 3


def two_requests() -> list[Request]:
    return [Request(0, 0.0, 4, 6), Request(1, 0.0, 4, 6)]


def test_recompute_preemption_evicts_the_newest_request() -> None:
    # 3 blocks of 4 slots. Both prompts fit (1 block each); at step 2 both need a second
    # block, one is free: B (newest) is preempted and its 4 tokens recomputed later.
    engine, _ = tiny_engine(slots=12, block=4, max_len=12)
    result = engine.run(two_requests())
    m = result.metrics
    assert (m["preemptions"], m["recomputed_tokens"], m["swapped_out_slots"]) == (1, 4, 0)
    assert m["engine_steps"] == 11  # A: 6 steps; B resumes at step 7 with 5 tokens, then 4 decodes
    a, b = sorted(result.finished, key=lambda s: s.request_id)
    assert (a.preemptions, b.preemptions) == (0, 1)
    assert b.num_generated == 6 and b.num_computed == 9
    assert engine.allocator.pool.num_free == 3


def test_swap_preemption_keeps_the_kv() -> None:
    engine, _ = tiny_engine(slots=12, block=4, max_len=12, preemption="swap", swap_slots=8)
    result = engine.run(two_requests())
    m = result.metrics
    assert (m["preemptions"], m["recomputed_tokens"], m["swapped_out_slots"]) == (1, 0, 4)
    assert m["engine_steps"] == 11


def test_oversized_requests_are_rejected_with_reasons() -> None:
    engine, _ = tiny_engine(slots=32, block=16, max_len=64)
    result = engine.run([Request(0, 0.0, 60, 10), Request(1, 0.0, 30, 10), Request(2, 1.0, 5, 5)])
    reasons = result.metrics["reject_reasons"]
    assert result.metrics["requests_rejected"] == 2 and result.metrics["requests_finished"] == 1
    assert any("max_model_len 64" in r for r in reasons)
    assert any("whole pool admits 32" in r for r in reasons)


def test_contiguous_max_leaves_external_fragmentation_while_requests_wait() -> None:
    engine, _ = tiny_engine("contiguous-max", slots=100, max_len=40)
    result = engine.run([Request(i, 0.0, 5, 5) for i in range(3)])
    m = result.metrics
    assert m["running_peak"] == 2
    # While the third request waits, the 20-slot tail cannot hold a 40-slot reservation.
    assert m["external_fragmentation_share"] > 0
    shares = sum(
        m[f"{k}_share"]
        for k in (
            "token_states",
            "reservation",
            "internal_fragmentation",
            "external_fragmentation",
            "free",
        )
    )
    assert shares == pytest.approx(1.0)
    assert m["requests_finished"] == 3


def test_waiting_request_arrives_during_idle_time() -> None:
    engine, _ = tiny_engine()
    result = engine.run([Request(0, 0.0, 4, 2), Request(1, 100.0, 4, 2)])
    late = max(result.finished, key=lambda s: s.request_id)
    assert late.first_token_s > 100.0
    assert result.metrics["makespan_s"] == pytest.approx(late.finish_s)


def test_pool_split_by_hand_for_both_allocator_kinds() -> None:
    # contiguous-max, 100 slots, max_model_len 40: two requests of 5 + 5 hold 40 slots each;
    # the third waits, and the 20-slot tail is too small for its 40-slot reservation.
    engine, _ = tiny_engine("contiguous-max", slots=100, max_len=40)
    for i in range(3):
        engine.submit(Request(i, 0.0, 5, 5))
    engine.step()  # both prefills run (5 tokens each) and sample their first token
    split = pool_split(engine.allocator, engine.scheduler)
    # token states 10, reservation (final 10 + 10) - 10, internal 80 - 20, external 20, cached 0,
    # free 0
    assert split == (10, 10, 60, 20, 0, 0)
    # paged, 8 blocks of 4: the same two requests hold 2 blocks each; nothing reserved ahead
    engine, _ = tiny_engine("paged", slots=32, block=4, max_len=40)
    for i in range(2):
        engine.submit(Request(i, 0.0, 5, 5))
    engine.step()
    assert pool_split(engine.allocator, engine.scheduler) == (10, 0, 6, 0, 0, 16)
    assert sum(pool_split(engine.allocator, engine.scheduler)) == engine.allocator.capacity_slots


def _steps_of(engine: Engine, requests: list[Request]) -> list[list[tuple[int, int]]]:
    """(request id, tokens) per step, recorded from the scheduler."""
    steps = []
    schedule = engine.scheduler.schedule

    def recording():
        plan = schedule()
        steps.append([(seq.request.request_id, count) for seq, count in plan.scheduled])
        return plan

    engine.scheduler.schedule = recording
    engine.run(requests)
    return steps


def test_v0_prefill_first_steps_stall_the_running_decodes() -> None:
    """vLLM V0 without chunked prefill: a waiting prompt runs alone; decodes resume after it."""
    requests = [Request(0, 0.0, 4, 4), Request(1, 0.0005, 4, 2)]
    mixed = _steps_of(
        tiny_engine(max_num_batched_tokens=64, max_len=64, chunked_prefill=False)[0], requests
    )
    first = _steps_of(
        tiny_engine(
            max_num_batched_tokens=64, max_len=64, chunked_prefill=False, prefill_first=True
        )[0],
        requests,
    )
    assert mixed[:2] == [[(0, 4)], [(0, 1), (1, 4)]]  # V1: the prompt joins the decode
    assert first[:3] == [[(0, 4)], [(1, 4)], [(0, 1), (1, 1)]]  # V0: the prompt runs alone


def test_multi_step_scheduling_admits_only_every_n_steps() -> None:
    """--num-scheduler-steps 3: a request arriving mid-run waits for the next decision."""
    requests = [Request(0, 0.0, 4, 8), Request(1, 0.0005, 4, 2)]
    steps = _steps_of(tiny_engine(scheduler_steps=3)[0], requests)
    assert steps[:5] == [[(0, 4)], [(0, 1)], [(0, 1)], [(0, 1), (1, 4)], [(0, 1), (1, 1)]]
