"""Property-based tests of the engine: random operation sequences against the block pool,
the allocators and the whole engine, with the invariants checked after every step.

a) BlockPool against a plain model (reference counts, free-queue order, prefix maps).
b) PagedAllocator and the three ContiguousAllocator policies driven through live Sequences:
   admit, grow, finish, preempt (free, keep for re-admission), re-admit.
c) The whole Engine on small random workloads with tiny pools, every allocator, chunked
   prefill on/off, recompute or swap preemption; a checking runner verifies scheduler and
   allocator invariants at every step, and the run's outcome and metrics are checked at the end.

The tests at the end pin the three engine bugs these properties found (a crash when the last
arrivals are all rejected; requests stranded after a preemption by the token budget or by the
watermark). KVPLAN_PROPERTY_EXAMPLES=5000 runs a longer hunt of the engine property.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from property_helpers import check_all_free, check_allocator, contiguous_gaps

from kvplan.core.block_pool import BlockPool
from kvplan.core.kv import make_allocator
from kvplan.core.sequence import Sequence
from kvplan.workload.request import Request

PICK = st.integers(min_value=0, max_value=10_000)  # an index, taken modulo the list's length


# --- a) the block pool ----------------------------------------------------------------------


class BlockPoolMachine(RuleBasedStateMachine):
    """The pool against a model: references held, free-queue order, hash maps."""

    @initialize(num_blocks=st.integers(1, 24))
    def setup(self, num_blocks: int) -> None:
        self.pool = BlockPool(num_blocks)
        self.refs: Counter[int] = Counter()  # references this test holds, per block
        self.queue: list[int] = list(range(num_blocks))  # expected free-queue order
        self.h2b: dict[int, int] = {}
        self.evictions = 0

    def held(self) -> list[int]:
        return sorted(self.refs.elements())

    @rule(count=st.integers(0, 30))
    def allocate(self, count: int) -> None:
        if count > len(self.queue):
            before = (list(self.pool.free_queue), list(self.pool.ref_counts))
            with pytest.raises(RuntimeError):
                self.pool.allocate(count)
            assert (list(self.pool.free_queue), list(self.pool.ref_counts)) == before
            return
        blocks = self.pool.allocate(count)
        expected, self.queue = self.queue[:count], self.queue[count:]
        assert blocks == expected  # taken from the front, in order
        for block in blocks:
            assert self.refs[block] == 0
            self.refs[block] = 1
            for h, b in list(self.h2b.items()):
                if b == block:  # a reclaimed cached block forgets its prefix
                    del self.h2b[h]
                    self.evictions += 1

    @rule(pick=PICK)
    def touch(self, pick: int) -> None:
        block = pick % self.pool.num_blocks
        if self.refs[block] == 0:
            self.queue.remove(block)
        self.refs[block] += 1
        self.pool.touch(block)

    @precondition(lambda self: self.refs)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        held = self.held()
        picks = data.draw(st.lists(st.integers(0, len(held) - 1), unique=True, max_size=len(held)))
        blocks = [held[i] for i in picks]
        self.pool.free(blocks)
        for block in blocks:
            self.refs[block] -= 1
            if self.refs[block] == 0:
                del self.refs[block]
                self.queue.append(block)  # joins the back, in the order given

    @rule(pick=PICK)
    def free_unheld_raises(self, pick: int) -> None:
        block = pick % self.pool.num_blocks
        if self.refs[block] == 0:
            with pytest.raises(RuntimeError):
                self.pool.free([block])

    @rule(pick=PICK, block_hash=st.integers(0, 12))
    def cache(self, pick: int, block_hash: int) -> None:
        block = pick % self.pool.num_blocks
        if block_hash not in self.h2b and block not in self.h2b.values():
            self.h2b[block_hash] = block
        self.pool.cache(block, block_hash)

    @rule(block_hash=st.integers(0, 12))
    def lookup(self, block_hash: int) -> None:
        assert self.pool.lookup(block_hash) == self.h2b.get(block_hash)

    @rule()
    def free_everything(self) -> None:
        order = list(reversed(self.held()))
        self.pool.free(order)
        for block in order:  # blocks reaching zero join the back in the order given
            self.refs[block] -= 1
            if self.refs[block] == 0:
                del self.refs[block]
                self.queue.append(block)
        assert self.pool.num_free == self.pool.num_blocks  # no leak

    @invariant()
    def consistent(self) -> None:
        pool = self.pool
        queue = list(pool.free_queue)
        assert len(queue) == len(set(queue))
        assert queue == self.queue
        for block in range(pool.num_blocks):
            assert pool.ref_counts[block] == self.refs[block]
            # free iff unreferenced, and then in the queue exactly once
            assert (block in pool.free_queue) == (pool.ref_counts[block] == 0)
        assert pool.num_free + pool.num_allocated == pool.num_blocks
        assert pool.num_free == sum(1 for c in pool.ref_counts if c == 0)
        assert pool.hash_to_block == self.h2b
        assert {b: h for h, b in pool.hash_to_block.items()} == pool.block_to_hash
        assert pool.cached_evictions == self.evictions
        assert pool.num_cached_free == sum(1 for b in self.h2b.values() if self.refs[b] == 0)

    def teardown(self) -> None:
        if hasattr(self, "pool"):
            self.pool.free(self.held())
            assert self.pool.num_free == self.pool.num_blocks


TestBlockPool = BlockPoolMachine.TestCase
TestBlockPool.settings = settings(max_examples=120, stateful_step_count=40, deadline=None)


# --- b) the allocators ------------------------------------------------------------------------


class AllocatorMachine(RuleBasedStateMachine):
    """Live sequences each allocated for some token count; preempted ones wait to come back."""

    @initialize(
        kind=st.sampled_from(["paged", "contiguous-max", "contiguous-pow2", "contiguous-oracle"]),
        block_size=st.sampled_from([1, 2, 4, 8, 16]),
        units=st.integers(1, 24),
        max_model_len=st.integers(2, 200),
        watermark=st.sampled_from([0.0, 0.01, 0.1, 0.25]),
    )
    def setup(
        self, kind: str, block_size: int, units: int, max_model_len: int, watermark: float
    ) -> None:
        self.allocator = make_allocator(
            kind, units * block_size, block_size, max_model_len, watermark
        )
        self.paged = kind == "paged"
        self.max_model_len = max_model_len
        self.live: dict[int, tuple[Sequence, int]] = {}  # id -> (seq, tokens allocated for)
        self.preempted: list[Sequence] = []
        self.gone: list[Sequence] = []
        self.next_id = 0

    def _try_admit(self, seq: Sequence, tokens: int) -> None:
        alloc = self.allocator
        if self.paged:
            needed = -(-tokens // alloc.block_size)
            assert alloc.can_admit(seq, tokens) == (
                alloc.pool.num_free - needed >= alloc.watermark_blocks
            )
            expect = needed <= alloc.pool.num_free
        else:
            size = alloc.reservation_size(seq)
            gaps = contiguous_gaps(alloc.capacity_slots, [s.extent for s, _ in self.live.values()])
            fits = [start for start, length in gaps if length >= size]
            assert alloc.can_admit(seq, tokens) == bool(fits)
            expect = bool(fits)
        ok = alloc.allocate(seq, tokens)
        assert ok == expect
        if ok:
            if not self.paged:
                assert seq.extent[0] == fits[0]  # first fit
            self.live[id(seq)] = (seq, tokens)
        else:
            assert seq.capacity == 0 and seq.block_table == [] and seq.extent is None

    @rule(prompt=st.integers(1, 150), output=st.integers(1, 100), frac=st.floats(0, 1))
    def admit(self, prompt: int, output: int, frac: float) -> None:
        output = min(
            output, self.max_model_len - 1
        )  # as the engine would: final_len <= max_model_len
        prompt = min(prompt, self.max_model_len - output)
        seq = Sequence(Request(self.next_id, 0.0, prompt, output))
        self.next_id += 1
        tokens = max(1, round(frac * seq.final_len))
        self._try_admit(seq, tokens)

    @precondition(lambda self: self.preempted)
    @rule(pick=PICK, frac=st.floats(0, 1))
    def readmit(self, pick: int, frac: float) -> None:
        seq = self.preempted.pop(pick % len(self.preempted))
        tokens = max(1, round(frac * seq.final_len))
        self._try_admit(seq, tokens)
        if id(seq) not in self.live:
            self.preempted.append(seq)

    @precondition(lambda self: self.live)
    @rule(pick=PICK, extra=st.integers(1, 80))
    def grow(self, pick: int, extra: int) -> None:
        seq, tokens = list(self.live.values())[pick % len(self.live)]
        target = min(tokens + extra, seq.final_len)
        alloc = self.allocator
        table = list(seq.block_table)
        if self.paged:
            needed = max(0, -(-target // alloc.block_size) - len(table))
            assert alloc.blocks_needed(seq, target) == needed
            expect = needed <= alloc.pool.num_free
        else:
            expect = True  # the reservation already covers the final length
        extent = seq.extent
        ok = alloc.allocate(seq, target)
        assert ok == expect
        assert seq.block_table[: len(table)] == table and seq.extent == extent  # never moves
        if ok:
            self.live[id(seq)] = (seq, target)
        else:
            assert seq.block_table == table

    def _release(self, pick: int) -> Sequence:
        seq, _ = self.live.pop(list(self.live)[pick % len(self.live)])
        self.allocator.free(seq)
        assert seq.capacity == 0 and seq.block_table == [] and seq.extent is None
        return seq

    @precondition(lambda self: self.live)
    @rule(pick=PICK)
    def finish(self, pick: int) -> None:
        self.gone.append(self._release(pick))

    @precondition(lambda self: self.live)
    @rule(pick=PICK)
    def preempt(self, pick: int) -> None:
        self.preempted.append(self._release(pick))

    @precondition(lambda self: self.gone or self.preempted)
    @rule(pick=PICK)
    def free_again_is_a_no_op(self, pick: int) -> None:
        pool = self.gone + self.preempted
        reserved = self.allocator.reserved_slots
        self.allocator.free(pool[pick % len(pool)])
        assert self.allocator.reserved_slots == reserved

    @invariant()
    def consistent(self) -> None:
        if not hasattr(self, "allocator"):
            return
        alloc = self.allocator
        holders = [seq for seq, _ in self.live.values()]
        check_allocator(alloc, holders, self.preempted + self.gone)
        used = 0
        for seq, tokens in self.live.values():
            assert tokens <= seq.capacity
            if self.paged:  # exactly the blocks the tokens need, nothing ahead
                assert len(seq.block_table) == -(-tokens // alloc.block_size)
            used += tokens
        assert used <= alloc.reserved_slots <= alloc.capacity_slots
        assert 0.0 <= alloc.usage <= 1.0

    def teardown(self) -> None:
        if not hasattr(self, "allocator"):
            return
        while self.live:
            self._release(0)
        check_all_free(self.allocator)


TestAllocators = AllocatorMachine.TestCase
TestAllocators.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
