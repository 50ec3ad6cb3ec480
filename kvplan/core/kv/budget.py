"""An eviction policy applied to a paged pool: the blocks each sequence holds, step by step,
follow the policy's memory model (kvplan.core.policies.slots), which the real engine's
block tables follow too.

A step writes its new tokens into fresh slots. A decode step (one token) is pruned before
it attends (strict budgets), so it needs only the blocks the sequence holds after it; a
prefill chunk attends to everything kept plus the whole chunk, then is pruned (`trim`).
- window policies keep tokens at their positions: blocks free as the window slides past
  them. `seq.dropped_blocks` counts the logical blocks released, so table[i] holds logical
  block i + dropped_blocks (i >= 1 when StreamingLLM's sink block 0 stays at table[0]);
- h2o, snapkv, paged-eviction and entropy-budget keep each head's tokens compacted at the
  front: a hole is filled by moving the last slot's token into it, one slot copied per
  evicted token (`copied_slots`, charged as time), and the tail blocks free;
  entropy-budget's blocks hold its largest layer budget (one table serves every layer),
  the smaller layers' tail slots counted as internal fragmentation (slots.used_tokens);
- h2o-holes leaves holes in place: nothing is copied and no block frees while the
  sequence lives (the bound slots.held_blocks names); evicted tokens stay counted as
  evicted, so the holes show as internal fragmentation.
"""

from __future__ import annotations

from kvplan import cdiv
from kvplan.core.block_pool import BlockPool
from kvplan.core.policies import PolicySpec, attended_tokens, held_tokens, used_tokens
from kvplan.core.policies.base import WindowPolicy
from kvplan.core.sequence import Sequence


