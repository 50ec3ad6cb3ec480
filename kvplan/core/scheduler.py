"""Continuous batching as vLLM v1 schedules it.

Each step: running sequences first (decode 1 token, or the next chunk of a prefill), then
waiting ones in FCFS order while `max_num_seqs`, the token budget
(`max_num_batched_tokens`) and the pool allow, keeping a watermark of free blocks at
admission. When a running sequence cannot grow, the newest running sequence is preempted:
its KV is dropped and recomputed later (vLLM v1), or swapped to a bounded CPU area.

Two vLLM V0 behaviours are options, for replaying runs of older servers: prefill-first
steps without chunked prefill, and multi-step scheduling (SchedulerConfig).
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field

from kvplan.core.kv import NO_HITS, Allocator
from kvplan.core.scheduler_config import SchedulerConfig  # imported from here too
from kvplan.core.sequence import Sequence, Status


@dataclass
class StepPlan:
    """What one engine step computes: (sequence, new tokens) pairs, plus swap traffic."""

    scheduled: list[tuple[Sequence, int]]
    num_tokens: int
    context_tokens: int = 0  # sum over sequences of tokens attention reads after the step
    attention_pairs: int = 0  # (new token, earlier-or-same token) pairs attention computes
    decode_pairs: int = 0  # the part of them from sequences that computed one token (decodes)
    prefill_context: int = 0  # tokens the prefilling sequences attend over (MLA up-projects them)
    transfer_s: float = 0.0  # offload tiers: time to bring reloaded prefix blocks back
    swapped_in_slots: int = 0
    swapped_out_slots: int = 0
    # Whether the scheduler decided this step. Under V0 multi-step scheduling one decision
    # (scheduling, input preparation, output processing on the CPU) runs N steps.
    decision: bool = True
    # What the operator step model (kvplan.sim.ops) times attention and the LM head by: the
    # decodes, each prefill chunk's (new tokens, tokens before it), the sequences that sample
    decodes: int = 0
    prefill_chunks: list[tuple[int, int]] = field(default_factory=list)
    samples: int = 0


def _arrival_order(seq: Sequence) -> tuple[float, int, int]:
    return seq.request.arrival_s, seq.request.request_id, seq.sample_index


class WaitingQueue(deque):  # type: ignore[type-arg]
    """The waiting requests, counting its changes: per-step metrics that read its head (the
    external fragmentation a waiting request meets) recompute only when the head may differ."""

    def __init__(self) -> None:
        super().__init__()
        self.version = 0
        self.memo: tuple[int, int] | None = None  # (version, the head's smallest reservation)

    def append(self, seq: Sequence) -> None:
        self.version += 1
        super().append(seq)

    def appendleft(self, seq: Sequence) -> None:
        self.version += 1
        super().appendleft(seq)

    def popleft(self) -> Sequence:
        self.version += 1
        return super().popleft()


class Scheduler:
    def __init__(self, allocator: Allocator, config: SchedulerConfig) -> None:
        if config.max_num_seqs is None or config.max_num_batched_tokens is None:
            raise ValueError(
                "the scheduler needs its batch limits: resolve the engine's defaults first "
                "(SchedulerConfig.resolved)"
            )
        self.allocator = allocator
        self.config = config
        self.rules = config.engine_rules
        # vLLM V1 caches the blocks a step will fill when it allocates them
        self.cache_on_allocate = self.rules.cache_on_allocate and allocator.prefix_caching
        self.max_num_seqs: int = config.max_num_seqs
        self.max_num_batched_tokens: int = config.max_num_batched_tokens
        self.waiting = WaitingQueue()
        self.running: list[Sequence] = []
        self.preemptions = 0
        # What the step being scheduled did, for its step trace (kvplan.core.step_trace):
        # sequences preempted, and (sequence, tokens queried, tokens hit) per prefix lookup
        # of an admitted sequence
        self.step_preempted: list[Sequence] = []
        self.step_lookups: list[tuple[Sequence, int, int]] = []
        self.recomputed_tokens = 0
        self.swap_used_slots = 0
        self.swapped_out_slots_total = 0
        # Running totals the metrics read every step without walking the batch.
        self.used_slots = 0  # tokens with KV on the device
        self.generated_tokens = 0  # output tokens sampled so far (steady-state throughput)
        self.running_final_slots = 0  # final lengths of running sequences
        self.steps_since_admission = (
            0  # multi-step scheduling: decode steps since the last decision
        )
        # The waiting head the pool last refused: (sequence, the allocator's admission epoch,
        # the token budget it was refused at, the hash that would lengthen its prefix hit).
        # Until the epoch moves, the budget shrinks or that hash is cached it would be
        # refused again, so it is not looked up again.
        self._refused: tuple[Sequence, int, int, int | None] | None = None

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def _preempt(self, seq: Sequence, plan: StepPlan) -> None:
        self.preemptions += 1
        self.step_preempted.append(seq)
        seq.preemptions += 1
        slots = self.allocator.planned_slots(seq)
        self.allocator.free(seq)
        self.used_slots -= seq.num_computed
        self.running_final_slots -= seq.final_len
        if (
            self.config.preemption == "swap"
            and self.swap_used_slots + slots <= self.config.swap_slots
        ):
            seq.status = Status.SWAPPED
            seq.swapped_blocks = slots
            self.swap_used_slots += slots
            self.swapped_out_slots_total += slots
            plan.swapped_out_slots += slots
        else:
            self.recomputed_tokens += seq.num_computed
            seq.status = Status.WAITING
            seq.num_computed = 0
        self.waiting.appendleft(seq)

    def schedule(self) -> StepPlan:
        plan = StepPlan([], 0)
        if self.step_preempted:
            self.step_preempted = []
        if self.step_lookups:
            self.step_lookups = []
        scheduled = plan.scheduled
        budget = self.max_num_batched_tokens
        steps = self.config.scheduler_steps
        may_admit = steps == 1 or not self.running or self.steps_since_admission >= steps
        if may_admit:
            self.steps_since_admission = 0
        plan.decision = may_admit
        self.steps_since_admission += 1
        if self.config.prefill_first and may_admit and self.waiting:
            budget = self._admit(plan, budget)
            if scheduled:
                plan.transfer_s = self.allocator.take_transfer_s()
                plan.num_tokens = self.max_num_batched_tokens - budget
                return plan
            may_admit = False  # nothing fitted: decode this step, as V0 does
        chunked = self.config.chunked_prefill
        allocate = self.allocator.allocate
        running = self.running
        preempted = False
        context = pairs = single = prefilled = decodes = samples = 0
        chunks = plan.prefill_chunks
        cap = self.allocator.retained_cap
        attended = self.allocator.attended
        cache_on_allocate, block_size = self.cache_on_allocate, self.allocator.block_size
        # The hot loop of the simulator: kept flat, with the common decode case (one token
        # that fits the slots already held) touching no allocator. Popping victims from the
        # end while iterating is safe: the loop stops where the list now ends.
        for seq in running:
            if budget <= 0:
                break
            before = seq.num_computed
            count = pending = seq.prompt_len + seq.num_generated - before
            if count > budget:
                if not chunked:
                    continue
                count = budget
            needed = before + count
            if needed > seq.capacity:
                while not allocate(seq, needed):
                    victim = running.pop()
                    self._preempt(victim, plan)
                    preempted = True
                    if victim is seq:
                        break
                else:
                    needed = 0
                if needed:
                    break
                needed = before + count
            if cache_on_allocate and needed >= (seq.cached_blocks + 1) * block_size:
                self.allocator.cache_full_blocks(seq, min(needed, seq.known_tokens))
            scheduled.append((seq, count))
            budget -= count
            if cap is not None:  # an eviction policy: attention reads what it keeps
                needed, before = attended(seq, before, count)
            context += needed
            if count == 1:  # a decode: one new token against `before` earlier ones and itself
                before += 1
                pairs += before
                single += before
                decodes += 1
            else:
                pairs += count * before + count * (count + 1) // 2
                prefilled += needed
                chunks.append((count, before))
            if count == pending:
                samples += 1
        plan.context_tokens, plan.attention_pairs = context, pairs
        plan.decode_pairs, plan.prefill_context = single, prefilled
        plan.decodes, plan.samples = decodes, samples
        if not preempted and may_admit:
            budget = self._admit(plan, budget)
            plan.transfer_s = self.allocator.take_transfer_s()
        plan.num_tokens = self.max_num_batched_tokens - budget
        return plan

    def _admit(self, plan: StepPlan, budget: int) -> int:
        allocator, rules = self.allocator, self.rules
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            refused, epoch = self._refused, allocator.admission_epoch
            if (
                refused is not None
                and refused[0] is seq
                and refused[1] == epoch
                and budget >= refused[2]
                and (refused[3] is None or not allocator.holds_hash(refused[3]))
            ):
                break
            # KV computed elsewhere (a prefill instance) arrives on the first admission only; the
            # last prompt token is computed again to sample, as vLLM does after a remote prefill
            transferred = (
                seq.request.transferred_tokens and not seq.num_computed and not seq.preemptions
            )
            fresh = (
                allocator.prefix_caching
                and seq.status == Status.WAITING
                and seq.num_computed == 0
                and not transferred
            )
            hits = allocator.lookup(seq) if fresh else NO_HITS  # passed on to can_admit and adopt
            cached = allocator.hit_tokens(hits) if fresh else 0
            if transferred:
                cached = min(seq.request.transferred_tokens, seq.known_tokens - 1)
            count = self._chunk_of(seq.known_tokens - seq.num_computed - cached, budget)
            total = seq.num_computed + cached + count
            if count == 0:
                break
            # vLLM V1 keeps its watermark only while another request runs, and admits only a
            # request whose every known token fits (not just this chunk)
            watermark = bool(self.running) or not rules.watermark_needs_running
            if not allocator.can_admit(seq, total, hits, watermark) or (
                rules.whole_prompt_must_fit
                and not allocator.can_admit(seq, seq.known_tokens, hits, watermark)
            ):
                if epoch is not None:
                    self._refused = (seq, epoch, budget, allocator.next_hit_hash(seq, hits))
                break
            if fresh:
                cached = allocator.adopt(
                    seq, hits
                )  # lower-tier bytes that cannot be read come back short
                total = cached + count
            if fresh or transferred:
                seq.num_computed = cached
                self.used_slots += cached
            if not allocator.allocate(seq, total):
                break
            if self.cache_on_allocate:
                allocator.cache_full_blocks(seq, total)
            if fresh:
                self.step_lookups.append((seq, seq.known_tokens, cached))
            self.waiting.popleft()
            if seq.status == Status.SWAPPED:
                self.used_slots += seq.num_computed
                self.swap_used_slots -= seq.swapped_blocks
                plan.swapped_in_slots += seq.swapped_blocks
                seq.swapped_blocks = 0
            seq.status = Status.RUNNING
            self.running_final_slots += seq.final_len
            if rules.running_in_admission_order:
                # vLLM V1: a re-admitted request joins the end, the next victim, as a new one
                self.running.append(seq)
            else:
                # Running stays in arrival order, so the victim popped from the end is always
                # the newest request, even after an older preempted one is re-admitted.
                bisect.insort(self.running, seq, key=_arrival_order)
            plan.scheduled.append((seq, count))
            budget -= count
            before = seq.num_computed
            if count == seq.known_tokens - before:
                plan.samples += 1
            read, before = allocator.attended(seq, before, count)
            plan.prefill_chunks.append((count, before))
            plan.context_tokens += read
            plan.attention_pairs += count * before + count * (count + 1) // 2
            plan.prefill_context += read
        return budget

    def _chunk_of(self, pending: int, budget: int) -> int:
        if pending <= budget:
            return pending
        return budget if self.config.chunked_prefill else 0

    def _fork(self, parent: Sequence, now: float) -> list[Sequence]:
        """Parallel sampling: after the prompt's first token, n - 1 more samples continue
        from the same KV, sharing its blocks copy-on-write where the allocator can.
        Returns the samples that are already complete (one-token outputs)."""
        done = []
        for index in range(1, parent.request.n):
            child = Sequence(parent.request, index)
            child.num_generated = 1
            self.generated_tokens += 1
            child.first_token_s = now
            if child.output_len <= 1:
                child.status, child.finish_s = Status.FINISHED, now
                done.append(child)
            elif self.allocator.fork(parent, child):
                child.num_computed = parent.num_computed
                child.status = Status.RUNNING
                self.used_slots += child.num_computed
                self.running_final_slots += child.final_len
                bisect.insort(self.running, child, key=_arrival_order)
            else:
                self.waiting.appendleft(child)  # recomputes prompt + first token later
        return done

    def complete_step(self, plan: StepPlan, now: float) -> list[Sequence]:
        """Advance every scheduled sequence; return those that finished this step."""
        finished = []
        self.used_slots += plan.num_tokens
        allocator = self.allocator
        # blocks are cached here when they are done, unless the scheduler cached them when it
        # allocated them (vLLM V1)
        caching = allocator.prefix_caching and not self.cache_on_allocate
        trims = allocator.trims
        block_size = allocator.block_size
        for seq, count in plan.scheduled:
            computed = seq.num_computed + count
            seq.num_computed = computed
            if trims:
                allocator.trim(seq)
            if (
                caching
                and seq.hashes
                and seq.cached_blocks < len(seq.hashes)
                and computed >= (seq.cached_blocks + 1) * block_size
            ):
                allocator.cache_full_blocks(seq)
            if computed < seq.prompt_len + seq.num_generated:
                continue  # a prefill chunk: no token sampled yet
            generated = seq.num_generated + 1
            seq.num_generated = generated
            self.generated_tokens += 1
            if seq.first_token_s is None:
                seq.first_token_s = now
                if seq.request.n > 1 and seq.sample_index == 0:
                    finished.extend(self._fork(seq, now))
            if generated >= seq.output_len:
                seq.status = Status.FINISHED
                seq.finish_s = now
                finished.append(seq)
        if finished:
            done = {id(seq) for seq in finished}
            self.running = [seq for seq in self.running if id(seq) not in done]
            for seq in finished:
                if seq.num_computed == 0:
                    continue  # a one-token parallel sample that never held KV
                self.allocator.free(seq)
                self.used_slots -= seq.num_computed
                self.running_final_slots -= seq.final_len
        return finished
