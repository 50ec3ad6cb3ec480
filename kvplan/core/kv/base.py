"""The interface every KV allocator implements, and what a prefix lookup hands back.

All allocators account in slots (one token's KV in every layer). Optional features are
declared here with their "absent" value, so callers read one attribute instead of probing
the concrete class: `pool`, `prefix_stats`, `fork_stats`, `tiers` and `retained_cap` are
None where an allocator lacks the feature; `reserves_ahead` and `fragments_externally` say
how its reserved and free slots split (core/metrics.py pool_split).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvplan.core.sequence import Sequence

if TYPE_CHECKING:
    from kvplan.core.block_pool import BlockPool
    from kvplan.core.kv.fork import ForkStats
    from kvplan.core.kv.prefix_stats import PrefixStats
    from kvplan.core.tiers import Tier, TieredCache


@dataclass(frozen=True, slots=True)
class PrefixLookup:
    """What a prefix-cache lookup found for a sequence about to be admitted. The scheduler
    passes it to can_admit, hit_tokens and adopt, so nothing is left on the allocator."""

    blocks: list[int]  # device blocks holding the longest cached prefix, in order
    free_cached: int  # of those, blocks no sequence holds (adopting takes them off the free queue)
    tier_run: list[tuple[int, Tier]]  # (hash, tier) of the lower-tier blocks to reload after them
    # Sliding window: leading blocks the hit covers without holding them (vLLM's null
    # blocks), as the window has no use for them; `blocks` follow them.
    skipped: int = 0


NO_HITS = PrefixLookup([], 0, [])


class Allocator(ABC):
    """`allocate(seq, tokens)` makes room for the sequence to hold `tokens` tokens of KV and
    keeps `seq.capacity` (slots held) current, so callers can skip the call when it fits."""

    name: str
    capacity_slots: int
    reserved_slots: int
    block_size: int  # slots per allocation unit (1 for slot-granular extents)
    prefix_caching = False
    # Optional pieces (None: the allocator does not have it).
    pool: BlockPool | None = None
    prefix_stats: PrefixStats | None = None
    fork_stats: ForkStats | None = None
    tiers: TieredCache | None = None
    retained_cap: int | None = None  # an eviction policy's token budget (None: no policy)
    trims = False  # True: call trim(seq) after each step (an eviction policy prunes)
    # How the pool splits (docs/metrics.md): slots held for tokens not generated yet, and free
    # space cut into extents that a waiting request may be too large for.
    reserves_ahead = False
    fragments_externally = False

    @abstractmethod
    def can_admit(
        self, seq: Sequence, tokens: int, hits: PrefixLookup = NO_HITS, watermark: bool = True
    ) -> bool:
        """Whether the sequence, with these hits, can hold `tokens` tokens now; `watermark`:
        whether the allocator's watermark of free blocks is kept (vLLM keeps it only while a
        request runs)."""

    def lookup(self, seq: Sequence) -> PrefixLookup:
        """Cached blocks holding the longest prefix of a sequence about to be admitted."""
        return NO_HITS

    def hit_tokens(self, hits: PrefixLookup) -> int:
        """Tokens a lookup's hits would serve if adopted."""
        return 0

    def adopt(self, seq: Sequence, hits: PrefixLookup) -> int:
        """Take references to prefix-cache hits (the head of the block table); returns the
        tokens they serve."""
        return 0

    def take_transfer_s(self) -> float:
        """Offload transfer time since the last call (charged to the current step)."""
        return 0.0

    def cache_full_blocks(self, seq: Sequence, tokens: int | None = None) -> None:
        """Register the sequence's blocks full at `tokens` tokens (default: those computed)
        in the prefix cache."""

    def use_known_hashes(self, hashes: dict[int, list[int]]) -> None:
        """Block hashes computed once per run (request id -> hashes), so lookups skip hashing."""

    def cached_prefix_blocks(self, hashes: list[int]) -> int:
        """How many leading blocks of a prefix (given by its block hashes) the cache holds."""
        return 0

    def attended(self, seq: Sequence, before: int, count: int) -> tuple[int, int]:
        """(tokens a step of `count` new tokens reads, of which cached before it)."""
        return before + count, before

    def trim(self, seq: Sequence) -> None:
        """After a step: an eviction policy prunes the sequence and releases blocks."""

    def fork(self, parent: Sequence, child: Sequence) -> bool:
        """Share the parent's blocks with a parallel sample (copy-on-write)."""
        return False

    @property
    def evicted_slots(self) -> int:
        """Tokens of live sequences an eviction budget dropped (part of shared_slots)."""
        return 0

    @property
    def evicted_tokens_total(self) -> int:
        """Every token an eviction budget dropped so far."""
        return 0

    @property
    def shared_slots(self) -> int:
        """Slots in the per-sequence token sum that hold no distinct KV: shared blocks beyond
        their first holder, and tokens an eviction budget dropped."""
        return 0

    @property
    def cached_free_slots(self) -> int:
        return 0

    @property
    def admission_epoch(self) -> int | None:
        """A count that moves whenever a sequence this allocator refused could now be admitted
        at the same or a smaller token count, but for a longer prefix hit (next_hit_hash);
        None: not known, so a refused sequence is asked about again every step."""
        return None

    def next_hit_hash(self, seq: Sequence, hits: PrefixLookup) -> int | None:
        """The block hash whose caching would lengthen this lookup's hit (None: it cannot
        grow): while it stays uncached and the epoch stands, a refusal stands."""
        return None

    def holds_hash(self, block_hash: int) -> bool:
        """Whether the prefix cache holds a block with this hash."""
        return False

    @abstractmethod
    def allocate(self, seq: Sequence, tokens: int) -> bool: ...

    @abstractmethod
    def free(self, seq: Sequence) -> None: ...

    @abstractmethod
    def reservation_size(self, seq: Sequence) -> int:
        """Slots the sequence will hold at most (what must fit in an empty pool)."""

    def planned_slots(self, seq: Sequence) -> int:
        """Slots a running sequence is entitled to: its final length within its reservation."""
        return min(seq.final_len, self.reservation_size(seq))

    def external_fragmentation(self, smallest_need: int) -> int:
        return 0

    @property
    def admissible_slots(self) -> int:
        """The largest reservation an idle pool can admit (arrivals above it are rejected)."""
        return self.capacity_slots

    @property
    def usage(self) -> float:
        return self.reserved_slots / self.capacity_slots
