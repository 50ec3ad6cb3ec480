"""Automatic prefix caching over a block pool (vLLM's hash-chained full blocks), with
optional offload tiers below the pool: a prefix the pool reclaimed is demoted to the CPU
tier (then disk), and a lookup that runs out of device hits continues there."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from itertools import takewhile
from operator import is_not

import numpy as np

from kvplan import cdiv
from kvplan.core.block_pool import BlockPool, as_blocks
from kvplan.core.hashing import block_hashes, with_generated_blocks
from kvplan.core.kv.base import PrefixLookup
from kvplan.core.kv.prefix_stats import PrefixStats
from kvplan.core.sequence import Sequence
from kvplan.core.tiers import Tier, TieredCache

_is_block = partial(is_not, None)  # a hash the pool holds maps to a block id, else None


class PrefixCache:
    def __init__(
        self,
        pool: BlockPool,
        block_size: int,
        tiers: TieredCache | None = None,
        recompute_s_per_token: float = 0.0,
        sliding_window: int | None = None,
        hash_generated: bool = False,
    ) -> None:
        self.pool = pool
        # vLLM V1 hashes every full block a request fills, its output's included
        # (kvplan.core.hashing.with_generated_blocks); otherwise only blocks whose tokens
        # identify a prefix are hashed
        self.hash_generated = hash_generated
        self.block_size = block_size
        # Sliding window (tokens a query attends to, itself included): a hit needs the blocks
        # holding the window's other sliding_window - 1 tokens (vLLM's SlidingWindowManager).
        self.window_blocks = cdiv(sliding_window - 1, block_size) if sliding_window else 0
        self.stats = PrefixStats()
        self.known_hashes: dict[
            int, list[int]
        ] = {}  # request id -> block hashes, computed once per run
        self.tiers = tiers
        self.recompute_s_per_token = recompute_s_per_token
        if tiers is not None:
            pool.on_evict = tiers.demote
        # The last lookup, reused while its blocks still hold its hashes: (sequence, its
        # hashes, limit, hit blocks, as an array, the hashes they held as an array)
        self._memo: tuple[Sequence, list[int], int, list[int], np.ndarray, np.ndarray] | None = None

    def hashes(self, seq: Sequence) -> list[int]:
        """The sequence's block hashes, computed on first use (known_hashes: once per run)."""
        if seq.hashes is None:
            request = seq.request
            hashes = self.known_hashes.get(request.request_id)
            if hashes is None:
                hashes = block_hashes(request, self.block_size)
            if self.hash_generated:
                hashes = with_generated_blocks(request, hashes, self.block_size)
            seq.hashes = hashes
        return seq.hashes

    def lookup(self, seq: Sequence) -> PrefixLookup:
        hashes = self.hashes(seq)
        # At least one token is computed, so a fully cached prompt recomputes its last block.
        limit = min((seq.known_tokens - 1) // self.block_size, len(hashes))
        if (
            self.window_blocks
        ):  # hashes may stop short of the limit (a preempted request's generated tokens)
            return self._window_lookup(hashes, limit)
        if self.tiers:
            hits = self._run(hashes, 0, limit)
            return PrefixLookup(
                hits, self._free_count(hits), self._tier_run(hashes[len(hits) : limit])
            )
        # A request that cannot be admitted is looked up again while it waits. Its last run
        # stays valid while each of its blocks still holds the hash it held (a hash leaves the
        # pool only by eviction), and can only grow where it stopped (a hash joins the pool
        # only where it was missing): so reuse it, and look further from its end.
        memo = self._memo
        if (
            memo is not None
            and memo[0] is seq
            and memo[1] is hashes
            and memo[2] == limit
            and not np.count_nonzero(self.pool.block_hashes[memo[4]] != memo[5])
        ):
            hits = memo[3]
            if len(hits) < limit and hashes[len(hits)] in self.pool.hash_to_block:
                hits = hits + self._run(hashes, len(hits), limit)
                memo = self._remember(seq, hashes, limit, hits)
        else:
            memo = self._remember(seq, hashes, limit, self._run(hashes, 0, limit))
        return PrefixLookup(memo[3], self._free_count(memo[4]), [])

    def next_hash(self, seq: Sequence, hits: PrefixLookup) -> int | None:
        """The hash of the block after this lookup's hit, if the hit could reach it."""
        hashes = seq.hashes or []
        found = hits.skipped + len(hits.blocks) + len(hits.tier_run)
        limit = min((seq.known_tokens - 1) // self.block_size, len(hashes))
        return hashes[found] if found < limit else None

    def _remember(
        self, seq: Sequence, hashes: list[int], limit: int, hits: list[int]
    ) -> tuple[Sequence, list[int], int, list[int], np.ndarray, np.ndarray]:
        held = np.fromiter(hashes, dtype=np.int64, count=len(hits))
        self._memo = (seq, hashes, limit, hits, as_blocks(hits), held)
        return self._memo

    def _run(self, hashes: list[int], start: int, limit: int) -> list[int]:
        """The blocks of hashes[start:limit] the pool holds, up to the first it does not."""
        found: Callable[[int], int | None] = self.pool.hash_to_block.get
        return list(takewhile(_is_block, map(found, hashes[start:limit])))  # type: ignore[arg-type]

    def _free_count(self, hits: list[int] | np.ndarray) -> int:
        """Hit blocks in the free queue: adopting them takes them out of it."""
        return len(hits) - int(np.count_nonzero(self.pool.ref_counts[as_blocks(hits)]))

    def _window_lookup(self, hashes: list[int], limit: int) -> PrefixLookup:
        """vLLM's sliding-window hit: scanning leftwards from the limit, the first run of
        `window_blocks` contiguous cached blocks ends the hit, and the blocks before the run
        are skipped (no query after the hit reads them), whether cached or not. Without such a
        run, the run from block 0 is the hit, however short (nothing precedes it)."""
        found = self.pool.hash_to_block
        need, run, start = self.window_blocks, 0, 0
        for index in range(limit - 1, -1, -1):
            if hashes[index] not in found:
                run = 0
                continue
            run += 1
            if run == need:
                start = index
                break
        blocks = [found[block_hash] for block_hash in hashes[start : start + run]]
        return PrefixLookup(blocks, self._free_count(blocks), [], skipped=start)

    def _tier_run(self, hashes: list[int]) -> list[tuple[int, Tier]]:
        """The prefix continues in the CPU / disk tiers: reload it if moving the blocks costs
        less than recomputing their tokens, else recompute (the run is not used)."""
        tiers = self.tiers
        assert tiers is not None
        run = []
        for block_hash in hashes:
            tier = tiers.find(block_hash)
            if tier is None:
                break
            run.append((block_hash, tier))
        if not run:
            return []
        reload_s = sum(tiers.block_bytes / tier.bandwidth for _, tier in run)
        if reload_s > len(run) * self.block_size * self.recompute_s_per_token:
            tiers.recomputes += 1
            return []
        tiers.reloads += 1
        return run

    def hit_tokens(self, hits: PrefixLookup) -> int:
        """Tokens the lookup serves: device hits plus the lower-tier run it will reload."""
        return (hits.skipped + len(hits.blocks) + len(hits.tier_run)) * self.block_size

    def take_transfer_s(self) -> float:
        if self.tiers is None:
            return 0.0
        seconds, self.tiers.unbilled_s = self.tiers.unbilled_s, 0.0
        return seconds

    def adopt(self, seq: Sequence, hits: PrefixLookup) -> int:
        """Take the hits as the head of the block table; returns the tokens they serve
        (lower-tier blocks that cannot be read back are left to recompute)."""
        block_size, pool, tiers = self.block_size, self.pool, self.tiers
        payloads, readmitted = [], seq.preemptions > 0
        for block_hash, tier in hits.tier_run:  # leave the tiers before any demotion below
            payload = tiers.promote(block_hash, tier, block_size, readmitted)  # type: ignore[union-attr]
            if payload is None:
                break
            payloads.append((block_hash, payload))
        queried, device_tokens = seq.known_tokens, (hits.skipped + len(hits.blocks)) * block_size
        hit_tokens = device_tokens + len(payloads) * block_size  # tier hits are counted per tier
        if readmitted:
            self.stats.preempted_queries += queried
            self.stats.preempted_hits += device_tokens
        else:
            self.stats.queries += queried
            self.stats.hits += device_tokens
        pool.touch_all(hits.blocks)
        seq.block_table = list(hits.blocks)
        if payloads:  # promote: fresh device blocks, filled over the host link / from disk
            promoted = pool.allocate(len(payloads))
            for block, (block_hash, payload) in zip(promoted, payloads):
                tiers.restore(block, payload)  # type: ignore[union-attr]
                pool.cache(block, block_hash)
            seq.block_table += promoted
        seq.dropped_blocks = (
            hits.skipped
        )  # the window's null blocks: table[i] holds logical block i + skipped
        seq.capacity = (hits.skipped + len(seq.block_table)) * block_size
        seq.cached_blocks = hits.skipped + len(seq.block_table)
        seq.hit_tokens += hit_tokens
        return hit_tokens

    def cache_full_blocks(self, seq: Sequence, tokens: int | None = None) -> None:
        """Cache the blocks full at `tokens` tokens (default: the tokens computed so far)."""
        # a sequence that never looked up (a transferred prefill) caches nothing under
        # kvplan's own rules; vLLM V1 caches every block a request fills
        hashes = seq.hashes
        if hashes is None:
            hashes = self.hashes(seq) if self.hash_generated else []
        computed = seq.num_computed if tokens is None else tokens
        full = min(computed // self.block_size, len(hashes))
        # A sliding window's table starts at logical block `dropped` (0 without a window).
        dropped = seq.dropped_blocks
        start = max(seq.cached_blocks, dropped)
        if start + 1 == full:  # a decode filling its block: the scalar path, no arrays
            self.pool.cache(seq.block_table[start - dropped], hashes[start])
        elif start < full:
            self.pool.cache_all(
                seq.block_table[start - dropped : full - dropped], hashes[start:full]
            )
        seq.cached_blocks = max(seq.cached_blocks, full)

    def cached_prefix_blocks(self, hashes: list[int]) -> int:
        """How many of these leading blocks the pool holds (a router's view of this engine)."""
        return len(self._run(hashes, 0, len(hashes)))