class PolicyBudget:
    def __init__(self, spec: PolicySpec, block_size: int) -> None:
        if spec.budget is None:
            raise ValueError(f"policy '{spec.name}' needs a token budget")
        self.spec = spec
        self.block_size = block_size
        # window policies keep tokens at their positions; StreamingLLM's sinks keep block 0
        self.window = spec.policy if isinstance(spec.policy, WindowPolicy) else None
        self.windowed = self.window is not None
        self.sink = self.window is not None and self.window.sinks > 0
        self.evicted_slots = 0  # tokens of live sequences the policy dropped
        self.evicted_total = 0  # every token the policy dropped over the run
        self.copied_slots = 0  # compaction copies not yet charged
        self.copied_total = 0
        self.held: dict[
            int, tuple[int, int]
        ] = {}  # id(seq) -> (tokens written, held per head) at its last step

    def kept(self, seq: Sequence) -> int:
        return self.held.get(id(seq), (0, seq.num_computed))[1]

    def attended(self, seq: Sequence, before: int, count: int) -> tuple[int, int]:
        """(tokens the step's attention reads, of which already cached before the step)."""
        if count == 1:  # snapkv reads its whole prompt, even the last token alone
            after = attended_tokens(self.spec, seq.prompt_len, before + 1)
            return after, after - 1
        kept = self.kept(seq)
        return kept + count, kept

    def _first_logical(self, length: int) -> int:
        """The first logical block a window still needs after `length` tokens (block 0 aside)."""
        held = held_tokens(self.spec, 0, length)  # windows do not depend on the prompt
        if held >= length or self.window is None:
            return 0
        return self.window.window_start(length, held) // self.block_size

    def blocks_needed(self, seq: Sequence, tokens: int) -> int:
        """New blocks the step bringing the sequence to `tokens` takes (before a decode step's
        window slides: an upper bound, as admission needs)."""
        size = self.block_size
        if self.spec.keeps_holes:
            return cdiv(tokens, size) - len(seq.block_table)
        if self.windowed:
            return (tokens - 1) // size - (seq.dropped_blocks + len(seq.block_table) - 1)
        if tokens - seq.num_computed <= 1:
            peak = attended_tokens(self.spec, seq.prompt_len, tokens)
        else:
            peak = self.kept(seq) + tokens - seq.num_computed
        return cdiv(peak, size) - len(seq.block_table)

    def reservation_tokens(self, seq: Sequence) -> int:
        """The most tokens the sequence holds at once: a whole prompt read in one chunk on top
        of what it keeps (a bound: chunks are usually smaller), or its final cache."""
        if self.spec.keeps_holes:
            return seq.final_len
        final = held_tokens(self.spec, seq.prompt_len, seq.final_len)
        return min(seq.final_len, max(final, seq.prompt_len) + self.block_size)

    def adopt(self, seq: Sequence, tokens: int) -> None:
        """A prefix-cache hit of `tokens` (sliding-window only): the sequence holds the window
        from its first adopted block on; the tokens before it count as dropped."""
        held = min(
            held_tokens(self.spec, seq.prompt_len, tokens),
            tokens - seq.dropped_blocks * self.block_size,
        )
        self.held[id(seq)] = (tokens, held)
        # Dropped as trim() and release() count them (the window's tokens), even when the hit
        # run holds one block-rounded token fewer: the three must add up to zero at release.
        dropped = tokens - used_tokens(self.spec, seq.prompt_len, tokens)
        self.evicted_slots += dropped
        self.evicted_total += dropped

    def grow(self, seq: Sequence, tokens: int, pool: BlockPool) -> bool:
        """Take the blocks the step bringing the sequence to `tokens` needs; False if short."""
        table = seq.block_table
        if self.windowed and tokens - seq.num_computed <= 1:
            self._slide(seq, tokens, pool)
        needed = self.blocks_needed(seq, tokens)
        if needed > pool.num_free:
            return False
        if needed > 0:
            table.extend(pool.allocate(needed))
        elif needed < 0:
            pool.free([table.pop() for _ in range(-needed)])
        seq.capacity = tokens
        return True

    def trim(self, seq: Sequence, pool: BlockPool) -> None:
        """After the step: prune to what the policy keeps and release the blocks that empties."""
        length = seq.num_computed
        written = self.held.get(id(seq), (0, 0))[0]
        held = held_tokens(self.spec, seq.prompt_len, length)
        # Token states per slot of every layer: entropy-budget's smaller layers hold fewer
        # than `held`, their unused tail slots being internal fragmentation.
        used, used_before = (used_tokens(self.spec, seq.prompt_len, n) for n in (length, written))
        newly = (length - used) - (written - used_before)
        self.evicted_slots += newly
        self.evicted_total += newly
        self.held[id(seq)] = (length, held)
        if self.windowed:
            self._slide(seq, length, pool)
            return
        if self.spec.keeps_holes:
            return
        copies = used_before + (length - written) - used  # each evicted token's hole is refilled
        self.copied_slots += copies
        self.copied_total += copies
        target = cdiv(held, self.block_size)
        while len(seq.block_table) > target:
            pool.free([seq.block_table.pop()])

    def _slide(self, seq: Sequence, length: int, pool: BlockPool) -> None:
        """Release the logical blocks the window has left (the sink block stays)."""
        first = self._first_logical(length)
        keep = 1 if self.sink else 0
        released = []
        while keep + seq.dropped_blocks < first and len(seq.block_table) > keep:
            released.append(seq.block_table.pop(keep))
            seq.dropped_blocks += 1
        # vLLM's remove_skipped_blocks frees the newest first, so the oldest (still cached
        # under prefix caching) is reclaimed last.
        pool.free(reversed(released))

    def table_tokens(self, seq: Sequence) -> int:
        """Tokens the block table spans in order: the kept tokens of a compacting policy;
        positions (the computed tokens) for windows and for holes left in place."""
        if self.windowed or self.spec.keeps_holes:
            return seq.num_computed
        return self.kept(seq)

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """A parallel sample starts from its parent's kept tokens: it has dropped what the
        parent dropped (counted once per live sequence, as release() takes it back)."""
        written, held = self.held.get(id(parent), (parent.num_computed, parent.num_computed))
        self.held[id(child)] = (written, held)
        self.evicted_slots += written - used_tokens(self.spec, parent.prompt_len, written)

    def take_copied_slots(self) -> int:
        copied, self.copied_slots = self.copied_slots, 0
        return copied

    def release(self, seq: Sequence) -> None:
        """The sequence is freed: its dropped tokens no longer count as evicted-while-live."""
        written, _ = self.held.pop(id(seq), (0, 0))
        self.evicted_slots -= written - used_tokens(self.spec, seq.prompt_len, written)
